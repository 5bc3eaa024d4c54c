"""Data preparation as a step of its own: the tokenizer,
then the cleaned and tokenized corpus in datasets' cache.

`prepare_training_data` does what a training run does before its first update (`hf_vanilla.training.train.
load_inputs`), with the same config and so the same cache fingerprints: a later run (every process of it, on
every node that shares the cache) reads the prepared data instead of preparing it again. On several nodes each
node's first process prepares while the node's other processes wait (accelerate's `local_main_process_first`).
"""

from __future__ import annotations

import dataclasses
import logging
import time
from pathlib import Path
from typing import Any

from accelerate import PartialState

from hf_vanilla.checkpoints.tokenizer_directory import describe_tokenizer_training, train_tokenizer_on_pairs
from hf_vanilla.data.batches import example_lengths
from hf_vanilla.training.settings import TrainingConfig, TrainingError
from hf_vanilla.training.train import load_inputs, pairs_source, training_pairs, with_corpus_recipe

logger = logging.getLogger(__name__)

# The TrainingConfig keys that decide what is prepared, and so scripts/prepare_data.py's flags: the data and
# its cleaning, the tokenizer, the model's shape (its positions bound the pairs kept) and the seed that draws
# held-out pairs. Their values must be the training run's for it to find the prepared cache.
PREPARATION_SETTINGS = frozenset(
    {field.name for field in dataclasses.fields(TrainingConfig) if field.metadata["group"] == "data"}
    | {"tokenizer", "tokenizer_vocab_size", "init_from", "model_preset", "model_overrides", "seed"}
)


def prepare_training_data(
    config: TrainingConfig, tokenizer_sample_pairs: int | None = None, state: PartialState | None = None
) -> dict[str, Any]:
    """Train the tokenizer if `config.tokenizer` is missing (on a random `tokenizer_sample_pairs` pairs when
    given), then clean and tokenize the training and validation splits into datasets' cache, as a training run
    with `config` would. Returns a report: the tokenizer's training (when it was trained), pairs and tokens
    kept, the cache files, the seconds. Raises TrainingError in one line for bad input (a language or config
    name the dataset lacks, a split empty after cleaning); the cache and tokenizer are never half-written
    (datasets and `save_tokenizer` write into place by renaming)."""
    if not (config.tokenizer or config.init_from):
        raise TrainingError("tokenizer is required: the directory to load it from, or to train it into")
    state = state or PartialState()
    started = time.perf_counter()
    # A tokenizer_vocab_size left auto is known before the tokenizer is trained.
    config = with_corpus_recipe(config)
    report: dict[str, Any] = {"dataset": config.dataset, "dataset_config": config.dataset_config}
    if not config.init_from and not Path(config.tokenizer).exists():
        with state.main_process_first():
            if state.is_main_process:
                training = train_tokenizer_on_pairs(
                    training_pairs(config)[0],
                    config.tokenizer,
                    config.tokenizer_vocab_size,
                    pairs_source(config),
                    tokenizer_sample_pairs,
                )
                logger.info(describe_tokenizer_training(training))
                report["tokenizer_training"] = training
    inputs = load_inputs(config, state)
    train_data = inputs.train_data
    source_tokens, target_tokens = (int(total) for total in example_lengths(train_data).sum(axis=0))
    cache_files = train_data.cache_files
    cache_directory = str(Path(cache_files[0]["filename"]).parent) if cache_files else None
    report.update(
        tokenizer=str(config.tokenizer or config.init_from),
        train_pairs=len(train_data),
        train_source_tokens=source_tokens,
        train_target_tokens=target_tokens,
        validation_pairs=0 if inputs.validation is None else len(inputs.validation.sources),
        heldout_pairs={split: len(pairs) for split, pairs in inputs.heldout.items()},
        cache_files=sorted({Path(file["filename"]).name for file in train_data.cache_files}),
        cache_directory=cache_directory,
        seconds=round(time.perf_counter() - started, 1),
    )
    return report
