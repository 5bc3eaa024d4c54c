import json
import logging
import math
import os
import pickle
import re
import shutil
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path
from types import SimpleNamespace

import pytest
import torch
import torch.nn.functional as F
from conftest import DE_EN, REPO, run_script, tiny_config
from safetensors.torch import load_file
from transformers import AutoModelForSeq2SeqLM, AutoTokenizer

from hf_vanilla import VanillaTransformerConfig, VanillaTransformerForConditionalGeneration
from hf_vanilla.checkpoints.loading import load_model_and_tokenizer
from hf_vanilla.precision import auto_precision, cpu_has_native_bf16
from hf_vanilla.tools.plotting import plot_training_log
from hf_vanilla.training.loss import label_smoothed_loss, training_loss_function
from hf_vanilla.training.recipes import apply_recipe, keys_left_auto
from hf_vanilla.training.run_directory import (
    LOCK_FILE,
    LOG_FILE,
    RETIRED_LAST,
    average_checkpoints,
    numbered_checkpoints,
    run_traces,
)
from hf_vanilla.training.schedule import (
    LearningRateSchedule,
    inverse_sqrt_factor,
    make_lr_scheduler,
    peak_learning_rate,
)
from hf_vanilla.training.settings import TrainingConfig, TrainingError, load_training_config
from hf_vanilla.training.stopping import TrainingStopped
from hf_vanilla.training.train import _loader_workers, train
from hf_vanilla.training.trainer import Trainer
from hf_vanilla.translation.decoding import QUIET, translate_sentences

CONFIGS = sorted((REPO / "configs").glob("*.yaml"))


def training_losses(output_dir):
    records = [json.loads(line) for line in (Path(output_dir) / LOG_FILE).read_text().splitlines()]
    return [(record["step"], record["loss"]) for record in records if "loss" in record]


def weights(model_dir):
    return load_file(Path(model_dir) / "model.safetensors")


def test_loss_goes_down_and_checkpoints_load(trained_run):
    losses = [loss for _, loss in training_losses(trained_run)]
    assert len(losses) == 30
    assert sum(losses[-5:]) / 5 < sum(losses[:5]) / 5 - 0.5
    assert [path.name for path in numbered_checkpoints(trained_run)] == [
        "checkpoint_10",
        "checkpoint_20",
        "checkpoint_30",
    ]
    for name in ("checkpoint_30", "checkpoint_last", "checkpoint_best", "checkpoint_average"):
        model = AutoModelForSeq2SeqLM.from_pretrained(trained_run / name)
        assert isinstance(model, VanillaTransformerForConditionalGeneration)
        assert (model.generation_config.num_beams, model.generation_config.length_penalty) == (4, 0.6)
        tokenizer = AutoTokenizer.from_pretrained(trained_run / name)
        assert len(tokenizer) == model.config.vocab_size
    torch.testing.assert_close(
        dict(AutoModelForSeq2SeqLM.from_pretrained(trained_run / "checkpoint_last").state_dict()),
        dict(AutoModelForSeq2SeqLM.from_pretrained(trained_run / "checkpoint_30").state_dict()),
    )
    validations = [json.loads(line) for line in (trained_run / LOG_FILE).read_text().splitlines()]
    validations = [record for record in validations if "val_loss" in record]
    assert [record["step"] for record in validations] == [10, 20, 30]
    assert all(0 <= record["val_bleu"] <= 100 for record in validations)
    assert not [path for path in trained_run.iterdir() if path.name.startswith(".")]


def test_logged_learning_rates_follow_the_schedule(trained_run):
    records = [json.loads(line) for line in (trained_run / LOG_FILE).read_text().splitlines()]
    rates = {record["step"]: record["lr"] for record in records if "lr" in record}
    for step in (1, 5, 10, 11, 30):
        assert rates[step] == pytest.approx(3e-3 * min(step / 10, math.sqrt(10 / step)))


@pytest.mark.parametrize("step", [1, 100, 3999, 4000, 4001, 20000])
def test_scheduler_matches_the_paper_formula(step):
    d_model, warmup = 512, 4000
    parameter = torch.nn.Parameter(torch.zeros(1))
    optimizer = torch.optim.Adam([parameter], lr=peak_learning_rate(d_model, warmup, lr_scale=2.0))
    scheduler = make_lr_scheduler(optimizer, LearningRateSchedule(warmup))
    for _ in range(step - 1):
        optimizer.step()
        scheduler.step()
    paper = 2.0 * d_model**-0.5 * min(step**-0.5, step * warmup**-1.5)
    assert optimizer.param_groups[0]["lr"] == pytest.approx(paper, rel=1e-9)


def test_cooldown_falls_linearly_to_zero_over_the_last_share_of_the_budget():
    schedule = LearningRateSchedule(warmup=10, cooldown=0.25, total_updates=100)
    assert schedule(50) == inverse_sqrt_factor(51, 10)  # before the cooldown: the paper's schedule
    assert schedule(75) == pytest.approx(inverse_sqrt_factor(76, 10))
    assert schedule(90) == pytest.approx(0.4 * inverse_sqrt_factor(91, 10))
    assert schedule(100) == 0.0
    schedule.clock_spent = 0.95  # the clock runs out before the updates do: it leads
    assert schedule(50) == pytest.approx(0.2 * inverse_sqrt_factor(51, 10))
    schedule.clock_spent = 1.2
    assert schedule(50) == 0.0


def test_run_with_cooldown_logs_the_cooled_learning_rates(tiny_dataset, tokenizer_dir, tmp_path):
    train(tiny_config(tiny_dataset, tokenizer_dir, tmp_path, lr_cooldown=0.5, validation_max_sentences=4))
    records = [json.loads(line) for line in (tmp_path / LOG_FILE).read_text().splitlines()]
    rates = [record["lr"] for record in records if "lr" in record]
    # Update s runs after s - 1 of the 12 updates: full rate until half the budget is spent, then down to 1/6.
    expected = [3e-3 * inverse_sqrt_factor(s, 10) * min(1.0, (1 - (s - 1) / 12) / 0.5) for s in range(1, 13)]
    assert rates == pytest.approx(expected)
    assert rates[-1] == pytest.approx(3e-3 * inverse_sqrt_factor(12, 10) / 6)


def test_peak_override_is_fairseq_inverse_sqrt():
    assert peak_learning_rate(512, 4000, lr=5e-4) == 5e-4
    assert inverse_sqrt_factor(1000, 4000) == pytest.approx(0.25)
    assert inverse_sqrt_factor(16000, 4000) == pytest.approx(0.5)


