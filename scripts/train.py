"""Train a hf_vanilla translation model with the paper's recipe; runs under `accelerate launch` or plain python.

Every TrainingConfig key is a flag (`--max-tokens 4096`); flags override the keys of `--config FILE`.
Examples:
    python scripts/train.py --config configs/multi30k-small.yaml
    python scripts/train.py --config configs/multi30k-small.yaml --source-lang en --target-lang de --output-dir outputs/multi30k-small-en-de
    python scripts/train.py --config configs/multi30k-small.yaml --resume       # after a stop or a crash
    accelerate launch --multi_gpu --num_processes 8 scripts/train.py --config configs/wmt14-en-de-base.yaml
"""

import logging
import sys

import transformers

from hf_vanilla.cli import HelpFormatter
from hf_vanilla.training.settings import TrainingError, load_training_config, training_argument_parser
from hf_vanilla.training.train import train
from hf_vanilla.training.trainer import TrainingStopped


def build_parser():
    parser = training_argument_parser(description=__doc__, formatter_class=HelpFormatter)
    parser.add_argument("--config", help="YAML file of TrainingConfig keys; flags override its values")
    parser.add_argument(
        "--resume", action="store_true", help="continue the run in output_dir from checkpoint_last"
    )
    parser.add_argument(
        "--overwrite-output-dir",
        "--overwrite_output_dir",
        action="store_true",
        help="replace the run in output_dir (its checkpoints, log and config)",
    )
    return parser


def main() -> None:
    args = vars(build_parser().parse_args())
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    # Each save would otherwise log accelerate's file list and a progress bar per weights file.
    logging.getLogger("accelerate").setLevel(logging.WARNING)
    logging.getLogger("accelerate.utils.other").setLevel(
        logging.ERROR
    )  # "Removed shared tensor": tied weights
    transformers.utils.logging.disable_progress_bar()
    config_path, resume, overwrite = args.pop("config"), args.pop("resume"), args.pop("overwrite_output_dir")
    try:
        train(load_training_config(config_path, **args), resume=resume, overwrite_output_dir=overwrite)
    except TrainingStopped as stopped:
        print(stopped, file=sys.stderr)
        sys.exit(stopped.exit_code)
    except TrainingError as err:
        sys.exit(f"error: {err}")
    except KeyboardInterrupt:  # before the first update or after the last: no update was under way
        sys.exit("interrupted (Ctrl-C) outside the update loop; checkpoints in the output directory are whole")


if __name__ == "__main__":
    main()
