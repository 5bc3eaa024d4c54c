"""Every command the user docs show runs as written: each script they call exists, and each call's arguments parse
with the script's own parser (nothing is executed). The docs are README.md and docs/**/*.md outside docs/research/
(a record of past runs); their commands are the fenced bash/sh/console/shell blocks, and the inline code in their
prose that calls a script (`python scripts/serve.py CHECKPOINT --port 8000`)."""

import contextlib
import io
import re
import shlex
from dataclasses import dataclass, field
from pathlib import Path

import pytest
from conftest import REPO

from hf_vanilla.tools.options_page import script_parser

SHELL_FENCE = re.compile(r"^```(?:bash|sh|console|shell)\s*\n(.*?)^```", re.M | re.S)
ANY_FENCE = re.compile(r"^```.*?^```", re.M | re.S)
INLINE_CODE = re.compile(r"(?<!`)`([^`]+)`(?!`)")
INLINE_COMMAND = re.compile(r"([A-Z_]+=\S+ )*(python3? |bash |accelerate launch |torchrun ).*?scripts/")
SEPARATORS = {";", "&&", "||", "|", "&"}
REDIRECTIONS = {"<", ">", ">>", "<<", "2>", "&>"}
ENV_ASSIGNMENT = re.compile(r"[A-Za-z_]\w*=")
PLACEHOLDER = re.compile(r"[A-Z][A-Z0-9_]*")  # CHECKPOINT, SRC: a word the reader fills in
ELISION = "..."  # a flag's value after a flag (`--config ...`), otherwise the rest of the flags (`train.py ...`)
# The languages of Multi30k: the Hub's bentrevett/multi30k has two, a local copy (MULTI30K=PATH) all four.
HUB_MULTI30K_LANGUAGES = {"de", "en"}
LOCAL_MULTI30K_LANGUAGES = {"de", "en", "fr", "cs"}


@dataclass
class Command:
    """One simple command of a shell block: its words after the environment assignments."""

    where: str
    words: list[str]
    environment: dict[str, str] = field(default_factory=dict)


def user_docs() -> list[Path]:
    """The docs whose commands a person copies: not the research record, nor docs/options.md, whose synopses
    (`python scripts/serve.py model [options]`) are written from the parsers themselves."""
    docs = [REPO / "README.md", *sorted((REPO / "docs").rglob("*.md"))]
    return [path for path in docs if "research" not in path.relative_to(REPO).parts and path.name != "options.md"]


def shell_blocks(text: str) -> list[tuple[int, str]]:
    """Each fenced shell block of Markdown `text`, with the line its first command is on."""
    return [(text.count("\n", 0, match.start(1)) + 1, match.group(1)) for match in SHELL_FENCE.finditer(text)]


def inline_commands(text: str) -> list[tuple[int, str]]:
    """Each inline code span of Markdown `text`'s prose that calls a script, on one line, with its line."""
    prose = ANY_FENCE.sub(lambda fence: "\n" * fence.group().count("\n"), text)
    spans = [(prose.count("\n", 0, span.start()) + 1, " ".join(span.group(1).split())) for span in INLINE_CODE.finditer(prose)]
    return [(line, span) for line, span in spans if INLINE_COMMAND.match(span)]


def without_comment(line: str, quote: str | None = None) -> tuple[str, str | None]:
    """`line` up to a `#` that starts a word outside quotes, as the shell reads comments, and the quote still open
    at its end (`quote`: the one open at its start)."""
    for index, char in enumerate(line):
        if quote:
            quote = None if char == quote else quote
        elif char in "'\"":
            quote = char
        elif char == "#" and (index == 0 or line[index - 1].isspace()):
            return line[:index], None
    return line, quote


def logical_lines(block: str) -> list[tuple[int, str]]:
    """The block's lines (with their offsets) without comments and here-documents, joined where a line ends in a
    backslash or inside quotes."""
    lines, pending, heredoc_end, quote = [], None, None, None
    for offset, line in enumerate(block.splitlines()):
        if heredoc_end is not None:
            heredoc_end = None if line.strip() == heredoc_end else heredoc_end
            continue
        quoted_from_before = quote
        text, quote = without_comment(line, quote)
        text = text.rstrip()
        heredoc = re.search(r"<<-?\s*['\"]?(\w+)['\"]?", text) if quote is None else None
        if heredoc:
            heredoc_end, text = heredoc.group(1), text[: heredoc.start()]
        start, joined = pending if pending else (offset, "")
        joined += ("\n" if quoted_from_before else " ") + text.removesuffix("\\")
        pending = (start, joined) if quote or text.endswith("\\") else None
        if pending is None and joined.strip():
            lines.append((start, joined.strip()))
    return lines


