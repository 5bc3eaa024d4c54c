"""The Python half of scripts/tools/gpu_report.sh, which runs each part of the report under `timeout`.

`prepare`, the report's first part: the machine (GPU, driver, torch, transformers), its measured matmul peak
in the precision training takes on it, and for each training config the data prepared as its run will read it
(datasets' cache, tokenizer trained if missing) with the model FLOPs of training on one of its target tokens.
`assemble`, after the last part: every part's record (parts.tsv), the training runs' train_log.jsonl and the
decoding benchmark's JSON read into one report.json, MFU included. docs/speed.md says what each field means.

    python -m hf_vanilla.tools.gpu_report prepare OUT_DIR CONFIG... -- TRAINING_FLAGS...
    python -m hf_vanilla.tools.gpu_report assemble OUT_DIR
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from datetime import datetime, timezone
from itertools import pairwise
from pathlib import Path

import numpy as np
import torch
from accelerate import PartialState

from hf_vanilla.cli import (
    ArgumentParser,
    add_logging_argument,
    add_training_config_arguments,
    configure_logging,
    training_config_overrides,
)
from hf_vanilla.data.batches import example_lengths
from hf_vanilla.precision import matmul_peak_flops, resolve_precision
from hf_vanilla.tools.benchmark import environment, save_results, training_flops
from hf_vanilla.training.run_directory import LOG_FILE, read_training_log
from hf_vanilla.training.settings import load_training_config
from hf_vanilla.training.train import load_inputs

PREPARED_FILE = "prepared.json"
PARTS_FILE = "parts.tsv"  # one line a part run, written by gpu_report.sh
COMMANDS_FILE = "commands.txt"  # one line a gpu_report.sh call into this folder
REPORT_FILE = "report.json"
# The columns of parts.tsv, in order; "-" stands for no value.
PART_COLUMNS = (
    "name", "kind", "status", "exit_code", "started", "ended", "limit_seconds", "log", "output", "config",
    "budget_seconds", "command",
)  # fmt: skip
# FLOPs per target token are averaged over this many random training pairs: WMT's 4.5M need not be read whole.
FLOPS_SAMPLE_PAIRS = 20_000


def nvidia_driver() -> str | None:
    """The NVIDIA driver version nvidia-smi reports (torch does not know it); None without nvidia-smi."""
    if shutil.which("nvidia-smi") is None:
        return None
    query = ["nvidia-smi", "--query-gpu=driver_version", "--format=csv,noheader"]
    answered = subprocess.run(query, capture_output=True, text=True, timeout=60)
    lines = answered.stdout.split()
    return lines[0] if answered.returncode == 0 and lines else None


def target_token_flops(model_config, lengths: np.ndarray, sample_pairs: int = FLOPS_SAMPLE_PAIRS) -> dict:
    """Model FLOPs of training on one labelled target token (`benchmark.training_flops`: weights, attention,
    3x forward for the backward) over a random `sample_pairs` of the training pairs' (source, target) token
    lengths, as many batches over the whole shuffled corpus average out to."""
    if len(lengths) > sample_pairs:
        lengths = lengths[np.random.default_rng(0).choice(len(lengths), sample_pairs, replace=False)]
    source, target = (torch.from_numpy(lengths[:, side]) for side in (0, 1))
    positions = torch.arange(int(lengths.max()))
    # what training_flops reads of a batch: each pair's real source tokens and labelled target tokens
    batch = {
        "attention_mask": (positions < source[:, None]).long(),
        "labels": torch.where(positions < target[:, None], 0, -100),
    }
    return {
        "pairs_sampled": len(lengths),
        "flops_per_target_token": training_flops(model_config, batch) / int(target.sum()),
    }


def prepare(configs: list[str], overrides: dict, peak_seconds: float) -> dict:
    """The machine, its matmul peak in the training precision, and each config's data prepared (see the
    module)."""
    device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    precision = resolve_precision("auto", device.type)  # what train.py's mixed_precision "auto" takes
    prepared = {
        "environment": {**environment(device), "driver": nvidia_driver()},
        "matmul_peak": {
            "dtype": precision.dtype_name,
            "flops_per_second": matmul_peak_flops(precision.dtype, peak_seconds, device=device),
        },
        "configs": {},
    }
    for path in configs:
        config = load_training_config(path, **overrides)
        inputs = load_inputs(config, PartialState())
        prepared["configs"][path] = {
            "model_preset": config.model_preset,
            "vocab_size": inputs.model_config.vocab_size,
            "train_pairs": len(inputs.train_data),
            **target_token_flops(inputs.model_config, example_lengths(inputs.train_data)),
        }
    return prepared


def _figure(value: float) -> float:
    """`value` to 4 significant digits: what a measured rate can tell, and never 0 for a small one."""
    return float(f"{value:.4g}")


class NoMeasure(Exception):
    """A part's output holds no number to report."""


