"""The attention behind one translation: encoder self-, decoder self- and cross-attention (sections 3.2.1
and 3.2.2), per layer and head, from one teacher-forced forward pass over the output with
`output_attentions=True`.

Each decoder row is the attention with which the model predicted that row's token, so a cross-attention row
shows where in the source the model looked to write it. Free of plotting and web code: the PNG heatmaps
(`hf_vanilla.tools.attention_plots`) and the service's attention endpoint (`hf_vanilla.serving`) draw on it.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass

import torch
from transformers import PreTrainedModel, PreTrainedTokenizerBase

ATTENTION_KINDS = ("encoder", "decoder", "cross")


@dataclass
class SentenceAttentions:
    """Attention weights of one sentence pair: per layer a (heads, queries, keys) tensor for each kind."""

    source_tokens: list[str]
    decoder_input_tokens: list[str]
    predicted_tokens: list[str]  # what each decoder position predicts: the target shifted left
    target_text: str
    weights: dict[str, list[torch.Tensor]]  # each of ATTENTION_KINDS


@contextmanager
def eager_attention(model: PreTrainedModel) -> Iterator[None]:
    """`model` on eager attention, which returns its weights (sdpa and the fused kernels return none), and
    back on its own implementation afterwards, so that a served model decodes at its own speed in between."""
    own = model.config._attn_implementation
    if own != "eager":
        model.set_attn_implementation("eager")
    try:
        yield
    finally:
        if own != "eager":
            model.set_attn_implementation(own)


def teacher_forced_attentions(
    model: PreTrainedModel,
    tokenizer: PreTrainedTokenizerBase,
    source_ids: Sequence[int],
    target_ids: Sequence[int],
    target_text: str,
) -> SentenceAttentions:
    """The attentions of `model` reading `source_ids` and writing `target_ids` (the decoder start token first,
    as `generate` returns them), on float32 CPU tensors; `target_text` is how the target reads."""
    source = torch.tensor([list(source_ids)], device=model.device)
    target = torch.tensor(list(target_ids), device=model.device)
    model.eval()
    with torch.inference_mode(), eager_attention(model):
        outputs = model(
            input_ids=source,
            attention_mask=torch.ones_like(source),
            decoder_input_ids=target[None, :-1],
            output_attentions=True,
        )
    return SentenceAttentions(
        source_tokens=token_labels(tokenizer, source[0]),
        decoder_input_tokens=token_labels(tokenizer, target[:-1]),
        predicted_tokens=token_labels(tokenizer, target[1:]),
        target_text=target_text,
        weights={
            kind: [layer[0].float().cpu() for layer in getattr(outputs, f"{kind}_attentions")]
            for kind in ATTENTION_KINDS
        },
    )


def token_labels(tokenizer: PreTrainedTokenizerBase, ids: torch.Tensor) -> list[str]:
    """Each token as readable text (byte-level BPE's "Ġ" and "Ã¤" decoded); "▁" marks a word's leading
    space."""
    labels = [tokenizer.decode([token_id]) for token_id in ids.tolist()]
    return ["▁" + label[1:] if label.startswith(" ") else label for label in labels]
