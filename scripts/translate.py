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

from hf_vanilla.cli import ArgumentParser, add_decoding_arguments, decoding_kwargs, runtime_kwargs
from hf_vanilla.evaluation.scoring import Runtime
from hf_vanilla.research.cli import add_research_arguments, research_decoder
from hf_vanilla.translation import load_engine, read_lines, write_lines_atomic


def main() -> None:
    parser = ArgumentParser(description=__doc__)
    add_decoding_arguments(parser)
    add_research_arguments(parser)
    parser.add_argument("--input", default="-", help="UTF-8 text file, one sentence a line (default: stdin)")
    parser.add_argument("--output", default="-", help="file to write (default: stdout)")
    parser.add_argument("--quiet", action="store_true", help="no progress bar")
    args = parser.parse_args()
    logging.basicConfig(level=logging.WARNING)

    try:
        # Plain beam search without research options; a word bonus alone is refused before any model loads.
        decoder = research_decoder(args)
        lines = read_lines(args.input)
        runtime = Runtime(**runtime_kwargs(args), show_progress=not args.quiet)
        engine = load_engine(args.model, runtime.engine)
        ((_, translations),) = decoder(engine, lines, decoding_kwargs(args), runtime)
    except (ValueError, FileNotFoundError, ImportError) as err:
        sys.exit(f"error: {err}")
    if args.output == "-":
        sys.stdout.writelines(f"{line}\n" for line in translations)
    else:
        write_lines_atomic(args.output, translations)


if __name__ == "__main__":
    main()
