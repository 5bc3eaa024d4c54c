"""Train a language model of the target language for reranking (`--rerank-language-model` of translate.py,
evaluate_bleu.py and select_checkpoint.py): a small GPT-2 over a translation model's vocabulary, on the target
side of the dataset's training pairs, its validation perplexity after each epoch
(`hf_vanilla.research.language_model`; not part of the paper's model).

    python scripts/research/train_language_model.py \\
        --tokenizer outputs/multi30k-best-de-en/checkpoint_average \\
        --source-lang de --target-lang en --output-dir outputs/language-model-en
"""

import sys

from hf_vanilla.checkpoints.loading import TOKENIZER_FILES, load_tokenizer
from hf_vanilla.cli import (
    ArgumentParser,
    add_dataset_arguments,
    add_device_argument,
    add_logging_argument,
    add_progress_argument,
    configure_logging,
    positive_int,
    translation_data,
)
from hf_vanilla.research.language_model import RECORD_FILE, LanguageModelTraining, train_language_model


def build_parser() -> ArgumentParser:
    parser = ArgumentParser(description=__doc__)
    parser.add_argument(
        "--tokenizer",
        required=True,
        help="the translation models' tokenizer (a saved model or tokenizer directory)",
    )
    add_dataset_arguments(parser)
    parser.add_argument(
        "--output-dir", required=True, help="where the model, its tokenizer and its record go"
    )
    parser.add_argument("--epochs", type=positive_int, default=3, help="passes over the training targets")
    parser.add_argument("--batch-size", type=positive_int, default=64, help="sentences per update")
    parser.add_argument("--seed", type=int, default=1, help="initialisation and data order")
    parser.add_argument(
        "--precision", default="auto", help="auto, no, bf16 or fp16 (auto: what the device runs natively)"
    )
    add_device_argument(parser)
    add_progress_argument(parser)
    add_logging_argument(parser)
    return parser


def main() -> None:
    args = build_parser().parse_args()
    configure_logging(args.log_level)

    try:
        tokenizer = load_tokenizer(args.tokenizer, needed_files=TOKENIZER_FILES)
        data = translation_data(args)
        splits = {split: data.pairs(split)["target"] for split in ("train", "validation")}
        record = train_language_model(
            splits["train"],
            tokenizer,
            args.output_dir,
            splits["validation"],
            LanguageModelTraining(
                epochs=args.epochs,
                batch_size=args.batch_size,
                seed=args.seed,
                precision=args.precision,
                device=args.device,
                show_progress=not args.quiet,
            ),
        )
    except (ValueError, FileNotFoundError, OSError) as err:
        sys.exit(f"error: {err}")
    perplexities = ", ".join(f"{row['validation_perplexity']:.2f}" for row in record["validation"])
    print(
        f"{args.output_dir}: {record['updates']} updates in {record['seconds']:.0f} s "
        f"({record['precision']}); validation perplexity after each epoch: {perplexities}; record: "
        f"{RECORD_FILE}"
    )


if __name__ == "__main__":
    main()
