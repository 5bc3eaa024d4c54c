"""`TrainingConfig`: every setting of a training run, with its help text, read from YAML and command-line
flags.

Defaults are the paper's recipe (section 5) for the base model on the public Multi30k (`bentrevett/multi30k`);
configs/*.yaml set the rest. Each field is also a flag of the training scripts, with its help line
(`cli.add_training_config_arguments`).
"""

from __future__ import annotations

import os
import types
import typing
from dataclasses import dataclass, field
from pathlib import Path

import yaml

from hf_vanilla.data.corpus import dataset_spec
from hf_vanilla.precision import MIXED_PRECISION_DTYPES
from hf_vanilla.training.recipes import AUTO, RECIPE_KEYS

PUBLIC_MULTI30K = "bentrevett/multi30k"
BY_SIZE = f"; {AUTO}: by corpus size (training/recipes.py)"


class TrainingError(Exception):
    """A known problem with the inputs or the run, told in one line (scripts print it without a traceback)."""


# The sections of the training flags in --help, in order, each with what it holds.
SETTING_GROUPS = {
    "data": "the corpus, its splits and cleaning",
    "model": "the tokenizer, the model's shape and its dropout",
    "optimisation": "the loss, batches, Adam and the seed",
    "schedule": "the learning rate over the run, and when the run stops (whichever limit comes first)",
    "hardware": "precision, batch shapes, loader processes, compilation",
    "logging": "training log records and TensorBoard",
    "checkpoints": "the run directory, saves with validation, averaging, and the decoding defaults each "
    "checkpoint carries",
}


def setting(default, help: str, group: str):
    """A dataclass field whose flag shows `help` in the --help section `group` of `SETTING_GROUPS`
    (`cli.add_training_config_arguments`)."""
    if group not in SETTING_GROUPS:
        raise ValueError(f"setting group {group!r} is not one of {list(SETTING_GROUPS)}")
    metadata = {"help": help, "group": group}
    if isinstance(default, dict):
        return field(default_factory=lambda: dict(default), metadata=metadata)
    return field(default=default, metadata=metadata)


