"""Train the joint source/target BPE tokenizer on a translation dataset and save it for AutoTokenizer."""

import logging
from itertools import chain

from hf_vanilla.cli import ArgumentParser, add_language_arguments
from hf_vanilla.data import load_translation_split
from hf_vanilla.tokenization import (
    DEFAULT_VOCAB_SIZE,
    mean_tokens_per_sentence,
    round_trip_rate,
    save_tokenizer,
    train_tokenizer,
)


def main() -> None:
    parser = ArgumentParser(description=__doc__)
    add_language_arguments(parser)
    parser.add_argument("--split", default="train", help="split to train on")
    parser.add_argument("--report-split", default="validation", help="split to measure the tokenizer on")
    parser.add_argument("--vocab-size", type=int, default=DEFAULT_VOCAB_SIZE, help="tokens in the vocabulary")
    parser.add_argument("--min-frequency", type=int, default=2, help="merges need pairs seen this often")
    parser.add_argument("--output-dir", default="outputs/tokenizer", help="directory AutoTokenizer will load")
    args = parser.parse_args()
    logging.basicConfig(level=logging.INFO)

    def load(split):
        return load_translation_split(
            args.dataset, args.source_lang, args.target_lang, split, args.dataset_config
        )

    pairs = load(args.split)
    tokenizer = train_tokenizer(
        chain(pairs["source"], pairs["target"]), vocab_size=args.vocab_size, min_frequency=args.min_frequency
    )
    print(f"saved {save_tokenizer(tokenizer, args.output_dir)}: vocabulary of {len(tokenizer)}")
    report_pairs = load(args.report_split)
    for lang, column in ((args.source_lang, "source"), (args.target_lang, "target")):
        texts = list(report_pairs[column])
        print(
            f"{args.report_split} {lang}: round trip {round_trip_rate(tokenizer, texts):.2%}, "
            f"{mean_tokens_per_sentence(tokenizer, texts):.2f} tokens a sentence (without </s>)"
        )


if __name__ == "__main__":
    main()
