"""Translate a dataset split with a saved model and score it with sacreBLEU (cased and lowercased BLEU, chrF).

Decodes with the beam size, length penalty and output limit the flags give, else those of the checkpoint's
generation_config.json (what scripts/select_checkpoint.py chose), else the paper's (section 6.1): beam 4,
length penalty 0.6, at most the source length + 50 new tokens. The log and the report name each and where it
came from. Writes SPLIT.SRC-TGT.hyp (one translation a line, in
dataset order) and SPLIT.SRC-TGT.json (scores with signatures, settings, speed) into --output-dir.
For a German or English target (with sacremoses installed) it adds the paper's BLEU beside sacreBLEU:
tensor2tensor's get_ende_bleu.sh, Moses-tokenized, compounds split, cased ("bleu_paper"; docs/wmt14.md).

    python scripts/evaluate_bleu.py outputs/multi30k-small-de-en/checkpoint_best --split test \\
        --source-lang de --target-lang en
"""

import json
import sys

from hf_vanilla.cli import (
    ArgumentParser,
    add_dataset_arguments,
    add_decoding_arguments,
    add_logging_argument,
    add_model_argument,
    add_runtime_arguments,
    add_tokenized_bleu_argument,
    configure_logging,
    decoding_options,
    exits_on_missing_extra,
    runtime_kwargs,
    translation_data,
)
from hf_vanilla.evaluation.paper_bleu import PAPER_BLEU_KEY
from hf_vanilla.evaluation.scoring import Runtime, ScoreOptions, evaluate_bleu
from hf_vanilla.research.cli import add_research_arguments, research_decoder


def build_parser() -> ArgumentParser:
    parser = ArgumentParser(description=__doc__)
    add_model_argument(parser)
    add_dataset_arguments(parser)
    add_decoding_arguments(parser)
    add_runtime_arguments(parser)
    parser.add_argument("--split", default="test", help="split to translate and score")
    parser.add_argument("--ter", action="store_true", help="also compute TER")
    add_tokenized_bleu_argument(parser)
    add_research_arguments(parser)
    parser.add_argument("--seed", type=int, default=0, help="matters only when sampling")
    parser.add_argument(
        "--output-dir", default="outputs/evaluation", help="where the hypotheses and report go"
    )
    add_logging_argument(parser)
    return parser


def main() -> None:
    args = build_parser().parse_args()
    configure_logging(args.log_level)

    try:
        report = evaluate_bleu(
            args.model,
            translation_data(args),
            args.output_dir,
            args.split,
            Runtime(**runtime_kwargs(args)),
            ScoreOptions(ter=args.ter, tokenized_bleu=args.tokenized_bleu),
            research_decoder(args),
            seed=args.seed,
            options=decoding_options(args),
        )
    except (ValueError, FileNotFoundError) as err:
        sys.exit(f"error: {err}")
    print(json.dumps(report, indent=2, ensure_ascii=False))
    for case in ("cased", "lowercased"):
        print(f"{case} BLEU {report[case]['bleu']:.2f}  ({report[case]['bleu_signature']})")
    if "tokenized_lowercased" in report:
        tokenized = report["tokenized_lowercased"]
        print(f"tokenized lowercased BLEU {tokenized['bleu']:.2f}  ({tokenized['bleu_signature']})")
    if PAPER_BLEU_KEY in report:
        paper = report[PAPER_BLEU_KEY]
        print(f"{paper['name']} {paper['bleu']:.2f}  ({paper['bleu_signature']})")


if __name__ == "__main__":
    with exits_on_missing_extra():
        main()
