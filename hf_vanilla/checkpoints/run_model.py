"""`RUN/model`: the one stable name of a run's model to use, the checkpoint training or selection chose.

It is a plain model directory (what `from_pretrained`, the scripts, the service and the pipeline open, and
what a Hub upload sends) whose files are hard links to the chosen checkpoint's: no second copy of the weights,
on every file system that has hard links (NTFS included, with no privilege, unlike symbolic links); where one
has none (FAT, some network shares) the files are copied. A pointer file would spare that copy too, but only
this package would follow it, not `from_pretrained` nor the Hub (docs/using.md).
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path

from hf_vanilla.files import atomic_directory

MODEL_NAME = "model"


def publish_run_model(checkpoint: str | os.PathLike) -> Path:
    """Make `RUN/model` (beside `checkpoint`, in its run directory) the model directory of `checkpoint`: its
    files (weights, configs, tokenizer, card; not the training state under its subdirectories), hard-linked or
    copied. The new directory is built aside and replaces the old one whole (`atomic_directory`): a reader
    finds the old model or the new one, never a mixture. Returns the path of `RUN/model`."""
    checkpoint = Path(checkpoint)
    final = checkpoint.parent / MODEL_NAME
    with atomic_directory(final) as staging:
        for source in sorted(path for path in checkpoint.iterdir() if path.is_file()):
            _link_or_copy(source, staging / source.name)
    return final


def _link_or_copy(source: Path, destination: Path) -> None:
    try:
        os.link(source, destination)
    except OSError:  # no hard links on this file system
        shutil.copy2(source, destination)