def test_resume_after_a_kill_equals_an_uninterrupted_run(tiny_dataset, tokenizer_dir, tmp_path, monkeypatch):
    # Logging every 4 updates: the checkpoint at 6 falls inside an interval, whose totals must carry over.
    uninterrupted = tmp_path / "uninterrupted"
    train(tiny_config(tiny_dataset, tokenizer_dir, uninterrupted, log_interval=4))

    killed = tmp_path / "killed"
    real_update = Trainer._update
    calls = []

    def update_then_die(session, *args):
        if len(calls) == 8:  # after the checkpoint at update 6, before the one at 12
            raise KeyboardInterrupt
        calls.append(1)
        return real_update(session, *args)

    monkeypatch.setattr(Trainer, "_update", update_then_die)
    with pytest.raises(KeyboardInterrupt):
        train(tiny_config(tiny_dataset, tokenizer_dir, killed, log_interval=4))
    monkeypatch.setattr(Trainer, "_update", real_update)
    assert [step for step, _ in training_losses(killed)] == [4, 8]
    with pytest.raises(TrainingError, match="already holds a run"):
        train(tiny_config(tiny_dataset, tokenizer_dir, killed, log_interval=4))
    train(tiny_config(tiny_dataset, tokenizer_dir, killed, log_interval=4), resume=True)

    assert training_losses(killed) == training_losses(uninterrupted)
    for name in ("checkpoint_last", "checkpoint_12", "checkpoint_best"):
        torch.testing.assert_close(weights(killed / name), weights(uninterrupted / name), rtol=0, atol=0)


def test_dataloader_workers_train_as_the_main_process_does(
    tiny_dataset, tokenizer_dir, tmp_path, caplog, monkeypatch
):
    """Batches padded in 2 worker processes (in a GPU's shape buckets, over two epochs: the workers persist,
    and after a kill and a resume in the second epoch) give the losses and weights of batches padded in the
    training process; auto keeps a CPU run's cores for the model."""
    caplog.set_level(logging.INFO)
    runs = {"0": tmp_path / "main", "2": tmp_path / "workers", "auto": tmp_path / "auto"}
    two_epochs = {"max_steps": None, "max_epochs": 2, "save_interval_updates": 45, "shape_buckets": "yes"}
    for workers, output_dir in runs.items():
        train(tiny_config(tiny_dataset, tokenizer_dir, output_dir, dataloader_workers=workers, **two_epochs))
    plans = [record.getMessage() for record in caplog.records if "data loader workers" in record.getMessage()]
    assert [re.search(r"; (\d+) data loader workers", plan).group(1) for plan in plans] == ["0", "2", "0"]
    main, workers = training_losses(runs["0"]), training_losses(runs["2"])
    assert len(main) > 45 and main == workers == training_losses(runs["auto"])
    killed = tmp_path / "killed"
    real_update, calls = Trainer._update, []

    def update_then_die(session, *args):
        if len(calls) == 60:  # after the checkpoint at update 45, in the second epoch
            raise KeyboardInterrupt
        calls.append(1)
        return real_update(session, *args)

    monkeypatch.setattr(Trainer, "_update", update_then_die)
    with pytest.raises(KeyboardInterrupt):
        train(tiny_config(tiny_dataset, tokenizer_dir, killed, dataloader_workers="2", **two_epochs))
    monkeypatch.setattr(Trainer, "_update", real_update)
    train(tiny_config(tiny_dataset, tokenizer_dir, killed, dataloader_workers="2", **two_epochs), resume=True)
    assert training_losses(killed) == main
    for run in (runs["2"], killed):
        torch.testing.assert_close(
            weights(run / "checkpoint_last"), weights(runs["0"] / "checkpoint_last"), rtol=0, atol=0
        )
    with pytest.raises(TrainingError, match="dataloader_workers must be auto or a whole number, got 'many'"):
        train(tiny_config(tiny_dataset, tokenizer_dir, tmp_path / "bad", dataloader_workers="many"))


@pytest.mark.parametrize(
    ("setting", "device", "cores", "local_processes", "expected"),
    [
        ("auto", "cpu", 16, 1, 0),
        ("auto", "cuda", 16, 1, 4),
        ("auto", "cuda", 16, 8, 1),
        ("auto", "cuda", 8, 8, 0),
        ("auto", "cuda", 2, 1, 1),
        ("3", "cpu", 16, 1, 3),
    ],
)
def test_dataloader_workers_auto_takes_a_gpu_process_share_of_the_cores(
    monkeypatch, setting, device, cores, local_processes, expected
):
    monkeypatch.setattr(os, "cpu_count", lambda: cores)
    monkeypatch.setenv("LOCAL_WORLD_SIZE", str(local_processes))
    accelerator = SimpleNamespace(device=torch.device(device))
    assert _loader_workers(TrainingConfig(dataloader_workers=setting), accelerator) == expected


def test_late_dropout_trains_without_dropout_then_switches_it_on(tiny_dataset, tokenizer_dir, tmp_path):
    no_dropout = {
        "attention_dropout": 0.0,
        "activation_dropout": 0.0,
        "max_steps": 8,
        "validation_max_sentences": 4,
    }
    train(tiny_config(tiny_dataset, tokenizer_dir, tmp_path / "plain", dropout=0.0, **no_dropout))
    late = {"dropout": 0.3, "attention_dropout": 0.1, "activation_dropout": 0.1}
    train(
        tiny_config(
            tiny_dataset,
            tokenizer_dir,
            tmp_path / "late",
            **{**no_dropout, **late},
            early_dropout_updates=6,
            early_dropout=0.0,
        )
    )
    plain, switched = training_losses(tmp_path / "plain"), training_losses(tmp_path / "late")
    assert switched[:6] == plain[:6]
    assert all(a != b for (_, a), (_, b) in zip(switched[6:], plain[6:], strict=True))
    saved = {
        name: VanillaTransformerConfig.from_pretrained(tmp_path / "late" / name)
        for name in ("checkpoint_6", "checkpoint_last")
    }
    # The early phase changes the modules only: every checkpoint's config.json holds the configured dropout.
    for config in saved.values():
        assert {name: getattr(config, name) for name in late} == late


@pytest.mark.parametrize("setting", ["auto", "no"])
def test_compile_auto_and_no_train_eager(setting):
    """Only compile=yes compiles: auto stays eager on every device (why, the crash included:
    docs/training.md)."""
    loss_function, how = training_loss_function(setting, rdrop_alpha=1.0)
    assert how == "eager" and loss_function.func is label_smoothed_loss
    assert loss_function.keywords == {"rdrop_alpha": 1.0}


