"""Serve a saved model over HTTP: the Hugging Face Inference API's translation task, requests batched on the
fly.

    pip install 'hf_vanilla[serve]'
    python scripts/serve.py outputs/multi30k-small-de-en/checkpoint_best --port 8000
    python scripts/serve.py CHECKPOINT --engine ctranslate2 --compute-type int8   # faster
    curl -s localhost:8000 -H 'Content-Type: application/json' -d '{"inputs": "Ein Hund läuft."}'

Decodes with the checkpoint's generation_config.json (beam size, length penalty) unless a request's
generate_parameters say otherwise, within the limits set here. GET / is a translation page for a browser, with
the attention behind each translation (POST /attention); GET /health, /ready, /stats; /docs is the API.
SIGTERM stops accepting, answers every accepted request and exits 0 (docs/serving.md). Should the model fail
to load or the worker stop, the service answers 500, drains and exits 1, for its supervisor to restart it.
"""

import dataclasses
import importlib.util
import logging
import signal
import sys

from hf_vanilla.cli import (
    ArgumentParser,
    add_logging_argument,
    add_model_argument,
    add_runtime_arguments,
    configure_logging,
    engine_settings,
    exits_on_missing_extra,
    positive_int,
)
from hf_vanilla.extras import require

with exits_on_missing_extra():  # the serve extra: one line where it is missing, not an import's traceback
    require("fastapi", extra="serve")
    uvicorn = require("uvicorn", extra="serve")
from hf_vanilla.serving import BatchingSettings, RequestLimits, create_app  # noqa: E402

BATCHING = BatchingSettings()
LIMIT_HELP = {
    "max_sentences": "sentences",
    "max_characters": "characters, all texts together",
    "max_beams": "num_beams",
    "max_new_tokens": "max_new_tokens (default: the decoder's positions)",
    "max_attention_tokens": "source tokens of a sentence whose attention is asked (POST /attention)",
}


def build_parser() -> ArgumentParser:
    parser = ArgumentParser(description=__doc__)
    add_model_argument(parser)
    parser.add_argument("--host", default="127.0.0.1", help="address to listen on (0.0.0.0: every interface)")
    parser.add_argument("--port", type=int, default=8000, help="port to listen on")
    parser.add_argument(
        "--access-log", action="store_true", help="a log line a request (default: a line a batch)"
    )
    add_runtime_arguments(parser)
    batching = parser.add_argument_group("batching (--max-tokens above: source tokens a batch)")
    batching.add_argument(
        "--max-wait-ms",
        type=float,
        default=BATCHING.max_wait_ms,
        help="how long the oldest waiting sentence waits for others at the latest before its batch goes",
    )
    batching.add_argument(
        "--fixed-wait",
        action="store_true",
        help="every batch waits the whole --max-wait-ms (default: it goes once the clients just answered "
        "have sent again)",
    )
    batching.add_argument(
        "--max-queued-sentences",
        type=positive_int,
        default=BATCHING.max_queued_sentences,
        help="sentences that may wait; more are refused at once (503, Retry-After)",
    )
    limits = parser.add_argument_group("request limits (the most one request may ask)")
    # --request-max-sentences sets RequestLimits.max_sentences, and so on for each field
    for field in dataclasses.fields(RequestLimits):
        limits.add_argument(
            f"--request-{field.name.replace('_', '-')}",
            type=positive_int,
            default=field.default,
            help=LIMIT_HELP[field.name],
        )
    add_logging_argument(parser)
    return parser


def main() -> None:
    args = build_parser().parse_args()
    configure_logging(args.log_level)
    try:
        engine = engine_settings(args)
        app = create_app(
            args.model,
            engine,
            BatchingSettings(args.max_tokens, args.max_wait_ms, args.max_queued_sentences, args.fixed_wait),
            RequestLimits(
                **{
                    field.name: getattr(args, f"request_{field.name}")
                    for field in dataclasses.fields(RequestLimits)
                }
            ),
            "static" if args.cache_implementation == "static" else None,
        )
    except (ValueError, FileNotFoundError) as err:  # a bad setting, or no checkpoint at the path
        sys.exit(f"error: {err}")
    # uvicorn answers the accepted requests on SIGTERM, then raises the signal again under the handler it
    # found: this one, so that a drained shutdown exits 0 (as training does on preemption) instead of dying by
    # the signal.
    for stop in (signal.SIGTERM, signal.SIGINT):
        signal.signal(stop, lambda signum, frame: logging.info("stopped by %s", signal.Signals(signum).name))
    server = uvicorn.Server(
        uvicorn.Config(
            app, host=args.host, port=args.port, access_log=args.access_log, timeout_graceful_shutdown=None
        )
    )
    log_http_stack()
    batcher = app.state.batcher
    batcher.on_failure = lambda: setattr(server, "should_exit", True)
    server.run()
    if batcher.failure:
        sys.exit(f"error: {batcher.failure}")


def log_http_stack() -> None:
    """Which HTTP parser and event loop uvicorn picks ("auto"): the C ones of uvicorn[standard] answer a
    request in a fraction of the CPU time of the pure-Python h11 and asyncio, time the decoding shares on a
    small CPU."""
    fast = all(importlib.util.find_spec(module) for module in ("httptools", "uvloop"))
    slow = "h11 and asyncio (pip install 'uvicorn[standard]' for httptools and uvloop)"
    logging.info("HTTP: %s", "httptools and uvloop" if fast else slow)


if __name__ == "__main__":
    with exits_on_missing_extra():
        main()
