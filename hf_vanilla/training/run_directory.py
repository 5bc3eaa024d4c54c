"""Everything a run directory is: its checkpoints (fairseq-style names, averaging, section 6.1), its log, its
config.

A run directory holds `checkpoint_<step>` (numbered, one per save), `checkpoint_last` (also carrying the
training state for `--resume`), `checkpoint_best` and, after averaging, `checkpoint_average`, each a
standalone `save_pretrained` directory with its model card (`hf_vanilla.checkpoints.cards`); `model`, the one
of them to use (`hf_vanilla.checkpoints.run_model`); `train_log.jsonl`, one JSON record a line; and
`training_config.yaml`. Every directory is written under a staging name and renamed into place, so a crash
never leaves one that looks complete but is not.
"""

from __future__ import annotations

import json
import logging
import os
import re
import shutil
import socket
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import torch
from safetensors import safe_open
from safetensors.torch import save_file

from hf_vanilla.checkpoints.cards import CARD_FILE, RunRecord, directory_card, save_card
from hf_vanilla.checkpoints.run_model import MODEL_NAME
from hf_vanilla.files import STAGING_PREFIX, atomic_directory, publish_directory, write_text_atomic
from hf_vanilla.training.settings import TrainingConfig, TrainingError, load_training_config

logger = logging.getLogger(__name__)

NUMBERED_CHECKPOINT = re.compile(r"checkpoint_(\d+)")
LOG_FILE = "train_log.jsonl"
CONFIG_FILE = "training_config.yaml"
LAST, BEST, AVERAGE = "checkpoint_last", "checkpoint_best", "checkpoint_average"
TRAINING_STATE = "training_state"
PROGRESS_FILE = "progress.json"  # inside TRAINING_STATE: where the run stands, as JSON (never a pickle)
LOCK_FILE = ".lock"
RETIRED_LAST = (
    f"{STAGING_PREFIX}retired-{LAST}"  # where publish_directory moves the old checkpoint_last aside
)


def staging_directory(final: str | os.PathLike) -> Path:
    """The fixed temporary sibling where `final` is written before `publish_directory` moves it in place.

    The name is fixed (not random) so that every process of a distributed run writes into the same one.
    It starts with a dot, so nothing that looks for checkpoints ever takes it for one.
    """
    final = Path(final)
    return final.parent / f"{STAGING_PREFIX}{final.name}"


def remove_stale_staging(run_dir: str | os.PathLike) -> None:
    """Delete the staging directories a crashed run left behind."""
    for path in Path(run_dir).glob(f"{STAGING_PREFIX}*"):
        shutil.rmtree(path, ignore_errors=True)


def checkpoint_step(path: str | os.PathLike) -> int | None:
    """The update a `checkpoint_<step>` directory was saved at; None for any other name."""
    match = NUMBERED_CHECKPOINT.fullmatch(Path(path).name)
    return int(match.group(1)) if match else None


def numbered_checkpoints(run_dir: str | os.PathLike) -> list[Path]:
    """The `checkpoint_<step>` directories of a run, oldest (lowest step) first."""
    found = [
        (step, path)
        for path in Path(run_dir).iterdir()
        if (step := checkpoint_step(path)) is not None and path.is_dir()
    ]
    return [path for _, path in sorted(found)]


