"""Training curves from a run's log (`hf_vanilla.training.run_directory.read_training_log`)."""

from __future__ import annotations

import os
from pathlib import Path

from hf_vanilla.extras import require
from hf_vanilla.files import atomic_file
from hf_vanilla.training.run_directory import LOG_FILE, read_training_log


def pyplot():
    """matplotlib's pyplot, drawing into files (the Agg backend: no display needed), or MissingExtra naming
    the plot extra."""
    require("matplotlib", extra="plot").use("Agg")
    return require("matplotlib.pyplot", extra="plot")


def plot_training_log(run_dir: str | os.PathLike, output_path: str | os.PathLike) -> Path:
    """Write a PNG of the run's loss (training and validation), validation BLEU and learning rate against
    updates."""
    plt = pyplot()
    log = read_training_log(run_dir)
    training, validation = log.training, log.validation
    if not training and not validation:
        raise ValueError(f"{Path(run_dir) / LOG_FILE} holds no training or validation records")
    figure, (loss_axes, bleu_axes, lr_axes) = plt.subplots(3, 1, figsize=(8, 9), sharex=True)
    loss_axes.plot([r["step"] for r in training], [r["loss"] for r in training], label="training")
    loss_axes.plot(
        [r["step"] for r in validation], [r["val_loss"] for r in validation], "o-", label="validation"
    )
    loss_axes.set_ylabel("label-smoothed loss\n(nats / target token)")
    loss_axes.legend()
    with_bleu = [r for r in validation if "val_bleu" in r]
    bleu_axes.plot(
        [r["step"] for r in with_bleu], [r["val_bleu"] for r in with_bleu], "o-", color="tab:green"
    )
    bleu_axes.set_ylabel("validation BLEU\n(sacreBLEU, greedy)")
    lr_axes.plot([r["step"] for r in training], [r["lr"] for r in training], color="tab:red")
    lr_axes.set_ylabel("learning rate")
    lr_axes.set_xlabel("update")
    for axes in (loss_axes, bleu_axes, lr_axes):
        axes.grid(alpha=0.3)
    figure.suptitle(Path(run_dir).name)
    figure.tight_layout()
    with atomic_file(output_path) as staging:
        figure.savefig(staging, dpi=100)
    plt.close(figure)
    return Path(output_path)
