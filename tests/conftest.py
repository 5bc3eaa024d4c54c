import contextlib
import io
import json
import logging
import os
import runpy
import shutil
import signal
import subprocess
import sys
import traceback

# The tests use local data only: no Hub look-ups (each would retry for ~30 s on a machine without network).
os.environ.setdefault("HF_HUB_OFFLINE", "1")

from itertools import chain  # noqa: E402
from pathlib import Path

import pytest
import torch
from accelerate.state import AcceleratorState
from synthetic_corpus import write_synthetic_corpus
from transformers import AutoModelForSeq2SeqLM, AutoTokenizer

from hf_vanilla import VanillaTransformerConfig, VanillaTransformerForConditionalGeneration
from hf_vanilla.checkpoints.tokenizer_directory import save_tokenizer
from hf_vanilla.data.corpus import load_translation_split
from hf_vanilla.data.tokenization import config_kwargs_from_tokenizer, train_tokenizer
from hf_vanilla.research.language_model import LanguageModelTraining, train_language_model
from hf_vanilla.training.settings import load_training_config
from hf_vanilla.training.train import train

REPO = Path(__file__).resolve().parents[1]
SCRIPTS = REPO / "scripts"
# The direction of the synthetic corpus, for the scripts' required --source-lang / --target-lang
DE_EN = ("--source-lang", "de", "--target-lang", "en")
MULTI30K = Path(os.environ.get("HF_VANILLA_MULTI30K", REPO.parent / "shared" / "datasets" / "multi30k"))


@pytest.fixture(scope="session")
def multi30k_path() -> str:
    """The local Multi30k copy in the Hub `translation` layout (never copied into the repo), for the few
    checks that only mean something on real data; without one they are skipped, not failed."""
    if not (MULTI30K / "train.jsonl").exists():
        pytest.skip(f"real-data check: no Multi30k at {MULTI30K}; set HF_VANILLA_MULTI30K to a copy")
    return str(MULTI30K)


@pytest.fixture(scope="session")
def corpus_path(tmp_path_factory) -> str:
    """A small synthetic de-en corpus in the Hub `translation` layout, for every test of the data path."""
    return str(write_synthetic_corpus(tmp_path_factory.mktemp("synthetic_corpus")))


@pytest.fixture(autouse=True)
def fresh_accelerator_state():
    """Each test starts with no Accelerator, as a new process does: `train` fixes the process-wide
    precision, which on a CPU with native bf16 (where `auto` picks bf16) a later run of another
    precision may not change."""
    yield
    AcceleratorState._reset_state(reset_partial_state=True)


def run_script(script: str, *args, stdin: str = "", check: bool = False) -> subprocess.CompletedProcess:
    """`python scripts/SCRIPT ARGS` run in this process, without a new process's ~8 s of imports:
    its exit status and what it wrote to stdout and stderr, log records included, as
    `subprocess.run(..., text=True)` returns them. The tests of what only a new process shows
    (imports, signals, several processes) start one."""
    argv = [str(SCRIPTS / script), *map(str, args)]
    stdout, stderr = io.StringIO(), io.StringIO()
    root, threads = logging.getLogger(), torch.get_num_threads()
    saved = root.handlers[:], root.level, sys.argv, sys.stdin
    # Without handlers, the script's cli.configure_logging writes to the stderr captured here, at its level.
    root.handlers, sys.argv = [], argv
    sys.stdin = io.TextIOWrapper(io.BytesIO(stdin.encode()), encoding="utf-8")
    try:
        with contextlib.redirect_stdout(stdout), contextlib.redirect_stderr(stderr):
            returncode = _exit_status(lambda: runpy.run_path(argv[0], run_name="__main__"), stderr)
    finally:
        root.handlers, root.level, sys.argv, sys.stdin = saved
        torch.set_num_threads(threads)
        # A training script's Accelerator fixes the process-wide precision; later tests make their own.
        AcceleratorState._reset_state(reset_partial_state=True)
    completed = subprocess.CompletedProcess(argv, returncode, stdout.getvalue(), stderr.getvalue())
    if check:
        completed.check_returncode()
    return completed


