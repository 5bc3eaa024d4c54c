"""The translation service as clients see it: real server processes (scripts/serve.py) on free loopback
ports, huggingface_hub's InferenceClient and plain HTTP, the tiny model.

Two servers start side by side once for the module: `quick` (the default 5 ms wait) for the answers;
`patient` (a 3 s wait, so that requests sent together are certain to meet in one batch, and tight limits) for
batching and misuse, and, in the module's last test, SIGTERM. The model is conftest's sharpened one, so
answers are compared exactly.
"""

import json
import shutil
import signal
import socket
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import hypothesis
import pytest
import requests
import torch
from conftest import run_script
from hypothesis import HealthCheck, given
from hypothesis import strategies as st
from transformers import AutoConfig

from hf_vanilla.checkpoints.cards import set_decoding_defaults
from hf_vanilla.data.corpus import load_translation_split

from .conftest import BEAM, STARTUP_SECONDS, Server

pytest.importorskip("fastapi", reason="the service needs pip install 'hf_vanilla[serve]'")
pytest.importorskip("uvicorn", reason="the service needs pip install 'hf_vanilla[serve]'")
import huggingface_hub  # noqa: E402
from huggingface_hub import InferenceClient  # noqa: E402

from hf_vanilla.serving.app import GenerateParameters, RequestLimits, request_options, server_options  # noqa: E402

PATIENT = ["--max-wait-ms", "3000", "--fixed-wait", "--max-queued-sentences", "6"]
PATIENT += ["--request-max-sentences", "4"]
PATIENT += ["--request-max-characters", "300", "--request-max-beams", "4", "--request-max-new-tokens", "16"]
PATIENT += ["--request-max-attention-tokens", "12"]


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


def test_the_load_benchmark_counts_every_answer_and_the_cpu_of_each_side(servers):
    """scripts/tools/benchmark_serving.py's load: every request answered once over keep-alive connections, and
    the CPU time a request of its clients and of the server (read from /proc, as Linux gives it)."""
    from benchmark_serving import in_calls_of, load

    run = load(servers["quick"], ["Ein Hund.", "Zwei Katzen spielen."], 6, 2, {"num_beams": 2})
    assert (run["requests"], run["errors"], run["lost"], run["first_problems"]) == (6, 0, 0, [])
    assert run["client_cpu_ms_a_request"] > 0
    assert run["server_cpu_ms_a_request"] > 0  # the server decoded: more than /proc's 10 ms ticks in all
    calls = []
    in_calls_of(2, calls.append)(list("abcde"))
    assert calls == [["a", "b"], ["c", "d"], ["e"]]


def test_requests_decode_with_the_checkpoints_choice_unless_they_choose(served_model_dir, tmp_path):
    checkpoint = Path(shutil.copytree(served_model_dir, tmp_path / "checkpoint"))
    set_decoding_defaults(checkpoint, 2, 1.0)
    base = server_options(checkpoint)
    assert (base.num_beams, base.length_penalty, base.max_new_tokens) == (2, 1.0, None)

    def asked(options=base, **parameters):
        return request_options(options, GenerateParameters(**parameters), RequestLimits(), room=100)

    assert asked() == base
    assert (asked(num_beams=3).num_beams, asked(num_beams=3).length_penalty) == (3, 1.0)
    assert (asked(length_penalty=2.0).num_beams, asked(length_penalty=2.0).length_penalty) == (2, 2.0)
    assert (asked(num_beams=1, length_penalty=2.0).num_beams, asked(num_beams=1).length_penalty) == (1, None)
    set_decoding_defaults(checkpoint, 1, None)
    greedy = server_options(checkpoint)
    assert (greedy.num_beams, greedy.length_penalty) == (1, None)
    assert asked(greedy, num_beams=4).length_penalty == 0.6  # none saved: the paper's


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


