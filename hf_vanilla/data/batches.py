"""Parallel text: clean and tokenize it, batch it by tokens
(paper section 5.1). `hf_vanilla.data.corpus` loads it."""

from __future__ import annotations

import bisect
import copy
import logging
from collections import Counter
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from itertools import chain, islice

import datasets
import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import torch
from transformers import PreTrainedTokenizerBase

from hf_vanilla.model.decoding import reverse_words
from hf_vanilla.model.modeling_vanilla import shift_tokens_right

logger = logging.getLogger(__name__)

@dataclass(frozen=True)
class CleaningRules:
    """Moses clean-corpus-n's rules for the pairs a run learns and validates on, counted in the tokenizer's
    tokens (as fairseq's prepare-wmt14en2de.sh and Marian clean after segmentation), so that they hold for
    scripts written without spaces, where a whole sentence is one "word": a pair is dropped when either side
    is empty, either side has more than `max_tokens` tokens, or one side more than `max_length_ratio` times
    the tokens of the other."""

    max_tokens: int = 250
    max_length_ratio: float = 9.0


def clean_and_tokenize(
    pairs: datasets.Dataset,
    tokenizer: PreTrainedTokenizerBase,
    rules: CleaningRules,
    name: str = "pairs",
    reverse_target: bool = False,
    num_proc: int | None = None,
    keep_text: bool = True,
) -> tuple[datasets.Dataset, Counter]:
    """`pairs` with white space normalized, tokenized into `input_ids` (source) and `labels` (target, its
    words reversed with `reverse_target`: a right-to-left model's), and cleaned by `rules`. `source` and
    `target` stay, in reading order, unless `keep_text` is False (the training split, whose text nothing reads
    again: its cache then holds token ids alone). Returns the kept pairs and the number dropped for each
    reason ("empty", "too_long", "length_ratio"), which is also logged, the pairs called `name`. Test splits
    are not cleaned: their references have to stay complete."""

    def normalize_tokenize_judge(batch):
        sources = [" ".join(text.split()) for text in batch["source"]]
        targets = [" ".join(text.split()) for text in batch["target"]]
        encoded = tokenizer(
            text=sources,
            text_target=[reverse_words(text) for text in targets] if reverse_target else targets,
            return_attention_mask=False,  # the collator makes it for the padded batch
        )
        reasons = [
            _drop_reason(len(source_ids) - 1, len(target_ids) - 1, rules)  # - 1: `</s>` is no text
            for source_ids, target_ids in zip(encoded["input_ids"], encoded["labels"], strict=True)
        ]
        text = {"source": sources, "target": targets} if keep_text else {}
        return {**text, **encoded, "drop_reason": reasons}

    judged = pairs.map(
        normalize_tokenize_judge,
        batched=True,
        num_proc=num_proc,
        remove_columns=pairs.column_names,
        desc=f"Tokenizing and cleaning {name}",
    )
    dropped = Counter(reason for reason in judged["drop_reason"] if reason)
    kept = judged.filter(
        lambda reasons: [not reason for reason in reasons],
        input_columns="drop_reason",
        batched=True,
        num_proc=num_proc,
    )
    logger.info(
        "Cleaning kept %d of %d %s; dropped %d empty, %d over %d tokens, "
        "%d with length ratio over %g (in tokens)",
        len(kept),
        len(pairs),
        name,
        dropped["empty"],
        dropped["too_long"],
        rules.max_tokens,
        dropped["length_ratio"],
        rules.max_length_ratio,
    )
    # One table again, not the filter's index over the old one: the loader reads batches of rows at a time.
    return kept.remove_columns("drop_reason").flatten_indices(num_proc=num_proc), dropped