def commands(path_name: str, block_line: int, block: str) -> list[Command]:
    """The simple commands of a shell block, redirections and their files left out."""
    found = []
    for offset, line in logical_lines(block):
        lexer = shlex.shlex(line, posix=True, punctuation_chars=True)
        lexer.whitespace_split, lexer.commenters = True, ""
        words, where, skip_next = [], f"{path_name}:{block_line + offset}", False
        for word in [*lexer, ";"]:
            if skip_next:
                skip_next = False
            elif word in REDIRECTIONS:
                skip_next = True
            elif word in SEPARATORS:
                if words:
                    found.append(_command(where, words))
                words = []
            else:
                words.append(word)
    return found


def _command(where: str, words: list[str]) -> Command:
    environment = {}
    while words and ENV_ASSIGNMENT.match(words[0]):
        name, _, value = words.pop(0).partition("=")
        environment[name] = value
    return Command(where, words, environment)


def script_and_arguments(command: Command) -> tuple[str, list[str]] | None:
    """The script a command runs (a path under scripts/) and its arguments; None for other commands."""
    words = command.words
    if words[:1] in (["python"], ["python3"], ["bash"]) and len(words) > 1 and words[1].startswith("scripts/"):
        return words[1], words[2:]
    if words[:2] == ["accelerate", "launch"] or words[:1] == ["torchrun"]:
        script = next((index for index, word in enumerate(words) if word.endswith(".py")), None)
        if script is not None and words[script].startswith("scripts/"):
            return words[script], words[script + 1 :]
    return None


def problems(command: Command) -> list[str]:
    """What is wrong with `command` as written: a missing script, or arguments its parser refuses."""
    called = script_and_arguments(command)
    if called is None:
        return []
    script, arguments = called
    arguments = [word for index, word in enumerate(arguments) if word != ELISION or _follows_a_flag(arguments, index)]
    arguments = [re.sub(r"^\[(.*)\]$", r"\1", word) for word in arguments]  # a synopsis' optional `[best]`
    if PLACEHOLDER.fullmatch(Path(script).stem):
        return []  # a placeholder: `python3 scripts/NAME.py ARGS`
    if not (REPO / script).is_file():
        return [f"{command.where}: {script} does not exist"]
    if script.endswith(".py"):
        refused = parser_refusal(REPO / script, arguments)
        return [f"{command.where}: {shlex.join(command.words)}: {refused}"] if refused else []
    if script == "scripts/quickstart.sh":
        return [f"{command.where}: {problem}" for problem in quickstart_problems(arguments, command.environment)]
    return []


class Refused(Exception):
    """What a parser said of arguments it does not take."""


def _follows_a_flag(arguments: list[str], index: int) -> bool:
    return index > 0 and arguments[index - 1].startswith("-")


def parser_refusal(script: Path, arguments: list[str]) -> str | None:
    """The error `script`'s parser gives for `arguments`, or None when it takes them."""
    parser = script_parser(script)

    def refuse(message):
        raise Refused(message)

    parser.error = refuse  # argparse's error() prints the usage and exits
    parser.allow_abbrev = False  # a doc spells flags out: an abbreviation breaks when a flag of the same start comes
    try:
        with contextlib.redirect_stdout(io.StringIO()):  # --help prints and exits 0: taken
            parser.parse_args(arguments)
    except Refused as refused:
        return str(refused)
    except SystemExit as finished:
        return None if finished.code == 0 else f"exit status {finished.code}"
    return None


def quickstart_problems(arguments: list[str], environment: dict[str, str]) -> list[str]:
    """quickstart.sh takes SOURCE TARGET RECIPE: a config of its recipe, and Multi30k's languages (only two in the
    Hub's copy, four in a local one named by MULTI30K)."""
    found = []
    languages = LOCAL_MULTI30K_LANGUAGES if "MULTI30K" in environment else HUB_MULTI30K_LANGUAGES
    for language in arguments[:2]:
        if language not in languages and not PLACEHOLDER.fullmatch(language):
            found.append(f"quickstart.sh: {language!r} is not a language of {sorted(languages)}")
    if len(arguments) > 2 and not (REPO / f"configs/multi30k-{arguments[2]}.yaml").is_file():
        found.append(f"quickstart.sh: no recipe {arguments[2]!r} (configs/multi30k-{arguments[2]}.yaml)")
    if len(arguments) > 3:
        found.append(f"quickstart.sh takes at most 3 words, got {arguments}")
    return found


