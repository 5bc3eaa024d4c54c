"""docs/options.md: every flag of the user-facing scripts, by --help section, written from the scripts' own parsers.

`python scripts/tools/write_options_doc.py` rewrites the page; tests/tools/test_options_page.py checks it is current.
"""

from __future__ import annotations

import argparse
import runpy
import sys
from pathlib import Path

# The scripts a user runs, in the order a run needs them; their paths are relative to the repository root.
USER_SCRIPTS = (
    "scripts/prepare_data.py",
    "scripts/train_tokenizer.py",
    "scripts/train.py",
    "scripts/average_checkpoints.py",
    "scripts/select_checkpoint.py",
    "scripts/evaluate_bleu.py",
    "scripts/translate.py",
    "scripts/serve.py",
    "scripts/tools/export_marian.py",
)

REGENERATE = "python scripts/tools/write_options_doc.py"


def script_parser(script: str | Path) -> argparse.ArgumentParser:
    """The parser the script at `script` builds (its `build_parser()`), without running the script; its folder is
    first on the import path meanwhile, as when it runs (scripts import the modules beside them)."""
    sys.path.insert(0, str(Path(script).parent))
    try:
        return runpy.run_path(str(script), run_name="build_parser")["build_parser"]()
    finally:
        sys.path.remove(str(Path(script).parent))


def options_page(repository: str | Path) -> str:
    """docs/options.md of the scripts in `repository`: a section a script, a table a --help section."""
    parts = [
        "# Options of the scripts",
        "",
        f"Every flag of the scripts below, as `--help` shows it, by section. Generated from the scripts' parsers by "
        f"`{REGENERATE}`; a test fails when this page and the parsers differ. Each `--a-b` flag also answers to "
        "`--a_b`.",
    ]
    for script in USER_SCRIPTS:
        parts += ["", *_script_section(script, script_parser(Path(repository) / script))]
    return "\n".join(parts) + "\n"


def _script_section(script: str, parser: argparse.ArgumentParser) -> list[str]:
    description = (parser.description or "").strip().split("\n\n")[0]
    lines = [f"## {Path(script).name}", "", " ".join(description.split()), "", "```", _usage(script, parser), "```"]
    for group in parser._action_groups:  # argparse keeps --help's sections only here
        actions = [action for action in group._group_actions if action.help != argparse.SUPPRESS]
        if actions:
            lines += ["", f"**{group.title}**", "", "| option | default | what |", "|---|---|---|"]
            lines += [_row(action) for action in actions]
    return lines


def _usage(script: str, parser: argparse.ArgumentParser) -> str:
    usage = parser.format_usage().removeprefix("usage: ").strip()
    return "python " + script + usage[usage.index(" ") :] if " " in usage else "python " + script


def _row(action: argparse.Action) -> str:
    return f"| {_spellings(action)} | {_default(action)} | {_cell(action.help or '')} |"


def _spellings(action: argparse.Action) -> str:
    if not action.option_strings:
        return f"`{action.metavar or action.dest}`"
    value = "" if action.nargs == 0 else " " + _metavar(action)
    return ", ".join(f"`{flag}{value}`" for flag in action.option_strings)


def _metavar(action: argparse.Action) -> str:
    if action.choices is not None:
        name = "{" + ",".join(str(choice) for choice in action.choices) + "}"
    else:
        name = action.metavar or action.dest.upper()
    if action.nargs == "?":
        return f"[{name}]"
    if action.nargs in ("+", "*"):
        return f"{name}..."
    return name


def _default(action: argparse.Action) -> str:
    if action.default is argparse.SUPPRESS or action.required or isinstance(action, argparse._HelpAction):
        return ""
    if action.nargs == 0 and action.default is False:
        return "off"
    return _cell(f"`{action.default!r}`")


def _cell(text: str) -> str:
    """`text` on one line of a Markdown table."""
    return " ".join(text.split()).replace("|", "\\|")
