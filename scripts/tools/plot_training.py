"""Plot loss, validation BLEU and learning rate of a training run as a PNG."""

import sys
from pathlib import Path

from hf_vanilla.cli import ArgumentParser, add_logging_argument, configure_logging, exits_on_missing_extra
from hf_vanilla.tools.plotting import plot_training_log
from hf_vanilla.training.run_directory import LOG_FILE


def build_parser() -> ArgumentParser:
    parser = ArgumentParser(description=__doc__)
    parser.add_argument("run", help=f"a training output directory or its {LOG_FILE}")
    parser.add_argument("--output", help="PNG to write (default: training_curves.png in the run directory)")
    add_logging_argument(parser)
    return parser


def main() -> None:
    args = build_parser().parse_args()
    configure_logging(args.log_level)
    run_dir = Path(args.run)
    if run_dir.name == LOG_FILE:
        run_dir = run_dir.parent
    try:
        written = plot_training_log(run_dir, args.output or run_dir / "training_curves.png")
    except (FileNotFoundError, ValueError) as err:
        sys.exit(f"error: {err}")
    print(f"wrote {written}")


if __name__ == "__main__":
    with exits_on_missing_extra():
        main()
