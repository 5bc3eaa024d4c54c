"""scripts/quickstart.sh's smoke recipe end to end on the synthetic corpus, offline: it installs nothing,
trains, chooses on validation, scores the test split with sacreBLEU, writes the chosen checkpoint's model
card, says where it all is and ends with the three commands that use the model, which run as printed."""

import json
import os
import shlex
import subprocess
import sys

import pytest
from conftest import REPO, SCRIPTS, run_in_session
from huggingface_hub import ModelCard

from hf_vanilla.tools.options_page import script_parser

pytestmark = pytest.mark.slow  # training, selection and test decoding in new processes: a minute or more


def test_the_smoke_quickstart_trains_chooses_scores_test_and_writes_the_card(corpus_path, tmp_path):
    pytest.importorskip("sacremoses")  # the quickstart reports the papers' tokenized BLEU beside sacreBLEU
    outputs = tmp_path / "outputs"
    environment = {
        **os.environ,
        "MULTI30K": corpus_path,
        "QUICKSTART_OUTPUTS": str(outputs),
        # No package index to reach: the package under test is importable, so nothing is to be installed
        "PIP_NO_INDEX": "1",
        "PIP_INDEX_URL": "http://127.0.0.1:9/simple",
        # A few updates on the 800 synthetic pairs instead of the recipe's minute
        "QUICKSTART_TRAIN_ARGS": "--max-minutes null --max-steps 6 --save-interval-minutes null "
        "--save-interval-updates 3 --tokenizer-vocab-size 300",
        "HF_HUB_OFFLINE": "1",
        "OMP_NUM_THREADS": "1",
    }
    installed = installed_packages(environment)
    completed = run_in_session(["bash", str(SCRIPTS / "quickstart.sh"), "de", "en", "smoke"], environment)
    assert "installing nothing" in completed.stdout and installed_packages(environment) == installed
    run = outputs / "multi30k-smoke-de-en"
    test_report = json.loads((run / "evaluation" / "test.de-en.json").read_text())
    assert f"test: cased BLEU {test_report['cased']['bleu']:.2f}" in completed.stdout
    chosen = json.loads((run / "evaluation" / "selection.json").read_text())["chosen"]["model"]
    card = ModelCard.load(os.path.join(chosen, "README.md"))
    assert {result.dataset_split for result in card.data.eval_results} >= {"test"}
    assert f"the chosen model is {chosen} (its model card: {chosen}/README.md)" in completed.stdout
    assert (outputs / "multi30k-bpe2k-de-en" / "tokenizer.json").is_file()  # not in the repository's outputs/
    translate, serve, evaluate = completed.stdout.splitlines()[-3:]
    assert run_as_printed(translate, environment).stdout.strip()
    script_parser(SCRIPTS / "serve.py").parse_args(shlex.split(serve)[2:])
    run_as_printed(evaluate, environment)
    assert (run / "evaluation" / "model" / "test.de-en.json").is_file()


def installed_packages(environment: dict) -> str:
    listing = [sys.executable, "-m", "pip", "list", "--format=freeze"]
    return subprocess.run(listing, env=environment, capture_output=True, text=True, check=True).stdout


def run_as_printed(line: str, environment: dict) -> subprocess.CompletedProcess:
    """A line the quickstart printed, run by bash from the repository root as a user pastes it."""
    completed = subprocess.run(
        ["bash", "-c", line], env=environment, cwd=REPO, capture_output=True, text=True, timeout=300
    )
    assert completed.returncode == 0, completed.stderr[-3000:]
    return completed
