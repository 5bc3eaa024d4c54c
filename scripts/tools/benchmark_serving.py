"""Load benchmark of the translation service on a trained checkpoint, beside the engine's ceilings, in one
run: at each thread count, for one engine,

  (a) CTranslate2's own `translate_batch` on the converted model (the ctranslate2 engine's ceiling),
  (b) offline decoding by the engine (`translate`), in length-sorted batches (the service's ceiling), and the
      same given N sentences a call in their order, for each N of --clients above 1 (the most N clients
      waiting each for its answer can have decoded at once: the service's ceiling at that load),
  (c) the service under 1, 32 and 128 concurrent clients on 127.0.0.1, one sentence a request:
      sentences/s, p50/p95/p99 latency, errors and lost requests, and the CPU time a request of the clients
      (this process, on the standard library's HTTP client) and of the server (which includes decoding),

all timed on the wall clock, as a client sees it; the ratios between them are what a shared machine
disturbs least (every run here takes its turn on the same cores).

    python scripts/tools/benchmark_serving.py outputs/multi30k-small-de-en/checkpoint_best \\
        --dataset bentrevett/multi30k --source-lang de --target-lang en \\
        --engine ctranslate2 --compute-type int8 --thread-counts 1 2 --clients 1 32 128

A checkpoint whose model card records no validation BLEU (an untrained or random model, which decodes every
sentence to its length limit) is refused: its speed says nothing of a trained model's; --allow-untrained
measures it anyway. Writes a JSON report (the command, the CPU, the load on it, the settings, each run) to
--output.
"""

import http.client
import json
import os
import statistics
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import numpy as np
from _server_process import ServerProcess  # beside this script

from hf_vanilla.checkpoints.loading import decoding_for, load_tokenizer
from hf_vanilla.cli import (
    ArgumentParser,
    add_beam_arguments,
    add_dataset_arguments,
    add_logging_argument,
    add_max_new_tokens_argument,
    add_max_tokens_argument,
    add_model_argument,
    configure_logging,
    decoding_options,
    exits_on_missing_extra,
    positive_int,
    translation_data,
)
from hf_vanilla.extras import require
from hf_vanilla.files import write_json
from hf_vanilla.model.decoding import DecodingOptions, decoding_report
from hf_vanilla.serving.batching import DEFAULT_BATCHING
from hf_vanilla.tools.benchmark import recorded_validation_bleu
from hf_vanilla.tools.machine import run_record
from hf_vanilla.translation.decoding import Batching
from hf_vanilla.translation.engines import COMPUTE_TYPES, EngineSettings, engine_names, load_engine

STARTUP_SECONDS = 300


def decoding(args) -> dict:
    """The decoding of every run, as a request's generate_parameters: `args.decoding`, resolved in `main`."""
    return args.decoding.generate_kwargs()


def engine_settings(args, threads: int | None = None, workdir: Path | None = None) -> EngineSettings:
    return EngineSettings(
        args.engine, "cpu", compute_type=args.compute_type or "auto", ctranslate2_dir=workdir,
        threads=threads, inter_threads=args.inter_threads,
    )  # fmt: skip


def server_flags(args, settings: EngineSettings) -> tuple[str, ...]:
    """serve.py's flags for `settings` and the batching asked for."""
    inter_threads = ("--inter-threads", str(settings.inter_threads)) if settings.inter_threads else ()
    return (
        "--engine", settings.engine, "--compute-type", settings.compute_type,
        "--ctranslate2-dir", str(settings.ctranslate2_dir),
        "--threads", str(settings.threads), *inter_threads,
        "--max-tokens", str(args.max_tokens), "--max-wait-ms", str(args.max_wait_ms),
    )  # fmt: skip


