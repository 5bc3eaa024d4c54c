"""The update loop: batches in, updates, logs, validation and checkpoints out, until the budget is spent.

`train` (train.py) prepares everything and hands it to `Trainer`: `Trainer.run` is the loop,
`Trainer._update` one update (sections 5.1, 5.3, 5.4); when to stop is `StopRules`' (stopping.py). An update
reads nothing back from the device: its loss and token count are added up there and read at a log or save
point, where the run also checks that it has not diverged. Decisions that follow the update count (max_steps,
save_interval_updates) or the validation scores (early stopping: every process reads the same reduced loss and
gathered BLEU) are the same on every process; those that follow the clock (max_minutes, save_interval_minutes)
and a stop signal are taken on the main process and shared with every process in one reduction as
`TrainerControl`, every update with one process (no device involved) and every `SHARE_INTERVAL` updates with
several, so all stop and save together.
"""

from __future__ import annotations

import dataclasses
import errno
import math
import shutil
import time
from collections.abc import Callable
from dataclasses import dataclass
from itertools import islice
from pathlib import Path

import datasets
import numpy as np
import torch
from accelerate import Accelerator
from accelerate.logging import get_logger
from accelerate.utils import gather_object
from torch.optim.lr_scheduler import LambdaLR
from torch.utils.data import DataLoader
from tqdm.auto import tqdm
from transformers import PreTrainedTokenizerBase

from hf_vanilla.checkpoints.cards import save_model_directory
from hf_vanilla.data.batches import TokenBatchSampler, TokenizedRows, UpdateBatchSampler, make_collator
from hf_vanilla.evaluation.scoring import score_translations
from hf_vanilla.files import publish_directory, write_json
from hf_vanilla.training.loss import label_smoothed_loss
from hf_vanilla.training.run_directory import (
    BEST,
    LAST,
    PROGRESS_FILE,
    TRAINING_STATE,
    append_log,
    copy_checkpoint,
    remove_old_checkpoints,
    run_record,
    staging_directory,
)
from hf_vanilla.training.schedule import DropoutRates, LearningRateSchedule, dropout_for_update, set_dropout
from hf_vanilla.training.settings import TrainingConfig, TrainingError
from hf_vanilla.training.stopping import StopRules, diverged, stopped_by_signal
from hf_vanilla.translation.decoding import Batching, translate_sentences

logger = get_logger(__name__)  # logs on the main process only

# With several processes, the main process's clock and stop signals are shared this many updates apart: each
# sharing is a collective the host waits for.
SHARE_INTERVAL = 16


@dataclass
class TrainingProgress:
    """Where a run stands; saved with the training state so that a resumed run continues from there."""

    step: int = 0
    epoch: int = 0
    updates_in_epoch: int = 0
    elapsed_seconds: float = 0.0
    last_save_seconds: float = 0.0
    best_metric: float | None = None
    best_step: int | None = None  # checkpoint_best's update
    best_checked: float | None = None  # the best validation_score of the interval saves (early stopping's)
    validations_since_best: int = 0  # interval validations since best_checked (early_stopping_patience)
    stop_reason: str | None = None  # why the run stopped: a budget spent or no validation improvement
    # Totals since the last log record, so that a resumed run logs the same averages.
    interval_loss: float = 0.0
    interval_tokens: int = 0
    interval_seconds: float = 0.0

    def state_dict(self) -> dict:
        return dataclasses.asdict(self)

    def load_state_dict(self, state: dict) -> None:
        for name, value in state.items():
            setattr(self, name, value)

    def count_validation(self, score: float) -> None:
        """Note an interval validation's `validation_score`: a new best, or one more validation without
        improvement."""
        if self.best_checked is None or score > self.best_checked:
            self.best_checked, self.validations_since_best = score, 0
        else:
            self.validations_since_best += 1


def validation_score(metrics: dict[str, float]) -> float:
    """What picks checkpoint_best and counts for early stopping, higher better: BLEU where validated, else
    -loss."""
    return metrics.get("val_bleu", -metrics["val_loss"])


@dataclass
class ValidationSet:
    tokenized: datasets.Dataset  # input_ids and labels
    lengths: np.ndarray
    sources: list[str]
    references: list[str]


@dataclass(frozen=True)
class Optimization:
    """The model and what trains it (sections 5.3, 5.4), the first three as accelerate prepared them."""

    model: torch.nn.Module
    optimizer: torch.optim.Optimizer  # Adam(0.9, 0.98, 1e-9) at the schedule's peak learning rate
    scheduler: LambdaLR  # scales that peak by `schedule` after each update
    schedule: LearningRateSchedule  # the scheduler's function; it follows the clock the loop reads
    loss_function: Callable  # label_smoothed_loss, compiled or not (training_loss_function)


