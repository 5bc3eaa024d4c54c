"""Every script builds its flags from cli.py's groups, shows them in --help, and redefines none of them; every
flag has a help line and both spellings, `--source-lang` and `--source_lang`; training flags override the
config file; every script logs in one format at the level it is given; the quickstart names its recipes."""

import argparse
import dataclasses
import json
import re
import runpy
import subprocess
import sys

import pytest
from conftest import DE_EN, REPO, SCRIPTS, run_script
from transformers import GenerationConfig

from hf_vanilla import cli
from hf_vanilla.cli import ArgumentParser, training_config
from hf_vanilla.model.decoding import FROM_CALLER, FROM_CHECKPOINT, FROM_PAPER, resolve_decoding
from hf_vanilla.research.cli import add_research_arguments
from hf_vanilla.training.settings import SETTING_GROUPS, TrainingConfig, setting

# The scripts and the package's one entry point with a parser of its own.
# Modules named _* beside the scripts are what scripts import, not scripts.
SCRIPT_FILES = [
    *sorted(p for p in SCRIPTS.rglob("*.py") if not p.name.startswith("_")),
    REPO / "hf_vanilla" / "tools" / "gpu_report.py",
]
GROUPS = {name: getattr(cli, name) for name in dir(cli) if re.fullmatch(r"add_\w+_arguments?", name)}
GROUPS["add_research_arguments"] = add_research_arguments
# Flags a script defines for what a group's flag means elsewhere, on purpose.
OWN_FLAGS = {
    "run_tries.py": {"--dataset"},  # handed on to each try's train.py, one for every try
    "benchmark_data.py": {"--max-tokens"},  # the training config's max_tokens, several values to time
    # the runtime group's meanings, for what these benchmarks build and start themselves
    "benchmark.py": {"--threads", "--engine", "--compute-type"},
    "benchmark_corpus_translation.py": {"--threads"},
    "benchmark_serving.py": {"--engine", "--compute-type", "--inter-threads"},
    "benchmark_student.py": {"--compute-type", "--threads"},
}


class Captured(Exception):
    pass


def script_parser(script, monkeypatch) -> argparse.ArgumentParser:
    def capture(parser, *args, **kwargs):
        raise Captured(parser)

    monkeypatch.setattr(argparse.ArgumentParser, "parse_args", capture)
    monkeypatch.setattr(sys, "argv", [str(script)])
    with pytest.raises(Captured) as captured:
        runpy.run_path(str(script), run_name="__main__")
    return captured.value.args[0]


def option_helps(parser: argparse.ArgumentParser) -> dict[str, str]:
    """Each option of `parser`'s --help (its long spelling) and its help text without the default."""
    entries = re.split(r"\n  (?=-)", parser.format_help().split("\n\n", 1)[1])[1:]
    helps = {}
    for entry in entries:
        flags, _, text = re.split(r"\n\n", entry)[0].partition("  ")
        spellings = re.findall(r"(?:^|, )(-[\w-]+)", flags)
        long_spelling = next((flag for flag in spellings if flag.startswith("--")), spellings[0])
        helps[long_spelling] = re.sub(r"\(default: [^)]*\)", "", " ".join(text.split())).strip()
    return helps


@pytest.mark.parametrize("script", SCRIPT_FILES, ids=lambda path: path.name)
def test_every_flag_has_a_help_line(script, monkeypatch):
    helps = option_helps(script_parser(script, monkeypatch))
    assert "--help" in helps
    assert [flag for flag, text in helps.items() if not text] == [], script.name


@pytest.mark.parametrize("script", ["translate.py", "evaluate_bleu.py"])
def test_decoding_flags_are_not_given_by_default_and_say_where_the_value_then_comes_from(script, monkeypatch):
    parser = script_parser(SCRIPTS / script, monkeypatch)
    args, _ = parser.parse_known_args(["model", *DE_EN])  # parse_args is captured here
    assert (args.num_beams, args.length_penalty, args.max_new_tokens) == (None, None, None)
    shown = " ".join(parser.format_help().split())
    assert "(default: the checkpoint's generation_config.json, else the paper's 4)" in shown
    assert "(default: None)" not in shown.split("--num-beams", 1)[1].split("--skip-long-lines", 1)[0]


@pytest.mark.parametrize(
    "flags, chosen, sources",
    [
        (["--num-beams", "3"], (3, 1.0, None), (FROM_CALLER, FROM_CHECKPOINT, FROM_PAPER)),
        (
            ["--length-penalty", "0.8", "--max-new-tokens", "7"],
            (2, 0.8, 7),
            (FROM_CHECKPOINT, FROM_CALLER, FROM_CALLER),
        ),
        (["--sampling"], (1, None, None), (FROM_CALLER, None, FROM_PAPER)),
    ],
)
def test_a_flag_beats_the_checkpoint_which_beats_the_paper_and_each_value_says_where_it_came_from(
    flags, chosen, sources, monkeypatch, tmp_path
):
    parser = script_parser(SCRIPTS / "translate.py", monkeypatch)
    args, _ = parser.parse_known_args(["model", *flags])
    (tmp_path / "generation_config.json").write_text(json.dumps({"num_beams": 2, "length_penalty": 1.0}))
    options, found = resolve_decoding(GenerationConfig.from_pretrained(tmp_path), cli.decoding_options(args))
    names = ("num_beams", "length_penalty", "max_new_tokens")
    assert tuple(getattr(options, name) for name in names) == chosen
    assert tuple(found.get(name) for name in names) == sources


def sections(parser: argparse.ArgumentParser) -> set[str]:
    """The titles of `parser`'s --help sections."""
    return {line[:-1] for line in parser.format_help().splitlines() if re.fullmatch(r"\S.*:", line)}


