"""Parallel text: load a split, clean it, tokenize it, batch it by tokens (paper section 5.1)."""

from __future__ import annotations

import bisect
import copy
import json
import logging
from collections import Counter
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from itertools import chain, islice
from pathlib import Path

import datasets
import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import torch
from datasets.exceptions import DatasetGenerationError
from transformers import PreTrainedTokenizerBase

from hf_vanilla.model.decoding import reverse_words
from hf_vanilla.model.modeling_vanilla import shift_tokens_right

logger = logging.getLogger(__name__)

TRANSLATION_COLUMN = "translation"


def _load_dataset_quietly(dataset: str, config_name: str | None) -> datasets.DatasetDict:
    """`datasets.load_dataset`, without huggingface_hub's warning that a local copy's README.md has no Hub
    metadata block (datasets reads it as a dataset card; nothing is wrong with the data)."""
    card_logger = logging.getLogger("huggingface_hub.repocard")
    level = card_logger.level
    card_logger.setLevel(logging.ERROR)
    try:
        return datasets.load_dataset(dataset, config_name)
    finally:
        card_logger.setLevel(level)


def load_translation_split(
    dataset: str, source_lang: str, target_lang: str, split: str, config_name: str | None = None
) -> datasets.Dataset:
    """One split of a Hub dataset or local path as string columns `source` and `target`.

    Accepts both Hub layouts: a `translation` dict column ({"en": ..., "de": ...}) and one column
    per language. A local JSON-lines file that cannot be read (a line that is not JSON or not UTF-8, or lacks
    a language) is a ValueError naming the file and line.
    """
    if source_lang == target_lang:
        raise ValueError(f"Source and target language are both {source_lang!r}")
    try:
        splits = _load_dataset_quietly(dataset, config_name)
    except (FileNotFoundError, ConnectionError) as err:
        raise FileNotFoundError(
            f"dataset {dataset!r} (config {config_name!r}) is no local path and could not be loaded from the Hub "
            f"({err}); check the name and your connection, or give a local copy instead (train.py's --dataset PATH, "
            "the quickstart's MULTI30K=PATH: a folder of split files with a `translation` column or one column "
            "per language)"
        ) from err
    except (ValueError, DatasetGenerationError) as err:
        if str(err).startswith("BuilderConfig"):  # "BuilderConfig 'xx' not found. Available: [...]"
            raise ValueError(
                f"dataset {dataset!r} has no config {config_name!r} ({err}); pass one of those as the dataset config"
            ) from err
        # datasets names neither the file nor the line (UnicodeDecodeError is a ValueError too).
        raise ValueError(
            _first_unreadable_line(dataset, config_name, (source_lang, target_lang)) or str(err)
        ) from err
    if split not in splits:
        raise ValueError(f"Split {split!r} not in dataset {dataset!r}; available splits: {sorted(splits)}")
    pairs = splits[split]
    language_columns = _language_columns(pairs)
    # One line without a language makes datasets read the whole `translation` column as untyped JSON.
    unreadable = not language_columns and _first_unreadable_line(dataset, config_name, (source_lang, target_lang))
    if unreadable:
        raise ValueError(unreadable)
    for lang in (source_lang, target_lang):
        if lang not in language_columns:
            raise ValueError(
                f"Language {lang!r} not in dataset {dataset!r}; available languages: {sorted(language_columns)}"
            )
    pairs = (
        pairs.flatten()
        .select_columns([language_columns[source_lang], language_columns[target_lang]])
        .rename_columns({language_columns[source_lang]: "source", language_columns[target_lang]: "target"})
    )
    try:
        # Arrow takes bytes that are not UTF-8 into a text column; they would fail only when first read.
        pairs.data.table.validate(full=True)
    except pa.ArrowInvalid as err:
        raise ValueError(
            _first_unreadable_line(dataset, config_name, (source_lang, target_lang))
            or f"split {split!r} of dataset {dataset!r}: {err}"
        ) from err
    return pairs