BAD_REQUESTS = [
    (b'{"inputs": "Ein Hund",', 400, "malformed JSON: "),
    ({"inputs": 3}, 400, "inputs: must be a string or a list of strings"),
    ({"inputs": ["Ein Hund", 2]}, 400, "inputs: must be a string or a list of strings"),
    ({"text": "Ein Hund"}, 400, "inputs: Field required"),
    ({"inputs": "x", "parameters": {"generate_parameters": {"num_beams": "2"}}}, 400, "num_beams: "),
    ({"inputs": "x", "parameters": {"generate_parameters": {"num_beams": 0}}}, 400, "num_beams: "),
    ({"inputs": "x", "parameters": {"generate_parameters": {"top_k": 5}}}, 400, "top_k: Extra inputs"),
    ({"inputs": "x", "parameters": {"beams": 2}}, 400, "parameters.beams: Extra inputs"),
    (b'{"inputs": "tea \\ud800 cup"}', 400, "inputs holds a lone surrogate ('\\ud800') at character 4"),
    (b'{"inputs": ["a", "\\udfff"]}', 400, "inputs[1] holds a lone surrogate"),
    (
        b'{"inputs": "x", "parameters": {"generate_parameters": {"length_penalty": NaN}}}',
        400,
        "length_penalty",
    ),
    (b'{"inputs": "x", "parameters": {"generate_parameters": {"length_penalty": -Infinity}}}', 400, "length"),
    ({"inputs": "x", "parameters": {"generate_parameters": {"length_penalty": 1e308}}}, 400, "less than or"),
    (
        {"inputs": "x", "parameters": {"generate_parameters": {"num_beams": 10**20}}},
        422,
        "(--request-max-beams)",
    ),
    (b"[" * 100_000 + b"]" * 100_000, 413, "the request body is over this server's 7708 bytes"),
    (b'{"inputs": ' + b"[" * 1500 + b"]" * 1500 + b"}", 400, "malformed JSON: nested too deeply"),
    (b'{"inputs": "caf\xe9"}', 400, "malformed JSON: the body is not UTF-8"),
    (
        {"inputs": "x", "parameters": {"src_lang": "fr"}},
        422,
        "src_lang 'fr': this server translates de -> en",
    ),
    (
        {"inputs": "x", "parameters": {"tgt_lang": "de"}},
        422,
        "tgt_lang 'de': this server translates de -> en",
    ),
    ({"inputs": "x", "parameters": {"truncation": "cut"}}, 400, "parameters.truncation: Input should be"),
    ({"inputs": "x", "options": {"use_gpu": True}}, 400, "options.use_gpu: Extra inputs"),
    ({"inputs": ["Ein Hund"] * 5}, 413, "5 sentences in one request, this server takes at most 4"),
    (
        {"inputs": ["x" * 200, "y" * 101]},
        413,
        "301 characters in one request, this server takes at most 300",
    ),
    (
        {"inputs": "x", "parameters": {"generate_parameters": {"num_beams": 5}}},
        422,
        "limit of 4 (--request-max-beams)",
    ),
    (
        {"inputs": "x", "parameters": {"generate_parameters": {"max_new_tokens": 17}}},
        422,
        "max_new_tokens 17 is over this server's limit of 16",
    ),
]
BAD_ATTENTION_REQUESTS = [
    ({"inputs": ["Ein Hund"]}, 400, "inputs: Input should be a valid string"),
    ({"inputs": " \n"}, 400, "inputs: the sentence is blank: send one to translate"),
    (b'{"inputs": "tea \\ud800 cup"}', 400, "inputs holds a lone surrogate"),
    ({"inputs": "x", "parameters": {"heads": "yes"}}, 400, "parameters.heads: Input should be a valid"),
    ({"inputs": "x" * 301}, 413, "301 characters in one request, this server takes at most 300"),
    (
        {"inputs": "x", "parameters": {"generate_parameters": {"num_beams": 5}}},
        422,
        "limit of 4 (--request-max-beams)",
    ),
    (
        {"inputs": "Zwei junge Männer stehen am Ufer eines breiten Flusses."},
        422,
        "over the 12 this server shows attention for (--request-max-attention-tokens): send a shorter "
        "sentence",
    ),
]


