"""scripts/quickstart.sh's smoke recipe end to end on the synthetic corpus: it trains, chooses on validation,
scores the test split with sacreBLEU, writes the chosen checkpoint's model card and says where it all is."""

import json
import os

import pytest
from conftest import SCRIPTS, run_in_session
from huggingface_hub import ModelCard

pytestmark = pytest.mark.slow  # training, selection and test decoding in new processes: a minute or more


def test_the_smoke_quickstart_trains_chooses_scores_test_and_writes_the_card(corpus_path, tmp_path):
    pytest.importorskip("sacremoses")  # the quickstart reports the papers' tokenized BLEU beside sacreBLEU
    outputs = tmp_path / "outputs"
    environment = {
        **os.environ,
        "MULTI30K": corpus_path,
        "QUICKSTART_OUTPUTS": str(outputs),
        "QUICKSTART_SKIP_INSTALL": "1",  # the package under test is installed already
        # A few updates on the 800 synthetic pairs instead of the recipe's minute
        "QUICKSTART_TRAIN_ARGS": "--max-minutes null --max-steps 6 --save-interval-minutes null "
        "--save-interval-updates 3 --tokenizer-vocab-size 300",
        "HF_HUB_OFFLINE": "1",
        "OMP_NUM_THREADS": "1",
    }
    completed = run_in_session(["bash", str(SCRIPTS / "quickstart.sh"), "de", "en", "smoke"], environment)
    run = outputs / "multi30k-smoke-de-en"
    test_report = json.loads((run / "evaluation" / "test.de-en.json").read_text())
    assert f"test: cased BLEU {test_report['cased']['bleu']:.2f}" in completed.stdout
    chosen = json.loads((run / "evaluation" / "selection.json").read_text())["chosen"]["model"]
    card = ModelCard.load(os.path.join(chosen, "README.md"))
    assert {result.dataset_split for result in card.data.eval_results} >= {"test"}
    assert f"the chosen model is {chosen} (its model card: {chosen}/README.md)" in completed.stdout
    assert (outputs / "multi30k-bpe2k-de-en" / "tokenizer.json").is_file()  # not in the repository's outputs/