def documented_commands() -> list[Command]:
    found = []
    for path in user_docs():
        name = str(path.relative_to(REPO))
        text = path.read_text()
        for line, block in [*shell_blocks(text), *inline_commands(text)]:
            found += commands(name, line, block)
    return found


def test_every_documented_script_call_names_a_script_that_exists_with_arguments_it_takes():
    calls = [command for command in documented_commands() if script_and_arguments(command)]
    assert len(calls) > 40  # the docs' commands were found
    assert [problem for command in calls for problem in problems(command)] == []


# The checker itself: it must see what the shell sees, and fail on what the shell would.


def test_continuations_comments_environment_and_redirections_read_as_the_shell_reads_them():
    block = (
        "# a comment line\n"
        "MULTI30K=/data/m30k OMP_NUM_THREADS=1 python scripts/train.py --config c.yaml \\\n"
        "    --dataset 'corpus.{lang}.gz' tatoeba.tsv#en=3   # a comment after the command\n"
        "python - <<'PY'\n"
        "print('python code, not commands')\n"
        "PY\n"
        "python scripts/translate.py CHECKPOINT < input.de > output.en && cat a b\n"
    )
    found = commands("doc.md", 10, block)
    assert [(command.where, command.words) for command in found] == [
        (
            "doc.md:11",
            ["python", "scripts/train.py", "--config", "c.yaml", "--dataset", "corpus.{lang}.gz", "tatoeba.tsv#en=3"],
        ),
        ("doc.md:13", ["python", "-"]),
        ("doc.md:16", ["python", "scripts/translate.py", "CHECKPOINT"]),
        ("doc.md:16", ["cat", "a", "b"]),
    ]
    assert found[0].environment == {"MULTI30K": "/data/m30k", "OMP_NUM_THREADS": "1"}


def test_inline_code_that_calls_a_script_is_a_command_and_other_code_is_not():
    text = "Run `python scripts/serve.py CKPT\n--port 8000`, not `--port` alone.\n```bash\n`python x.py`\n```\n"
    assert inline_commands(text) == [(1, "python scripts/serve.py CKPT --port 8000")]


@pytest.mark.parametrize(
    "line, problem",
    [
        ("python scripts/tools/export_marian.py CKPT OUT --ctranslate2-dir CT2", "unrecognized arguments: --ctranslate2-dir"),
        ("accelerate launch --num_processes 2 scripts/train.py --config c.yaml --max-stepz 3", "--max-stepz"),
        ("python scripts/translate.py CHECKPOINT --num-beams zero", "--num-beams"),
        ("python scripts/train.py --config c.yaml --max-step 3", "unrecognized arguments: --max-step"),
        ("python scripts/evaluate_bleu.py CHECKPOINT --split test", "--source-lang"),  # a required flag left out
        ("python scripts/no_such_script.py --help", "scripts/no_such_script.py does not exist"),
        ("bash scripts/quickstart.sh de en fastest", "no recipe 'fastest'"),
        ("bash scripts/quickstart.sh en fr", "'fr' is not a language"),
    ],
)
def test_a_wrong_command_is_reported_naming_what_is_wrong(line, problem):
    (command,) = commands("doc.md", 1, line)
    reported = problems(command)
    assert len(reported) == 1 and problem in reported[0], reported


@pytest.mark.parametrize(
    "line",
    [
        "python scripts/tools/export_marian.py CKPT OUT --ctranslate2-output-dir CT2",
        "ACCELERATE_USE_CPU=1 torchrun --standalone --nproc_per_node 2 scripts/train.py --config ...",
        "python scripts/average_checkpoints.py --help",
        "MULTI30K=/data/m30k bash scripts/quickstart.sh en fr best",
        "bash scripts/quickstart.sh SRC TGT [best]",
    ],
)
def test_a_right_command_is_taken(line):
    (command,) = commands("doc.md", 1, line)
    assert problems(command) == []
