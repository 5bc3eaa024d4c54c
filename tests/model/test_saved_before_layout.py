"""A checkpoint saved by hf_vanilla 0.1.0, before the package took its present layout, still loads and translates
exactly as it did: through its own carried code, and through this package's registered classes."""

import json
from pathlib import Path

import pytest
import torch
from transformers import AutoModelForSeq2SeqLM, AutoTokenizer

import hf_vanilla  # noqa: F401  registers the Auto classes

CHECKPOINT = Path(__file__).resolve().parents[1] / "fixtures" / "checkpoint_0.1.0"
EXPECTED = json.loads((CHECKPOINT / "expected_translations.json").read_text())


@pytest.mark.parametrize("trust_remote_code", [True, False])
def test_checkpoint_from_before_the_layout_translates_as_it_did(trust_remote_code):
    model = AutoModelForSeq2SeqLM.from_pretrained(CHECKPOINT, trust_remote_code=trust_remote_code).eval()
    tokenizer = AutoTokenizer.from_pretrained(CHECKPOINT, trust_remote_code=True)
    inputs = tokenizer(EXPECTED["sources"], return_tensors="pt", padding=True)
    generated = model.generate(**inputs, num_beams=1, max_new_tokens=8)
    assert generated.tolist() == EXPECTED["token_ids"]
    with torch.no_grad():
        decoder_input_ids = torch.tensor(EXPECTED["decoder_input_ids"])
        logits = model(**inputs, decoder_input_ids=decoder_input_ids).logits[:, -1]
    torch.testing.assert_close(logits, torch.tensor(EXPECTED["last_logits"]), atol=1e-4, rtol=1e-4)
