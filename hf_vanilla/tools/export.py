"""The MarianMT bridge: a trained model as a stock `MarianMTModel` directory (CTranslate2 converts from the
checkpoint itself: `hf_vanilla.translation.engines.ctranslate2_engine`).

The paper's post-LN Transformer with ReLU, scaled embeddings and fixed sinusoidal positions is the function
transformers' `MarianMTModel` computes, up to three differences that the conversion absorbs:
- Marian lays the sinusoid out as all sines then all cosines, the paper interleaves them. Permuting the model
  dimension the same way in every weight that reads or writes it (embeddings, projections, LayerNorms) gives
  the same function in Marian's layout.
- Marian has separate q/k/v projections with biases; ours are fused and bias-free: split, zero biases.
- Marian's LayerNorm epsilon is fixed at 1e-5 (ours defaults to 1e-6). No exact rescaling exists (the
  positional encodings cannot be scaled), so the exported model normalises with 1e-5: for activations of unit
  variance, a relative change of about 5e-6, logits within about 1e-5 (`max_logit_difference` measures it).
The decoder start token is a config field Marian reads (`decoder_start_token_id`, used by `generate` and by
label shifting), so it stays `<s>`; nothing in `MarianMTModel` hardwires pad there.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import torch
from transformers import GenerationConfig, MarianConfig, MarianMTModel, PreTrainedTokenizerBase

from hf_vanilla.checkpoints.loading import load_model_and_tokenizer, load_tokenizer
from hf_vanilla.data.tokenization import check_tokenizer_matches_model
from hf_vanilla.files import atomic_directory, refuse_existing, write_json
from hf_vanilla.model.configuration_vanilla import VanillaTransformerConfig
from hf_vanilla.model.modeling_vanilla import VanillaTransformerForConditionalGeneration

MARIAN_LAYER_NORM_EPS = 1e-5  # nn.LayerNorm's default, which MarianMTModel does not let a config change


def marian_config_from_vanilla(config: VanillaTransformerConfig) -> MarianConfig:
    """The MarianConfig of the same shape, token ids, dropouts and generation defaults."""
    if config.pre_layernorm:
        raise ValueError(
            "pre_layernorm models cannot be exported to Marian: MarianMTModel normalises after each "
            "residual (post-LN) and has no final LayerNorm after the stacks"
        )
    if not config.tie_word_embeddings:
        raise ValueError("untied models cannot be exported to Marian: the export writes one shared embedding "
            "matrix")
    return MarianConfig(
        vocab_size=config.vocab_size,
        decoder_vocab_size=config.vocab_size,
        share_encoder_decoder_embeddings=True,
        tie_word_embeddings=True,
        d_model=config.d_model,
        encoder_layers=config.encoder_layers,
        decoder_layers=config.decoder_layers,
        encoder_attention_heads=config.num_attention_heads,
        decoder_attention_heads=config.num_attention_heads,
        encoder_ffn_dim=config.d_ff,
        decoder_ffn_dim=config.d_ff,
        activation_function="relu",
        scale_embedding=True,
        max_position_embeddings=config.max_position_embeddings,
        dropout=config.dropout,
        attention_dropout=config.attention_dropout,
        activation_dropout=config.activation_dropout,
        pad_token_id=config.pad_token_id,
        bos_token_id=config.bos_token_id,
        eos_token_id=config.eos_token_id,
        decoder_start_token_id=config.decoder_start_token_id,
        forced_eos_token_id=None,  # Marian's default forces token 0 (our pad) at max_length
        architectures=["MarianMTModel"],
    )


def marian_dimension_order(d_model: int) -> torch.Tensor:
    """Marian's dimension k is our dimension order[k]: our even (sine) dimensions first, then the odd
    (cosine)."""
    return torch.cat([torch.arange(0, d_model, 2), torch.arange(1, d_model, 2)])


def marian_state_dict_from_vanilla(
    model: VanillaTransformerForConditionalGeneration,
) -> dict[str, torch.Tensor]:
    """Our weights renamed, split and permuted into MarianMTModel's names and dimension order.

    Tied weights (encoder/decoder embeddings, lm_head) and the sinusoid tables are left to Marian itself.
    """
    config = model.config
    order = marian_dimension_order(config.d_model)
    ours = {name: tensor.detach() for name, tensor in model.state_dict().items()}
    marian: dict[str, torch.Tensor] = {"model.shared.weight": ours["model.shared.weight"][:, order]}

    def attention(source: str, target: str) -> None:
        if f"{source}.qkv_proj.weight" in ours:
            projections = ours[f"{source}.qkv_proj.weight"].chunk(3)
        else:
            projections = (ours[f"{source}.q_proj.weight"], *ours[f"{source}.kv_proj.weight"].chunk(2))
        for name, weight in zip(("q_proj", "k_proj", "v_proj"), projections, strict=True):
            # Heads are not permuted: only the model dimension the projections read is.
            marian[f"{target}.{name}.weight"] = weight[:, order]
            marian[f"{target}.{name}.bias"] = weight.new_zeros(weight.shape[0])
        marian[f"{target}.out_proj.weight"] = ours[f"{source}.out_proj.weight"][order]
        marian[f"{target}.out_proj.bias"] = marian[f"{target}.out_proj.weight"].new_zeros(config.d_model)

    def layer_norm(source: str, target: str) -> None:
        marian[f"{target}.weight"] = ours[f"{source}.weight"][order]
        marian[f"{target}.bias"] = ours[f"{source}.bias"][order]

    for stack, num_layers in (("encoder", config.encoder_layers), ("decoder", config.decoder_layers)):
        for index in range(num_layers):
            source, target = f"model.{stack}.layers.{index}", f"model.{stack}.layers.{index}"
            attention(f"{source}.self_attn", f"{target}.self_attn")
            layer_norm(f"{source}.self_attn_residual.layer_norm", f"{target}.self_attn_layer_norm")
            if stack == "decoder":
                attention(f"{source}.encoder_attn", f"{target}.encoder_attn")
                layer_norm(f"{source}.encoder_attn_residual.layer_norm", f"{target}.encoder_attn_layer_norm")
            marian[f"{target}.fc1.weight"] = ours[f"{source}.feed_forward.fc1.weight"][:, order]
            marian[f"{target}.fc1.bias"] = ours[f"{source}.feed_forward.fc1.bias"]
            marian[f"{target}.fc2.weight"] = ours[f"{source}.feed_forward.fc2.weight"][order]
            marian[f"{target}.fc2.bias"] = ours[f"{source}.feed_forward.fc2.bias"][order]
            # Marian's "final_layer_norm" of a layer is the one after its feed-forward block.
            layer_norm(f"{source}.feed_forward_residual.layer_norm", f"{target}.final_layer_norm")
    return marian


def to_marian(model: VanillaTransformerForConditionalGeneration) -> MarianMTModel:
    """The same translation model as a stock `MarianMTModel` (in memory, same dtype, eval mode)."""
    marian = MarianMTModel(marian_config_from_vanilla(model.config)).to(model.dtype)
    marian.set_attn_implementation(model.config._attn_implementation)
    result = marian.load_state_dict(marian_state_dict_from_vanilla(model), strict=False)
    # Whatever Marian computes itself: tied copies of the shared embedding, sinusoid tables, a zero logits
    # bias.
    expected_missing = {
        "lm_head.weight",
        "final_logits_bias",
        "model.encoder.embed_tokens.weight",
        "model.decoder.embed_tokens.weight",
        "model.encoder.embed_positions.weight",
        "model.decoder.embed_positions.weight",
    }
    if set(result.missing_keys) - expected_missing or result.unexpected_keys:
        raise RuntimeError(f"weight conversion to Marian is incomplete: {result}")
    marian.generation_config = _generation_config(model)
    return marian.eval()


def _generation_config(model: VanillaTransformerForConditionalGeneration) -> GenerationConfig:
    """Our generation settings (beams, lengths...), with the token ids Marian must start and stop on."""
    generation_config = GenerationConfig.from_dict(model.generation_config.to_dict())
    config = model.config
    generation_config.update(
        pad_token_id=config.pad_token_id,
        bos_token_id=config.bos_token_id,
        eos_token_id=config.eos_token_id,
        decoder_start_token_id=config.decoder_start_token_id,
        forced_eos_token_id=None,
    )
    return generation_config


def load_vanilla(
    model_dir: str | os.PathLike,
) -> tuple[VanillaTransformerForConditionalGeneration, PreTrainedTokenizerBase]:
    """A saved model directory and its tokenizer, loaded and checked as every checkpoint is
    (`hf_vanilla.checkpoints.loading.load_model_and_tokenizer`), in float32 on the CPU; a model of another
    type than ours is a ValueError."""
    model, tokenizer = load_model_and_tokenizer(model_dir, "cpu")
    if not isinstance(model, VanillaTransformerForConditionalGeneration):
        raise ValueError(
            f"{model_dir} holds a {model.config.model_type} model: the export converts "
            f"{VanillaTransformerConfig.model_type} models"
        )
    return model, tokenizer


def export_to_marian(
    model: VanillaTransformerForConditionalGeneration | str | os.PathLike,
    output_dir: str | os.PathLike,
    tokenizer: PreTrainedTokenizerBase | str | os.PathLike | None = None,
    overwrite: bool = False,
) -> Path:
    """Write a stock MarianMTModel directory (weights, config, generation config, tokenizer) for `model`.

    `model` is a model or a saved model directory; `tokenizer` a tokenizer or its directory, by default the
    model directory's own. The result loads with plain transformers (`MarianMTModel.from_pretrained`,
    `AutoTokenizer.from_pretrained`), no hf_vanilla and no remote code needed. A tokenizer that is not the
    model's (`check_tokenizer_matches_model`) is a ValueError, before anything is written.
    """
    if not isinstance(model, VanillaTransformerForConditionalGeneration):
        model, own_tokenizer = load_vanilla(model)
        tokenizer = own_tokenizer if tokenizer is None else tokenizer
    elif tokenizer is None:
        raise ValueError("pass the tokenizer (or its directory) to export a model object")
    if not isinstance(tokenizer, PreTrainedTokenizerBase):
        tokenizer = load_tokenizer(tokenizer)
    check_tokenizer_matches_model(tokenizer, model.config)
    marian = to_marian(model)
    output_dir = Path(output_dir)
    refuse_existing(output_dir, overwrite)
    with atomic_directory(output_dir) as staging:
        marian.save_pretrained(staging)
        tokenizer.save_pretrained(staging)
        _name_a_tokenizer_class_every_transformers_knows(staging)
    return output_dir


def _name_a_tokenizer_class_every_transformers_knows(directory: Path) -> None:
    """transformers 5 names a tokenizer.json tokenizer `TokenizersBackend`, which 4.x cannot load; both load
    `PreTrainedTokenizerFast` from the same tokenizer.json (5.x as its `TokenizersBackend`)."""
    config_file = directory / "tokenizer_config.json"
    config = json.loads(config_file.read_text())
    if config.get("tokenizer_class") == "TokenizersBackend":
        config["tokenizer_class"] = "PreTrainedTokenizerFast"
        write_json(config_file, config)


@torch.no_grad()
def max_logit_difference(
    model: VanillaTransformerForConditionalGeneration,
    marian: MarianMTModel,
    batch_size: int = 4,
    source_length: int = 12,
    target_length: int = 10,
    seed: int = 0,
) -> float:
    """Largest |logit| difference between the two models on random padded inputs (a check of the export)."""
    generator = torch.Generator().manual_seed(seed)
    low, high = 4, model.config.vocab_size  # past the special tokens of our tokenizers
    source = torch.randint(low, high, (batch_size, source_length), generator=generator)
    attention_mask = torch.ones_like(source)
    attention_mask[1::2, source_length // 2 :] = 0  # every other sentence padded
    source = source.masked_fill(attention_mask == 0, model.config.pad_token_id)
    target = torch.randint(low, high, (batch_size, target_length), generator=generator)
    inputs = {"input_ids": source, "attention_mask": attention_mask, "labels": target}
    ours = model.eval()(**inputs).logits
    theirs = marian.eval()(**inputs).logits
    return (ours.float() - theirs.float()).abs().max().item()


__all__ = [
    "MARIAN_LAYER_NORM_EPS",
    "export_to_marian",
    "marian_config_from_vanilla",
    "marian_dimension_order",
    "marian_state_dict_from_vanilla",
    "max_logit_difference",
    "to_marian",
]

