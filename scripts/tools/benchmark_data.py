"""How data preparation's cost grows with the corpus:
a synthetic WMT-shaped corpus of N pairs, made at run time.

For each N: trains the tokenizer and prepares the corpus (scripts/prepare_data.py with a training config,
first on an empty cache, then again on the filled one), recording wall-clock seconds and the peak resident
memory of the whole process tree; then times the training data loader (sampler, collator, worker processes) as
a training run builds it. Writes JSON with the machine. The corpus is written under --work-dir and deleted
unless --keep; never commit it.

The corpus imitates WMT 2014 en-de's shape, not its text: Zipf-distributed pseudo-words from a 300k-word
lexicon a language (German's longer, with umlauts), lognormal sentence lengths around 23 words, a hyphenated
compound now and then, 3,000 validation and test pairs, in the Hub's Parquet `translation` layout.

    python scripts/tools/benchmark_data.py --pairs 500000 1000000 4500000 \
        --output docs/benchmarks/data-scale.json

The loader is timed side by side in one process: the former collation (transformers' DataCollatorForSeq2Seq)
and the current one (`hf_vanilla.data.batches.BatchCollator`), each with every `--loader-workers` count of
worker processes.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

import numpy as np
import psutil
import pyarrow as pa
import pyarrow.parquet as pq
from accelerate import PartialState
from torch.utils.data import DataLoader
from transformers import DataCollatorForSeq2Seq

from hf_vanilla.cli import ArgumentParser, add_logging_argument, configure_logging, positive_int
from hf_vanilla.data.batches import TokenizedRows, UpdateBatchSampler, example_lengths, make_collator
from hf_vanilla.tools.benchmark import environment, save_results
from hf_vanilla.training.settings import load_training_config
from hf_vanilla.training.train import load_inputs

REPO = Path(__file__).resolve().parents[2]
LEXICON_WORDS = 300_000
HELD_OUT_PAIRS = 3_000  # newstest2013 has 3,000 sentences, newstest2014 3,003
CHUNK_PAIRS = 250_000
MEASURES = ("seconds", "peak_memory_bytes", "peak_resident_bytes")
SYLLABLES = {
    "en": "ba be bi bo bu ca ce co da de di do fa fe fi ga ge go ha he hi ho la le li lo ma me mi mo "
    "na ne ni no pa pe pi po ra re ri ro sa se si so ta te ti to th sh st tr ng er an in on".split(),
    "de": "ba be bi bo bu da de di do fa fe ga ge ha he hi la le li lo ma me mi mo na ne ni no pa pe "
    "ra re ri sa se si ta te ti tu ä ö ü ei au ch sch st ng er en ung keit ß".split(),
}


def non_negative_int(text: str) -> int:
    """An argparse type: a whole number of at least 0."""
    value = int(text)
    if value < 0:
        raise argparse.ArgumentTypeError(f"must be at least 0, got {value}")
    return value


def _lexicon(lang: str, rng: np.random.Generator) -> np.ndarray:
    """LEXICON_WORDS distinct pseudo-words of `lang`, most frequent first (German's a syllable longer)."""
    syllables = np.array(SYLLABLES[lang])
    longest = 5 if lang == "de" else 4
    words: dict[str, None] = {}
    while len(words) < LEXICON_WORDS:
        lengths = rng.integers(1, longest + 1, size=LEXICON_WORDS)
        picks = rng.integers(0, len(syllables), size=(LEXICON_WORDS, longest))
        for length, row in zip(lengths, picks, strict=True):
            words["".join(syllables[row[:length]])] = None
    # The frequent words are the short ones, as in any language.
    return np.array(sorted(list(words)[:LEXICON_WORDS], key=len), dtype=object)


def _sentences(
    lexicon: np.ndarray, cdf: np.ndarray, lengths: np.ndarray, rng: np.random.Generator
) -> list[str]:
    """One sentence of each length: Zipf words, the first capitalized, a comma and a compound now and then."""
    words = lexicon[np.searchsorted(cdf, rng.random(int(lengths.sum())))]
    joiners = np.where(rng.random(len(words)) < 0.03, "-", np.where(rng.random(len(words)) < 0.05, ", ", " "))
    pieces = np.char.add(words.astype(str), joiners.astype(str))
    sentences = []
    for piece in np.split(pieces, np.cumsum(lengths)[:-1]):
        text = "".join(piece.tolist()).rstrip(",- ")
        sentences.append(text[:1].upper() + text[1:] + ".")
    return sentences


def _pair_table(count: int, lexicons, cdf: np.ndarray, rng: np.random.Generator) -> pa.Table:
    source_lengths = np.clip(np.rint(rng.lognormal(3.0, 0.55, size=count)), 1, 150).astype(int)
    target_lengths = np.clip(np.rint(source_lengths * rng.uniform(0.8, 1.2, size=count)), 1, 150).astype(int)
    columns = {
        "en": _sentences(lexicons["en"], cdf, source_lengths, rng),
        "de": _sentences(lexicons["de"], cdf, target_lengths, rng),
    }
    return pa.table({"translation": pa.StructArray.from_arrays(list(columns.values()), list(columns))})


def write_corpus(directory: Path, pairs: int, seed: int = 0) -> Path:
    """train/validation/test Parquet files of a synthetic en-de corpus, `pairs` training pairs, Hub layout."""
    rng = np.random.default_rng(seed)
    lexicons = {lang: _lexicon(lang, rng) for lang in ("en", "de")}
    ranks = np.arange(1, LEXICON_WORDS + 1)
    cdf = np.cumsum(1 / ranks**1.05)
    cdf /= cdf[-1]
    directory.mkdir(parents=True, exist_ok=True)
    for split, size in (("validation", HELD_OUT_PAIRS), ("test", HELD_OUT_PAIRS), ("train", pairs)):
        with pq.ParquetWriter(
            directory / f"{split}-00000-of-00001.parquet", _pair_table(1, lexicons, cdf, rng).schema
        ) as writer:
            for start in range(0, size, CHUNK_PAIRS):
                writer.write_table(_pair_table(min(CHUNK_PAIRS, size - start), lexicons, cdf, rng))
    return directory


def _proportional_memory(process: psutil.Process) -> tuple[int, int]:
    """(anonymous, all) proportional resident bytes of `process` (Linux smaps_rollup): a page that n processes
    share counts 1/n in each, so the sum over processes is what they hold together."""
    fields = {}
    with open(f"/proc/{process.pid}/smaps_rollup") as rollup:
        for line in rollup:
            name, _, value = line.partition(":")
            if name in ("Pss", "Pss_Anon"):
                fields[name] = int(value.split()[0]) * 1024
    return fields["Pss_Anon"], fields["Pss"]


def run_measured(command: list[str], env: dict[str, str]) -> dict:
    """Run `command`; its wall-clock seconds, output and peak memory over its process tree (sampled every
    0.1 s): "peak_memory_bytes" sums the processes' proportional anonymous memory (what the machine must
    hold), "peak_resident_bytes" adds their proportional file-backed pages (the memory-mapped Arrow files,
    which the kernel can drop). RuntimeError with the end of its stderr if it fails."""
    started = time.perf_counter()
    process = psutil.Popen(command, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    peak_anonymous = peak_resident = 0
    output: dict[str, str] = {}

    def read_output() -> None:
        output["stdout"], output["stderr"] = process.communicate()

    reader = threading.Thread(target=read_output)
    reader.start()
    while reader.is_alive():
        try:
            memory = [_proportional_memory(member) for member in (process, *process.children(recursive=True))]
        except (psutil.Error, OSError):  # a worker that just ended
            memory = []
        peak_anonymous = max(peak_anonymous, sum(anonymous for anonymous, _ in memory))
        peak_resident = max(peak_resident, sum(resident for _, resident in memory))
        reader.join(0.1)
    if process.returncode:
        raise RuntimeError(f"{' '.join(command)} failed: {output['stderr'][-2000:]}")
    return {
        "seconds": round(time.perf_counter() - started, 1),
        "peak_memory_bytes": peak_anonymous,
        "peak_resident_bytes": peak_resident,
        **output,
    }


def _report(stdout: str) -> dict:
    return json.loads(stdout[: stdout.rindex("}") + 1])


def loader_pace(config, max_tokens: int, batches: int, workers: list[int]) -> list[dict]:
    """Batches and target tokens a second of the training loader over its first `batches` batches of
    `max_tokens` after one to start on, on the prepared data, side by side in this process: the former
    collation (transformers' DataCollatorForSeq2Seq on a dict of Python lists a row) and the current one
    (Arrow rows padded with numpy, as train.py builds it), each with every number of DataLoader worker
    processes in `workers`."""
    inputs = load_inputs(config, PartialState())
    tokenizer, train_data = inputs.tokenizer, inputs.train_data
    sampler = UpdateBatchSampler(example_lengths(train_data), max_tokens, 1, 1, 0, seed=1)
    collations = {
        "former": (
            train_data,
            DataCollatorForSeq2Seq(tokenizer, label_pad_token_id=-100, return_tensors="pt"),
        ),
        "numpy": (TokenizedRows(train_data), make_collator(tokenizer)),
    }
    return [
        {
            "max_tokens": max_tokens,
            "collation": name,
            "workers": count,
            **_pace(DataLoader(rows, batch_sampler=sampler, collate_fn=collator, num_workers=count), batches),
        }
        for count in workers
        for name, (rows, collator) in collations.items()
    ]


def _pace(loader: DataLoader, batches: int) -> dict:
    """`loader`'s batches and target tokens a second over `batches` batches, its first
    (workers starting) untimed."""
    loaded = iter(loader)
    next(loaded)
    started, count, target_tokens = time.perf_counter(), 0, 0
    for batch in loaded:
        target_tokens += int((batch["labels"] != -100).sum())
        count += 1
        if count == batches:
            break
    seconds = time.perf_counter() - started
    return {
        "batches": count,
        "batches_per_second": round(count / seconds, 1),
        "target_tokens_per_second": round(target_tokens / seconds),
    }


def measure(pairs: int, args, work_dir: Path) -> dict:
    """Corpus of `pairs`, then preparation twice (empty cache, filled cache), then the loader's pace."""
    corpus = write_corpus(work_dir / f"corpus-{pairs}", pairs)
    tokenizer, cache = work_dir / f"bpe-{pairs}", work_dir / "cache"
    overrides = {
        "dataset": str(corpus),
        "dataset_config": None,  # a local folder has one config
        "tokenizer": str(tokenizer),
        "preprocessing_workers": args.workers,
        "output_dir": str(work_dir / "run"),
    }
    flags = [
        f"--{name.replace('_', '-')}={'null' if value is None else value}"
        for name, value in overrides.items()
    ]
    script = REPO / "scripts" / "prepare_data.py"
    command = [sys.executable, str(script), "--config", str(args.config), *flags]
    env = {**os.environ, "HF_DATASETS_CACHE": str(cache), "HF_HUB_OFFLINE": "1"}
    first, cached = run_measured(command, env), run_measured(command, env)
    report = _report(first.pop("stdout"))
    cached.pop("stdout")
    # The loader in a process of its own, started as a training process is, reading the prepared cache.
    loader_command = [
        sys.executable, __file__, "--time-loader", json.dumps(overrides), "--config", str(args.config),
        "--loader-batches", str(args.loader_batches), "--max-tokens", *map(str, args.max_tokens),
        "--loader-workers", *map(str, args.loader_workers),
    ]  # fmt: skip
    loader = run_measured(loader_command, env)
    return {
        "pairs": pairs,
        "tokenizer_training": report["tokenizer_training"],
        "train_pairs_kept": report["train_pairs"],
        "train_tokens": {"source": report["train_source_tokens"], "target": report["train_target_tokens"]},
        "first": {key: first[key] for key in MEASURES},
        "cached": {key: cached[key] for key in MEASURES},
        # "Tokenizing" on stderr would mean the cache was missed and the corpus prepared again.
        "cached_run_read_the_cache": "Tokenizing" not in cached["stderr"],
        "loader_read_the_cache": "Tokenizing" not in loader["stderr"],
        "loader": json.loads(loader["stdout"]),
        "loader_memory": {key: loader[key] for key in MEASURES[1:]},
    }


def build_parser() -> ArgumentParser:
    parser = ArgumentParser(description=__doc__)
    parser.add_argument(
        "--pairs",
        type=positive_int,
        nargs="+",
        default=[500_000, 1_000_000, 4_500_000],
        help="corpus sizes to measure, in sentence pairs",
    )
    parser.add_argument(
        "--config", default=REPO / "configs" / "wmt14-en-de-base.yaml", help="training config"
    )
    parser.add_argument(
        "--workers", type=positive_int, default=2, help="preprocessing_workers (datasets.map)"
    )
    parser.add_argument(
        "--max-tokens", type=positive_int, nargs="+", default=[3125, 25000], help="loader batch sizes to time"
    )
    parser.add_argument("--loader-batches", type=positive_int, default=300, help="batches timed a batch size")
    parser.add_argument(
        "--loader-workers",
        type=non_negative_int,
        nargs="+",
        default=[0, 2],
        help="DataLoader worker processes to time each collation with (training's dataloader_workers)",
    )
    parser.add_argument("--work-dir", help="where the corpora and cache go (default: a temporary directory)")
    parser.add_argument("--keep", action="store_true", help="keep the work directory")
    parser.add_argument("--output", default="data-scale.json", help="JSON results")
    parser.add_argument(
        "--time-loader", metavar="OVERRIDES", help="(internal) time the loader of this config"
    )
    add_logging_argument(parser)
    return parser


def main() -> None:
    args = build_parser().parse_args()
    configure_logging(args.log_level)
    if args.time_loader:
        config = load_training_config(args.config, **json.loads(args.time_loader))
        paces = [
            pace
            for max_tokens in args.max_tokens
            for pace in loader_pace(config, max_tokens, args.loader_batches, args.loader_workers)
        ]
        print(json.dumps(paces))
        return
    work_dir = Path(args.work_dir or tempfile.mkdtemp(prefix="benchmark-data-"))
    results = {
        "environment": environment(),
        "command": " ".join(sys.argv),
        "config": str(args.config),
        "runs": [],
    }
    try:
        for pairs in args.pairs:
            results["runs"].append(measure(pairs, args, work_dir))
            save_results(results, args.output)  # each size as soon as it is measured
            print(json.dumps(results["runs"][-1]), flush=True)
    finally:
        if not args.keep:
            shutil.rmtree(work_dir, ignore_errors=True)


if __name__ == "__main__":
    main()