def average_checkpoints(
    checkpoint_dirs: Sequence[str | os.PathLike], output_dir: str | os.PathLike, run: RunRecord | None = None
) -> Path:
    """Write a model directory whose weights are the element-wise mean of those in `checkpoint_dirs`.

    The config, tokenizer, generation config and code are copied from the last directory; with `run` (what
    made the checkpoints), a model card of the average too. Weights are read with safetensors only (never a
    pickle) and summed in float64, then cast back to their dtype; tensors that are not floating point (none in
    this model) are taken from the last checkpoint.
    """
    checkpoint_dirs = [Path(path) for path in checkpoint_dirs]
    if not checkpoint_dirs:
        raise ValueError("no checkpoints to average")
    weight_files = _weight_files(checkpoint_dirs[-1])
    for directory in checkpoint_dirs[:-1]:
        if _weight_files(directory) != weight_files:
            raise ValueError(
                f"{directory} has weight files {_weight_files(directory)}, but {checkpoint_dirs[-1]} has "
                f"{weight_files}: checkpoints of different models cannot be averaged"
            )
    with atomic_directory(output_dir) as staging:
        # The last checkpoint's card describes it, not the average.
        ignored = shutil.ignore_patterns("*.safetensors", CARD_FILE)
        shutil.copytree(checkpoint_dirs[-1], staging, dirs_exist_ok=True, ignore=ignored)
        for name in weight_files:
            save_file(
                _mean_tensors([directory / name for directory in checkpoint_dirs]),
                staging / name,
                {"format": "pt"},
            )
        if run is not None:
            save_card(directory_card(staging, run), staging)
    return Path(output_dir)


def _weight_files(directory: Path) -> list[str]:
    names = sorted(path.name for path in directory.glob("*.safetensors"))
    if not names:
        raise ValueError(f"{directory} holds no *.safetensors weights")
    return names


def _mean_tensors(paths: Sequence[Path]) -> dict[str, torch.Tensor]:
    """Element-wise mean of the tensors of the safetensors files `paths` (the same keys and shapes)."""
    sums: dict[str, torch.Tensor] = {}
    with safe_open(paths[-1], framework="pt") as last:
        keys = set(last.keys())
        for key in keys:
            sums[key] = last.get_tensor(key)
    dtypes = {key: tensor.dtype for key, tensor in sums.items()}
    averaged = [key for key, tensor in sums.items() if tensor.is_floating_point()]
    for key in averaged:
        sums[key] = sums[key].double()
    for path in paths[:-1]:
        with safe_open(path, framework="pt") as weights:
            if set(weights.keys()) != keys:
                raise ValueError(f"{path} holds other tensors than {paths[-1]}")
            for key in averaged:
                tensor = weights.get_tensor(key)
                if tensor.shape != sums[key].shape:
                    raise ValueError(
                        f"{key} has shape {tuple(tensor.shape)} in {path} "
                        f"but {tuple(sums[key].shape)} in {paths[-1]}"
                    )
                sums[key] += tensor.double()
    return {
        key: (tensor / len(paths)).to(dtypes[key]) if key in averaged else tensor
        for key, tensor in sums.items()
    }


def copy_checkpoint(source: Path, final: Path) -> None:
    """Copy the checkpoint directory `source` to `final` (e.g. checkpoint_best), through its staging name."""
    staging = staging_directory(final)
    shutil.rmtree(staging, ignore_errors=True)
    shutil.copytree(source, staging)
    publish_directory(staging, final)


def remove_old_checkpoints(run_dir: str | os.PathLike, keep: int) -> None:
    """Delete all but the `keep` latest numbered checkpoints."""
    for old in numbered_checkpoints(run_dir)[:-keep]:
        shutil.rmtree(old)


def append_log(run_dir: str | os.PathLike, record: dict) -> None:
    """Add one record to the run's log, the whole line in one write, flushed: a crash tears at most the last
    line."""
    with open(Path(run_dir) / LOG_FILE, "a") as log:
        log.write(json.dumps(record) + "\n")
        log.flush()
        os.fsync(log.fileno())


def log_records(run_dir: str | os.PathLike) -> list[dict]:
    """Every record of the run's log, in the order written; none for a run that has logged nothing yet.

    A last line a crash cut short is left out with a warning; any other unreadable line is a ValueError.
    """
    path = Path(run_dir) / LOG_FILE
    lines = path.read_text().splitlines() if path.exists() else []
    records = []
    for number, line in enumerate(lines, 1):
        try:
            records.append(json.loads(line))
        except json.JSONDecodeError:
            if number < len(lines):
                raise ValueError(f"{path} line {number} is not a JSON record") from None
            logger.warning("%s: left out its last line, cut short by a crash: %r", path, line[:80])
    return records


