"""The recipe chosen by corpus size: one table of the settings that depend on how many training pairs a run has.

A small corpus wants a smaller vocabulary, a smaller model, more regularisation and an earlier stop than the
paper's 4.5M pairs (Sennrich and Zhang, 2019; Araabi and Monz, 2020). A training config key set to `auto`
(configs/your-pair.yaml) takes the value of the table's row for the run's training pairs, counted once the data
is loaded and before a tokenizer is trained; a key with a value keeps it. The paper's and Multi30k's configs set
every key, so the table never touches them. The values are first guesses from the literature;
scripts/tools/benchmark_small_corpus.py measures them (docs/your-data.md).
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from hf_vanilla.model.configuration_vanilla import PRESETS, VanillaTransformerConfig

if TYPE_CHECKING:
    from .settings import TrainingConfig

AUTO = "auto"


@dataclass(frozen=True)
class Recipe:
    """One row of the table: the training config keys it fills, under their config names."""

    tokenizer_vocab_size: int
    model_preset: str
    dropout: float
    attention_dropout: float
    activation_dropout: float
    layer_dropout: float
    source_word_dropout: float
    target_word_dropout: float
    label_smoothing: float
    max_tokens: int
    lr: float | None  # None: the paper's d_model^-0.5 * warmup^-0.5
    warmup: int
    early_stopping_patience: int | None
    # Model config fields over the preset, used with it when model_preset is auto.
    model_shape: dict = field(default_factory=dict)


# The keys a config may leave `auto`.
RECIPE_KEYS = tuple(name.name for name in dataclasses.fields(Recipe) if name.name != "model_shape")

# (fewer training pairs than this, the row's name, its recipe); the last row takes any size.
TABLE: tuple[tuple[float, str, Recipe], ...] = (
    (
        10_000,
        "small-corpus",
        Recipe(
            tokenizer_vocab_size=2000,
            model_preset="small",
            model_shape={"d_ff": 512},
            dropout=0.3,
            attention_dropout=0.1,
            activation_dropout=0.3,
            layer_dropout=0.1,
            source_word_dropout=0.1,
            target_word_dropout=0.1,
            label_smoothing=0.2,
            max_tokens=1024,
            lr=1e-3,
            warmup=400,
            early_stopping_patience=5,
        ),
    ),
    (
        50_000,
        "medium-corpus",
        Recipe(
            tokenizer_vocab_size=4000,
            model_preset="small",
            dropout=0.3,
            attention_dropout=0.1,
            activation_dropout=0.1,
            layer_dropout=0.1,
            source_word_dropout=0.1,
            target_word_dropout=0.1,
            label_smoothing=0.2,
            max_tokens=2048,
            lr=1e-3,
            warmup=800,
            early_stopping_patience=5,
        ),
    ),
    (
        500_000,
        "large-corpus",
        Recipe(
            tokenizer_vocab_size=8000,
            model_preset="base",
            dropout=0.2,
            attention_dropout=0.1,
            activation_dropout=0.1,
            layer_dropout=0.0,
            source_word_dropout=0.0,
            target_word_dropout=0.0,
            label_smoothing=0.1,
            max_tokens=4096,
            lr=7e-4,
            warmup=4000,
            early_stopping_patience=10,
        ),
    ),
    (
        float("inf"),
        "paper-scale",
        Recipe(
            tokenizer_vocab_size=32000,
            model_preset="base",
            dropout=0.1,
            attention_dropout=0.0,
            activation_dropout=0.0,
            layer_dropout=0.0,
            source_word_dropout=0.0,
            target_word_dropout=0.0,
            label_smoothing=0.1,
            max_tokens=4096,
            lr=None,
            warmup=4000,
            early_stopping_patience=None,
        ),
    ),
)


def recipe_for(pairs: int) -> tuple[str, Recipe]:
    """The table's row for a corpus of `pairs` training pairs: (its name, its recipe)."""
    return next((name, recipe) for below, name, recipe in TABLE if pairs < below)


def keys_left_auto(config: TrainingConfig) -> list[str]:
    return [name for name in RECIPE_KEYS if getattr(config, name) == AUTO]


def apply_recipe(config: TrainingConfig, pairs: int) -> TrainingConfig:
    """`config` with each key left auto taken from the row for `pairs`, and `corpus_recipe` saying what was chosen.

    A run that cannot count validations (no validation split or save interval) gets no early stopping from the
    table. With model_preset auto, the row's model shape comes under the config's model_overrides."""
    auto = keys_left_auto(config)
    name, recipe = recipe_for(pairs)
    values = {key: getattr(recipe, key) for key in auto}
    validates_at_saves = config.validation_split and (config.save_interval_updates or config.save_interval_minutes)
    if "early_stopping_patience" in values and not validates_at_saves:
        values["early_stopping_patience"] = None
    if "model_preset" in values:
        values["model_overrides"] = {**recipe.model_shape, **config.model_overrides}
    chosen = dataclasses.replace(config, **values)
    return dataclasses.replace(chosen, corpus_recipe=describe(chosen, pairs, name, auto))


def describe(config: TrainingConfig, pairs: int, name: str, auto: list[str]) -> str:
    """One line: the corpus size, the row, the values the run trains with, and which of them the config set."""

    def shape(field: str):
        preset = PRESETS.get(config.model_preset, {})
        return config.model_overrides.get(field, preset.get(field, getattr(VanillaTransformerConfig, field)))

    patience = config.early_stopping_patience
    learning_rate = "the paper's" if config.lr is None else config.lr
    parts = [
        f"BPE {config.tokenizer_vocab_size:,}",
        f"d_model {shape('d_model')}, d_ff {shape('d_ff')}, {shape('encoder_layers')}+{shape('decoder_layers')} layers",
        f"dropout {config.dropout}, attention {config.attention_dropout}, activation {config.activation_dropout}, "
        f"layer {config.layer_dropout}, source words {config.source_word_dropout}, "
        f"target words {config.target_word_dropout}",
        f"label smoothing {config.label_smoothing}",
        f"max_tokens {config.max_tokens:,}",
        f"lr {learning_rate}, warmup {config.warmup}",
        f"early stopping after {patience} validations without improvement" if patience else "no early stopping",
    ]
    given = [key for key in RECIPE_KEYS if key not in auto]
    return f"{pairs:,} pairs: {name} recipe: {', '.join(parts)}" + (
        f" (set in the config: {', '.join(given)})" if given else ""
    )
