"""Fidelity of the engines on a test set: each engine's BLEU and how many lines equal `generate`'s, greedy and
beam 4.

    python scripts/tools/compare_engines.py CHECKPOINT --dataset MULTI30K --source-lang de --target-lang en \
        --output docs/benchmarks/engine-fidelity-epyc-2core.json

transformers (`generate`, the reference), CTranslate2 float32 and CTranslate2 int8 decode the split's sources
with the paper's decoding (each sentence its source length + 50 tokens); the JSON names the CPU.
"""

import json
import time

import sacrebleu

from hf_vanilla.cli import (
    ArgumentParser,
    add_dataset_arguments,
    add_device_argument,
    add_logging_argument,
    add_model_argument,
    configure_logging,
    exits_on_missing_extra,
    translation_data,
)
from hf_vanilla.files import write_json
from hf_vanilla.model.decoding import PAPER_GENERATION_KWARGS, DecodingOptions
from hf_vanilla.precision import cpu_description
from hf_vanilla.translation.decoding import QUIET
from hf_vanilla.translation.engines import EngineSettings, load_engine

DECODINGS = {"greedy": {"num_beams": 1}, "beam": PAPER_GENERATION_KWARGS}
ENGINES = {
    "transformers": {},
    "ctranslate2 float32": {"engine": "ctranslate2", "compute_type": "float32"},
    "ctranslate2 int8": {"engine": "ctranslate2", "compute_type": "int8"},
}


def build_parser() -> ArgumentParser:
    parser = ArgumentParser(description=__doc__)
    add_model_argument(parser)
    add_dataset_arguments(parser)
    parser.add_argument("--split", default="test", help="the split to decode")
    add_device_argument(parser)
    parser.add_argument("--output", required=True, help="the JSON report to write")
    add_logging_argument(parser)
    return parser


def main() -> None:
    args = build_parser().parse_args()
    configure_logging(args.log_level)
    pairs = translation_data(args).pairs(args.split)
    sources, references = list(pairs["source"]), list(pairs["target"])
    report = {"model": args.model, "cpu": cpu_description(), "sentences": len(sources), "runs": {}}
    reference_outputs = {}
    for engine_name, settings in ENGINES.items():
        engine = load_engine(args.model, EngineSettings(device=args.device, **settings))
        for decoding, kwargs in DECODINGS.items():
            started = time.perf_counter()
            outputs = engine.translate(sources, DecodingOptions(**kwargs), QUIET)
            reference_outputs.setdefault(decoding, outputs)  # transformers' come first
            report["runs"][f"{engine_name} {decoding}"] = {
                "bleu": round(sacrebleu.corpus_bleu(outputs, [references]).score, 2),
                "lines_as_transformers": sum(
                    a == b for a, b in zip(outputs, reference_outputs[decoding], strict=True)
                ),
                "seconds": round(time.perf_counter() - started, 1),
            }
            print(engine_name, decoding, report["runs"][f"{engine_name} {decoding}"], flush=True)
    write_json(args.output, report)
    print(json.dumps(report, indent=2))


if __name__ == "__main__":
    with exits_on_missing_extra():
        main()
