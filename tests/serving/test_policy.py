"""The batch policy (hf_vanilla.serving.policy) alone: queue states in, decisions out; no engine, no
threads."""

from dataclasses import dataclass

import pytest

from hf_vanilla.serving.policy import (
    BatchingSettings,
    QueueState,
    TakeBatch,
    TakeJob,
    batch_with_oldest,
    in_transit_after_answer,
    in_transit_after_arrival,
    next_work,
    seconds_to_next_due,
)

SETTINGS = BatchingSettings(max_tokens=100, max_wait_ms=10.0)


@dataclass
class Sentence:
    tokens: int
    arrived: float


def queue(groups, oldest_job=None, free_since=0.0, in_transit=None, stopping=False) -> QueueState:
    return QueueState(groups, oldest_job, free_since, in_transit, stopping)


def test_nothing_goes_before_the_oldest_sentence_has_waited_max_wait_ms():
    state = queue({"greedy": [Sentence(5, arrived=1.0), Sentence(5, arrived=1.004)]})
    assert next_work(state, SETTINGS, now=1.009) is None
    assert seconds_to_next_due(state, SETTINGS, now=1.004) == pytest.approx(0.006)
    assert next_work(state, SETTINGS, now=1.010) == TakeBatch("greedy", (0, 1))


def test_the_wait_counts_from_when_a_worker_was_last_busy_if_later():
    state = queue({"greedy": [Sentence(5, arrived=1.0)]}, free_since=2.0)
    assert next_work(state, SETTINGS, now=2.009) is None
    assert next_work(state, SETTINGS, now=2.010) == TakeBatch("greedy", (0,))


def test_nothing_waiting_sleeps_until_notified():
    assert next_work(queue({}), SETTINGS, now=5.0) is None
    assert seconds_to_next_due(queue({}), SETTINGS, now=5.0) is None


def test_more_than_a_batchs_worth_goes_at_once_cut_as_evaluation_cuts():
    # 3 sentences * longest 40 > 100 tokens: due; the batch holding the oldest (sorted by length) goes.
    group = [Sentence(40, 0.0), Sentence(10, 0.0), Sentence(38, 0.0)]
    work = next_work(queue({"greedy": group}), SETTINGS, now=0.0)
    assert isinstance(work, TakeBatch) and 0 in work.indexes
    assert len(work.indexes) < len(group)
    assert len(work.indexes) * max(group[index].tokens for index in work.indexes) <= 100
    assert work.indexes == batch_with_oldest([40, 10, 38], 100)


def test_a_batch_goes_once_the_clients_answered_have_sent_again_unless_the_wait_is_fixed():
    group = [Sentence(5, 1.0), Sentence(5, 1.0)]
    assert next_work(queue({"greedy": group}, in_transit=2), SETTINGS, now=1.0) == TakeBatch("greedy", (0, 1))
    assert next_work(queue({"greedy": group}, in_transit=3), SETTINGS, now=1.0) is None
    fixed = BatchingSettings(max_tokens=100, max_wait_ms=10.0, fixed_wait=True)
    assert next_work(queue({"greedy": group}, in_transit=2), fixed, now=1.0) is None
    # Before a first answer nothing is known of the clients: only the clock lets a batch go.
    assert next_work(queue({"greedy": group}, in_transit=None), SETTINGS, now=1.0) is None


def test_stopping_sends_everything_waiting_at_once():
    state = queue({"greedy": [Sentence(5, 1.0)]}, stopping=True)
    assert next_work(state, SETTINGS, now=1.0) == TakeBatch("greedy", (0,))


def test_a_job_goes_ahead_of_batches_whose_sentences_all_came_after_it():
    later, earlier = [Sentence(5, 2.0)], [Sentence(5, 0.5)]
    assert next_work(queue({"beam": later}, oldest_job=1.0), SETTINGS, now=9.0) == TakeJob()
    assert next_work(queue({"beam": earlier}, oldest_job=1.0), SETTINGS, now=9.0) == TakeBatch("beam", (0,))
    # A job needs no batch due to go.
    assert next_work(queue({"beam": later}, oldest_job=1.0), SETTINGS, now=2.0) == TakeJob()


def test_the_first_group_due_goes_and_a_group_not_due_waits():
    groups = {"greedy": [Sentence(5, 1.0)], "beam": [Sentence(5, 0.0)]}
    assert next_work(queue(groups), SETTINGS, now=1.005) == TakeBatch("beam", (0,))
    assert next_work(queue(groups), SETTINGS, now=1.010) == TakeBatch("greedy", (0,))


def test_the_counts_of_sentences_in_transit():
    assert in_transit_after_arrival(None, 3) is None  # nothing answered yet: nothing known
    assert in_transit_after_arrival(5, 3) == 2
    assert in_transit_after_arrival(2, 3) == 0
    assert in_transit_after_answer(None, 4) == 4
    assert in_transit_after_answer(2, 4) == 6