@pytest.mark.slow  # torch.compile of the update: a minute of compilation on a CPU
def test_compiled_update_trains_as_eager_and_follows_late_dropout(
    tiny_dataset, tokenizer_dir, tmp_path, caplog
):
    """compile=yes (inductor): with accumulation, clipping and the schedule's learning rates, the first
    updates' losses are eager's; late dropout's switch reaches the compiled graph."""
    settings = {
        "attention_dropout": 0.0,
        "activation_dropout": 0.0,
        "max_steps": 8,
        "tokens_per_update": 512,  # two batches of 256 tokens an update
        "clip_grad_norm": 0.5,
        "validation_max_sentences": 4,
    }
    train(tiny_config(tiny_dataset, tokenizer_dir, tmp_path / "eager", dropout=0.0, compile="no", **settings))
    caplog.set_level(logging.INFO, logger="hf_vanilla.training.train")
    train(
        tiny_config(
            tiny_dataset,
            tokenizer_dir,
            tmp_path / "compiled",
            dropout=0.5,
            early_dropout_updates=6,
            early_dropout=0.0,
            compile="yes",
            **settings,
        )
    )
    assert any("(compile=yes on cpu): torch.compile" in record.getMessage() for record in caplog.records)
    eager, compiled = training_losses(tmp_path / "eager"), training_losses(tmp_path / "compiled")
    assert [step for step, _ in compiled] == list(range(1, 9))
    torch.testing.assert_close(
        [loss for _, loss in compiled[:6]], [loss for _, loss in eager[:6]], rtol=2e-4, atol=0
    )
    # Dropout 0.5 after update 6: a graph that kept the first rate would give eager's losses.
    assert all(abs(a - b) > 1e-2 for (_, a), (_, b) in zip(compiled[6:], eager[6:], strict=True))


def tiny_model_and_batch(**overrides) -> tuple[torch.nn.Module, dict[str, torch.Tensor]]:
    """A tiny model and a collated batch of two pairs, the second target padded after 3 tokens."""
    model = VanillaTransformerForConditionalGeneration(
        VanillaTransformerConfig.from_preset("tiny", vocab_size=40, **overrides)
    )
    labels = torch.randint(4, 40, (2, 5))
    labels[1, 3:] = -100
    batch = {"input_ids": torch.randint(4, 40, (2, 6)), "labels": labels}
    batch["decoder_input_ids"] = model.prepare_decoder_input_ids_from_labels(labels)
    return model, batch


def test_label_smoothed_loss_is_computed_from_the_logits():
    model, batch = tiny_model_and_batch()
    labels = batch["labels"]
    model.eval()
    logits, keep = model(**batch).logits, labels != -100
    expected = F.cross_entropy(logits[keep], labels[keep], label_smoothing=0.1, reduction="sum") / 4
    torch.testing.assert_close(label_smoothed_loss(model, batch, 0.1, 4), expected)


def test_rdrop_adds_the_symmetric_kl_of_two_dropout_passes():
    """R-Drop: the batch twice in one forward, each copy with its own dropout; (mean of the two label-smoothed
    losses + alpha/4 x KL(p||q) + KL(q||p) over target tokens) / divisor. Without dropout it is the plain
    loss."""
    model, batch = tiny_model_and_batch(dropout=0.3)
    twice = {name: torch.cat([tensor, tensor]) for name, tensor in batch.items()}
    torch.manual_seed(0)
    logits = model(**{name: tensor for name, tensor in twice.items() if name != "labels"}).logits
    keep = twice["labels"] != -100
    cross_entropy = (
        F.cross_entropy(logits[keep], twice["labels"][keep], label_smoothing=0.1, reduction="sum") / 2
    )
    p, q = F.softmax(logits.float(), -1).chunk(2)
    kl = (p * (p / q).log()).sum(-1) + (q * (q / p).log()).sum(-1)
    expected = (cross_entropy + 5 / 4 * kl[keep.chunk(2)[0]].sum()) / 4

    torch.manual_seed(0)
    loss = label_smoothed_loss(model, batch, 0.1, 4, rdrop_alpha=5)
    torch.testing.assert_close(loss, expected)
    loss.backward()  # through both copies
    assert all(parameter.grad is not None for parameter in model.parameters())
    assert kl[keep.chunk(2)[0]].sum() > 0.01
    model.eval()
    plain = label_smoothed_loss(model, batch, 0.1, 4)
    torch.testing.assert_close(label_smoothed_loss(model, batch, 0.1, 4, rdrop_alpha=5), plain)


def test_rdrop_setting_reaches_the_training_loss(tiny_dataset, tokenizer_dir, tmp_path):
    """Without dropout the two copies agree and R-Drop trains as the plain loss; with dropout its logged
    losses carry the KL term (the unit test above checks its value)."""
    settings = {"max_steps": 4, "save_interval_updates": 4, "average_last": 1, "validation_max_sentences": 4}
    losses = {}
    for dropout, alpha in ((0.0, 0.0), (0.0, 5.0), (0.3, 0.0), (0.3, 5.0)):
        output_dir = tmp_path / f"dropout{dropout}-alpha{alpha}"
        config = tiny_config(
            tiny_dataset, tokenizer_dir, output_dir, dropout=dropout, rdrop_alpha=alpha, **settings
        )
        train(config)
        losses[dropout, alpha] = [loss for _, loss in training_losses(output_dir)]
    torch.testing.assert_close(losses[0.0, 5.0], losses[0.0, 0.0], rtol=1e-5, atol=0)
    assert all(abs(a - b) > 1e-3 for a, b in zip(losses[0.3, 5.0], losses[0.3, 0.0], strict=True))


