"""Every flag of every script has a help line and both spellings, `--source-lang` and `--source_lang`; the
quickstart names its recipes."""

import argparse
import runpy
import subprocess
import sys

import pytest
from conftest import SCRIPTS

# Modules named _* beside the scripts are what scripts import, not scripts.
SCRIPT_FILES = sorted(path for path in SCRIPTS.rglob("*.py") if not path.name.startswith("_"))


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


@pytest.mark.parametrize("script", SCRIPT_FILES, ids=lambda path: path.name)
def test_every_flag_has_help_and_an_underscore_spelling(script, monkeypatch):
    parser = script_parser(script, monkeypatch)
    for action in parser._actions:
        if isinstance(action, argparse._HelpAction):
            continue
        assert action.help and action.help != argparse.SUPPRESS, (
            f"{script.name}: {action.option_strings or action.dest}"
        )
        for flag in action.option_strings:
            if flag.startswith("--") and "-" in flag[2:]:
                assert "--" + flag[2:].replace("-", "_") in action.option_strings, f"{script.name}: {flag}"


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
    }


def test_quickstart_refuses_an_unknown_recipe_before_installing_anything():
    finished = subprocess.run(
        ["bash", str(SCRIPTS / "quickstart.sh"), "de", "en", "fastest"],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert finished.returncode == 2
    assert "no recipe 'fastest'" in finished.stderr
    assert finished.stderr.split("the recipes are:")[1].split() == ["base", "best", "small"]
    assert "pip" not in finished.stdout + finished.stderr
