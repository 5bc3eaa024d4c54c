"""The translation service as clients see it: real server processes (scripts/serve.py) on free loopback ports,
huggingface_hub's InferenceClient and plain HTTP, the tiny model.

Two servers start side by side once for the module: `quick` (the default 5 ms wait) for the answers; `patient`
(a 3 s wait, so that requests sent together are certain to meet in one batch, and tight limits) for batching and
misuse, and, in the module's last test, SIGTERM. The model is sharpened, as a trained model's outputs are peaked: beam search then
has clear winners, and a batch of another shape cannot flip one by float rounding, so answers are compared exactly.
"""

import json
import signal
import socket
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest
import requests
from conftest import sharpened
from transformers import AutoModelForSeq2SeqLM

from hf_vanilla.corpus import load_translation_split
from hf_vanilla.translation import load_model_and_tokenizer, translate_sentences

pytest.importorskip("fastapi", reason="the service needs pip install 'hf_vanilla[serve]'")
pytest.importorskip("uvicorn", reason="the service needs pip install 'hf_vanilla[serve]'")
import huggingface_hub  # noqa: E402
from huggingface_hub import InferenceClient  # noqa: E402

from hf_vanilla.serving.process import ServerProcess  # noqa: E402

PATIENT = ["--max-wait-ms", "3000", "--max-queued-sentences", "6", "--max-sentences", "4"]
PATIENT += ["--max-characters", "300", "--max-beams", "4", "--max-new-tokens", "16"]
STARTUP_SECONDS = 180  # two processes importing torch at once on a busy 2-core machine (20 s when idle)
BEAM = {"num_beams": 4, "length_penalty": 0.6}  # what the model's generation_config.json says


class Server(ServerProcess):
    """scripts/serve.py in its own process, with the clients' side of the tests."""

    def __init__(self, model_dir: Path, log: Path, *flags: str):
        super().__init__(model_dir, log, ("--device", "cpu", *flags))

    def stats(self) -> dict[str, int]:
        return requests.get(f"{self.url}/stats", timeout=5).json()

    def wait_for_queued(self, sentences: int) -> None:
        deadline = time.monotonic() + 10
        while self.stats()["queued"] != sentences:
            assert time.monotonic() < deadline, f"never {sentences} sentences queued: {self.stats()}"
            time.sleep(0.05)

    def translate(self, inputs, timeout=30, **generate_parameters) -> requests.Response:
        payload = {"inputs": inputs, "parameters": {"generate_parameters": generate_parameters}}
        return requests.post(self.url, json=payload, timeout=timeout)

    def kill(self) -> None:
        if self.process.poll() is None:
            self.process.kill()
            self.process.wait()


@pytest.fixture(scope="module")
def served_model_dir(tiny_model_dir, tmp_path_factory) -> Path:
    """The tiny model sharpened, saved with its tokenizer and a generation config of beam 4, penalty 0.6."""
    directory = tmp_path_factory.mktemp("served")
    for name in ("tokenizer.json", "tokenizer_config.json"):
        (directory / name).write_bytes((tiny_model_dir / name).read_bytes())
    model = sharpened(AutoModelForSeq2SeqLM.from_pretrained(tiny_model_dir))
    model.generation_config.num_beams, model.generation_config.length_penalty = BEAM.values()
    model.save_pretrained(directory)
    return directory


@pytest.fixture(scope="module")
def servers(served_model_dir, tmp_path_factory):
    logs = tmp_path_factory.mktemp("server-logs")
    started = {
        "quick": Server(served_model_dir, logs / "quick.log"),
        "patient": Server(served_model_dir, logs / "patient.log", *PATIENT),
    }
    try:
        for server in started.values():
            server.wait_until_ready(STARTUP_SECONDS)
        yield started
    finally:
        for server in started.values():
            server.kill()


@pytest.fixture(scope="module")
def offline(served_model_dir):
    """The same model loaded in this process, for `translate_sentences`' answers."""
    model, tokenizer = load_model_and_tokenizer(served_model_dir, "cpu")

    def translate(sources, **settings):
        return translate_sentences(model, tokenizer, sources, show_progress=False, **settings)

    return translate


@pytest.fixture(scope="module")
def sentences(corpus_path) -> list[str]:
    return load_translation_split(corpus_path, "de", "en", "validation")["source"][:6]


def test_inference_client_and_plain_http_answer_as_translate_sentences(
    servers, offline, sentences, monkeypatch
):
    quick = servers["quick"]
    # conftest's HF_HUB_OFFLINE keeps the tests off the Hub; the client would refuse loopback with it too.
    monkeypatch.setattr(huggingface_hub.constants, "HF_HUB_OFFLINE", False)
    client = InferenceClient(model=quick.url)
    # The checkpoint's generation config decides without generate_parameters: beam 4, length penalty 0.6.
    assert client.translation(sentences[0]).translation_text == offline(sentences[:1], **BEAM)[0]
    greedy = client.translation(sentences[1], generate_parameters={"num_beams": 1})
    assert greedy.translation_text == offline(sentences[1:2], num_beams=1)[0]
    for settings in ({"num_beams": 1}, {"num_beams": 2, "length_penalty": 1.0}, {"max_new_tokens": 5}):
        answer = quick.translate(sentences, **settings)
        assert answer.status_code == 200, answer.text
        expected = offline(sentences, **{**BEAM, **settings})
        assert [item["translation_text"] for item in answer.json()] == expected
    assert len(set(expected)) > 1  # the sentences translate differently: order is checked
    assert quick.translate([]).json() == []


