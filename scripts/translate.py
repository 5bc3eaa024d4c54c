"""Translate text line by line with a saved model: one line in, one line out, in order.

Reads the whole input (a file or stdin), translates it in length-sorted batches with the paper's
decoding (beam 4, length penalty 0.6, source length + 50) unless told otherwise, and writes the
translations, blank lines kept blank, to a file (atomically) or to stdout.

    python scripts/translate.py outputs/multi30k-small/final < input.de > output.en
"""

import logging
import sys

from hf_vanilla.cli import ArgumentParser, add_decoding_arguments, add_ensemble_argument, decoding_kwargs
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
    parser.add_argument("--input", default="-", help="UTF-8 text file, one sentence a line (default: stdin)")
    parser.add_argument("--output", default="-", help="file to write (default: stdout)")
    parser.add_argument("--quiet", action="store_true", help="no progress bar")
    args = parser.parse_args()
    logging.basicConfig(level=logging.WARNING)

    try:
        lines = read_lines(args.input)
        model, tokenizer = load_model_and_tokenizer(args.model, args.device, args.dtype)
        members = load_ensemble(args.ensemble, args.device, args.dtype)
        translations = translate_sentences(
            model,
            tokenizer,
            lines,
            args.max_tokens,
            show_progress=not args.quiet,
            ensemble=members,
            **decoding_kwargs(args),
        )
    except (ValueError, FileNotFoundError) as err:
        sys.exit(f"error: {err}")
    if args.output == "-":
        sys.stdout.writelines(f"{line}\n" for line in translations)
    else:
        write_lines_atomic(args.output, translations)


if __name__ == "__main__":
    main()
