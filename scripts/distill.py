"""Sequence-level knowledge distillation (Kim and Rush, 2016): translate a dataset's training sources with a trained
teacher and write a dataset whose training targets are the teacher's translations (after the original pairs with
--keep-original); the other splits are copied as they are. Train a student on it with `train.py --dataset DIR`.

    python scripts/distill.py outputs/multi30k-best-en-de/checkpoint_average --source-lang en --target-lang de \\
        --num-beams 4 --length-penalty 1.0 --keep-original --output-dir outputs/multi30k-en-de-distilled
"""

import logging
import sys

from hf_vanilla.cli import ArgumentParser, add_decoding_arguments, add_language_arguments, decoding_kwargs
from hf_vanilla.distillation import distill_dataset
from hf_vanilla.translation import load_model_and_tokenizer


def main() -> None:
    parser = ArgumentParser(description=__doc__)
    add_decoding_arguments(parser)
    add_language_arguments(parser)
    parser.add_argument("--train-split", default="train", help="the split whose targets the teacher replaces")
    parser.add_argument(
        "--keep-original", action="store_true", help="train on the original pairs and the distilled ones"
    )
    parser.add_argument("--output-dir", required=True, help="dataset directory to write")
    parser.add_argument(
        "--overwrite", action="store_true", help="replace an output directory that is not empty"
    )
    parser.add_argument("--quiet", action="store_true", help="no progress bar")
    args = parser.parse_args()
    logging.basicConfig(level=logging.INFO, format="%(message)s")

    try:
        model, tokenizer = load_model_and_tokenizer(args.model, args.device, args.dtype)
        provenance = distill_dataset(
            model,
            tokenizer,
            args.dataset,
            args.source_lang,
            args.target_lang,
            args.output_dir,
            teacher=args.model,
            config_name=args.dataset_config,
            train_split=args.train_split,
            keep_original=args.keep_original,
            overwrite=args.overwrite,
            max_tokens=args.max_tokens,
            show_progress=not args.quiet,
            **decoding_kwargs(args),
        )
    except (ValueError, FileNotFoundError, FileExistsError) as err:
        sys.exit(f"error: {err}")
    print(
        f"wrote {args.output_dir}: {provenance['rows'][args.train_split]} training pairs, "
        f"{provenance['teacher_equals_reference']} of the teacher's translations equal their reference"
    )


if __name__ == "__main__":
    main()
