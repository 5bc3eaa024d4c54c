"""A tokenizer directory: the joint BPE trained on a corpus's pairs and saved atomically, with what it learned
from (`learned_from.json`) and a card."""

from __future__ import annotations

import os
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import datasets
from datasets.fingerprint import Hasher
from huggingface_hub import ModelCard, ModelCardData
from transformers import PreTrainedTokenizerFast

from hf_vanilla.checkpoints.cards import card_of, save_card
from hf_vanilla.data.tokenization import (
    LEARNED_FROM_FILE,
    TEXT_BATCH,
    pair_texts,
    sample_pairs,
    train_tokenizer,
)
from hf_vanilla.files import atomic_directory, write_json


def save_tokenizer(
    tokenizer: PreTrainedTokenizerFast,
    output_dir: str | os.PathLike,
    learned_from: dict[str, Any] | None = None,
) -> Path:
    """`save_pretrained` into a temporary sibling directory, then rename it into place; with `learned_from`
    (the languages, data and fingerprint it learned from), also `learned_from.json` and a card (README.md)
    saying so.

    A crash leaves either the old directory or the new one, never a half-written one.
    """
    output_dir = Path(output_dir)
    with atomic_directory(output_dir) as staging:
        tokenizer.save_pretrained(staging)
        if learned_from is not None:
            write_json(staging / LEARNED_FROM_FILE, learned_from)
            save_card(_tokenizer_card(tokenizer, learned_from), staging)
    return output_dir


def _tokenizer_card(tokenizer: PreTrainedTokenizerFast, learned_from: dict[str, Any]) -> ModelCard:
    """A tokenizer directory's README.md: its languages for the Hub, and what it learned from."""
    languages = learned_from["languages"]
    return card_of(
        ModelCardData(language=languages, library_name="transformers"),
        f"\n# Joint byte-level BPE, {' + '.join(languages)}\n\n"
        f"One vocabulary of {len(tokenizer):,} tokens for both languages (the paper's shared vocabulary, "
        f"section 5.1), learned from {learned_from['pairs']:,} pairs of `{learned_from['dataset']}` (split "
        f"`{learned_from['split']}`, data fingerprint `{learned_from['fingerprint']}`). A training run of "
        "another language pair refuses it.\n",
    )


@dataclass(frozen=True)
class PairsSource:
    """What a tokenizer's pairs are: their two languages, and the dataset and split they came from."""

    languages: tuple[str, str]
    dataset: str = ""
    split: str = "train"


def train_tokenizer_on_pairs(
    pairs: datasets.Dataset,
    output_dir: str | Path,
    vocab_size: int,
    source: PairsSource,
    max_sentences: int | None = None,
    min_frequency: int = 2,
) -> dict[str, Any]:
    """Train the joint BPE on `pairs` (or a random `max_sentences` of them), with progress, and save it into
    `output_dir` (atomically) with what it learned from (`source`, the data's fingerprint). Returns
    {"tokenizer", "pairs", "corpus_pairs", "seconds", "whole_corpus_seconds_estimate"}: the last scales the
    time linearly to every pair, an estimate."""
    sample = sample_pairs(pairs, max_sentences)
    started = time.perf_counter()
    tokenizer = train_tokenizer(
        pair_texts(sample), vocab_size=vocab_size, min_frequency=min_frequency, length=2 * len(sample)
    )
    seconds = time.perf_counter() - started
    learned_from = {
        "languages": sorted(source.languages),
        "dataset": source.dataset,
        "split": source.split,
        "pairs": len(sample),
        "fingerprint": data_fingerprint(sample),
    }
    save_tokenizer(tokenizer, output_dir, learned_from)
    return {
        "tokenizer": str(output_dir),
        "vocabulary": len(tokenizer),
        "pairs": len(sample),
        "corpus_pairs": len(pairs),
        "seconds": round(seconds, 1),
        "whole_corpus_seconds_estimate": round(seconds * len(pairs) / max(len(sample), 1), 1),
    }


def data_fingerprint(pairs: datasets.Dataset) -> str:
    """16 hex digits hashed from the texts of `pairs` (datasets' public `Hasher`): the same pairs give the
    same fingerprint however they were loaded. It is recorded for a reader only; nothing compares it."""
    hasher = Hasher()
    for batch in pairs.iter(batch_size=TEXT_BATCH):
        hasher.update(batch["source"])
        hasher.update(batch["target"])
    return hasher.hexdigest()


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