def run_in_session(command: list[str], environment: dict, timeout: int = 300) -> subprocess.CompletedProcess:
    """`command` in a session of its own, killed whole if it overruns."""
    process = subprocess.Popen(
        command,
        env=environment,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,
    )
    try:
        stdout, stderr = process.communicate(timeout=timeout)
    finally:
        if process.poll() is None:
            os.killpg(process.pid, signal.SIGKILL)
    assert process.returncode == 0, stderr[-3000:]
    return subprocess.CompletedProcess(command, process.returncode, stdout, stderr)


def _exit_status(run, stderr) -> int:
    """What the interpreter would exit with after `run`, writing to `stderr` what it would print."""
    try:
        run()
    except SystemExit as stop:
        if stop.code is None or isinstance(stop.code, int):
            return stop.code or 0
        print(stop.code, file=stderr)
        return 1
    except Exception:
        stderr.write(traceback.format_exc())
        return 1
    return 0


def pytest_configure(config):
    """The marks transformers' own tests (test_transformers_common.py) use, which its conftest.py declares."""
    marks = (
        "accelerate_tests", "torch_compile_test", "flash_attn_test", "flash_attn_3_test", "flash_attn_4_test"
    )
    for mark in marks:
        config.addinivalue_line("markers", f"{mark}: a mark of transformers' model tests")


@pytest.fixture(scope="session", autouse=True)
def one_thread():
    """Tiny models gain nothing from a second thread, and on a busy 2-core machine two threads crawl
    (measured: test_training.py took 28 s with one thread, over 2 minutes with two, under the same load)."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


@pytest.fixture(autouse=True)
def _seed():
    torch.manual_seed(0)


@pytest.fixture(scope="session")
def tiny_model_dir(corpus_path, tmp_path_factory) -> Path:
    """An untrained tiny model and a 600-token BPE from the synthetic training split, saved together."""
    directory = tmp_path_factory.mktemp("tiny_model")
    pairs = load_translation_split(corpus_path, "de", "en", "train")
    tokenizer = train_tokenizer(chain(pairs["source"], pairs["target"]), vocab_size=600, show_progress=False)
    torch.manual_seed(0)
    config = VanillaTransformerConfig.from_preset("tiny", **config_kwargs_from_tokenizer(tokenizer))
    save_tokenizer(tokenizer, directory)  # first: it replaces the whole directory
    VanillaTransformerForConditionalGeneration(config).save_pretrained(directory)
    return directory


@pytest.fixture
def tiny_model_copy(tiny_model_dir, tmp_path) -> Path:
    """A copy of the tiny model that a test may change:
    selection writes its choice into the chosen checkpoint."""
    return Path(shutil.copytree(tiny_model_dir, tmp_path / "checkpoint"))


def with_truncated_weights(model_dir: Path, destination: Path) -> Path:
    """A copy of `model_dir` whose model.safetensors lost its second half; returns that file."""
    weights = Path(shutil.copytree(model_dir, destination)) / "model.safetensors"
    weights.write_bytes(weights.read_bytes()[: weights.stat().st_size // 2])
    return weights


def with_another_vocabulary_of_the_same_size(model_dir: Path, destination: Path) -> Path:
    """A copy of `model_dir` whose tokenizer swaps the ids of its last two tokens (ordinary merges):
    same size, same special ids."""
    shutil.copytree(model_dir, destination)
    path = destination / "tokenizer.json"
    data = json.loads(path.read_text())
    vocabulary = data["model"]["vocab"]
    first, second = list(vocabulary)[-2:]
    vocabulary[first], vocabulary[second] = vocabulary[second], vocabulary[first]
    path.write_text(json.dumps(data, ensure_ascii=False))
    return destination


@pytest.fixture(scope="session")
def tiny_dataset(corpus_path, tmp_path_factory):
    """400 training and 16 validation pairs of the synthetic corpus, in the Hub `translation` layout:
    few validation sentences keep the training runs' validation decoding quick."""
    directory = tmp_path_factory.mktemp("tiny_corpus")
    for split, size in (("train", 400), ("validation", 16)):
        pairs = load_translation_split(corpus_path, "de", "en", split).select(range(size))
        rows = [{"translation": {"de": pair["source"], "en": pair["target"]}} for pair in pairs]
        (directory / f"{split}.jsonl").write_text("".join(json.dumps(row) + "\n" for row in rows))
    return str(directory)