def test_right_to_left_run_trains_as_a_run_on_reversed_target_words(
    tiny_dataset, tokenizer_dir, trained_run, tmp_path, monkeypatch
):
    """right_to_left: true is the same run as one on a copy of the data with every target's words reversed
    (validation too, so that its loss compares like with like; its BLEU reads the translations in reading
    order). `trained_run` made the tokenizer."""
    reversed_copy = tmp_path / "reversed"
    reversed_copy.mkdir()
    for split in ("train", "validation"):
        rows = [json.loads(line) for line in (Path(tiny_dataset) / f"{split}.jsonl").read_text().splitlines()]
        for row in rows:
            row["translation"]["en"] = " ".join(reversed(row["translation"]["en"].split()))
        (reversed_copy / f"{split}.jsonl").write_text("".join(json.dumps(row) + "\n" for row in rows))
    settings = {"max_steps": 4, "save_interval_updates": 4, "average_last": 1, "validation_max_sentences": 4}
    scored = []
    with monkeypatch.context() as patch:
        patch.setattr(
            "hf_vanilla.training.trainer.score_translations",
            lambda translations, references, target_lang: (
                scored.append((translations, references, target_lang)) or {"bleu": 0.0}
            ),
        )
        train(tiny_config(tiny_dataset, tokenizer_dir, tmp_path / "r2l", right_to_left=True, **settings))
    train(tiny_config(str(reversed_copy), tokenizer_dir, tmp_path / "copy", **settings))
    plain_dir = tmp_path / "plain"
    train(tiny_config(tiny_dataset, tokenizer_dir, plain_dir, **settings))
    right_to_left, on_copy = training_losses(tmp_path / "r2l"), training_losses(tmp_path / "copy")
    assert right_to_left == on_copy and right_to_left != training_losses(plain_dir)
    # The saved model says it writes right to left, so its translations come back in reading order, and the
    # run's validation BLEU scored those against the references as they are.
    model, tokenizer = load_model_and_tokenizer(tmp_path / "r2l" / "checkpoint_4", "cpu")
    assert model.config.right_to_left
    assert not VanillaTransformerConfig.from_pretrained(plain_dir).right_to_left
    validation = (Path(tiny_dataset) / "validation.jsonl").read_text()
    rows = [json.loads(line)["translation"] for line in validation.splitlines()]
    sources, references = [row["de"] for row in rows[:4]], [row["en"] for row in rows[:4]]
    translations = translate_sentences(
        model, tokenizer, sources, batching=QUIET, num_beams=1, do_sample=False
    )
    assert scored == [(translations, references, "en")]


def test_time_budget_stops_and_saves_and_counts_across_resumes(tiny_dataset, tokenizer_dir, tmp_path):
    config = tiny_config(tiny_dataset, tokenizer_dir, tmp_path, max_steps=1000, max_minutes=0.001)
    train(config)
    steps = [step for step, _ in training_losses(tmp_path)]
    assert steps == list(range(1, len(steps) + 1)) and len(steps) < 1000
    assert [path.name for path in numbered_checkpoints(tmp_path)] == [f"checkpoint_{len(steps)}"]
    assert (tmp_path / "checkpoint_last").is_dir()
    train(config, resume=True)  # the budget is spent: nothing more to train
    assert [step for step, _ in training_losses(tmp_path)] == steps
    with pytest.raises(TrainingError, match=r"differs in d_ff \(64 saved, 128 configured\)"):
        train(load_training_config(**{**vars(config), "model_overrides": {"d_ff": 128}}), resume=True)


def test_early_stopping_ends_after_validations_without_a_lower_loss_and_stays_stopped_on_resume(
    tiny_dataset, tokenizer_dir, tmp_path, monkeypatch, caplog
):
    """fairseq's --patience: the run ends at the third validation in a row that is no better than the best,
    says why in its log and its last checkpoint's card, and averages the checkpoints around the best."""
    scripted_losses = iter([5.0, 4.0, 4.5, 4.0, 4.2, 3.0, 2.0])

    def scripted_validation(*args):
        return {"val_loss": next(scripted_losses)}

    monkeypatch.setattr("hf_vanilla.training.trainer.validate", scripted_validation)
    config = tiny_config(
        tiny_dataset,
        tokenizer_dir,
        tmp_path,
        max_steps=100,
        save_interval_updates=2,
        early_stopping_patience=3,
        validation_bleu=False,
        average_last=3,
    )
    with caplog.at_level(logging.INFO, logger="hf_vanilla.training"):
        train(config)
    assert max(step for step, _ in training_losses(tmp_path)) == 10  # validations at 2, 4 (best), 6, 8, 10
    saved = [path.name for path in numbered_checkpoints(tmp_path)]
    assert saved == [f"checkpoint_{step}" for step in (2, 4, 6, 8, 10)]
    assert (
        "loss has not improved for 3 validations (best loss 4.0000); stopping (early_stopping_patience 3)"
        in caplog.text
    )
    assert "Training stopped after update 10: no validation improvement for 3 checks" in caplog.text
    card = (tmp_path / "checkpoint_10" / "README.md").read_text()
    assert "Training stopped: no validation improvement for 3 checks." in card
    # around the best, update 4
    assert "Averaged checkpoint_2, checkpoint_4, checkpoint_6 into" in caplog.text
    train(config, resume=True)  # the patience is spent and saved with the run: nothing more to train
    assert max(step for step, _ in training_losses(tmp_path)) == 10
    assert next(scripted_losses) == 3.0  # no validation ran on resume


def test_early_stopping_follows_validation_bleu_where_the_run_scores_it(
    tiny_dataset, tokenizer_dir, tmp_path, monkeypatch
):
    """The score that picks checkpoint_best counts: BLEU stalls at the second validation while the loss still
    falls."""
    scripted = iter([(5.0, 10.0), (4.0, 12.0), (3.5, 11.0), (3.0, 12.0), (2.5, 20.0)])

    def scripted_validation(*args):
        loss, bleu = next(scripted)
        return {"val_loss": loss, "val_bleu": bleu}

    monkeypatch.setattr("hf_vanilla.training.trainer.validate", scripted_validation)
    config = tiny_config(
        tiny_dataset, tokenizer_dir, tmp_path, max_steps=100, save_interval_updates=2,
        early_stopping_patience=2,
    )
    train(config)
    # BLEU 12 at update 4, no better at 6 and 8
    assert max(step for step, _ in training_losses(tmp_path)) == 8


def test_patience_ignores_the_validation_of_a_signal_stop_so_resume_stops_where_an_uninterrupted_run_does(
    tiny_dataset, tokenizer_dir, tmp_path, monkeypatch
):
    # best at the first
    monkeypatch.setattr("hf_vanilla.training.trainer.validate", lambda *args: {"val_loss": 4.0})
    settings = {"max_steps": 100, "save_interval_updates": 2, "early_stopping_patience": 2}
    uninterrupted = tmp_path / "uninterrupted"
    train(tiny_config(tiny_dataset, tokenizer_dir, uninterrupted, **settings))
    assert max(step for step, _ in training_losses(uninterrupted)) == 6  # validations at 2 (best), 4, 6

    stopped = tmp_path / "stopped"
    real_update = Trainer._update

    def update_then_sigterm_at_3(session, *args):
        if session.progress.step == 2:  # the update under way becomes update 3, between two interval saves
            os.kill(os.getpid(), signal.SIGTERM)
        return real_update(session, *args)

    monkeypatch.setattr(Trainer, "_update", update_then_sigterm_at_3)
    with pytest.raises(TrainingStopped, match="after update 3"):
        train(tiny_config(tiny_dataset, tokenizer_dir, stopped, **settings))
    monkeypatch.setattr(Trainer, "_update", real_update)
    train(tiny_config(tiny_dataset, tokenizer_dir, stopped, **settings), resume=True)
    assert max(step for step, _ in training_losses(stopped)) == 6


