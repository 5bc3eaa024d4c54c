"""A new pair from a user's own files, end to end as docs/your-data.md runs it: English-French from two
plain-text files written from the real Multi30k copy, the tokenizer trained for the pair, validation and test
held out of the training file, selection on the held-out validation, and the held-out test scored once."""

import json
import os
import subprocess
import sys

import pytest
from conftest import REPO, SCRIPTS

pytestmark = pytest.mark.slow

PAIRS = 3000


def run(*command, environment) -> subprocess.CompletedProcess:
    finished = subprocess.run(
        [sys.executable, *map(str, command)], capture_output=True, text=True, env=environment, timeout=900
    )
    assert finished.returncode == 0, finished.stderr[-3000:]
    return finished


def test_english_french_from_two_text_files_to_a_scored_checkpoint(multi30k_path, tmp_path):
    rows = [json.loads(line)["translation"] for line in open(f"{multi30k_path}/train.jsonl")][:PAIRS]
    for lang in ("en", "fr"):
        (tmp_path / f"corpus.{lang}").write_text("".join(row[lang] + "\n" for row in rows), encoding="utf-8")
    environment = {**os.environ, "HF_DATASETS_CACHE": str(tmp_path / "cache"), "OMP_NUM_THREADS": "1"}
    run_dir, pair = tmp_path / "run", ["--source-lang", "en", "--target-lang", "fr"]
    run(
        SCRIPTS / "train.py", "--config", REPO / "configs" / "your-pair.yaml", *pair,
        "--dataset", tmp_path / "corpus.{lang}", "--tokenizer", tmp_path / "bpe-en-fr",
        "--output-dir", run_dir, "--holdout", 100, "--model-preset", "tiny", "--tokenizer-vocab-size", 1000,
        "--max-minutes", "null", "--max-steps", 60, "--save-interval-minutes", "null",
        "--save-interval-updates", 20, "--average-last", 2, "--validation-max-sentences", 20,
        "--mixed-precision", "no", "--no-tensorboard",
        environment=environment,
    )  # fmt: skip
    learned = json.loads((tmp_path / "bpe-en-fr" / "learned_from.json").read_text())
    # The held-out pairs are not learned.
    assert learned["languages"] == ["en", "fr"] and learned["pairs"] <= PAIRS - 200
    heldout = run_dir / "heldout"
    heldout_lines = [
        len((heldout / f"{split}.jsonl").read_text().splitlines()) for split in ("validation", "test")
    ]
    assert heldout_lines == [100, 100]
    run(
        SCRIPTS / "select_checkpoint.py", run_dir, "--dataset", heldout, *pair, "--num-beams", 1, 2,
        "--output-dir", run_dir / "selection", environment=environment,
    )  # fmt: skip
    assert json.loads((run_dir / "selection" / "selection.json").read_text())["validation_sentences"] == 100
    test_report = json.loads((run_dir / "selection" / "test.en-fr.json").read_text())
    assert test_report["sentences"] == 100 and test_report["target_lang"] == "fr"
    assert test_report["cased"]["bleu"] > 0 and "tok:13a" in test_report["cased"]["bleu_signature"]
    # A de-en run may not take the pair's tokenizer.
    refused = subprocess.run(
        [sys.executable, str(SCRIPTS / "train.py"), "--config", str(REPO / "configs" / "your-pair.yaml"),
         "--source-lang", "de", "--target-lang", "en", "--dataset", f"{multi30k_path}",
         "--tokenizer", str(tmp_path / "bpe-en-fr"), "--output-dir", str(tmp_path / "refused")],
        capture_output=True, text=True, env=environment, timeout=300,
    )  # fmt: skip
    assert refused.returncode == 1 and "learned en+fr, but this run translates de->en" in refused.stderr
    assert not (tmp_path / "refused").exists()