def _drop_reason(source_tokens: int, target_tokens: int, rules: CleaningRules) -> str:
    """Why a pair with these token counts is dropped; "" when it is kept."""
    if source_tokens == 0 or target_tokens == 0:
        return "empty"
    if max(source_tokens, target_tokens) > rules.max_tokens:
        return "too_long"
    if max(source_tokens, target_tokens) > rules.max_length_ratio * min(source_tokens, target_tokens):
        return "length_ratio"
    return ""


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
    does; the full sort pads least (measured: docs/training.md, "Batches of tokens"). A sorted length
    sequence is the same whatever the tie order, so the batch sizes (and `len()`) never change between
    epochs while the examples inside the batches do.

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
    """TokenBatchSampler's contract (every example once an epoch, disjoint equal shares per replica,
    `set_epoch`) with batches of a few fixed shapes, for a GPU whose update costs the same whatever its size
    and which then sees a few repeated shapes.

    Each example goes to the smallest bucket (`shape_bucket_lengths`) holding its longer side; a batch of
    bucket L holds `rows_for(L)` examples of that bucket, which `BatchCollator` pads to exactly that many
    rows of L tokens. The last batch of a bucket, and the empty batches that make the count divide the
    replicas, are filled with rows that carry no label and so stay out of the loss.
    """

    def __init__(
        self,
        lengths,
        max_tokens: int,
        shuffle: bool = True,
        seed: int = 0,
        num_replicas: int = 1,
        rank: int = 0,
    ):
        if not 0 <= rank < num_replicas:
            raise ValueError(f"rank {rank} is outside [0, {num_replicas})")
        longest = np.asarray(lengths).reshape(len(lengths), -1).max(axis=1)
        self.bucket_lengths = shape_bucket_lengths(int(longest.max()))
        self.example_buckets = np.searchsorted(self.bucket_lengths, longest)
        self.max_tokens = max_tokens
        self.shuffle, self.seed, self.epoch = shuffle, seed, 0
        self.num_replicas, self.rank = num_replicas, rank
        batches = sum(-(-count // self.rows_for(length)) for length, count in self._bucket_sizes())
        self._batch_count = -(-batches // num_replicas) * num_replicas

    def rows_for(self, bucket_length: int) -> int:
        return max(1, self.max_tokens // bucket_length)

    def bucket_for(self, longest: int) -> int:
        """The padded length of the bucket an example (or batch) whose longer side is `longest` belongs to."""
        return self.bucket_lengths[int(np.searchsorted(self.bucket_lengths, longest))]

    def _bucket_sizes(self) -> list[tuple[int, int]]:
        counts = np.bincount(self.example_buckets, minlength=len(self.bucket_lengths))
        return [
            (length, int(count)) for length, count in zip(self.bucket_lengths, counts, strict=True) if count
        ]

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
    """A tokenized dataset's `input_ids` and `labels` for a DataLoader with a batch sampler: each
    batch is read in one go (`__getitems__`) as an Arrow table, which `BatchCollator` pads without
    a Python list per row."""

    def __init__(self, tokenized: datasets.Dataset):
        self.rows = tokenized.with_format("arrow", columns=["input_ids", "labels"])

    def __len__(self) -> int:
        return len(self.rows)

    def __getitems__(self, indices: list[int]) -> pa.Table:
        return self.rows[indices]


@dataclass(frozen=True)
class BatchCollator:
    """Pads a batch of `TokenizedRows` into int64 tensors `input_ids`, `attention_mask` and `labels` (padded
    with -100, which the loss ignores), and `decoder_input_ids` (the labels shifted right) when
    `decoder_start_token_id` is given: the batch transformers' DataCollatorForSeq2Seq makes, padded with
    numpy.

    Source and target are padded to their longest example; with `shape_sampler`, both to the bucket length L
    of the batch and to `rows_for(L)` rows, the rows beyond the examples filler (one end-of-sentence source
    token, no label), so that every batch has one of the sampler's few shapes.
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
    """(`rows` x `length` int64 array of the lists in `column`, right-padded with `pad`;
    mask of the real tokens)."""
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