@pytest.mark.parametrize(
    ("overrides", "message"),
    [
        ({"validation_split": None}, "early_stopping_patience counts validations: set validation_split"),
        ({"save_interval_updates": None}, "which come at the saves: set save_interval_updates or"),
        ({"early_stopping_patience": 0}, "early_stopping_patience must be positive or null, got 0"),
        (
            {"average_last": 4},
            r"average_last \(4\) can exceed the checkpoints of a run that early stopping ends",
        ),
    ],
)
def test_early_stopping_settings_that_cannot_work_are_refused(
    tiny_dataset, tokenizer_dir, tmp_path, overrides, message
):
    settings = {"early_stopping_patience": 2, **overrides}
    with pytest.raises(TrainingError, match=message):
        train(tiny_config(tiny_dataset, tokenizer_dir, tmp_path / "out", **settings))
    assert not (tmp_path / "out").exists() or not list((tmp_path / "out").glob("checkpoint*"))


def launch_two_processes(dataset, tokenizer_dir, output_dir, settings: dict, *flags: str) -> subprocess.Popen:
    """scripts/train.py under torchrun, two CPU processes, in a session of its own (killable together)."""
    given = {name: value for name, value in settings.items() if value is not None}
    flags = [*flags, *(f"--{name.replace('_', '-')}={value}" for name, value in given.items())]
    command = [
        sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node=2",
        str(REPO / "scripts" / "train.py"),
        f"--dataset={dataset}", *DE_EN, f"--tokenizer={tokenizer_dir}", f"--output-dir={output_dir}",
        "--model-preset=tiny", "--max-tokens=256", "--tokens-per-update=512", "--lr=3e-3", "--warmup=10",
        "--log-interval=1", "--no-tensorboard", "--mixed-precision=no", *flags,
    ]  # fmt: skip
    environment = {**os.environ, "ACCELERATE_USE_CPU": "1", "OMP_NUM_THREADS": "1"}
    return subprocess.Popen(
        command, env=environment, stderr=subprocess.PIPE, text=True, start_new_session=True
    )


@pytest.mark.slow  # two processes under torchrun
def test_two_processes_equal_one_process_accumulating_two_batches(tiny_dataset, tokenizer_dir, tmp_path):
    # No dropout: the two processes draw from two random streams, the single one from one.
    settings = {"dropout": 0.0, "max_steps": 4, "save_interval_updates": None, "validation_max_sentences": 8}
    train(tiny_config(tiny_dataset, tokenizer_dir, tmp_path / "one", tokens_per_update=2 * 256, **settings))
    launched = launch_two_processes(tiny_dataset, tokenizer_dir, tmp_path / "two", settings)
    try:
        _, stderr = launched.communicate(timeout=300)
    finally:
        if launched.poll() is None:
            os.killpg(launched.pid, signal.SIGKILL)
    assert launched.returncode == 0, stderr[-3000:]
    assert "2 batches x 2 processes x 1 accumulation steps" in stderr

    one, two = training_losses(tmp_path / "one"), training_losses(tmp_path / "two")
    assert [step for step, _ in two] == [1, 2, 3, 4]
    assert [loss for _, loss in two] == pytest.approx([loss for _, loss in one], rel=1e-5)
    torch.testing.assert_close(
        weights(tmp_path / "two" / "checkpoint_last"),
        weights(tmp_path / "one" / "checkpoint_last"),
        rtol=1e-4,
        atol=1e-5,
    )


def test_average_checkpoints_is_the_elementwise_mean(tmp_path):
    config = VanillaTransformerConfig.from_preset("tiny", vocab_size=50)
    directories = []
    for seed in range(3):
        torch.manual_seed(seed)
        directory = tmp_path / f"checkpoint_{seed + 1}"
        VanillaTransformerForConditionalGeneration(config).save_pretrained(directory)
        directories.append(directory)
    average_checkpoints(directories, tmp_path / "average")

    averaged = AutoModelForSeq2SeqLM.from_pretrained(tmp_path / "average").state_dict()
    originals = [AutoModelForSeq2SeqLM.from_pretrained(path).state_dict() for path in directories]
    for name, tensor in averaged.items():
        torch.testing.assert_close(tensor, sum(original[name] for original in originals) / 3)
    assert not torch.equal(averaged["model.shared.weight"], originals[-1]["model.shared.weight"])
    assert averaged["lm_head.weight"].data_ptr() == averaged["model.shared.weight"].data_ptr()


def test_average_checkpoints_refuses_different_models(tmp_path):
    for name, d_ff in (("checkpoint_1", 64), ("checkpoint_2", 128)):
        config = VanillaTransformerConfig.from_preset("tiny", vocab_size=50, d_ff=d_ff)
        VanillaTransformerForConditionalGeneration(config).save_pretrained(tmp_path / name)
    with pytest.raises(ValueError, match="shape"):
        average_checkpoints(numbered_checkpoints(tmp_path), tmp_path / "average")
    assert not (tmp_path / "average").exists()


@pytest.mark.parametrize(
    ("overrides", "message"),
    [
        (
            {"dataset": "/nonexistent/corpus"},
            "is no local path and could not be loaded from the Hub.*--dataset PATH",
        ),
        ({"target_lang": "xx"}, "'xx'.*available languages"),
        ({"model_overrides": {"vocab_size": 123}}, "vocab_size: tokenizer has 500, model config has 123"),
        ({"lr": 1e30, "max_steps": 20}, "loss is not finite at update"),
        ({"model_preset": "huge"}, "unknown preset 'huge'"),
        ({"max_steps": None}, "set at least one of max_steps, max_epochs, max_minutes"),
        ({"early_dropout": 1.5}, r"early_dropout must be in \[0, 1\), got 1.5"),
        ({"rdrop_alpha": -1}, r"rdrop_alpha must be 0 \(off\) or more, got -1"),
        ({"lr_cooldown": -0.1}, r"lr_cooldown must be a share of the budget in \[0, 1\], got -0.1"),
        ({"compile": "fast"}, "compile must be auto, yes or no, got 'fast'"),
    ],
)
def test_bad_input_raises_a_one_line_error(tiny_dataset, tokenizer_dir, tmp_path, overrides, message):
    output_dir = tmp_path / "out"
    dataset = overrides.pop("dataset", tiny_dataset)
    with pytest.raises(TrainingError, match=message) as raised:
        train(tiny_config(dataset, tokenizer_dir, output_dir, save_interval_updates=None, **overrides))
    assert "\n" not in str(raised.value)
    checkpoints = (
        list(output_dir.glob("*checkpoint*")) + list(output_dir.glob(".*")) if output_dir.exists() else []
    )
    assert checkpoints == []