@dataclass(frozen=True)
class TrainingLog:
    """A run's log records by kind: `training` (loss, lr and tokens_per_second since the record before) and
    `validation` (val_loss, and val_bleu where measured); each has its update's `step`, `epoch` and
    `elapsed_seconds` (the run's clock, earlier sessions included)."""

    training: list[dict]
    validation: list[dict]


def read_training_log(run_dir: str | os.PathLike) -> TrainingLog:
    """The records of the run in `run_dir` by kind (`log_records`): none for a run that has logged nothing."""
    records = log_records(run_dir)
    training = [record for record in records if "loss" in record]
    return TrainingLog(training, [record for record in records if "val_loss" in record])


def truncate_log(run_dir: str | os.PathLike, step: int) -> None:
    """Keep the log records up to `step`: a resumed run rewrites what the stopped one logged after its
    checkpoint. A last line a crash cut short is dropped (`log_records`)."""
    kept = [record for record in log_records(run_dir) if record["step"] <= step] if step else []
    write_text_atomic(Path(run_dir) / LOG_FILE, "".join(json.dumps(record) + "\n" for record in kept))


def read_progress(state_dir: str | os.PathLike) -> dict:
    """The saved progress of a run; refuses a training state that holds pickled objects (they could run
    code)."""
    state_dir = Path(state_dir)
    pickled = sorted(path.name for path in state_dir.glob("custom_checkpoint_*.pkl"))
    if pickled:
        raise ValueError(
            f"{state_dir} holds pickled objects ({', '.join(pickled)}), which loading would run as code; "
            "this version saves its progress as JSON and will not unpickle them"
        )
    return json.loads((state_dir / PROGRESS_FILE).read_text())


def run_traces(run_dir: str | os.PathLike) -> list[str]:
    """What an earlier run left in `run_dir`: checkpoints, its log and config, staged or set-aside copies."""
    run_dir = Path(run_dir)
    if not run_dir.is_dir():
        return []
    return sorted(
        path.name
        for path in run_dir.iterdir()
        if path.name in (LOG_FILE, CONFIG_FILE, MODEL_NAME)
        or path.name.startswith(("checkpoint_", STAGING_PREFIX))
    )


def remove_run(run_dir: str | os.PathLike) -> None:
    """Delete an earlier run's traces (`--overwrite-output-dir`); other files in the directory stay."""
    for name in run_traces(run_dir):
        path = Path(run_dir) / name
        shutil.rmtree(path) if path.is_dir() else path.unlink()


def recover_interrupted_save(run_dir: str | os.PathLike) -> bool:
    """Put checkpoint_last back where a crash between the two renames of its save left it aside."""
    run_dir = Path(run_dir)
    retired = run_dir / RETIRED_LAST
    if (run_dir / LAST).exists() or not (retired / TRAINING_STATE).is_dir():
        return False
    retired.rename(run_dir / LAST)
    logger.warning(
        "%s: restored %s from %s, where an interrupted save had left it", run_dir, LAST, RETIRED_LAST
    )
    return True


class RunDirectoryInUse(Exception):
    """Another live process holds the run directory's lock."""


def acquire_lock(run_dir: str | os.PathLike) -> Path:
    """Take the run directory's lock (a file naming this process); a lock whose process is gone is taken
    over."""
    path = Path(run_dir) / LOCK_FILE
    path.parent.mkdir(parents=True, exist_ok=True)
    holder = {"pid": os.getpid(), "host": socket.gethostname(), "since": time.strftime("%Y-%m-%d %H:%M:%S")}
    for _ in range(2):
        try:
            descriptor = os.open(path, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o644)
        except FileExistsError:
            other = _lock_holder(path)
            if other is not None and _alive(other):
                raise RunDirectoryInUse(
                    f"{run_dir} is in use by process {other['pid']} on {other['host']} "
                    f"(since {other['since']}); "
                    f"wait for it, or delete {path} if that process is gone"
                ) from None
            logger.warning(
                "%s: taking over the lock of process %s, which is gone", run_dir, (other or {}).get("pid")
            )
            path.unlink(missing_ok=True)
            continue
        with os.fdopen(descriptor, "w") as lock:
            json.dump(holder, lock)
        return path
    raise RunDirectoryInUse(f"{run_dir}: another process took the lock at the same time")