@dataclass(frozen=True)
class TrainingData:
    """What the loop reads: the updates' token batches (section 5.1), the tokenizer that made them (saved with
    every checkpoint) and the validation set."""

    loader: DataLoader
    sampler: UpdateBatchSampler
    tokenizer: PreTrainedTokenizerBase
    validation: ValidationSet | None


@dataclass
class TrainerControl:
    """What to do after an update, decided on the main process (as transformers' `TrainerControl` names
    it)."""

    should_stop: bool = False  # the clock is spent (the time budget, shared by every process)
    should_save: bool = False  # a save interval has come round
    elapsed_seconds: float = 0.0  # the main process's clock, which the cooldown follows
    stop_signal: int = 0  # the signal that asked the run to stop (0: none)

    def shared(self, accelerator: Accelerator) -> TrainerControl:
        """The main process's decisions, on every process (one reduction where there are several)."""
        if accelerator.num_processes == 1:
            return self
        values = torch.tensor(
            [float(self.should_stop), float(self.should_save), self.elapsed_seconds, float(self.stop_signal)],
            device=accelerator.device,
        )
        main_values = values * accelerator.is_main_process
        stop, save, elapsed, stop_signal = accelerator.reduce(main_values, "sum").tolist()
        return TrainerControl(bool(stop), bool(save), elapsed, int(stop_signal))


