"""The tries runner: tries side by side, each chosen on validation, every one listed; bad tries refused up
front."""

import dataclasses
import json
import shutil
import signal
import subprocess
import sys
import time

import pytest
import yaml
from conftest import REPO, SCRIPTS, tiny_config

from hf_vanilla.research.tries import (
    TRIES_JSON,
    TRIES_TABLE,
    TriesError,
    Try,
    describe_machine,
    load_tries,
    run_tries,
    train_command,
    tries_table,
)
from hf_vanilla.tools.benchmark import environment
from hf_vanilla.training.run_directory import AVERAGE, LAST
from hf_vanilla.training.settings import load_training_config


@pytest.fixture
def tiny_config_file(tiny_dataset, tmp_path):
    """A tiny training config as a YAML file, naming a tokenizer that does not exist yet."""
    config = tiny_config(
        tiny_dataset, tmp_path / "bpe", tmp_path / "unused", max_steps=8, save_interval_updates=4
    )
    path = tmp_path / "tiny.yaml"
    path.write_text(yaml.safe_dump(dataclasses.asdict(config)))
    return path


def write_tries(path, **spec):
    path.write_text(yaml.safe_dump(spec, sort_keys=False))
    return path


@pytest.mark.slow  # several training runs side by side, end to end
def test_tries_run_side_by_side_and_every_one_is_listed(tiny_config_file, tmp_path):
    tries_file = write_tries(
        tmp_path / "tries.yaml",
        config=str(tiny_config_file),
        train="--max-steps 6 --average-last 2",
        select="--num-beams 1 --first-pairs 8",
        tries={"seed2": "--seed 2", "no-french": "--source-lang fr"},
    )
    rows = run_tries(tries_file, tmp_path / "out", SCRIPTS, parallel=2)

    by_name = {row["name"]: row for row in rows}
    trained = by_name["seed2"]
    assert trained["training_exit"] == 0 and trained["selection_exit"] == 0
    assert trained["updates"] == 6  # the common flag overrides the config's 8
    assert trained["chosen"]["num_beams"] == 1 and trained["chosen"]["model"].startswith("checkpoint_")
    selection = json.loads((tmp_path / "out/seed2/selection/selection.json").read_text())
    assert trained["chosen"]["bleu"] == selection["chosen"]["bleu"]
    assert selection["reports"] == {}  # tries are compared on validation; test is never decoded for them
    failed = by_name["no-french"]
    assert failed["training_exit"] != 0 and "fr" in failed["training_error"] and "chosen" not in failed
    # The tokenizer both tries name was trained once, before they started, not by each of them at once.
    assert (tmp_path / "bpe" / "tokenizer.json").exists()
    assert "No tokenizer at" not in (tmp_path / "out/logs/seed2.train.log").read_text()

    saved = json.loads((tmp_path / "out" / TRIES_JSON).read_text())
    assert [row["name"] for row in saved["tries"]] == ["seed2", "no-french"] and "cpu_model" in saved[
        "environment"
    ]
    table = (tmp_path / "out" / TRIES_TABLE).read_text().splitlines()
    assert table[0].startswith("Machine: ") and "torch" in table[0]
    assert table[4].startswith("| seed2 | `--seed 2` | finished | 6 |")  # ranked by validation BLEU
    assert table[5].startswith("| no-french | `--source-lang fr` | exit 1: ")

    # Given again, the finished run resumes, trains nothing more, and is listed as before.
    (again,) = [
        row for row in run_tries(tries_file, tmp_path / "out", SCRIPTS, parallel=2) if row["name"] == "seed2"
    ]
    assert again["training_exit"] == 0 and again["updates"] == 6 and again["chosen"] == trained["chosen"]
    assert "Resumed" in (tmp_path / "out/logs/seed2.train.log").read_text()
    select_log = tmp_path / "out/logs/seed2.select.log"
    # Its average was rewritten with the same weights: not decoded again.
    assert select_log.read_text().count(": kept") == 1

    # A finished run copied back from another machine without its training state is chosen as it is: neither
    # resumed (nothing to resume from) nor started afresh (which would delete its models).
    shutil.rmtree(tmp_path / "out/seed2" / LAST)
    (copied,) = [
        row for row in run_tries(tries_file, tmp_path / "out", SCRIPTS, parallel=2) if row["name"] == "seed2"
    ]
    assert copied["training_exit"] == 0 and copied["updates"] == 6 and copied["chosen"] == trained["chosen"]
    assert (
        "without its training state: chosen as saved" in (tmp_path / "out/logs/seed2.train.log").read_text()
    )
    assert (tmp_path / "out/seed2" / AVERAGE / "model.safetensors").exists()
    assert select_log.read_text().count(": kept") == 1  # one candidate fewer: chosen again

    # Other selection flags choose again; the same flags and weights keep the selection.
    write_tries(
        tries_file, **{**yaml.safe_load(tries_file.read_text()), "select": "--num-beams 2 --first-pairs 8"}
    )
    (beam2,) = run_tries(tries_file, tmp_path / "out", SCRIPTS, parallel=2, only=["seed2"])
    assert beam2["chosen"]["num_beams"] == 2 and select_log.read_text().count(": kept") == 1
    # The try not run this time is still listed, as the earlier call left it.
    saved = json.loads((tmp_path / "out" / TRIES_JSON).read_text())
    assert [row["name"] for row in saved["tries"]] == ["seed2", "no-french"]
    assert saved["tries"][1]["training_exit"] == failed["training_exit"]
    assert "| no-french | `--source-lang fr` | exit 1: " in (tmp_path / "out" / TRIES_TABLE).read_text()
    # A try whose traces were removed is no longer listed.
    (tmp_path / "out/logs/no-french.train.log").unlink()
    (kept,) = run_tries(tries_file, tmp_path / "out", SCRIPTS, parallel=2, only=["seed2"])
    assert kept["chosen"] == beam2["chosen"] and select_log.read_text().count(": kept") == 2
    assert [row["name"] for row in json.loads((tmp_path / "out" / TRIES_JSON).read_text())["tries"]] == [
        "seed2"
    ]