def flags_of(add_group) -> set[str]:
    """The long flags a group function of cli.py adds."""
    parser = ArgumentParser(add_help=False)
    add_group(parser)
    return set(option_helps(parser))


@pytest.mark.parametrize("script", SCRIPT_FILES, ids=lambda path: path.name)
def test_every_script_shows_the_groups_it_adds_and_redefines_none_of_their_flags(script, monkeypatch):
    parser = script_parser(script, monkeypatch)
    source = script.read_text()
    for name in set(re.findall(r"\b(add_\w+_arguments?)\(parser\b", source)) & set(GROUPS):
        group_parser = ArgumentParser(add_help=False)
        GROUPS[name](group_parser)
        shown = sections(group_parser)
        # some scripts take only the settings they use (prepare_data.py)
        if name == "add_training_config_arguments":
            shown = {title for title in shown if title.startswith("training config")}
        assert shown <= sections(parser), f"{script.name}: {name}"
    # The training config's keys and the corpus' --input/--output/--seed are words other tools use for their
    # own files and seeds; the flags of the other groups each mean one thing wherever they appear.
    own_words = ("add_training_config_arguments", "add_corpus_arguments")
    shared = [add for name, add in GROUPS.items() if name not in own_words]
    owned = set().union(*(flags_of(add_group) for add_group in shared))
    defined_here = set(re.findall(r"add_argument\(\s*\"(--[\w-]+)\"", source))
    redefined = defined_here & owned
    assert redefined <= OWN_FLAGS.get(script.name, set()), f"{script.name} redefines flags of cli.py"


@pytest.mark.parametrize("script", SCRIPT_FILES, ids=lambda path: path.name)
def test_every_script_takes_a_log_level_and_configures_logging_with_it(script, monkeypatch):
    assert "--log-level" in option_helps(script_parser(script, monkeypatch))
    source = script.read_text()
    assert "configure_logging(args.log_level)" in source and "basicConfig" not in source


def test_log_lines_show_info_by_default_in_one_format_and_only_warnings_when_told(corpus_path, tmp_path):
    flags = ("--dataset", corpus_path, *DE_EN, "--vocab-size", "300", "--output-dir", tmp_path / "bpe")
    by_default = run_script("train_tokenizer.py", *flags, check=True).stderr
    line = r"\d{4}-\d\d-\d\d [\d:,]+ INFO hf_vanilla\.data\.tokenization: BPE: words counted"
    assert re.search(line, by_default), by_default[-2000:]
    quiet = run_script("train_tokenizer.py", *flags, "--log-level", "warning", check=True).stderr
    assert "INFO" not in quiet and "BPE: words counted" not in quiet


def test_underscores_in_a_flag_read_as_dashes_up_to_a_double_dash():
    parser = ArgumentParser()
    parser.add_argument("--source-lang")
    parser.add_argument("--max-new-tokens", type=int)
    parser.add_argument("rest", nargs="*")
    parsed = parser.parse_args(["--source_lang", "de_DE", "--max_new_tokens=3", "--", "--keep_this"])
    assert vars(parsed) == {"source_lang": "de_DE", "max_new_tokens": 3, "rest": ["--keep_this"]}


def test_train_flags_override_the_config_file_in_either_spelling(monkeypatch, tmp_path):
    parser = script_parser(SCRIPTS / "train.py", monkeypatch)
    monkeypatch.undo()
    parsed = vars(
        parser.parse_args(
            ["--source_lang", "en", "--target-lang", "de", "--max_steps", "3", "--no-tensorboard"]
        )
    )
    assert parsed == {
        "source_lang": "en",
        "target_lang": "de",
        "max_steps": 3,
        "tensorboard": False,
        "config": None,
        "resume": False,
        "overwrite_output_dir": False,
        "log_level": "info",
    }
    config_file = tmp_path / "config.yaml"
    config_file.write_text("right_to_left: true\ndropout: 0.3\n")
    choices = ((["--right-to-left"], True), (["--right_to_left", "false"], False), ([], True))
    for flags, right_to_left in choices:
        config = training_config(parser.parse_args(["--config", str(config_file), *flags]))
        assert (config.right_to_left, config.dropout) == (right_to_left, 0.3)


def test_quickstart_refuses_an_unknown_recipe_before_installing_anything():
    finished = subprocess.run(
        ["bash", str(SCRIPTS / "quickstart.sh"), "de", "en", "fastest"],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert finished.returncode == 2
    assert "no recipe 'fastest'" in finished.stderr
    assert finished.stderr.split("the recipes are:")[1].split() == ["base", "best", "small", "smoke"]
    assert "pip" not in finished.stdout + finished.stderr


def test_every_training_setting_has_a_group_and_train_help_shows_its_flag_in_that_section(monkeypatch):
    ungrouped = [
        field.name
        for field in dataclasses.fields(TrainingConfig)
        if field.metadata.get("group") not in SETTING_GROUPS
    ]
    assert ungrouped == []
    help_text = script_parser(SCRIPTS / "train.py", monkeypatch).format_help()
    section_texts = dict(re.findall(r"^(\S[^\n]*):\n(.*?)(?=^\S|\Z)", help_text, re.M | re.S))
    for field in dataclasses.fields(TrainingConfig):
        flag = "--" + field.name.replace("_", "-")
        assert re.search(rf"^  {flag}\b(?!-)", section_texts[field.metadata["group"]], re.M), field.name


def test_a_setting_outside_the_groups_is_refused_where_it_is_defined():
    with pytest.raises(ValueError, match="setting group 'speed' is not one of"):
        setting(1, "a knob", group="speed")
