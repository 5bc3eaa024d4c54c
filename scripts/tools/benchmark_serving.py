"""Load benchmark of the translation service: N concurrent clients on 127.0.0.1 send a dataset's source sentences,
one sentence a request, for a fixed count of requests; sentences/s, latency percentiles and errors, on each engine
of --engines, against

  (a) the transformers service with batching off (each sentence its own `generate` call),
  (b) offline decoding of the same sentences by each engine, in length-sorted batches (the service's ceiling),
  (c) CTranslate2's own `translate_batch` on the converted model, in each compute type (our engine's ceiling).

    python scripts/tools/benchmark_serving.py outputs/multi30k-small-de-en/checkpoint_best --requests 10000 \\
        --clients 32 --engines transformers ctranslate2:float32 ctranslate2:int8

Writes a JSON report (the command, the CPU, the settings, each run) to --output.
"""

import argparse
import json
import shlex
import statistics
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import replace
from pathlib import Path

import numpy as np
import requests
import torch
from _server_process import ServerProcess  # beside this script

from hf_vanilla.checkpoints import decoding_for, load_tokenizer
from hf_vanilla.cli import (
    ArgumentParser,
    add_beam_arguments,
    add_dataset_arguments,
    add_logging_argument,
    add_max_new_tokens_argument,
    add_max_tokens_argument,
    add_model_argument,
    beam_kwargs,
    configure_logging,
    exits_on_missing_extra,
    positive_int,
    translation_data,
)
from hf_vanilla.extras import require
from hf_vanilla.files import write_json
from hf_vanilla.precision import cpu_description
from hf_vanilla.serving.batching import DEFAULT_BATCHING
from hf_vanilla.tools.benchmark import interleaved_seconds
from hf_vanilla.translation import (
    CTRANSLATE2,
    TRANSFORMERS,
    DecodingOptions,
    EngineSettings,
    load_engine,
)

STARTUP_SECONDS = 300
UNBATCHED = ("--max-tokens", "1", "--max-wait-ms", "0")  # each sentence alone


def decoding(args) -> dict:
    """The decoding of every run, as a request's generate_parameters: `args.decoding`, resolved in `main`."""
    return args.decoding.generate_kwargs()


def engine_choice(text: str) -> EngineSettings:
    """`transformers` or `ctranslate2:COMPUTE_TYPE` (`ctranslate2` alone: auto) as the CPU engine's settings."""
    engine, _, compute_type = text.partition(":")
    try:
        return EngineSettings(engine, "cpu", compute_type=compute_type or "auto")
    except ValueError as err:
        raise argparse.ArgumentTypeError(str(err)) from err


def engine_name(settings: EngineSettings) -> str:
    return settings.engine if settings.engine == TRANSFORMERS else f"{settings.engine}:{settings.compute_type}"


def engine_flags(settings: EngineSettings, workdir: Path) -> tuple[str, ...]:
    """serve.py's flags for `settings`, converted models cached in `workdir`."""
    if settings.engine == TRANSFORMERS:
        return ()
    return ("--engine", settings.engine, "--compute-type", settings.compute_type, "--ctranslate2-dir", str(workdir))


def build_parser() -> ArgumentParser:
    parser = ArgumentParser(description=__doc__)
    add_model_argument(parser)
    add_dataset_arguments(parser)
    parser.add_argument("--split", default="test", help="the split whose sources the clients send")
    parser.add_argument(
        "--requests", type=positive_int, default=10_000, help="requests to the batching service"
    )
    parser.add_argument(
        "--unbatched-requests",
        type=positive_int,
        default=1000,
        help="requests to the service with batching off",
    )
    parser.add_argument("--clients", type=positive_int, default=32, help="concurrent clients")
    add_beam_arguments(parser)
    parser.add_argument(
        "--threads", type=positive_int, default=2, help="torch threads of the server and offline"
    )
    add_max_tokens_argument(parser)
    parser.add_argument(
        "--max-wait-ms", type=float, default=DEFAULT_BATCHING.max_wait_ms, help="the batching service's"
    )
    parser.add_argument(
        "--engines",
        nargs="+",
        type=engine_choice,
        default=[engine_choice(name) for name in (TRANSFORMERS, "ctranslate2:float32", "ctranslate2:int8")],
        help="the engines to serve and decode offline with: transformers, or ctranslate2:COMPUTE_TYPE",
    )
    add_max_new_tokens_argument(parser)  # translate_batch's default is 256; an untrained model runs to its limit
    parser.add_argument(
        "--repeats", type=positive_int, default=3, help="timings of each offline decoding, taken in turn"
    )
    parser.add_argument(
        "--offline-only", action="store_true", help="decode offline only, no service (no request counts then)"
    )
    parser.add_argument("--output", default="docs/benchmarks/serving.json", help="the JSON report (the CPU named in it)")
    add_logging_argument(parser)
    return parser