@dataclass
class Trainer:
    """The training loop and its saves, over what `train` prepared."""

    config: TrainingConfig
    accelerator: Accelerator
    optimization: Optimization
    data: TrainingData
    progress: TrainingProgress
    run_started: float  # time.monotonic() when this session of the run started

    def __post_init__(self):
        self.output_dir = Path(self.config.output_dir)
        # Seconds already spent in earlier sessions of this run count against max_minutes.
        self.clock_offset = self.progress.elapsed_seconds - self.run_started
        self.saved_step = self.progress.step if self.progress.step else None
        self.checkpoints = CheckpointWriter(self.config, self.accelerator, self.data.tokenizer)
        self.log = RunLog(
            self.accelerator,
            self.output_dir,
            self.progress,
            self.elapsed,
            self.data.sampler.updates_per_epoch,
        )
        config = self.config
        self.configured_dropout = DropoutRates(
            config.dropout, config.attention_dropout, config.activation_dropout
        )
        self.dropout = self.configured_dropout  # the model was built with it
        device = self.accelerator.device
        # Summed loss and target tokens since the last log record, kept on the device until a log or save
        # point.
        self.interval_totals = torch.zeros(2, dtype=torch.float64, device=device)
        # The first update whose loss was not finite (0: none yet), found on the device, read at the same
        # points.
        self.diverged_at = torch.zeros((), dtype=torch.int64, device=device)
        self.stop_rules = StopRules.of(config)

    def elapsed(self) -> float:
        return self.clock_offset + time.monotonic()

    def run(self) -> None:
        """Update until a budget (steps, epochs, minutes) or the early-stopping patience is spent or a stop
        signal comes, saving (and validating) at the intervals and at the end; the reason is logged and in the
        cards."""
        progress = self.progress
        bar = tqdm(
            total=self.optimization.schedule.total_updates,
            initial=progress.step,
            unit="update",
            disable=not self.accelerator.is_main_process,
            mininterval=1,
        )
        progress.stop_reason = self.stop_rules.at_start(progress)
        self._follow_clock(progress.elapsed_seconds)
        with self.stop_rules.signals_caught():
            while not progress.stop_reason:
                self._run_epoch(bar)
        bar.close()
        if self.saved_step != progress.step:
            self.save()
        logger.info("Training stopped after update %d: %s", progress.step, progress.stop_reason)

    def _run_epoch(self, bar: tqdm) -> None:
        """The updates of the epoch under way, from where it stands, until it ends or a rule stops the run;
        saving where a rule or an interval says, and raising TrainingStopped after a stop signal's save."""
        progress = self.progress
        self.data.sampler.set_epoch(progress.epoch, first_update=progress.updates_in_epoch)
        batches = iter(self.data.loader)
        while not progress.stop_reason:
            started = time.monotonic()
            group = list(islice(batches, self.accelerator.gradient_accumulation_steps))
            if not group:
                progress.epoch += 1
                progress.updates_in_epoch = 0
                progress.stop_reason = self.stop_rules.epochs_done(progress)
                return
            self._update(group, started, bar)
            control = self._decide()
            progress.stop_reason = self.stop_rules.after_update(progress, control.should_stop)
            if progress.stop_reason or control.should_save or control.stop_signal:
                self.save(at_interval=control.should_save)  # early stopping decides here
            if control.stop_signal:
                raise stopped_by_signal(control.stop_signal, progress.step, self.output_dir / LAST)

    def _update(self, group: list[dict], started: float, bar: tqdm) -> None:
        """One update over this process's token batches `group` (section 5.1): each batch's forward and
        label-smoothed loss (5.4), its backward, then one Adam step at the schedule's learning rate (5.3).

        Each batch's summed loss is divided by the target tokens of the whole update, counted over every
        process first, so the gradient is that of the mean loss per target token however the update is split.
        Nothing is read back from the device; a log point reads the totals and logs them."""
        accelerator, config, optimization = self.accelerator, self.config, self.optimization
        device = accelerator.device
        model, optimizer, scheduler = optimization.model, optimization.optimizer, optimization.scheduler
        learning_rate = scheduler.get_last_lr()[0]
        self._set_dropout()
        group = [
            {name: tensor.to(device, non_blocking=True) for name, tensor in batch.items()} for batch in group
        ]
        tokens = accelerator.reduce(sum((batch["labels"] != -100).sum() for batch in group), "sum")
        # The model divides each batch's summed loss by this; accelerate then divides by the accumulation
        # steps and DDP averages over processes, which together make sum / global tokens.
        num_items = tokens.float() / (len(group) * accelerator.num_processes)
        loss_sum = torch.zeros((), dtype=torch.float64, device=device)
        for batch in group:
            with accelerator.accumulate(model):  # the optimizer steps at the group's last batch only
                loss = optimization.loss_function(model, batch, config.label_smoothing, num_items)  # 5.4
                accelerator.backward(loss)
                if config.clip_grad_norm and accelerator.sync_gradients:  # not in the paper
                    accelerator.clip_grad_norm_(model.parameters(), config.clip_grad_norm)
                optimizer.step()  # 5.3 Adam
                scheduler.step()  # 5.3 the next update's learning rate
                optimizer.zero_grad()
            loss_sum += loss.detach().double() * num_items
        self._count(torch.stack([accelerator.reduce(loss_sum, "sum"), tokens.double()]), started)
        bar.update()
        if self.progress.step % config.log_interval == 0:
            self._read_totals()
            self.log.training(learning_rate, bar)

    def _count(self, totals: torch.Tensor, started: float) -> None:
        """Count the update started at `started`, with its (summed loss, target tokens) `totals` on the
        device, there noting the first update whose loss is not finite."""
        progress = self.progress
        progress.step += 1
        progress.updates_in_epoch += 1
        progress.elapsed_seconds = self.elapsed()
        self.interval_totals += totals
        first_divergence = (self.diverged_at == 0) & ~torch.isfinite(totals[0])
        self.diverged_at = torch.where(first_divergence, progress.step, self.diverged_at)
        progress.interval_seconds += time.monotonic() - started

    def _read_totals(self) -> None:
        """Bring the device's totals to the host (a synchronisation): stop if the loss diverged."""
        diverged_at = int(self.diverged_at)
        if diverged_at:
            self._diverged(f"loss is not finite at update {diverged_at}")
        loss, tokens = self.interval_totals.tolist()
        self.progress.interval_loss += loss
        self.progress.interval_tokens += int(tokens)
        self.interval_totals.zero_()

    def _diverged(self, what: str) -> None:
        raise diverged(what, self.output_dir / LAST, self.saved_step)

    def _decide(self) -> TrainerControl:
        """What the update just made calls for. Update-count decisions are every process's own; the clock's
        and a stop signal are the main process's, shared (with several processes, every SHARE_INTERVAL
        updates)."""
        config, progress, accelerator = self.config, self.progress, self.accelerator
        save_by_count = bool(
            config.save_interval_updates and progress.step % config.save_interval_updates == 0
        )
        if accelerator.num_processes > 1 and progress.step % SHARE_INTERVAL:
            return TrainerControl(should_save=save_by_count)
        minutes_since_save = (progress.elapsed_seconds - progress.last_save_seconds) / 60
        main = TrainerControl(
            should_stop=self.stop_rules.over_time(progress) is not None,
            should_save=config.save_interval_minutes is not None
            and minutes_since_save >= config.save_interval_minutes,
            elapsed_seconds=progress.elapsed_seconds,
            stop_signal=self.stop_rules.stop_signal,
        ).shared(accelerator)
        self._follow_clock(main.elapsed_seconds)
        return dataclasses.replace(main, should_save=main.should_save or save_by_count)

    def _set_dropout(self) -> None:
        """5.4 The dropout of the coming update (late dropout changes it once)."""
        config, step = self.config, self.progress.step
        wanted = dropout_for_update(
            step, config.early_dropout_updates, config.early_dropout, self.configured_dropout
        )
        if wanted == self.dropout:
            return
        set_dropout(self.accelerator.unwrap_model(self.optimization.model), wanted)
        if step >= config.early_dropout_updates:
            logger.info("Update %d: dropout %s from now on (late dropout)", step + 1, wanted.dropout)
        self.dropout = wanted

    def _follow_clock(self, elapsed_seconds: float) -> None:
        if self.config.max_minutes is not None:
            self.optimization.schedule.clock_spent = elapsed_seconds / (60 * self.config.max_minutes)

    def save(self, at_interval: bool = False) -> None:
        """Check, validate, log, then write checkpoint_<step>, checkpoint_best (if it is) and checkpoint_last.

        Only the validations of interval saves count for early stopping, so that a run stopped by a signal and
        resumed stops where an uninterrupted one does; one that runs out of patience says so in its cards.
        Nothing is written from a run whose loss or weights are no longer finite."""
        accelerator, progress, model = self.accelerator, self.progress, self.optimization.model
        self._read_totals()
        finite = torch.stack([parameter.isfinite().all() for parameter in model.parameters()]).all()
        if not accelerator.reduce(finite.float(), "sum") == accelerator.num_processes:
            self._diverged(f"weights are not finite after update {progress.step}")
        metrics = None
        if self.data.validation is not None:
            # Its own random state: the training trajectory must not depend on when validation runs.
            with torch.random.fork_rng(
                devices=[accelerator.device] if accelerator.device.type == "cuda" else []
            ):
                metrics = validate(accelerator, model, self.data.tokenizer, self.data.validation, self.config)
        is_best = accelerator.is_main_process and metrics is not None and self.log.validation(metrics)
        if metrics is not None and at_interval:
            progress.count_validation(validation_score(metrics))
            progress.stop_reason = progress.stop_reason or self.stop_rules.out_of_patience(progress)
        progress.last_save_seconds = progress.elapsed_seconds = self.elapsed()
        try:
            self.checkpoints.save(model, progress, metrics, is_best)
        except (OSError, RuntimeError) as err:
            if not disk_is_full(err):
                raise
            last = f"{self.output_dir / LAST} (update {self.saved_step})" if self.saved_step else "none"
            raise TrainingError(
                f"no space left on the device holding {self.output_dir} while saving update {progress.step}; "
                f"the last complete checkpoint is {last}: free space, then continue with --resume"
            ) from err
        self.saved_step = progress.step


