"""Peak memory and pace of translating a corpus (scripts/translate.py) as it grows: does memory stay flat?

For each N of --lines: writes a file of N synthetic sentences (pseudo-words, 3-30 a line, a blank line now and
then), translates it with scripts/translate.py in a process of its own (greedy, --max-new-tokens 2: the cost
of reading, batching, committing and joining chunks, not of the model), records its wall-clock seconds,
lines/s and peak resident memory (the kernel's high-water mark, os.wait4), and checks that the output has N
lines. The model is the tiny preset, randomly initialised, with a BPE trained on the first sentences; the
files are written under --work-dir and deleted unless --keep (never commit them). Writes JSON with the machine
(its CPU named).

    python scripts/tools/benchmark_corpus_translation.py --lines 10000 1000000 \\
        --output docs/benchmarks/corpus-translation-epyc-2core.json

The runs are compared with the first (smallest): the peak's growth (the issue asks 1M lines within 300 MB of
10k), and the lines/s of the lines beyond the first run's (startup cancelled out).
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import torch

from hf_vanilla import VanillaTransformerConfig, VanillaTransformerForConditionalGeneration
from hf_vanilla.checkpoints.tokenizer_directory import save_tokenizer
from hf_vanilla.cli import ArgumentParser, add_logging_argument, configure_logging, positive_int
from hf_vanilla.data.tokenization import config_kwargs_from_tokenizer, train_tokenizer
from hf_vanilla.tools.benchmark import environment, save_results

REPO = Path(__file__).resolve().parents[2]
SYLLABLES = (
    "ba be bi bo da de di do ga ge la le li lo ma me mi na ne ni ra re ri sa se si ta te ung sch".split()
)
WORDS, WRITE_LINES, TOKENIZER_LINES = 5000, 100_000, 20_000
BLANK_SHARE = 0.01


def write_sentences(path: Path, count: int, seed: int = 0) -> Path:
    """`count` lines of pseudo-sentences (3-30 Zipf-distributed words, capitalized, a full stop), 1% blank."""
    rng = np.random.default_rng(seed)
    lexicon = np.array(["".join(rng.choice(SYLLABLES, size=rng.integers(1, 4))) for _ in range(WORDS)])
    frequencies = 1 / np.arange(1, WORDS + 1)
    with path.open("w", encoding="utf-8") as file:
        for start in range(0, count, WRITE_LINES):
            size = min(WRITE_LINES, count - start)
            lengths = rng.integers(3, 31, size=size)
            words = rng.choice(lexicon, size=int(lengths.sum()), p=frequencies / frequencies.sum())
            blank = rng.random(size) < BLANK_SHARE
            for is_blank, sentence in zip(blank, np.split(words, np.cumsum(lengths)[:-1]), strict=True):
                text = "" if is_blank else " ".join(sentence).capitalize() + "."
                file.write(text + "\n")
    return path


def save_tiny_model(directory: Path, sentences: Path) -> Path:
    """The tiny preset, randomly initialised, with a 1,000-token BPE of the first sentences of `sentences`."""
    with sentences.open(encoding="utf-8") as file:
        sample = [line for _, line in zip(range(TOKENIZER_LINES), file, strict=False)]
    tokenizer = train_tokenizer(sample, vocab_size=1000, show_progress=False)
    torch.manual_seed(0)
    config = VanillaTransformerConfig.from_preset("tiny", **config_kwargs_from_tokenizer(tokenizer))
    save_tokenizer(tokenizer, directory)  # first: it replaces the whole directory
    VanillaTransformerForConditionalGeneration(config).save_pretrained(directory)
    return directory


def translate_measured(model: Path, source: Path, output: Path, flags: list[str], threads: int) -> dict:
    """scripts/translate.py on `source` in a process of its own: its seconds and peak resident
    bytes (the kernel's high-water mark of that process, from os.wait4); a RuntimeError with its
    stderr's end if it fails."""
    command = [
        sys.executable, str(REPO / "scripts" / "translate.py"), str(model), "--input", str(source),
        "--output", str(output), "--device", "cpu", "--quiet", *flags,
    ]  # fmt: skip
    log = output.with_name(output.name + ".log")
    started = time.perf_counter()
    with log.open("w") as stderr:
        process = subprocess.Popen(
            command, env={**os.environ, "OMP_NUM_THREADS": str(threads)}, stderr=stderr
        )
        _, status, usage = os.wait4(process.pid, 0)
    seconds = time.perf_counter() - started
    process.returncode = os.waitstatus_to_exitcode(status)
    if process.returncode:
        raise RuntimeError(f"{' '.join(command)} failed: {log.read_text()[-2000:]}")
    return {"seconds": round(seconds, 1), "peak_resident_bytes": usage.ru_maxrss * 1024}  # ru_maxrss: KiB


def count_lines(path: Path) -> int:
    with path.open("rb") as file:
        return sum(block.count(b"\n") for block in iter(lambda: file.read(1 << 20), b""))


def compared(runs: list[dict]) -> list[dict]:
    """Each run beside the first: its peak's growth, and the lines/s of its lines beyond the first run's."""
    first = runs[0]
    return [
        {
            **run,
            "lines_per_second": round(run["lines"] / run["seconds"], 1),
            "peak_growth_bytes": run["peak_resident_bytes"] - first["peak_resident_bytes"],
            "marginal_lines_per_second": (
                round((run["lines"] - first["lines"]) / (run["seconds"] - first["seconds"]), 1)
                if run is not first
                else None
            ),
        }
        for run in runs
    ]


def build_parser() -> ArgumentParser:
    parser = ArgumentParser(description=__doc__)
    parser.add_argument(
        "--lines", type=positive_int, nargs="+", default=[10_000, 1_000_000], help="input sizes"
    )
    parser.add_argument(
        "--flags",
        nargs="*",
        default=["--num-beams", "1", "--max-new-tokens", "2"],
        help="translate.py's decoding flags (greedy, 2 tokens: the corpus machinery's cost, not the model's)",
    )
    parser.add_argument(
        "--threads", type=positive_int, default=1, help="torch threads of the translating process"
    )
    parser.add_argument(
        "--work-dir", default=None, help="where the files are written (default: a temporary one)"
    )
    parser.add_argument("--keep", action="store_true", help="keep the files")
    parser.add_argument(
        "--output", default=None, help="JSON file to write after each run (default: print only)"
    )
    add_logging_argument(parser)
    return parser


def main() -> None:
    args = build_parser().parse_args()
    configure_logging(args.log_level)

    work = Path(args.work_dir or tempfile.mkdtemp(prefix="corpus-translation-"))
    work.mkdir(parents=True, exist_ok=True)
    results = {
        "environment": {**environment("cpu"), "threads": args.threads},
        "command": " ".join(["python", *sys.argv]),
        "model": "tiny preset, randomly initialised, 1,000-token BPE",
        "flags": args.flags,
        "runs": [],
    }
    try:
        model = save_tiny_model(work / "model", write_sentences(work / "sample.txt", TOKENIZER_LINES, seed=1))
        runs = []
        for count in sorted(args.lines):
            source = write_sentences(work / f"input-{count}.txt", count)
            output = work / f"output-{count}.txt"
            runs.append(
                {"lines": count, **translate_measured(model, source, output, args.flags, args.threads)}
            )
            if count_lines(output) != count:
                raise RuntimeError(f"{output} has {count_lines(output)} lines for {count} input lines")
            source.unlink()
            results["runs"] = compared(runs)
            print(results["runs"][-1], flush=True)
            if args.output:
                save_results(results, args.output)
    finally:
        if not args.keep:
            shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
