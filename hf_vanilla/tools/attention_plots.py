"""Attention heatmaps for one sentence pair: encoder self-, decoder self- and cross-attention, per layer and
head.

Needs matplotlib (`pip install hf_vanilla[plot]`). The weights are `hf_vanilla.translation.attention`'s: one
teacher-forced forward pass with `output_attentions=True` on eager attention (sdpa does not return them).
"""

from __future__ import annotations

import math
import os
from pathlib import Path
from typing import TYPE_CHECKING

import torch
from transformers import PreTrainedModel, PreTrainedTokenizerBase

from hf_vanilla.extras import require
from hf_vanilla.files import atomic_file
from hf_vanilla.model.decoding import DecodingOptions, cut_source
from hf_vanilla.translation.attention import SentenceAttentions, teacher_forced_attentions
from hf_vanilla.translation.engines import model_engine

if TYPE_CHECKING:
    from matplotlib.figure import Figure

ATTENTION_KINDS = {
    "encoder": ("encoder self-attention", "source (query)", "source (key)"),
    "decoder": ("decoder self-attention", "predicted target token (query)", "decoder input (key)"),
    "cross": ("cross-attention", "predicted target token (query)", "source (key)"),
}
HEADS_PER_ROW = 4
GREEDY = DecodingOptions(num_beams=1)


def sentence_attentions(
    model: PreTrainedModel, tokenizer: PreTrainedTokenizerBase, source: str, target: str | None = None
) -> SentenceAttentions:
    """Teacher-force `target` (default: the model's greedy translation of `source`, as `translate_sentences`
    gives it) and collect attentions.

    Decoder rows are labelled with the token each position predicts, so a cross-attention row shows
    where the model looked to produce that token.
    """
    if not source.strip():
        raise ValueError("the source sentence is blank")
    if target is None:
        engine = model_engine(model, tokenizer)
        [source_ids] = engine.encode([source])
        return engine.attention(cut_source(source_ids, engine.max_source_tokens), GREEDY)
    target_ids = [model.config.decoder_start_token_id, *tokenizer(text_target=target)["input_ids"]]
    return teacher_forced_attentions(
        model,
        tokenizer,
        tokenizer(source)["input_ids"],
        target_ids,
        tokenizer.decode(target_ids, skip_special_tokens=True),
    )


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
    size = (columns * width + 1.2, rows * height + 0.8)
    figure = require("matplotlib.figure", extra="plot").Figure(figsize=size, layout="constrained")
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
