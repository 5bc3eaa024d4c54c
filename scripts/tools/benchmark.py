"""Benchmark our model against a MarianMTModel of identical shape: training, generation, the engines, memory.

Random weights and forced output lengths: implementation speed. For decoding speed on a trained checkpoint,
run scripts/tools/benchmark_serving.py CHECKPOINT."""

import sys

import torch

from hf_vanilla.cli import (
    ArgumentParser,
    add_device_argument,
    add_dtype_argument,
    add_logging_argument,
    configure_logging,
    exits_on_missing_extra,
)
from hf_vanilla.precision import resolve_device
from hf_vanilla.tools.benchmark import (
    GENERATION_CACHES,
    BenchmarkSettings,
    format_table,
    run_benchmark,
    save_results,
)
from hf_vanilla.translation.engines import COMPUTE_TYPES, engine_names


def build_parser() -> ArgumentParser:
    parser = ArgumentParser(description=__doc__)
    parser.add_argument(
        "--size", default="small", choices=["tiny", "small", "base", "big"], help="model preset"
    )
    parser.add_argument(
        "--repeats", type=int, default=5, help="interleaved timed runs of each model (median)"
    )
    parser.add_argument(
        "--target-tokens", type=int, default=4096, help="labelled target tokens a training batch"
    )
    parser.add_argument("--new-tokens", type=int, default=30, help="tokens generated a sentence")
    add_device_argument(parser)
    add_dtype_argument(parser, several=True)
    parser.set_defaults(dtype=list(BenchmarkSettings.dtypes))  # each model at its fastest, not the reference
    parser.add_argument(
        "--attn",
        nargs="+",
        default=["eager", "sdpa"],
        choices=["eager", "sdpa"],
        help="attention implementations",
    )
    parser.add_argument(
        "--generation-batch-sizes", nargs="*", type=int, default=[64, 1], help="none: skip generation"
    )
    parser.add_argument(
        "--generation-cache",
        nargs="+",
        default=["cached", "uncached"],
        choices=GENERATION_CACHES,
        help="key/value cache: cached (dynamic), uncached, static (preallocated; generate compiles it on a "
            "GPU), "
        "static-compiled (compiled on a CPU too, both models)",
    )
    parser.add_argument(
        "--engine",
        nargs="+",
        choices=engine_names(),
        default=list(engine_names()),
        help="engines that decode beside ours on a CPU, each loaded on ours saved; transformers alone: no "
            "CTranslate2",
    )
    parser.add_argument(
        "--compute-type",
        nargs="+",
        choices=COMPUTE_TYPES,
        default=list(BenchmarkSettings.compute_types),
        help="the ctranslate2 engine's weights_activations, a row each",
    )
    parser.add_argument("--compile", action="store_true", help="torch.compile our model (Marian stays eager)")
    parser.add_argument("--threads", type=int, default=None, help="torch threads (default: torch's choice)")
    parser.add_argument(
        "--clock",
        default="wall",
        choices=["wall", "cpu"],
        help="cpu: process CPU time, steadier on a busy machine",
    )
    parser.add_argument("--quick", action="store_true", help="few tiny runs, to check that everything works")
    parser.add_argument("--output", default=None, help="JSON path (default outputs/benchmark-SIZE.json)")
    add_logging_argument(parser)
    return parser


def main() -> None:
    args = build_parser().parse_args()
    configure_logging(args.log_level)
    if args.threads:
        torch.set_num_threads(args.threads)

    settings = {
        "size": args.size,
        "repeats": args.repeats,
        "target_tokens": args.target_tokens,
        "new_tokens": args.new_tokens,
        "dtypes": tuple(args.dtype),
        "attn_implementations": tuple(args.attn),
        "generation_batch_sizes": tuple(args.generation_batch_sizes),
        "generation_caches": tuple(args.generation_cache),
        "engines": tuple(args.engine),
        "compute_types": tuple(args.compute_type),
        "compile_model": args.compile,
        "clock": args.clock,
        "device": args.device,
    }
    if args.quick:
        settings.update(
            repeats=1, target_tokens=128, new_tokens=3, generation_batch_sizes=(4, 1), peak_seconds=0.05
        )
    try:
        settings["device"] = str(resolve_device(args.device))
        results = run_benchmark(BenchmarkSettings(**settings))
    except ValueError as err:
        sys.exit(f"error: {err}")
    print(format_table(results))
    print(f"saved {save_results(results, args.output or f'outputs/benchmark-{args.size}.json')}")


if __name__ == "__main__":
    with exits_on_missing_extra():
        main()
