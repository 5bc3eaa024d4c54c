
import pytest
import torch
from conftest import run_script

from hf_vanilla.checkpoints.loading import load_model_and_tokenizer
from hf_vanilla.tools.attention_plots import save_attention_plots, sentence_attentions
from hf_vanilla.translation.decoding import QUIET, translate_sentences

SOURCE = "Zwei junge Männer sind im Freien."
TARGET = "Two young men are outside."
PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"



@pytest.fixture(scope="module")
def model_and_tokenizer(tiny_model_dir):
    return load_model_and_tokenizer(tiny_model_dir, device="cpu")  # sdpa: sentence_attentions switches


def test_attention_shapes_labels_and_causal_mask_for_a_given_target(model_and_tokenizer):
    attentions = sentence_attentions(*model_and_tokenizer, SOURCE, TARGET)
    source_length, target_length = len(attentions.source_tokens), len(attentions.predicted_tokens)
    assert attentions.target_text == TARGET
    assert attentions.decoder_input_tokens[0] == "<s>" and attentions.predicted_tokens[-1] == "</s>"
    assert attentions.decoder_input_tokens[1:] == attentions.predicted_tokens[:-1]
    expected_shapes = {
        "encoder": (4, source_length, source_length),
        "decoder": (4, target_length, target_length),
        "cross": (4, target_length, source_length),
    }
    for kind, shape in expected_shapes.items():
        assert [tuple(layer.shape) for layer in attentions.weights[kind]] == [shape, shape]  # 2 layers
        for layer in attentions.weights[kind]:
            torch.testing.assert_close(layer.sum(-1), torch.ones(shape[:2]))
    future = torch.ones(target_length, target_length, dtype=torch.bool).triu(1)
    assert all(float(layer[:, future].abs().max()) == 0.0 for layer in attentions.weights["decoder"])


def test_without_target_the_greedy_translation_is_used(model_and_tokenizer):
    attentions = sentence_attentions(*model_and_tokenizer, SOURCE)
    assert (
        attentions.target_text
        == translate_sentences(*model_and_tokenizer, [SOURCE], num_beams=1, batching=QUIET)[0]
    )
    with pytest.raises(ValueError, match="source sentence is blank"):
        sentence_attentions(*model_and_tokenizer, "  ")


def test_one_png_per_kind_and_layer(model_and_tokenizer, tmp_path):
    attentions = sentence_attentions(*model_and_tokenizer, SOURCE, TARGET)
    paths = save_attention_plots(attentions, tmp_path, dpi=40)
    assert sorted(path.name for path in tmp_path.iterdir()) == sorted(
        f"{kind}_layer{layer}.png" for kind in ("encoder", "decoder", "cross") for layer in (0, 1)
    )
    assert all(path.read_bytes().startswith(PNG_SIGNATURE) for path in paths)
    with pytest.raises(ValueError, match="unknown attention kinds"):
        save_attention_plots(attentions, tmp_path, kinds=("self",))


def test_plot_attention_script(tiny_model_dir, tmp_path):
    completed = run_script(
        "tools/plot_attention.py", tiny_model_dir, "--source", SOURCE, "--target", TARGET, "--kinds", "cross",
        "--output-dir", tmp_path, "--dpi", "40", check=True,
    )  # fmt: skip
    assert f"target (given): {TARGET}" in completed.stdout
    assert sorted(path.name for path in tmp_path.iterdir()) == ["cross_layer0.png", "cross_layer1.png"]