def _first_unreadable_line(dataset: str, config_name: str | None, languages: Sequence[str]) -> str | None:
    """The first line of a local dataset's JSON-lines files that is no UTF-8 JSON object with a text for each
    of `languages`, as "FILE line N ...", or None when there is none (or the dataset is no local JSON lines)."""
    if not Path(dataset).is_dir():
        return None
    builder = datasets.load_dataset_builder(dataset, config_name)
    if builder.name != "json":
        return None
    for path in chain.from_iterable(builder.config.data_files.values()):
        if Path(path).suffix in (".json", ".jsonl") and not _holds_json_array(path):
            with open(path, "rb") as lines:
                for number, line in enumerate(lines, 1):
                    problem = _line_problem(line, languages)
                    if problem:
                        return f"{path} line {number} {problem}"
    return None


def _holds_json_array(path: str) -> bool:
    """Whether a .json file is one JSON array rather than JSON lines."""
    with open(path, "rb") as file:
        return file.read(4096).lstrip().startswith(b"[")


def _line_problem(line: bytes, languages: Sequence[str]) -> str:
    """Why a JSON line gives no pair of `languages` texts ("" when it does, or when it is blank)."""
    if not line.strip():
        return ""
    try:
        row = json.loads(line.decode("utf-8").strip())
    except UnicodeDecodeError as err:
        return f"is not UTF-8 (byte {line[err.start]:#04x} at position {err.start})"
    except json.JSONDecodeError as err:
        return f"is not valid JSON ({err.msg}: column {err.colno})"
    if not isinstance(row, dict):
        return "is not a JSON object"
    texts = row.get(TRANSLATION_COLUMN, row)
    missing = [lang for lang in languages if not isinstance(texts, dict) or lang not in texts]
    return f"has no {missing[0]!r} text" if missing else ""


def _language_columns(pairs: datasets.Dataset) -> dict[str, str]:
    """Map each language code to its column in `pairs.flatten()`."""
    if TRANSLATION_COLUMN in pairs.column_names:
        prefix = f"{TRANSLATION_COLUMN}."
        return {
            name.removeprefix(prefix): name
            for name in pairs.flatten().column_names
            if name.startswith(prefix)
        }
    return {
        name: name
        for name, feature in pairs.features.items()
        if isinstance(feature, datasets.Value) and feature.dtype in ("string", "large_string")
    }


def clean_translation_pairs(
    pairs: datasets.Dataset,
    max_words: int = 80,
    max_length_ratio: float = 9.0,
    num_proc: int | None = None,
    name: str = "pairs",
) -> tuple[datasets.Dataset, Counter]:
    """Moses clean-corpus-n for the data a training run reads: normalize white space, drop empty, long or
    lopsided pairs.

    A pair is dropped when either side is empty, either side has more than `max_words` words, or one
    side has more than `max_length_ratio` times the words of the other. Returns the kept pairs and the
    number dropped for each reason ("empty", "too_long", "length_ratio"), which is also logged, the pairs
    called `name`. Test splits must not be cleaned: their references have to stay complete.
    """

    def normalize_and_judge(batch):
        sources = [" ".join(text.split()) for text in batch["source"]]
        targets = [" ".join(text.split()) for text in batch["target"]]
        reasons = [
            _drop_reason(len(source.split()), len(target.split()), max_words, max_length_ratio)
            for source, target in zip(sources, targets, strict=True)
        ]
        return {"source": sources, "target": targets, "drop_reason": reasons}

    judged = pairs.map(normalize_and_judge, batched=True, num_proc=num_proc, desc="Cleaning pairs")
    dropped = Counter(reason for reason in judged["drop_reason"] if reason)
    kept = judged.filter(
        lambda reasons: [not reason for reason in reasons],
        input_columns="drop_reason",
        batched=True,
        num_proc=num_proc,
    )
    logger.info(
        "Cleaning kept %d of %d %s; dropped %d empty, %d over %d words, %d with length ratio over %g",
        len(kept),
        len(pairs),
        name,
        dropped["empty"],
        dropped["too_long"],
        max_words,
        dropped["length_ratio"],
        max_length_ratio,
    )
    return kept.remove_columns("drop_reason"), dropped


