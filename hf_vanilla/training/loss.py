"""5.4 The training loss: label-smoothed cross-entropy from the model's logits, with R-Drop's consistency term
(not in the paper) as an option, run eager or compiled."""

from __future__ import annotations

import functools
from collections.abc import Callable

import torch
import torch.nn.functional as F
from transformers.utils import is_torchdynamo_compiling


def label_smoothed_cross_entropy(
    logits: torch.Tensor, labels: torch.Tensor, smoothing: float, divisor: int | torch.Tensor
) -> torch.Tensor:
    """5.4 label-smoothed (0: plain) cross-entropy of logits (N, V), labels (N,),
    -100 ignored: summed, / divisor.

    The target puts 1 - smoothing on the label and spreads `smoothing` evenly over the whole vocabulary (the
    label included), as F.cross_entropy's label_smoothing does; it runs over the row blocks of
    `loss_block_rows`.
    """
    rows = loss_block_rows(logits)
    total = sum(
        F.cross_entropy(block.float(), target, ignore_index=-100, label_smoothing=smoothing, reduction="sum")
        for block, target in zip(logits.split(rows), labels.split(rows), strict=True)
    )
    return total / divisor


def loss_block_rows(logits: torch.Tensor) -> int:
    """How many rows of logits (N, V) the loss over the vocabulary takes at once.

    On CPU, float32 blocks of 1 MiB, whose log-probabilities and gradients stay in cache (measured in
    docs/training.md, "The loss in row blocks on a CPU"). Elsewhere, or compiled (inductor fuses it all),
    every row at once.
    """
    if logits.device.type == "cpu" and not is_torchdynamo_compiling():
        return max(1, (1 << 18) // logits.shape[-1])
    return logits.shape[0]


def label_smoothed_loss(
    model: torch.nn.Module,
    batch: dict[str, torch.Tensor],
    smoothing: float,
    divisor: float | torch.Tensor,
    rdrop_alpha: float = 0.0,
) -> torch.Tensor:
    """5.4 Label-smoothed cross-entropy of a collated batch (with decoder_input_ids), summed, then / divisor.

    From the logits: the model's own loss is plain cross-entropy, so it is not asked for. With `rdrop_alpha`
    (R-Drop, not in the paper) the batch runs twice in one forward, each copy under its own dropout masks: the
    mean of the two copies' losses plus rdrop_alpha/4 x the symmetric KL divergence of their predictions.
    """
    if rdrop_alpha:
        batch = {name: torch.cat([tensor, tensor]) for name, tensor in batch.items()}
    inputs = {name: tensor for name, tensor in batch.items() if name != "labels"}
    logits, labels = model(**inputs, use_cache=False).logits.flatten(0, 1), batch["labels"].flatten()
    if not rdrop_alpha:
        return label_smoothed_cross_entropy(logits, labels, smoothing, divisor)
    cross_entropy = label_smoothed_cross_entropy(logits, labels, smoothing, 2)
    first, second = logits.chunk(2)
    kept = labels.chunk(2)[0] != -100
    return (cross_entropy + rdrop_alpha / 4 * symmetric_kl(first, second, kept)) / divisor


def symmetric_kl(first: torch.Tensor, second: torch.Tensor, kept: torch.Tensor) -> torch.Tensor:
    """KL(p||q) + KL(q||p) between the predictions of logits (N, V) `first` and `second`, summed over the
    `kept` rows (N,), in the row blocks of `loss_block_rows`."""
    rows = loss_block_rows(first)
    total = 0
    for first_block, second_block, kept_block in zip(
        first.split(rows), second.split(rows), kept.split(rows), strict=True
    ):
        p, q = first_block.float().log_softmax(-1), second_block.float().log_softmax(-1)
        # sum (p - q)(log p - log q); a mask product, not indexing, keeps it free of syncs
        total = total + (((p.exp() - q.exp()) * (p - q)).sum(-1) * kept_block).sum()
    return total


def training_loss_function(compile_setting: str, rdrop_alpha: float = 0.0) -> tuple[Callable, str]:
    """`label_smoothed_loss` (with `rdrop_alpha`) as the `compile` setting wants it, and how it runs.

    `yes`: torch.compile with dynamic shapes, so every batch shape shares one graph. `auto` runs eager: the
    compiled step has not paid for its compilation where it was measured (docs/training.md, "A compiled
    step").
    """
    loss = functools.partial(label_smoothed_loss, rdrop_alpha=rdrop_alpha)
    if compile_setting != "yes":
        return loss, "eager"
    return torch.compile(loss, dynamic=True), "torch.compile (inductor), dynamic shapes"
