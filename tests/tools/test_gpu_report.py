"""scripts/tools/gpu_report.sh at its smoke size on the CPU: the parts run, and report.json holds what they
measured; a part that fails is recorded as failed while the others stand. The default suite runs one part of
each kind (each part is a process of some seconds of imports); the slow suite runs the whole report."""

import json
import os
import shlex
import shutil
import subprocess
import sys

import pytest
import torch
import transformers
from conftest import REPO

from hf_vanilla.tools.gpu_report import PREPARED_FILE

TRAINING = {
    "train_small_compile_auto": "configs/multi30k-small.yaml",
    "train_small_compile_no": "configs/multi30k-small.yaml",
    "train_base": "configs/wmt14-en-de-base.yaml",
    "train_big": "configs/wmt14-en-de-big.yaml",
}
DECODING = {"decode_dynamic": "cached", "decode_static": "static"}
# The smoke size: 6 updates logged every 2; --quick decoding at batch 4 and 1.
SMOKE_UPDATES, SMOKE_LOG_INTERVAL, SMOKE_BATCH_SIZES = 6, 2, (4, 1)
ONE_OF_EACH_KIND = ("prepare", "train_small_compile_no", "decode_static")


def gpu_report(out_dir, *flags) -> subprocess.CompletedProcess:
    # This checkout's code in this interpreter, on one thread: tiny models gain nothing from a second.
    env = {**os.environ, "PYTHONPATH": str(REPO), "PYTHON": sys.executable, "OMP_NUM_THREADS": "1"}
    # Time enough for a busy machine: the report's 8 minutes are a GPU's.
    command = [
        "bash",
        str(REPO / "scripts" / "tools" / "gpu_report.sh"),
        str(out_dir),
        *flags,
        "--minutes",
        "30",
    ]
    return subprocess.run(command, capture_output=True, text=True, env=env, timeout=1800)


def smoke_report(out_dir, tiny_dataset, tiny_model_dir, parts=()):
    flags = ("--smoke", "--data", tiny_dataset, "--tokenizer", str(tiny_model_dir))
    flags += ("--parts", ",".join(parts)) if parts else ()
    finished = gpu_report(out_dir, *flags)
    assert finished.returncode == 0, finished.stdout[-4000:] + finished.stderr[-4000:]
    return out_dir, flags, finished.stdout


@pytest.fixture(scope="module")
def smoke_run(tiny_dataset, tiny_model_dir, tmp_path_factory):
    return smoke_report(tmp_path_factory.mktemp("gpu-report"), tiny_dataset, tiny_model_dir, ONE_OF_EACH_KIND)


def test_smoke_parts_run_and_hold_their_measures(smoke_run):
    check_smoke_report(*smoke_run, ONE_OF_EACH_KIND)


@pytest.mark.slow
def test_smoke_report_runs_every_part_and_holds_its_measures(tiny_dataset, tiny_model_dir, tmp_path):
    check_smoke_report(
        *smoke_report(tmp_path, tiny_dataset, tiny_model_dir), ["prepare", *TRAINING, *DECODING]
    )


def check_smoke_report(out_dir, flags, stdout, parts):
    report = json.loads((out_dir / "report.json").read_text())
    assert report["smoke"] is True
    command = ["bash", "scripts/tools/gpu_report.sh", str(out_dir), *flags, "--minutes", "30"]
    # bash's %q quoting, as a shell reads it
    assert [shlex.split(line) for line in report["commands"]] == [command]
    assert list(report["parts"]) == list(parts)
    for name, part in report["parts"].items():
        assert (part["status"], part["exit_code"]) == ("ok", 0), (name, part)
        assert part["seconds"] > 0 and (out_dir / part["log"]).stat().st_size > 0
        assert name in stdout
    environment = report["environment"]
    assert (environment["torch"], environment["transformers"]) == (
        torch.__version__,
        transformers.__version__,
    )
    peak = environment["matmul_peak"]["flops_per_second"]
    assert peak > 0 and environment["device"] == "cpu"
    for name, config in TRAINING.items():
        if name not in parts:
            continue
        part = report["parts"][name]
        assert (part["config"], part["updates"], part["first_log_step"]) == (
            config,
            SMOKE_UPDATES,
            SMOKE_LOG_INTERVAL,
        )
        assert part["log_records"] == SMOKE_UPDATES // SMOKE_LOG_INTERVAL
        assert part["updates_per_second"] > 0 and part["target_tokens_per_second"] > 0
        assert part["seconds_to_first_log"] > 0 and "Training step (compile=" in part["training_step"]
        # The pace is the log's: updates between the first and the last record over the seconds between them.
        log = [
            json.loads(line)
            for line in (out_dir / "runs" / name / "train_log.jsonl").read_text().splitlines()
        ]
        pace = (log[-1]["step"] - log[0]["step"]) / (log[-1]["elapsed_seconds"] - log[0]["elapsed_seconds"])
        assert part["updates_per_second"] == pytest.approx(pace, rel=1e-3)
        flops = report["data"][config]["flops_per_target_token"]
        assert part["mfu"] == pytest.approx(part["target_tokens_per_second"] * flops / peak, rel=1e-3)
        assert not list((out_dir / "runs" / name).glob("checkpoint_*"))  # the report keeps logs, not weights
    assert report["parts"]["train_small_compile_no"]["training_step"].startswith("Training step (compile=no")
    for name, cache in DECODING.items():
        if name not in parts:
            continue
        part = report["parts"][name]
        cases = {(case["batch_size"], case["num_beams"], case["cache"]) for case in part["cases"]}
        assert cases == {(batch, beams, cache) for batch in SMOKE_BATCH_SIZES for beams in (1, 4)}
        assert all(case["new_tokens_per_second"] > 0 and case["ratio"] > 0 for case in part["cases"])


def test_a_failed_part_is_recorded_and_a_rerun_replaces_only_its_own_record(
    smoke_run, tiny_model_dir, tmp_path
):
    out_dir = tmp_path / "report"
    shutil.copytree(smoke_run[0], out_dir)
    empty = tmp_path / "no-data"
    empty.mkdir()
    flags = ("--smoke", "--parts", "train_big", "--data", str(empty), "--tokenizer", str(tiny_model_dir))
    finished = gpu_report(out_dir, *flags)
    assert finished.returncode == 1, finished.stdout + finished.stderr
    report = json.loads((out_dir / "report.json").read_text())
    assert len(report["commands"]) == 2 and "--parts train_big" in report["commands"][1]
    big = report["parts"]["train_big"]
    assert big["status"] == "failed" and big["exit_code"] not in (0, None)
    assert "training records" in big["error"] and "error" in (out_dir / big["log"]).read_text()
    assert list(report["parts"]) == [*ONE_OF_EACH_KIND, "train_big"]
    assert all(part["status"] == "ok" for name, part in report["parts"].items() if name != "train_big")
    assert (out_dir / PREPARED_FILE).exists()
