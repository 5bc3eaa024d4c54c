"""Train the joint source/target BPE tokenizer on a translation dataset and save it for AutoTokenizer.

Shows its progress; --tokenizer-sample-pairs N learns from a random N pairs and says how long the whole corpus
would take.
The folder records the languages and data it learned from; a training run of another pair refuses it.

    python scripts/train_tokenizer.py --dataset wmt/wmt14 --dataset-config de-en \
        --source-lang en --target-lang de --vocab-size 37000 --tokenizer-sample-pairs 1000000 \
        --output-dir outputs/wmt14-en-de-bpe37k
"""

import sys

from hf_vanilla.checkpoints.loading import TOKENIZER_FILES, load_tokenizer
from hf_vanilla.checkpoints.tokenizer_directory import (
    PairsSource,
    describe_tokenizer_training,
    train_tokenizer_on_pairs,
)
from hf_vanilla.cli import (
    ArgumentParser,
    add_dataset_arguments,
    add_logging_argument,
    add_tokenizer_sample_argument,
    configure_logging,
    translation_data,
)
from hf_vanilla.data.corpus import CorpusError
from hf_vanilla.data.tokenization import DEFAULT_VOCAB_SIZE, mean_tokens_per_sentence, round_trip_rate


def build_parser() -> ArgumentParser:
    parser = ArgumentParser(description=__doc__)
    add_dataset_arguments(parser)
    parser.add_argument("--split", default="train", help="split to train on")
    parser.add_argument("--report-split", default="validation", help="split to measure the tokenizer on")
    parser.add_argument("--vocab-size", type=int, default=DEFAULT_VOCAB_SIZE, help="tokens in the vocabulary")
    parser.add_argument("--min-frequency", type=int, default=2, help="merges need pairs seen this often")
    parser.add_argument("--output-dir", default="outputs/tokenizer", help="directory AutoTokenizer will load")
    add_tokenizer_sample_argument(parser)
    add_logging_argument(parser)
    return parser


def main() -> None:
    args = build_parser().parse_args()
    configure_logging(args.log_level)

    data = translation_data(args)
    try:
        pairs, report_pairs = data.pairs(args.split), data.pairs(args.report_split)
    except CorpusError as err:
        sys.exit(f"error: {err}")
    source = PairsSource((args.source_lang, args.target_lang), data.dataset, args.split)
    training = train_tokenizer_on_pairs(
        pairs, args.output_dir, args.vocab_size, source, args.tokenizer_sample_pairs, args.min_frequency
    )
    print(f"saved {describe_tokenizer_training(training)}")
    tokenizer = load_tokenizer(args.output_dir, needed_files=TOKENIZER_FILES)
    for lang, column in ((args.source_lang, "source"), (args.target_lang, "target")):
        texts = list(report_pairs[column])
        print(
            f"{args.report_split} {lang}: round trip {round_trip_rate(tokenizer, texts):.2%}, "
            f"{mean_tokens_per_sentence(tokenizer, texts):.2f} tokens a sentence (without </s>)"
        )


if __name__ == "__main__":
    main()
