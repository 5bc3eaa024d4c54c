"""The user docs speak of the software, and the benchmark records they quote exist.

User docs are README.md, model_card.md and docs/*.md; docs/research/ is the research record, where how the
work was done belongs. Every figure in the user docs points at its record under docs/benchmarks/.
"""

import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
BENCHMARKS = ROOT / "docs" / "benchmarks"
USER_DOCS = [ROOT / "README.md", ROOT / "model_card.md", *sorted((ROOT / "docs").glob("*.md"))]
# The research record quotes benchmarks too, but not its tries: those are kept as they ran.
DOCS_QUOTING_BENCHMARKS = [*USER_DOCS, *sorted((ROOT / "docs" / "research").glob("*.md"))]
# Words about how the work was organised, not about the software; a third-party tracker's thread is a link.
PROCESS_WORDS = re.compile(
    r"\bissue\s+#?\d+|\b(?:the|this|quality) issue\b|\bissue's\b|\bsessions?\b|\bagents?\b|\bthis stop\b"
    # The workshop's: its notebook, its tries, its machines' calls and paths
    r"|\bdiary\b(?!\.md)|\btry \d|\bH[12]00 calls?\b|lost with a machine|\.\./shared/",
    re.IGNORECASE,
)
BENCHMARK_MENTION = re.compile(r"benchmarks/([\w.-]+\.json)")
JSON_LINK = re.compile(r"\]\(([^)\s#]+\.json)\)")


def process_words(text: str) -> list[str]:
    """The process words in `text`, each with its line number."""
    return [
        f"line {number}: {match.group(0)!r}"
        for number, line in enumerate(text.splitlines(), 1)
        for match in PROCESS_WORDS.finditer(line)
    ]


@pytest.mark.parametrize(
    "text",
    [
        "see issue 80", "the issue's bound", "in four sessions", "three other agents", "diary, try 3",
        "in H200 calls", "lost with a machine since", f"--dataset {Path('..', 'shared', 'datasets')}",
    ],
)
def test_process_words_are_found(text):
    assert process_words(text)


@pytest.mark.parametrize(
    "text",
    ["a run stops with one line", "tensor2tensor#317", "the issued request", "[record](research/diary.md)"],
)
def test_software_words_pass(text):
    assert process_words(text) == []


@pytest.mark.parametrize("path", USER_DOCS, ids=lambda path: path.relative_to(ROOT).as_posix())
def test_user_docs_speak_of_the_software(path):
    found = process_words(path.read_text(encoding="utf-8"))
    assert not found, f"{path.relative_to(ROOT)} speaks of the work, not the software: {found}"


@pytest.mark.parametrize("path", DOCS_QUOTING_BENCHMARKS, ids=lambda path: path.relative_to(ROOT).as_posix())
def test_quoted_benchmark_records_exist(path):
    text = path.read_text(encoding="utf-8")
    missing = sorted({name for name in BENCHMARK_MENTION.findall(text) if not (BENCHMARKS / name).is_file()})
    broken = sorted({link for link in JSON_LINK.findall(text) if not (path.parent / link).is_file()})
    assert not missing, f"{path.relative_to(ROOT)} quotes records docs/benchmarks/ lacks: {missing}"
    assert not broken, f"{path.relative_to(ROOT)} links JSON files that do not exist: {broken}"


def test_every_benchmark_record_is_quoted():
    quoted = {
        name for path in DOCS_QUOTING_BENCHMARKS for name in BENCHMARK_MENTION.findall(path.read_text())
    }
    unquoted = sorted(path.name for path in BENCHMARKS.glob("*.json") if path.name not in quoted)
    assert not unquoted, f"docs/benchmarks/ holds records no page quotes: {unquoted}"
