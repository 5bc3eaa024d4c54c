"""A checkpoint saved by hf_vanilla 0.1.0, before the package took its present layout, still loads and translates
exactly as it did, whether or not the caller passes trust_remote_code.

The checkpoint is written at test time by 0.1.0's own model code (the two files a 0.1.0 checkpoint carries,
kept in tests/fixtures/hf_vanilla_0.1.0), in a process that never imports today's package; no weights are kept."""

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from transformers import AutoModelForSeq2SeqLM

import hf_vanilla  # registers the Auto classes

LEGACY_CODE = Path(__file__).resolve().parents[1] / "fixtures" / "hf_vanilla_0.1.0"

# Builds, saves and runs a tiny 0.1.0 model: its greedy tokens and last-step logits go to stdout as JSON.
SAVE_WITH_LEGACY_CODE = """
import json, sys
import torch
sys.path.insert(0, sys.argv[1])
from legacy.configuration_vanilla import VanillaTransformerConfig
from legacy.modeling_vanilla import VanillaTransformerForConditionalGeneration, VanillaTransformerModel

VanillaTransformerConfig.register_for_auto_class()  # as 0.1.0's package __init__ did: config.json's auto_map
VanillaTransformerModel.register_for_auto_class("AutoModel")
VanillaTransformerForConditionalGeneration.register_for_auto_class("AutoModelForSeq2SeqLM")
torch.manual_seed(0)
config = VanillaTransformerConfig.from_preset(
    "tiny", vocab_size=120, d_model=16, d_ff=32, num_attention_heads=2, encoder_layers=1, decoder_layers=1
)
model = VanillaTransformerForConditionalGeneration(config).eval()
with torch.no_grad():
    for parameter in model.parameters():
        parameter.mul_(8.0)  # sharper than at initialisation, so that greedy tokens differ between inputs
model.save_pretrained(sys.argv[2])
input_ids = torch.randint(4, 120, (3, 7))
with torch.no_grad():
    generated = model.generate(input_ids=input_ids, num_beams=1, max_new_tokens=8)
    logits = model(input_ids=input_ids, decoder_input_ids=generated[:, :4]).logits[:, -1]
print(json.dumps({"input_ids": input_ids.tolist(), "generated": generated.tolist(), "logits": logits.tolist()}))
"""


@pytest.fixture(scope="module")
def legacy_checkpoint(tmp_path_factory):
    """(directory of a checkpoint 0.1.0 saved, what 0.1.0's model made of its inputs)."""
    root = tmp_path_factory.mktemp("legacy")
    shutil.copytree(LEGACY_CODE, root / "code" / "legacy")
    (root / "code" / "legacy" / "__init__.py").touch()
    completed = subprocess.run(
        [sys.executable, "-c", SAVE_WITH_LEGACY_CODE, str(root / "code"), str(root / "checkpoint")],
        capture_output=True,
        text=True,
        check=True,
    )
    return root / "checkpoint", json.loads(completed.stdout.splitlines()[-1])


@pytest.mark.parametrize("trust_remote_code", [True, False])
def test_checkpoint_from_before_the_layout_translates_as_it_did(legacy_checkpoint, trust_remote_code):
    directory, expected = legacy_checkpoint
    assert {"configuration_vanilla.py", "modeling_vanilla.py", "model.safetensors"} <= {
        path.name for path in directory.iterdir()
    }
    model = AutoModelForSeq2SeqLM.from_pretrained(directory, trust_remote_code=trust_remote_code).eval()
    # With the package imported, both ways take today's classes (the registered model type wins over carried code).
    assert isinstance(model, hf_vanilla.VanillaTransformerForConditionalGeneration)
    input_ids = torch.tensor(expected["input_ids"])
    generated = model.generate(input_ids=input_ids, num_beams=1, max_new_tokens=8)
    assert generated.tolist() == expected["generated"]
    with torch.no_grad():
        logits = model(input_ids=input_ids, decoder_input_ids=generated[:, :4]).logits[:, -1]
    torch.testing.assert_close(logits, torch.tensor(expected["logits"]), atol=1e-5, rtol=1e-5)