def _drop_reason(source_words: int, target_words: int, max_words: int, max_length_ratio: float) -> str:
    """Why a pair with these word counts is dropped; "" when it is kept."""
    if source_words == 0 or target_words == 0:
        return "empty"
    if max(source_words, target_words) > max_words:
        return "too_long"
    if max(source_words, target_words) > max_length_ratio * min(source_words, target_words):
        return "length_ratio"
    return ""


def reverse_target_words(pairs: datasets.Dataset, num_proc: int | None = None) -> datasets.Dataset:
    """`pairs` with each target's words in reverse order: the data of a right-to-left model, which writes its
    translations last word first (`TrainingConfig.right_to_left`; `hf_vanilla.research.reranking` scores with it)."""
    return pairs.map(
        lambda batch: {"target": [reverse_words(text) for text in batch["target"]]},
        batched=True,
        num_proc=num_proc,
        desc="Reversing target words",
    )


def tokenize_pairs(
    pairs: datasets.Dataset,
    tokenizer: PreTrainedTokenizerBase,
    max_length: int | None = None,
    num_proc: int | None = None,
) -> datasets.Dataset:
    """Columns `input_ids` (source) and `labels` (target), truncated only when `max_length` is given."""

    def tokenize(batch):
        return tokenizer(
            text=batch["source"],
            text_target=batch["target"],
            truncation=max_length is not None,
            max_length=max_length,
            return_attention_mask=False,  # the collator makes it for the padded batch
        )

    return pairs.map(
        tokenize, batched=True, num_proc=num_proc, remove_columns=pairs.column_names, desc="Tokenizing"
    )


def example_lengths(tokenized: datasets.Dataset) -> np.ndarray:
    """Array (N, 2) of source and target lengths in tokens, read from the Arrow columns without decoding."""
    table = tokenized.with_format("arrow", columns=["input_ids", "labels"])[:]
    return np.stack(
        [pc.list_value_length(table[column]).to_numpy() for column in ("input_ids", "labels")],
        axis=1,
    )