def build_parser() -> ArgumentParser:
    parser = ArgumentParser(description=__doc__)
    add_model_argument(parser)
    add_dataset_arguments(parser)
    parser.add_argument("--split", default="test", help="the split whose sources are translated and sent")
    parser.add_argument("--engine", choices=engine_names(), required=True, help="the engine measured")
    parser.add_argument(
        "--compute-type",
        choices=COMPUTE_TYPES,
        default=None,
        help="the ctranslate2 engine's weights_activations; given, CTranslate2's own translate_batch is "
        "measured too",
    )
    parser.add_argument(
        "--thread-counts", nargs="+", type=positive_int, default=[1, 2], help="CPU threads, a run each"
    )
    parser.add_argument(
        "--inter-threads",
        type=positive_int,
        default=None,
        help="the ctranslate2 engine's (default: its rule)",
    )
    parser.add_argument(
        "--clients",
        nargs="+",
        type=positive_int,
        default=[1, 32, 128],
        help="concurrent clients, a load each",
    )
    parser.add_argument(
        "--requests", type=positive_int, default=10_000, help="requests of each load of more than one client"
    )
    parser.add_argument(
        "--requests-alone", type=positive_int, default=200, help="requests of a load of one client"
    )
    add_beam_arguments(parser)
    add_max_tokens_argument(parser)
    parser.add_argument(
        "--max-wait-ms", type=float, default=DEFAULT_BATCHING.max_wait_ms, help="the service's batching wait"
    )
    add_max_new_tokens_argument(parser)
    parser.add_argument(
        "--repeats", type=positive_int, default=3, help="timings of each offline decoding, taken in turn"
    )
    parser.add_argument("--offline-only", action="store_true", help="decode offline only, no service")
    parser.add_argument(
        "--allow-untrained", action="store_true", help="measure a checkpoint that records no validation BLEU"
    )
    parser.add_argument(
        "--output", default="docs/benchmarks/serving.json", help="the JSON report (the CPU named in it)"
    )
    add_logging_argument(parser)
    return parser


def latency_summary(seconds: list[float], wall: float, sentences: int) -> dict:
    milliseconds = np.asarray(seconds) * 1000
    return {
        "sentences_per_second": round(sentences / wall, 2),
        "seconds": round(wall, 2),
        **{f"p{q}_ms": round(float(np.percentile(milliseconds, q)), 1) for q in (50, 95, 99)},
    }


class Client:
    """One keep-alive connection that posts JSON: the standard library's, the lightest a Python client has, so
    that the load costs the shared cores little (its CPU time is reported beside the server's)."""

    def __init__(self, url: str):
        host, port = url.removeprefix("http://").split(":")
        self.connection = http.client.HTTPConnection(host, int(port), timeout=600)

    def post(self, body: dict) -> tuple[int, bytes]:
        try:
            self.connection.request("POST", "/", json.dumps(body), {"Content-Type": "application/json"})
            answer = self.connection.getresponse()
            return answer.status, answer.read()
        except (OSError, http.client.HTTPException):
            self.connection.close()  # the next request opens a new connection
            raise


def load(
    server: ServerProcess, sentences: list[str], requests_count: int, clients: int, parameters: dict
) -> dict:
    """`clients` threads, each with its own keep-alive connection, send request i = sentence i mod len until
    `requests_count` are sent: errors (a status other than 200 or an answer not of one translation) and lost
    requests (no HTTP answer at all) counted apart; the CPU time the clients (this process) and the server
    spent."""
    counter, lock = iter(range(requests_count)), threading.Lock()
    latencies: list[float] = []
    errors, lost = [], []

    def client() -> None:
        connection = Client(server.url)
        while True:
            with lock:
                index = next(counter, None)
            if index is None:
                return
            payload = {
                "inputs": sentences[index % len(sentences)],
                "parameters": {"generate_parameters": parameters},
            }
            started = time.perf_counter()
            try:
                status, body = connection.post(payload)
            except (OSError, http.client.HTTPException) as err:
                lost.append(f"{type(err).__name__}: {err}")
                continue
            latencies.append(time.perf_counter() - started)
            if status != 200 or len(json.loads(body)) != 1:
                errors.append(f"{status}: {body[:200]!r}")

    server_cpu, client_cpu, started = server.cpu_seconds(), time.process_time(), time.perf_counter()
    with ThreadPoolExecutor(clients) as pool:
        for running in [pool.submit(client) for _ in range(clients)]:
            running.result()
    wall = time.perf_counter() - started
    client_cpu = time.process_time() - client_cpu
    server_cpu = None if server_cpu is None else server.cpu_seconds() - server_cpu
    return {
        "requests": requests_count,
        **latency_summary(latencies, wall, len(latencies) - len(errors)),
        "errors": len(errors),
        "lost": len(lost),
        "first_problems": (errors + lost)[:5],
        "client_cpu_ms_a_request": round(1000 * client_cpu / requests_count, 3),
        "server_cpu_ms_a_request": None
        if server_cpu is None
        else round(1000 * server_cpu / requests_count, 3),
    }


