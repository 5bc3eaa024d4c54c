"""scripts/tools/peer_marian.py, the same-budget MarianMT peer, for a few updates on the synthetic corpus: a
plain MarianMTModel directory that decodes, with the record of its training."""

import json

from conftest import DE_EN, run_script
from transformers import AutoModelForSeq2SeqLM


def test_the_peer_trains_on_the_runs_bpe_within_its_minutes_and_is_scored_as_ours(
    tiny_model_dir, corpus_path, tmp_path
):
    peer = tmp_path / "peer"
    given = ("--dataset", corpus_path, *DE_EN, "--tokenizer", tiny_model_dir)
    run_script("tools/peer_marian.py", peer, *given, "--minutes", "0.001", check=True)
    record = json.loads((peer / "peer_train.json").read_text())
    assert record["updates"] >= 1 and record["given"]["minutes"] == 0.001
    assert AutoModelForSeq2SeqLM.from_pretrained(peer).config.model_type == "marian"
    scored = ("--first-pairs", "4", "--num-beams", "1", "--max-new-tokens", "4", "--device", "cpu")
    bleu = tmp_path / "bleu"
    run_script("evaluate_bleu.py", peer, *given[:6], *scored, "--output-dir", bleu, check=True)
    assert (bleu / "test.de-en.json").is_file()
