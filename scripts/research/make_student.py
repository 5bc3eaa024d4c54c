"""A fast student of a trained model (a departure from the paper): the teacher translates its training sources
(sequence-level distillation; resumable), a student of the teacher's sizes and vocabulary with
--decoder-layers decoder layers (default 1: a deep encoder, a shallow decoder) trains on them with --config's
recipe, is selected on validation, and gets a vocabulary shortlist of the training pairs (vocab_map.txt) for
`--engine ctranslate2 --vocab-map`. Stopped, the same command goes on where it stopped; the student is
OUTPUT_DIR/student.

    python scripts/research/make_student.py --teacher outputs/multi30k-small-de-en/model \\
        --source-lang de --target-lang en --engine ctranslate2 --compute-type int8 \\
        --output-dir outputs/multi30k-student-de-en
"""

import json
import sys

from hf_vanilla.cli import (
    ArgumentParser,
    add_dataset_arguments,
    add_decoding_arguments,
    add_logging_argument,
    add_progress_argument,
    add_runtime_arguments,
    add_training_config_arguments,
    configure_logging,
    decoding_options,
    exits_on_missing_extra,
    positive_int,
    runtime_kwargs,
    training_config_overrides,
    translation_data,
)
from hf_vanilla.evaluation.scoring import Runtime
from hf_vanilla.research.student import STUDENT_CONFIG, StudentRecipe, StudentShape, make_student
from hf_vanilla.training.settings import TrainingError
from hf_vanilla.translation.shortlist import ShortlistSize

# The training keys worth changing for a student; its data, tokenizer, shape and output are the command's.
TRAINING_KEYS = ("max_minutes", "max_steps", "max_epochs", "seed", "save_interval_minutes", "average_last")


def build_parser() -> ArgumentParser:
    parser = ArgumentParser(description=__doc__)
    parser.add_argument("--teacher", required=True, help="the trained model's directory (its checkpoint)")
    parser.add_argument("--output-dir", required=True, help="the work directory; the student is its student/")
    parser.add_argument(
        "--encoder-layers", type=positive_int, default=None, help="the student's (default: the teacher's)"
    )
    parser.add_argument("--decoder-layers", type=positive_int, default=1, help="the student's decoder layers")
    parser.add_argument(
        "--shortlist-top-k",
        type=int,
        default=ShortlistSize.top_k,
        help="target tokens each source token allows, by how many training pairs hold both",
    )
    parser.add_argument(
        "--shortlist-frequent",
        type=int,
        default=ShortlistSize.frequent,
        help="target tokens of the most training pairs, allowed in every translation",
    )
    parser.add_argument(
        "--keep-original",
        action="store_true",
        help="train on the original pairs too, beside the teacher's translations of their sources",
    )
    add_dataset_arguments(parser)
    add_training_config_arguments(parser, TRAINING_KEYS)
    add_decoding_arguments(parser)
    add_runtime_arguments(parser)
    add_progress_argument(parser)
    add_logging_argument(parser)
    return parser


def main() -> None:
    args = build_parser().parse_args()
    configure_logging(args.log_level)
    # The decoding flags are the teacher's, not the student's num_beams and length_penalty keys.
    overrides = training_config_overrides(args)
    training = {name: value for name, value in overrides.items() if name in TRAINING_KEYS}
    recipe = StudentRecipe(
        args.config or STUDENT_CONFIG,
        training,
        StudentShape(args.encoder_layers, args.decoder_layers),
        ShortlistSize(args.shortlist_top_k, args.shortlist_frequent),
        decoding_options(args),
        keep_original=args.keep_original,
    )
    runtime = Runtime(**runtime_kwargs(args), show_progress=not args.quiet)
    try:
        record = make_student(args.teacher, translation_data(args), args.output_dir, recipe, runtime)
    except (ValueError, FileNotFoundError, FileExistsError, TrainingError) as err:
        sys.exit(f"error: {err}")
    print(json.dumps(record, indent=2))


if __name__ == "__main__":
    with exits_on_missing_extra():
        main()