def latency_summary(seconds: list[float], wall: float, sentences: int) -> dict:
    milliseconds = np.asarray(seconds) * 1000
    return {
        "sentences_per_second": round(sentences / wall, 2),
        "seconds": round(wall, 2),
        **{f"p{q}_ms": round(float(np.percentile(milliseconds, q)), 1) for q in (50, 95, 99)},
    }


def load(
    url: str, sentences: list[str], requests_count: int, clients: int, generate_parameters: dict
) -> dict:
    """`clients` threads, each with its own keep-alive session, send request i = sentence i mod len until
    `requests_count` are sent: errors (a status other than 200 or an answer not of one translation) and lost
    requests (no HTTP answer at all) counted apart."""
    counter, lock = iter(range(requests_count)), threading.Lock()
    latencies: list[float] = []
    errors, lost = [], []

    def client() -> None:
        session = requests.Session()
        while True:
            with lock:
                index = next(counter, None)
            if index is None:
                return
            payload = {
                "inputs": sentences[index % len(sentences)],
                "parameters": {"generate_parameters": generate_parameters},
            }
            started = time.perf_counter()
            try:
                answer = session.post(url, json=payload, timeout=600)
            except requests.RequestException as err:
                lost.append(f"{type(err).__name__}: {err}")
                continue
            latencies.append(time.perf_counter() - started)
            if answer.status_code != 200 or len(answer.json()) != 1:
                errors.append(f"{answer.status_code}: {answer.text[:200]}")

    started = time.perf_counter()
    with ThreadPoolExecutor(clients) as pool:
        for running in [pool.submit(client) for _ in range(clients)]:
            running.result()
    wall = time.perf_counter() - started
    return {
        "requests": requests_count,
        **latency_summary(latencies, wall, len(latencies) - len(errors)),
        "errors": len(errors),
        "lost": len(lost),
        "first_problems": (errors + lost)[:5],
    }


def serve_and_load(
    args, sentences, flags: tuple[str, ...], requests_count: int, workdir: Path, name: str
) -> dict:
    """Start the service with `flags`, load it, stop it with SIGTERM; the run with the service's batch log."""
    server = ServerProcess(
        args.model, workdir / f"{name}.log", ("--device", "cpu", *flags), threads=args.threads
    )
    try:
        server.wait_until_ready(STARTUP_SECONDS)
        run = load(server.url, sentences, requests_count, args.clients, decoding(args))
    finally:
        exit_status = server.stop()
    sizes = [int(line.split("batch: ")[1].split()[0]) for line in server.batch_lines()]
    return {
        **run,
        "server_flags": list(flags),
        "exit_status": exit_status,
        "batches": len(sizes),
        "mean_batch_sentences": round(float(np.mean(sizes)), 2),
    }


def offline_decoding(args, settings: EngineSettings, workdir: Path) -> Callable[[list], object]:
    """The engine's translation of sentences, all at once, in length-sorted batches."""
    engine = load_engine(args.model, replace(settings, ctranslate2_dir=workdir))
    options = DecodingOptions(max_tokens=args.max_tokens, show_progress=False).replace(**decoding(args))
    return lambda batch: engine.translate(batch, options)


