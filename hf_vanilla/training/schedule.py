"""What changes with the update and the clock: the paper's learning rate (section 5.3) with an optional
cooldown, and late dropout (section 5.4 with Liu et al., 2023). Pure functions of the update count and the
budget spent, and set_dropout, which applies late dropout's rates to the model."""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch
from torch.optim.lr_scheduler import LambdaLR

from hf_vanilla.model.modeling_vanilla import (
    MultiHeadAttention,
    PositionwiseFeedForward,
    ResidualConnection,
    TokenEmbedding,
)


def inverse_sqrt_factor(step: int, warmup: int) -> float:
    """The schedule relative to its peak at `warmup`: linear warm-up, then decay with 1/sqrt(step)."""
    step = max(step, 1)
    return min(step / warmup, math.sqrt(warmup / step))


def peak_learning_rate(d_model: int, warmup: int, lr_scale: float = 1.0, lr: float | None = None) -> float:
    """`lr` when given (fairseq's inverse_sqrt), else the paper's lrate at step `warmup`, times `lr_scale`."""
    return lr if lr is not None else lr_scale * d_model**-0.5 * warmup**-0.5


class LearningRateSchedule:
    """The learning rate relative to its peak after `updates_done` updates: inverse_sqrt_factor,
    times a linear cooldown to 0 over the last `cooldown` share of the budget (the training loop sets
    the updates and clock)."""

    def __init__(self, warmup: int, cooldown: float = 0.0, total_updates: int | None = None):
        self.warmup = warmup
        self.cooldown = cooldown
        self.total_updates = total_updates
        self.clock_spent = 0.0  # share of max_minutes spent

    def budget_spent(self, updates_done: int) -> float:
        """The larger of the shares of the updates and of the clock spent."""
        return max(self.clock_spent, updates_done / self.total_updates if self.total_updates else 0.0)

    def __call__(self, updates_done: int) -> float:
        factor = inverse_sqrt_factor(updates_done + 1, self.warmup)
        if self.cooldown:
            factor *= min(1.0, max(0.0, 1.0 - self.budget_spent(updates_done)) / self.cooldown)
        return factor


def make_lr_scheduler(optimizer: torch.optim.Optimizer, schedule: LearningRateSchedule) -> LambdaLR:
    """LambdaLR scaling the optimizer's learning rate (the peak): update s (counted from 1) uses peak *
    factor(s).

    With the paper's peak and no cooldown this is lrate = lr_scale * d_model^-0.5 * min(s^-0.5, s *
    warmup^-1.5).
    """
    # A plain function, not the schedule object: LambdaLR would save and restore the object's fields.
    return LambdaLR(optimizer, lambda updates_done: schedule(updates_done))


@dataclass(frozen=True)
class DropoutRates:
    """5.4 The model's dropout probabilities: on sub-layer outputs and embeddings, on attention weights, and
    inside the feed-forward networks."""

    dropout: float
    attention_dropout: float
    activation_dropout: float


def dropout_for_update(
    updates_done: int, early_dropout_updates: int, early_dropout: float, configured: DropoutRates
) -> DropoutRates:
    """The dropout of the next update: during the first `early_dropout_updates` updates `early_dropout` alone
    (late dropout), then the `configured` rates."""
    if updates_done < early_dropout_updates:
        return DropoutRates(early_dropout, 0.0, 0.0)
    return configured


def set_dropout(model: torch.nn.Module, rates: DropoutRates) -> None:
    """5.4 Change the dropout probabilities of a built model for a while (late dropout switches them mid-run).

    The config keeps the model's own values, so a checkpoint saved meanwhile loads with those.
    """
    for module in model.modules():
        if isinstance(module, (ResidualConnection, TokenEmbedding)):
            module.dropout = rates.dropout
        elif isinstance(module, MultiHeadAttention):
            module.dropout = rates.attention_dropout
        elif isinstance(module, PositionwiseFeedForward):
            module.activation_dropout = rates.activation_dropout