def service_runs(args, sentences: list[str], settings: EngineSettings, workdir: Path) -> dict:
    """Start the service on `settings`, load it with each client count in turn, stop it with SIGTERM."""
    log = workdir / f"serve-{settings.threads}.log"
    server = ServerProcess(
        args.model, log, ("--device", "cpu", *server_flags(args, settings)), settings.threads
    )
    runs = {}
    try:
        server.wait_until_ready(STARTUP_SECONDS)
        for clients in args.clients:
            count = args.requests if clients > 1 else args.requests_alone
            batches_before = len(server.batch_lines())
            run = load(server, sentences, count, clients, decoding(args))
            sizes = [
                int(line.split("batch: ")[1].split()[0]) for line in server.batch_lines()[batches_before:]
            ]
            runs[f"service, {clients} clients"] = {
                **run,
                "batches": len(sizes),
                "mean_batch_sentences": round(float(np.mean(sizes)), 2),
            }
    finally:
        exit_status = server.stop()
    engine_lines = [
        line for line in server.log.read_text().splitlines() if "engine:" in line or "batches decoded" in line
    ]
    return {name: {**run, "server_exit_status": exit_status} for name, run in runs.items()} | {
        "server_log": engine_lines
    }


def offline_decoding(args, settings: EngineSettings) -> Callable[[list], object]:
    """The engine's translation of sentences, all at once, in length-sorted batches."""
    engine = load_engine(args.model, settings)
    options = DecodingOptions().replace(**decoding(args))
    batching = Batching(args.max_tokens, show_progress=False)
    return lambda batch: engine.translate(batch, options, batching)


def raw_translate_batch(args, settings: EngineSettings) -> Callable[[list], object]:
    """CTranslate2's `translate_batch` alone on the converted model, with the engine's threads: sentences
    tokenized as token strings and batched by it in the same token budget, one limit for all (256, its
    default), none of our batching or texts."""
    from hf_vanilla.translation.engines.ctranslate2_engine import cached_conversion

    ctranslate2 = require("ctranslate2", extra="ct2")
    inter_threads, intra_threads = settings.cpu_threads()
    translator = ctranslate2.Translator(
        str(cached_conversion(Path(args.model), settings.ctranslate2_dir)),
        device="cpu",
        compute_type=settings.compute_type,
        inter_threads=inter_threads,
        intra_threads=intra_threads,
    )
    tokenizer = load_tokenizer(args.model)
    chosen = args.decoding
    limit = {"max_decoding_length": chosen.max_new_tokens} if chosen.max_new_tokens else {}
    penalty = {} if chosen.length_penalty is None else {"length_penalty": chosen.length_penalty}
    options = {"beam_size": chosen.num_beams, **penalty, "batch_type": "tokens", **limit}

    def translate(batch: list[str]) -> object:
        tokens = [tokenizer.convert_ids_to_tokens(ids) for ids in tokenizer(batch)["input_ids"]]
        return translator.translate_batch(tokens, max_batch_size=args.max_tokens, **options)

    return translate


def in_calls_of(size: int, translate: Callable[[list], object]) -> Callable[[list], object]:
    """`translate` given `size` sentences a call, in the order they come: as many as that many clients, each
    waiting for its answer, can have in the service at once (the service's ceiling at that load)."""
    return lambda sentences: [
        translate(sentences[start : start + size]) for start in range(0, len(sentences), size)
    ]


def offline(args, sentences: list[str], decoders: dict[str, Callable[[list], object]]) -> dict:
    """Each decoder warmed on 8 sentences (as the service warms up before it is ready), then timed on all of
    them, the decoders in turn `--repeats` times (A B A B ...), on the wall clock (as the service is timed)
    and in this process's CPU time (which other processes on a shared machine barely disturb): the median
    rates and every sample."""
    for translate in decoders.values():
        translate(sentences[:8])
    samples = {name: {"wall": [], "cpu": []} for name in decoders}
    for _ in range(args.repeats):
        for name, translate in decoders.items():
            wall, cpu = time.perf_counter(), time.process_time()
            translate(sentences)
            samples[name]["wall"].append(time.perf_counter() - wall)
            samples[name]["cpu"].append(time.process_time() - cpu)
    return {
        name: {
            "sentences": len(sentences),
            "sentences_per_second": round(len(sentences) / statistics.median(seconds["wall"]), 2),
            "sentences_per_cpu_second": round(len(sentences) / statistics.median(seconds["cpu"]), 2),
            "seconds": [round(sample, 2) for sample in seconds["wall"]],
            "cpu_seconds": [round(sample, 2) for sample in seconds["cpu"]],
        }
        for name, seconds in samples.items()
    }


