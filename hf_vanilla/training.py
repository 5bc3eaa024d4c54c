"""Training with the paper's recipe (section 5) through accelerate: CPU, one GPU, several GPUs or nodes.

Section 5.1 token batches, 5.3 Adam(0.9, 0.98, 1e-9) with lrate = d_model^-0.5 * min(step^-0.5,
step * warmup^-1.5), 5.4 dropout and label smoothing. Every value is a `TrainingConfig` field, which a
YAML file (configs/*.yaml) and command-line flags (scripts/train.py) set.

How one update is made: the global batch is `num_processes * accumulation_steps` token batches of at
most `max_tokens` padded tokens a side. Each micro-batch's summed loss is divided by the number of target
tokens of the whole global batch (counted across processes before the update), so the gradient is that
of the mean loss per target token however the batch is split between processes and accumulation steps.
"""

from __future__ import annotations

import copy
import dataclasses
import json
import math
import os
import shutil
import time
import types
import typing
from dataclasses import dataclass, field
from itertools import chain, islice
from pathlib import Path

import datasets
import numpy as np
import torch
import yaml
from accelerate import Accelerator, DataLoaderConfiguration
from accelerate.logging import get_logger
from accelerate.utils import gather_object, is_tensorboard_available, set_seed
from torch.optim.lr_scheduler import LambdaLR
from torch.utils.data import DataLoader
from tqdm.auto import tqdm
from transformers import AutoTokenizer, GenerationConfig, PreTrainedTokenizerBase

from .checkpoints import (
    average_checkpoints,
    numbered_checkpoints,
    publish_directory,
    remove_stale_staging,
    staging_directory,
)
from .configuration_vanilla import SIZE_FIELDS, VanillaTransformerConfig
from .data import (
    TokenBatchSampler,
    clean_translation_pairs,
    example_lengths,
    load_translation_split,
    make_collator,
    tokenize_pairs,
)
from .evaluation import score_translations, translate_sentences, write_text_atomic
from .modeling_vanilla import (
    AUTO_ATTENTION,
    VanillaTransformerForConditionalGeneration,
    label_smoothed_cross_entropy,
)
from .tokenization import (
    check_tokenizer_matches_model,
    config_kwargs_from_tokenizer,
    save_tokenizer,
    train_tokenizer,
)

logger = get_logger(__name__)  # logs on the main process only

LOG_FILE = "train_log.jsonl"
CONFIG_FILE = "training_config.yaml"
LAST, BEST, AVERAGE = "checkpoint_last", "checkpoint_best", "checkpoint_average"
TRAINING_STATE = "training_state"
# A checkpoint only resumes into a model whose weights have the same shapes.
SHAPE_FIELDS = (*SIZE_FIELDS, "pre_layernorm")


class TrainingError(Exception):
    """A known problem with the inputs or the run, told in one line (scripts print it without a traceback)."""


