"""Choose checkpoint, beam size and length penalty on validation BLEU, then report the choice on test.

Section 6.1 set beam size and length penalty "after experimentation on the development set"; this does the
same, and picks between a run's best, last and averaged checkpoints at the same time. The test split is
decoded once, with the winner only. Writes selection.json and the test hypotheses and report, and makes the
chosen beam size and length penalty the chosen checkpoint's decoding defaults (its generation_config.json,
which `pipeline` and `generate` read), beside the test scores in its model card.

    python scripts/select_checkpoint.py outputs/multi30k-small-de-en --source-lang de --target-lang en \\
        --num-beams 4 8 --length-penalty 0.6 1.0 --output-dir outputs/multi30k-small-de-en/evaluation
"""

import sys

from hf_vanilla.checkpoints.cards import decoding_label
from hf_vanilla.cli import (
    ArgumentParser,
    add_beam_arguments,
    add_dataset_arguments,
    add_logging_argument,
    add_runtime_arguments,
    add_tokenized_bleu_argument,
    cache_implementation,
    configure_logging,
    exits_on_missing_extra,
    positive_int,
    runtime_kwargs,
    translation_data,
)
from hf_vanilla.evaluation.paper_bleu import PAPER_BLEU_KEY, PAPER_BLEU_NAME
from hf_vanilla.evaluation.scoring import Runtime, ScoreOptions
from hf_vanilla.evaluation.selection import SelectionGrid, select_on_validation
from hf_vanilla.model.decoding import DecodingOptions
from hf_vanilla.research.cli import add_research_arguments, research_decoder
from hf_vanilla.research.reranking import (
    LANGUAGE_MODEL_WEIGHT,
    REVERSE_WEIGHT,
    RIGHT_TO_LEFT_WEIGHT,
    WORD_BONUS,
)

WEIGHT_COLUMNS = (
    ("rerank", REVERSE_WEIGHT),
    ("r2l", RIGHT_TO_LEFT_WEIGHT),
    ("lm", LANGUAGE_MODEL_WEIGHT),
    ("words", WORD_BONUS),
)


def build_parser() -> ArgumentParser:
    parser = ArgumentParser(description=__doc__)
    parser.add_argument(
        "models", nargs="+", help="saved model directories, or run directories (their best, last and average)"
    )
    add_beam_arguments(parser, several=True)
    add_dataset_arguments(parser)
    parser.add_argument("--validation-split", default="validation", help="the split the choice is made on")
    parser.add_argument(
        "--validation-pairs",
        type=positive_int,
        default=None,
        help="choose on the first N pairs of the validation split only, a quicker choice (the report splits "
        "are decoded whole; default: all)",
    )
    parser.add_argument(
        "--report-split", nargs="*", default=["test"], help="splits decoded with the choice only (none: skip)"
    )
    add_runtime_arguments(parser)
    add_tokenized_bleu_argument(parser)
    add_research_arguments(parser, several_weights=True)
    parser.add_argument(
        "--output-dir", default="outputs/selection", help="where selection.json and the reports go"
    )
    add_logging_argument(parser)
    return parser


def main() -> None:
    args = build_parser().parse_args()
    configure_logging(args.log_level)

    try:
        selection = select_on_validation(
            args.models,
            translation_data(args),
            args.output_dir,
            SelectionGrid(
                args.num_beams, args.length_penalty, args.validation_split, args.report_split,
                args.validation_pairs,
            ),  # fmt: skip
            Runtime(**runtime_kwargs(args)),
            ScoreOptions(tokenized_bleu=args.tokenized_bleu),
            research_decoder(args),
            DecodingOptions(cache_implementation=cache_implementation(args)),
        )
    except (ValueError, FileNotFoundError) as err:
        sys.exit(f"error: {err}")
    print_selection(selection, args.validation_split)


def print_selection(selection: dict, validation_split: str) -> None:
    """The validation table, the choice marked, then each report split's scores."""
    chosen = selection["chosen"]
    print(
        f"{validation_split} ({selection['validation_sentences']} sentences), {selection['signature']}"
    )
    weight_columns = [  # (title, the weight's key in each row) for each reranking weight chosen
        (title, name) for title, name in WEIGHT_COLUMNS if name in chosen
    ]
    titles = "".join(f"{title:<8}" for title, _ in weight_columns)
    print(f"{'BLEU':>6} {'lc':>6} {'chrF':>6}  beams  lp    {titles}model")
    for row in selection["validation"]:
        marker = "  <- chosen" if row is chosen else ""
        weights = "".join(f"{row[name]:<6}  " for _, name in weight_columns)
        print(
            f"{row['bleu']:6.2f} {row['bleu_lowercased']:6.2f} {row['chrf']:6.2f}  {row['num_beams']:>5}  "
            f"{row.get('length_penalty', '-'):<4}  {weights}{row['model']}{marker}"
        )
    for split, report in selection["reports"].items():
        beside = [  # the tokenized BLEUs, printed beside sacreBLEU, never instead
            f"{name} {report[key]['bleu']:.2f}"
            for key, name in (
                ("tokenized_lowercased", "tokenized lowercased BLEU"),
                (PAPER_BLEU_KEY, PAPER_BLEU_NAME),
            )
            if key in report
        ]
        print(
            f"{split}: cased BLEU {report['cased']['bleu']:.2f}, lowercased "
            f"{report['lowercased']['bleu']:.2f}, chrF {report['cased']['chrf']:.2f}"
            + "".join(f"; {score}" for score in beside)
            + (" (beside, not instead)" if beside else "")
        )
    if selection["decoding_defaults_file"]:
        saved_to = selection["decoding_defaults_file"]
        print(
            f"decoding defaults ({decoding_label(chosen)}) saved to {saved_to}: pipeline and generate use "
            f"them"
        )


if __name__ == "__main__":
    with exits_on_missing_extra():
        main()