def thread_count_runs(args, sentences: list[str], threads: int, workdir: Path) -> dict:
    """Every run at one thread count, and the ratios between them."""
    settings = engine_settings(args, threads, workdir)
    decoders = {"offline": offline_decoding(args, settings)}
    if args.compute_type:
        decoders["translate_batch"] = raw_translate_batch(args, settings)
    for clients in [] if args.offline_only else [count for count in args.clients if count > 1]:
        decoders[f"offline, {clients} a call"] = in_calls_of(clients, decoders["offline"])
    runs = offline(args, sentences, decoders)
    if not args.offline_only:
        runs |= service_runs(args, sentences, settings, workdir)
    inter_threads, intra_threads = settings.cpu_threads()
    rate = {name: run["sentences_per_second"] for name, run in runs.items() if isinstance(run, dict)}
    ceilings = [name for name in ("translate_batch", "offline") if name in rate]
    ratios = {
        f"{over} / {under}": round(rate[over] / rate[under], 3)
        for position, under in enumerate(ceilings)
        for over in [*ceilings[position + 1 :], *(name for name in rate if name.startswith("service"))]
    }
    for clients in args.clients:  # the service beside the most its clients can have decoded at once
        if f"offline, {clients} a call" in rate and f"service, {clients} clients" in rate:
            ratios[f"service, {clients} clients / offline, {clients} a call"] = round(
                rate[f"service, {clients} clients"] / rate[f"offline, {clients} a call"], 3
            )
    # the engine's cost beside CTranslate2's own, on the clock the other jobs disturb least
    if len(ceilings) == 2:
        cpu_rate = [runs[name]["sentences_per_cpu_second"] for name in ("offline", "translate_batch")]
        ratios["offline / translate_batch, CPU time"] = round(cpu_rate[0] / cpu_rate[1], 3)
    offline_cpu_ms = 1000 / runs["offline"]["sentences_per_cpu_second"]
    for name, run in runs.items():  # what serving a sentence costs the server beyond decoding it
        if name.startswith("service") and run.get("server_cpu_ms_a_request"):
            ratios[f"{name}: server CPU a sentence / offline"] = round(
                run["server_cpu_ms_a_request"] / offline_cpu_ms, 3
            )
    return {"inter_threads": inter_threads, "intra_threads": intra_threads, "ratios": ratios, **runs}


def checked_bleu(args) -> float | None:
    """The validation BLEU the checkpoint's card records; exits with one line where there is none (an
    untrained model's speed is no trained model's: it decodes every sentence to its limit), unless
    --allow-untrained."""
    bleu = recorded_validation_bleu(args.model)
    if bleu is None and not args.allow_untrained:
        sys.exit(
            f"error: {args.model} records no validation BLEU in its model card: benchmark a trained "
            "checkpoint (an untrained one decodes every sentence to its length limit), or pass "
            "--allow-untrained"
        )
    return bleu


def main() -> None:
    args = build_parser().parse_args()
    configure_logging(args.log_level)
    bleu = checked_bleu(args)
    # The flags', else the checkpoint's, else the paper's: every run below decodes with these values.
    args.decoding, decoding_sources = decoding_for(args.model, decoding_options(args))
    data = translation_data(args)
    sentences = list(data.pairs(args.split)["source"])
    load_before = os.getloadavg()
    with tempfile.TemporaryDirectory() as scratch:
        by_threads = {
            f"{threads} threads": thread_count_runs(args, sentences, threads, Path(scratch))
            for threads in args.thread_counts
        }
    report = {
        **run_record(load_before),
        "model_validation_bleu": bleu,
        # As scripts/tools/benchmark.py names its engine rows.
        "engine": args.engine,
        "compute_type": engine_settings(args).precision,
        "decoding": decoding_report(args.decoding, decoding_sources),
        "dataset": f"{data.dataset} {args.split} ({args.source_lang}), {len(sentences)} sentences",
        "scaling": scaling(args, by_threads),
        **by_threads,
    }
    write_json(args.output, report)
    print(json.dumps(report, indent=2))


def scaling(args, by_threads: dict) -> dict:
    """Each run's rate at the most threads over its rate at the fewest."""
    fewest, most = (
        by_threads[f"{min(args.thread_counts)} threads"],
        by_threads[f"{max(args.thread_counts)} threads"],
    )
    return {
        f"{name}: {max(args.thread_counts)} / {min(args.thread_counts)} threads": round(
            most[name]["sentences_per_second"] / run["sentences_per_second"], 3
        )
        for name, run in fewest.items()
        if isinstance(run, dict) and "sentences_per_second" in run and name in most
    }


if __name__ == "__main__":
    with exits_on_missing_extra():
        main()
