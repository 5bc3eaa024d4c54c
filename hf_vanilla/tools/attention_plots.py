"""Attention heatmaps for one sentence pair: encoder self-, decoder self- and cross-attention, per layer and head.

Needs matplotlib (`pip install hf_vanilla[plot]`). The weights come from one teacher-forced forward pass
with `output_attentions=True` and eager attention (sdpa does not return them).
"""

from __future__ import annotations

import math
import os
from dataclasses import dataclass
from pathlib import Path

import torch
from matplotlib.figure import Figure
from transformers import PreTrainedModel, PreTrainedTokenizerBase

from hf_vanilla.files import atomic_file
from hf_vanilla.model.decoding import paper_max_new_tokens

ATTENTION_KINDS = {
    "encoder": ("encoder self-attention", "source (query)", "source (key)"),
    "decoder": ("decoder self-attention", "predicted target token (query)", "decoder input (key)"),
    "cross": ("cross-attention", "predicted target token (query)", "source (key)"),
}
HEADS_PER_ROW = 4


@dataclass
class SentenceAttentions:
    """Attention weights of one sentence pair: per layer a (heads, queries, keys) tensor for each kind."""

    source_tokens: list[str]
    decoder_input_tokens: list[str]
    predicted_tokens: list[str]  # what each decoder position predicts: the target shifted left
    target_text: str
    weights: dict[str, list[torch.Tensor]]  # "encoder", "decoder", "cross"


def sentence_attentions(
    model: PreTrainedModel, tokenizer: PreTrainedTokenizerBase, source: str, target: str | None = None
) -> SentenceAttentions:
    """Teacher-force `target` (default: the model's greedy translation of `source`) and collect attentions.

    Decoder rows are labelled with the token each position predicts, so a cross-attention row shows
    where the model looked to produce that token. Switches the model to eager attention.
    """
    if not source.strip():
        raise ValueError("the source sentence is blank")
    if model.config._attn_implementation != "eager":
        model.set_attn_implementation("eager")
    model.eval()
    encoded = tokenizer(source, return_tensors="pt").to(model.device)
    with torch.inference_mode():
        if target is None:
            max_new_tokens = paper_max_new_tokens(model.config, encoded["input_ids"].shape[1])
            full_target = model.generate(
                **encoded, num_beams=1, do_sample=False, max_new_tokens=max_new_tokens
            )[0]
        else:
            target_ids = tokenizer(text_target=target, return_tensors="pt")["input_ids"][0].to(model.device)
            start = torch.tensor([model.config.decoder_start_token_id], device=model.device)
            full_target = torch.cat([start, target_ids])
        outputs = model(**encoded, decoder_input_ids=full_target[None, :-1], output_attentions=True)
    weights = {
        kind: [layer[0].float().cpu() for layer in getattr(outputs, f"{kind}_attentions")]
        for kind in ATTENTION_KINDS
    }
    return SentenceAttentions(
        source_tokens=token_labels(tokenizer, encoded["input_ids"][0]),
        decoder_input_tokens=token_labels(tokenizer, full_target[:-1]),
        predicted_tokens=token_labels(tokenizer, full_target[1:]),
        target_text=tokenizer.decode(full_target, skip_special_tokens=True),
        weights=weights,
    )


def token_labels(tokenizer: PreTrainedTokenizerBase, ids: torch.Tensor) -> list[str]:
    """Each token as readable text (byte-level BPE's "Ġ" and "Ã¤" decoded); "▁" marks a word's leading space."""
    labels = [tokenizer.decode([token_id]) for token_id in ids.tolist()]
    return ["▁" + label[1:] if label.startswith(" ") else label for label in labels]


def plot_layer(
    weights: torch.Tensor, query_tokens: list[str], key_tokens: list[str], kind: str, layer: int
) -> Figure:
    """One figure for a layer: a grid of (queries x keys) heatmaps, one per head, sharing a colour scale."""
    title, query_label, key_label = ATTENTION_KINDS[kind]
    num_heads = weights.shape[0]
    columns = min(num_heads, HEADS_PER_ROW)
    rows = math.ceil(num_heads / columns)
    # Inches per heatmap, so that each token label has room and the cells come out about square.
    width, height = (max(2.0, 0.18 * len(tokens)) + 0.8 for tokens in (key_tokens, query_tokens))
    figure = Figure(figsize=(columns * width + 1.2, rows * height + 0.8), layout="constrained")
    axes_grid = figure.subplots(rows, columns, squeeze=False, sharex=True, sharey=True)
    vmax = float(weights.max())
    for head, axes in enumerate(axes_grid.flat):
        if head >= num_heads:
            axes.set_visible(False)
            continue
        image = axes.imshow(weights[head].numpy(), cmap="viridis", vmin=0.0, vmax=vmax, aspect="auto")
        axes.set_title(f"head {head}", fontsize=9)
        axes.set_xticks(range(len(key_tokens)), key_tokens, rotation=90, fontsize=7)
        axes.set_yticks(range(len(query_tokens)), query_tokens, fontsize=7)
    for axes in axes_grid[-1]:
        axes.set_xlabel(key_label, fontsize=8)
    for axes in axes_grid[:, 0]:
        axes.set_ylabel(query_label, fontsize=8)
    figure.suptitle(f"{title}, layer {layer}")
    figure.colorbar(image, ax=axes_grid, shrink=0.6, label="attention weight")
    return figure


def save_attention_plots(
    attentions: SentenceAttentions,
    output_dir: str | os.PathLike,
    kinds: tuple[str, ...] = tuple(ATTENTION_KINDS),
    dpi: int = 120,
) -> list[Path]:
    """Write `{kind}_layer{i}.png` for every layer of each kind, each file atomically; return the paths."""
    unknown = set(kinds) - set(ATTENTION_KINDS)
    if unknown:
        raise ValueError(f"unknown attention kinds {sorted(unknown)}; choose from {list(ATTENTION_KINDS)}")
    axis_tokens = {
        "encoder": (attentions.source_tokens, attentions.source_tokens),
        "decoder": (attentions.predicted_tokens, attentions.decoder_input_tokens),
        "cross": (attentions.predicted_tokens, attentions.source_tokens),
    }
    output_dir = Path(output_dir)
    output_dir.mkdir(parents=True, exist_ok=True)
    paths = []
    for kind in kinds:
        for layer, weights in enumerate(attentions.weights[kind]):
            path = output_dir / f"{kind}_layer{layer}.png"
            with atomic_file(path) as staging:
                plot_layer(weights, *axis_tokens[kind], kind, layer).savefig(staging, format="png", dpi=dpi)
            paths.append(path)
    return paths