def test_train_command_resumes_a_saved_run_and_restarts_one_that_saved_nothing(tmp_path):
    run = tmp_path / "a"
    attempt = Try(
        "a", ("--seed", "2"), ("--config", "c.yaml", "--seed", "2"), load_training_config(output_dir=run)
    )
    assert train_command(SCRIPTS, attempt, run)[-4:] == ["--seed", "2", "--output-dir", str(run)]
    run.mkdir()
    (run / "train_log.jsonl").write_text("")
    assert train_command(SCRIPTS, attempt, run)[-1] == "--overwrite-output-dir"
    (run / AVERAGE).mkdir()  # a finished run, its training state left elsewhere
    assert train_command(SCRIPTS, attempt, run) is None
    (run / LAST).mkdir()
    assert train_command(SCRIPTS, attempt, run)[-1] == "--resume"


@pytest.mark.parametrize(
    ("spec", "message"),
    [
        ({"tries": {}}, "non-empty 'tries'"),
        ({"tries": {"a": "--seed 2"}, "trains": "--seed 1"}, "unknown keys ['trains']"),
        ({"tries": {"a b": "--seed 2"}}, "try name 'a b'"),
        ({"tries": {"a": "--output-dir elsewhere"}}, "try a sets --output-dir, which the tries runner sets"),
        ({"tries": {"a": "--seed 2"}, "select": "--source_lang en"}, "select sets --source-lang"),
        ({"tries": {"a": "--sede 2"}}, "try a: train.py has no flags ['--sede', '2']"),
        ({"tries": {"a": "--dropout much"}}, "try a: "),
        ({"tries": {"a": "--seed '2"}}, "try a: No closing quotation"),
        ({"tries": {"a": 2}}, "try a must be a string of flags"),
        ({"config": "no/such.yaml", "tries": {"a": "--seed 2"}}, "config no/such.yaml does not exist"),
    ],
)
def test_bad_tries_are_refused_before_any_runs(tmp_path, spec, message):
    tries_file = write_tries(tmp_path / "tries.yaml", **spec)
    with pytest.raises(TriesError) as refused:
        load_tries(tries_file)
    assert message in str(refused.value)


