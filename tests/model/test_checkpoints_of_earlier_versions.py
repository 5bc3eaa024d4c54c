"""Checkpoints saved by earlier versions still load and translate exactly as they did, whether or not the
caller passes trust_remote_code: hf_vanilla 0.1.0, before the package took its present layout, and 0.2.0,
before the model file followed the paper (the attention formula and the shared matrix moved, the training loss
left).

Each checkpoint is written at test time by that version's own model code (the files its checkpoints
carry, kept in tests/fixtures/hf_vanilla_<version>), in a process that never imports today's
package; no weights are kept."""

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from transformers import AutoModelForSeq2SeqLM

import hf_vanilla  # registers the Auto classes

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures"

# Builds, saves and runs a tiny model of the earlier version:
# its greedy tokens and last-step logits go to stdout as JSON.
SAVE_WITH_LEGACY_CODE = """
import json, sys
import torch
sys.path.insert(0, sys.argv[1])
from legacy.configuration_vanilla import VanillaTransformerConfig
from legacy.modeling_vanilla import VanillaTransformerForConditionalGeneration, VanillaTransformerModel

VanillaTransformerConfig.register_for_auto_class()  # as the package's __init__ did: config.json's auto_map
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
outputs = {"input_ids": input_ids.tolist()}
for implementation in ("sdpa", "eager"):
    model.set_attn_implementation(implementation)
    with torch.no_grad():
        generated = model.generate(input_ids=input_ids, num_beams=1, max_new_tokens=8)
        logits = model(input_ids=input_ids, decoder_input_ids=generated[:, :4]).logits[:, -1]
    outputs[implementation] = {"generated": generated.tolist(), "logits": logits.tolist()}
print(json.dumps(outputs))
"""


@pytest.fixture(scope="module", params=["0.1.0", "0.2.0"])
def legacy_checkpoint(request, tmp_path_factory):
    """(directory of a checkpoint the earlier version saved, what its model made of its inputs)."""
    root = tmp_path_factory.mktemp(f"legacy-{request.param}")
    shutil.copytree(FIXTURES / f"hf_vanilla_{request.param}", root / "code" / "legacy")
    (root / "code" / "legacy" / "__init__.py").touch()
    completed = subprocess.run(
        [sys.executable, "-c", SAVE_WITH_LEGACY_CODE, str(root / "code"), str(root / "checkpoint")],
        capture_output=True,
        text=True,
        check=True,
    )
    return root / "checkpoint", json.loads(completed.stdout.splitlines()[-1])


@pytest.mark.parametrize("attn_implementation", ["sdpa", "eager"])  # torch's kernel; the model's own formula
@pytest.mark.parametrize("trust_remote_code", [True, False])
def test_checkpoint_of_an_earlier_version_translates_as_it_did(
    legacy_checkpoint, trust_remote_code, attn_implementation
):
    directory, expected = legacy_checkpoint
    assert {"configuration_vanilla.py", "modeling_vanilla.py", "model.safetensors"} <= {
        path.name for path in directory.iterdir()
    }
    model = AutoModelForSeq2SeqLM.from_pretrained(
        directory, trust_remote_code=trust_remote_code, attn_implementation=attn_implementation
    ).eval()
    # With the package imported, both ways take today's classes
    # (the registered model type wins over carried code).
    assert isinstance(model, hf_vanilla.VanillaTransformerForConditionalGeneration)
    input_ids = torch.tensor(expected["input_ids"])
    expected = expected[attn_implementation]
    generated = model.generate(input_ids=input_ids, num_beams=1, max_new_tokens=8)
    assert generated.tolist() == expected["generated"]
    with torch.no_grad():
        logits = model(input_ids=input_ids, decoder_input_ids=generated[:, :4]).logits[:, -1]
    torch.testing.assert_close(logits, torch.tensor(expected["logits"]), atol=1e-5, rtol=1e-5)