def test_health_ready_and_the_openapi_page(servers):
    quick = servers["quick"]
    assert requests.get(f"{quick.url}/health", timeout=5).json() == {"status": "ok"}
    assert requests.get(f"{quick.url}/ready", timeout=5).json() == {"status": "ready"}
    assert "/" in requests.get(f"{quick.url}/openapi.json", timeout=5).json()["paths"]
    assert requests.get(f"{quick.url}/docs", timeout=5).status_code == 200


def test_requests_sent_together_share_one_generate_call(servers, offline, sentences):
    patient = servers["patient"]
    before = patient.stats()
    with ThreadPoolExecutor(len(sentences)) as pool:
        answers = list(pool.map(lambda text: patient.translate(text, num_beams=2), sentences))
    assert [answer.json()[0]["translation_text"] for answer in answers] == offline(
        sentences, num_beams=2, length_penalty=0.6
    )
    after = patient.stats()
    assert after["batches"] - before["batches"] == 1
    assert after["largest_batch"] == len(sentences)
    assert f"batch: {len(sentences)} sentences" in patient.batch_lines()[-1]


@pytest.mark.parametrize(
    ("body", "status", "message"),
    [
        (b'{"inputs": "Ein Hund",', 400, "malformed JSON: "),
        ({"inputs": 3}, 400, "inputs: must be a string or a list of strings"),
        ({"inputs": ["Ein Hund", 2]}, 400, "inputs: must be a string or a list of strings"),
        ({"text": "Ein Hund"}, 400, "inputs: Field required"),
        ({"inputs": "x", "parameters": {"generate_parameters": {"num_beams": "2"}}}, 400, "num_beams: "),
        ({"inputs": "x", "parameters": {"generate_parameters": {"num_beams": 0}}}, 400, "num_beams: "),
        ({"inputs": "x", "parameters": {"generate_parameters": {"top_k": 5}}}, 400, "top_k: Extra inputs"),
        ({"inputs": ["Ein Hund"] * 5}, 413, "5 sentences in one request, this server takes at most 4"),
        (
            {"inputs": ["x" * 200, "y" * 101]},
            413,
            "301 characters in one request, this server takes at most 300",
        ),
        (
            {"inputs": "x", "parameters": {"generate_parameters": {"num_beams": 5}}},
            422,
            "limit of 4 (max_beams)",
        ),
        (
            {"inputs": "x", "parameters": {"generate_parameters": {"max_new_tokens": 17}}},
            422,
            "max_new_tokens 17 is over this server's limit of 16",
        ),
    ],
)
def test_a_bad_request_gets_its_status_and_one_line(servers, body, status, message):
    patient = servers["patient"]
    content = body if isinstance(body, bytes) else json.dumps(body).encode()
    answer = requests.post(
        patient.url, data=content, headers={"Content-Type": "application/json"}, timeout=10
    )
    assert answer.status_code == status
    line = answer.json()["error"]
    assert message in line and "\n" not in line
    assert patient.stats()["queued"] == 0


def test_a_full_queue_is_refused_at_once_with_retry_after(servers):
    patient = servers["patient"]
    with ThreadPoolExecutor(1) as pool:
        waiting = pool.submit(patient.translate, ["Ein Hund", "Eine Frau", "Ein Mann", "Zwei Kinder"])
        patient.wait_for_queued(4)
        started = time.monotonic()
        refused = patient.translate(["Ein Hund", "Eine Frau", "Ein Mann"])
        assert time.monotonic() - started < 1  # long before the 3 s wait of the queued ones is over
        assert refused.status_code == 503 and refused.headers["Retry-After"] == "1"
        assert "the queue is full: 4 sentences are waiting, at most 6 may" in refused.json()["error"]
        assert waiting.result().status_code == 200 and len(waiting.result().json()) == 4
    assert patient.stats()["refused_sentences"] >= 3


def test_a_client_that_leaves_has_its_sentences_dropped_and_the_worker_goes_on(servers):
    patient = servers["patient"]
    before = patient.stats()
    body = json.dumps({"inputs": ["Ein Hund", "Eine Frau", "Ein Mann"]}).encode()
    host, port = patient.url.removeprefix("http://").split(":")
    with socket.create_connection((host, int(port))) as leaving:
        leaving.sendall(
            b"POST / HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
            + f"Content-Length: {len(body)}\r\n\r\n".encode()
            + body
        )
        patient.wait_for_queued(3)
    patient.wait_for_queued(0)  # dropped when the connection closed, before their batch was due
    assert patient.translate("Eine Katze").status_code == 200
    assert patient.stats()["sentences"] - before["sentences"] == 1


def test_sigterm_stops_accepting_answers_every_accepted_request_and_exits_0(servers):
    """The module's last test: it stops the patient server."""
    stopped = servers["patient"]
    texts = [["Ein Hund"], ["Eine Frau", "Ein Mann"], ["Zwei Kinder", "Eine Katze", "Ein Ball"]]
    with ThreadPoolExecutor(len(texts)) as pool:
        in_flight = [pool.submit(stopped.translate, inputs) for inputs in texts]
        stopped.wait_for_queued(6)
        stopped.process.send_signal(signal.SIGTERM)
        time.sleep(0.5)
        with pytest.raises(requests.ConnectionError):  # no longer accepting, though still answering
            stopped.translate("Ein Vogel", timeout=5)
        answers = [future.result() for future in in_flight]
    assert [answer.status_code for answer in answers] == [200, 200, 200]
    assert [len(answer.json()) for answer in answers] == [1, 2, 3]
    assert stopped.process.wait(timeout=30) == 0
    assert "batch: 6 sentences" in stopped.batch_lines()[-1]