@dataclass
class TrainingConfig:
    """Everything a run needs. Defaults are the paper's recipe (section 5) for the base model."""

    # Data: the corpus, its splits and cleaning
    dataset: str = setting(
        PUBLIC_MULTI30K,
        "the data: a Hub id or folder, a file (.jsonl .json .csv .tsv .parquet, compressed or not; "
        "FILE#en=3,fr=4 for a TSV/CSV without a header), or two aligned text files as PATTERN.{lang}; a file "
        "alone is the training split, SPLIT=FILE names another (several words on the command line, or a "
        "mapping in YAML)",
        group="data",
    )
    dataset_config: str | None = setting(None, "Hub dataset config, e.g. de-en for wmt/wmt14", group="data")
    source_lang: str = setting(
        "", "source language code (a column or translation key of the dataset)", group="data"
    )
    target_lang: str = setting("", "target language code", group="data")
    train_split: str = setting("train", "split to train on", group="data")
    validation_split: str | None = setting(
        "validation", "split to validate on at each save; null: none", group="data"
    )
    holdout: float | None = setting(
        None,
        "where the data has no validation or test split, hold out this many training pairs for each (a share "
        "when below 1), by seed, into RUN/heldout/; null: 1,000 or a tenth, whichever is fewer; 0: hold out "
        "none",
        group="data",
    )
    validation_max_sentences: int | None = setting(
        None, "validate on the first N sentences only", group="data"
    )
    clean_max_tokens: int = setting(
        250,
        "drop training and validation pairs with a side longer than this many tokens (fairseq's 250)",
        group="data",
    )
    clean_max_length_ratio: float = setting(
        9.0,
        "drop training and validation pairs whose token counts differ more than this (Moses' 9)",
        group="data",
    )
    right_to_left: bool = setting(
        False,
        "train on every split with the target's words reversed, so the model writes its translations last "
        "word first (its saved config says so: translations come back in reading order): a right-to-left "
        "model, for reranking a left-to-right one's n-best lists (--rerank-right-to-left; not in the paper)",
        group="data",
    )
    preprocessing_workers: int | None = setting(
        None, "processes for cleaning and tokenizing (datasets.map)", group="data"
    )
    # Model: the tokenizer, the shape and its dropout
    tokenizer: str = setting(
        "", "tokenizer directory; a joint BPE is trained on the training split if missing", group="model"
    )
    tokenizer_vocab_size: int | str = setting(
        8000, "vocabulary size of a newly trained joint BPE" + BY_SIZE, group="model"
    )
    init_from: str | None = setting(
        None,
        "start from these saved weights and their tokenizer (directory or Hub id): fine-tuning",
        group="model",
    )
    model_preset: str = setting(
        "base",
        "model shape: tiny, small, base or big (VanillaTransformerConfig); auto: by corpus size, with its "
        "model_overrides under the config's",
        group="model",
    )
    model_overrides: dict = setting(
        {}, "model config fields over the preset, e.g. {d_model: 192}", group="model"
    )
    dropout: float | str = setting(
        0.1, "residual and embedding dropout (section 5.4)" + BY_SIZE, group="model"
    )
    attention_dropout: float | str = setting(
        0.0, "dropout on attention weights (not in the paper)" + BY_SIZE, group="model"
    )
    activation_dropout: float | str = setting(
        0.0, "dropout after the feed-forward ReLU (not in the paper)" + BY_SIZE, group="model"
    )
    layer_dropout: float | str = setting(
        0.0,
        "LayerDrop (Fan et al., 2019; not in the paper): each layer skipped with this probability" + BY_SIZE,
        group="model",
    )
    source_word_dropout: float | str = setting(
        0.0,
        "each source token's embedding zeroed with this probability (not in the paper)" + BY_SIZE,
        group="model",
    )
    target_word_dropout: float | str = setting(
        0.0,
        "each decoder input token's embedding zeroed with this probability (not in the paper)" + BY_SIZE,
        group="model",
    )
    early_dropout_updates: int | str = setting(
        0,
        "late dropout (Liu et al., 2023): the first N updates use early_dropout and no attention or "
        "activation dropout; 0: the configured dropout from the first update, as in the paper" + BY_SIZE,
        group="model",
    )
    early_dropout: float = setting(0.1, "dropout of the first early_dropout_updates updates", group="model")
    # Optimisation: the loss, batches and Adam (sections 5.1, 5.3, 5.4)
    label_smoothing: float | str = setting(
        0.1, "label smoothing of the training loss (section 5.4)" + BY_SIZE, group="optimisation"
    )
    rdrop_alpha: float = setting(
        0.0,
        "R-Drop (Liang et al., 2021; not in the paper): each batch runs twice with its own dropout and the "
        "loss adds alpha/4 x the two predictions' symmetric KL divergence per target token (the weight of "
        "fairseq's --rdrop-alpha; the logged training loss includes it); twice the compute an update; 0: off",
        group="optimisation",
    )
    max_tokens: int | str = setting(
        4096, "padded tokens a side per batch and process (section 5.1)" + BY_SIZE, group="optimisation"
    )
    tokens_per_update: int | None = setting(
        None, "accumulate batches to about this many tokens per update", group="optimisation"
    )
    adam_beta1: float = setting(0.9, "Adam beta1", group="optimisation")
    adam_beta2: float = setting(0.98, "Adam beta2", group="optimisation")
    adam_eps: float = setting(1e-9, "Adam epsilon", group="optimisation")
    weight_decay: float = setting(0.0, "Adam weight decay", group="optimisation")
    clip_grad_norm: float | None = setting(
        None, "clip the gradient norm to this; null: no clipping", group="optimisation"
    )
    seed: int = setting(1, "seed of the weights, batches and dropout", group="optimisation")
    # Schedule: the learning rate over the run, and when it stops (whichever limit comes first)
    warmup: int | str = setting(
        4000, "warm-up updates of the inverse-sqrt schedule" + BY_SIZE, group="schedule"
    )
    lr_scale: float = setting(
        1.0, "factor on the paper's learning rate (the Annotated Transformer's `factor`)", group="schedule"
    )
    lr: float | str | None = setting(
        None, "peak learning rate replacing the paper's (fairseq inverse_sqrt); null: the paper's" + BY_SIZE,
        group="schedule",
    )
    lr_cooldown: float = setting(
        0.0, "over this last share of the budget the learning rate falls linearly to 0 (Hagele et al., 2024)",
        group="schedule",
    )
    max_steps: int | None = setting(None, "stop after this many updates", group="schedule")
    max_epochs: int | None = setting(None, "stop after this many epochs", group="schedule")
    max_minutes: float | None = setting(
        None, "stop after this much wall clock (resumes add up), then save", group="schedule"
    )
    early_stopping_patience: int | str | None = setting(
        None,
        "stop once the validation score that picks checkpoint_best (BLEU, else loss) has not improved for N "
        "validations in a row (fairseq's --patience), and average the checkpoints around the best; null: "
        "never" + BY_SIZE,
        group="schedule",
    )
    # Hardware: precision, batch shapes, loader processes, compilation
    mixed_precision: str = setting(
        "auto",
        "auto (bf16 where the GPU or CPU runs it natively, fp16 on a GPU without bf16, else fp32), "
        "no, bf16 or fp16",
        group="hardware",
    )
    shape_buckets: str = setting(
        "auto",
        "auto (on a GPU, off on a CPU), yes or no: batches of a few fixed shapes (length buckets, fixed "
        "rows), which a GPU runs at its pace; the CPU keeps batches padded to their longest example",
        group="hardware",
    )
    dataloader_workers: str = setting(
        "auto",
        "auto or N: processes that read and pad the training batches while the model trains (torch "
        "DataLoader workers); auto: none on a CPU, whose cores train the model, and on a GPU one fewer than "
        "the machine's cores per local process, at most 4",
        group="hardware",
    )
    compile: str = setting(
        "auto",
        "auto (off: the compile time outweighs the gain on a Multi30k run; docs/training.md), yes or no: "
        "the update's forward and loss through torch.compile, one graph for every batch shape",
        group="hardware",
    )
    # Logging
    log_interval: int = setting(100, "updates between training log records", group="logging")
    tensorboard: bool = setting(
        True, "also log to TensorBoard (needs the tensorboard package)", group="logging"
    )
    # Checkpoints: the run directory, saves and validation, averaging, and the decoding defaults
    # written to each checkpoint's generation_config.json (section 6.1)
    output_dir: str = setting("", "run directory: checkpoints, logs, the saved config", group="checkpoints")
    save_interval_updates: int | None = setting(
        None, "save and validate every N updates", group="checkpoints"
    )
    save_interval_minutes: float | None = setting(
        None, "save and validate every N minutes", group="checkpoints"
    )
    keep_checkpoints: int | None = setting(
        None, "numbered checkpoints kept; null keeps all", group="checkpoints"
    )
    average_last: int | None = setting(
        None, "at the end, average the last N numbered checkpoints (section 6.1)", group="checkpoints"
    )
    validation_bleu: bool = setting(
        True, "greedy sacreBLEU at each save; the best checkpoint is chosen by it", group="checkpoints"
    )
    corpus_recipe: str | None = setting(
        None,
        "written by the run: what the corpus-size table chose for the keys left auto (not a setting)",
        group="checkpoints",
    )
    num_beams: int = setting(4, "beam size saved as the checkpoint's decoding default", group="checkpoints")
    length_penalty: float = setting(
        0.6, "length penalty saved as the checkpoint's decoding default", group="checkpoints"
    )

    def given(self, name: str):
        """The key's value, None while it is left auto (the corpus-size table fills it when the run
        starts)."""
        value = getattr(self, name)
        return None if value == AUTO and name in RECIPE_KEYS else value

    def check(self) -> None:
        """Raise TrainingError naming the first key whose value cannot work."""
        self._check_required()
        self._check_values()
        self._check_combinations()

    def _check_required(self) -> None:
        """The keys a run cannot do without: its data, tokenizer (unless fine-tuning), output and budget."""
        unless_fine_tuning = () if self.init_from else ("tokenizer",)
        required = ("dataset", "source_lang", "target_lang", "output_dir", *unless_fine_tuning)
        for name in required:
            if not getattr(self, name):
                raise TrainingError(f"{name} is required")
        if self.source_lang == self.target_lang:
            raise TrainingError(f"source_lang and target_lang are both {self.source_lang!r}")
        if self.max_steps is None and self.max_epochs is None and self.max_minutes is None:
            raise TrainingError("set at least one of max_steps, max_epochs, max_minutes")

    def _check_values(self) -> None:
        """Each key's value on its own: choices, signs and ranges."""
        precisions = ("auto", *MIXED_PRECISION_DTYPES)
        if self.mixed_precision not in precisions:
            raise TrainingError(
                f"mixed_precision must be one of {', '.join(precisions)}, got {self.mixed_precision!r}"
            )
        for name in ("shape_buckets", "compile"):
            if getattr(self, name) not in ("auto", "yes", "no"):
                raise TrainingError(f"{name} must be auto, yes or no, got {getattr(self, name)!r}")
        if self.dataloader_workers != "auto" and not str(self.dataloader_workers).isdigit():
            raise TrainingError(
                f"dataloader_workers must be auto or a whole number, got {self.dataloader_workers!r}"
            )
        for name in (
            "max_tokens", "warmup", "log_interval", "tokenizer_vocab_size", "num_beams", "clean_max_tokens"
        ):
            if self.given(name) is not None and self.given(name) <= 0:
                raise TrainingError(f"{name} must be positive, got {getattr(self, name)}")
        for name in (
            "tokens_per_update",
            "max_steps",
            "max_epochs",
            "max_minutes",
            "early_stopping_patience",
            "lr",
            "clip_grad_norm",
            "save_interval_updates",
            "save_interval_minutes",
            "keep_checkpoints",
            "average_last",
            "validation_max_sentences",
        ):
            if self.given(name) is not None and self.given(name) <= 0:
                raise TrainingError(f"{name} must be positive or null, got {getattr(self, name)}")
        if self.holdout is not None and self.holdout < 0:
            raise TrainingError(f"holdout must be 0 or more (pairs, or a share below 1), got {self.holdout}")
        if self.given("early_dropout_updates") is not None and self.early_dropout_updates < 0:
            raise TrainingError(f"early_dropout_updates must be 0 or more, got {self.early_dropout_updates}")
        if not 0 <= self.early_dropout < 1:  # the model config checks the other dropout values
            raise TrainingError(f"early_dropout must be in [0, 1), got {self.early_dropout}")
        if self.rdrop_alpha < 0:
            raise TrainingError(f"rdrop_alpha must be 0 (off) or more, got {self.rdrop_alpha}")
        if not 0 <= self.lr_cooldown <= 1:
            raise TrainingError(
                f"lr_cooldown must be a share of the budget in [0, 1], got {self.lr_cooldown}"
            )

    def _check_combinations(self) -> None:
        """Keys that must agree: early stopping with validation and saves, averaging with what is kept."""
        patience = self.given("early_stopping_patience")
        if patience is not None and self.validation_split is None:
            raise TrainingError("early_stopping_patience counts validations: set validation_split")
        if patience is not None and self.save_interval_updates is None and self.save_interval_minutes is None:
            raise TrainingError(
                "early_stopping_patience counts validations, which come at the saves: set "
                "save_interval_updates or save_interval_minutes"
            )
        if patience is not None and self.average_last and self.average_last > patience + 1:
            raise TrainingError(
                f"average_last ({self.average_last}) can exceed the checkpoints of a run that early stopping "
                f"ends (at least early_stopping_patience + 1 = {patience + 1}): lower average_last or raise "
                "early_stopping_patience"
            )
        if self.keep_checkpoints and self.average_last and self.keep_checkpoints < self.average_last:
            raise TrainingError(
                f"keep_checkpoints ({self.keep_checkpoints}) must be at least average_last "
                f"({self.average_last})"
            )