@pytest.mark.parametrize(
    ("path", "body", "status", "message"),
    [("/", *case) for case in BAD_REQUESTS] + [("/attention", *case) for case in BAD_ATTENTION_REQUESTS],
)
def test_a_bad_request_gets_its_status_and_one_line(servers, path, body, status, message):
    patient = servers["patient"]
    content = body if isinstance(body, bytes) else json.dumps(body).encode()
    answer = requests.post(
        f"{patient.url}{path}", data=content, headers={"Content-Type": "application/json"}, timeout=10
    )
    assert answer.status_code == status
    line = answer.json()["error"]
    assert message in line and "\n" not in line
    assert patient.stats()["queued"] == 0


def test_attention_comes_with_the_translation_post_gives_rows_summing_to_one(servers, offline, sentences):
    quick = servers["quick"]
    for settings, heads in (({}, True), ({"num_beams": 1}, False)):
        answer = quick.attention(sentences[0], heads, **settings)
        assert answer.status_code == 200, answer.text
        attention = answer.json()
        assert attention["translation_text"] == offline(sentences[:1], **{**BEAM, **settings})[0]
        assert ("cross_attention_heads" in attention) == heads
        assert attention["translation_engine"] == attention["attention_engine"] == "transformers"
    sources, outputs = len(attention["source_tokens"]), len(attention["output_tokens"])
    assert attention["source_tokens"][-1] == "</s>" and outputs >= 1
    greedy = quick.attention(sentences[0], True, num_beams=1).json()
    every_head = torch.tensor(greedy["cross_attention_heads"])
    layers = torch.tensor(attention["cross_attention"])
    assert every_head.shape == (2, attention["num_heads"], outputs, sources)  # the tiny model's 2 layers
    torch.testing.assert_close(every_head.sum(-1), torch.ones(every_head.shape[:3]), atol=1e-3, rtol=0)
    torch.testing.assert_close(every_head.mean(1), layers, atol=1e-3, rtol=0)


def test_the_translation_tasks_documented_parameters_are_taken(servers, offline, sentences):
    patient = servers["patient"]
    parameters = {
        "src_lang": "de",
        "tgt_lang": "en",
        "truncation": "longest_first",
        "clean_up_tokenization_spaces": False,
    }
    options = {"use_cache": False, "wait_for_model": True}
    payload = {"inputs": sentences[:2], "parameters": parameters, "options": options}
    answer = requests.post(patient.url, json=payload, timeout=30)
    assert answer.status_code == 200, answer.text
    assert [row["translation_text"] for row in answer.json()] == offline(sentences[:2], **BEAM)
    payload["parameters"] = {"clean_up_tokenization_spaces": True}
    cleaned = requests.post(patient.url, json=payload, timeout=30)
    assert cleaned.status_code == 200, cleaned.text
    assert [row["translation_text"] for row in cleaned.json()] == offline(
        sentences[:2], **BEAM, clean_up_tokenization_spaces=True
    )


def test_a_source_too_long_to_cut_is_refused_with_do_not_truncate(servers, served_model_dir):
    patient = servers["patient"]
    positions = AutoConfig.from_pretrained(served_model_dir).max_position_embeddings
    long_text = "😀" * 280  # within the 300 characters a request may send, each character four byte tokens
    payload = {"inputs": ["Ein Hund", long_text], "parameters": {"truncation": "do_not_truncate"}}
    answer = requests.post(patient.url, json=payload, timeout=30)
    assert answer.status_code == 422
    assert answer.json()["error"].startswith("inputs[1] is ")
    assert f"over the model's {positions} positions" in answer.text
    payload["parameters"] = {"truncation": "only_first", "generate_parameters": {"max_new_tokens": 8}}
    assert requests.post(patient.url, json=payload, timeout=30).status_code == 200


