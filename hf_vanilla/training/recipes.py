"""The recipe chosen by corpus size: one table of the settings
that depend on how many training pairs a run has.

A small corpus wants a smaller model, a smaller batch, a higher learning rate and an earlier stop than the
paper's 4.5M pairs. A training config key set to `auto` (configs/your-pair.yaml) takes the value of the
table's row for the run's training pairs, counted once the data is loaded and before a tokenizer is trained; a
key with a value keeps it. The paper's and Multi30k's configs set every key, so the table never touches them.

The rows below 50,000 pairs were chosen by measurement (docs/research/small-corpus.md): on seeded 5,000- and
10,000-pair subsets of Multi30k, the heavy regularisation of the low-resource literature (Sennrich and Zhang,
2019; Araabi and Monz, 2020: dropout 0.3, word and layer dropout, label smoothing 0.2, a 2,000-token BPE)
learned several times slower than configs/multi30k-small.yaml's recipe in the updates a CPU gives in 20-30
minutes, so those regularisers stay switches (0 in every row) for longer runs. The small-corpus row is that
recipe with 1,024-token batches (more updates a minute); the medium row is that recipe as it is.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import TYPE_CHECKING

from hf_vanilla.model.configuration_vanilla import PRESETS, VanillaTransformerConfig

if TYPE_CHECKING:
    from hf_vanilla.training.settings import TrainingConfig

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
    early_dropout_updates: int  # late dropout: the config's early_dropout before, `dropout` after
    label_smoothing: float
    max_tokens: int
    lr: float | None  # None: the paper's d_model^-0.5 * warmup^-0.5
    warmup: int
    early_stopping_patience: int | None


# The keys a config may leave `auto`.
RECIPE_KEYS = tuple(name.name for name in dataclasses.fields(Recipe))

NO_EXTRA_DROPOUT = {
    "attention_dropout": 0.0,
    "activation_dropout": 0.0,
    "layer_dropout": 0.0,
    "source_word_dropout": 0.0,
    "target_word_dropout": 0.0,
}

# (fewer training pairs than this, the row's name, its recipe); the last row takes any size.
TABLE: tuple[tuple[float, str, Recipe], ...] = (
    (
        20_000,
        "small-corpus",
        Recipe(
            tokenizer_vocab_size=5000,
            model_preset="small",
            dropout=0.2,
            **NO_EXTRA_DROPOUT,
            early_dropout_updates=2000,
            label_smoothing=0.1,
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
            tokenizer_vocab_size=5000,
            model_preset="small",
            dropout=0.2,
            **NO_EXTRA_DROPOUT,
            early_dropout_updates=2000,
            label_smoothing=0.1,
            max_tokens=2048,
            lr=1e-3,
            warmup=400,
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
            **{**NO_EXTRA_DROPOUT, "attention_dropout": 0.1, "activation_dropout": 0.1},
            early_dropout_updates=0,
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
            **NO_EXTRA_DROPOUT,
            early_dropout_updates=0,
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
    """`config` with each key left auto taken from the row for `pairs`,
    and `corpus_recipe` saying what was chosen.

    A run that cannot count validations (no validation split or save interval) gets no early
    stopping from the table."""
    auto = keys_left_auto(config)
    name, recipe = recipe_for(pairs)
    values = {key: getattr(recipe, key) for key in auto}
    saves_in_run = config.save_interval_updates or config.save_interval_minutes
    validates_at_saves = config.validation_split and saves_in_run
    if "early_stopping_patience" in values and not validates_at_saves:
        values["early_stopping_patience"] = None
    chosen = dataclasses.replace(config, **values)
    return dataclasses.replace(chosen, corpus_recipe=describe(chosen, pairs, name, auto))


def describe(config: TrainingConfig, pairs: int, name: str, auto: list[str]) -> str:
    """One line: the corpus size, the row, the values the run trains with,
    and which of them the config set."""

    def shape(field: str):
        preset = PRESETS.get(config.model_preset, {})
        return config.model_overrides.get(field, preset.get(field, getattr(VanillaTransformerConfig, field)))

    patience = config.early_stopping_patience
    learning_rate = "the paper's" if config.lr is None else config.lr
    early_dropout = (
        f" ({config.early_dropout} for the first {config.early_dropout_updates:,} updates)"
        if config.early_dropout_updates
        else ""
    )
    parts = [
        f"BPE {config.tokenizer_vocab_size:,}",
        f"d_model {shape('d_model')}, d_ff {shape('d_ff')}, "
        f"{shape('encoder_layers')}+{shape('decoder_layers')} layers",
        f"dropout {config.dropout}, attention {config.attention_dropout}, "
        f"activation {config.activation_dropout}, "
        f"layer {config.layer_dropout}, source words {config.source_word_dropout}, "
        f"target words {config.target_word_dropout}" + early_dropout,
        f"label smoothing {config.label_smoothing}",
        f"max_tokens {config.max_tokens:,}",
        f"lr {learning_rate}, warmup {config.warmup}",
        f"early stopping after {patience} validations without improvement"
        if patience
        else "no early stopping",
    ]
    given = [key for key in RECIPE_KEYS if key not in auto]
    return f"{pairs:,} pairs: {name} recipe: {', '.join(parts)}" + (
        f" (set in the config: {', '.join(given)})" if given else ""
    )
