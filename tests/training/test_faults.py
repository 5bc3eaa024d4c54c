"""A run killed with SIGKILL anywhere (an update, each part of a save, averaging) and resumed ends
bit-identical to a run never interrupted, and no directory ever looks complete that is not."""

import json
import subprocess
import sys

import pytest
import torch
from conftest import tiny_config
from safetensors.torch import load_file

SETTINGS = {"max_steps": 12, "save_interval_updates": 4, "average_last": 2, "log_interval": 1}

# Trains in a fresh process, as a user's run would; with a kill point, the process kills itself there
# (SIGKILL: no cleanup of any kind). Every run of the test is such a process, so all do the same arithmetic.
RUN = """
import json, os, signal, sys
from pathlib import Path
import torch
torch.set_num_threads(1)  # as the tests' own process (conftest): the same arithmetic, the same weights
from hf_vanilla import files
from hf_vanilla.model import hub
from hf_vanilla.training import run_directory, trainer
from hf_vanilla.training.stopping import TrainingStopped
from hf_vanilla.training.train import train
from hf_vanilla.training.settings import load_training_config

point, nth, values, mode = sys.argv[1], int(sys.argv[2]), json.loads(sys.argv[3]), sys.argv[4]
calls = []

def die():
    os.kill(os.getpid(), {"sigterm": signal.SIGTERM, "sigint": signal.SIGINT}.get(point, signal.SIGKILL))

def kill_at(module, name, when=lambda *args: True, after=False):
    real = getattr(module, name)
    def wrapper(*args, **kwargs):
        if when(*args):
            calls.append(name)
            if len(calls) == nth and not after:
                die()
        result = real(*args, **kwargs)
        if after and len(calls) == nth:
            die()
        return result
    setattr(module, name, wrapper)

def publish_first_rename_only(staging, final):
    if Path(final).exists():  # the old directory moved aside, the new one not yet in place
        Path(final).rename(Path(final).parent / f"{files.STAGING_PREFIX}retired-{Path(final).name}")
        die()
    return real_publish(staging, final)

if point in ("update", "sigterm", "sigint"):
    kill_at(trainer.Trainer, "_update")
elif point == "model_files":  # weights written, the pipeline code and card not yet
    kill_at(hub, "pipeline_code_files")
elif point == "training_state":  # accelerate's state written, the progress not yet
    kill_at(trainer, "write_json")
elif point == "between_renames":
    real_publish = trainer.publish_directory
    trainer.publish_directory = publish_first_rename_only
elif point == "averaging":
    kill_at(run_directory, "save_file")
try:
    train(load_training_config(**values), resume=mode == "resume", overwrite_output_dir=mode == "overwrite")
except TrainingStopped as stopped:  # as scripts/train.py reports it
    sys.exit(f"{stopped}")
"""

pytestmark = pytest.mark.slow  # runs killed and resumed, each compared with an uninterrupted one


def training_losses(run):
    records = map(json.loads, (run / "train_log.jsonl").read_text().splitlines())
    return [(record["step"], record["loss"]) for record in records if "loss" in record]


def complete(directory):
    names = {path.name for path in directory.iterdir()}
    return {"config.json", "model.safetensors", "tokenizer.json", "pipeline.py", "README.md"} <= names


def run(config, point="none", nth=0, mode="fresh"):
    return subprocess.run(
        [sys.executable, "-c", RUN, point, str(nth), json.dumps(vars(config)), mode],
        capture_output=True,
        text=True,
        timeout=300,
    )


@pytest.fixture(scope="module")
def uninterrupted(tiny_dataset, tokenizer_dir, tmp_path_factory):
    output_dir = tmp_path_factory.mktemp("uninterrupted") / "run"
    finished = run(tiny_config(tiny_dataset, tokenizer_dir, output_dir, **SETTINGS))
    assert finished.returncode == 0, finished.stderr[-3000:]
    return output_dir


@pytest.mark.parametrize(
    ("point", "nth"),
    [("update", 7), ("model_files", 3), ("training_state", 2), ("between_renames", 2), ("averaging", 1)],
)
def test_killed_anywhere_and_resumed_ends_bit_identical(
    uninterrupted, tiny_dataset, tokenizer_dir, tmp_path, point, nth
):
    run_dir = tmp_path / "run"
    config = tiny_config(tiny_dataset, tokenizer_dir, run_dir, **SETTINGS)
    killed = run(config, point, nth)
    assert killed.returncode == -9, killed.stderr[-3000:]
    for directory in run_dir.glob("checkpoint_*"):  # visible names are complete; work in progress is hidden
        assert complete(directory), f"{directory.name} looks complete but is not ({point})"
    resumable = (run_dir / "checkpoint_last").exists() or (
        run_dir / ".staging-retired-checkpoint_last"
    ).exists()
    # Killed before the first save, a run has nothing to resume: it starts again over its traces.
    finished = run(config, mode="resume" if resumable else "overwrite")
    assert finished.returncode == 0, finished.stderr[-3000:]
    assert training_losses(run_dir) == training_losses(uninterrupted)
    for name in (
        "checkpoint_4",
        "checkpoint_8",
        "checkpoint_12",
        "checkpoint_last",
        "checkpoint_best",
        "checkpoint_average",
    ):
        assert complete(run_dir / name)
        expected, resumed = (
            load_file(uninterrupted / name / "model.safetensors"),
            load_file(run_dir / name / "model.safetensors"),
        )
        assert expected.keys() == resumed.keys()
        assert all(torch.equal(expected[key], resumed[key]) for key in expected), name
    assert not [path.name for path in run_dir.iterdir() if path.name.startswith(".")]


@pytest.mark.parametrize("point", ["sigterm", "sigint"])
def test_a_stop_signal_finishes_the_update_saves_and_resumes_bit_identical(
    uninterrupted, tiny_dataset, tokenizer_dir, tmp_path, point
):
    """What a scheduler sends before preemption (SIGTERM), or Ctrl-C: the update under way ends, is saved,
    and the run says so; --resume continues as if nothing happened."""
    run_dir = tmp_path / "run"
    config = tiny_config(tiny_dataset, tokenizer_dir, run_dir, **SETTINGS)
    stopped = run(config, point, 7)
    assert stopped.returncode == 1, stopped.stderr[-3000:]
    assert f"stopped by {point.upper()} after update 7" in stopped.stderr and "--resume" in stopped.stderr
    assert "Traceback" not in stopped.stderr
    progress = json.loads((run_dir / "checkpoint_last" / "training_state" / "progress.json").read_text())
    assert progress["step"] == 7
    finished = run(config, mode="resume")
    assert finished.returncode == 0, finished.stderr[-3000:]
    assert training_losses(run_dir) == training_losses(uninterrupted)
    for name in ("checkpoint_8", "checkpoint_12", "checkpoint_average"):
        expected, resumed = (
            load_file(directory / name / "model.safetensors") for directory in (uninterrupted, run_dir)
        )
        assert all(torch.equal(expected[key], resumed[key]) for key in expected), name