def _lock_holder(path: Path) -> dict | None:
    try:
        return json.loads(path.read_text())
    except (OSError, json.JSONDecodeError):
        return None  # torn by a crash while it was written


def _alive(holder: dict) -> bool:
    """Whether the lock's process still runs (one on another host is taken to)."""
    if holder.get("host") != socket.gethostname():
        return True
    try:
        os.kill(int(holder["pid"]), 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def average_run_checkpoints(
    output_dir: str | os.PathLike,
    count: int,
    config: TrainingConfig | None = None,
    target=None,
    around_step: int | None = None,
) -> list[Path]:
    """Average `count` of the run's numbered checkpoints into `target` (default checkpoint_average), with a
    model card of its own; return the checkpoints averaged: the last ones, or those around update
    `around_step` (the best, where the run stopped early). `config` defaults to the run's saved one."""
    output_dir = Path(output_dir)
    checkpoints = numbered_checkpoints(output_dir)
    if len(checkpoints) < count:
        raise TrainingError(f"{output_dir} holds {len(checkpoints)} numbered checkpoints, fewer than {count}")
    checkpoints = checkpoints_around(checkpoints, around_step, count)
    config = config or load_training_config(output_dir / CONFIG_FILE)
    summary = f"The average of the weights of {', '.join(path.name for path in checkpoints)} (section 6.1)."
    try:
        record = run_record(config, summary, metrics=None)
        average_checkpoints(checkpoints, target or output_dir / AVERAGE, record)
    except ValueError as err:
        raise TrainingError(str(err)) from err
    return checkpoints


def checkpoints_around(checkpoints: list[Path], step: int | None, count: int) -> list[Path]:
    """`count` consecutive `checkpoints` (oldest first) centred on the one of update `step`, shifted to fit at
    either end; the last `count` where `step` is None or not among them. Past the best, an early-stopped run's
    checkpoints are the ones that memorised the data."""
    steps = [checkpoint_step(path) for path in checkpoints]
    best = steps.index(step) if step in steps else len(checkpoints) - 1
    start = max(0, min(best - count // 2, len(checkpoints) - count))
    return checkpoints[start : start + count]


# The training settings a checkpoint's card lists: what the recipe chose where the paper gives a value or a
# range.
CARD_SETTINGS = (
    "init_from", "max_steps", "max_minutes", "max_tokens", "tokens_per_update", "adam_beta1", "adam_beta2",
    "adam_eps", "warmup", "lr", "lr_cooldown", "label_smoothing", "rdrop_alpha", "dropout",
    "early_dropout_updates", "early_dropout", "attention_dropout", "activation_dropout", "layer_dropout",
    "source_word_dropout", "target_word_dropout", "clip_grad_norm", "early_stopping_patience", "average_last",
    "mixed_precision", "seed", "corpus_recipe",
)  # fmt: skip


def run_record(config: TrainingConfig, summary: str, metrics: dict[str, float] | None) -> RunRecord:
    """What a checkpoint's card says of this run: its data, `summary`, the settings that made it
    (`CARD_SETTINGS`, those set) and the checkpoint's validation scores (`metrics`) when it was validated."""
    return RunRecord(
        config.source_lang,
        config.target_lang,
        config.dataset,
        summary,
        settings={name: getattr(config, name) for name in CARD_SETTINGS if getattr(config, name) is not None},
        validation=metrics,
        validation_sentences=config.validation_max_sentences,
    )
