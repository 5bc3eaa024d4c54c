"""The service's batch policy: when the sentences waiting go to a worker as a batch, and which it takes.

Pure functions of the queue as a worker finds it (`QueueState`) and the clock: the worker threads that run
the engine (batching.py) call them under their lock and do what they say. A group of sentences (those of one
decoding option) is due when it fills the token budget, when it holds at least as many sentences as are still
to come back from the clients answered so far (`in_transit`; not with `fixed_wait`), or at the latest
`max_wait_ms` after its oldest sentence arrived or a worker was last busy, whichever is later. A batch is cut
as evaluation cuts them (`TokenBatchSampler`), the one holding the group's oldest sentence; a job goes ahead
of the batches due unless one holds a sentence that came before it.
"""

from __future__ import annotations

from collections.abc import Hashable, Mapping, Sequence
from dataclasses import dataclass
from typing import Protocol

from hf_vanilla.data.batches import TokenBatchSampler
from hf_vanilla.model.decoding import DEFAULT_MAX_TOKENS


@dataclass(frozen=True)
class BatchingSettings:
    """How sentences are batched: source tokens a batch (sentences * longest source: 1 sends each sentence
    alone), how long the oldest sentence may wait for others, how many sentences may wait at all (more are
    refused at once), and whether a batch always waits `max_wait_ms` (`fixed_wait`) rather than going once the
    clients just answered have sent again."""

    max_tokens: int = DEFAULT_MAX_TOKENS
    max_wait_ms: float = 10.0
    max_queued_sentences: int = 1024
    fixed_wait: bool = False


class Waiting(Protocol):
    """A sentence in the queue, as the policy sees it."""

    arrived: float  # time.monotonic()

    @property
    def tokens(self) -> int: ...


@dataclass(frozen=True)
class QueueState:
    """The queue as a worker finds it: the sentences waiting, by their decoding options, each group in order
    of arrival and none empty; when the oldest job arrived (None: no job waits); when a worker last finished a
    batch; the sentences answered whose clients have not sent as many since (None: none answered yet); and
    whether the service is stopping (then everything waiting goes)."""

    groups: Mapping[Hashable, Sequence[Waiting]]
    oldest_job_arrived: float | None
    free_since: float
    in_transit: int | None
    stopping: bool = False


@dataclass(frozen=True)
class TakeJob:
    """The oldest job goes now."""


@dataclass(frozen=True)
class TakeBatch:
    """The sentences at `indexes` of the group waiting with `options` go now, as one batch."""

    options: Hashable
    indexes: tuple[int, ...]


def next_work(state: QueueState, settings: BatchingSettings, now: float) -> TakeJob | TakeBatch | None:
    """What a worker takes at `now`; None: nothing is due yet."""
    due = [(options, group) for options, group in state.groups.items() if is_due(group, state, settings, now)]
    # A job goes ahead of the batches due unless one holds a sentence that came before it.
    job_first = state.oldest_job_arrived is not None
    if job_first and all(group[0].arrived >= state.oldest_job_arrived for _, group in due):
        return TakeJob()
    if due:
        options, group = due[0]
        lengths = [sentence.tokens for sentence in group]
        return TakeBatch(options, batch_with_oldest(lengths, settings.max_tokens))
    return None


def is_due(group: Sequence[Waiting], state: QueueState, settings: BatchingSettings, now: float) -> bool:
    """Stopping, as many waiting as are still to come back from the clients answered, waited long enough, or
    more than one batch's worth waiting."""
    enough = not settings.fixed_wait and state.in_transit is not None and len(group) >= state.in_transit
    if state.stopping or enough or now >= due_at(group, state.free_since, settings):
        return True
    return len(group) * max(sentence.tokens for sentence in group) > settings.max_tokens


def due_at(group: Sequence[Waiting], free_since: float, settings: BatchingSettings) -> float:
    """When the group's batch goes at the latest: `max_wait_ms` after its oldest sentence came or a worker was
    last busy."""
    return max(group[0].arrived, free_since) + settings.max_wait_ms / 1000


def seconds_to_next_due(state: QueueState, settings: BatchingSettings, now: float) -> float | None:
    """Until the first group is due (None: nothing waits, sleep until notified)."""
    due = [due_at(group, state.free_since, settings) for group in state.groups.values()]
    return max(0.0, min(due) - now) if due else None


def batch_with_oldest(lengths: Sequence[int], max_tokens: int) -> tuple[int, ...]:
    """The indexes of the batch of `TokenBatchSampler` (sorted by length, sentences * longest within
    `max_tokens`, a longer sentence alone) that holds the oldest sentence, the first of `lengths`."""
    batches = TokenBatchSampler(lengths, max_tokens, shuffle=False)
    return next(tuple(batch) for batch in batches if 0 in batch)


def in_transit_after_arrival(in_transit: int | None, sentences: int) -> int | None:
    """`in_transit` once `sentences` more have come from the clients."""
    return None if in_transit is None else max(0, in_transit - sentences)


def in_transit_after_answer(in_transit: int | None, sentences: int) -> int:
    """`in_transit` once a batch of `sentences` has been answered."""
    return (in_transit or 0) + sentences
