"""docs/options.md is the scripts' parsers written out: every flag, by --help section, with its default."""

from conftest import REPO

from hf_vanilla.cli import ArgumentParser
from hf_vanilla.tools.options_page import (
    REGENERATE,
    USER_SCRIPTS,
    options_page,
    script_parser,
    script_section,
)


def test_docs_options_md_is_what_the_parsers_say():
    assert (REPO / "docs" / "options.md").read_text() == options_page(REPO), (
        f"docs/options.md differs from the scripts' flags: regenerate it with `{REGENERATE}`"
    )


def test_every_flag_of_every_user_script_is_on_the_page():
    page = options_page(REPO)
    for script in USER_SCRIPTS:
        section = page.split(f"\n## {script.rsplit('/', 1)[-1]}\n")[1].split("\n## ")[0]
        flags = {flag for action in script_parser(REPO / script)._actions for flag in action.option_strings}
        assert [flag for flag in flags - {"-h", "--help"} if f"`{flag}" not in section] == [], script


def test_a_section_shows_each_group_with_its_flags_defaults_and_help():
    parser = ArgumentParser(description="Do a thing.\n\nMore words that the page leaves to --help.")
    parser.add_argument("inputs", nargs="+", help="files | to read")
    parser.add_argument("--fast", action="store_true", help="go fast")
    group = parser.add_argument_group("tuning", "how hard it tries")
    group.add_argument("--tries", type=int, default=3, help="attempts")
    group.add_argument("--limit", default=None, help="most rows (default: all rows)")
    assert script_section("scripts/thing.py", parser) == [
        "## thing.py",
        "",
        "Do a thing.",
        "",
        "`python scripts/thing.py inputs... [options]`",
        "",
        "**positional arguments**",
        "",
        "| option | default | what |",
        "|---|---|---|",
        "| `inputs...` | required | files \\| to read |",
        "",
        "**options**",
        "",
        "| option | default | what |",
        "|---|---|---|",
        "| `--fast` | off | go fast |",
        "",
        "**tuning**: how hard it tries",
        "",
        "| option | default | what |",
        "|---|---|---|",
        "| `--tries TRIES` | 3 | attempts |",
        "| `--limit LIMIT` | all rows | most rows |",
    ]
