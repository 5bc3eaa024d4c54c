"""Tries: several training runs side by side, each chosen on validation, all in one table.

One Multi30k run leaves most of a GPU idle, so a search over recipes runs its tries side by side (what that is
worth, measured: docs/research/extras.md, "A search: tries side by side"). `run_tries` starts up to `parallel`
`train.py` processes, hands each finished run to `select_checkpoint.py` (validation only: test is decoded
once, for the final recipe, never to compare tries), and writes every try's flags, pace and validation scores
to `tries.json` and `tries.md`. Given again, it resumes each run from its last checkpoint (a finished one
trains nothing more), so a search can span several calls of a time-limited machine. A finished run brought
back from another machine with its models but not its training state (`checkpoint_last`: the optimizer's state
beside the model) is chosen as it is. A run's selection is kept while its candidates' weights and the
selection flags are those it was made from, so a search given again decodes only what changed. `only` runs
some of a file's tries; the table keeps the rows of the tries an earlier call ran into the same directory
(each row names the machine it was run on where that is not this one).

A tries file is YAML:

    config: configs/multi30k-best.yaml                  # the base config of every try
    train: --source-lang en --target-lang de             # train.py flags every try gets
    select: --num-beams 4 8 --length-penalty 0.6 1.0     # select_checkpoint.py flags
    tries:                                               # name: its own train.py flags
      best-seed4: --seed 4
      tiny-clip1: --model-overrides '{"d_model": 128}' --clip-grad-norm 1.0
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import re
import shlex
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Sequence
from concurrent.futures import Future, ThreadPoolExecutor, as_completed
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
import yaml
from accelerate import PartialState
from tqdm.auto import tqdm

from hf_vanilla.cli import ArgumentParser, add_training_config_arguments, training_config
from hf_vanilla.evaluation.selection import RUN_CANDIDATES, weights_digest
from hf_vanilla.files import write_json, write_text_atomic
from hf_vanilla.tools.benchmark import describe_environment, environment
from hf_vanilla.training.run_directory import AVERAGE, LAST, RETIRED_LAST, read_training_log
from hf_vanilla.training.settings import TrainingConfig, TrainingError
from hf_vanilla.training.train import load_or_train_tokenizer

TRIES_JSON, TRIES_TABLE, LOGS, SELECTION = "tries.json", "tries.md", "logs", "selection"
SELECTED_WITH = "selected_with.json"  # beside selection.json: the flags and weights it was made from
SPEC_KEYS = {"config", "train", "select", "tries"}
TRY_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]*")
PROGRESS_BAR = re.compile(r"^[^|]*\d+%\|[^|]*\|[^\[]*\[[^\]]*\]")  # tqdm's " 12%|█▏   | 987/8000 [...]"
# The runner names each run's directory and config itself. Its --minutes comes last, so it wins; its --dataset
# comes before the tries' own flags, so that a try may train on another dataset (a distilled one).
RUNNER_TRAIN_FLAGS = {"--config", "--output-dir", "--resume", "--overwrite-output-dir"}
RUNNER_SELECT_FLAGS = {"--output-dir", "--dataset", "--dataset-config", "--source-lang", "--target-lang"}


class TriesError(ValueError):
    """A tries file or setting that cannot run, named before any try starts."""


@dataclass(frozen=True)
class Try:
    """One try: its name (its run's directory), its own flags, the whole train.py command line after the
    script, and the TrainingConfig that line makes."""

    name: str
    own_arguments: tuple[str, ...]
    train_arguments: tuple[str, ...]
    config: TrainingConfig


def _flags(value: Any, where: str) -> list[str]:
    if value is None:
        return []
    if not isinstance(value, str):
        raise TriesError(f"{where} must be a string of flags, not {type(value).__name__}")
    try:
        return shlex.split(value)
    except ValueError as err:
        raise TriesError(f"{where}: {err} in {value!r}") from err


def _refuse_runner_flags(flags: Sequence[str], owned: set[str], where: str) -> None:
    taken = sorted({flag.split("=", 1)[0].replace("_", "-") for flag in flags} & owned)
    if taken:
        raise TriesError(f"{where} sets {', '.join(taken)}, which the tries runner sets itself")


def load_tries(
    path: str | os.PathLike,
    dataset: str | None = None,
    minutes: float | None = None,
    only: Sequence[str] | None = None,
) -> tuple[list[Try], list[str]]:
    """The tries of a tries file (those named in `only`, if given), each checked as train.py would check it,
    and the selection flags.

    `dataset` overrides the config's, and a try's own `--dataset` overrides that; `minutes` (train.py's
    `--max-minutes`, a time box for every try) overrides both the config and the tries.
    Raises TriesError, naming the try, for anything that would stop a try before its first update.
    """
    try:
        spec = yaml.safe_load(Path(path).read_text())
    except OSError as err:
        raise TriesError(f"cannot read tries file {path}: {err.strerror}") from err
    except yaml.YAMLError as err:
        raise TriesError(f"tries file {path} is not YAML: {err}") from err
    if not isinstance(spec, dict) or not isinstance(spec.get("tries"), dict) or not spec["tries"]:
        raise TriesError(f"tries file {path} needs a mapping with a non-empty 'tries' mapping of name: flags")
    unknown = sorted(set(spec) - SPEC_KEYS)
    if unknown:
        raise TriesError(f"tries file {path}: unknown keys {unknown}; known keys: {sorted(SPEC_KEYS)}")
    config = spec.get("config")
    if config is not None and not Path(config).is_file():
        raise TriesError(f"tries file {path}: config {config} does not exist")
    common = _flags(spec.get("train"), "train")
    select = _flags(spec.get("select"), "select")
    _refuse_runner_flags(common, RUNNER_TRAIN_FLAGS, "train")
    _refuse_runner_flags(select, RUNNER_SELECT_FLAGS, "select")
    base = ["--config", str(config)] if config is not None else []
    runner_dataset = ["--dataset", dataset] if dataset is not None else []
    runner_minutes = ["--max-minutes", str(minutes)] if minutes is not None else []
    unknown = sorted(set(only or ()) - set(spec["tries"]))
    if unknown:
        raise TriesError(f"tries file {path} has no tries {unknown}; its tries: {list(spec['tries'])}")
    tries = []
    for name, value in spec["tries"].items():
        if only is not None and name not in only:
            continue
        if not isinstance(name, str) or not TRY_NAME.fullmatch(name):
            raise TriesError(
                f"try name {name!r} must be letters, digits, '.', '_' or '-' (it names a directory)"
            )
        own = _flags(value, f"try {name}")
        _refuse_runner_flags(own, RUNNER_TRAIN_FLAGS, f"try {name}")
        arguments = (*base, *runner_dataset, *common, *own, *runner_minutes)
        tries.append(Try(name, tuple(own), arguments, _training_config(name, arguments)))
    return tries, select


def _training_config(name: str, arguments: Sequence[str]) -> TrainingConfig:
    """The try's TrainingConfig, parsed and checked as train.py would, so a bad flag costs no machine time."""
    parser = ArgumentParser(exit_on_error=False)
    add_training_config_arguments(parser)
    try:
        parsed, unknown = parser.parse_known_args(arguments)
    except (argparse.ArgumentError, yaml.YAMLError) as err:
        raise TriesError(f"try {name}: {err}") from err
    if unknown:
        raise TriesError(f"try {name}: train.py has no flags {unknown}")
    try:
        config = training_config(parsed, output_dir=name)
        config.check()
    except TrainingError as err:
        raise TriesError(f"try {name}: {err}") from err
    return config


def train_command(scripts_dir: Path, attempt: Try, run_dir: Path) -> list[str] | None:
    """train.py for `attempt` into `run_dir`: resumed where a checkpoint is left, started afresh otherwise;
    None for a finished run without its training state (trained on another machine and copied back without it,
    or pruned), which has nothing to resume and whose models starting afresh would delete."""
    command = [
        sys.executable,
        str(scripts_dir / "train.py"),
        *attempt.train_arguments,
        "--output-dir",
        str(run_dir),
    ]
    if (run_dir / LAST).exists() or (run_dir / RETIRED_LAST).exists():
        command.append("--resume")
    elif (run_dir / AVERAGE).exists():  # written only when a run ends
        return None
    elif run_dir.exists():  # stopped before its first save: nothing in it to keep
        command.append("--overwrite-output-dir")
    return command


def select_command(scripts_dir: Path, attempt: Try, run_dir: Path, select: Sequence[str]) -> list[str]:
    """select_checkpoint.py on `run_dir`'s checkpoints, on the try's own data, validation only unless `select`
    names report splits."""
    config = attempt.config
    data = [
        "--dataset",
        config.dataset,
        "--source-lang",
        config.source_lang,
        "--target-lang",
        config.target_lang,
    ]
    if config.dataset_config:
        data += ["--dataset-config", config.dataset_config]
    script = [sys.executable, str(scripts_dir / "select_checkpoint.py"), str(run_dir)]
    return [*script, *data, "--report-split", *select, "--output-dir", str(run_dir / SELECTION)]


class _Processes:
    """The children running now, so that an interrupted runner stops them (SIGTERM: each run saves first)."""

    def __init__(self):
        self._running: set[subprocess.Popen] = set()
        self._lock = threading.Lock()
        self.stopping = False

    def run(self, command: list[str], log: Path, env: dict[str, str]) -> int | None:
        """`command`'s exit code, its output appended to `log`; None if the runner was stopping before it
        began."""
        with self._lock:
            if self.stopping:
                return None
            with open(log, "ab") as output:
                process = subprocess.Popen(command, stdout=output, stderr=subprocess.STDOUT, env=env)
            self._running.add(process)
        try:
            return process.wait()
        finally:
            with self._lock:
                self._running.discard(process)

    def stop(self) -> None:
        with self._lock:
            self.stopping = True
            running = list(self._running)
        for process in running:
            process.send_signal(signal.SIGTERM)
        for process in running:
            process.wait()


def _last_message(log: Path) -> str:
    """The last thing a script said in `log`, past the progress bars drawn over and after it."""
    text = log.read_text(errors="replace") if log.exists() else ""
    for segment in reversed(re.split(r"[\r\n]", text)):
        message = PROGRESS_BAR.sub("", segment).strip()
        if message:
            return message
    return ""


def _run_one(
    attempt: Try,
    output_dir: Path,
    scripts_dir: Path,
    select: Sequence[str],
    processes: _Processes,
    env: dict[str, str],
) -> dict[str, Any]:
    run_dir, logs = output_dir / attempt.name, output_dir / LOGS
    started = time.monotonic()
    train_log = logs / f"{attempt.name}.train.log"
    command = train_command(scripts_dir, attempt, run_dir)
    if command is None:
        with open(train_log, "a") as log:
            log.write(
                f"{run_dir} holds a finished run without its training state: chosen as saved, not trained\n"
            )
        training_exit = 0
    else:
        training_exit = processes.run(command, train_log, env)
    result = {
        "name": attempt.name,
        "training_exit": training_exit,
        "training_seconds": time.monotonic() - started,
    }
    if training_exit:
        result["training_error"] = _last_message(train_log)
    # A run that stopped early (diverged, time box, signal) is still chosen on what it saved.
    if not processes.stopping and any(run_dir.glob("checkpoint_*")):
        select_log = logs / f"{attempt.name}.select.log"
        command = select_command(scripts_dir, attempt, run_dir, select)
        inputs = _selection_inputs(run_dir, command)
        if _selection_made_from(run_dir, inputs):
            with open(select_log, "a") as log:
                log.write(f"{run_dir / SELECTION} was made with these flags from these weights: kept\n")
            result["selection_exit"] = 0
        else:
            result["selection_exit"] = processes.run(command, select_log, env)
            if result["selection_exit"] == 0:
                write_json(run_dir / SELECTION / SELECTED_WITH, inputs)
            else:
                result["selection_error"] = _last_message(select_log)
    return result


def _selection_inputs(run_dir: Path, command: Sequence[str]) -> dict[str, Any]:
    """What a run's selection depends on: select_checkpoint.py's arguments (not the interpreter's or the
    script's path, which may move) and the weights of the candidates among the run's checkpoints."""
    weights = {name: weights_digest(run_dir / name) for name in RUN_CANDIDATES if (run_dir / name).is_dir()}
    return {"arguments": list(command[2:]), "weights": weights}


def _selection_made_from(run_dir: Path, inputs: dict[str, Any]) -> bool:
    """Whether `run_dir`'s selection was made from `inputs` (a resumed finished run rewrites the same
    weights)."""
    try:
        made_from = json.loads((run_dir / SELECTION / SELECTED_WITH).read_text())
    except (OSError, ValueError):
        return False
    return made_from == inputs and (run_dir / SELECTION / "selection.json").is_file()


def summarize_try(attempt: Try, run_dir: Path, outcome: dict[str, Any]) -> dict[str, Any]:
    """A try's row: flags, how it ended, its pace and validation curve's end, and the choice on validation."""
    row: dict[str, Any] = {
        "own_arguments": list(attempt.own_arguments),
        "train_arguments": list(attempt.train_arguments),
        **outcome,
    }
    log = read_training_log(run_dir)
    if records := log.training + log.validation:
        last = max(records, key=lambda record: record["step"])
        row.update(updates=last["step"], run_minutes=last["elapsed_seconds"] / 60)
        if last["elapsed_seconds"] > 0:
            row["updates_per_second"] = last["step"] / last["elapsed_seconds"]
    if log.validation:
        row["validation_loss_last"] = log.validation[-1]["val_loss"]
        row["validation_loss_best"] = min(record["val_loss"] for record in log.validation)
    selection_file = run_dir / SELECTION / "selection.json"
    if outcome.get("selection_exit") == 0 and selection_file.exists():
        selection = json.loads(selection_file.read_text())
        chosen = selection["chosen"]
        row["chosen"] = {
            "model": Path(chosen["model"]).name,
            **{
                key: chosen[key]
                for key in ("num_beams", "length_penalty", "bleu", "bleu_lowercased", "chrf")
                if key in chosen
            },
        }
        row["signature"] = selection["signature"]
        row["reports"] = selection.get("reports", {})
    return row


def _number(value: float | None, digits: int = 2) -> str:
    return "-" if value is None else f"{value:.{digits}f}"


def describe_machine(described: dict[str, Any]) -> str:
    """The machine and software of `environment`'s description, without the bf16 probe's pace (which varies
    from one call to the next on the same machine)."""
    return describe_environment({**described, "bf16_matmul_speedup": None})


def tries_table(rows: Sequence[dict[str, Any]], described: dict[str, Any]) -> str:
    """The tries as a Markdown table, best validation BLEU first, for the model card's record of every try.

    `described` is `environment`'s description of this machine; a row run on another names its own."""
    ranked = sorted(rows, key=lambda row: -row.get("chosen", {}).get("bleu", float("-inf")))
    machine = describe_machine(described)
    lines = [
        f"Machine: {describe_environment(described)}",
        "",
        "| try | its flags | ended | updates | minutes | updates/s | validation loss (last / best) | chosen "
        "| validation BLEU cased / lc / chrF |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for row in ranked:
        chosen = row.get("chosen", {})
        ended = {0: "finished", None: "not started"}.get(
            row["training_exit"], f"exit {row['training_exit']}: {row.get('training_error', '')}"
        )
        if "selection_error" in row:
            ended += f"; selection failed: {row['selection_error']}"
        if row.get("machine", machine) != machine:
            ended += f" (on {row['machine']})"
        choice = (
            f"{chosen['model']}, beam {chosen['num_beams']}, lp {chosen.get('length_penalty', '-')}"
            if chosen
            else "-"
        )
        scores = " / ".join(_number(chosen.get(key)) for key in ("bleu", "bleu_lowercased", "chrf"))
        lines.append(
            f"| {row['name']} | `{shlex.join(row['own_arguments'])}` | {ended.replace('|', '/')} "
            f"| {row.get('updates', 0):,} | {_number(row.get('run_minutes'), 1)} "
            f"| {_number(row.get('updates_per_second'), 1)} "
            f"| {_number(row.get('validation_loss_last'), 3)} / "
            f"{_number(row.get('validation_loss_best'), 3)} | {choice} | {scores if chosen else '-'} |"
        )
    return "\n".join(lines) + "\n"


def run_tries(
    tries_file: str | os.PathLike,
    output_dir: str | os.PathLike,
    scripts_dir: str | os.PathLike,
    parallel: int = 1,
    dataset: str | None = None,
    minutes: float | None = None,
    only: Sequence[str] | None = None,
) -> list[dict[str, Any]]:
    """Train every try of `tries_file` (or those named in `only`), up to `parallel` at once, choose each on
    validation, write the table.

    Each try's run is `output_dir/NAME` (resumed if it holds a checkpoint), its output `output_dir/logs/`;
    `tries.json` and `tries.md` list them all, those that failed included, with the rows an earlier call wrote
    there of tries whose runs or logs are still there. Returns the rows of the tries this call ran.
    """
    if parallel < 1:
        raise TriesError(f"parallel must be at least 1, not {parallel}")
    tries, select = load_tries(tries_file, dataset, minutes, only)
    output_dir, scripts_dir = Path(output_dir), Path(scripts_dir)
    (output_dir / LOGS).mkdir(parents=True, exist_ok=True)
    env = dict(os.environ)
    # The tries share the CPU's cores rather than each starting a thread on every one.
    env.setdefault("OMP_NUM_THREADS", str(max(1, (os.cpu_count() or 1) // parallel)))
    _train_missing_tokenizers(tries)
    processes = _Processes()
    try:
        with ThreadPoolExecutor(max_workers=parallel) as pool:
            futures = {
                pool.submit(_run_one, attempt, output_dir, scripts_dir, select, processes, env): attempt
                for attempt in tries
            }
            try:
                with tqdm(total=len(tries), unit="try", desc="tries") as bar:
                    for future in as_completed(futures):
                        outcome = future.result()
                        bar.write(
                            f"{outcome['name']}: training exit {outcome['training_exit']} after "
                            f"{outcome['training_seconds'] / 60:.1f} min"
                        )
                        bar.update()
            except BaseException:  # Ctrl-C or SIGTERM: every run saves and stops, the table keeps what ended
                processes.stop()
                raise
    finally:
        rows = _write_results(futures, output_dir, {attempt.name for attempt in tries})
    return rows


def _train_missing_tokenizers(tries: Sequence[Try]) -> None:
    """Train each missing tokenizer of `tries` before they start: tries sharing one would each train it at
    once."""
    for config in (attempt.config for attempt in tries if not attempt.config.init_from):
        if not Path(config.tokenizer).exists():
            # training's logger is accelerate's, which needs its state (never a GPU here)
            PartialState(cpu=True)
            with contextlib.suppress(TrainingError):  # that try fails in its own run, the error in its log
                load_or_train_tokenizer(config)


def _write_results(futures: dict[Future, Try], output_dir: Path, running: set[str]) -> list[dict[str, Any]]:
    """Write tries.json and tries.md of the tries that ended (`futures`) and the earlier rows still there;
    return the rows of those that ended."""
    rows = [
        summarize_try(futures[future], output_dir / futures[future].name, future.result())
        for future in futures
        if future.done() and not future.cancelled() and future.exception() is None
    ]
    described = environment("cuda" if torch.cuda.is_available() else "cpu")
    for row in rows:
        row["machine"] = describe_machine(described)
    listed = rows + _earlier_rows(output_dir, running)
    write_json(output_dir / TRIES_JSON, {"environment": described, "tries": listed})
    write_text_atomic(output_dir / TRIES_TABLE, tries_table(listed, described))
    return rows


def _earlier_rows(output_dir: Path, running: set[str]) -> list[dict[str, Any]]:
    """The rows an earlier call wrote to `output_dir`'s tries.json of tries not run now whose runs (or, for a
    try that failed before it began one, logs) are still there, each naming the machine it ran on."""
    try:
        earlier = json.loads((output_dir / TRIES_JSON).read_text())
    except (OSError, ValueError):
        return []
    return [
        {"machine": describe_machine(earlier["environment"]), **row}
        for row in earlier["tries"]
        if row["name"] not in running
        and (
            (output_dir / row["name"]).is_dir() or (output_dir / LOGS / f"{row['name']}.train.log").is_file()
        )
    ]