# Keys that configs written by earlier versions hold under another name: the error says the new one.
RENAMED_KEYS = {"patience": "early_stopping_patience"}


def load_training_config(path: str | os.PathLike | None = None, **overrides) -> TrainingConfig:
    """A TrainingConfig from a YAML file (if given) with `overrides` on top; values are coerced to the field
    types.

    Raises TrainingError for a missing file, an unknown key or a value of the wrong type.
    """
    values = {}
    if path is not None:
        try:
            values = yaml.safe_load(Path(path).read_text()) or {}
        except OSError as err:
            raise TrainingError(f"cannot read config file {path}: {err.strerror}") from err
        if not isinstance(values, dict):
            raise TrainingError(f"config file {path} must hold a mapping of keys to values")
    values.update(overrides)
    if "dataset" in values and not isinstance(values["dataset"], str | None):
        values["dataset"] = dataset_spec(values["dataset"])  # a mapping of split -> file, or a flag's words
    types_of = typing.get_type_hints(TrainingConfig)
    unknown = sorted(set(values) - set(types_of))
    if renamed := [f"{key} is now {RENAMED_KEYS[key]}" for key in unknown if key in RENAMED_KEYS]:
        raise TrainingError(f"config keys renamed: {'; '.join(renamed)} (edit {path or 'the flags'})")
    if unknown:
        raise TrainingError(f"unknown config keys {unknown}; known keys: {sorted(types_of)}")
    return TrainingConfig(**{name: _coerce(name, value, types_of[name]) for name, value in values.items()})


def _coerce(name: str, value, annotation):
    """`value` as the field type: YAML 1.1 reads 1e-9 as a string, CLI flags arrive as strings."""
    allowed = typing.get_args(annotation) if isinstance(annotation, types.UnionType) else (annotation,)
    if value == AUTO and name in RECIPE_KEYS:
        return value
    if value is None:
        if type(None) in allowed:
            return None
        raise TrainingError(f"{name} cannot be null")
    kind = next(kind for kind in allowed if kind is not type(None))
    try:
        if kind is bool:
            if isinstance(value, str) and value.lower() in ("true", "false"):
                return value.lower() == "true"
            if not isinstance(value, bool):
                raise ValueError
            return value
        if kind is dict:
            value = yaml.safe_load(value) if isinstance(value, str) else value
            if not isinstance(value, dict):
                raise ValueError
            return value
        if kind is int and isinstance(value, float) and not value.is_integer():
            raise ValueError
        return kind(value)
    except (TypeError, ValueError):
        raise TrainingError(f"{name} must be {kind.__name__}, got {value!r}") from None
