"""Requests batched on the fly: worker threads decode the sentences that arrived close together in one call
of the engine (`TranslationEngine.translate_encoded`), sentences of other decoding options never mixed.

Each sentence is tokenized once, on the event loop as its request comes (the count that batches it and the
ids that the engine decodes are the same), and its translation detokenized there as the answer goes: the
workers only decode, and while they do (CTranslate2 lets go of Python's lock meanwhile) the event loop reads,
tokenizes and answers the other requests. There are as many workers as the engine decodes batches at once
(`concurrent_batches`: CTranslate2's `inter_threads`, 1 for `generate`).

A worker never stops for a request's sake: a sentence the tokenizer cannot take fails its own request, a
batch that fails is decoded again a sentence at a time so that only the sentences at fault fail; should the
worker end anyway, `failure` says why and `on_failure` is called (the service then exits, for a supervisor to
restart it).

The event loop hands sentences in (`Batcher.submit`) and awaits its request's answer; a worker takes a batch
when the policy (policy.py) says one is due: when one fills the token budget, when it holds at least as many
sentences as are still to come back from the clients answered so far (those send their next sentences at
once: a worker waits for them only while they would more than double its batch, and otherwise keeps decoding
while they come; not with `fixed_wait`), or at the latest when its oldest sentence has waited `max_wait_ms`
since it arrived or since a worker was last busy, whichever is later (the rule until a first batch is
answered, before anything is known of the clients). A batch is cut as evaluation cuts them (sorted by length,
sentences * longest source within `max_tokens`), and the one holding the oldest sentence goes first, so no
sentence waits behind an endless stream of shorter ones. Work on one sentence that is no translation (the
attention behind one, `submit_job`) goes between two batches, ahead of any batch whose sentences all came
after it, so that neither kind of work can keep the other waiting.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import threading
import time
from collections import deque
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from hf_vanilla.model.decoding import DecodingOptions, cut_source
from hf_vanilla.serving.policy import (
    BatchingSettings,
    QueueState,
    TakeJob,
    in_transit_after_answer,
    in_transit_after_arrival,
    next_work,
    seconds_to_next_due,
)
from hf_vanilla.translation.decoding import Batching
from hf_vanilla.translation.engines import TranslationEngine

logger = logging.getLogger(__name__)
WARM_UP_TEXT = "Ein Hund läuft über die Wiese."  # one decoding before the service says it is ready


DEFAULT_BATCHING = BatchingSettings()


class QueueFull(Exception):
    """More sentences than the queue holds are waiting: the client should try again shortly."""


class RequestRefused(Exception):
    """A request the service will not translate as asked: its status (4xx: the client's to mend, 5xx: the
    server's) and the line that says why."""

    def __init__(self, status: int, message: str):
        super().__init__(message)
        self.status = status


class _Request:
    """One client request: what the workers give for each of its sentences, the step that turns those into its
    answer (on the event loop), and the future that the event loop awaits."""

    def __init__(self, size: int, loop: asyncio.AbstractEventLoop, finish: Callable[[list], Any] = list):
        self.results: list[Any] = [None] * size
        self.remaining = size
        self.cancelled = False
        self.loop = loop
        self.finish = finish
        self.future: asyncio.Future[Any] = loop.create_future()

    def deliver(self, index: int, result: Any) -> None:
        """Called by a worker: one sentence done; the last one answers the request."""
        self.results[index] = result
        self.remaining -= 1
        if self.remaining == 0:
            self._settle_soon(None)

    def fail(self, error: Exception) -> None:
        """Called by a worker: a sentence of the request could not be translated."""
        self._settle_soon(error)

    def _settle_soon(self, error: Exception | None) -> None:
        with contextlib.suppress(RuntimeError):  # the loop is closed: nobody awaits the answer any more
            self.loop.call_soon_threadsafe(self._settle, error)

    def _settle(self, error: Exception | None) -> None:
        if self.future.done():  # a disconnected client's, or failed already by another of its batches
            return
        if error is not None:
            self.future.set_exception(error)
            return
        try:
            self.future.set_result(self.finish(self.results))
        except Exception as err:
            logger.exception("a request's answer failed")
            self.future.set_exception(RequestRefused(500, f"{type(err).__name__}: {err}"))


@dataclass
class _Sentence:
    ids: list[int]  # its tokens, cut to the model's positions
    index: int  # in its request
    request: _Request
    arrived: float  # time.monotonic()

    @property
    def tokens(self) -> int:
        return len(self.ids)


@dataclass
class _Job:
    """Work on the engine that is no batch of translations (`Batcher.submit_job`): `run(engine)` answers
    `request`."""

    run: Callable[[TranslationEngine], Any]
    request: _Request
    arrived: float  # time.monotonic()


@dataclass
class BatchStats:
    """What the worker has done so far, for /stats and the tests."""

    batches: int = 0
    sentences: int = 0
    largest_batch: int = 0
    refused_sentences: int = 0


class Batcher:
    """The queue of sentences waiting to be decoded and the worker threads that decode them.

    `load` (run on a worker thread, so the service answers health checks meanwhile) gives the engine that
    decodes; a translation with `warm_up` options follows before `ready` is set, and the engine's
    `concurrent_batches` workers start. `stop()` lets the workers decode every sentence still queued (without
    waiting for more) and end. Should loading fail or a worker end otherwise, `failure` says why, every
    waiting request fails with it, and `on_failure` is called.
    """

    def __init__(
        self,
        load: Callable[[], TranslationEngine],
        warm_up: DecodingOptions,
        settings: BatchingSettings = DEFAULT_BATCHING,
    ):
        self.settings = settings
        # Each batch fits the budget already, so the engine cuts it no further; the service shows no bar.
        self._batching = Batching(settings.max_tokens, show_progress=False)
        self.stats = BatchStats()
        self.ready = threading.Event()
        self.failure: str | None = None
        self.on_failure: Callable[[], None] = lambda: None
        self._load, self._warm_up = load, warm_up
        self._engine: TranslationEngine | None = None  # set by the first worker, before `ready`
        self._pending: dict[DecodingOptions, list[_Sentence]] = {}  # each in order of arrival
        self._jobs: deque[_Job] = deque()
        self._queued = 0
        self._free_since = 0.0  # time.monotonic() when a worker last finished a batch
        self._in_transit: int | None = None  # sentences answered whose clients have not sent as many since
        self._stopping = False
        self._condition = threading.Condition()
        self._workers = [threading.Thread(target=self._run, name="translation-worker", daemon=True)]

    def start(self) -> None:
        self._workers[0].start()

    def stop(self) -> None:
        """Decode what is queued, then end the workers; returns when they have ended."""
        with self._condition:
            self._stopping = True
            self._condition.notify_all()
        for worker in list(self._workers):
            worker.join()

    def submit(self, texts: Sequence[str], options: DecodingOptions, may_cut: bool = True) -> _Request:
        """Queue `texts` to be decoded with `options` (the model must be ready); await the result's `future`
        for their translations, in order. Each text is tokenized here, once; a text longer than the model's
        positions is cut to fit, or with `may_cut` False refused (422), and a text the tokenizer cannot take
        is refused (400): RequestRefused, as QueueFull when they do not fit in the queue, is raised at
        once."""
        engine = self._engine
        request = _Request(
            len(texts), asyncio.get_running_loop(), lambda outputs: _texts(engine, options, outputs)
        )
        encoded = _encoded(engine, texts, may_cut)
        if encoded:
            now = time.monotonic()
            with self._condition:
                self._admit(len(encoded))
                group = self._pending.setdefault(options, [])
                group += [_Sentence(ids, index, request, now) for index, ids in encoded.items()]
                self._queued += len(encoded)
                self._in_transit = in_transit_after_arrival(self._in_transit, len(encoded))
                self._condition.notify()
        for index in set(range(len(texts))) - set(encoded):
            request.deliver(index, None)  # a blank text: translated to "" without decoding
        if not texts:
            request.future.set_result([])
        return request

    def submit_job(self, run: Callable[[TranslationEngine], Any]) -> _Request:
        """Queue `run(engine)` for the worker to call between two batches, never beside one, as one queued
        sentence, ahead of any batch whose sentences all came after it; await the result's `future` for [what
        it returns], or the RequestRefused it raises (any other exception: a 500 naming it). Raises QueueFull
        at once when the queue is full."""
        request = _Request(1, asyncio.get_running_loop())
        with self._condition:
            self._admit(1)
            self._jobs.append(_Job(run, request, time.monotonic()))
            self._queued += 1
            self._condition.notify()
        return request

    def _admit(self, sentences: int) -> None:
        """RequestRefused once the worker has failed, QueueFull where `sentences` more do not fit in the
        queue."""
        if self.failure:
            raise RequestRefused(500, self.failure)
        if self._queued + sentences > self.settings.max_queued_sentences:
            self.stats.refused_sentences += sentences
            raise QueueFull(
                f"{self._queued} sentences are waiting, at most {self.settings.max_queued_sentences} may"
            )

    def cancel(self, request: _Request) -> None:
        """Drop the request's sentences (or job) that the worker has not taken yet (its client has gone)."""
        with self._condition:
            request.cancelled = True
            waiting = len(self._jobs)
            self._jobs = deque(job for job in self._jobs if not job.request.cancelled)
            self._queued -= waiting - len(self._jobs)
            for options, group in list(self._pending.items()):
                kept = [sentence for sentence in group if not sentence.request.cancelled]
                self._queued -= len(group) - len(kept)
                self._keep(options, kept)

    def _keep(self, options: DecodingOptions, group: list[_Sentence]) -> None:
        """`group` as the sentences waiting with `options`; an emptied group goes, so that the options
        requests have chosen do not pile up."""
        if group:
            self._pending[options] = group
        else:
            del self._pending[options]

    def wait_until_loaded(self) -> None:
        """Return once the model is ready, or once it failed to load."""
        while not self.ready.wait(timeout=0.5) and not self.failure:
            pass

    @property
    def queued(self) -> int:
        return self._queued

    def _run(self) -> None:
        """The first worker: load and warm the engine, start the others, then decode as they do."""
        try:
            engine = self._load()
            engine.translate([WARM_UP_TEXT], self._warm_up, self._batching)
        except Exception as err:
            self._stop_failed(f"the model failed to load: {err}")
            return
        self._engine = engine
        others = [
            threading.Thread(target=self._work, name=f"translation-worker-{number}", daemon=True)
            for number in range(1, engine.concurrent_batches)
        ]
        self._workers += others
        for worker in others:
            worker.start()
        self.ready.set()
        logger.info(
            "model loaded and warm: %s, %d batches decoded at once", engine.describe(), len(self._workers)
        )
        self._work()

    def _work(self) -> None:
        work: _Job | tuple[DecodingOptions, list[_Sentence]] | None = None
        try:
            while (work := self._next_batch()) is not None:
                if isinstance(work, _Job):
                    _run_job(work, self._engine)
                else:
                    self._decode(*work)
                self._free_since = time.monotonic()
        except BaseException as err:  # a bug of ours: no request may wait on a worker that is gone
            in_flight = [work] if isinstance(work, _Job) else work[1] if work else []
            self._stop_failed(f"the translation worker stopped: {type(err).__name__}: {err}", in_flight)

    def _stop_failed(self, failure: str, in_flight: Sequence[_Sentence | _Job] = ()) -> None:
        """Fail every waiting request and those of the batch `in_flight` with `failure`, which /health
        reports, and call `on_failure`."""
        logger.exception(failure)
        self.failure = failure
        self.on_failure()
        with self._condition:
            waiting = [*self._jobs, *(sentence for group in self._pending.values() for sentence in group)]
            for work in [*in_flight, *waiting]:
                work.request.fail(RequestRefused(500, failure))
            self._pending.clear()
            self._jobs.clear()
            self._queued = 0
            self._stopping = True  # the other workers end too
            self._condition.notify_all()

    def _next_batch(self) -> _Job | tuple[DecodingOptions, list[_Sentence]] | None:
        """Wait for a job, or a batch that is due (`policy.next_work`), and take it out of the queue; None
        once stopping with nothing queued."""
        with self._condition:
            while True:
                state = QueueState(
                    self._pending,
                    self._jobs[0].arrived if self._jobs else None,
                    self._free_since,
                    self._in_transit,
                    self._stopping,
                )
                work = next_work(state, self.settings, time.monotonic())
                if isinstance(work, TakeJob):
                    self._queued -= 1
                    return self._jobs.popleft()
                if work is not None:
                    group, taken = self._pending[work.options], set(work.indexes)
                    kept = [sentence for index, sentence in enumerate(group) if index not in taken]
                    self._keep(work.options, kept)
                    self._queued -= len(taken)
                    return work.options, [group[index] for index in work.indexes]
                if self._stopping and not self._queued:
                    return None
                self._condition.wait(timeout=seconds_to_next_due(state, self.settings, time.monotonic()))

    def _decode(self, options: DecodingOptions, batch: list[_Sentence]) -> None:
        """One decoding call for the batch: the engine cuts it no further, for it fits in the same budget. A
        batch that fails is decoded again a sentence at a time, and only a sentence that fails alone fails its
        request (with a line naming it); the worker goes on."""
        started = time.perf_counter()
        try:
            batch_ids = [sentence.ids for sentence in batch]
            outputs = self._engine.translate_encoded(batch_ids, options, self._batching)
        except Exception:  # one bad batch must not end the service, nor fail the sentences not at fault
            logger.exception("a batch of %d sentences failed; decoding them one at a time", len(batch))
            outputs = [
                _decode_alone(self._engine, options, self._batching, sentence) for sentence in batch
            ]
        tokens = [sentence.tokens for sentence in batch]
        logger.info(
            "batch: %d sentences, %d source tokens (%d padded), num_beams %s, %.0f ms",
            len(batch),
            sum(tokens),
            len(batch) * max(tokens),
            options.num_beams,
            (time.perf_counter() - started) * 1000,
        )
        with self._condition:  # workers count together
            self.stats.batches += 1
            self.stats.sentences += len(batch)
            self.stats.largest_batch = max(self.stats.largest_batch, len(batch))
            self._in_transit = in_transit_after_answer(self._in_transit, len(batch))
        # Counted before the answers go out, so that a client who has its answer sees its batch in /stats.
        for sentence, output in zip(batch, outputs, strict=True):
            if output is not None:
                sentence.request.deliver(sentence.index, output)


def _run_job(job: _Job, engine: TranslationEngine) -> None:
    """Answer the job's request with what it returns, or fail it with its error; the worker goes on."""
    try:
        job.request.deliver(0, job.run(engine))
    except RequestRefused as err:
        job.request.fail(err)
    except Exception as err:
        logger.exception("a job failed")
        job.request.fail(RequestRefused(500, f"{type(err).__name__}: {err}"))


def _decode_alone(
    engine: TranslationEngine, options: DecodingOptions, batching: Batching, sentence: _Sentence
) -> list[int] | None:
    """The sentence's output ids, or None once its request has failed with the error."""
    try:
        return engine.translate_encoded([sentence.ids], options, batching)[0]
    except Exception as err:
        logger.exception("inputs[%d] of a request failed alone", sentence.index)
        sentence.request.fail(
            RequestRefused(500, f"decoding inputs[{sentence.index}] failed: {type(err).__name__}: {err}")
        )
        return None


def _encoded(engine: TranslationEngine, texts: Sequence[str], may_cut: bool) -> dict[int, list[int]]:
    """The token ids of each nonblank text by index, cut to the model's positions; RequestRefused for a text
    too long to cut (422) or one the tokenizer cannot take (400)."""
    nonblank = [index for index, text in enumerate(texts) if text.strip()]
    if not nonblank:
        return {}
    try:
        encoded = engine.encode([texts[index] for index in nonblank])
    except Exception:
        for index in nonblank:  # which one: only on this path is any text tokenized twice
            try:
                engine.encode([texts[index]])
            except Exception as err:
                raise RequestRefused(
                    400, f"inputs[{index}] cannot be tokenized: {type(err).__name__}: {err}"
                ) from err
        raise
    limit = engine.max_source_tokens
    for index, ids in zip(nonblank, encoded, strict=True):
        if len(ids) > limit and not may_cut:
            raise RequestRefused(
                422,
                f"inputs[{index}] is {len(ids)} tokens, over the model's {limit} positions: send it shorter, "
                'or with truncation "longest_first" to translate its first tokens',
            )
    return {index: cut_source(ids, limit) for index, ids in zip(nonblank, encoded, strict=True)}


def _texts(
    engine: TranslationEngine, options: DecodingOptions, outputs: Sequence[list[int] | None]
) -> list[str]:
    """A request's translations from its sentences' output ids, detokenized together; "" for a blank text."""
    decoded_ids = [ids for ids in outputs if ids is not None]
    decoded = iter(engine.detokenize(decoded_ids, options) if decoded_ids else [])
    return [next(decoded) if ids is not None else "" for ids in outputs]
