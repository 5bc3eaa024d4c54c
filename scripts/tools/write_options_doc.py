"""Write docs/options.md, every flag of the user-facing scripts by --help section, from the scripts' own
parsers.

    python scripts/tools/write_options_doc.py           # after changing a flag, its help or its default
"""

from pathlib import Path

from hf_vanilla.cli import ArgumentParser, add_logging_argument, configure_logging
from hf_vanilla.files import write_text_atomic
from hf_vanilla.tools.options_page import options_page

REPOSITORY = Path(__file__).resolve().parents[2]


def build_parser() -> ArgumentParser:
    parser = ArgumentParser(description=__doc__)
    parser.add_argument("--output", default=None, help="the page to write (default: docs/options.md of this "
        "repository)")
    add_logging_argument(parser)
    return parser


def main() -> None:
    args = build_parser().parse_args()
    configure_logging(args.log_level)
    output = args.output or REPOSITORY / "docs" / "options.md"
    write_text_atomic(output, options_page(REPOSITORY))
    print(f"wrote {output}")


if __name__ == "__main__":
    main()