@dataclass
class TrainingConfig:
    """Everything a run needs. Defaults are the paper's recipe (section 5) for the base model."""

    # Data
    dataset: str = ""  # Hub name or local path (datasets.load_dataset)
    dataset_config: str | None = None  # Hub config, e.g. "de-en" for wmt14
    source_lang: str = "de"
    target_lang: str = "en"
    train_split: str = "train"
    validation_split: str | None = "validation"
    clean_max_words: int = 80  # training pairs with a longer side are dropped (Moses clean-corpus-n)
    clean_max_length_ratio: float = 9.0
    preprocessing_workers: int | None = None
    # Tokenizer: a directory AutoTokenizer loads; trained on the training split when it does not exist
    tokenizer: str = ""
    tokenizer_vocab_size: int = 8000
    # Model: a preset of VanillaTransformerConfig, fields overridden by model_overrides, then these
    model_preset: str = "base"
    model_overrides: dict = field(default_factory=dict)
    dropout: float = 0.1
    attention_dropout: float = 0.0
    activation_dropout: float = 0.0
    # Late dropout (Liu et al., 2023): the first N updates use early_dropout and no attention or activation
    # dropout, the rest the three values above. 0: the values above from the first update, as in the paper.
    early_dropout_updates: int = 0
    early_dropout: float = 0.1
    label_smoothing: float = 0.1
    # Batches: padded tokens a side per batch and process; accumulation reaches tokens_per_update
    max_tokens: int = 4096
    tokens_per_update: int | None = None
    # Optimizer and schedule (section 5.3)
    adam_beta1: float = 0.9
    adam_beta2: float = 0.98
    adam_eps: float = 1e-9
    weight_decay: float = 0.0
    warmup: int = 4000
    lr_scale: float = 1.0  # the Annotated Transformer's `factor` on the paper's lrate
    lr: float | None = None  # peak learning rate (fairseq inverse_sqrt); replaces the paper's peak
    # Cooldown: over the last lr_cooldown share of the run's budget (max_steps, max_epochs or max_minutes,
    # whichever runs out first) the learning rate falls linearly to 0 (Hagele et al., 2024). 0: the paper's
    # schedule to the end. With max_minutes it follows the clock, like the stopping point does.
    lr_cooldown: float = 0.0
    clip_grad_norm: float | None = None
    # Stopping: whichever comes first
    max_steps: int | None = None
    max_epochs: int | None = None
    max_minutes: float | None = None  # wall clock of the whole run (resumes add up), then save and stop
    mixed_precision: str = "no"  # "no", "bf16" (CPU too) or "fp16"
    seed: int = 1
    # Output: checkpoints, validation at each save, logs
    output_dir: str = ""
    save_interval_updates: int | None = None
    save_interval_minutes: float | None = None
    keep_checkpoints: int | None = None  # numbered checkpoints kept; None keeps all
    average_last: int | None = None  # at the end, average the last N numbered checkpoints (section 6.1)
    validation_max_sentences: int | None = None  # validate on the first N sentences only
    validation_bleu: bool = True  # greedy sacreBLEU at each save; the best checkpoint is chosen by it
    log_interval: int = 100
    tensorboard: bool = True
    # Decoding written to each model's generation_config.json (section 6.1)
    num_beams: int = 4
    length_penalty: float = 0.6
    max_new_tokens: int = 256

    def check(self) -> None:
        """Raise TrainingError naming the first key whose value cannot work."""
        for name in ("dataset", "tokenizer", "output_dir"):
            if not getattr(self, name):
                raise TrainingError(f"{name} is required")
        if self.source_lang == self.target_lang:
            raise TrainingError(f"source_lang and target_lang are both {self.source_lang!r}")
        if self.max_steps is None and self.max_epochs is None and self.max_minutes is None:
            raise TrainingError("set at least one of max_steps, max_epochs, max_minutes")
        if self.mixed_precision not in ("no", "bf16", "fp16"):
            raise TrainingError(f"mixed_precision must be no, bf16 or fp16, got {self.mixed_precision!r}")
        for name in (
            "max_tokens",
            "warmup",
            "log_interval",
            "tokenizer_vocab_size",
            "num_beams",
            "max_new_tokens",
        ):
            if getattr(self, name) <= 0:
                raise TrainingError(f"{name} must be positive, got {getattr(self, name)}")
        for name in (
            "tokens_per_update",
            "max_steps",
            "max_epochs",
            "max_minutes",
            "lr",
            "clip_grad_norm",
            "save_interval_updates",
            "save_interval_minutes",
            "keep_checkpoints",
            "average_last",
            "validation_max_sentences",
        ):
            if getattr(self, name) is not None and getattr(self, name) <= 0:
                raise TrainingError(f"{name} must be positive or null, got {getattr(self, name)}")
        if self.early_dropout_updates < 0:
            raise TrainingError(f"early_dropout_updates must be 0 or more, got {self.early_dropout_updates}")
        if not 0 <= self.early_dropout < 1:  # the model config checks the other dropout values
            raise TrainingError(f"early_dropout must be in [0, 1), got {self.early_dropout}")
        if not 0 <= self.lr_cooldown <= 1:
            raise TrainingError(
                f"lr_cooldown must be a share of the budget in [0, 1], got {self.lr_cooldown}"
            )
        if self.keep_checkpoints and self.average_last and self.keep_checkpoints < self.average_last:
            raise TrainingError(
                f"keep_checkpoints ({self.keep_checkpoints}) must be at least average_last ({self.average_last})"
            )


