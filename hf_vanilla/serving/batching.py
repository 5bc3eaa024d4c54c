"""Requests batched on the fly: one worker thread owns the model and decodes the sentences that arrived close
together in one `generate` call (through `translate_sentences`), sentences of other decoding options never mixed.

The worker never stops for a request's sake: a sentence the tokenizer cannot take fails its own request, a batch
that fails is decoded again a sentence at a time so that only the sentences at fault fail; should the worker end
anyway, `failure` says why and `on_failure` is called (the service then exits, for a supervisor to restart it).

The event loop hands sentences in (`Batcher.submit`) and awaits its request's answer; the worker takes a batch
when one fills the token budget or when its oldest sentence has waited `max_wait_ms` since it arrived or since the
worker was last busy, whichever is later: the clients just answered send their next sentences in that time, and
make the next batch full instead of the one after. A batch is cut as evaluation
cuts them (sorted by length, sentences * longest source within `max_tokens`), and the one holding the oldest
sentence goes first, so no sentence waits behind an endless stream of shorter ones. Work on one sentence that
is no translation (the attention behind one, `submit_job`) goes alone between two batches, ahead of any batch
whose sentences all came after it, so that neither kind of work can keep the other waiting.
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

from hf_vanilla.data import TokenBatchSampler
from hf_vanilla.model.decoding import DEFAULT_MAX_TOKENS
from hf_vanilla.translation import DecodingOptions, TranslationEngine

logger = logging.getLogger(__name__)
WARM_UP_TEXT = "Ein Hund läuft über die Wiese."  # one decoding before the service says it is ready


@dataclass(frozen=True)
class BatchingSettings:
    """How sentences are batched: source tokens a batch (sentences * longest source: 1 sends each sentence
    alone), how long the oldest sentence may wait for others, and how many sentences may wait at all (more are
    refused at once)."""

    max_tokens: int = DEFAULT_MAX_TOKENS
    max_wait_ms: float = 10.0
    max_queued_sentences: int = 1024


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
    """One client request: its sentences' translations as the worker finishes them, and the future that the
    event loop awaits."""

    def __init__(self, size: int, loop: asyncio.AbstractEventLoop, may_cut: bool):
        self.translations: list[str] = [""] * size
        self.remaining = size
        self.cancelled = False
        self.may_cut = may_cut  # a source longer than the model's positions is cut (else refused)
        self.loop = loop
        self.future: asyncio.Future[list[str]] = loop.create_future()

    def deliver(self, index: int, translation: str) -> None:
        """Called by the worker: one sentence done; the last one answers the request."""
        self.translations[index] = translation
        self.remaining -= 1
        if self.remaining == 0:
            self._settle_soon(self.translations, None)

    def fail(self, error: Exception) -> None:
        """Called by the worker: a sentence of the request could not be translated."""
        self._settle_soon(None, error)

    def _settle_soon(self, translations: list[str] | None, error: Exception | None) -> None:
        with contextlib.suppress(RuntimeError):  # the loop is closed: nobody awaits the answer any more
            self.loop.call_soon_threadsafe(self._settle, translations, error)

    def _settle(self, translations: list[str] | None, error: Exception | None) -> None:
        if self.future.done():  # a disconnected client's, or failed already by another of its batches
            return
        if error is None:
            self.future.set_result(translations)
        else:
            self.future.set_exception(error)


@dataclass
class _Sentence:
    text: str
    index: int  # in its request
    request: _Request
    arrived: float  # time.monotonic()
    tokens: int | None = None  # source tokens in a batch, counted by the worker (it alone uses the tokenizer)


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
    """The queue of sentences waiting to be decoded and the one worker thread that decodes them.

    `load` (run on the worker thread, so the service answers health checks meanwhile) gives the engine that
    decodes; a translation with `warm_up` options follows before `ready` is set. `stop()` lets the worker
    decode every sentence still queued (without waiting for more) and end. Should loading fail or the worker
    end otherwise, `failure` says why, every waiting request fails with it, and `on_failure` is called.
    """

    def __init__(
        self,
        load: Callable[[], TranslationEngine],
        warm_up: DecodingOptions,
        settings: BatchingSettings = DEFAULT_BATCHING,
    ):
        self.settings = settings
        self.stats = BatchStats()
        self.ready = threading.Event()
        self.failure: str | None = None
        self.on_failure: Callable[[], None] = lambda: None
        self._load, self._warm_up = load, warm_up
        self._engine: TranslationEngine | None = None  # set by the worker, before `ready`
        self._pending: dict[DecodingOptions, list[_Sentence]] = {}  # each in order of arrival
        self._jobs: deque[_Job] = deque()
        self._queued = 0
        self._free_since = 0.0  # time.monotonic() when the worker last finished a batch
        self._stopping = False
        self._condition = threading.Condition()
        self._worker = threading.Thread(target=self._run, name="translation-worker", daemon=True)

    def start(self) -> None:
        self._worker.start()

    def stop(self) -> None:
        """Decode what is queued, then end the worker; returns when it has ended."""
        with self._condition:
            self._stopping = True
            self._condition.notify()
        self._worker.join()

    def submit(self, texts: Sequence[str], options: DecodingOptions, may_cut: bool = True) -> _Request:
        """Queue `texts` to be decoded with `options`; await the result's `future` for their translations, in
        order, or the RequestRefused it raises. A text longer than the model's positions is cut to fit, or
        with `may_cut` False refused (422). Raises QueueFull at once when they do not fit in the queue."""
        request = _Request(len(texts), asyncio.get_running_loop(), may_cut)
        if not texts:
            request.future.set_result([])
            return request
        now = time.monotonic()
        with self._condition:
            self._admit(len(texts))
            group = self._pending.setdefault(options, [])
            group += [_Sentence(text, index, request, now) for index, text in enumerate(texts)]
            self._queued += len(texts)
            self._condition.notify()
        return request

    def submit_job(self, run: Callable[[TranslationEngine], Any]) -> _Request:
        """Queue `run(engine)` for the worker to call between two batches, never beside one, as one queued
        sentence, ahead of any batch whose sentences all came after it; await the result's `future` for [what
        it returns], or the RequestRefused it raises (any other exception: a 500 naming it). Raises QueueFull
        at once when the queue is full."""
        request = _Request(1, asyncio.get_running_loop(), may_cut=False)
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
        """`group` as the sentences waiting with `options`; an emptied group goes, so that the options requests
        have chosen do not pile up."""
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
        try:
            engine = self._load()
            engine.translate([WARM_UP_TEXT], self._warm_up)
        except Exception as err:
            self._stop_failed(f"the model failed to load: {err}")
            return
        self._engine = engine
        self.ready.set()
        logger.info("model loaded and warm: %s", engine.describe())
        work: _Job | tuple[DecodingOptions, list[_Sentence]] | None = None
        try:
            while (work := self._next_batch()) is not None:
                if isinstance(work, _Job):
                    self._run_job(work)
                else:
                    self._decode(*work)
                self._free_since = time.monotonic()
        except BaseException as err:  # a bug of ours: no request may wait on a worker that is gone
            in_flight = [work] if isinstance(work, _Job) else work[1] if work else []
            self._stop_failed(f"the translation worker stopped: {type(err).__name__}: {err}", in_flight)

    def _stop_failed(self, failure: str, in_flight: Sequence[_Sentence | _Job] = ()) -> None:
        """Fail every waiting request and those of the batch `in_flight` with `failure`, which /health reports,
        and call `on_failure`."""
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

    def _next_batch(self) -> _Job | tuple[DecodingOptions, list[_Sentence]] | None:
        """Wait for a job, or a batch that is due, and take it out of the queue; None once stopping with
        nothing queued."""
        with self._condition:
            while True:
                self._count_tokens()
                due = [(options, group) for options, group in self._pending.items() if self._is_due(group)]
                # A job goes ahead of the batches due unless one holds a sentence that came before it.
                if self._jobs and all(group[0].arrived >= self._jobs[0].arrived for _, group in due):
                    self._queued -= 1
                    return self._jobs.popleft()
                if due:
                    options, group = due[0]
                    batch = self._batch_with_oldest(group)
                    taken = {id(sentence) for sentence in batch}
                    self._keep(options, [sentence for sentence in group if id(sentence) not in taken])
                    self._queued -= len(batch)
                    return options, batch
                if self._stopping and not self._queued:
                    return None
                self._condition.wait(timeout=self._seconds_to_next_due())

    def _is_due(self, group: list[_Sentence]) -> bool:
        """Stopping, waited long enough, or more than one batch's worth waiting."""
        if self._stopping or time.monotonic() >= self._due_at(group):
            return True
        return len(group) * max(sentence.tokens for sentence in group) > self.settings.max_tokens

    def _due_at(self, group: list[_Sentence]) -> float:
        """When the group's batch goes at the latest: `max_wait_ms` after its oldest sentence came or the worker
        was last busy."""
        return max(group[0].arrived, self._free_since) + self.settings.max_wait_ms / 1000

    def _seconds_to_next_due(self) -> float | None:
        """Until the first group is due (None: nothing waits, sleep until notified)."""
        due = [self._due_at(group) for group in self._pending.values()]
        return max(0.0, min(due) - time.monotonic()) if due else None

    def _batch_with_oldest(self, group: list[_Sentence]) -> list[_Sentence]:
        """The batch of `TokenBatchSampler` (sorted by length, sentences * longest within max_tokens, a longer
        sentence alone) that holds the group's oldest sentence, group[0]."""
        lengths = [sentence.tokens for sentence in group]
        batches = TokenBatchSampler(lengths, self.settings.max_tokens, shuffle=False)
        return next([group[index] for index in batch] for batch in batches if 0 in batch)

    def _count_tokens(self) -> None:
        """Count the source tokens of each sentence that came since the last look (cut to the model's positions);
        a sentence the tokenizer cannot take, or too long to cut, fails its request, whose sentences leave."""
        uncounted = [sentence for group in self._pending.values() for sentence in group if sentence.tokens is None]
        for sentence in uncounted:
            if sentence.request.cancelled:  # failed by another of its sentences, or its client left
                continue
            try:
                sentence.tokens = self._fitted_tokens(sentence)
            except RequestRefused as err:
                self._refuse(sentence.request, err)
            except Exception as err:
                message = f"inputs[{sentence.index}] cannot be tokenized: {type(err).__name__}: {err}"
                self._refuse(sentence.request, RequestRefused(400, message))

    def _refuse(self, request: _Request, refused: RequestRefused) -> None:
        request.fail(refused)
        self.cancel(request)

    def _fitted_tokens(self, sentence: _Sentence) -> int:
        tokens, limit = self._engine.source_tokens(sentence.text), self._engine.max_source_tokens
        if tokens > limit and not sentence.request.may_cut:
            raise RequestRefused(
                422,
                f"inputs[{sentence.index}] is {tokens} tokens, over the model's {limit} positions: send it shorter, "
                'or with truncation "longest_first" to translate its first tokens',
            )
        return min(tokens, limit)

    def _decode(self, options: DecodingOptions, batch: list[_Sentence]) -> None:
        """One decoding call for the batch: the engine cuts it no further, for it fits in the same budget. A
        batch that fails is decoded again a sentence at a time, and only a sentence that fails alone fails its
        request (with a line naming it); the worker goes on."""
        started = time.perf_counter()
        try:
            translations = self._engine.translate([sentence.text for sentence in batch], options)
        except Exception:  # one bad batch must not end the service, nor fail the sentences not at fault
            logger.exception("a batch of %d sentences failed; decoding them one at a time", len(batch))
            translations = [self._decode_alone(options, sentence) for sentence in batch]
        tokens = [sentence.tokens for sentence in batch]
        logger.info(
            "batch: %d sentences, %d source tokens (%d padded), num_beams %s, %.0f ms",
            len(batch),
            sum(tokens),
            len(batch) * max(tokens),
            options.num_beams,
            (time.perf_counter() - started) * 1000,
        )
        self.stats.batches += 1
        self.stats.sentences += len(batch)
        self.stats.largest_batch = max(self.stats.largest_batch, len(batch))
        # Counted before the answers go out, so that a client who has its answer sees its batch in /stats.
        for sentence, translation in zip(batch, translations, strict=True):
            if translation is not None:
                sentence.request.deliver(sentence.index, translation)

    def _run_job(self, job: _Job) -> None:
        """Answer the job's request with what it returns, or fail it with its error; the worker goes on."""
        try:
            job.request.deliver(0, job.run(self._engine))
        except RequestRefused as err:
            job.request.fail(err)
        except Exception as err:
            logger.exception("a job failed")
            job.request.fail(RequestRefused(500, f"{type(err).__name__}: {err}"))

    def _decode_alone(self, options: DecodingOptions, sentence: _Sentence) -> str | None:
        """The sentence's translation, or None once its request has failed with the error."""
        try:
            return self._engine.translate([sentence.text], options)[0]
        except Exception as err:
            logger.exception("inputs[%d] of a request failed alone", sentence.index)
            sentence.request.fail(
                RequestRefused(500, f"decoding inputs[{sentence.index}] failed: {type(err).__name__}: {err}")
            )
            return None