class TokenBatchSampler:
    """Batches of similar-length examples whose padded size stays within `max_tokens` (paper section 5.1).

    Each epoch the examples are sorted by length (the longer of source and target, then source, then
    target) with ties broken at random, cut into batches, and the batch order is shuffled, as fairseq
    does. The full sort pads least: on Multi30k train with max_tokens=4096, 95.8% of the padded tokens
    are real, against 93.1% when sorting by the longer side alone. A sorted length sequence is the same
    whatever the tie order, so the batch sizes (and `len()`) never change between epochs while the
    examples inside the batches do.

    A batch holds at most `max_tokens // L` examples, L being the longest source or target in it, so
    `batch size * longest source <= max_tokens` and likewise for targets. An example longer than
    `max_tokens` gets a batch of its own rather than being dropped silently.

    For `num_replicas` processes, the largest batches are halved until their count divides
    `num_replicas`; rank r takes every num_replicas-th batch of the shuffled order, so ranks get
    disjoint batches, the same number of them, and together every example exactly once an epoch.
    Call `set_epoch(epoch)` before each epoch; the same seed and epoch give the same batches.
    """

    def __init__(
        self,
        lengths: Sequence[int] | Sequence[Sequence[int]] | np.ndarray,
        max_tokens: int,
        shuffle: bool = True,
        seed: int = 0,
        num_replicas: int = 1,
        rank: int = 0,
    ):
        if not 0 <= rank < num_replicas:
            raise ValueError(f"rank {rank} is outside [0, {num_replicas})")
        lengths = np.asarray(lengths).reshape(len(lengths), -1)
        longest = lengths.max(axis=1)
        # lexsort sorts by its last key first: the longest side, then source, then target.
        self._sort_keys = (*lengths.T[::-1], longest)
        self.max_tokens = max_tokens
        self.shuffle = shuffle
        self.seed = seed
        self.num_replicas = num_replicas
        self.rank = rank
        self.epoch = 0
        self._batch_starts = self._divisible_batch_starts(np.sort(longest).tolist())
        oversized = int((longest > max_tokens).sum())
        if oversized:
            logger.warning(
                "%d examples are longer than max_tokens=%d; each gets a batch of its own",
                oversized,
                max_tokens,
            )

    def _divisible_batch_starts(self, sorted_longest: list[int]) -> list[int]:
        """Start positions (in sorted order) of the batches, their count a multiple of num_replicas."""
        starts = [0]
        for position, longest in enumerate(sorted_longest):
            if position > starts[-1] and (position - starts[-1] + 1) * longest > self.max_tokens:
                starts.append(position)
        bounds = [*starts, len(sorted_longest)]
        while (len(bounds) - 1) % self.num_replicas:
            sizes = np.diff(bounds)
            largest = int(sizes.argmax())
            if sizes[largest] < 2:
                raise ValueError(f"{len(sorted_longest)} examples cannot fill {self.num_replicas} replicas")
            bisect.insort(bounds, bounds[largest] + int(sizes[largest]) // 2)
        return bounds[:-1]

    def set_epoch(self, epoch: int) -> None:
        self.epoch = epoch

    def __len__(self) -> int:
        return len(self._batch_starts) // self.num_replicas

    def __iter__(self) -> Iterator[list[int]]:
        rng = np.random.default_rng([self.seed, self.epoch])
        if self.shuffle:
            tie_breaker = rng.permutation(len(self._sort_keys[-1]))
            order = tie_breaker[np.lexsort([key[tie_breaker] for key in self._sort_keys])]
        else:
            order = np.lexsort(self._sort_keys)
        batches = np.split(order, self._batch_starts[1:])
        batch_order = rng.permutation(len(batches)) if self.shuffle else np.arange(len(batches))
        for index in batch_order[self.rank :: self.num_replicas]:
            yield batches[index].tolist()


def shape_bucket_lengths(longest: int) -> list[int]:
    """The padded lengths of the shape buckets up to `longest`: every 8 tokens to 64, then 1.5 times apart
    (rounded to 8), so a run has a handful of shapes and no example is padded by more than half again."""
    buckets = [8]
    while buckets[-1] < longest:
        step = buckets[-1] * 3 // 2 if buckets[-1] >= 64 else buckets[-1] + 8
        buckets.append(-(-step // 8) * 8)
    return buckets


class ShapeBucketBatchSampler:
    """TokenBatchSampler's contract (every example once an epoch, disjoint equal shares per replica, `set_epoch`)
    with batches of a few fixed shapes, for a GPU whose update costs the same whatever its size and which then
    sees a few repeated shapes.

    Each example goes to the smallest bucket (`shape_bucket_lengths`) holding its longer side; a batch of
    bucket L holds `rows_for(L)` examples of that bucket, which `BatchCollator` pads to exactly that many
    rows of L tokens. The last batch of a bucket, and the empty batches that make the count divide the
    replicas, are filled with rows that carry no label and so stay out of the loss.
    """

    def __init__(
        self, lengths, max_tokens: int, shuffle: bool = True, seed: int = 0, num_replicas: int = 1, rank: int = 0
    ):
        if not 0 <= rank < num_replicas:
            raise ValueError(f"rank {rank} is outside [0, {num_replicas})")
        longest = np.asarray(lengths).reshape(len(lengths), -1).max(axis=1)
        self.bucket_lengths = shape_bucket_lengths(int(longest.max()))
        self.example_buckets = np.searchsorted(self.bucket_lengths, longest)
        self.max_tokens = max_tokens
        self.shuffle, self.seed, self.num_replicas, self.rank, self.epoch = shuffle, seed, num_replicas, rank, 0
        batches = sum(-(-count // self.rows_for(length)) for length, count in self._bucket_sizes())
        self._batch_count = -(-batches // num_replicas) * num_replicas

    def rows_for(self, bucket_length: int) -> int:
        return max(1, self.max_tokens // bucket_length)

    def bucket_for(self, longest: int) -> int:
        """The padded length of the bucket an example (or batch) whose longer side is `longest` belongs to."""
        return self.bucket_lengths[int(np.searchsorted(self.bucket_lengths, longest))]

    def _bucket_sizes(self) -> list[tuple[int, int]]:
        counts = np.bincount(self.example_buckets, minlength=len(self.bucket_lengths))
        return [(length, int(count)) for length, count in zip(self.bucket_lengths, counts, strict=True) if count]

    @property
    def shapes(self) -> list[tuple[int, int]]:
        """The (rows, length) of every batch shape an epoch can have."""
        return [(self.rows_for(length), length) for length, _ in self._bucket_sizes()]

    def set_epoch(self, epoch: int) -> None:
        self.epoch = epoch

    def __len__(self) -> int:
        return self._batch_count // self.num_replicas

    def __iter__(self) -> Iterator[list[int]]:
        rng = np.random.default_rng([self.seed, self.epoch])
        batches = []
        for bucket, length in enumerate(self.bucket_lengths):
            members = np.flatnonzero(self.example_buckets == bucket)
            if self.shuffle:
                members = rng.permutation(members)
            rows = self.rows_for(length)
            batches += [members[start : start + rows].tolist() for start in range(0, len(members), rows)]
        batches += [[] for _ in range(self._batch_count - len(batches))]
        batch_order = rng.permutation(len(batches)) if self.shuffle else np.arange(len(batches))
        for index in batch_order[self.rank :: self.num_replicas]:
            yield batches[index]


class TokenizedRows(torch.utils.data.Dataset):
    """A tokenized dataset's `input_ids` and `labels` for a DataLoader with a batch sampler: each batch is read
    in one go (`__getitems__`) as an Arrow table, which `BatchCollator` pads without a Python list per row."""

    def __init__(self, tokenized: datasets.Dataset):
        self.rows = tokenized.with_format("arrow", columns=["input_ids", "labels"])

    def __len__(self) -> int:
        return len(self.rows)

    def __getitems__(self, indices: list[int]) -> pa.Table:
        return self.rows[indices]


@dataclass(frozen=True)
class BatchCollator:
    """Pads a batch of `TokenizedRows` into int64 tensors `input_ids`, `attention_mask` and `labels` (padded with
    -100, which the loss ignores), and `decoder_input_ids` (the labels shifted right) when
    `decoder_start_token_id` is given: the batch transformers' DataCollatorForSeq2Seq makes, padded with numpy.

    Source and target are padded to their longest example; with `shape_sampler`, both to the bucket length L of
    the batch and to `rows_for(L)` rows, the rows beyond the examples filler (one end-of-sentence source token,
    no label), so that every batch has one of the sampler's few shapes.
    """

    pad_token_id: int
    eos_token_id: int
    decoder_start_token_id: int | None = None
    shape_sampler: ShapeBucketBatchSampler | None = None

    def __call__(self, rows: pa.Table) -> dict[str, torch.Tensor]:
        source_lengths, target_lengths = (
            pc.list_value_length(rows[column]).to_numpy() for column in ("input_ids", "labels")
        )
        if self.shape_sampler is None:
            batch_rows, source_length, target_length = len(rows), source_lengths.max(), target_lengths.max()
        else:
            longest = max(source_lengths.max(initial=1), target_lengths.max(initial=1))
            source_length = target_length = self.shape_sampler.bucket_for(longest)
            batch_rows = self.shape_sampler.rows_for(source_length)
        input_ids, attention_mask = _padded(
            rows["input_ids"], source_lengths, batch_rows, source_length, self.pad_token_id
        )
        labels, _ = _padded(rows["labels"], target_lengths, batch_rows, target_length, -100)
        input_ids[len(rows) :, 0] = self.eos_token_id
        attention_mask[len(rows) :, 0] = True
        batch = {
            "input_ids": torch.from_numpy(input_ids),
            "attention_mask": torch.from_numpy(attention_mask.astype(np.int64)),
            "labels": torch.from_numpy(labels),
        }
        if self.decoder_start_token_id is not None:
            batch["decoder_input_ids"] = shift_tokens_right(
                batch["labels"], self.pad_token_id, self.decoder_start_token_id
            )
        return batch


def _padded(
    column: pa.ChunkedArray, lengths: np.ndarray, rows: int, length: int, pad: int
) -> tuple[np.ndarray, np.ndarray]:
    """(`rows` x `length` int64 array of the lists in `column`, right-padded with `pad`; mask of the real tokens)."""
    real = np.zeros((rows, length), dtype=bool)
    real[: len(lengths)] = np.arange(length) < lengths[:, None]
    padded = np.full((rows, length), pad, dtype=np.int64)
    padded[real] = pc.list_flatten(column).to_numpy()
    return padded, real


def make_collator(
    tokenizer: PreTrainedTokenizerBase, model=None, shape_sampler: ShapeBucketBatchSampler | None = None
) -> BatchCollator:
    """The BatchCollator of `tokenizer`'s padding; with `model`, it also makes the decoder inputs the model's
    `prepare_decoder_input_ids_from_labels` would; with `shape_sampler`, it pads to the sampler's shapes."""
    return BatchCollator(
        tokenizer.pad_token_id,
        tokenizer.eos_token_id,
        decoder_start_token_id=None if model is None else model.config.decoder_start_token_id,
        shape_sampler=shape_sampler,
    )


def padding_efficiency(batch_sampler, lengths: Sequence[Sequence[int]] | np.ndarray) -> float:
    """Real tokens / padded tokens over one pass of `batch_sampler`, source and target summed."""
    lengths = np.asarray(lengths).reshape(len(lengths), -1)
    real = padded = 0
    for batch in batch_sampler:
        batch_lengths = lengths[batch]
        real += int(batch_lengths.sum())
        padded += len(batch) * int(batch_lengths.max(axis=0).sum())
    return real / padded


class UpdateBatchSampler:
    """This process's token batches, `accumulation_steps` in a row for each update.

    The global batch of an update is `num_processes * accumulation_steps` consecutive batches of one
    TokenBatchSampler split into that many replicas; process p takes replicas p*A .. p*A + A-1. So the
    batches of an update are the same whichever way they are split: 2 processes x 1 step and 1 process x
    2 steps train on the same batches. `set_epoch(epoch, first_update)` starts an epoch part-way (resume).
    `shape_buckets`: batches of a few fixed shapes (ShapeBucketBatchSampler), for a GPU.
    """

    def __init__(
        self,
        lengths,
        max_tokens: int,
        accumulation_steps: int,
        num_processes: int,
        process_index: int,
        seed: int,
        shape_buckets: bool = False,
    ):
        replicas = num_processes * accumulation_steps
        try:
            first = (ShapeBucketBatchSampler if shape_buckets else TokenBatchSampler)(
                lengths,
                max_tokens,
                shuffle=True,
                seed=seed,
                num_replicas=replicas,
                rank=process_index * accumulation_steps,
            )
        except ValueError as err:
            raise ValueError(f"training data too small for {replicas} batches per update: {err}") from err
        # The replicas differ only in rank: share the sorted lengths rather than sort again.
        self.samplers = [first]
        for slot in range(1, accumulation_steps):
            self.samplers.append(copy.copy(first))
            self.samplers[-1].rank = first.rank + slot
        self.first_update = 0

    @property
    def updates_per_epoch(self) -> int:
        return len(self.samplers[0])

    @property
    def shape_buckets(self) -> bool:
        return isinstance(self.samplers[0], ShapeBucketBatchSampler)

    def set_epoch(self, epoch: int, first_update: int = 0) -> None:
        for sampler in self.samplers:
            sampler.set_epoch(epoch)
        self.first_update = first_update

    def __len__(self) -> int:
        return (self.updates_per_epoch - self.first_update) * len(self.samplers)

    def __iter__(self):
        return chain.from_iterable(islice(zip(*self.samplers, strict=True), self.first_update, None))