def test_unwritable_output_dir_and_missing_resume_are_errors(tiny_dataset, tokenizer_dir, tmp_path):
    blocker = tmp_path / "a_file"
    blocker.write_text("")
    with pytest.raises(TrainingError, match="is not writable"):
        train(tiny_config(tiny_dataset, tokenizer_dir, blocker / "out"))
    with pytest.raises(TrainingError, match="nothing to resume"):
        train(tiny_config(tiny_dataset, tokenizer_dir, tmp_path / "new"), resume=True)


def test_script_prints_known_errors_without_traceback(tmp_path):
    finished = run_script(
        "train.py", "--dataset", tmp_path / "missing", *DE_EN, "--tokenizer", tmp_path / "tok",
        "--output-dir", tmp_path / "out", "--max-steps", "1",
    )  # fmt: skip
    assert finished.returncode != 0
    assert "Traceback" not in finished.stderr
    assert finished.stderr.strip().splitlines()[-1].startswith("error: ")
    assert "could not be loaded from the Hub" in finished.stderr
    assert not (tmp_path / "out").exists() and not (tmp_path / "tok").exists()


def test_config_file_keys_are_overridden_by_flags(tmp_path):
    path = tmp_path / "run.yaml"
    path.write_text("dataset: d\ntokenizer: t\noutput_dir: o\nadam_eps: 1e-9\nlr: 1e-3\nmax_steps: 10\n")
    config = load_training_config(path, lr=None, max_tokens="2048", validation_bleu="false")
    assert (config.adam_eps, config.lr, config.max_tokens, config.validation_bleu) == (
        1e-9,
        None,
        2048,
        False,
    )
    with pytest.raises(TrainingError, match="unknown config keys \\['learning_rate'\\]"):
        load_training_config(path, learning_rate=1.0)
    with pytest.raises(TrainingError, match="patience is now early_stopping_patience"):
        load_training_config(path, patience=5)
    with pytest.raises(TrainingError, match="max_tokens must be int"):
        load_training_config(path, max_tokens="lots")


@pytest.mark.parametrize("path", CONFIGS, ids=[path.stem for path in CONFIGS])
def test_shipped_configs_are_complete(path):
    config = load_training_config(path)
    if keys_left_auto(config):  # configs/your-pair.yaml, complete once the corpus-size table fills its keys
        config = apply_recipe(config, pairs=7_112)
    config.check()
    VanillaTransformerConfig.from_preset(config.model_preset, **config.model_overrides, vocab_size=1000)
    assert (config.adam_beta1, config.adam_beta2, config.adam_eps) == (0.9, 0.98, 1e-9)
    assert config.label_smoothing == 0.1  # the paper's, which the small corpus's rows keep
    assert (config.num_beams, config.length_penalty) == (4, 0.6)


def test_plot_training_log_writes_a_png(trained_run, tmp_path):
    written = plot_training_log(trained_run, tmp_path / "curves.png")
    assert written.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_init_from_starts_a_new_run_from_saved_weights_and_their_tokenizer(
    trained_run, tiny_dataset, tmp_path
):
    start = trained_run / "checkpoint_last"
    config = tiny_config(
        tiny_dataset,
        "",
        tmp_path / "finetune",
        init_from=str(start),
        max_steps=2,
        lr=1e-12,
        validation_split=None,
    )
    train(config)
    losses = training_losses(tmp_path / "finetune")
    assert [step for step, _ in losses] == [1, 2]  # a new run: fresh optimizer, schedule and step count
    torch.testing.assert_close(weights(tmp_path / "finetune" / "checkpoint_last"), weights(start))
    assert losses[0][1] < training_losses(trained_run)[0][1] - 0.5  # it starts where the first run ended
    with pytest.raises(TrainingError, match=r"init_from .* differs in d_ff \(64 saved, 128 configured\)"):
        train(
            load_training_config(
                **{**vars(config), "output_dir": str(tmp_path / "b"), "model_overrides": {"d_ff": 128}}
            )
        )
    with pytest.raises(TrainingError, match="no saved model there"):
        train(
            load_training_config(
                **{**vars(config), "output_dir": str(tmp_path / "c"), "init_from": str(tmp_path / "none")}
            )
        )


def test_init_from_refuses_a_tokenizer_with_another_vocabulary(
    trained_run, tiny_model_dir, tiny_dataset, tmp_path
):
    config = tiny_config(
        tiny_dataset, str(tiny_model_dir), tmp_path / "out", init_from=str(trained_run / "checkpoint_last")
    )
    with pytest.raises(TrainingError, match="is not the vocabulary of init_from"):
        train(config)