@pytest.fixture(scope="session")
def tokenizer_dir(tiny_dataset, tmp_path_factory):
    """A 500-token BPE, trained by the first run that asks for it (the "train one if missing" path)."""
    return str(tmp_path_factory.mktemp("tokenizer") / "bpe")


def tiny_config(dataset, tokenizer, output_dir, **overrides):
    values = {
        "dataset": dataset,
        "source_lang": "de",  # the synthetic corpus's pair
        "target_lang": "en",
        "tokenizer": tokenizer,
        "tokenizer_vocab_size": 500,
        "output_dir": str(output_dir),
        "model_preset": "tiny",
        "max_tokens": 256,
        "lr": 3e-3,
        "warmup": 10,
        "max_steps": 12,
        "log_interval": 1,
        "save_interval_updates": 6,
        "tensorboard": False,
        # Exact loss comparisons need one precision on every CPU ("auto" picks bf16 on some).
        "mixed_precision": "no",
        **overrides,
    }
    return load_training_config(**values)


@pytest.fixture(scope="session")
def trained_run(tiny_dataset, tokenizer_dir, tmp_path_factory):
    output_dir = tmp_path_factory.mktemp("run") / "out"
    train(
        tiny_config(
            tiny_dataset, tokenizer_dir, output_dir, max_steps=30, save_interval_updates=10, average_last=2
        )
    )
    return output_dir


def sharpened(model):
    """The model with its output distribution made peaky, as a trained model's is: beam search then has clear
    winners, and two such models disagree often."""
    with torch.no_grad():
        model.lm_head.weight.mul_(40)
    return model.eval()


@pytest.fixture(scope="module")
def tokenizer(tiny_model_dir):
    """The tiny model's tokenizer, which `first` and `second` share."""
    return AutoTokenizer.from_pretrained(tiny_model_dir)


@pytest.fixture(scope="module")
def first(tiny_model_dir):
    """The tiny model, sharpened: for the tests of decoding with several models (ensembles, reranking)."""
    return sharpened(AutoModelForSeq2SeqLM.from_pretrained(tiny_model_dir))


@pytest.fixture(scope="module")
def second_dir(first, tmp_path_factory, tiny_model_dir):
    """Another sharpened model of `first`'s shape and tokenizer, saved with it."""
    directory = tmp_path_factory.mktemp("second")
    for name in ("tokenizer.json", "tokenizer_config.json"):
        (directory / name).write_bytes((tiny_model_dir / name).read_bytes())
    torch.manual_seed(1)
    sharpened(VanillaTransformerForConditionalGeneration(first.config)).save_pretrained(directory)
    return directory


@pytest.fixture(scope="module")
def second(second_dir):
    return AutoModelForSeq2SeqLM.from_pretrained(second_dir).eval()


@pytest.fixture(scope="module")
def right_to_left_dir(second_dir, tmp_path_factory):
    """`second`'s weights saved as a right-to-left model (`config.right_to_left`), with its tokenizer."""
    directory = tmp_path_factory.mktemp("right-to-left")
    for name in ("tokenizer.json", "tokenizer_config.json"):
        (directory / name).write_bytes((second_dir / name).read_bytes())
    model = AutoModelForSeq2SeqLM.from_pretrained(second_dir)
    model.config.right_to_left = True
    model.save_pretrained(directory)
    return directory


# A language model small enough to train in a second: one layer, 32 wide.
TINY_LANGUAGE_MODEL = {"n_layer": 1, "n_embd": 32, "n_head": 2, "n_positions": 64}


@pytest.fixture(scope="session")
def language_model_dir(corpus_path, tiny_model_dir, tmp_path_factory) -> Path:
    """A tiny English language model over the tiny model's tokenizer, trained on the synthetic training
    targets. In float32, as the training tests train: transformers' Trainer sets accelerate's process-wide
    precision, which a later Accelerator in the same process cannot change."""
    directory = tmp_path_factory.mktemp("language-model") / "en"
    pairs = load_translation_split(corpus_path, "de", "en", "train")
    train_language_model(
        pairs["target"],
        AutoTokenizer.from_pretrained(tiny_model_dir),
        directory,
        settings=LanguageModelTraining(
            epochs=1, batch_size=16, precision="no", device="cpu", show_progress=False
        ),
        **TINY_LANGUAGE_MODEL,
    )
    return directory
