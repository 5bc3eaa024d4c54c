"""The stopping rules (hf_vanilla.training.stopping) alone, on a run's progress: no model, no data."""

import os
import signal
from pathlib import Path

import pytest
from accelerate import PartialState

from hf_vanilla.training.settings import TrainingConfig, TrainingError
from hf_vanilla.training.stopping import StopRules, TrainingStopped, diverged, stopped_by_signal
from hf_vanilla.training.trainer import TrainingProgress


@pytest.fixture(autouse=True)
def accelerate_state():
    PartialState()  # what accelerate's logger asks for before it logs (early stopping's line)


def test_no_rule_stops_a_run_without_limits():
    progress = TrainingProgress(step=10**6, epoch=100, elapsed_seconds=10**6, validations_since_best=100)
    assert StopRules().at_start(progress) is None
    assert StopRules().after_update(progress, clock_says_stop=False) is None


def test_the_budgets_name_themselves_once_spent():
    rules = StopRules(max_epochs=2, max_steps=100, max_minutes=1.5)
    assert rules.epochs_done(TrainingProgress(epoch=1)) is None
    assert rules.epochs_done(TrainingProgress(epoch=2)) == "max_epochs (2)"
    assert rules.steps_done(TrainingProgress(step=99)) is None
    assert rules.steps_done(TrainingProgress(step=100)) == "max_steps (100)"
    assert rules.over_time(TrainingProgress(elapsed_seconds=89.9)) is None
    assert rules.over_time(TrainingProgress(elapsed_seconds=90)) == "time budget (1.5 min)"


def test_after_an_update_the_time_budget_follows_the_shared_clock_and_comes_first():
    rules = StopRules(max_steps=5, max_minutes=10)
    late_and_done = TrainingProgress(step=5, elapsed_seconds=3600)
    # Only the main process's shared clock stops a run for time, so that every process stops together.
    assert rules.after_update(late_and_done, clock_says_stop=False) == "max_steps (5)"
    assert rules.after_update(late_and_done, clock_says_stop=True) == "time budget (10 min)"
    assert rules.after_update(TrainingProgress(step=4), clock_says_stop=False) is None


def test_a_resumed_run_stops_at_once_where_it_had_stopped():
    rules = StopRules(max_epochs=3, max_steps=50, max_minutes=1, early_stopping_patience=2)
    assert rules.at_start(TrainingProgress(epoch=3, step=50)) == "max_epochs (3)"
    assert rules.at_start(TrainingProgress(step=50, elapsed_seconds=60)) == "max_steps (50)"
    assert rules.at_start(TrainingProgress(elapsed_seconds=60)) == "time budget (1 min)"
    out_of_patience = TrainingProgress(best_checked=30.0, validations_since_best=2)
    assert rules.at_start(out_of_patience) == "no validation improvement for 2 checks"
    assert rules.at_start(TrainingProgress(step=49, elapsed_seconds=59)) is None


def test_patience_counts_interval_validations_without_improvement():
    rules, progress = StopRules(early_stopping_patience=2, validation_bleu=True), TrainingProgress()
    for score, stops in ((20.0, False), (19.0, False), (21.0, False), (21.0, False), (20.5, True)):
        progress.count_validation(score)
        assert (rules.out_of_patience(progress) is not None) == stops
    assert rules.out_of_patience(progress) == "no validation improvement for 2 checks"


def test_the_rules_are_the_configs():
    config = TrainingConfig(
        max_epochs=4, max_steps=9, max_minutes=2.5, early_stopping_patience=3, validation_bleu=False
    )
    assert StopRules.of(config) == StopRules(4, 9, 2.5, 3, False)


def test_a_stop_signal_is_noted_not_fatal_and_the_old_handlers_come_back():
    rules = StopRules()
    before = signal.getsignal(signal.SIGTERM)
    with rules.signals_caught():
        os.kill(os.getpid(), signal.SIGTERM)
        assert rules.stop_signal == signal.SIGTERM
    assert signal.getsignal(signal.SIGTERM) is before


def test_a_signal_stop_says_where_to_resume_and_exits_as_the_shell_would():
    stopped = stopped_by_signal(signal.SIGINT, 7, Path("run/checkpoint_last"))
    assert isinstance(stopped, TrainingStopped) and stopped.exit_code == 130
    assert str(stopped) == (
        "stopped by SIGINT after update 7, saved in run/checkpoint_last; "
        "continue with the same command and --resume"
    )


def test_divergence_names_the_checkpoint_to_resume_from_if_any():
    last = Path("run/checkpoint_last")
    resumable = diverged("loss is not finite at update 12", last, 10)
    assert isinstance(resumable, TrainingError)
    assert str(resumable).startswith("loss is not finite at update 12: training diverged")
    assert "the last checkpoint, run/checkpoint_last (update 10), has finite weights" in str(resumable)
    assert "start again with a lower lr" in str(diverged("weights are not finite", last, None))
