"""The worker as the service relies on it, in this process with a stand-in engine: a sentence the tokenizer
cannot take, a batch that fails, a job that fails, or a worker that stops fails only the requests it concerns,
and says so; a job (the attention behind a translation) runs alone, ahead of the batches waiting."""

import asyncio
import threading
import time

import pytest

from hf_vanilla.model.decoding import DecodingOptions
from hf_vanilla.serving.batching import Batcher, RequestRefused
from hf_vanilla.serving.policy import BatchingSettings
from hf_vanilla.translation.engines import EngineSettings, load_engine

OPTIONS = DecodingOptions(num_beams=1)
TOGETHER = BatchingSettings(max_tokens=1000, max_wait_ms=200)  # sentences sent together meet in one batch


class EchoEngine:
    """Translates a text to itself upper-cased, a word a token; fails a batch holding "poison", cannot
    tokenize "untokenizable"; counts the texts it tokenizes."""

    max_source_tokens = 8
    concurrent_batches = 1
    abilities = frozenset()

    def __init__(self):
        self.batches: list[list[str]] = []
        self.tokenized: list[str] = []

    def translate(self, sources, options, batching=None):
        return self.detokenize(self.translate_encoded(self.encode(sources), options, batching), options)

    def translate_nbest(self, sources, options, batching=None):
        raise NotImplementedError

    def encode(self, sources):
        if "untokenizable" in sources:
            raise TypeError("TextEncodeInput must be Union[...]")
        self.tokenized += sources
        return [[*source.split(), "</s>"] for source in sources]

    def translate_encoded(self, batch, options, batching=None):
        self.batches.append([" ".join(ids[:-1]) for ids in batch])
        if ["poison", "</s>"] in batch:
            raise RuntimeError("the engine choked")
        return [[word.upper() for word in ids[:-1]] for ids in batch]

    def detokenize(self, output_ids, options):
        return [" ".join(words) for words in output_ids]

    def describe(self):
        return {"engine": "echo"}


async def _answers(batcher: Batcher, *requests: tuple[list[str], bool]) -> list[list[str] | RequestRefused]:
    """Each request's translations or the RequestRefused it failed with (at once, or from the worker), all
    submitted together."""

    async def refused(err: RequestRefused) -> RequestRefused:
        return err

    futures = []
    for texts, may_cut in requests:
        try:
            futures.append(batcher.submit(texts, OPTIONS, may_cut).future)
        except RequestRefused as err:
            futures.append(refused(err))
    done = await asyncio.wait_for(asyncio.gather(*futures, return_exceptions=True), timeout=10)
    return list(done)


@pytest.fixture
def engine_and_batcher():
    engine = EchoEngine()
    batcher = Batcher(lambda: engine, OPTIONS, TOGETHER)
    batcher.start()
    batcher.wait_until_loaded()
    yield engine, batcher
    batcher.stop()


def test_a_failing_batch_fails_only_the_sentence_at_fault_and_the_worker_goes_on(engine_and_batcher):
    engine, batcher = engine_and_batcher
    good, bad = asyncio.run(_answers(batcher, (["a b", "c"], True), (["d", "poison"], True)))
    assert good == ["A B", "C"]
    assert isinstance(bad, RequestRefused) and bad.status == 500
    assert str(bad) == "decoding inputs[1] failed: RuntimeError: the engine choked"
    assert sorted(engine.batches[-5]) == ["a b", "c", "d", "poison"]  # one batch, then a sentence at a time
    assert sorted(engine.batches[-4:]) == [["a b"], ["c"], ["d"], ["poison"]]
    assert asyncio.run(_answers(batcher, (["e"], True))) == [["E"]]
    assert batcher.failure is None and batcher.queued == 0


def test_text_the_tokenizer_cannot_take_fails_its_request_with_400(engine_and_batcher):
    _, batcher = engine_and_batcher
    good, bad = asyncio.run(_answers(batcher, (["a"], True), (["b", "untokenizable"], True)))
    assert good == ["A"]
    assert bad.status == 400 and str(bad).startswith("inputs[1] cannot be tokenized: TypeError: ")
    assert batcher.queued == 0


