"""Sequence-level knowledge distillation (Kim and Rush, 2016): a teacher's translations of the training sources
become the training targets of a new dataset, in the Hub `translation` layout, so that train.py and
select_checkpoint.py read it with `--dataset DIR` like any other. A departure from the paper, off unless asked for.
"""

from __future__ import annotations

import json
import logging
import os
from collections.abc import Iterable
from pathlib import Path
from typing import Any

import datasets
from transformers import PreTrainedModel, PreTrainedTokenizerBase

from .data import load_translation_split
from .decoding import DEFAULT_MAX_TOKENS
from .files import atomic_directory
from .translation import translate_sentences

logger = logging.getLogger(__name__)
PROVENANCE_FILE = "distillation.json"  # not a split: datasets reads only the files named after splits


def distill_dataset(
    model: PreTrainedModel,
    tokenizer: PreTrainedTokenizerBase,
    dataset: str,
    source_lang: str,
    target_lang: str,
    output_dir: str | os.PathLike,
    *,
    teacher: str = "",
    config_name: str | None = None,
    train_split: str = "train",
    keep_original: bool = False,
    overwrite: bool = False,
    max_tokens: int = DEFAULT_MAX_TOKENS,
    show_progress: bool = True,
    **generate_kwargs: Any,
) -> dict[str, Any]:
    """Translate the sources of `dataset`'s `train_split` with `model` and write `output_dir`: that split with the
    teacher's translations as targets (after the original pairs with `keep_original`), every other split as it
    was, and `distillation.json` saying how it was made (returned). Only the two languages are kept.

    `generate_kwargs` (num_beams, length_penalty...) go to `translate_sentences`. An `output_dir` that exists and is
    not empty is refused unless `overwrite`; the directory appears only once it is whole.
    """
    output_dir = Path(output_dir)
    if output_dir.exists() and not overwrite and (not output_dir.is_dir() or any(output_dir.iterdir())):
        raise FileExistsError(f"{output_dir} exists and is not empty; pass --overwrite to replace it")
    # The training split first: its loading names a missing dataset, split or language.
    pairs = {train_split: load_translation_split(dataset, source_lang, target_lang, train_split, config_name)}
    for split in datasets.load_dataset(dataset, config_name):
        if split != train_split:
            pairs[split] = load_translation_split(dataset, source_lang, target_lang, split, config_name)
    sources, references = pairs[train_split]["source"], pairs[train_split]["target"]
    translations = translate_sentences(
        model, tokenizer, sources, max_tokens, show_progress=show_progress, **generate_kwargs
    )
    distilled_train = list(zip(sources, translations, strict=True))
    if keep_original:
        distilled_train = list(zip(sources, references, strict=True)) + distilled_train
    provenance = {
        "teacher": teacher,
        "dataset": dataset,
        "config_name": config_name,
        "source_lang": source_lang,
        "target_lang": target_lang,
        "train_split": train_split,
        "keep_original": keep_original,
        "generate_kwargs": generate_kwargs,
        "max_tokens": max_tokens,
        "rows": {split: len(rows) for split, rows in pairs.items()} | {train_split: len(distilled_train)},
        "teacher_equals_reference": sum(map(str.__eq__, translations, references)),
    }
    with atomic_directory(output_dir) as staging:
        for split, rows in pairs.items():
            split_pairs = (
                distilled_train if split == train_split else zip(rows["source"], rows["target"], strict=True)
            )
            _write_translation_jsonl(staging / f"{split}.jsonl", split_pairs, source_lang, target_lang)
        (staging / PROVENANCE_FILE).write_text(json.dumps(provenance, indent=2) + "\n", encoding="utf-8")
    logger.info("wrote %s: %d training pairs", output_dir, len(distilled_train))
    return provenance


def _write_translation_jsonl(
    path: Path, pairs: Iterable[tuple[str, str]], source_lang: str, target_lang: str
) -> None:
    """One `{"translation": {source_lang: ..., target_lang: ...}}` object a line, the Hub `translation` layout."""
    with path.open("w", encoding="utf-8") as file:
        for source, target in pairs:
            file.write(
                json.dumps({"translation": {source_lang: source, target_lang: target}}, ensure_ascii=False)
                + "\n"
            )
