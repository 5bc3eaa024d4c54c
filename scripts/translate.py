"""Translate text line by line with a saved model: one line in, one line out, in order.

Reads the whole input (a file or stdin), translates it in length-sorted batches with the paper's
decoding (beam 4, length penalty 0.6, source length + 50) unless told otherwise, and writes the
translations, blank lines kept blank, to a file (atomically) or to stdout.

    python scripts/translate.py outputs/multi30k-small/final < input.de > output.en

With --rerank-with (models of the reverse direction) or --rerank-right-to-left (right-to-left models), beam
search's whole n-best list is reranked (README, "Reranking with the reverse direction").
"""

import logging
import sys

from hf_vanilla.cli import (
    ArgumentParser,
    add_decoding_arguments,
    add_ensemble_argument,
    add_reranking_arguments,
    decoding_kwargs,
)
from hf_vanilla.research.reranking import load_reranking_models, reranking_weights, translate_reranked
from hf_vanilla.translation import (
    load_ensemble,
    load_model_and_tokenizer,
    read_lines,
    translate_sentences,
    write_lines_atomic,
)


def main() -> None:
    parser = ArgumentParser(description=__doc__)
    add_decoding_arguments(parser)
    add_ensemble_argument(parser)
    add_reranking_arguments(parser)
    parser.add_argument("--input", default="-", help="UTF-8 text file, one sentence a line (default: stdin)")
    parser.add_argument("--output", default="-", help="file to write (default: stdout)")
    parser.add_argument("--quiet", action="store_true", help="no progress bar")
    args = parser.parse_args()
    logging.basicConfig(level=logging.WARNING)

    try:
        named = reranking_weights(  # empty without reranking; a word bonus alone is refused
            args.rerank_with,
            args.rerank_weight,
            args.rerank_right_to_left,
            args.right_to_left_weight,
            args.word_bonus,
            args.rerank_language_model,
            args.language_model_weight,
        )
        lines = read_lines(args.input)
        model, tokenizer = load_model_and_tokenizer(args.model, args.device, args.dtype)
        members = load_ensemble(args.ensemble, args.device, args.dtype)
        common = {"max_tokens": args.max_tokens, "show_progress": not args.quiet, "ensemble": members}
        if named:
            reranking = load_reranking_models(
                args.rerank_with, args.rerank_right_to_left, args.device, args.dtype, args.rerank_language_model
            )
            decoding = decoding_kwargs(args)
            (translations,) = translate_reranked(
                model, tokenizer, lines, decoding.pop("num_beams"), [named], **reranking, **common, **decoding
            )
        else:
            translations = translate_sentences(model, tokenizer, lines, **common, **decoding_kwargs(args))
    except (ValueError, FileNotFoundError) as err:
        sys.exit(f"error: {err}")
    if args.output == "-":
        sys.stdout.writelines(f"{line}\n" for line in translations)
    else:
        write_lines_atomic(args.output, translations)


if __name__ == "__main__":
    main()