def test_a_source_over_the_positions_is_cut_or_refused_as_the_request_asks(engine_and_batcher):
    _, batcher = engine_and_batcher
    long_text = " ".join(["w"] * 8)  # and </s>: 9 tokens
    cut, refused = asyncio.run(_answers(batcher, ([long_text], True), (["a", long_text], False)))
    assert cut == [" ".join(["W"] * 7)]  # its first 7 and </s>, as the tokenizer cuts
    assert refused.status == 422
    assert str(refused).startswith("inputs[1] is 9 tokens, over the model's 8 positions: send it shorter")


def test_a_worker_that_stops_fails_every_waiting_request_and_says_so(engine_and_batcher, monkeypatch):
    _, batcher = engine_and_batcher
    stopped = []
    batcher.on_failure = lambda: stopped.append(True)

    def broken(self):
        raise MemoryError("no room left")

    monkeypatch.setattr(Batcher, "_decode", lambda self, options, batch: broken(self))
    (answer,) = asyncio.run(_answers(batcher, (["a", "b"], True)))
    assert answer.status == 500 and str(answer) == "the translation worker stopped: MemoryError: no room left"
    assert batcher.failure == str(answer) and stopped == [True]

    async def submit_again():
        batcher.submit(["c"], OPTIONS)

    with pytest.raises(RequestRefused, match="the translation worker stopped"):
        asyncio.run(submit_again())


def test_a_model_that_fails_to_load_is_a_failure_too():
    def load():
        raise OSError("model.safetensors is truncated")

    batcher = Batcher(load, OPTIONS, TOGETHER)
    batcher.start()
    batcher.wait_until_loaded()
    batcher.stop()
    assert batcher.failure == "the model failed to load: model.safetensors is truncated"
    assert not batcher.ready.is_set()


def test_a_job_runs_alone_ahead_of_waiting_batches_and_fails_alone(engine_and_batcher):
    engine, batcher = engine_and_batcher

    def refuse(engine):
        raise RequestRefused(422, "not this one")

    def crash(engine):
        raise RuntimeError("the engine choked")

    async def submitted_together():
        translations = batcher.submit(["a", "b"], OPTIONS)  # due in 200 ms
        jobs = [batcher.submit_job(run) for run in (lambda engine: len(engine.batches), refuse, crash)]
        assert batcher.queued == 2 + len(jobs)
        futures = [translations.future, *(job.future for job in jobs)]
        return await asyncio.wait_for(asyncio.gather(*futures, return_exceptions=True), timeout=10)

    batches_before = len(engine.batches)
    translations, counted, refused, crashed = asyncio.run(submitted_together())
    assert translations == ["A", "B"] and counted == [batches_before]  # the job ran before the batch
    assert refused.status == 422 and str(refused) == "not this one"
    assert crashed.status == 500 and str(crashed) == "RuntimeError: the engine choked"
    assert batcher.failure is None and batcher.queued == 0


def test_a_job_whose_client_left_is_dropped():
    batcher = Batcher(EchoEngine, OPTIONS, TOGETHER)  # never started: the job waits

    async def submit_and_leave():
        batcher.cancel(batcher.submit_job(len))

    asyncio.run(submit_and_leave())
    assert batcher.queued == 0


def test_each_sentence_is_tokenized_once_and_a_blank_one_not_at_all(engine_and_batcher):
    engine, batcher = engine_and_batcher
    engine.tokenized.clear()  # the warm-up's
    answers = asyncio.run(_answers(batcher, (["a b", " ", "c"], True), (["d"], True), ([], True)))
    assert answers == [["A B", "", "C"], ["D"], []]
    assert sorted(engine.tokenized) == ["a b", "c", "d"]