def test_auto_precision_is_chosen_for_this_cpu_and_logged(tiny_dataset, tokenizer_dir, tmp_path):
    # A process of its own: accelerate keeps one precision per process.
    finished = subprocess.run(
        [sys.executable, str(REPO / "scripts" / "train.py"), "--dataset", tiny_dataset,
         "--tokenizer", tokenizer_dir, *DE_EN, "--output-dir", str(tmp_path), "--model-preset", "tiny",
         "--max-tokens", "256", "--max-steps", "2",
         "--validation-split", "null", "--log-interval", "1", "--no-tensorboard"],
        capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    assert finished.returncode == 0, finished.stderr[-3000:]
    # The run logs the precision its own probe chose, with the reason, less the measured speed-up.
    chosen = re.search(r"precision: (\w+) \(auto: (.+?)(?: ran |\)\n)", finished.stderr)
    assert chosen, finished.stderr[-3000:]
    dtype_name, reason = chosen.groups()
    assert f"Precision {dtype_name} on cpu: {reason}" in finished.stderr
    if not cpu_has_native_bf16():  # where bf16 is native, a speed measured on busy cores may fall either side
        assert dtype_name == auto_precision("cpu").dtype_name
    assert len(training_losses(tmp_path)) == 2


def test_a_second_run_into_a_locked_directory_stops_naming_the_holder(tiny_dataset, tokenizer_dir, tmp_path):
    output_dir = tmp_path / "run"
    output_dir.mkdir()
    holder = {"pid": os.getpid(), "host": socket.gethostname(), "since": "2026-01-01 00:00:00"}
    (output_dir / LOCK_FILE).write_text(json.dumps(holder))  # this test's own process: alive
    with pytest.raises(TrainingError, match=rf"is in use by process {os.getpid()} on "):
        train(tiny_config(tiny_dataset, tokenizer_dir, output_dir, max_steps=2))
    assert run_traces(output_dir) == []
    finished = subprocess.run(
        [sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True
    )
    holder["pid"] = int(finished.stdout)  # a process that has ended: its lock is stale
    (output_dir / LOCK_FILE).write_text(json.dumps(holder))
    train(tiny_config(tiny_dataset, tokenizer_dir, output_dir, max_steps=2, save_interval_updates=None))
    assert not (output_dir / LOCK_FILE).exists()  # released at the end
    assert (output_dir / "checkpoint_last").is_dir()


def test_a_plain_run_never_destroys_an_earlier_runs_traces(
    trained_run, tiny_dataset, tokenizer_dir, tmp_path
):
    # A save that crashed between its two renames: checkpoint_last moved aside, the new one not yet in place.
    run = tmp_path / "crashed"
    shutil.copytree(trained_run, run)
    (run / "checkpoint_last").rename(run / RETIRED_LAST)
    log_before = (run / LOG_FILE).read_text()
    config = tiny_config(
        tiny_dataset, tokenizer_dir, run, max_steps=32, save_interval_updates=10, average_last=2
    )
    with pytest.raises(TrainingError, match=r"already holds a run .*--resume .*--overwrite-output-dir"):
        train(config)
    assert (run / RETIRED_LAST / "training_state").is_dir() and (run / LOG_FILE).read_text() == log_before
    train(config, resume=True)  # recovers checkpoint_last from where the crash left it
    assert [step for step, _ in training_losses(run)] == list(range(1, 33))
    assert training_losses(run)[:30] == training_losses(trained_run)
    # Any trace counts, a log alone too; --overwrite-output-dir replaces the run.
    only_log = tmp_path / "only_log"
    only_log.mkdir()
    (only_log / LOG_FILE).write_text(log_before)
    with pytest.raises(TrainingError, match="already holds a run"):
        train(tiny_config(tiny_dataset, tokenizer_dir, only_log, max_steps=2))
    train(
        tiny_config(tiny_dataset, tokenizer_dir, only_log, max_steps=2, save_interval_updates=None),
        overwrite_output_dir=True,
    )
    assert [step for step, _ in training_losses(only_log)] == [1, 2]


def test_resume_refuses_pickles_and_drops_a_torn_last_log_line(
    trained_run, tmp_path, tiny_dataset, tokenizer_dir
):
    run = tmp_path / "run"
    shutil.copytree(trained_run, run)
    state = run / "checkpoint_last" / "training_state"
    assert json.loads((state / "progress.json").read_text())["step"] == 30
    assert not list(state.glob("custom_checkpoint_*"))
    config = tiny_config(tiny_dataset, tokenizer_dir, run, max_steps=31, save_interval_updates=10)
    marker = tmp_path / "code_ran"

    class Exploit:
        def __reduce__(self):
            return (Path.touch, (marker,))

    original = (state / "random_states_0.pkl").read_bytes()
    (state / "random_states_0.pkl").write_bytes(pickle.dumps(Exploit()))
    with pytest.raises(TrainingError, match="cannot resume from"):
        train(config, resume=True)
    (state / "random_states_0.pkl").write_bytes(original)
    (state / "custom_checkpoint_0.pkl").write_bytes(pickle.dumps(Exploit()))
    with pytest.raises(TrainingError, match="pickled objects .*custom_checkpoint_0.pkl"):
        train(config, resume=True)
    assert not marker.exists()
    (state / "custom_checkpoint_0.pkl").unlink()
    with open(run / LOG_FILE, "a") as log:
        log.write('{"step": 31, "lo')  # a crash in the middle of a line
    train(config, resume=True)
    records = [json.loads(line) for line in (run / LOG_FILE).read_text().splitlines()]
    assert [record["step"] for record in records if "loss" in record] == list(range(1, 32))


def test_validation_and_saving_do_not_change_the_training_trajectory(tiny_dataset, tokenizer_dir, tmp_path):
    every_5 = tiny_config(tiny_dataset, tokenizer_dir, tmp_path / "five", save_interval_updates=5)
    every_10 = tiny_config(tiny_dataset, tokenizer_dir, tmp_path / "ten", save_interval_updates=10)
    train(every_5)
    train(every_10)
    assert training_losses(tmp_path / "five") == training_losses(tmp_path / "ten")


def test_unknown_model_override_keys_are_refused(tiny_dataset, tokenizer_dir, tmp_path):
    with pytest.raises(TrainingError, match=r"unknown model_overrides keys \['d_modle'\]"):
        train(tiny_config(tiny_dataset, tokenizer_dir, tmp_path, model_overrides={"d_modle": 64}))


def test_num_beams_1_with_the_default_length_penalty_trains_and_saves(tiny_dataset, tokenizer_dir, tmp_path):
    train(
        tiny_config(
            tiny_dataset, tokenizer_dir, tmp_path, max_steps=2, num_beams=1, save_interval_updates=None
        )
    )
    saved = json.loads((tmp_path / "checkpoint_last" / "generation_config.json").read_text())
    assert saved.get("num_beams", 1) == 1 and "length_penalty" not in saved


def test_a_diverged_run_publishes_no_checkpoint_with_non_finite_weights(
    tiny_dataset, tokenizer_dir, tmp_path
):
    """Weights that blow up between two loss checks are caught at the save, before anything is written."""
    output_dir = tmp_path / "out"
    config = tiny_config(
        tiny_dataset, tokenizer_dir, output_dir, lr=10.0, warmup=1, max_steps=40, save_interval_updates=5,
        log_interval=100,  # the loss is read only at the saves
    )
    with pytest.raises(TrainingError, match="training diverged") as raised:
        train(config)
    assert "\n" not in str(raised.value)
    saved = sorted(output_dir.glob("checkpoint_*"))
    for checkpoint in saved:
        weights = load_file(checkpoint / "model.safetensors")
        assert all(tensor.isfinite().all() for tensor in weights.values()), checkpoint.name
    expected = "checkpoint_last" if saved else "no checkpoint was saved"
    assert expected in str(raised.value)
    for line in (output_dir / LOG_FILE).read_text().splitlines():  # strict JSON: no bare NaN
        json.loads(line, parse_constant=lambda name: pytest.fail(f"{name} in the log"))


def test_a_full_disk_while_saving_is_named_with_the_last_complete_checkpoint(
    tiny_dataset, tokenizer_dir, tmp_path, monkeypatch
):
    import errno

    from hf_vanilla.training import trainer

    real_save, saves = trainer.save_model_directory, []

    def fill_the_disk_at_the_third_model(*args, **kwargs):
        saves.append(1)
        if len(saves) == 3:  # update 4 wrote checkpoint_4 and checkpoint_last; update 8's first write fails
            raise OSError(errno.ENOSPC, "No space left on device")
        return real_save(*args, **kwargs)

    monkeypatch.setattr(trainer, "save_model_directory", fill_the_disk_at_the_third_model)
    output_dir = tmp_path / "out"
    no_space = r"no space left on the device holding .*checkpoint_last \(update 4\)"
    with pytest.raises(TrainingError, match=no_space):
        train(tiny_config(tiny_dataset, tokenizer_dir, output_dir, max_steps=12, save_interval_updates=4))
    assert (output_dir / "checkpoint_4" / "model.safetensors").exists()
    assert not (output_dir / "checkpoint_8").exists()


class HostReads(torch.overrides.TorchFunctionMode):
    """Counts the reads of a tensor's value into Python: on a GPU, each one waits for the device."""

    READS = {
        torch.Tensor.item, torch.Tensor.tolist, torch.Tensor.__bool__, torch.Tensor.__float__,
        torch.Tensor.__int__,
    }

    def __init__(self):
        super().__init__()
        self.count, self.paused = 0, 0

    def __torch_function__(self, func, types, args=(), kwargs=None):
        if func in self.READS and not self.paused:
            self.count += 1
        return func(*args, **(kwargs or {}))


def test_an_update_between_log_and_save_points_reads_nothing_back_from_the_device(
    tiny_dataset, tokenizer_dir, tmp_path, monkeypatch
):
    """The loop's own bookkeeping (token counts, loss, divergence, stop and save decisions) stays on the
    device between log and save points. Not counted: the model's forward (transformers' eager masks inspect
    the padding mask; compiled, they do not) and the optimizer's step (eager Adam keeps its step count on the
    host)."""
    reads_per_update = {}
    real_update = Trainer._update

    def counted_update(self, group, started, bar):
        reads = HostReads()
        model = self.accelerator.unwrap_model(self.optimization.model)
        pause = lambda *args: setattr(reads, "paused", reads.paused + 1)  # noqa: E731
        resume = lambda *args: setattr(reads, "paused", reads.paused - 1)  # noqa: E731
        handles = [
            model.register_forward_pre_hook(pause),
            model.register_forward_hook(resume),
            self.optimization.optimizer.optimizer.register_step_pre_hook(pause),
            self.optimization.optimizer.optimizer.register_step_post_hook(resume),
        ]
        try:
            with reads:
                real_update(self, group, started, bar)
                self._decide()
        finally:
            for handle in handles:
                handle.remove()
        reads_per_update[self.progress.step] = reads.count

    monkeypatch.setattr(Trainer, "_update", counted_update)
    logged_every_sixth = {"max_steps": 12, "log_interval": 6, "save_interval_updates": None}
    train(tiny_config(tiny_dataset, tokenizer_dir, tmp_path / "out", **logged_every_sixth))
    between_log_points = {step: count for step, count in reads_per_update.items() if step % 6}
    assert between_log_points == dict.fromkeys([1, 2, 3, 4, 5, 7, 8, 9, 10, 11], 0)
    # a log point reads the totals: the counter sees reads where there are some
    assert reads_per_update[6] > 0


def test_shape_buckets_train_in_the_logged_shapes(tiny_dataset, tokenizer_dir, tmp_path, caplog, monkeypatch):
    """shape_buckets=yes (the GPU default) on a CPU: every batch the loop sees has one of the logged
    shapes."""
    seen, real_update = set(), Trainer._update

    def recording_update(self, group, *args):
        seen.update(tuple(batch["input_ids"].shape) for batch in group)
        return real_update(self, group, *args)

    monkeypatch.setattr(Trainer, "_update", recording_update)
    caplog.set_level(logging.INFO, logger="hf_vanilla.training.train")
    train(tiny_config(tiny_dataset, tokenizer_dir, tmp_path / "out", max_steps=8, shape_buckets="yes"))
    (line,) = [record.getMessage() for record in caplog.records if "batch shapes" in record.getMessage()]
    logged = {tuple(map(int, shape.split("x"))) for shape in line.split("tokens) ")[1].split(", ")}
    assert seen and seen <= logged


@pytest.mark.slow  # two processes under torchrun
def test_sigterm_to_torchrun_stops_every_process_at_one_update_and_saves(
    tiny_dataset, tokenizer_dir, tmp_path
):
    """Preemption of a multi-process run: the launcher passes SIGTERM on, the processes agree on the stop
    within SHARE_INTERVAL updates, save once together, and --resume continues from there."""
    from hf_vanilla.training.trainer import SHARE_INTERVAL

    output_dir = tmp_path / "run"
    settings = {"max_steps": 5000, "validation_max_sentences": 8}
    launched = launch_two_processes(tiny_dataset, tokenizer_dir, output_dir, settings)
    try:
        log = output_dir / LOG_FILE
        while launched.poll() is None and (not log.exists() or len(log.read_text().splitlines()) < 5):
            time.sleep(0.2)
        launched.send_signal(signal.SIGTERM)
        _, stderr = launched.communicate(timeout=120)
    finally:
        if launched.poll() is None:
            os.killpg(launched.pid, signal.SIGKILL)
    stops = re.findall(r"stopped by SIGTERM after update (\d+)", stderr)
    assert len(stops) == 2 and stops[0] == stops[1], stderr[-3000:]  # each process, the same update
    step = int(stops[0])
    assert step % SHARE_INTERVAL == 0
    progress = json.loads((output_dir / "checkpoint_last" / "training_state" / "progress.json").read_text())
    assert progress["step"] == step
    resumed = launch_two_processes(
        tiny_dataset, tokenizer_dir, output_dir, {**settings, "max_steps": step + 2}, "--resume"
    )
    _, stderr = resumed.communicate(timeout=300)
    assert resumed.returncode == 0, stderr[-3000:]
    assert f"Resumed {output_dir} at update {step}" in stderr
