"""Every command the user docs and the shell scripts show runs as written: each script they call exists, is
called through `python` where it is Python, and each call's arguments parse with the script's own parser
(nothing is executed). The docs are README.md and docs/**/*.md outside docs/research/ (a record of past runs);
their commands are the fenced bash/sh/console/shell blocks, the indented code blocks that call a script, and
the inline code in their prose that calls a script (`python scripts/serve.py CHECKPOINT --port 8000`, or
without `python`: `scripts/serve.py CHECKPOINT --port 8000`). The shell scripts are scripts/**/*.sh, whose
variables stand for values the parsers take as given."""

import contextlib
import io
import re
import shlex
import textwrap
from dataclasses import dataclass, field
from pathlib import Path

import pytest
from conftest import REPO

from hf_vanilla.tools.options_page import script_parser

SHELL_FENCE = re.compile(r"^```(?:bash|sh|console|shell)\s*\n(.*?)^```", re.M | re.S)
ANY_FENCE = re.compile(r"^```.*?^```", re.M | re.S)
INLINE_CODE = re.compile(r"(?<!`)`([^`]+)`(?!`)")
INLINE_COMMAND = re.compile(
    r"([A-Z_]+=\S+ )*((python3? |bash |accelerate launch |torchrun ).*?scripts/|scripts/\S+ )"
)
# An indented Markdown code block: lines of 4 spaces or more after a blank line, outside a list
INDENTED_BLOCK = re.compile(r"(?:^\n|\A)((?: {4,}\S.*\n?)+)", re.M)
LIST_ITEM = re.compile(r"^\s*(?:[-*+]|\d+\.)\s")
COMMAND_START = re.compile(r"\s*(?:[A-Z_]+=\S+\s+)*(?:python3?|bash|accelerate|torchrun|scripts/)")
PYTHON = re.compile(r"python3?|\$\{?python3?\}?", re.IGNORECASE)  # "$python" in a script: its interpreter
# A shell expansion that is a whole word: an array's, or one left unquoted, becomes any number of words
WHOLE_EXPANSION = re.compile(r"\$(?:[@*]|\w+|\{[^}]*\})")
SEPARATORS = {";", "&&", "||", "|", "&"}
REDIRECTIONS = {"<", ">", ">>", "<<", "2>", "&>"}
ENV_ASSIGNMENT = re.compile(r"[A-Za-z_]\w*=")
PLACEHOLDER = re.compile(r"[A-Z][A-Z0-9_]*")  # CHECKPOINT, SRC: a word the reader fills in
# A flag's value after a flag (`--config ...`), otherwise the rest of the flags (`train.py ...`)
ELISION = "..."
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
    return [
        path for path in docs if "research" not in path.relative_to(REPO).parts and path.name != "options.md"
    ]


def shell_blocks(text: str) -> list[tuple[int, str]]:
    """Each fenced shell block of Markdown `text`, with the line its first command is on."""
    return [(text.count("\n", 0, match.start(1)) + 1, match.group(1)) for match in SHELL_FENCE.finditer(text)]


def indented_blocks(text: str) -> list[tuple[int, str]]:
    """Each indented code block of Markdown `text` (not a list item's continuation) that calls a script,
    dedented, with the line its first command is on."""
    prose = ANY_FENCE.sub(lambda fence: "\n" * fence.group().count("\n"), text)
    found = []
    for match in INDENTED_BLOCK.finditer(prose):
        before = prose[: match.start(1)].rstrip("\n").rsplit("\n", 1)[-1]
        if LIST_ITEM.match(before) or before.startswith(" ") or not COMMAND_START.match(match.group(1)):
            continue
        found.append((prose.count("\n", 0, match.start(1)) + 1, textwrap.dedent(match.group(1))))
    return found


def shell_scripts() -> list[Path]:
    return sorted((REPO / "scripts").rglob("*.sh"))


def inline_commands(text: str) -> list[tuple[int, str]]:
    """Each inline code span of Markdown `text`'s prose that calls a script, on one line, with its line."""
    prose = ANY_FENCE.sub(lambda fence: "\n" * fence.group().count("\n"), text)
    spans = [
        (prose.count("\n", 0, span.start()) + 1, " ".join(span.group(1).split()))
        for span in INLINE_CODE.finditer(prose)
    ]
    return [(line, span) for line, span in spans if INLINE_COMMAND.match(span)]