def test_every_error_has_the_one_line_shape(servers):
    quick = servers["quick"]
    for answer in (requests.get(f"{quick.url}/nowhere", timeout=5), requests.put(quick.url, timeout=5)):
        assert answer.status_code in (404, 405) and "\n" not in answer.json()["error"]


def test_an_oversized_body_is_refused_before_it_is_read_and_memory_stays_flat(servers):
    quick = servers["quick"]
    peak_before = peak_memory_kb(quick.process.pid)
    chunk = b"x" * (1 << 20)

    def stream(megabytes):
        yield b'{"inputs": "'
        for _ in range(megabytes):
            yield chunk
        yield b'"}'

    # declared: refused on the header alone; chunked (no length said): refused once the bytes pass the limit
    declared = requests.post(quick.url, data=b"[" * (300 << 20), timeout=60)
    assert declared.status_code == 413
    assert "the request body is over this server's" in declared.json()["error"]
    try:
        chunked = requests.post(quick.url, data=stream(300), timeout=60)
        assert chunked.status_code == 413
    except requests.ConnectionError:  # the server answered and closed while the client was still sending
        pass
    assert peak_memory_kb(quick.process.pid) - peak_before < 50_000
    assert quick.translate("Ein Hund").status_code == 200


def peak_memory_kb(pid: int) -> int:
    status = Path(f"/proc/{pid}/status").read_text()
    return int(next(line.split()[1] for line in status.splitlines() if line.startswith("VmHWM:")))


def test_a_path_without_a_checkpoint_is_one_line_before_the_server_starts(tmp_path):
    finished = run_script("serve.py", tmp_path / "none", "--device", "cpu")
    assert finished.returncode == 1 and "Traceback" not in finished.stderr
    last_line = finished.stderr.splitlines()[-1]
    assert last_line.startswith(f"error: cannot load a model and tokenizer from '{tmp_path / 'none'}'")


def test_a_model_that_cannot_load_makes_health_fail_and_the_process_exit_1(served_model_dir, tmp_path):
    broken = tmp_path / "broken"
    broken.mkdir()
    for file in served_model_dir.iterdir():
        (broken / file.name).write_bytes(file.read_bytes())
    (broken / "model.safetensors").write_bytes(b"not weights")
    server = Server(broken, tmp_path / "broken.log")
    try:
        assert server.process.wait(timeout=STARTUP_SECONDS) == 1
    finally:
        server.kill()
    log = server.log.read_text()
    assert "error: the model failed to load: " in log and "truncated or corrupt" in log


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


