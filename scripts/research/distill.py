"""Training data from trained models (a departure from the paper): sequence-level knowledge distillation (Kim
and Rush, 2016) and data diversification (Nguyen et al., 2020). Each --forward model translates the training
sources into new targets; each --backward model (target -> source) translates the training targets into new
sources. The training split written holds the original pairs (--keep-original), then the forward models'
pairs, then the backward models'; the other splits are copied as they are. Train a student on it with
`train.py --dataset DIR`. Stopped, the same command goes on where it stopped: each model's translations are
saved every 2,000 sentences.

    python scripts/research/distill.py --forward outputs/multi30k-best-en-de/checkpoint_average \\
        --backward outputs/multi30k-best-de-en/checkpoint_average --source-lang en --target-lang de \\
        --num-beams 4 --length-penalty 1.0 --keep-original --output-dir outputs/multi30k-en-de-diversified
"""

import sys

from hf_vanilla.cli import (
    ArgumentParser,
    add_dataset_arguments,
    add_decoding_arguments,
    add_logging_argument,
    add_progress_argument,
    add_runtime_arguments,
    cache_kwargs,
    configure_logging,
    decoding_kwargs,
    exits_on_missing_extra,
    runtime_kwargs,
    translation_data,
)
from hf_vanilla.evaluation.scoring import Runtime
from hf_vanilla.research.distillation import SavedTranslations, Teachers, distill_dataset


def build_parser() -> ArgumentParser:
    parser = ArgumentParser(description=__doc__)
    parser.add_argument(
        "--forward", nargs="+", default=[], help="source -> target models (directories or Hub ids)"
    )
    parser.add_argument("--backward", nargs="+", default=[], help="target -> source models")
    add_dataset_arguments(parser)
    parser.add_argument("--train-split", default="train", help="the split the models translate")
    parser.add_argument("--keep-original", action="store_true", help="keep the original pairs too")
    parser.add_argument("--output-dir", required=True, help="dataset directory to write")
    parser.add_argument(
        "--overwrite", action="store_true", help="replace an output directory that is not empty"
    )
    parser.add_argument(
        "--translations-dir",
        help="where each model's translations are saved as they are made, so that a stopped run given again "
            "goes "
        "on where it stopped and a run asking the same model for the same sentences with the same settings "
        "reads them (default: a hidden directory beside --output-dir, removed once the dataset is written)",
    )
    add_decoding_arguments(parser)
    add_runtime_arguments(parser)
    add_progress_argument(parser)
    add_logging_argument(parser)
    return parser


def main() -> None:
    args = build_parser().parse_args()
    configure_logging(args.log_level)

    try:
        provenance = distill_dataset(
            translation_data(args),
            args.output_dir,
            Teachers(args.forward, args.backward, args.keep_original),
            Runtime(**runtime_kwargs(args), show_progress=not args.quiet),
            SavedTranslations(args.translations_dir),
            overwrite=args.overwrite,
            train_split=args.train_split,
            **decoding_kwargs(args),
            **cache_kwargs(args),
        )
    except (ValueError, FileNotFoundError, FileExistsError) as err:
        sys.exit(f"error: {err}")
    teachers = ", ".join(
        f"{teacher['side']} {teacher['model']} (BLEU {teacher['train_bleu']:.2f} against the training "
        "references)"
        for teacher in provenance["teachers"]
    )
    print(f"wrote {args.output_dir}: {provenance['rows'][args.train_split]} training pairs; {teachers}")


if __name__ == "__main__":
    with exits_on_missing_extra():
        main()