def without_comment(line: str, quote: str | None = None) -> tuple[str, str | None]:
    """`line` up to a `#` that starts a word outside quotes, as the shell reads comments, and the quote still
    open at its end (`quote`: the one open at its start)."""
    for index, char in enumerate(line):
        if quote:
            quote = None if char == quote else quote
        elif char in "'\"":
            quote = char
        elif char == "#" and (index == 0 or line[index - 1].isspace()):
            return line[:index], None
    return line, quote


def logical_lines(block: str) -> list[tuple[int, str]]:
    """The block's lines (with their offsets) without comments and here-documents, joined where a line ends in
    a backslash or inside quotes."""
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


EXPANSION_MARK = "\ue000"  # around a shell expansion's kind while the line is split into words
SHELL_VALUE = "VALUE"  # what a shell variable stands for: a value the parsers take as given


def marked_expansions(line: str) -> str:
    """`line` with each shell expansion (`$run`, `"${grid[@]}"`) marked by its kind: "array" (any number of
    words), "bare" (unquoted: split into any number of words) or "quoted" (one word); the interpreter's
    variable (`"$python"`) is left as it is."""
    marked, quote, index = [], None, 0
    while index < len(line):
        char, expansion = line[index], None
        if quote != "'" and char == "$":
            expansion = WHOLE_EXPANSION.match(line, index)
        if expansion and not PYTHON.fullmatch(expansion.group()):
            kind = "quoted" if quote else "bare"
            if re.search(r"\[[@*]\]|^\$[@*]", expansion.group()):
                kind = "array"
            marked.append(f"{EXPANSION_MARK}{kind}{EXPANSION_MARK}")
            index = expansion.end()
            continue
        if quote != "'" and line.startswith("$(", index):
            marked.append(f"{EXPANSION_MARK}{'quoted' if quote else 'bare'}{EXPANSION_MARK}")
            index = _substitution_end(line, index + 2)
            continue
        if quote:
            quote = None if char == quote else quote
        elif char in "'\"":
            quote = char
        marked.append(char)
        index += 1
    return "".join(marked)


def _substitution_end(line: str, index: int) -> int:
    """Where the command substitution whose text starts at `index` (after its `$(`) ends."""
    depth = 1
    while index < len(line) and depth:
        depth += {"(": 1, ")": -1}.get(line[index], 0)
        index += 1
    return index


def expanded(words: list[str]) -> list[str]:
    """`words` with each marked expansion as the parsers meet it: one value after a flag or where quoted,
    otherwise nothing (an unquoted or array expansion may be empty, or flags this check cannot know)."""
    found = []
    for word in words:
        kind = word.strip(EXPANSION_MARK)
        whole = word == f"{EXPANSION_MARK}{kind}{EXPANSION_MARK}"
        if whole and kind != "quoted" and not (found and found[-1].startswith("-")):
            continue
        found.append(re.sub(f"{EXPANSION_MARK}\\w+{EXPANSION_MARK}", SHELL_VALUE, word))
    return found


def commands(path_name: str, block_line: int, block: str) -> list[Command]:
    """The simple commands of a shell block, redirections and their files left out."""
    found = []
    for offset, line in logical_lines(block):
        lexer = shlex.shlex(marked_expansions(line), posix=True, punctuation_chars=True)
        lexer.whitespace_split, lexer.commenters = True, ""
        words, where, skip_next = [], f"{path_name}:{block_line + offset}", False
        for word in [*lexer, ";"]:
            if skip_next:
                skip_next = False
            elif word in REDIRECTIONS:
                skip_next = True
            elif word in SEPARATORS:
                if words:
                    found.append(_command(where, expanded(words)))
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
    """The script a command runs (a path under scripts/) and its arguments; None for other commands. The
    script follows `bash` or the interpreter, where the command starts or as a wrapper's arguments
    (`timeout 60 python3 scripts/x.py`, a shell function's `"$python" scripts/x.py`), or `accelerate launch`'s
    or `torchrun`'s options; a script alone is a script written without its interpreter, and a shell array of
    one (`benchmark=(scripts/x.py --flag)`) is given to the interpreter later."""
    words = command.words
    if words[:1] == ["("] and len(words) > 1 and words[1].startswith("scripts/"):
        return words[1], words[2:-1] if words[-1] == ")" else words[2:]
    if words and words[0].startswith("scripts/"):
        return words[0], words[1:]
    if words[:1] == ["bash"] and len(words) > 1 and words[1].startswith("scripts/"):
        return words[1], words[2:]
    runner = next((index for index, word in enumerate(words[:-1]) if PYTHON.fullmatch(word)), None)
    if runner is not None and words[runner + 1].startswith("scripts/"):
        return words[runner + 1], words[runner + 2 :]
    if words[:2] == ["accelerate", "launch"] or words[:1] == ["torchrun"]:
        script = next((index for index, word in enumerate(words) if word.endswith(".py")), None)
        if script is not None and words[script].startswith("scripts/"):
            return words[script], words[script + 1 :]
    return None


