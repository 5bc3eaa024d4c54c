"""docs/options.md: every flag of the user-facing scripts, by --help section, written from the scripts' own
parsers.

`python scripts/tools/write_options_doc.py` rewrites the page; tests/tools/test_options_page.py checks it is
current.
"""

from __future__ import annotations

import argparse
import re
import runpy
import sys
from pathlib import Path

from hf_vanilla.cli import ArgumentParser

# The scripts a user runs, the everyday ones first; their paths are relative to the repository root.
USER_SCRIPTS = (
    "scripts/train.py",
    "scripts/translate.py",
    "scripts/evaluate_bleu.py",
    "scripts/select_checkpoint.py",
    "scripts/serve.py",
    "scripts/prepare_data.py",
    "scripts/train_tokenizer.py",
    "scripts/average_checkpoints.py",
    "scripts/tools/export_marian.py",
)

REGENERATE = "python scripts/tools/write_options_doc.py"


def script_parser(script: str | Path) -> ArgumentParser:
    """The parser the script at `script` builds (its `build_parser()`), without running the script; its folder
    is first on the import path meanwhile, as when it runs (scripts import the modules beside them)."""
    sys.path.insert(0, str(Path(script).parent))
    try:
        return runpy.run_path(str(script), run_name="build_parser")["build_parser"]()
    finally:
        sys.path.remove(str(Path(script).parent))


def options_page(repository: str | Path) -> str:
    """docs/options.md of the scripts in `repository`: a section a script, a table a --help section."""
    names = [Path(script).name for script in USER_SCRIPTS]
    parts = [
        "# Options of the scripts",
        "",
        "Every flag of the scripts below, by the sections of their `--help`, with its default; each `--a-b` "
        "flag also",
        "answers to `--a_b`. Generated from the scripts' parsers by",
        f"`{REGENERATE}`; a test fails when this page and the parsers differ.",
        "",
        " · ".join(f"[{name}](#{name.replace('.', '')})" for name in names),
    ]
    for script in USER_SCRIPTS:
        parts += ["", *script_section(script, script_parser(Path(repository) / script))]
    return "\n".join(parts) + "\n"


def script_section(script: str, parser: ArgumentParser) -> list[str]:
    description = " ".join((parser.description or "").strip().split("\n\n")[0].split())
    lines = [f"## {Path(script).name}", "", description, "", f"`{_synopsis(script, parser)}`"]
    for section in parser.sections:
        actions = [action for action in section.actions if action.dest != "help"]
        if actions:
            heading = f"**{section.title}**" + (f": {section.description}" if section.description else "")
            lines += ["", heading, ""]
            lines += ["| option | default | what |", "|---|---|---|", *map(_row, actions)]
    return lines


def _synopsis(script: str, parser: ArgumentParser) -> str:
    """`python SCRIPT POSITIONAL... [options]`: argparse's own usage line wraps at the terminal's width."""
    positionals = [
        _metavar(action)
        for section in parser.sections
        for action in section.actions
        if not action.option_strings
    ]
    return " ".join(["python", script, *positionals, "[options]"])


def _row(action: argparse.Action) -> str:
    help_text, default = _help_and_default(action)
    return f"| {_spellings(action)} | {_cell(default)} | {_cell(help_text)} |"


def _spellings(action: argparse.Action) -> str:
    if not action.option_strings:
        return f"`{_metavar(action)}`"
    value = "" if action.nargs == 0 else " " + _metavar(action)
    return ", ".join(f"`{flag}{value}`" for flag in action.option_strings)


def _metavar(action: argparse.Action) -> str:
    if action.metavar:
        name = action.metavar
    elif action.choices is not None:
        name = "{" + ",".join(map(str, action.choices)) + "}"
    else:
        name = action.dest.upper() if action.option_strings else action.dest
    return {"?": f"[{name}]", "+": f"{name}...", "*": f"[{name}...]"}.get(action.nargs, name)


def _help_and_default(action: argparse.Action) -> tuple[str, str]:
    """The help without a default it states, and that default (a training setting's help states its own)."""
    help_text = action.help or ""
    stated = re.search(r"\s*\(default: (.*)\)$", help_text)
    if stated:
        return help_text[: stated.start()], stated.group(1)
    if action.default is argparse.SUPPRESS:
        return help_text, ""
    if action.required:
        return help_text, "required"
    return help_text, "off" if action.nargs == 0 and action.default is False else repr(action.default)


def _cell(text: str) -> str:
    """`text` on one line of a Markdown table."""
    return " ".join(text.split()).replace("|", "\\|")
