"""Training curves from the JSON-lines log that `hf_vanilla.training.train` writes."""

from __future__ import annotations

import json
import os
from pathlib import Path

from hf_vanilla.files import atomic_file


def read_training_log(path: str | os.PathLike) -> tuple[list[dict], list[dict]]:
    """The training records (with `loss`) and the validation records (with `val_loss`) of a log."""
    records = [json.loads(line) for line in Path(path).read_text().splitlines() if line.strip()]
    return [r for r in records if "loss" in r], [r for r in records if "val_loss" in r]


def plot_training_log(log_path: str | os.PathLike, output_path: str | os.PathLike) -> Path:
    """Write a PNG of loss (training and validation), validation BLEU and learning rate against updates."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    training, validation = read_training_log(log_path)
    if not training and not validation:
        raise ValueError(f"{log_path} holds no training or validation records")
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
    figure.suptitle(Path(log_path).parent.name)
    figure.tight_layout()
    with atomic_file(output_path) as staging:
        figure.savefig(staging, dpi=100)
    plt.close(figure)
    return Path(output_path)
