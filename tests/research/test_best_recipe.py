"""scripts/research/best_recipe.sh end to end on a tiny corpus and model: every stage runs, each direction's
final choice uses the models the recipe names; given again, it redoes nothing. (A stopped stage goes on where
it stopped: run_tries resumes every run, tests/test_tries.py; distill.py writes its directory only once whole,
so the script skips one that exists.)"""

import dataclasses
import json
import os
import subprocess

import pytest
import yaml
from conftest import REPO, SCRIPTS, tiny_config

from hf_vanilla.checkpoints.loading import load_model_and_tokenizer
from hf_vanilla.data.corpus import load_translation_split
from hf_vanilla.research.reranking import REVERSE_WEIGHT, RIGHT_TO_LEFT_WEIGHT

pytestmark = pytest.mark.slow  # the whole recipe end to end: minutes; `pytest -m slow` runs it


def run_recipe(environment):
    return subprocess.run(
        ["bash", str(SCRIPTS / "research" / "best_recipe.sh")],
        cwd=REPO,
        env={**os.environ, **environment},
        capture_output=True,
        text=True,
    )


def test_the_recipe_trains_every_model_and_chooses_each_direction_on_validation(corpus_path, tmp_path):
    small = tmp_path / "corpus"  # few sentences: the teachers translate the whole training split
    small.mkdir()
    for split, size in (("train", 120), ("validation", 6), ("test", 4)):
        pairs = load_translation_split(corpus_path, "de", "en", split).select(range(size))
        rows = [{"translation": {"de": pair["source"], "en": pair["target"]}} for pair in pairs]
        (small / f"{split}.jsonl").write_text("".join(json.dumps(row) + "\n" for row in rows))
    config = tiny_config(
        str(small),
        tmp_path / "bpe",
        tmp_path / "unused",
        max_steps=4,
        save_interval_updates=2,
        average_last=2,
    )
    config_file = tmp_path / "tiny.yaml"
    config_file.write_text(yaml.safe_dump(dataclasses.asdict(config)))
    out = tmp_path / "recipe"
    environment = {
        "MULTI30K": str(small),
        "OUT": str(out),
        "PARALLEL": "2",
        "CONFIG": str(config_file),
        "MEMBER_SELECT": "--num-beams 1",
        "FINAL_SELECT": "--num-beams 2 --length-penalty 1.0 --rerank-weight 0 1 --right-to-left-weight 0 1",
        "OMP_NUM_THREADS": "1",
        "SEED_OFFSET": "1",  # every seed one up: teachers en-de seed 3 and de-en seed 5
    }
    completed = run_recipe(environment)
    assert completed.returncode == 0, completed.stderr[-3000:]
    # PARALLEL=2 ran both directions' choices side by side, each logged, its test scores printed as it ended.
    for direction in ("en de", "de en"):
        assert f"best_recipe: choose {direction} ended: test: cased BLEU" in completed.stdout

    for stage, runs in (("teachers", 2), ("students", 6)):
        tries = json.loads((out / stage / "tries.json").read_text())["tries"]
        assert len(tries) == runs and all(row["training_exit"] == 0 == row["selection_exit"] for row in tries)
    # Each student trained on its direction's diversified pairs: the originals, then both teachers'
    # translations.
    provenance = json.loads((out / "data/diversified-en-de/distillation.json").read_text())
    assert provenance["rows"]["train"] == 3 * 120
    assert [teacher["side"] for teacher in provenance["teachers"]] == ["forward", "backward"]
    right_to_left, _ = load_model_and_tokenizer(out / "students/en-de-r2l-seed7/checkpoint_average", "cpu")
    assert right_to_left.config.right_to_left
    assert yaml.safe_load((out / "students/de-en-seed6/training_config.yaml").read_text())["seed"] == 6
    # The students at the paper's base width; the right-to-left models at the config's.
    for run, width in (
        ("en-de-seed3", 512),
        ("de-en-seed6", 512),
        ("en-de-r2l-seed7", None),
        ("de-en-r2l-seed7", None),
    ):
        overrides = yaml.safe_load((out / "students" / run / "training_config.yaml").read_text())[
            "model_overrides"
        ]
        assert overrides.get("d_model") == width, run
    students = out / "students"
    for direction, members, reverse, r2l in (
        ("en-de", ["students/en-de-seed3", "students/en-de-seed4"],  # its wide students alone
         ["teachers/de-en-seed5", "students/de-en-seed5", "students/de-en-seed6"], "en-de-r2l-seed7"),
        ("de-en", ["students/de-en-seed5", "students/de-en-seed6"],
         ["teachers/en-de-seed3", "students/en-de-seed3", "students/en-de-seed4"], "de-en-r2l-seed7"),
    ):  # fmt: skip
        selection = json.loads((out / direction / "selection.json").read_text())
        assert selection["chosen"]["model"] == str(out / members[0] / "checkpoint_average")
        assert selection["ensemble"] == [str(out / member / "checkpoint_average") for member in members[1:]]
        assert selection["rerank_with"] == [str(out / model / "checkpoint_average") for model in reverse]
        assert selection["rerank_right_to_left"] == [str(students / r2l / "checkpoint_average")]
        assert selection["rerank_language_model"] == [str(out / "language-models" / direction[-2:])]
        weights = {(row[REVERSE_WEIGHT], row[RIGHT_TO_LEFT_WEIGHT]) for row in selection["validation"]}
        assert weights == {(0.0, 0.0), (0.0, 1.0), (1.0, 0.0), (1.0, 1.0)}
        assert set(selection["reports"]) == {"test"}  # decoded once, with the choice

    # Given again, it trains, selects and decodes nothing more.
    chosen_at = [(out / direction / "selection.json").stat().st_mtime for direction in ("en-de", "de-en")]
    again = run_recipe(environment)
    assert again.returncode == 0, again.stderr[-3000:]
    assert again.stdout.count("is chosen already (remove it to choose again)") == 2
    assert [
        (out / direction / "selection.json").stat().st_mtime for direction in ("en-de", "de-en")
    ] == chosen_at
    select_logs = "".join(log.read_text() for log in (out / "students/logs").glob("*.select.log"))
    assert select_logs.count("made with these flags from these weights: kept") == 6


def test_a_seed_offset_that_is_not_a_whole_number_is_refused_before_anything_runs(tmp_path):
    completed = run_recipe({"OUT": str(tmp_path / "recipe"), "SEED_OFFSET": "-1", "FINAL_SELECT": "-h"})
    assert completed.returncode == 2 and "SEED_OFFSET must be a whole number, not '-1'" in completed.stderr
    assert not (tmp_path / "recipe").exists()
