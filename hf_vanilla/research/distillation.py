"""Training data from trained models, a departure from the paper, off unless asked for: sequence-level knowledge
distillation (Kim and Rush, 2016), where forward teachers translate the training sources into new targets, and
data diversification (Nguyen et al., 2020), which adds backward models' translations of the training targets as
new sources. The result is a dataset in the Hub `translation` layout that train.py and select_checkpoint.py read
with `--dataset DIR` like any other.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import shutil
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any

import datasets
import torch
from tqdm.auto import tqdm
from transformers import AutoConfig, PreTrainedModel, PreTrainedTokenizerBase

from hf_vanilla.data import load_translation_split
from hf_vanilla.evaluation.scoring import score_translations
from hf_vanilla.files import atomic_directory, write_text_atomic
from hf_vanilla.model.decoding import DEFAULT_MAX_TOKENS
from hf_vanilla.translation import (
    load_model_and_tokenizer,
    read_lines,
    translate_sentences,
    write_lines_atomic,
)

logger = logging.getLogger(__name__)
PROVENANCE_FILE = "distillation.json"  # not a split: datasets reads only the files named after splits
# Sentences a model translates between two saves of its translations: on 2 CPU cores ~2,000 Multi30k sentences
# take a few minutes at beam 4, so a stopped run loses at most that.
TRANSLATION_CHUNK = 2000


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
    translations_dir: str | os.PathLike | None = None,
    chunk_size: int = TRANSLATION_CHUNK,
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

    Each model's translations are saved every `chunk_size` sentences under `translations_dir`, keyed by the
    model's weights, config and vocabulary, the sentences and the decoding settings: a stopped run given again
    goes on where it stopped, and another run that asks the same model for the same sentences (the other
    direction's diversification: its backward model is this one's forward model) reads them instead of decoding.
    By default they go to a hidden directory beside `output_dir`, removed once the dataset is written; a
    `translations_dir` given is kept.
    """
    if not forward and not backward:
        raise ValueError("no teacher: name at least one forward or backward model")
    if chunk_size < 1:
        raise ValueError(f"chunk_size must be at least 1, not {chunk_size}")
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
    own_translations_dir = translations_dir is None
    translations_dir = (
        output_dir.parent / f".{output_dir.name}.translations" if own_translations_dir else Path(translations_dir)
    )
    teachers = []
    for side, models, inputs, references, output_lang in (
        ("forward", forward, sources, targets, target_lang),
        ("backward", backward, targets, sources, source_lang),
    ):
        for model_name in models:
            model, tokenizer = load_model_and_tokenizer(model_name, device, dtype)
            translations = _saved_translations(
                model,
                tokenizer,
                inputs,
                translations_dir,
                chunk_size,
                description=f"{side} {model_name}",
                show_progress=show_progress,
                max_tokens=max_tokens,
                **generate_kwargs,
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
    if own_translations_dir:
        shutil.rmtree(translations_dir)
    logger.info("wrote %s: %d training pairs", output_dir, len(training_pairs))
    return provenance


def _saved_translations(
    model: PreTrainedModel,
    tokenizer: PreTrainedTokenizerBase,
    inputs: Sequence[str],
    translations_dir: Path,
    chunk_size: int,
    description: str,
    show_progress: bool,
    **translate_kwargs: Any,
) -> list[str]:
    """`translate_sentences(model, tokenizer, inputs, **translate_kwargs)` a chunk at a time, each chunk saved
    (`chunk-NNNNN.txt`, one translation a line) under a directory of `translations_dir` named by everything the
    translations depend on; chunks already there are read, not decoded."""
    key = {
        "model": _model_fingerprint(model, tokenizer),
        "inputs": hashlib.sha256(json.dumps(list(inputs)).encode()).hexdigest(),
        "chunk_size": chunk_size,
        "dtype": str(model.dtype),
        "translate_kwargs": translate_kwargs,
    }
    directory = translations_dir / hashlib.sha256(json.dumps(key, sort_keys=True).encode()).hexdigest()[:20]
    directory.mkdir(parents=True, exist_ok=True)
    if not (directory / "key.json").is_file():  # what made them, for a reader; the first run's words
        write_text_atomic(directory / "key.json", json.dumps({"made_by": description} | key, indent=2) + "\n")
    translations: list[str] = []
    with tqdm(total=len(inputs), unit="sent", desc=description, disable=not show_progress) as progress:
        for start in range(0, len(inputs), chunk_size):
            chunk = inputs[start : start + chunk_size]
            path = directory / f"chunk-{start // chunk_size:05d}.txt"
            if path.is_file():  # also one another process wrote since this one began
                done = read_lines(path)
                if len(done) != len(chunk):
                    raise ValueError(f"{path} holds {len(done)} translations, not {len(chunk)}: remove it")
            else:
                done = translate_sentences(model, tokenizer, chunk, show_progress=False, **translate_kwargs)
                write_lines_atomic(path, done)  # translate_sentences keeps each translation on one line
            translations += done
            progress.update(len(chunk))
    return translations


def _model_fingerprint(model: PreTrainedModel, tokenizer: PreTrainedTokenizerBase) -> str:
    """A digest of what a model's translations depend on: its weights, config, generation config, vocabulary."""
    digest = hashlib.sha256()
    for name, tensor in sorted(model.state_dict().items()):
        digest.update(name.encode())
        digest.update(tensor.detach().cpu().contiguous().view(-1).view(torch.uint8).numpy())
    for text in (
        model.config.to_json_string(),
        model.generation_config.to_json_string(),
        json.dumps(tokenizer.get_vocab(), sort_keys=True),
    ):
        digest.update(text.encode())
    return digest.hexdigest()


def _write_translation_jsonl(
    path: Path, pairs: Iterable[tuple[str, str]], source_lang: str, target_lang: str
) -> None:
    """One `{"translation": {source_lang: ..., target_lang: ...}}` object a line, the Hub `translation` layout."""
    rows = [{source_lang: source, target_lang: target} for source, target in pairs]
    datasets.Dataset.from_dict({"translation": rows}).to_json(path, force_ascii=False)
