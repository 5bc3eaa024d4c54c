"""A missing optional dependency is one line naming the pip extra that installs it, never a traceback: from
the library (MissingExtra), from each script that needs one (`error:` and exit status 2), and from training,
which goes on without TensorBoard."""

import logging
import sys

import pytest
from conftest import DE_EN, run_script, tiny_config

from hf_vanilla.cli import MISSING_EXTRA_STATUS
from hf_vanilla.extras import MissingExtra, require
from hf_vanilla.training.train import train

# Each optional module and the extra of pyproject.toml that installs it.
EXTRAS = {
    "matplotlib": "plot",
    "tensorboard": "tensorboard",
    "ctranslate2": "ct2",
    "sacremoses": "tokenized",
    "fastapi": "serve",
    "uvicorn": "serve",
}


def missing(monkeypatch, module: str) -> str:
    """`module` made unimportable, as where it is not installed; the line a script then ends with."""
    monkeypatch.setitem(sys.modules, module, None)
    return f"error: {module} is not installed: pip install 'hf_vanilla[{EXTRAS[module]}]'"


def assert_one_line(completed, line: str) -> None:
    assert completed.returncode == MISSING_EXTRA_STATUS, completed.stderr
    assert completed.stderr.strip().splitlines()[-1] == line
    assert "Traceback" not in completed.stderr


@pytest.mark.parametrize("module", EXTRAS)
def test_a_missing_module_names_the_extra_that_installs_it(module, monkeypatch):
    line = missing(monkeypatch, module)
    with pytest.raises(MissingExtra) as raised:
        require(module, extra=EXTRAS[module])
    assert f"error: {raised.value}" == line
    assert isinstance(raised.value, ImportError)  # what callers of the library caught before


def test_an_installed_module_is_returned():
    assert require("json", extra="none") is sys.modules["json"]


def test_plot_training_without_matplotlib(monkeypatch, tmp_path):
    line = missing(monkeypatch, "matplotlib")
    assert_one_line(run_script("tools/plot_training.py", tmp_path), line)


def test_plot_attention_without_matplotlib(monkeypatch, tiny_model_dir, tmp_path):
    line = missing(monkeypatch, "matplotlib")
    completed = run_script(
        "tools/plot_attention.py", tiny_model_dir, "--source", "Ein Hund.", "--output-dir", tmp_path / "plots"
    )
    assert_one_line(completed, line)


def test_the_ctranslate2_engine_without_ctranslate2(monkeypatch, tiny_model_dir, tmp_path):
    line = missing(monkeypatch, "ctranslate2")
    flags = ("--engine", "ctranslate2", "--ctranslate2-dir", tmp_path)
    assert_one_line(run_script("translate.py", tiny_model_dir, "--quiet", *flags, stdin="Ein Hund.\n"), line)


def test_export_without_ctranslate2_stops_before_exporting(monkeypatch, tiny_model_dir, tmp_path):
    line = missing(monkeypatch, "ctranslate2")
    flags = ("--ctranslate2-output-dir", tmp_path / "ct2")
    assert_one_line(run_script("tools/export_marian.py", tiny_model_dir, tmp_path / "marian", *flags), line)
    assert not (tmp_path / "marian").exists()


def test_tokenized_bleu_without_sacremoses(monkeypatch, tiny_model_dir, corpus_path, tmp_path):
    line = missing(monkeypatch, "sacremoses")
    data = ("--dataset", corpus_path, *DE_EN, "--first-pairs", "2", "--output-dir", tmp_path)
    assert_one_line(run_script("evaluate_bleu.py", tiny_model_dir, *data, "--tokenized-bleu"), line)


@pytest.mark.parametrize("module", ["fastapi", "uvicorn"])
def test_serve_without_its_extra(module, monkeypatch, tiny_model_dir):
    line = missing(monkeypatch, module)
    assert_one_line(run_script("serve.py", tiny_model_dir), line)


def test_training_without_tensorboard_warns_in_one_line_and_goes_on(
    monkeypatch, tiny_dataset, tokenizer_dir, tmp_path, caplog
):
    missing(monkeypatch, "tensorboard")
    with caplog.at_level(logging.WARNING):
        train(tiny_config(tiny_dataset, tokenizer_dir, tmp_path, tensorboard=True, max_steps=2))
    install = "pip install 'hf_vanilla[tensorboard]'"
    assert f"TensorBoard logging is off (tensorboard is not installed: {install})" in caplog.text
    assert (tmp_path / "checkpoint_last").is_dir() and not (tmp_path / "tensorboard").exists()