def test_a_served_sentence_meets_the_real_tokenizer_once(tiny_model_dir, monkeypatch):
    """The transformers engine behind the worker: one tokenizer call a sentence, from request to answer."""
    engine = load_engine(tiny_model_dir, EngineSettings(device="cpu"))
    calls = []
    tokenize = type(engine.tokenizer).__call__
    monkeypatch.setattr(
        type(engine.tokenizer),
        "__call__",
        lambda self, text, **kw: calls.append(text) or tokenize(self, text, **kw),
    )
    batcher = Batcher(lambda: engine, OPTIONS, TOGETHER)
    batcher.start()
    batcher.wait_until_loaded()
    calls.clear()  # the warm-up's
    try:
        requests = (["Ein Hund.", "Zwei Kinder spielen."], True), (["Eine Frau."], True)
        answers = asyncio.run(_answers(batcher, *requests))
    finally:
        batcher.stop()
    assert calls == [["Ein Hund.", "Zwei Kinder spielen."], ["Eine Frau."]]
    assert answers == [
        engine.translate(["Ein Hund.", "Zwei Kinder spielen."], OPTIONS),
        engine.translate(["Eine Frau."], OPTIONS),
    ]


class TwoBatchEngine(EchoEngine):
    """Decodes two batches at once, each slowly enough that the other worker takes the next."""

    concurrent_batches = 2

    def __init__(self):
        super().__init__()
        self.threads: set[str] = set()

    def translate_encoded(self, batch, options, batching=None):
        self.threads.add(threading.current_thread().name)
        time.sleep(0.05)
        return super().translate_encoded(batch, options, batching)


def test_an_engine_of_two_replicas_gets_two_workers_and_every_request_its_answer():
    engine = TwoBatchEngine()
    batcher = Batcher(lambda: engine, OPTIONS, BatchingSettings(max_tokens=4, max_wait_ms=0))
    batcher.start()
    batcher.wait_until_loaded()
    try:
        texts = [[f"w{index} x"] for index in range(12)]
        answers = asyncio.run(_answers(batcher, *((text, True) for text in texts)))
    finally:
        batcher.stop()
    assert answers == [[text.upper() for text in request] for request in texts]
    assert len(engine.threads) == 2 and batcher.queued == 0


@pytest.mark.parametrize("engine_class", [EchoEngine, TwoBatchEngine])
def test_a_batch_goes_once_the_clients_just_answered_are_back_not_after_the_whole_wait(engine_class):
    """Closed-loop clients (each sends its next sentence when answered): after the first batch, which waits
    `max_wait_ms` for company, no batch waits for it again (it goes once it holds as many sentences as are
    still to come back), with one worker or two, but maybe one of the last round: clients that are done look
    like clients about to come back."""
    engine = engine_class()
    wait_ms, clients, rounds = 1000, 4, 4
    batcher = Batcher(lambda: engine, OPTIONS, BatchingSettings(max_tokens=1000, max_wait_ms=wait_ms))
    batcher.start()
    batcher.wait_until_loaded()

    async def client(number: int) -> list[list[str]]:
        return [await batcher.submit([f"c{number} r{round_}"], OPTIONS).future for round_ in range(rounds)]

    async def all_clients():
        return await asyncio.gather(*(client(number) for number in range(clients)))

    started = time.monotonic()
    try:
        answers = asyncio.run(all_clients())
    finally:
        batcher.stop()
    assert answers == [[[f"C{number} R{round_}"] for round_ in range(rounds)] for number in range(clients)]
    # After the warm-up: one wait.
    assert sorted(engine.batches[1]) == [f"c{number} r0" for number in range(clients)]
    # The rule of max_wait_ms alone would take `rounds` waits; the first wait, and maybe the last, are
    # the only ones.
    assert time.monotonic() - started < (rounds - 1) * wait_ms / 1000


def test_with_fixed_wait_every_batch_waits_the_whole_max_wait():
    """`fixed_wait`: the clients just answered being back does not send the batch; each round waits."""
    engine = EchoEngine()
    wait_ms, rounds = 300, 2
    settings = BatchingSettings(max_tokens=1000, max_wait_ms=wait_ms, fixed_wait=True)
    batcher = Batcher(lambda: engine, OPTIONS, settings)
    batcher.start()
    batcher.wait_until_loaded()

    async def client() -> list[list[str]]:
        return [await batcher.submit([f"r{round_}"], OPTIONS).future for round_ in range(rounds)]

    started = time.monotonic()
    try:
        assert asyncio.run(client()) == [[f"R{round_}"] for round_ in range(rounds)]
    finally:
        batcher.stop()
    assert time.monotonic() - started >= rounds * wait_ms / 1000
