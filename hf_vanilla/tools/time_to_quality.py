"""Time to quality: the minutes of training a run needed to reach a BLEU score, e.g. what a peer reached.

Every numbered checkpoint a run saved is decoded on a split as its generation config says, else with the
paper's settings (beam 4, length penalty 0.6, source length + 50), and scored with sacreBLEU. Its minutes are
the run's wall clock when it saved that checkpoint (periodic validation included), read from the run's log. A
peer model (any saved seq2seq model, e.g. the MarianMTModel that transformers' Seq2SeqTrainer trained in the
same time on the same machine), decoded and scored the same way, gives the score to reach.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tqdm.auto import tqdm

from hf_vanilla.checkpoints.loading import decoding_for
from hf_vanilla.evaluation.scoring import Runtime, TranslationData, score_model
from hf_vanilla.files import atomic_file, write_json
from hf_vanilla.precision import cpu_description
from hf_vanilla.tools.plotting import pyplot
from hf_vanilla.training.run_directory import (
    LOG_FILE,
    checkpoint_step,
    numbered_checkpoints,
    read_training_log,
)

REPORT_FILE, PLOT_FILE = "time_to_quality.json", "time_to_quality.png"
QUIET_RUNTIME = Runtime(show_progress=False)  # a bar per checkpoint would bury the one over checkpoints


def checkpoint_minutes(run_dir: str | os.PathLike) -> dict[str, tuple[int, float]]:
    """checkpoint_<step> name -> (step, minutes of the run's clock when it was saved), for every numbered one.

    The log's last record of an update (its validation, written just before the save) holds the clock.
    """
    run_dir = Path(run_dir)
    if not (run_dir / LOG_FILE).is_file():
        raise FileNotFoundError(f"{run_dir} has no {LOG_FILE}: is it a training run directory?")
    log = read_training_log(run_dir)
    seconds: dict[int, float] = {}
    for record in log.training + log.validation:
        seconds[record["step"]] = max(seconds.get(record["step"], 0.0), record["elapsed_seconds"])
    minutes = {}
    for checkpoint in numbered_checkpoints(run_dir):
        step = checkpoint_step(checkpoint)
        if step not in seconds:
            raise ValueError(
                f"{run_dir / LOG_FILE} has no record of update {step}, so {checkpoint.name}'s time is "
                "unknown (train with validation to log every save)"
            )
        minutes[checkpoint.name] = (step, seconds[step] / 60)
    if not minutes:
        raise ValueError(f"{run_dir} holds no numbered checkpoints (checkpoint_<update>)")
    return minutes


def minutes_to_reach(points: Sequence[dict[str, Any]], bleu: float) -> dict[str, Any] | None:
    """The earliest checkpoint scoring at least `bleu` (cased), or None if none does."""
    return next(
        (point for point in sorted(points, key=lambda p: p["minutes"]) if point["bleu"] >= bleu), None
    )


@dataclass(frozen=True)
class QualityTarget:
    """The cased BLEU to reach: `bleu` as given, or that of `peer` (a saved model) decoded the same way;
    neither: no target, the checkpoints are scored only."""

    peer: str | os.PathLike | None = None
    bleu: float | None = None

    def __post_init__(self):
        if self.peer is not None and self.bleu is not None:
            raise ValueError("give a peer model or a target BLEU, not both")

    def score(self, scoring: dict[str, Any]) -> dict[str, Any] | None:
        """The target's BLEU and where it comes from, the peer decoded with `score_model`'s `scoring`
        kwargs."""
        if self.peer is not None:
            (peer_row,) = score_model(self.peer, **scoring)
            return {"bleu": peer_row["bleu"], "source": f"peer {self.peer}", "peer": peer_row}
        if self.bleu is not None:
            return {"bleu": self.bleu, "source": "given"}
        return None


def time_to_quality(
    run_dir: str | os.PathLike,
    data: TranslationData,
    split: str = "validation",
    target: QualityTarget = QualityTarget(),
    runtime: Runtime = QUIET_RUNTIME,
    output_dir: str | os.PathLike | None = None,
    **generate_kwargs,
) -> dict[str, Any]:
    """Score every numbered checkpoint of `run_dir` on `split` of `data`, and the minutes to reach `target`.

    What `generate_kwargs` leave open of the decoding is the run's checkpoints' generation config's, else the
    paper's (`resolve_decoding`, over the first checkpoint's), and the peer decodes the same way. Writes
    time_to_quality.json and .png into `output_dir` (default: the run directory) and returns the report.
    """
    minutes = checkpoint_minutes(run_dir)
    resolved = decoding_for(Path(run_dir) / next(iter(minutes)), generate_kwargs)
    decoding = resolved.applied_to(generate_kwargs)
    pairs = data.pairs(split)
    scoring = dict(pairs=pairs, target_lang=data.target_lang, runtime=runtime, settings=[decoding])
    target_score = target.score(scoring)
    points = []
    for name, (step, minute) in tqdm(minutes.items(), unit="checkpoint", desc="Checkpoints"):
        (row,) = score_model(Path(run_dir) / name, **scoring)
        points.append({"checkpoint": name, "step": step, "minutes": minute, **row})
    report = {
        "run": str(run_dir),
        "dataset": data.dataset,
        "split": split,
        "sentences": len(pairs),
        "direction": f"{data.source_lang}-{data.target_lang}",
        "decoding": {**decoding, **resolved.report()},
        "engine": runtime.engine.engine,
        "dtype": runtime.engine.precision,
        "cpu": cpu_description(),
        "checkpoints": points,
        "target": target_score,
        "reached": None if target_score is None else minutes_to_reach(points, target_score["bleu"]),
    }
    output_dir = Path(output_dir or run_dir)
    write_json(output_dir / REPORT_FILE, report)
    plot_time_to_quality(report, output_dir / PLOT_FILE)
    return report


def plot_time_to_quality(report: dict[str, Any], output_path: str | os.PathLike) -> Path:
    """A PNG of cased BLEU against minutes of training, the target as a horizontal line."""
    plt = pyplot()
    points = report["checkpoints"]
    figure, axes = plt.subplots(figsize=(7, 4))
    axes.plot(
        [p["minutes"] for p in points], [p["bleu"] for p in points], "o-", label=Path(report["run"]).name
    )
    target, reached = report["target"], report["reached"]
    if target is not None:
        axes.axhline(
            target["bleu"], color="tab:red", linestyle="--", label=f"{target['source']}: {target['bleu']:.2f}"
        )
    if reached is not None:
        axes.axvline(
            reached["minutes"],
            color="tab:gray",
            linestyle=":",
            label=f"reached at {reached['minutes']:.1f} min",
        )
    axes.set_xlabel("minutes of training (wall clock, validation included)")
    axes.set_ylabel(f"{report['split']} BLEU (sacreBLEU, cased)")
    axes.set_title(f"Time to quality, {report['direction']}")
    axes.grid(alpha=0.3)
    axes.legend(loc="lower right")
    figure.tight_layout()
    with atomic_file(output_path) as staging:
        figure.savefig(staging, dpi=100)
    plt.close(figure)
    return Path(output_path)