def raw_translate_batch(args, compute_type: str, workdir: Path) -> Callable[[list], object]:
    """CTranslate2's `translate_batch` alone on the converted model: sentences as token strings in batches of the
    same token budget, one limit for all (256, its default), none of our batching or texts."""
    from hf_vanilla.ctranslate2_engine import cached_conversion

    ctranslate2 = require("ctranslate2", extra="ct2")

    translator = ctranslate2.Translator(
        str(cached_conversion(Path(args.model), workdir)),
        device="cpu",
        compute_type=compute_type,
        intra_threads=args.threads,
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


def offline(args, sentences: list[str], decoders: dict[str, Callable[[list], object]]) -> dict:
    """Each decoder warmed on 8 sentences (as the service warms up before it is ready), then timed on all of them,
    the decoders in turn `--repeats` times (A B A B ...) in this process's CPU time, which the other processes of a
    shared machine barely disturb: the median rate and every sample."""
    torch.set_num_threads(args.threads)
    for translate in decoders.values():
        translate(sentences[:8])
    runs = {name: lambda translate=translate: translate(sentences) for name, translate in decoders.items()}
    seconds = interleaved_seconds(runs, args.repeats, warmup=0, clock="cpu")
    return {
        name: {
            "sentences": len(sentences),
            "sentences_per_second": round(len(sentences) / statistics.median(samples), 2),
            "cpu_seconds": [round(sample, 2) for sample in samples],
        }
        for name, samples in seconds.items()
    }


def main() -> None:
    args = build_parser().parse_args()
    configure_logging(args.log_level)
    # The flags', else the checkpoint's, else the paper's: every run below decodes with these values.
    args.decoding = decoding_for(args.model, {**beam_kwargs(args), "max_new_tokens": args.max_new_tokens})
    data = translation_data(args)
    sentences = list(data.pairs(args.split)["source"])
    batched_flags = ("--max-tokens", str(args.max_tokens), "--max-wait-ms", str(args.max_wait_ms))
    names = [engine_name(settings) for settings in args.engines]
    compute_types = [settings.compute_type for settings in args.engines if settings.engine == CTRANSLATE2]
    runs = {}
    with tempfile.TemporaryDirectory() as scratch:
        workdir = Path(scratch)
        if not args.offline_only:
            for name, settings in zip(names, args.engines, strict=True):
                flags = (*batched_flags, *engine_flags(settings, workdir))
                runs[f"service {name}"] = serve_and_load(args, sentences, flags, args.requests, workdir, name)
            runs["service transformers, batching off"] = serve_and_load(
                args, sentences, UNBATCHED, args.unbatched_requests, workdir, "unbatched"
            )
        decoders = {
            **{
                f"offline {name}": offline_decoding(args, settings, workdir)
                for name, settings in zip(names, args.engines, strict=True)
            },
            **{f"translate_batch {kind}": raw_translate_batch(args, kind, workdir) for kind in compute_types},
        }
        runs |= offline(args, sentences, decoders)
    rate = {name: run["sentences_per_second"] for name, run in runs.items()}
    ratios = [  # (over, under): the runs each ratio compares
        *((f"offline {CTRANSLATE2}:{kind}", f"translate_batch {kind}") for kind in compute_types),
        *((f"service {name}", f"offline {name}") for name in names),
        *((f"service {name}", f"service {TRANSFORMERS}") for name in names),
        (f"service {TRANSFORMERS}", "service transformers, batching off"),
    ]
    report = {
        "command": shlex.join(["python", *sys.argv]),
        "cpu": cpu_description(),
        "threads": args.threads,
        "clients": args.clients,
        "decoding": args.decoding.report(),
        "dataset": f"{data.dataset} {args.split} ({args.source_lang}), {len(sentences)} sentences",
        "ratios": {
            f"{over} / {under}": round(rate[over] / rate[under], 2)
            for over, under in ratios
            if over in rate and under in rate and over != under
        },
        **runs,
    }
    write_json(args.output, report)
    print(json.dumps(report, indent=2))

if __name__ == "__main__":
    with exits_on_missing_extra():
        main()
