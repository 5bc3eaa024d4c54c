"""Training data from trained models, a departure from the paper, off unless asked for: sequence-level knowledge
distillation (Kim and Rush, 2016), where forward teachers translate the training sources into new targets, and
data diversification (Nguyen et al., 2020), which adds backward models' translations of the training targets as
new sources. The result is a dataset in the Hub `translation` layout that train.py and select_checkpoint.py read
with `--dataset DIR` like any other.
"""

from __future__ import annotations

import json
import logging
import os
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any

import datasets
from transformers import AutoConfig

from .data import load_translation_split
from .decoding import DEFAULT_MAX_TOKENS
from .files import atomic_directory
from .scoring import score_translations
from .translation import load_model_and_tokenizer, translate_sentences

logger = logging.getLogger(__name__)
PROVENANCE_FILE = "distillation.json"  # not a split: datasets reads only the files named after splits


def distill_dataset(
    dataset: str,
    source_lang: str,
    target_lang: str,
    output_dir: str | os.PathLike,
    *,
    forward: Sequence[str] = (),
    backward: Sequence[str] = (),
    keep_original: bool = False,
    config_name: str | None = None,
    train_split: str = "train",
    overwrite: bool = False,
    device: str | None = None,
    dtype: str = "float32",
    max_tokens: int = DEFAULT_MAX_TOKENS,
    show_progress: bool = True,
    **generate_kwargs: Any,
) -> dict[str, Any]:
    """Write `output_dir`: `dataset`'s `train_split` made of the original pairs (with `keep_original`), then each
    `forward` model's translations of the sources paired with those sources, then each `backward` model's
    (target_lang -> source_lang) translations of the targets paired with those targets; every other split as it
    was; and `distillation.json` saying how it was made, with each model's sacreBLEU against the training split's
    own references (a model of the wrong direction scores near 0), returned. Only the two languages are kept.

    The models are saved model directories or Hub ids, loaded one at a time on `device` in `dtype`;
    `generate_kwargs` (num_beams, length_penalty...) go to `translate_sentences`. An `output_dir` that exists and
    is not empty is refused unless `overwrite`; the directory appears only once it is whole. Every model's config
    is read before any decoding, so a wrong name fails at once, not after the models before it have decoded.
    """
    if not forward and not backward:
        raise ValueError("no teacher: name at least one forward or backward model")
    for model_name in (*forward, *backward):
        try:
            AutoConfig.from_pretrained(model_name)
        except OSError as err:
            raise FileNotFoundError(f"cannot load model {str(model_name)!r}: {err}") from err
    output_dir = Path(output_dir)
    if output_dir.exists() and not overwrite and (not output_dir.is_dir() or any(output_dir.iterdir())):
        raise FileExistsError(f"{output_dir} exists and is not empty; pass --overwrite to replace it")
    # The training split first: its loading names a missing dataset, split or language.
    pairs = {train_split: load_translation_split(dataset, source_lang, target_lang, train_split, config_name)}
    for split in datasets.load_dataset(dataset, config_name):
        if split != train_split:
            pairs[split] = load_translation_split(dataset, source_lang, target_lang, split, config_name)
    sources, targets = pairs[train_split]["source"], pairs[train_split]["target"]
    training_pairs = list(zip(sources, targets, strict=True)) if keep_original else []
    teachers = []
    for side, models, inputs, references, output_lang in (
        ("forward", forward, sources, targets, target_lang),
        ("backward", backward, targets, sources, source_lang),
    ):
        for model_name in models:
            model, tokenizer = load_model_and_tokenizer(model_name, device, dtype)
            translations = translate_sentences(
                model, tokenizer, inputs, max_tokens, show_progress=show_progress, **generate_kwargs
            )
            del model  # one teacher in memory at a time
            new_pairs = zip(inputs, translations, strict=True)
            training_pairs += new_pairs if side == "forward" else ((new, old) for old, new in new_pairs)
            scores = score_translations(translations, references, target_lang=output_lang)
            teachers.append({"model": str(model_name), "side": side, "train_bleu": scores["bleu"]})
    provenance = {
        "dataset": dataset,
        "config_name": config_name,
        "source_lang": source_lang,
        "target_lang": target_lang,
        "train_split": train_split,
        "keep_original": keep_original,
        "teachers": teachers,
        "generate_kwargs": generate_kwargs,
        "max_tokens": max_tokens,
        "rows": {split: len(rows) for split, rows in pairs.items()} | {train_split: len(training_pairs)},
    }
    with atomic_directory(output_dir) as staging:
        for split, rows in pairs.items():
            split_pairs = (
                training_pairs if split == train_split else zip(rows["source"], rows["target"], strict=True)
            )
            _write_translation_jsonl(staging / f"{split}.jsonl", split_pairs, source_lang, target_lang)
        (staging / PROVENANCE_FILE).write_text(json.dumps(provenance, indent=2) + "\n", encoding="utf-8")
    logger.info("wrote %s: %d training pairs", output_dir, len(training_pairs))
    return provenance


def _write_translation_jsonl(
    path: Path, pairs: Iterable[tuple[str, str]], source_lang: str, target_lang: str
) -> None:
    """One `{"translation": {source_lang: ..., target_lang: ...}}` object a line, the Hub `translation` layout."""
    rows = [{source_lang: source, target_lang: target} for source, target in pairs]
    datasets.Dataset.from_dict({"translation": rows}).to_json(path, force_ascii=False)
