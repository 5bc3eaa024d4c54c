"""Train a hf_vanilla translation model with the paper's recipe;
runs under `accelerate launch` or plain python.

Every TrainingConfig key is a flag (`--max-tokens 4096`); flags override the keys of `--config FILE`.
Examples:
    python scripts/train.py --config configs/multi30k-small.yaml
    python scripts/train.py --config configs/multi30k-small.yaml --source-lang en --target-lang de \
        --output-dir outputs/multi30k-small-en-de
    python scripts/train.py --config configs/multi30k-small.yaml --resume       # after a stop or a crash
    accelerate launch --multi_gpu --num_processes 8 scripts/train.py --config configs/wmt14-en-de-base.yaml
"""

import sys

import transformers

from hf_vanilla.cli import (
    ArgumentParser,
    add_logging_argument,
    add_training_config_arguments,
    configure_logging,
    training_config,
)
from hf_vanilla.training.settings import TrainingError
from hf_vanilla.training.stopping import TrainingStopped
from hf_vanilla.training.train import train


def build_parser() -> ArgumentParser:
    parser = ArgumentParser(description=__doc__)
    add_training_config_arguments(parser)
    parser.add_argument(
        "--resume", action="store_true", help="continue the run in output_dir from checkpoint_last"
    )
    parser.add_argument(
        "--overwrite-output-dir",
        action="store_true",
        help="replace the run in output_dir (its checkpoints, log and config)",
    )
    add_logging_argument(parser)
    return parser


def main() -> None:
    args = build_parser().parse_args()
    configure_logging(args.log_level)
    transformers.utils.logging.disable_progress_bar()  # a bar per weights file at each save
    try:
        train(training_config(args), resume=args.resume, overwrite_output_dir=args.overwrite_output_dir)
    except TrainingStopped as stopped:
        print(stopped, file=sys.stderr)
        sys.exit(stopped.exit_code)
    except TrainingError as err:
        sys.exit(f"error: {err}")
    except KeyboardInterrupt:  # before the first update or after the last: no update was under way
        sys.exit(
            "interrupted (Ctrl-C) outside the update loop; checkpoints in the output directory are whole"
        )


if __name__ == "__main__":
    main()
