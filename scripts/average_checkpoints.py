"""Average the weights of the last N numbered checkpoints of a run into one model
directory (paper section 6.1)."""

import sys
from pathlib import Path

from hf_vanilla.cli import ArgumentParser, add_logging_argument, configure_logging
from hf_vanilla.training.run_directory import average_run_checkpoints
from hf_vanilla.training.settings import TrainingError


def build_parser() -> ArgumentParser:
    parser = ArgumentParser(description=__doc__)
    parser.add_argument("run", help="training output directory holding checkpoint_<step> directories")
    parser.add_argument(
        "-n", "--last", type=int, default=5, help="how many of the latest checkpoints (base: 5, big: 20)"
    )
    parser.add_argument("--output", help="directory to write (default: RUN/checkpoint_average)")
    add_logging_argument(parser)
    return parser


def main() -> None:
    args = build_parser().parse_args()
    configure_logging(args.log_level)
    run = Path(args.run)
    if not run.is_dir():
        sys.exit(f"error: {run} is not a directory")
    try:
        checkpoints = average_run_checkpoints(run, args.last, target=args.output)
    except TrainingError as err:
        sys.exit(f"error: {err}")
    averaged = ", ".join(path.name for path in checkpoints)
    print(f"averaged {averaged} into {args.output or run / 'checkpoint_average'}")


if __name__ == "__main__":
    main()