# Generated requests, valid and not: the Inference API's keys with values of every JSON type, text of every
# Unicode character (lone surrogates and control characters included), numbers at the edges of float, nesting,
# extra keys.
_json_leaf = (
    st.none()
    | st.booleans()
    | st.integers(min_value=-(2**70), max_value=2**70)
    | st.floats(allow_nan=True, allow_infinity=True)
    | st.text(st.characters(codec=None, exclude_categories=()), max_size=40)
)
_json = st.recursive(
    _json_leaf,
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=8), inner, max_size=3),
    max_leaves=12,
)
_character = st.characters(codec=None, exclude_categories=())
# Short texts, and texts over the server's 20,000 characters (a long text that fits would take minutes to
# decode)
_text = st.text(_character, max_size=60) | st.builds(str.__mul__, _character, st.integers(20_001, 60_000))
_generate_parameters = st.fixed_dictionaries(
    {},
    optional={
        "num_beams": st.integers(min_value=-3, max_value=12) | _json_leaf,
        "length_penalty": st.floats(allow_nan=True, allow_infinity=True) | _json_leaf,
        "max_new_tokens": st.integers(min_value=-3, max_value=2**40) | _json_leaf,
        "temperature": _json_leaf,
    },
)
_parameters = st.fixed_dictionaries(
    {},
    optional={
        "generate_parameters": _generate_parameters | _json,
        "src_lang": st.sampled_from(["de", "en", "fr"]) | _json_leaf,
        "tgt_lang": st.sampled_from(["de", "en", "fr"]) | _json_leaf,
        "truncation": (
            st.sampled_from(["do_not_truncate", "longest_first", "only_first", "only_second"]) | _json_leaf
        ),
        "clean_up_tokenization_spaces": _json_leaf,
    },
)
_options = st.fixed_dictionaries({}, optional={"wait_for_model": _json_leaf, "use_cache": _json_leaf})
# Requests shaped as the schema says, with values at its edges, and requests of any shape
_requests = st.fixed_dictionaries(
    {"inputs": _text | st.lists(_text, max_size=5)}, optional={"parameters": _parameters, "options": _options}
) | st.fixed_dictionaries(
    {},
    optional={
        "inputs": _text | st.lists(_text, max_size=5) | _json,
        "parameters": _parameters | _json,
        "options": _options | _json,
        "extra": _json,
    },
)


@hypothesis.settings(
    max_examples=200, deadline=None, suppress_health_check=list(HealthCheck), derandomize=True
)
@given(payload=_requests)
def test_fuzz_any_request_is_answered_200_or_4xx_with_one_line(fuzzed_server, payload):
    # json.dumps writes NaN and Infinity as Python's parser (and so FastAPI's) reads them, lone surrogates as
    # \ud800
    answer = requests.post(
        fuzzed_server.url, data=json.dumps(payload), headers={"Content-Type": "application/json"}, timeout=60
    )
    hypothesis.event(f"status {answer.status_code}")  # pytest --hypothesis-show-statistics counts them
    assert answer.status_code == 200 or 400 <= answer.status_code < 500, (answer.status_code, answer.text)
    if answer.status_code == 200:
        texts = [payload["inputs"]] if isinstance(payload["inputs"], str) else payload["inputs"]
        assert [set(row) for row in answer.json()] == [{"translation_text"}] * len(texts)
    else:
        line = answer.json()["error"]
        assert isinstance(line, str) and line and "\n" not in line


# /attention's requests: one text, the translation's parameters and `heads`, and requests of any shape
_attention_requests = st.fixed_dictionaries(
    {"inputs": _text},
    optional={
        "parameters": st.fixed_dictionaries(
            {}, optional={"generate_parameters": _generate_parameters | _json, "heads": _json_leaf}
        )
    },
) | st.fixed_dictionaries({}, optional={"inputs": _text | _json, "parameters": _json, "extra": _json})


@hypothesis.settings(
    max_examples=60, deadline=None, suppress_health_check=list(HealthCheck), derandomize=True
)
@given(payload=_attention_requests)
def test_fuzz_any_attention_request_is_answered_200_or_4xx_with_one_line(fuzzed_server, payload):
    answer = requests.post(
        f"{fuzzed_server.url}/attention",
        data=json.dumps(payload),
        headers={"Content-Type": "application/json"},
        timeout=60,
    )
    hypothesis.event(f"status {answer.status_code}")
    assert answer.status_code == 200 or 400 <= answer.status_code < 500, (answer.status_code, answer.text)
    if answer.status_code == 200:
        attention = answer.json()
        rows = torch.tensor(attention["cross_attention"]).sum(-1)
        torch.testing.assert_close(rows, torch.ones_like(rows), atol=1e-3, rtol=0)
        assert len(attention["output_tokens"]) == rows.shape[1]
    else:
        line = answer.json()["error"]
        assert isinstance(line, str) and line and "\n" not in line


