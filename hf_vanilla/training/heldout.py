"""Validation and test pairs held out of the training data when the dataset has none of its own.

A user with one corpus needs both: validation to choose checkpoints on (section 6.1 chose on the development
set) and a test set that no update saw. The pairs are drawn by seed (the same run, the same pairs), never
overlap what trains (a training pair whose source is held out, a duplicate in the corpus, is dropped too), and
are written into the run directory as `heldout/{split}.jsonl` in the Hub `translation` layout, which selection
and evaluation read (`--dataset RUN/heldout`).
"""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence
from pathlib import Path

import datasets

from hf_vanilla.data.corpus import write_translation_jsonl
from hf_vanilla.files import atomic_directory
from hf_vanilla.training.settings import TrainingError

logger = logging.getLogger(__name__)

HELDOUT_DIR = "heldout"
DEFAULT_HELDOUT_PAIRS = 1000


def heldout_size(setting: float | None, pairs: int) -> int:
    """Pairs to hold out for one split: `setting` pairs (1 or more) or that share of `pairs` (below 1); None:
    1,000 or a tenth of the pairs, whichever is fewer."""
    if setting is None:
        return min(DEFAULT_HELDOUT_PAIRS, pairs // 10)
    return round(setting * pairs) if setting < 1 else int(setting)


def hold_out(
    pairs: datasets.Dataset, splits: Sequence[str], setting: float | None, seed: int
) -> tuple[datasets.Dataset, dict[str, datasets.Dataset]]:
    """(the pairs left to train on, {split: its held-out pairs}) for each of `splits`,
    `heldout_size` pairs each."""
    size = heldout_size(setting, len(pairs))
    if size < 1 or size * len(splits) >= len(pairs):
        raise TrainingError(
            f"cannot hold out {size} pairs for each of {', '.join(splits)} from {len(pairs)} training pairs: "
            "set holdout to a count or share that leaves pairs to train on, "
            "or give those splits as files (SPLIT=FILE)"
        )
    parts = pairs.train_test_split(test_size=size * len(splits), shuffle=True, seed=seed)
    held, rest = parts["test"], parts["train"]
    held_sources = set(held["source"])
    kept = rest.filter(
        lambda sources: [source not in held_sources for source in sources],
        input_columns="source",
        batched=True,
        desc="Dropping training pairs whose source is held out",
    )
    heldout = {
        split: held.select(range(index * size, (index + 1) * size)) for index, split in enumerate(splits)
    }
    logger.info(
        "Held out %d pairs each for %s (seed %d) from %d training pairs; "
        "%d more dropped as repeats of held-out sources; %d left to train on",
        size,
        " and ".join(splits),
        seed,
        len(pairs),
        len(rest) - len(kept),
        len(kept),
    )
    return kept, heldout


def write_heldout(
    run_dir: str | Path, heldout: Mapping[str, datasets.Dataset], source_lang: str, target_lang: str
) -> Path:
    """`heldout/{split}.jsonl` in `run_dir` (one directory, written whole),
    in the Hub `translation` layout."""
    with atomic_directory(Path(run_dir) / HELDOUT_DIR) as staging:
        for split, pairs in heldout.items():
            split_pairs = zip(pairs["source"], pairs["target"], strict=True)
            write_translation_jsonl(staging / f"{split}.jsonl", split_pairs, source_lang, target_lang)
    return Path(run_dir) / HELDOUT_DIR
