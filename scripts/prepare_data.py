"""Prepare a training run's data once, before training: the tokenizer, then the cleaned, tokenized corpus.

Reads the same config as scripts/train.py (its flags are the keys that decide the data) and writes what its
run would prepare before the first update into datasets' cache (HF_DATASETS_CACHE), which that run, every
process of it and every later run then read. On several nodes without a shared file system, run it on each
node, or let the training run do it: each node's first process prepares while the others wait. The tokenizer,
when missing, is trained first (on a random sample with --tokenizer-sample-pairs, which also says how long the
whole corpus would take).

    python scripts/prepare_data.py --config configs/wmt14-en-de-base.yaml
    python scripts/prepare_data.py --config configs/wmt14-en-de-base.yaml --tokenizer-sample-pairs 1000000
"""

import json
import sys

from hf_vanilla.cli import (
    ArgumentParser,
    add_logging_argument,
    add_tokenizer_sample_argument,
    add_training_config_arguments,
    configure_logging,
    training_config,
)
from hf_vanilla.training.preparation import PREPARATION_SETTINGS, prepare_training_data
from hf_vanilla.training.settings import TrainingError


def build_parser() -> ArgumentParser:
    parser = ArgumentParser(description=__doc__)
    add_training_config_arguments(parser, PREPARATION_SETTINGS)
    add_tokenizer_sample_argument(parser)
    add_logging_argument(parser)
    return parser


def main() -> None:
    args = build_parser().parse_args()
    configure_logging(args.log_level)
    try:
        report = prepare_training_data(training_config(args), args.tokenizer_sample_pairs)
    except TrainingError as err:
        sys.exit(f"error: {err}")
    print(json.dumps(report, indent=2))
    print(
        f"prepared {report['train_pairs']:,} training pairs ({report['train_source_tokens']:,} source and "
        f"{report['train_target_tokens']:,} target tokens) "
        f"and {report['validation_pairs']:,} validation pairs in {report['seconds']:.0f} s; "
        f"cached in {report['cache_directory']}"
    )


if __name__ == "__main__":
    main()
