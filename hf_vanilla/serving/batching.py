"""Requests batched on the fly: one worker thread owns the model and decodes the sentences that arrived close
together in one `generate` call (through `translate_sentences`), sentences of other decoding options never mixed.

The event loop hands sentences in (`Batcher.submit`) and awaits its request's answer; the worker takes a batch
when one fills the token budget or when its oldest sentence has waited `max_wait_ms` since it arrived or since the
worker was last busy, whichever is later: the clients just answered send their next sentences in that time, and
make the next batch full instead of the one after. A batch is cut as evaluation
cuts them (sorted by length, sentences * longest source within `max_tokens`), and the one holding the oldest
sentence goes first, so no sentence waits behind an endless stream of shorter ones.
"""

from __future__ import annotations

import asyncio
import logging
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from transformers import PreTrainedModel, PreTrainedTokenizerBase

from hf_vanilla.data import TokenBatchSampler
from hf_vanilla.model.decoding import DEFAULT_MAX_TOKENS, max_source_tokens
from hf_vanilla.translation import DecodingOptions, translate_sentences

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


class _Request:
    """One client request: its sentences' translations as the worker finishes them, and the future that the
    event loop awaits."""

    def __init__(self, size: int, loop: asyncio.AbstractEventLoop):
        self.translations: list[str] = [""] * size
        self.remaining = size
        self.cancelled = False
        self.loop = loop
        self.future: asyncio.Future[list[str]] = loop.create_future()

    def deliver(self, index: int, translation: str) -> None:
        """Called by the worker: one sentence done; the last one answers the request."""
        self.translations[index] = translation
        self.remaining -= 1
        if self.remaining == 0:
            self.loop.call_soon_threadsafe(self._settle, self.translations, None)

    def fail(self, error: Exception) -> None:
        """Called by the worker: the request's batch failed."""
        self.loop.call_soon_threadsafe(self._settle, None, error)

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
    tokens: int | None = None  # source tokens, counted by the worker (it alone uses the tokenizer)


@dataclass
class BatchStats:
    """What the worker has done so far, for /stats and the tests."""

    batches: int = 0
    sentences: int = 0
    largest_batch: int = 0
    refused_sentences: int = 0


class Batcher:
    """The queue of sentences waiting to be decoded and the one worker thread that decodes them.

    `load` (run on the worker thread, so the service answers health checks meanwhile) gives the model and its
    tokenizer; a translation with `warm_up` options follows before `ready` is set. `stop()` lets the worker
    decode every sentence still queued (without waiting for more) and end.
    """

    def __init__(
        self,
        load: Callable[[], tuple[PreTrainedModel, PreTrainedTokenizerBase]],
        warm_up: DecodingOptions,
        settings: BatchingSettings = DEFAULT_BATCHING,
    ):
        self.settings = settings
        self.stats = BatchStats()
        self.ready = threading.Event()
        self.load_error: str | None = None
        self._load, self._warm_up = load, warm_up
        self._model: PreTrainedModel | None = None  # set by the worker, before `ready`
        self._tokenizer: PreTrainedTokenizerBase | None = None
        self._pending: dict[DecodingOptions, list[_Sentence]] = {}  # each in order of arrival
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

    def submit(self, texts: Sequence[str], options: DecodingOptions) -> _Request:
        """Queue `texts` to be decoded with `options`; await the result's `future` for their translations, in
        order. Raises QueueFull at once when they do not fit in the queue."""
        request = _Request(len(texts), asyncio.get_running_loop())
        if not texts:
            request.future.set_result([])
            return request
        now = time.monotonic()
        with self._condition:
            if self._queued + len(texts) > self.settings.max_queued_sentences:
                self.stats.refused_sentences += len(texts)
                raise QueueFull(
                    f"{self._queued} sentences are waiting, at most {self.settings.max_queued_sentences} may"
                )
            group = self._pending.setdefault(options, [])
            group += [_Sentence(text, index, request, now) for index, text in enumerate(texts)]
            self._queued += len(texts)
            self._condition.notify()
        return request

    def cancel(self, request: _Request) -> None:
        """Drop the request's sentences that no batch has taken yet (its client has gone)."""
        with self._condition:
            request.cancelled = True
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

    @property
    def queued(self) -> int:
        return self._queued

    def _run(self) -> None:
        try:
            model, tokenizer = self._load()
            translate_sentences(model, tokenizer, [WARM_UP_TEXT], self._warm_up)
        except Exception as err:  # reported by /health and /ready; the process stays up to say so
            logger.exception("the model failed to load")
            self.load_error = f"the model failed to load: {err}"
            return
        self._model, self._tokenizer = model, tokenizer
        self.ready.set()
        logger.info("model loaded and warm on %s", model.device)
        while (batch := self._next_batch()) is not None:
            self._decode(*batch)
            self._free_since = time.monotonic()

    def _next_batch(self) -> tuple[DecodingOptions, list[_Sentence]] | None:
        """Wait for a batch that is due and take it out of the queue; None once stopping with nothing queued."""
        with self._condition:
            while True:
                for options, group in self._pending.items():
                    if self._is_due(group):
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
        return len(group) * max(map(self._tokens, group)) > self.settings.max_tokens

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
        lengths = [self._tokens(sentence) for sentence in group]
        batches = TokenBatchSampler(lengths, self.settings.max_tokens, shuffle=False)
        return next([group[index] for index in batch] for batch in batches if 0 in batch)

    def _tokens(self, sentence: _Sentence) -> int:
        """The sentence's source tokens as `translate_sentences` counts them (cut to the model's positions)."""
        if sentence.tokens is None:
            ids = self._tokenizer(sentence.text, verbose=False)["input_ids"]
            sentence.tokens = min(len(ids), max_source_tokens(self._model))
        return sentence.tokens

    def _decode(self, options: DecodingOptions, batch: list[_Sentence]) -> None:
        """One `generate` call for the batch: `translate_sentences` cuts it no further, for it fits in the
        same budget. A batch that fails answers its requests with the error; the worker goes on."""
        started = time.perf_counter()
        try:
            texts = [sentence.text for sentence in batch]
            translations = translate_sentences(self._model, self._tokenizer, texts, options)
        except Exception as err:  # one bad batch must not end the service
            logger.exception("a batch of %d sentences failed", len(batch))
            for request in {id(sentence.request): sentence.request for sentence in batch}.values():
                request.fail(err)
            return
        tokens = [self._tokens(sentence) for sentence in batch]
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
            sentence.request.deliver(sentence.index, translation)