def problems(command: Command) -> list[str]:
    """What is wrong with `command` as written: flags alone, a missing script, a script without its
    interpreter, or arguments its parser refuses."""
    in_docs = command.where.partition(":")[0].endswith(".md")  # a script's `--flag)` is a case of its own
    if in_docs and command.words[:1] and command.words[0].startswith("-"):
        return [f"{command.where}: {shlex.join(command.words)}: flags alone, not a command to paste"]
    called = script_and_arguments(command)
    if called is None:
        return []
    script, arguments = called
    arguments = [
        word for index, word in enumerate(arguments) if word != ELISION or _follows_a_flag(arguments, index)
    ]
    arguments = [re.sub(r"^\[(.*)\]$", r"\1", word) for word in arguments]  # a synopsis' optional `[best]`
    if PLACEHOLDER.fullmatch(Path(script).stem):
        return []  # a placeholder: `python3 scripts/NAME.py ARGS`
    if not (REPO / script).is_file():
        return [f"{command.where}: {script} does not exist"]
    found = []
    if command.words[0] == script:
        runner = "python" if script.endswith(".py") else "bash"
        written = f"{command.where}: {shlex.join(command.words)}"
        found.append(f"{written}: runs as written only as `{runner} {script}`")
    if script.endswith(".py"):
        refused = parser_refusal(REPO / script, arguments)
        return found + ([f"{command.where}: {shlex.join(command.words)}: {refused}"] if refused else [])
    if script == "scripts/quickstart.sh":
        refused = quickstart_problems(arguments, command.environment)
        found += [f"{command.where}: {problem}" for problem in refused]
    return found


class Refused(Exception):
    """What a parser said of arguments it does not take."""


def _follows_a_flag(arguments: list[str], index: int) -> bool:
    return index > 0 and arguments[index - 1].startswith("-")


def parser_refusal(script: Path, arguments: list[str]) -> str | None:
    """The error `script`'s parser gives for `arguments`, or None when it takes them."""
    try:
        parser = script_parser(script)
    except KeyError:  # a script without build_parser: its arguments cannot be checked here
        return None

    def refuse(message):
        raise Refused(message)

    parser.error = refuse  # argparse's error() prints the usage and exits
    # A doc spells flags out: an abbreviation breaks when a flag of the same start comes
    parser.allow_abbrev = False
    try:
        with contextlib.redirect_stdout(io.StringIO()):  # --help prints and exits 0: taken
            parser.parse_args(arguments)
    except Refused as refused:
        # A shell variable's value is unknown here: an int or a choice is taken as given
        return None if f"'{SHELL_VALUE}'" in str(refused) else str(refused)
    except SystemExit as finished:
        return None if finished.code == 0 else f"exit status {finished.code}"
    return None


def quickstart_problems(arguments: list[str], environment: dict[str, str]) -> list[str]:
    """quickstart.sh takes SOURCE TARGET RECIPE: a config of its recipe, and Multi30k's languages (only two in
    the Hub's copy, four in a local one named by MULTI30K)."""
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
        for line, block in [*shell_blocks(text), *indented_blocks(text), *inline_commands(text)]:
            found += commands(name, line, block)
    for path in shell_scripts():
        found += commands(str(path.relative_to(REPO)), 1, path.read_text())
    return found