def load_training_config(path: str | os.PathLike | None = None, **overrides) -> TrainingConfig:
    """A TrainingConfig from a YAML file (if given) with `overrides` on top; values are coerced to the field types.

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
    types_of = typing.get_type_hints(TrainingConfig)
    unknown = sorted(set(values) - set(types_of))
    if unknown:
        raise TrainingError(f"unknown config keys {unknown}; known keys: {sorted(types_of)}")
    return TrainingConfig(**{name: _coerce(name, value, types_of[name]) for name, value in values.items()})


def _coerce(name: str, value, annotation):
    """`value` as the field type: YAML 1.1 reads 1e-9 as a string, CLI flags arrive as strings."""
    allowed = typing.get_args(annotation) if isinstance(annotation, types.UnionType) else (annotation,)
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


# Learning rate (section 5.3)


def inverse_sqrt_factor(step: int, warmup: int) -> float:
    """The schedule relative to its peak at `warmup`: linear warm-up, then decay with 1/sqrt(step)."""
    step = max(step, 1)
    return min(step / warmup, math.sqrt(warmup / step))


def peak_learning_rate(d_model: int, warmup: int, lr_scale: float = 1.0, lr: float | None = None) -> float:
    """`lr` when given (fairseq's inverse_sqrt), else the paper's lrate at step `warmup`, times `lr_scale`."""
    return lr if lr is not None else lr_scale * d_model**-0.5 * warmup**-0.5


class LearningRateSchedule:
    """The learning rate relative to its peak after `updates_done` updates: inverse_sqrt_factor, times a linear
    cooldown to 0 over the last `cooldown` share of the budget (the training loop sets the updates and clock)."""

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
    """LambdaLR scaling the optimizer's learning rate (the peak): update s (counted from 1) uses peak * factor(s).

    With the paper's peak and no cooldown this is lrate = lr_scale * d_model^-0.5 * min(s^-0.5, s * warmup^-1.5).
    """
    # A plain function, not the schedule object: LambdaLR would save and restore the object's fields.
    return LambdaLR(optimizer, lambda updates_done: schedule(updates_done))


# Loss (section 5.4)


def label_smoothed_loss(
    model: torch.nn.Module, batch: dict[str, torch.Tensor], smoothing: float, divisor: float | torch.Tensor
) -> torch.Tensor:
    """5.4 Label-smoothed cross-entropy of a collated batch (with decoder_input_ids), summed, then / divisor.

    From the logits: the model's own loss is plain cross-entropy, so it is not asked for.
    """
    inputs = {name: tensor for name, tensor in batch.items() if name != "labels"}
    logits = model(**inputs, use_cache=False).logits
    return label_smoothed_cross_entropy(logits.flatten(0, 1), batch["labels"].flatten(), smoothing, divisor)


# Batches


class UpdateBatchSampler:
    """This process's token batches, `accumulation_steps` in a row for each update.

    The global batch of an update is `num_processes * accumulation_steps` consecutive batches of one
    TokenBatchSampler split into that many replicas; process p takes replicas p*A .. p*A + A-1. So the
    batches of an update are the same whichever way they are split: 2 processes x 1 step and 1 process x
    2 steps train on the same batches. `set_epoch(epoch, first_update)` starts an epoch part-way (resume).
    """

    def __init__(
        self,
        lengths,
        max_tokens: int,
        accumulation_steps: int,
        num_processes: int,
        process_index: int,
        seed: int,
    ):
        replicas = num_processes * accumulation_steps
        try:
            first = TokenBatchSampler(
                lengths,
                max_tokens,
                shuffle=True,
                seed=seed,
                num_replicas=replicas,
                rank=process_index * accumulation_steps,
            )
        except ValueError as err:
            raise TrainingError(f"training data too small for {replicas} batches per update: {err}") from err
        # The replicas differ only in rank: share the sorted lengths rather than sort again.
        self.samplers = [first]
        for slot in range(1, accumulation_steps):
            self.samplers.append(copy.copy(first))
            self.samplers[-1].rank = first.rank + slot
        self.first_update = 0

    @property
    def updates_per_epoch(self) -> int:
        return len(self.samplers[0])

    def set_epoch(self, epoch: int, first_update: int = 0) -> None:
        for sampler in self.samplers:
            sampler.set_epoch(epoch)
        self.first_update = first_update

    def __len__(self) -> int:
        return (self.updates_per_epoch - self.first_update) * len(self.samplers)

    def __iter__(self):
        return chain.from_iterable(islice(zip(*self.samplers, strict=True), self.first_update, None))


@dataclass
class TrainingProgress:
    """Where a run stands; saved with the training state so that a resumed run continues from there."""

    step: int = 0
    epoch: int = 0
    updates_in_epoch: int = 0
    elapsed_seconds: float = 0.0
    last_save_seconds: float = 0.0
    best_metric: float | None = None
    # Totals since the last log record, so that a resumed run logs the same averages.
    interval_loss: float = 0.0
    interval_tokens: int = 0
    interval_seconds: float = 0.0

    def state_dict(self) -> dict:
        return dataclasses.asdict(self)

    def load_state_dict(self, state: dict) -> None:
        for name, value in state.items():
            setattr(self, name, value)


@dataclass
class ValidationSet:
    tokenized: datasets.Dataset  # input_ids and labels
    lengths: np.ndarray
    sources: list[str]
    references: list[str]


# The run


def train(config: TrainingConfig, resume: bool = False) -> Path:
    """Train, saving checkpoints into `config.output_dir`; return that directory.

    Raises TrainingError for known problems (missing dataset or language, tokenizer/model mismatch,
    unwritable output, an existing run without `resume`, a NaN loss); nothing half-written is left.
    """
    config.check()
    run_started = time.monotonic()
    output_dir = Path(config.output_dir)
    accelerator = Accelerator(
        mixed_precision=config.mixed_precision,
        # Our batches are already global per update: one scheduler step per optimizer step, not one per process.
        dataloader_config=DataLoaderConfiguration(split_batches=True),
        log_with="tensorboard" if config.tensorboard and is_tensorboard_available() else None,
        project_dir=str(output_dir),
    )
    accumulation_steps = max(
        1, round((config.tokens_per_update or 0) / (config.max_tokens * accelerator.num_processes))
    )
    accelerator.gradient_accumulation_steps = accumulation_steps
    set_seed(config.seed)

    with accelerator.main_process_first():
        tokenizer = _load_or_train_tokenizer(config)
        model_config = _model_config(config, tokenizer)
        train_data, validation = _load_data(config, tokenizer, model_config.max_position_embeddings)
    _prepare_output_dir(config, output_dir, resume, model_config, tokenizer, accelerator)

    model = VanillaTransformerForConditionalGeneration(model_config)
    model.set_attn_implementation(AUTO_ATTENTION)
    model.generation_config = GenerationConfig(
        num_beams=config.num_beams,
        length_penalty=config.length_penalty,
        max_new_tokens=config.max_new_tokens,
        **{
            name: getattr(model_config, name)
            for name in ("bos_token_id", "eos_token_id", "pad_token_id", "decoder_start_token_id")
        },
    )
    optimizer = torch.optim.Adam(
        model.parameters(),
        lr=peak_learning_rate(model_config.d_model, config.warmup, config.lr_scale, config.lr),
        betas=(config.adam_beta1, config.adam_beta2),
        eps=config.adam_eps,
        weight_decay=config.weight_decay,
    )
    schedule = LearningRateSchedule(config.warmup, config.lr_cooldown)
    scheduler = make_lr_scheduler(optimizer, schedule)
    model, optimizer, scheduler = accelerator.prepare(model, optimizer, scheduler)
    progress = TrainingProgress()
    accelerator.register_for_checkpointing(progress)
    if resume:
        accelerator.load_state(str(output_dir / LAST / TRAINING_STATE))
        logger.info("Resumed %s at update %d", output_dir, progress.step)
    else:
        # Dropout draws differ between processes; the initial weights above do not.
        set_seed(config.seed, device_specific=True)
    if accelerator.is_main_process:
        _truncate_log(output_dir / LOG_FILE, progress.step)
    if accelerator.log_with:
        accelerator.init_trackers("tensorboard")

    sampler = UpdateBatchSampler(
        example_lengths(train_data),
        config.max_tokens,
        accumulation_steps,
        accelerator.num_processes,
        accelerator.process_index,
        config.seed,
    )
    # Not prepared by accelerate: the sampler already shards, and batches are moved to the device below.
    # Its own generator: drawing its base seed from the global one would shift dropout after a resume.
    loader = DataLoader(
        train_data,
        batch_sampler=sampler,
        collate_fn=make_collator(tokenizer, accelerator.unwrap_model(model)),
        generator=torch.Generator(),
    )
    logger.info(
        "%d parameters; %d updates an epoch of %d batches x %d processes x %d accumulation steps, <= %d tokens each",
        sum(parameter.numel() for parameter in model.parameters()),
        sampler.updates_per_epoch,
        accumulation_steps * accelerator.num_processes,
        accelerator.num_processes,
        accumulation_steps,
        config.max_tokens,
    )
    session = _Session(
        config,
        accelerator,
        model,
        optimizer,
        scheduler,
        schedule,
        tokenizer,
        validation,
        progress,
        run_started,
    )
    session.run(loader, sampler)
    if accelerator.is_main_process and config.average_last:
        checkpoints = numbered_checkpoints(output_dir)[-config.average_last :]
        average_checkpoints(checkpoints, output_dir / AVERAGE)
        logger.info("Averaged %s into %s", ", ".join(path.name for path in checkpoints), output_dir / AVERAGE)
    accelerator.wait_for_everyone()
    accelerator.end_training()
    logger.info("Checkpoints in %s", output_dir)
    return output_dir


@dataclass
class _Session:
    """The training loop and its saves, over the objects `train` prepared."""

    config: TrainingConfig
    accelerator: Accelerator
    model: torch.nn.Module
    optimizer: torch.optim.Optimizer
    scheduler: LambdaLR  # as accelerate wraps it
    schedule: LearningRateSchedule  # the scheduler's function, which reads the budget this loop sets
    tokenizer: PreTrainedTokenizerBase
    validation: ValidationSet
    progress: TrainingProgress
    run_started: float

    def __post_init__(self):
        self.output_dir = Path(self.config.output_dir)
        # Seconds already spent in earlier sessions of this run count against max_minutes.
        self.clock_offset = self.progress.elapsed_seconds - self.run_started
        self.saved_step = self.progress.step if self.progress.step else None
        self.in_early_dropout = False  # the model was built with the configured dropout

    def elapsed(self) -> float:
        return self.clock_offset + time.monotonic()

    def run(self, loader: DataLoader, sampler: UpdateBatchSampler) -> None:
        config, progress, accelerator = self.config, self.progress, self.accelerator
        accumulation_steps = accelerator.gradient_accumulation_steps
        # The updates the run will make, when a step or epoch budget says (the smaller when both do).
        budgets = [config.max_steps, config.max_epochs and config.max_epochs * sampler.updates_per_epoch]
        total = min((budget for budget in budgets if budget), default=None)
        self.schedule.total_updates = total
        bar = tqdm(
            total=total,
            initial=progress.step,
            unit="update",
            disable=not accelerator.is_main_process,
            mininterval=1,
        )
        # A resumed run may have reached its limits already (every process reads the same progress).
        stop = self._epochs_done() or self._steps_done() or self._over_time()
        self._set_clock_spent(progress.elapsed_seconds)
        while not stop:
            sampler.set_epoch(progress.epoch, first_update=progress.updates_in_epoch)
            batches = iter(loader)
            while not stop:
                started = time.monotonic()
                group = list(islice(batches, accumulation_steps))
                if not group:
                    break
                learning_rate = self.scheduler.get_last_lr()[0]
                self._set_dropout_phase()
                loss_sum, tokens = self._update(group)
                progress.step += 1
                progress.updates_in_epoch += 1
                progress.elapsed_seconds = self.elapsed()
                # One reduction per update carries the main process's clock and its decisions to every process.
                save_due = (
                    config.save_interval_minutes is not None
                    and progress.elapsed_seconds - progress.last_save_seconds
                    >= 60 * config.save_interval_minutes
                )
                clock = torch.tensor(
                    [float(self._over_time()), float(save_due), progress.elapsed_seconds],
                    device=accelerator.device,
                )
                clock = accelerator.reduce(clock * accelerator.is_main_process, "sum").tolist()
                self._set_clock_spent(clock[2])
                loss = loss_sum / tokens
                if not math.isfinite(loss):
                    raise TrainingError(
                        f"loss is {loss} at update {progress.step}: training diverged (lower lr, set clip_grad_norm "
                        f"or use bf16 instead of fp16); the checkpoints in {self.output_dir} are from before"
                    )
                progress.interval_loss += loss_sum
                progress.interval_tokens += tokens
                progress.interval_seconds += time.monotonic() - started
                bar.update()
                if progress.step % config.log_interval == 0:
                    self._log_training(learning_rate, sampler.updates_per_epoch, bar)
                stop = bool(clock[0]) or self._steps_done()
                if (
                    stop
                    or clock[1]
                    or (config.save_interval_updates and progress.step % config.save_interval_updates == 0)
                ):
                    self.save(sampler.updates_per_epoch)
            if not stop:
                progress.epoch += 1
                progress.updates_in_epoch = 0
                stop = self._epochs_done()
        bar.close()
        if self.saved_step != progress.step:
            self.save(sampler.updates_per_epoch)

    def _set_dropout_phase(self) -> None:
        """Early dropout for the first early_dropout_updates updates, the configured dropout after (late dropout)."""
        config = self.config
        early = self.progress.step < config.early_dropout_updates
        if early == self.in_early_dropout:
            return
        model = self.accelerator.unwrap_model(self.model)
        if early:
            model.set_dropout(config.early_dropout, 0.0, 0.0)
        else:
            model.set_dropout(config.dropout, config.attention_dropout, config.activation_dropout)
            logger.info(
                "Update %d: dropout %s from now on (late dropout)", self.progress.step + 1, config.dropout
            )
        self.in_early_dropout = early

    def _epochs_done(self) -> bool:
        return self.config.max_epochs is not None and self.progress.epoch >= self.config.max_epochs

    def _steps_done(self) -> bool:
        return self.config.max_steps is not None and self.progress.step >= self.config.max_steps

    def _set_clock_spent(self, elapsed_seconds: float) -> None:
        if self.config.max_minutes is not None:
            self.schedule.clock_spent = elapsed_seconds / (60 * self.config.max_minutes)

    def _over_time(self) -> bool:
        return (
            self.config.max_minutes is not None
            and self.progress.elapsed_seconds >= 60 * self.config.max_minutes
        )

    def _update(self, group: list[dict]) -> tuple[float, int]:
        """One optimizer step over this process's batches of the update: (summed loss, target tokens) of all processes."""
        accelerator = self.accelerator
        group = [{name: tensor.to(accelerator.device) for name, tensor in batch.items()} for batch in group]
        local_tokens = sum(int((batch["labels"] != -100).sum()) for batch in group)
        tokens = accelerator.reduce(torch.tensor(local_tokens, device=accelerator.device), "sum")
        # The model divides each micro-batch's summed loss by this; accelerate then divides by the
        # accumulation steps and DDP averages over processes, which together make sum / global tokens.
        num_items = tokens.float() / (len(group) * accelerator.num_processes)
        loss_sum = torch.zeros((), dtype=torch.float64, device=accelerator.device)
        for batch in group:
            with accelerator.accumulate(self.model):
                loss = label_smoothed_loss(self.model, batch, self.config.label_smoothing, num_items)
                accelerator.backward(loss)
                if self.config.clip_grad_norm and accelerator.sync_gradients:
                    accelerator.clip_grad_norm_(self.model.parameters(), self.config.clip_grad_norm)
                self.optimizer.step()
                self.scheduler.step()
                self.optimizer.zero_grad()
            loss_sum += loss.detach().double() * num_items
        return float(accelerator.reduce(loss_sum, "sum")), int(tokens)

    def _log_training(self, learning_rate: float, updates_per_epoch: int, bar: tqdm) -> None:
        progress = self.progress
        record = {
            **self._position(updates_per_epoch),
            "loss": progress.interval_loss / progress.interval_tokens,
            "lr": learning_rate,
            # Target tokens (without padding) of all processes per second of training, batching included
            # and validation and saving left out.
            "tokens_per_second": progress.interval_tokens / progress.interval_seconds,
        }
        progress.interval_loss, progress.interval_tokens, progress.interval_seconds = 0.0, 0, 0.0
        bar.set_postfix(
            loss=f"{record['loss']:.3f}",
            lr=f"{learning_rate:.2e}",
            tok_s=f"{record['tokens_per_second']:.0f}",
        )
        self._write_log(record)

    def _position(self, updates_per_epoch: int) -> dict:
        progress = self.progress
        return {
            "step": progress.step,
            "epoch": round(progress.epoch + progress.updates_in_epoch / updates_per_epoch, 4),
            "elapsed_seconds": round(self.elapsed(), 2),
        }

    def _write_log(self, record: dict) -> None:
        if self.accelerator.is_main_process:
            with open(self.output_dir / LOG_FILE, "a") as log:
                log.write(json.dumps(record) + "\n")
        self.accelerator.log(
            {name: value for name, value in record.items() if name != "step"}, step=record["step"]
        )

    def save(self, updates_per_epoch: int) -> None:
        """Validate, then write checkpoint_<step>, checkpoint_best (if it is) and checkpoint_last with the training state."""
        accelerator, progress = self.accelerator, self.progress
        is_best = False
        if self.validation is not None:
            metrics = self._validate()
            if accelerator.is_main_process:
                metric = metrics.get("val_bleu", -metrics["val_loss"])
                is_best = progress.best_metric is None or metric > progress.best_metric
                progress.best_metric = max(metric, progress.best_metric or -math.inf)
                self._write_log({**self._position(updates_per_epoch), **metrics})
                tqdm.write(
                    f"update {progress.step}: "
                    + ", ".join(f"{name} {value:.3f}" for name, value in metrics.items())
                    + (" (best)" if is_best else "")
                )
        numbered = self.output_dir / f"checkpoint_{progress.step}"
        self._save_model(numbered)
        if accelerator.is_main_process and is_best:
            staging = staging_directory(self.output_dir / BEST)
            shutil.rmtree(staging, ignore_errors=True)
            shutil.copytree(numbered, staging)
            publish_directory(staging, self.output_dir / BEST)
        progress.last_save_seconds = progress.elapsed_seconds = self.elapsed()
        staging = self._save_model(self.output_dir / LAST, publish=False)
        accelerator.save_state(str(staging / TRAINING_STATE))
        accelerator.wait_for_everyone()
        if accelerator.is_main_process:
            publish_directory(staging, self.output_dir / LAST)
            if self.config.keep_checkpoints:
                for old in numbered_checkpoints(self.output_dir)[: -self.config.keep_checkpoints]:
                    shutil.rmtree(old)
        accelerator.wait_for_everyone()
        self.saved_step = progress.step

    def _save_model(self, final: Path, publish: bool = True) -> Path:
        """A from_pretrained directory (model, generation config, tokenizer) written into staging, then `final`."""
        accelerator = self.accelerator
        staging = staging_directory(final)
        state_dict = accelerator.get_state_dict(self.model)  # a collective under FSDP / DeepSpeed
        if accelerator.is_main_process:
            shutil.rmtree(staging, ignore_errors=True)
            accelerator.unwrap_model(self.model).save_pretrained(staging, state_dict=state_dict)
            self.tokenizer.save_pretrained(staging)
            if publish:
                publish_directory(staging, final)
        accelerator.wait_for_everyone()
        return staging

    def _validate(self) -> dict[str, float]:
        """Label-smoothed loss per target token and greedy sacreBLEU, each process taking a share."""
        accelerator, validation = self.accelerator, self.validation
        model = accelerator.unwrap_model(self.model)
        model.eval()
        sampler = TokenBatchSampler(
            validation.lengths,
            self.config.max_tokens,
            shuffle=False,
            num_replicas=accelerator.num_processes,
            rank=accelerator.process_index,
        )
        totals = torch.zeros(2, dtype=torch.float64, device=accelerator.device)
        with torch.no_grad():
            for batch in DataLoader(
                validation.tokenized, batch_sampler=sampler, collate_fn=make_collator(self.tokenizer, model)
            ):
                batch = {name: tensor.to(accelerator.device) for name, tensor in batch.items()}
                totals[0] += label_smoothed_loss(model, batch, self.config.label_smoothing, 1).double()
                totals[1] += int((batch["labels"] != -100).sum())
        model.train()
        loss_sum, tokens = accelerator.reduce(totals, "sum").tolist()
        metrics = {"val_loss": loss_sum / tokens}
        if self.config.validation_bleu:
            share = range(accelerator.process_index, len(validation.sources), accelerator.num_processes)
            translations = translate_sentences(
                model,
                self.tokenizer,
                [validation.sources[index] for index in share],
                max_tokens=self.config.max_tokens,
                show_progress=False,
                num_beams=1,
                do_sample=False,
            )
            indexed = sorted(gather_object(list(zip(share, translations, strict=True))))
            metrics["val_bleu"] = score_translations([text for _, text in indexed], validation.references)[
                "bleu"
            ]
        return metrics


# Inputs


def _load_or_train_tokenizer(config: TrainingConfig) -> PreTrainedTokenizerBase:
    path = Path(config.tokenizer)
    if not path.exists():
        logger.info(
            "No tokenizer at %s: training one of %d tokens on %s",
            path,
            config.tokenizer_vocab_size,
            config.train_split,
        )
        pairs = _load_split(config, config.train_split)
        tokenizer = train_tokenizer(
            chain(pairs["source"], pairs["target"]), vocab_size=config.tokenizer_vocab_size
        )
        save_tokenizer(tokenizer, path)
    try:
        return AutoTokenizer.from_pretrained(path)
    except (OSError, ValueError) as err:
        raise TrainingError(f"tokenizer {path} cannot be loaded: {err}") from err


def _load_split(config: TrainingConfig, split: str):
    try:
        return load_translation_split(
            config.dataset, config.source_lang, config.target_lang, split, config.dataset_config
        )
    except (FileNotFoundError, ValueError) as err:
        raise TrainingError(str(err)) from err


def _load_data(config: TrainingConfig, tokenizer: PreTrainedTokenizerBase, max_length: int):
    """The cleaned training split and the (uncleaned) validation slice, tokenized and cut to `max_length`."""
    pairs, _ = clean_translation_pairs(
        _load_split(config, config.train_split),
        max_words=config.clean_max_words,
        max_length_ratio=config.clean_max_length_ratio,
        num_proc=config.preprocessing_workers,
    )
    if len(pairs) == 0:
        raise TrainingError(f"no training pairs left in {config.dataset} {config.train_split} after cleaning")
    train_data = tokenize_pairs(
        pairs, tokenizer, max_length=max_length, num_proc=config.preprocessing_workers
    )
    if config.validation_split is None:
        return train_data, None
    pairs = _load_split(config, config.validation_split)
    if config.validation_max_sentences:
        pairs = pairs.select(range(min(config.validation_max_sentences, len(pairs))))
    tokenized = tokenize_pairs(pairs, tokenizer, max_length=max_length)
    return train_data, ValidationSet(
        tokenized, example_lengths(tokenized), list(pairs["source"]), list(pairs["target"])
    )


def _model_config(config: TrainingConfig, tokenizer: PreTrainedTokenizerBase) -> VanillaTransformerConfig:
    fields = {
        **config_kwargs_from_tokenizer(tokenizer),
        "dropout": config.dropout,
        "attention_dropout": config.attention_dropout,
        "activation_dropout": config.activation_dropout,
        **config.model_overrides,
    }
    try:
        model_config = VanillaTransformerConfig.from_preset(config.model_preset, **fields)
        check_tokenizer_matches_model(tokenizer, model_config)
    except (TypeError, ValueError) as err:
        raise TrainingError(f"model: {err}") from err
    return model_config


def _prepare_output_dir(config, output_dir: Path, resume: bool, model_config, tokenizer, accelerator) -> None:
    """Check the output directory against `resume` and make it; raise TrainingError when it cannot serve."""
    last = output_dir / LAST
    if resume:
        if not (last / TRAINING_STATE).is_dir():
            raise TrainingError(f"nothing to resume: {last / TRAINING_STATE} does not exist")
        saved = VanillaTransformerConfig.from_pretrained(last)
        try:
            check_tokenizer_matches_model(tokenizer, saved)
        except ValueError as err:
            raise TrainingError(f"{last}: {err}") from err
        differing = [name for name in SHAPE_FIELDS if getattr(saved, name) != getattr(model_config, name)]
        if differing:
            raise TrainingError(
                f"{last} holds a model that differs in "
                + ", ".join(
                    f"{name} ({getattr(saved, name)} saved, {getattr(model_config, name)} configured)"
                    for name in differing
                )
            )
    elif last.exists():
        raise TrainingError(
            f"{output_dir} already holds a run ({LAST}); pass --resume to continue it or choose another output_dir"
        )
    if accelerator.is_main_process:
        try:
            write_text_atomic(
                output_dir / CONFIG_FILE, yaml.safe_dump(dataclasses.asdict(config), sort_keys=False)
            )
        except OSError as err:
            raise TrainingError(f"output_dir {output_dir} is not writable: {err.strerror or err}") from err
        remove_stale_staging(output_dir)
    accelerator.wait_for_everyone()


def _truncate_log(path: Path, step: int) -> None:
    """Keep the log records up to `step`: a resumed run rewrites what the stopped one logged after its checkpoint."""
    kept = []
    if path.exists() and step:
        kept = [
            line for line in path.read_text().splitlines(keepends=True) if json.loads(line)["step"] <= step
        ]
    write_text_atomic(path, "".join(kept))