@pytest.fixture(scope="module")
def fuzzed_server(servers, offline, sentences):
    """The quick server, checked to answer a plain request correctly after the fuzz test."""
    quick = servers["quick"]
    yield quick
    assert quick.translate(sentences[0]).json()[0]["translation_text"] == offline(sentences[:1], **BEAM)[0]
    assert requests.get(f"{quick.url}/health", timeout=5).json() == {"status": "ok"}


def test_the_ctranslate2_engine_serves_what_generate_answers_batched_and_drains_on_sigterm(
    served_model_dir, offline, sentences, tmp_path
):
    """scripts/serve.py --engine ctranslate2 (float32): the same answers as `translate_sentences`, requests
    sent together in one batch, the checkpoint's defaults and limits, attention from the reference model
    loaded beside it, a drained SIGTERM."""
    pytest.importorskip("ctranslate2")
    engine = ("--engine", "ctranslate2", "--compute-type", "float32")
    engine += ("--ctranslate2-dir", str(tmp_path / "ct2"))
    server = Server(served_model_dir, tmp_path / "ctranslate2.log", *PATIENT, *engine)
    try:
        server.wait_until_ready(STARTUP_SECONDS)
        assert "ctranslate2 engine: float32 on cpu (asked for)" in server.log.read_text()
        with ThreadPoolExecutor(len(sentences)) as pool:
            answers = list(pool.map(lambda text: server.translate(text, num_beams=2), sentences[:4]))
        expected = offline(sentences[:4], num_beams=2, length_penalty=0.6)
        assert [answer.json()[0]["translation_text"] for answer in answers] == expected
        assert server.stats()["batches"] == 1 and "batch: 4 sentences" in server.batch_lines()[-1]
        defaults, greedy = server.translate(sentences[:2]), server.translate(sentences[:2], num_beams=1)
        assert [item["translation_text"] for item in defaults.json()] == offline(sentences[:2], **BEAM)
        assert [item["translation_text"] for item in greedy.json()] == offline(sentences[:2], num_beams=1)
        over = server.translate("Ein Hund.", num_beams=8)
        assert over.status_code == 422 and list(over.json()) == ["error"]
        assert "--request-max-beams" in over.json()["error"]
        check_attention_from_the_model_beside(server)
        with ThreadPoolExecutor(2) as pool:
            requests_in_flight = (["Ein Hund"], ["Eine Frau", "Ein Mann"])
            in_flight = [pool.submit(server.translate, inputs) for inputs in requests_in_flight]
            server.wait_for_queued(3)
            server.process.send_signal(signal.SIGTERM)
            assert [len(future.result().json()) for future in in_flight] == [1, 2]
        assert server.process.wait(timeout=30) == 0
    finally:
        server.kill()


def check_attention_from_the_model_beside(server: Server) -> None:
    """The ctranslate2 server's attention: the reference model, loaded on the first request for it and only
    once, weighs the translation POST / gives (CTranslate2 gives one layer's attention, not each layer's
    heads)."""
    assert "loaded beside the serving engine" not in server.log.read_text()
    translated = server.translate("Ein Hund.", num_beams=2).json()[0]["translation_text"]
    answers = {heads: server.attention("Ein Hund.", heads, num_beams=2) for heads in (True, False)}
    for answer in answers.values():
        assert answer.status_code == 200, answer.text
        assert answer.json()["translation_text"] == translated
        engines = answer.json()["translation_engine"], answer.json()["attention_engine"]
        assert engines == ("ctranslate2", "transformers")
    attention = answers[True].json()
    every_head = torch.tensor(attention["cross_attention_heads"])
    outputs, sources = len(attention["output_tokens"]), len(attention["source_tokens"])
    assert every_head.shape == (2, attention["num_heads"], outputs, sources)  # the tiny model's 2 layers
    torch.testing.assert_close(every_head.sum(-1), torch.ones(every_head.shape[:3]), atol=1e-3, rtol=0)
    assert server.log.read_text().count("loaded beside the serving engine") == 1
