"""Training data from trained models, a departure from the paper, off unless asked for: sequence-level
knowledge distillation (Kim and Rush, 2016), where forward teachers translate the training sources into new
targets, and data diversification (Nguyen et al., 2020), which adds backward models' translations of the
training targets as new sources. The result is a dataset in the Hub `translation` layout that train.py and
select_checkpoint.py read with `--dataset DIR` like any other.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import shutil
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import datasets

from hf_vanilla.checkpoints.loading import decoding_for, load_config, model_digest
from hf_vanilla.data.corpus import split_names, write_translation_jsonl
from hf_vanilla.evaluation.scoring import DEFAULT_RUNTIME, Runtime, TranslationData, score_translations
from hf_vanilla.files import atomic_directory, write_json
from hf_vanilla.model.decoding import DEFAULT_DECODING, DecodingOptions
from hf_vanilla.translation.corpus import (
    CorpusJob,
    CorpusSettings,
    describe_decoding,
    engine_translator,
    translate_corpus,
)
from hf_vanilla.translation.decoding import Batching, read_lines, write_lines_atomic
from hf_vanilla.translation.engines import TranslationEngine, load_engine

logger = logging.getLogger(__name__)
PROVENANCE_FILE = "distillation.json"  # not a split: datasets reads only the files named after splits
# Sentences a model translates between two saves of its translations: on 2 CPU cores ~2,000 Multi30k sentences
# take a few minutes at beam 4, so a stopped run loses at most that.
TRANSLATION_CHUNK = 2000


@dataclass(frozen=True)
class Teachers:
    """The models a distilled dataset is made with: `forward` ones (source -> target) translate the training
    sources into new targets, `backward` ones (target -> source) the training targets into new sources; with
    `keep_original`, the original pairs come first. Saved model directories or Hub ids."""

    forward: Sequence[str | os.PathLike] = ()
    backward: Sequence[str | os.PathLike] = ()
    keep_original: bool = False


@dataclass(frozen=True)
class SavedTranslations:
    """Where each teacher's translations are saved as they are made, every `chunk_size` sentences:
    `directory`, kept, or by default a hidden directory beside the output, removed once the dataset is
    written."""

    directory: str | os.PathLike | None = None
    chunk_size: int = TRANSLATION_CHUNK


def _check_request(teachers: Teachers, saved: SavedTranslations, output_dir: Path, overwrite: bool) -> None:
    """Raise before anything is decoded: no teacher, a chunk size below 1, a model whose config does not load,
    an output directory that is not empty (unless `overwrite`)."""
    if not teachers.forward and not teachers.backward:
        raise ValueError("no teacher: name at least one forward or backward model")
    if saved.chunk_size < 1:
        raise ValueError(f"chunk_size must be at least 1, not {saved.chunk_size}")
    for model_name in (*teachers.forward, *teachers.backward):
        load_config(model_name)
    if output_dir.exists() and not overwrite and (not output_dir.is_dir() or any(output_dir.iterdir())):
        raise FileExistsError(f"{output_dir} exists and is not empty; pass --overwrite to replace it")


def _load_splits(data: TranslationData, train_split: str) -> dict[str, datasets.Dataset]:
    """Every split's pairs, the training split first: its loading names a missing dataset, split or
    language."""
    pairs = {train_split: data.pairs(train_split)}
    for split in split_names(data.dataset, data.config_name):
        if split != train_split:
            pairs[split] = data.pairs(split)
    return pairs


def distill_dataset(
    data: TranslationData,
    output_dir: str | os.PathLike,
    teachers: Teachers,
    runtime: Runtime = DEFAULT_RUNTIME,
    saved: SavedTranslations = SavedTranslations(),
    overwrite: bool = False,
    train_split: str = "train",
    options: DecodingOptions = DEFAULT_DECODING,
) -> dict[str, Any]:
    """Write `output_dir`: `data`'s `train_split` made of the original pairs (with `teachers.keep_original`),
    then each forward teacher's translations of the sources paired with those sources, then each backward
    teacher's translations of the targets paired with those targets; every other split as it was; and
    `distillation.json` saying how it was made, with each teacher's sacreBLEU against the training split's own
    references (a model of the wrong direction scores near 0), returned. Only the two languages are kept.

    The teachers are loaded one at a time on the engine `runtime` names; `options` (num_beams,
    length_penalty...) are the decoding options (what they leave open: each teacher's generation config's,
    else the paper's, logged for each teacher). An `output_dir` that exists and is not empty is refused unless
    `overwrite`; the directory appears only once it is whole. Every teacher's config is read before any
    decoding, so a wrong name fails at once, not after the models before it have decoded.

    Each teacher's translations are saved as `saved` says, keyed by the model's digest (weights, configs,
    tokenizer), the sentences, the engine and the decoding settings: a stopped run given again goes on where
    it stopped, and another run that asks the same model for the same sentences (the other direction's
    diversification: its backward model is this one's forward model) reads them instead of decoding.
    """
    output_dir = Path(output_dir)
    _check_request(teachers, saved, output_dir, overwrite)
    pairs = _load_splits(data, train_split)
    own_directory = saved.directory is None
    if own_directory:
        directory = output_dir.parent / f".{output_dir.name}.translations"
    else:
        directory = Path(saved.directory)
    training_pairs, records = _distilled_pairs(
        teachers, data, pairs[train_split], TeacherRun(runtime, options, directory, saved.chunk_size)
    )
    provenance = {
        "dataset": data.dataset,
        "config_name": data.config_name,
        "source_lang": data.source_lang,
        "target_lang": data.target_lang,
        "train_split": train_split,
        "keep_original": teachers.keep_original,
        "teachers": records,
        "generate_kwargs": options.settings(),
        "max_tokens": runtime.max_tokens,
        "rows": {split: len(rows) for split, rows in pairs.items()} | {train_split: len(training_pairs)},
    }
    pairs[train_split] = training_pairs
    _write_dataset(output_dir, pairs, data, provenance)
    if own_directory:
        shutil.rmtree(directory)
    logger.info("wrote %s: %d training pairs", output_dir, len(training_pairs))
    return provenance


@dataclass(frozen=True)
class TeacherRun:
    """How every teacher decodes: the engine settings, the decoding options, and where and in what chunks the
    translations are saved."""

    runtime: Runtime
    options: DecodingOptions
    translations_dir: Path
    chunk_size: int


def _distilled_pairs(
    teachers: Teachers, data: TranslationData, train_pairs: datasets.Dataset, run: TeacherRun
) -> tuple[list[tuple[str, str]], list[dict[str, Any]]]:
    """The distilled training pairs (the original ones with `teachers.keep_original`, then each forward
    teacher's, then each backward teacher's) and a record a teacher, with its sacreBLEU against the training
    split's own references."""
    sources, targets = train_pairs["source"], train_pairs["target"]
    training_pairs = list(zip(sources, targets, strict=True)) if teachers.keep_original else []
    records = []
    for side, models, inputs, references, output_lang in (
        ("forward", teachers.forward, sources, targets, data.target_lang),
        ("backward", teachers.backward, targets, sources, data.source_lang),
    ):
        for model_name in models:
            decoding_for(model_name, run.options)  # logged: the engine resolves the same values as it decodes
            engine = load_engine(model_name, run.runtime.engine)
            translations = _saved_translations(
                Teacher(engine, model_digest(model_name), f"{side} {model_name}"),
                inputs,
                run.translations_dir,
                run.chunk_size,
                run.options,
                run.runtime,
            )
            del engine  # one teacher in memory at a time
            new_pairs = zip(inputs, translations, strict=True)
            training_pairs += new_pairs if side == "forward" else ((new, old) for old, new in new_pairs)
            scores = score_translations(translations, references, target_lang=output_lang)
            records.append({"model": str(model_name), "side": side, "train_bleu": scores["bleu"]})
    return training_pairs, records


def _write_dataset(
    output_dir: Path, pairs: dict[str, Any], data: TranslationData, provenance: dict[str, Any]
) -> None:
    """`output_dir`, whole or not at all: each split's pairs (a dataset or (source, target) pairs) and the
    provenance."""
    with atomic_directory(output_dir) as staging:
        for split, rows in pairs.items():
            split_pairs = rows if isinstance(rows, list) else zip(rows["source"], rows["target"], strict=True)
            write_translation_jsonl(
                staging / f"{split}.jsonl", split_pairs, data.source_lang, data.target_lang
            )
        write_json(staging / PROVENANCE_FILE, provenance)


@dataclass(frozen=True)
class Teacher:
    """A loaded teacher: the engine that decodes, the model's digest (`checkpoints.model_digest`) and how the
    log names it."""

    engine: TranslationEngine
    digest: str
    description: str


def _saved_translations(
    teacher: Teacher,
    inputs: Sequence[str],
    translations_dir: Path,
    chunk_size: int,
    options: DecodingOptions,
    runtime: Runtime,
) -> list[str]:
    """`teacher.engine.translate(inputs, options)`, batched as `runtime` batches, a chunk at a time through
    `translation.corpus.translate_corpus` (a stopped run continues after the chunks committed), one
    translation a line in a file of `translations_dir` named by everything the translations depend on;
    translations already there are read, not decoded."""
    job = _translations_job(teacher, inputs, translations_dir, chunk_size, options, runtime.max_tokens)
    if not Path(job.output).is_file():
        broken = next((number for number, text in enumerate(inputs, 1) if "\n" in text), None)
        if broken:  # it would be two lines of the file the chunks are read from
            raise ValueError(f"training sentence {broken} holds a line break: make each sentence one line")
        write_lines_atomic(job.source, inputs)
        logger.info("translating %d sentences with %s", len(inputs), teacher.description)
        # one bar counts the chunks, not one a chunk
        batching = Batching(runtime.max_tokens, show_progress=False)
        translate_chunk = engine_translator(teacher.engine, options, job.settings, batching)
        translate_corpus(translate_chunk, job, runtime.show_progress)
        # a run beside this one, on the same inputs, may have done it
        Path(job.source).unlink(missing_ok=True)
    translations = read_lines(job.output)
    if len(translations) != len(inputs):
        raise ValueError(f"{job.output} holds {len(translations)} translations, not {len(inputs)}: remove it")
    return translations


def _translations_job(
    teacher: Teacher,
    inputs: Sequence[str],
    translations_dir: Path,
    chunk_size: int,
    options: DecodingOptions,
    max_tokens: int,
) -> CorpusJob:
    """`inputs` translated by `teacher` as a corpus job of `translations_dir`: `NAME.sources` into `NAME.txt`,
    where NAME is the digest of what the translations depend on, written out in `NAME.json` for a reader."""
    key = {
        "model": teacher.digest,
        "inputs": hashlib.sha256(json.dumps(list(inputs)).encode()).hexdigest(),
        "chunk_size": chunk_size,
        "engine": teacher.engine.describe(),
        "decoding": describe_decoding(options, max_tokens),
    }
    name = hashlib.sha256(json.dumps(key, sort_keys=True).encode()).hexdigest()[:20]
    if (translations_dir / name).is_dir():  # an earlier version's chunks, chunk-NNNNN.txt in a directory
        raise ValueError(
            f"{translations_dir / name} holds translations saved by an earlier version: delete it to "
            "translate them again"
        )
    if not (translations_dir / f"{name}.json").is_file():  # the first run's words
        write_json(translations_dir / f"{name}.json", {"made_by": teacher.description} | key)
    return CorpusJob(
        str(translations_dir / f"{name}.sources"),
        str(translations_dir / f"{name}.txt"),
        CorpusSettings(chunk_lines=chunk_size),
        {"model": teacher.digest, "decoding": describe_decoding(options, max_tokens, engine=key["engine"])},
    )