def test_only_some_tries_load_and_an_unknown_name_is_refused(tiny_config_file, tmp_path):
    tries_file = write_tries(
        tmp_path / "tries.yaml", config=str(tiny_config_file), tries={"a": "--seed 2", "b": "--seed 3"}
    )
    (chosen,), _ = load_tries(tries_file, only=["b"])
    assert chosen.name == "b" and chosen.config.seed == 3
    with pytest.raises(TriesError, match=r"has no tries \['c'\]; its tries: \['a', 'b'\]"):
        load_tries(tries_file, only=["b", "c"])


def test_the_table_names_the_machine_of_a_row_run_on_another():
    here = environment("cpu")
    elsewhere = {**here, "cpu_model": "Another CPU", "bf16_matmul_speedup": 0.9}
    row = {"name": "a", "own_arguments": ["--seed", "2"], "training_exit": 0}
    rows = [
        {**row, "machine": describe_machine({**here, "bf16_matmul_speedup": 0.1})},
        {**row, "machine": describe_machine(elsewhere)},
    ]
    here_line, elsewhere_line = tries_table(rows, here).splitlines()[4:]
    assert "| finished |" in here_line  # the same machine, its bf16 probe's pace aside
    assert "| finished (on CPU Another CPU (" in elsewhere_line


def test_a_try_whose_config_refuses_it_is_named(tiny_config_file, tmp_path):
    tries_file = write_tries(
        tmp_path / "tries.yaml",
        config=str(tiny_config_file),
        tries={"ok": None, "same-lang": "--target-lang de"},
    )
    with pytest.raises(TriesError, match="try same-lang: source_lang and target_lang are both 'de'"):
        load_tries(tries_file)


@pytest.mark.slow  # several training runs side by side, end to end
def test_a_stopped_runner_stops_every_run_with_a_save_and_lists_it(tiny_config_file, tmp_path):
    tries_file = write_tries(
        tmp_path / "tries.yaml",
        config=str(tiny_config_file),
        train="--max-steps 100000 --save-interval-updates 100000 --average-last null",
        tries={"long": None},
    )
    output = tmp_path / "out"
    runner = subprocess.Popen(
        [
            sys.executable,
            str(SCRIPTS / "research" / "run_tries.py"),
            str(tries_file),
            "--output-dir",
            str(output),
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    log = output / "long" / "train_log.jsonl"
    deadline = time.monotonic() + 120
    while not (log.exists() and log.read_text()) and time.monotonic() < deadline:
        time.sleep(0.5)
    runner.send_signal(signal.SIGTERM)  # to the runner alone: it passes the stop on
    _, stderr = runner.communicate(timeout=120)

    assert runner.returncode == 1 and "stopped: every run saved" in stderr
    assert (output / "long" / LAST).is_dir()  # the run's own stop saved it
    (row,) = json.loads((output / TRIES_JSON).read_text())["tries"]
    assert row["training_exit"] == 128 + signal.SIGTERM and row["updates"] > 0 and "selection_exit" not in row
    # The run's own last word, not the progress bar it drew after it.
    assert row["training_error"].startswith(f"stopped by SIGTERM after update {row['updates']}, saved in ")


@pytest.mark.parametrize(
    "tries_file", sorted((REPO / "docs" / "research" / "tries").glob("*.yaml")), ids=lambda path: path.name
)
def test_the_shipped_tries_files_are_valid(tries_file, monkeypatch):
    """The tries files in docs/ (the next GPU session's among them) load, every try's config checked."""
    monkeypatch.chdir(REPO)  # their config paths are relative to the repository
    tries, _ = load_tries(tries_file, dataset="any/dataset")
    assert tries and all(
        attempt.config.dataset == "any/dataset"
        for attempt in tries
        if "--dataset" not in attempt.own_arguments
    )


def test_a_tries_own_dataset_wins_over_the_runners_and_the_runners_minutes_over_the_tries(
    tiny_config_file, tmp_path
):
    tries_file = tmp_path / "tries.yaml"
    tries_file.write_text(
        f"config: {tiny_config_file}\ntries:\n  plain: --max-minutes 5\n  distilled: --dataset "
        "out/distilled\n"
    )
    plain, distilled = load_tries(tries_file, dataset="any/dataset", minutes=2)[0]
    assert (plain.config.dataset, plain.config.max_minutes) == ("any/dataset", 2)
    assert (distilled.config.dataset, distilled.config.max_minutes) == ("out/distilled", 2)