def disk_is_full(err: BaseException) -> bool:
    """Whether a failed write ran out of space: an OSError says ENOSPC (or the quota's EDQUOT); torch.save's
    writer raises a RuntimeError that says only "unexpected pos" (a short write)."""
    if isinstance(err, OSError):
        return err.errno in (errno.ENOSPC, errno.EDQUOT)
    return "unexpected pos" in str(err)


@dataclass
class RunLog:
    """The run's log records: train_log.jsonl (main process) and the trackers (TensorBoard), plus the
    console."""

    accelerator: Accelerator
    output_dir: Path
    progress: TrainingProgress
    elapsed: Callable[[], float]  # the run's clock, earlier sessions included
    updates_per_epoch: int

    def training(self, learning_rate: float, bar: tqdm) -> None:
        """The mean loss, learning rate and speed since the last record."""
        progress = self.progress
        record = {
            **self._position(),
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
        self._write(record)

    def validation(self, metrics: dict[str, float]) -> bool:
        """Log the validation `metrics` (main process); whether they are the best so far (BLEU, else loss)."""
        progress = self.progress
        metric = validation_score(metrics)
        is_best = math.isfinite(metric) and (progress.best_metric is None or metric > progress.best_metric)
        if is_best:
            progress.best_metric, progress.best_step = metric, progress.step
        self._write({**self._position(), **metrics})
        tqdm.write(
            f"update {progress.step}: "
            + ", ".join(f"{name} {value:.3f}" for name, value in metrics.items())
            + (" (best)" if is_best else "")
        )
        return is_best

    def _position(self) -> dict:
        progress = self.progress
        return {
            "step": progress.step,
            "epoch": round(progress.epoch + progress.updates_in_epoch / self.updates_per_epoch, 4),
            "elapsed_seconds": round(self.elapsed(), 2),
        }

    def _write(self, record: dict) -> None:
        if self.accelerator.is_main_process:
            append_log(self.output_dir, record)
        self.accelerator.log(
            {name: value for name, value in record.items() if name != "step"}, step=record["step"]
        )


@dataclass
class CheckpointWriter:
    """Writes a run's checkpoints: numbered, best, and last with the training state for --resume."""

    config: TrainingConfig
    accelerator: Accelerator
    tokenizer: PreTrainedTokenizerBase

    def save(self, model: torch.nn.Module, progress: TrainingProgress, metrics: dict | None, is_best: bool):
        accelerator, output_dir = self.accelerator, Path(self.config.output_dir)
        numbered = output_dir / f"checkpoint_{progress.step}"
        self._save_model(model, numbered, progress, metrics)
        if is_best:
            copy_checkpoint(numbered, output_dir / BEST)
        staging = self._save_model(model, output_dir / LAST, progress, metrics, publish=False)
        accelerator.save_state(str(staging / TRAINING_STATE))
        if accelerator.is_main_process:
            write_json(staging / TRAINING_STATE / PROGRESS_FILE, progress.state_dict())
        accelerator.wait_for_everyone()
        if accelerator.is_main_process:
            publish_directory(staging, output_dir / LAST)
            if self.config.keep_checkpoints:
                remove_old_checkpoints(output_dir, self.config.keep_checkpoints)
        accelerator.wait_for_everyone()

    def _save_model(
        self, model, final: Path, progress: TrainingProgress, metrics, publish: bool = True
    ) -> Path:
        """A standalone model directory (model, generation config, tokenizer, pipeline code, model card)
        written into staging, then `final`."""
        accelerator = self.accelerator
        staging = staging_directory(final)
        state_dict = accelerator.get_state_dict(model)  # a collective under FSDP / DeepSpeed
        if accelerator.is_main_process:
            shutil.rmtree(staging, ignore_errors=True)
            model = accelerator.unwrap_model(model)
            minutes = progress.elapsed_seconds / 60
            summary = f"Checkpoint after {progress.step} updates ({minutes:.1f} minutes)."
            if progress.stop_reason:
                summary += f" Training stopped: {progress.stop_reason}."
            run = run_record(self.config, summary, metrics)
            save_model_directory(model, self.tokenizer, staging, run, state_dict=state_dict)
            if publish:
                publish_directory(staging, final)
        accelerator.wait_for_everyone()
        return staging


def validate(
    accelerator: Accelerator,
    model: torch.nn.Module,
    tokenizer: PreTrainedTokenizerBase,
    validation: ValidationSet,
    config: TrainingConfig,
) -> dict[str, float]:
    """Loss per target token and greedy sacreBLEU on the validation set, each process taking a share."""
    model = accelerator.unwrap_model(model)
    model.eval()
    sampler = TokenBatchSampler(
        validation.lengths,
        config.max_tokens,
        shuffle=False,
        num_replicas=accelerator.num_processes,
        rank=accelerator.process_index,
    )
    totals = torch.zeros(2, dtype=torch.float64, device=accelerator.device)
    with torch.no_grad():
        for batch in DataLoader(
            TokenizedRows(validation.tokenized),
            batch_sampler=sampler,
            collate_fn=make_collator(tokenizer, model),
        ):
            batch = {name: tensor.to(accelerator.device) for name, tensor in batch.items()}
            totals[0] += label_smoothed_loss(model, batch, config.label_smoothing, 1).double()
            totals[1] += int((batch["labels"] != -100).sum())
    model.train()
    loss_sum, tokens = accelerator.reduce(totals, "sum").tolist()
    metrics = {"val_loss": loss_sum / tokens}
    if config.validation_bleu:
        share = range(accelerator.process_index, len(validation.sources), accelerator.num_processes)
        translations = translate_sentences(
            model,
            tokenizer,
            [validation.sources[index] for index in share],
            batching=Batching(config.max_tokens, show_progress=False),
            num_beams=1,
            do_sample=False,
        )
        indexed = sorted(gather_object(list(zip(share, translations, strict=True))))
        metrics["val_bleu"] = score_translations(
            [text for _, text in indexed], validation.references, target_lang=config.target_lang
        )["bleu"]
    return metrics