def test_every_documented_script_call_names_a_script_that_exists_with_arguments_it_takes():
    found = documented_commands()
    calls = [command for command in found if script_and_arguments(command)]
    assert len(calls) > 40  # the docs' commands were found
    assert {"scripts/quickstart.sh", "scripts/tools/gpu_report.sh", "scripts/research/best_recipe.sh"} <= {
        command.where.partition(":")[0] for command in calls
    }
    assert [problem for command in found for problem in problems(command)] == []


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
            [
                "python", "scripts/train.py", "--config", "c.yaml", "--dataset", "corpus.{lang}.gz",
                "tatoeba.tsv#en=3",
            ],  # fmt: skip
        ),
        ("doc.md:13", ["python", "-"]),
        ("doc.md:16", ["python", "scripts/translate.py", "CHECKPOINT"]),
        ("doc.md:16", ["cat", "a", "b"]),
    ]
    assert found[0].environment == {"MULTI30K": "/data/m30k", "OMP_NUM_THREADS": "1"}


def test_inline_code_that_calls_a_script_is_a_command_and_other_code_is_not():
    text = (
        "Run `python scripts/serve.py CKPT\n--port 8000`, not `--port` alone.\n```bash\n`python x.py`\n```\n"
    )
    assert inline_commands(text) == [(1, "python scripts/serve.py CKPT --port 8000")]


@pytest.mark.parametrize(
    "line, problem",
    [
        (
            "python scripts/tools/export_marian.py CKPT OUT --ctranslate2-dir CT2",
            "unrecognized arguments: --ctranslate2-dir",
        ),
        ("accelerate launch --num_processes 2 scripts/train.py --config c.yaml --max-stepz 3", "--max-stepz"),
        ("python scripts/translate.py CHECKPOINT --num-beams zero", "--num-beams"),
        ("python scripts/train.py --config c.yaml --max-step 3", "unrecognized arguments: --max-step"),
        # A required flag left out
        ("python scripts/evaluate_bleu.py CHECKPOINT --split test", "--source-lang"),
        ("python scripts/no_such_script.py --help", "scripts/no_such_script.py does not exist"),
        ("bash scripts/quickstart.sh de en fastest", "no recipe 'fastest'"),
        ("bash scripts/quickstart.sh en fr", "'fr' is not a language"),
    ],
)
def test_a_wrong_command_is_reported_naming_what_is_wrong(line, problem):
    (command,) = commands("doc.md", 1, line)
    reported = problems(command)
    assert len(reported) == 1 and problem in reported[0], reported


def test_a_script_written_without_its_interpreter_is_reported_with_what_its_parser_says():
    (command,) = commands("doc.md", 1, "scripts/tools/time_to_quality.py RUN --peer PEER")
    reported = problems(command)
    assert "runs as written only as `python scripts/tools/time_to_quality.py`" in reported[0]
    assert "--source-lang" in reported[1] and len(reported) == 2


def test_flags_alone_in_a_shell_block_are_reported():
    (command,) = commands("doc.md", 1, "--dataset corpus.tsv   # the training pairs")
    assert "flags alone" in problems(command)[0]


def test_an_indented_block_that_calls_a_script_is_a_command_and_a_lists_continuation_is_not():
    text = (
        "A paragraph:\n\n    python scripts/train.py --max-stepz 3\n\n"
        "The log:\n\n    7,112 pairs: it's small\n\n"
        "- a list item\n\n    python scripts/train.py --continued-item\n"
    )
    blocks = indented_blocks(text)
    assert blocks == [(3, "python scripts/train.py --max-stepz 3\n")]
    (command,) = commands("doc.md", *blocks[0])
    assert "--max-stepz" in problems(command)[0]


SCRIPT_LINES = (
    'run_part name "$python" scripts/train.py --config "$config" --output-dir "$out/$run" $resume \\\n'
    '    "${flags[@]}" --max-steps "$(steps 2)" ${EXTRA_ARGS:-} --max-stepz 3\n'
    'benchmark=(scripts/tools/benchmark.py --size tiny --quik)\n'
)


def test_a_shell_scripts_calls_are_checked_with_its_variables_as_values():
    found = commands("x.sh", 1, SCRIPT_LINES)
    train, benchmark = [command for command in found if script_and_arguments(command)]
    assert script_and_arguments(train) == (
        "scripts/train.py",
        ["--config", "VALUE", "--output-dir", "VALUE/VALUE", "--max-steps", "VALUE", "--max-stepz", "3"],
    )
    assert "unrecognized arguments: --max-stepz" in problems(train)[0]
    assert "--quik" in problems(benchmark)[0]


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
