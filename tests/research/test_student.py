"""The fast student, end to end on the tiny corpus in a few updates: the command distils, trains a student of
the teacher's sizes and vocabulary with one decoder layer, selects it and saves its shortlist; given again, it
makes nothing twice; the student decodes within its shortlist with --vocab-map; with --keep-original it
trains on the original pairs too."""

import json

import pytest
import yaml
from conftest import DE_EN, run_script

from hf_vanilla.checkpoints.loading import load_config, model_digest
from hf_vanilla.data.corpus import load_translation_split
from hf_vanilla.research.student import STAGES_FILE, STUDENT_FILE
from hf_vanilla.translation.engines import EngineSettings, load_engine
from hf_vanilla.translation.shortlist import VOCAB_MAP_FILE, load_shortlist

pytest.importorskip("ctranslate2")
TINY_TRAINING = {"max_steps": 4, "save_interval_updates": 2, "validation_bleu": False, "average_last": 2}


@pytest.fixture(scope="module")
def recipe_file(tmp_path_factory):
    """A tiny recipe (conftest's `tiny_config`) as a config file, as configs/student-multi30k.yaml is the real
    one; the data, tokenizer, shape and output are the command's."""
    recipe = {
        "model_preset": "tiny",
        "max_tokens": 256,
        "lr": 3e-3,
        "warmup": 10,
        "tensorboard": False,
        "mixed_precision": "no",
        **TINY_TRAINING,
    }
    path = tmp_path_factory.mktemp("recipe") / "student.yaml"
    path.write_text(yaml.safe_dump(recipe))
    return path


def make_student(teacher, dataset, output_dir, recipe_file, cache_dir, *flags):
    return run_script(
        "research/make_student.py", "--teacher", teacher, "--dataset", dataset, *DE_EN,
        "--output-dir", output_dir, "--config", recipe_file, "--num-beams", "1", "--max-new-tokens", "8",
        "--shortlist-top-k", "5", "--shortlist-frequent", "10", "--engine", "ctranslate2",
        "--ctranslate2-dir", cache_dir, "--quiet", "--log-level", "warning", *flags,
    )  # fmt: skip


@pytest.fixture(scope="module")
def made(tiny_model_dir, tiny_dataset, recipe_file, tmp_path_factory):
    output_dir, cache_dir = tmp_path_factory.mktemp("student") / "work", tmp_path_factory.mktemp("ct2")
    run = make_student(tiny_model_dir, tiny_dataset, output_dir, recipe_file, cache_dir)
    assert run.returncode == 0, run.stderr[-3000:]
    return output_dir, cache_dir, run


def test_the_student_has_the_teachers_sizes_and_vocabulary_and_one_decoder_layer(made, tiny_model_dir):
    output_dir, _, run = made
    student, teacher = load_config(output_dir / "student"), load_config(tiny_model_dir)
    sizes = ("d_model", "d_ff", "num_attention_heads", "vocab_size", "encoder_layers")
    assert [getattr(student, size) for size in sizes] == [getattr(teacher, size) for size in sizes]
    assert student.decoder_layers == 1
    record = json.loads((output_dir / "student" / STUDENT_FILE).read_text())
    assert json.loads(run.stdout[run.stdout.index("{\n") :]) == record  # after the run's progress lines
    assert record["teacher_digest"] == model_digest(tiny_model_dir) and "departure" in record
    assert record["shortlist"] == {"file": VOCAB_MAP_FILE, "top_k": 5, "frequent": 10}
    selection = json.loads((output_dir / "selection" / "selection.json").read_text())
    assert {row["length_penalty"] for row in selection["validation"]} == {0.6, 1.0}  # the teacher's choices
    card = (output_dir / "student" / "README.md").read_text()
    assert "## Departures from the paper\n\nA student distilled from its teacher's" in card
    stages = json.loads((output_dir / STAGES_FILE).read_text())
    assert sorted(stages) == ["distilled", "run", "selection", "student"]


def test_given_again_the_command_makes_nothing_twice(made, tiny_model_dir, tiny_dataset, recipe_file):
    output_dir, cache_dir, _ = made
    before = {path: path.stat().st_mtime_ns for path in output_dir.rglob("*") if path.is_file()}
    again = make_student(tiny_model_dir, tiny_dataset, output_dir, recipe_file, cache_dir)
    assert again.returncode == 0, again.stderr[-3000:]
    assert {path: path.stat().st_mtime_ns for path in output_dir.rglob("*") if path.is_file()} == before


def test_the_student_decodes_within_its_shortlist(made, tiny_dataset):
    output_dir, cache_dir, _ = made
    student = output_dir / "student"
    shortlist = load_shortlist(student / VOCAB_MAP_FILE)
    assert len(shortlist.frequent) == 10 and shortlist.by_source
    settings = EngineSettings("ctranslate2", "cpu", ctranslate2_dir=cache_dir, vocab_map=True)
    engine = load_engine(student, settings)
    for source_ids in engine.encode(["Ein Hund kauft einen roten Hut.", "Eine Frau malt."]):
        [output] = engine.translate_encoded([source_ids])
        allowed = shortlist.allowed(engine.tokens[index] for index in source_ids)
        assert {engine.tokens[index] for index in output} <= allowed


def test_with_keep_original_the_student_trains_on_the_original_pairs_and_the_teachers(
    made, tiny_model_dir, tiny_dataset, recipe_file, tmp_path
):
    _, cache_dir, _ = made
    output_dir = tmp_path / "work"
    run = make_student(tiny_model_dir, tiny_dataset, output_dir, recipe_file, cache_dir, "--keep-original")
    assert run.returncode == 0, run.stderr[-3000:]
    original = load_translation_split(str(tiny_dataset), "de", "en", "train")
    trained_on = load_translation_split(str(output_dir / "distilled"), "de", "en", "train")
    assert list(trained_on["source"]) == list(original["source"]) * 2  # the originals, then the teacher's
    assert list(trained_on["target"])[: len(original)] == list(original["target"])
    assert json.loads((output_dir / "student" / STUDENT_FILE).read_text())["keep_original"] is True
