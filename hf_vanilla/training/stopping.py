"""Why a run stops: its budgets (epochs, updates, minutes), early stopping's patience, a stop signal, and a
loss or weights no longer finite.

Each rule reads the run's `TrainingProgress` and gives the reason to stop, which the run logs and writes into
the cards of its last checkpoints, or None. A stop signal and divergence end the run with an exception
instead: `TrainingStopped` once the signal's checkpoint is saved, a `TrainingError` that says where to resume
from. (transformers' `TrainerControl` and fairseq's `should_stop_early` hold the same rules in their shapes.)
"""

from __future__ import annotations

import contextlib
import signal
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from accelerate.logging import get_logger

from hf_vanilla.training.settings import TrainingConfig, TrainingError

if TYPE_CHECKING:
    from hf_vanilla.training.trainer import TrainingProgress

logger = get_logger(__name__)  # logs on the main process only

# What a scheduler sends before it stops a job (SLURM, Kubernetes, cloud preemption), and Ctrl-C.
STOP_SIGNALS = (signal.SIGTERM, signal.SIGINT)


class TrainingStopped(TrainingError):
    """The run was asked to stop by a signal and saved a checkpoint to resume from."""

    def __init__(self, message: str, signal_number: int):
        super().__init__(message)
        self.exit_code = 128 + signal_number  # the shell's code for a process ended by that signal


@dataclass
class StopRules:
    """A run's stopping rules (None: no such limit) and the stop signal caught so far (0: none)."""

    max_epochs: int | None = None
    max_steps: int | None = None
    max_minutes: float | None = None
    early_stopping_patience: int | None = None
    validation_bleu: bool = False  # what early stopping's log names: BLEU, else the validation loss
    stop_signal: int = 0

    @classmethod
    def of(cls, config: TrainingConfig) -> StopRules:
        return cls(
            config.max_epochs,
            config.max_steps,
            config.max_minutes,
            config.early_stopping_patience,
            config.validation_bleu,
        )

    def at_start(self, progress: TrainingProgress) -> str | None:
        """A resumed run may have reached its limits already (every process reads the same progress)."""
        return (
            self.epochs_done(progress)
            or self.steps_done(progress)
            or self.over_time(progress)
            or self.out_of_patience(progress)
        )

    def after_update(self, progress: TrainingProgress, clock_says_stop: bool) -> str | None:
        """The reason to stop after an update: the time budget only as the main process's shared clock says
        (so that every process stops at the same update), else the update budget."""
        return (self._time_budget() if clock_says_stop else None) or self.steps_done(progress)

    def epochs_done(self, progress: TrainingProgress) -> str | None:
        if self.max_epochs is not None and progress.epoch >= self.max_epochs:
            return f"max_epochs ({self.max_epochs})"
        return None

    def steps_done(self, progress: TrainingProgress) -> str | None:
        if self.max_steps is not None and progress.step >= self.max_steps:
            return f"max_steps ({self.max_steps})"
        return None

    def over_time(self, progress: TrainingProgress) -> str | None:
        if self.max_minutes is not None and progress.elapsed_seconds >= 60 * self.max_minutes:
            return self._time_budget()
        return None

    def _time_budget(self) -> str:
        return f"time budget ({self.max_minutes:g} min)"

    def out_of_patience(self, progress: TrainingProgress) -> str | None:
        """Early stopping: the validation score (`validation_score`) has gone `early_stopping_patience`
        interval validations without improving (every process reads the same scores, so all agree)."""
        patience = self.early_stopping_patience
        if patience is None or progress.validations_since_best < patience:
            return None
        if self.validation_bleu:
            best = f"BLEU {progress.best_checked:.2f}"
        else:
            best = f"loss {-progress.best_checked:.4f}"
        logger.info(
            "Update %d: the validation %s has not improved for %d validations (best %s); stopping "
            "(early_stopping_patience %d)",
            progress.step,
            "BLEU" if self.validation_bleu else "loss",
            progress.validations_since_best,
            best,
            patience,
        )
        return f"no validation improvement for {progress.validations_since_best} checks"

    @contextlib.contextmanager
    def signals_caught(self) -> Iterator[None]:
        """SIGTERM and SIGINT, while inside, are noted in `stop_signal` instead of killing: the run finishes
        the update under way, saves, and stops (`stopped_by_signal`)."""

        def note_stop(signal_number, frame):
            self.stop_signal = signal_number

        earlier = {number: signal.signal(number, note_stop) for number in STOP_SIGNALS}
        try:
            yield
        finally:
            for number, handler in earlier.items():
                signal.signal(number, handler)


def stopped_by_signal(signal_number: int, step: int, last: Path) -> TrainingStopped:
    """What a run stopped by `signal_number` after update `step` raises, once it saved `last`."""
    name = signal.Signals(signal_number).name
    return TrainingStopped(
        f"stopped by {name} after update {step}, saved in {last}; "
        "continue with the same command and --resume",
        signal_number,
    )


def diverged(what: str, last: Path, saved_step: int | None) -> TrainingError:
    """What a run raises once `what` (its loss or weights) is no longer finite, naming the checkpoint to
    resume from: `last`, saved at update `saved_step` (None: nothing saved yet)."""
    resumable = (
        f"the last checkpoint, {last} (update {saved_step}), has finite weights: continue from it with "
        "--resume and a lower lr"
        if saved_step
        else "no checkpoint was saved before: start again with a lower lr"
    )
    return TrainingError(
        f"{what}: training diverged (lower lr, set clip_grad_norm or use bf16 instead of fp16); nothing from "
        f"this update on was saved; {resumable}"
    )