def read_parts(out_dir: Path) -> dict[str, dict]:
    """The last record of each part in parts.tsv (a rerun of a part replaces its earlier record), in run
    order."""
    parts = {}
    for line in (out_dir / PARTS_FILE).read_text().splitlines():
        record = dict(zip(PART_COLUMNS, line.split("\t"), strict=True))
        record = {key: None if value == "-" else value for key, value in record.items()}
        parts.pop(record["name"], None)
        parts[record["name"]] = record
    return parts


def _training_step(log: Path) -> str | None:
    """How train.py said it runs its step (its "Training step (compile=...)" line on the console, the one
    thing of the report that the run's log does not record): compile "auto" decided."""
    lines = log.read_text(errors="replace").splitlines() if log.exists() else []
    return next((line[line.index("Training step") :] for line in lines if "Training step (" in line), None)


def training_summary(record: dict, out_dir: Path, prepared: dict | None) -> dict:
    """Speed of a train.py run from its log's training records (`read_training_log`): the first (at update
    `log_interval`) times the start-up; the records after it the steady pace. MFU from the config's FLOPs per
    target token and the peak."""
    run_dir = out_dir / record["output"]
    logged = read_training_log(run_dir).training
    summary = {
        "config": record["config"],
        "budget_seconds": int(record["budget_seconds"]),
        "training_step": _training_step(out_dir / record["log"]),
        "log_records": len(logged),
    }
    if len(logged) < 2:
        raise NoMeasure(f"{len(logged)} training records in {run_dir / LOG_FILE}: a pace needs two")
    first, last = logged[0], logged[-1]
    # Each record's rate covers the updates since the one before; weighted by their seconds they give the mean
    # pace.
    steady_seconds = last["elapsed_seconds"] - first["elapsed_seconds"]
    steady_tokens = sum(
        entry["tokens_per_second"] * (entry["elapsed_seconds"] - before["elapsed_seconds"])
        for before, entry in pairwise(logged)
    )
    tokens_per_second = steady_tokens / steady_seconds
    summary.update(
        updates=last["step"],
        first_log_step=first["step"],
        seconds_to_first_log=first["elapsed_seconds"],
        updates_per_second=_figure((last["step"] - first["step"]) / steady_seconds),
        target_tokens_per_second=_figure(tokens_per_second),
        flops_per_target_token=None,
        mfu=None,
    )
    flops = prepared and prepared["configs"].get(record["config"])
    if flops:
        summary["flops_per_target_token"] = _figure(flops["flops_per_target_token"])
        peak = prepared["matmul_peak"]["flops_per_second"]
        summary["mfu"] = _figure(tokens_per_second * flops["flops_per_target_token"] / peak)
    return summary


def decoding_summary(record: dict, out_dir: Path) -> dict:
    """New tokens a second of each decoding case in the benchmark's JSON: ours, Marian's and their ratio."""
    path = out_dir / record["output"]
    if not path.exists():
        raise NoMeasure(f"no benchmark results at {path}")
    results = json.loads(path.read_text())
    cases = [
        {
            "batch_size": case["batch_size"],
            "num_beams": case["num_beams"],
            "cache": case["cache"],
            "dtype": case["dtype"],
            "new_tokens_per_second": _figure(case["ours"]["per_second"]),
            "marian_new_tokens_per_second": _figure(case["marian"]["per_second"]),
            "ratio": _figure(case["ratio"]),
        }
        for case in results["generation"]
    ]
    if not cases:
        raise NoMeasure(f"no decoding case in {path}")
    settings = results["settings"]
    return {
        "size": results["size"],
        "new_tokens": settings["new_tokens"],
        "repeats": settings["repeats"],
        "results": record["output"],
        "cases": cases,
    }


