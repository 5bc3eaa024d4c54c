"""Data preparation as a step of its own: the tokenizer, then the cleaned and tokenized corpus in datasets' cache.

`prepare_training_data` does what a training run does before its first update (`hf_vanilla.training.train.
load_inputs`), with the same config and so the same cache fingerprints: a later run (every process of it, on every
node that shares the cache) reads the prepared data instead of preparing it again. On several nodes each node's
first process prepares while the node's other processes wait (accelerate's `local_main_process_first`).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import datasets
from accelerate import PartialState

from hf_vanilla.data import example_lengths, load_translation_split
from hf_vanilla.tokenization import save_tokenizer, train_tokenizer
from hf_vanilla.training.settings import TrainingConfig, TrainingError
from hf_vanilla.training.train import load_inputs

logger = logging.getLogger(__name__)

# Pairs read from Arrow at a time while the BPE counts words: the texts never sit in memory as one Python list.
_TEXT_BATCH = 10_000


def sample_pairs(pairs: datasets.Dataset, max_sentences: int | None, seed: int = 0) -> datasets.Dataset:
    """`pairs`, or a random `max_sentences` of them (the same ones for the same seed) when there are more.

    Random, not the first ones: WMT's training split is its corpora one after another (Europarl first)."""
    if max_sentences is None or max_sentences >= len(pairs):
        return pairs
    return pairs.shuffle(seed=seed).select(range(max_sentences)).flatten_indices()


def _texts(pairs: datasets.Dataset) -> Iterator[str]:
    """Every source and target text of `pairs`, read a batch at a time."""
    for batch in pairs.iter(batch_size=_TEXT_BATCH):
        yield from batch["source"]
        yield from batch["target"]


def train_tokenizer_on_pairs(
    pairs: datasets.Dataset,
    output_dir: str | Path,
    vocab_size: int,
    max_sentences: int | None = None,
    min_frequency: int = 2,
) -> dict[str, Any]:
    """Train the joint BPE on `pairs` (or a random `max_sentences` of them), with progress, and save it into
    `output_dir` (atomically). Returns {"tokenizer", "pairs", "corpus_pairs", "seconds",
    "whole_corpus_seconds_estimate"}: the last scales the time linearly to every pair, an estimate."""
    sample = sample_pairs(pairs, max_sentences)
    started = time.perf_counter()
    tokenizer = train_tokenizer(
        _texts(sample), vocab_size=vocab_size, min_frequency=min_frequency, length=2 * len(sample)
    )
    seconds = time.perf_counter() - started
    save_tokenizer(tokenizer, output_dir)
    return {
        "tokenizer": str(output_dir),
        "vocabulary": len(tokenizer),
        "pairs": len(sample),
        "corpus_pairs": len(pairs),
        "seconds": round(seconds, 1),
        "whole_corpus_seconds_estimate": round(seconds * len(pairs) / max(len(sample), 1), 1),
    }


def describe_tokenizer_training(report: dict[str, Any]) -> str:
    """One line: how long the tokenizer took on how many pairs, and what the whole corpus would take."""
    line = (
        f"tokenizer {report['tokenizer']}: vocabulary of {report['vocabulary']}, learned from "
        f"{report['pairs']:,} pairs in {report['seconds']:.0f} s"
    )
    if report["pairs"] < report["corpus_pairs"]:
        line += (
            f" (a random sample of the {report['corpus_pairs']:,}); the whole corpus would take about "
            f"{report['whole_corpus_seconds_estimate'] / 60:.1f} min (estimate, linear in pairs)"
        )
    return line


def _load_pairs(config: TrainingConfig, split: str) -> datasets.Dataset:
    try:
        return load_translation_split(
            config.dataset, config.source_lang, config.target_lang, split, config.dataset_config
        )
    except (FileNotFoundError, ValueError) as err:
        raise TrainingError(str(err)) from err


def prepare_training_data(
    config: TrainingConfig, tokenizer_max_sentences: int | None = None, state: PartialState | None = None
) -> dict[str, Any]:
    """Train the tokenizer if `config.tokenizer` is missing (on a random `tokenizer_max_sentences` pairs when
    given), then clean and tokenize the training and validation splits into datasets' cache, as a training run
    with `config` would. Returns a report: the tokenizer's training (when it was trained), pairs and tokens
    kept, the cache files, the seconds. Raises TrainingError in one line for bad input (a language or config
    name the dataset lacks, a split empty after cleaning); the cache and tokenizer are never half-written
    (datasets and `save_tokenizer` write into place by renaming)."""
    if not (config.tokenizer or config.init_from):
        raise TrainingError("tokenizer is required: the directory to load it from, or to train it into")
    state = state or PartialState()
    started = time.perf_counter()
    report: dict[str, Any] = {"dataset": config.dataset, "dataset_config": config.dataset_config}
    if not config.init_from and not Path(config.tokenizer).exists():
        with state.main_process_first():
            if state.is_main_process:
                training = train_tokenizer_on_pairs(
                    _load_pairs(config, config.train_split),
                    config.tokenizer,
                    config.tokenizer_vocab_size,
                    tokenizer_max_sentences,
                )
                logger.info(describe_tokenizer_training(training))
                report["tokenizer_training"] = training
    tokenizer, _, (train_data, validation) = load_inputs(config, state)
    source_tokens, target_tokens = (int(total) for total in example_lengths(train_data).sum(axis=0))
    report.update(
        tokenizer=str(config.tokenizer or config.init_from),
        train_pairs=len(train_data),
        train_source_tokens=source_tokens,
        train_target_tokens=target_tokens,
        validation_pairs=0 if validation is None else len(validation.sources),
        cache_files=sorted({Path(file["filename"]).name for file in train_data.cache_files}),
        cache_directory=str(Path(train_data.cache_files[0]["filename"]).parent) if train_data.cache_files else None,
        seconds=round(time.perf_counter() - started, 1),
    )
    return report
