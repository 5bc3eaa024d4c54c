"""`RUN/model`, the one stable name of a run's model to use: training leaves it as `checkpoint_best`,
selection repoints it at its choice, whole or not at all, and every tool opens it as it opens a checkpoint."""

import json
import os
import shutil
import time

import pytest
import torch
from conftest import DE_EN, run_script
from fastapi.testclient import TestClient
from huggingface_hub import ModelCard
from transformers import AutoModelForSeq2SeqLM, AutoTokenizer, GenerationConfig, pipeline

from hf_vanilla.checkpoints import run_model as run_model_module
from hf_vanilla.checkpoints.cards import RunRecord, model_card, save_card
from hf_vanilla.checkpoints.run_model import MODEL_NAME, publish_run_model
from hf_vanilla.evaluation.scoring import Runtime, TranslationData
from hf_vanilla.evaluation.selection import SelectionGrid, select_on_validation
from hf_vanilla.serving import create_app
from hf_vanilla.training.run_directory import run_traces
from hf_vanilla.translation.decoding import translate_sentences
from hf_vanilla.translation.engines import EngineSettings

QUIET = Runtime(show_progress=False)
QUIET_GRID = SelectionGrid(num_beams=[1, 2], report_splits=["test"])
SOURCES = ["Ein Hund rennt.", "Zwei Katzen schlafen auf dem Sofa."]


def model_files(directory):
    return {path.name: path.read_bytes() for path in directory.iterdir() if path.is_file()}


def test_training_leaves_the_model_to_use_as_its_best_checkpoint_hard_linked(trained_run):
    model, best = trained_run / MODEL_NAME, trained_run / "checkpoint_best"
    assert model_files(model) == model_files(best)
    assert os.path.samefile(model / "model.safetensors", best / "model.safetensors")  # no second copy
    assert MODEL_NAME in run_traces(trained_run)  # --overwrite-output-dir takes it away with the run


@pytest.fixture
def run_dir(tiny_model_dir, corpus_path, tmp_path):
    """A run whose best checkpoint is the tiny model and whose last one has other weights."""
    run = tmp_path / "run"
    for name in ("checkpoint_best", "checkpoint_last"):
        shutil.copytree(tiny_model_dir, run / name)
    last = AutoModelForSeq2SeqLM.from_pretrained(run / "checkpoint_last")
    with torch.no_grad():
        last.lm_head.weight.mul_(2)
    last.save_pretrained(run / "checkpoint_last")
    record = RunRecord("de", "en", corpus_path, "Trained.")
    save_card(model_card(last.config, GenerationConfig(num_beams=4), record), run / "checkpoint_last")
    publish_run_model(run / "checkpoint_best")
    return run


def test_selection_repoints_the_model_to_use_at_its_choice_with_its_decoding(run_dir, corpus_path, tmp_path):
    data = TranslationData(corpus_path, "de", "en", max_sentences=4)
    selection = select_on_validation([run_dir / "checkpoint_last"], data, tmp_path / "out", QUIET_GRID, QUIET)
    assert selection["run_model"] == str(run_dir / MODEL_NAME)
    assert model_files(run_dir / MODEL_NAME) == model_files(run_dir / "checkpoint_last")
    generation = json.loads((run_dir / MODEL_NAME / "generation_config.json").read_text())
    assert generation["num_beams"] == selection["chosen"]["num_beams"]
    card = ModelCard.load(run_dir / MODEL_NAME / "README.md")  # the card, with the test scores
    assert "test" in {result.dataset_split for result in card.data.eval_results}


def test_a_failed_reselection_leaves_the_old_model_whole_and_no_staging(run_dir, monkeypatch):
    before = model_files(run_dir / MODEL_NAME)

    def fail_midway(source, destination):
        if source.name == "model.safetensors":
            raise OSError("disk full")
        shutil.copy2(source, destination)

    monkeypatch.setattr(run_model_module, "_link_or_copy", fail_midway)
    with pytest.raises(OSError, match="disk full"):
        publish_run_model(run_dir / "checkpoint_last")
    assert model_files(run_dir / MODEL_NAME) == before
    assert sorted(path.name for path in run_dir.iterdir()) == ["checkpoint_best", "checkpoint_last", "model"]


def test_where_hard_links_fail_the_files_are_copied(run_dir, monkeypatch):
    def no_links(source, destination):
        raise OSError("operation not permitted")

    monkeypatch.setattr(run_model_module.os, "link", no_links)
    publish_run_model(run_dir / "checkpoint_last")
    model, last = run_dir / MODEL_NAME, run_dir / "checkpoint_last"
    assert model_files(model) == model_files(last)
    assert not os.path.samefile(model / "model.safetensors", last / "model.safetensors")


def test_every_tool_opens_the_model_to_use(run_dir, corpus_path, tmp_path):
    model_dir = run_dir / MODEL_NAME
    model = AutoModelForSeq2SeqLM.from_pretrained(model_dir)
    tokenizer = AutoTokenizer.from_pretrained(model_dir)
    expected = translate_sentences(model, tokenizer, SOURCES, batching=QUIET.batching, max_new_tokens=4)
    flags = ("--max-new-tokens", "4", "--device", "cpu", "--quiet")
    translated = run_script("translate.py", model_dir, *flags, stdin="\n".join(SOURCES) + "\n", check=True)
    assert translated.stdout.splitlines() == expected
    translator = pipeline("vanilla-translation", model=str(model_dir), device="cpu", max_new_tokens=4)
    assert [answer["translation_text"] for answer in translator(SOURCES)] == expected
    data = ("--dataset", corpus_path, *DE_EN, "--first-pairs", "4", "--device", "cpu")
    run_script("evaluate_bleu.py", model_dir, *data, "--output-dir", tmp_path / "bleu", check=True)
    assert (tmp_path / "bleu" / "test.de-en.json").is_file()
    with TestClient(create_app(model_dir, EngineSettings(device="cpu"))) as client:
        deadline = time.monotonic() + 60  # the service loads its model in the background
        while client.get("/ready").status_code != 200 and time.monotonic() < deadline:
            time.sleep(0.1)
        answer = client.post("/", json={"inputs": SOURCES[0]})
    assert answer.status_code == 200 and answer.json()[0]["translation_text"]