def assemble(out_dir: Path, smoke: bool) -> dict:
    """report.json's content from what the parts left in `out_dir` (see the module docstring)."""
    prepared_file = out_dir / PREPARED_FILE
    prepared = json.loads(prepared_file.read_text()) if prepared_file.exists() else None
    report = {
        "tool": "scripts/tools/gpu_report.sh",
        "smoke": smoke,
        "commands": (out_dir / COMMANDS_FILE).read_text().splitlines(),
        "assembled": datetime.now(timezone.utc).isoformat(timespec="seconds"),
        "environment": prepared and {**prepared["environment"], "matmul_peak": prepared["matmul_peak"]},
        "data": prepared and prepared["configs"],
        "parts": {},
    }
    for name, record in read_parts(out_dir).items():
        started, ended = float(record["started"]), float(record["ended"])
        part = {
            "status": record["status"],
            "exit_code": None if record["exit_code"] is None else int(record["exit_code"]),
            "seconds": round(ended - started, 2),
            "limit_seconds": int(record["limit_seconds"]),
            "started": datetime.fromtimestamp(started, timezone.utc).isoformat(timespec="seconds"),
            "log": record["log"],
            "command": record["command"],
        }
        try:
            if record["kind"] == "train":
                part.update(training_summary(record, out_dir, prepared))
            elif record["kind"] == "decode":
                part.update(decoding_summary(record, out_dir))
        except NoMeasure as missing:
            # A part that ended well but left no number failed all the same; one that failed says why too.
            part["status"] = "failed" if part["status"] == "ok" else part["status"]
            part["error"] = str(missing)
        report["parts"][name] = part
    return report


def _figures(part: dict) -> str:
    """A part's main numbers in a few words, for the console."""
    if "updates_per_second" in part:
        mfu = f", MFU {part['mfu']:.1%}" if part["mfu"] is not None else ""
        return (
            f"{part['updates_per_second']:.1f} updates/s, {part['target_tokens_per_second']:,.0f} target "
            f"tok/s{mfu}, first log (update {part['first_log_step']}) at {part['seconds_to_first_log']:.1f} s"
        )
    if "cases" in part:
        return "new tok/s: " + "; ".join(
            f"batch {case['batch_size']} "
            f"{'greedy' if case['num_beams'] == 1 else 'beam ' + str(case['num_beams'])} "
            f"{case['cache']} {case['new_tokens_per_second']:,.0f}"
            for case in part["cases"]
        )
    return part.get("error", "")


def summary_lines(report: dict) -> list[str]:
    """One line a part: its status, seconds and main numbers."""
    lines = []
    environment_ = report["environment"]
    if environment_:
        peak = environment_["matmul_peak"]
        lines.append(
            f"{environment_.get('gpu', 'no GPU')} (driver {environment_['driver']}), torch "
            f"{environment_['torch']}, transformers {environment_['transformers']}; {peak['dtype']} matmul "
            f"peak {peak['flops_per_second'] / 1e12:.3g} TFLOP/s"
        )
    for name, part in report["parts"].items():
        lines.append(f"{name:26} {part['status']:8} {part['seconds']:7.1f} s  {_figures(part)}")
    return lines


def main() -> None:
    parser = ArgumentParser(description=__doc__)
    commands = parser.add_subparsers(dest="command", required=True)
    preparing = commands.add_parser(
        "prepare", help="the machine, the matmul peak, each config's data and FLOPs"
    )
    preparing.add_argument("out_dir", type=Path)
    preparing.add_argument("configs", nargs="+", help="training configs, as train.py will be given them")
    preparing.add_argument("--peak-seconds", type=float, default=0.5, help="seconds of each matmul peak run")
    assembling = commands.add_parser("assemble", help="report.json from what the parts left in OUT_DIR")
    assembling.add_argument("out_dir", type=Path)
    assembling.add_argument("--smoke", action="store_true", help="the parts ran at the smoke size")
    add_logging_argument(parser)
    # The flags after "--" are train.py's, the same for every config: the data, the tokenizer, the model size.
    arguments = sys.argv[1:]
    split = arguments.index("--") if "--" in arguments else len(arguments)
    args = parser.parse_args(arguments[:split])
    configure_logging(args.log_level)
    if args.command == "prepare":
        training_parser = ArgumentParser(prog=f"{parser.prog} prepare OUT_DIR CONFIG... --")
        add_training_config_arguments(training_parser)
        overrides = training_config_overrides(training_parser.parse_args(arguments[split + 1 :]))
        save_results(prepare(args.configs, overrides, args.peak_seconds), args.out_dir / PREPARED_FILE)
        return
    report = assemble(args.out_dir, args.smoke)
    save_results(report, args.out_dir / REPORT_FILE)
    print("\n".join(summary_lines(report)))
    print(f"report: {args.out_dir / REPORT_FILE}")
    # A part that did not end well makes the report's exit status 1, after the report is written.
    sys.exit(any(part["status"] != "ok" for part in report["parts"].values()))


if __name__ == "__main__":
    main()
