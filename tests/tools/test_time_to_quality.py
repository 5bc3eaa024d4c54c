"""Time to quality: every checkpoint of a run scored against the minutes it had trained, and the first to
reach a target."""

import json
import shutil

import pytest

from hf_vanilla.evaluation.scoring import TranslationData
from hf_vanilla.tools.time_to_quality import (
    PLOT_FILE,
    REPORT_FILE,
    QualityTarget,
    checkpoint_minutes,
    minutes_to_reach,
    time_to_quality,
)
from hf_vanilla.training.run_directory import LOG_FILE, read_training_log


def test_each_checkpoint_is_scored_at_the_minutes_it_was_saved_and_a_peer_sets_the_target(
    trained_run, tiny_dataset, tmp_path
):
    report = time_to_quality(
        trained_run,
        TranslationData(tiny_dataset, "de", "en", max_sentences=8),
        target=QualityTarget(peer=trained_run / "checkpoint_20"),
        output_dir=tmp_path,
        num_beams=2,
    )
    points = report["checkpoints"]
    assert [point["checkpoint"] for point in points] == ["checkpoint_10", "checkpoint_20", "checkpoint_30"]
    validation = read_training_log(trained_run).validation
    saved_at = {record["step"]: record["elapsed_seconds"] / 60 for record in validation}
    for point in points:
        assert point["minutes"] == pytest.approx(saved_at[point["step"]], abs=0.01)
        assert point["num_beams"] == 2 and point["length_penalty"] == 0.6
    assert points[0]["minutes"] < points[1]["minutes"] < points[2]["minutes"]
    # The peer is checkpoint_20 itself, decoded the same way: the same score, reached by minute 20's at the
    # latest.
    assert report["target"]["bleu"] == points[1]["bleu"]
    assert report["reached"]["minutes"] <= points[1]["minutes"]
    assert report["sentences"] == 8 and report["cpu"]["threads"] >= 1
    assert json.loads((tmp_path / REPORT_FILE).read_text()) == report
    assert (tmp_path / PLOT_FILE).read_bytes().startswith(b"\x89PNG")


def test_the_earliest_checkpoint_at_or_above_the_target_counts():
    points = [
        {"checkpoint": "checkpoint_30", "minutes": 9.0, "bleu": 31.0},
        {"checkpoint": "checkpoint_10", "minutes": 3.0, "bleu": 20.0},
        {"checkpoint": "checkpoint_20", "minutes": 6.0, "bleu": 30.0},
    ]
    assert minutes_to_reach(points, 30.0)["checkpoint"] == "checkpoint_20"
    assert minutes_to_reach(points, 5.0)["checkpoint"] == "checkpoint_10"
    assert minutes_to_reach(points, 31.5) is None


def test_a_checkpoint_missing_from_the_log_or_a_missing_log_is_named(trained_run, tmp_path):
    run = tmp_path / "run"
    shutil.copytree(trained_run / "checkpoint_10", run / "checkpoint_10")
    with pytest.raises(FileNotFoundError, match="no train_log.jsonl"):
        checkpoint_minutes(run)
    (run / LOG_FILE).write_text(json.dumps({"step": 5, "elapsed_seconds": 1.0, "loss": 3.0}) + "\n")
    with pytest.raises(ValueError, match="no record of update 10, so checkpoint_10's time is unknown"):
        checkpoint_minutes(run)


def test_a_peer_and_a_target_bleu_together_are_refused(trained_run, tiny_dataset):
    with pytest.raises(ValueError, match="not both"):
        time_to_quality(
            trained_run,
            TranslationData(tiny_dataset, "de", "en"),
            target=QualityTarget(peer=trained_run / "checkpoint_10", bleu=30),
        )
