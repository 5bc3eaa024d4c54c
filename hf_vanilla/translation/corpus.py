"""Translating a corpus of any size: the input read and translated a chunk of lines at a time, in order, in
memory bounded by the chunk; one line in, one line out.

From a file to a file, each finished chunk is committed (written atomically) into a directory beside the
output, `OUTPUT.chunks`, with a fingerprint of what its translations depend on: the model's weights, the
decoding options, the input's text and the corpus settings. The same command given again after a crash,
SIGTERM or Ctrl-C continues after the committed chunks, and a command that differs in any of them is refused,
naming what changed. The chunks are shared between the processes `accelerate launch` starts (chunk i goes to
process i % processes); when all are committed, the main process joins them into the output atomically, checks
that it translates every input line, and removes the directory. From stdin or to stdout, the chunks are
written in order as they finish, by one process.

Each chunk's random draws (sampling) are seeded from the run's seed and the chunk's number, so a resumed or
sharded run samples exactly what an uninterrupted single process samples.
"""

from __future__ import annotations

import contextlib
import dataclasses
import hashlib
import itertools
import json
import logging
import math
import shutil
import sys
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import timedelta
from pathlib import Path
from typing import Any, TextIO

import numpy as np
from accelerate import PartialState
from accelerate.utils import parse_flag_from_env
from tqdm.auto import tqdm
from transformers import set_seed

from hf_vanilla.data.corpus import not_utf8, raw_lines
from hf_vanilla.files import atomic_file, write_json, write_text_atomic
from hf_vanilla.model.decoding import DecodingOptions
from hf_vanilla.precision import resolve_device
from hf_vanilla.translation.decoding import DEFAULT_BATCHING, Batching, lines_numbered_from, named_lines
from hf_vanilla.translation.engines import TranslationEngine

logger = logging.getLogger(__name__)

STANDARD_STREAM = "-"  # stdin as the input, stdout as the output
OUTPUT_FORMATS = ("text", "jsonl")
ERROR_HANDLERS = ("strict", "replace")
DEFAULT_CHUNK_LINES = 2000
# How long processes wait for each other (at the end, for the slowest to finish its share): torch's
# default, 10 minutes for NCCL and 30 for gloo, is less than the processes of a run of hours can drift apart.
SHARE_WAIT = timedelta(days=7)
CHUNKS_SUFFIX, FINGERPRINT_FILE = ".chunks", "fingerprint.json"
# What each part of a run's fingerprint is, as a refusal to resume names it.
FINGERPRINT_PARTS = {
    "model": "model weights",
    "decoding": "decoding options",
    "input": "input text",
    "settings": "corpus settings (chunk lines, errors, output format, n-best, seed)",
}

Hypothesis = tuple[str, float | None]  # a translation and its score (None where the decoder gives none)
# Translates a chunk's sources: each source's hypotheses, best first ("" for a blank source).
ChunkTranslator = Callable[[Sequence[str]], Sequence[Sequence[Hypothesis]]]


class CorpusTranslationError(ValueError):
    """A corpus that cannot be translated as asked, told in one line naming the problem and the fix."""


@dataclass(frozen=True)
class CorpusSettings:
    """How a corpus is read and written: `chunk_lines` lines translated (and committed) at a time; `errors`,
    what a line that is not UTF-8 does ("strict": stops the run naming it, "replace": translates with
    replacement characters); `output_format`, "text" (each source's `nbest` best translations, a line each) or
    "jsonl" (a JSON object a translation: source index from 0, rank, score, text); `seed`, the random draws'
    seed."""

    chunk_lines: int = DEFAULT_CHUNK_LINES
    errors: str = "strict"
    output_format: str = "text"
    nbest: int = 1
    seed: int = 0

    def __post_init__(self):
        if self.chunk_lines < 1 or self.nbest < 1:
            raise CorpusTranslationError(f"chunk_lines and nbest must be at least 1, got {self}")
        if self.errors not in ERROR_HANDLERS or self.output_format not in OUTPUT_FORMATS:
            raise CorpusTranslationError(
                f"errors is one of {ERROR_HANDLERS} and output_format one of {OUTPUT_FORMATS}, got {self}"
            )


@dataclass(frozen=True)
class CorpusJob:
    """A corpus to translate: `source` and `output` (files, or "-" for stdin and stdout), its `settings`, and
    `provenance`, what its translations depend on beside the input and the settings ({"model": its digest,
    "decoding": the options described}), which a resumed run must match."""

    source: str
    output: str
    settings: CorpusSettings = CorpusSettings()
    provenance: Mapping[str, str] = field(default_factory=dict)

    @property
    def resumable(self) -> bool:
        """From a file to a file: the chunks are committed beside the output (stdin cannot be read again)."""
        return STANDARD_STREAM not in (self.source, self.output)

    @property
    def chunks_directory(self) -> Path:
        output = Path(self.output)
        return output.with_name(output.name + CHUNKS_SUFFIX)


def engine_translator(
    engine: TranslationEngine,
    options: DecodingOptions,
    settings: CorpusSettings,
    batching: Batching = DEFAULT_BATCHING,
) -> ChunkTranslator:
    """Chunks translated by `engine` with `options`, batched as `batching` says: each source's
    `settings.nbest` best with beam search's scores where they are written (n-best lists, JSON lines), else
    the best alone."""
    if settings.nbest > (options.num_beams or 1):
        raise CorpusTranslationError(
            f"--nbest {settings.nbest} lists beam search's best translations: give "
            f"--num-beams {settings.nbest} or more"
        )
    if settings.nbest == 1 and settings.output_format == "text":
        return best_only(lambda sources: engine.translate(sources, options, batching))
    return lambda sources: [
        each[: settings.nbest] for each in engine.translate_nbest(sources, options, batching)
    ]


def best_only(translate: Callable[[Sequence[str]], Sequence[str]]) -> ChunkTranslator:
    """Chunks translated by `translate`, which gives one translation a source and no score."""
    return lambda sources: [[(text, None)] for text in translate(sources)]


def describe_decoding(options: DecodingOptions, max_tokens: int, **more: Any) -> str:
    """Decoding `options`, the `max_tokens` they batch by (kept since fingerprints began with it, so
    translations stopped before still resume) and `more` that decides the translations (precision, engine,
    research models), as a fingerprint records them."""
    described = {**dataclasses.asdict(options), "max_tokens": max_tokens}
    return json.dumps({**described, **more}, sort_keys=True, default=str)


def process_state(device: str | None) -> PartialState:
    """accelerate's processes (one, or those `accelerate launch` started), on the CPU through gloo where
    `device` is the CPU or accelerate was told --cpu (ACCELERATE_USE_CPU)."""
    cpu = parse_flag_from_env("ACCELERATE_USE_CPU") or resolve_device(device).type == "cpu"
    return PartialState(cpu=cpu, timeout=SHARE_WAIT)


def process_device(device: str | None, state: PartialState) -> str | None:
    """The device this process translates on: `device`, or under several processes and "auto" its own."""
    return str(state.device) if device in (None, "auto") and state.num_processes > 1 else device


def translate_corpus(translate_chunk: ChunkTranslator, job: CorpusJob, show_progress: bool = True) -> None:
    """Translate `job.source` into `job.output` a chunk at a time with `translate_chunk` (see the module
    docstring); the processes are accelerate's (`process_state`). A problem with the input, the settings or
    the committed chunks is a CorpusTranslationError of one line, raised before anything is translated where
    it can be."""
    state = PartialState()
    if not job.resumable and state.num_processes > 1:
        raise CorpusTranslationError(
            f"{state.num_processes} processes share a corpus through files: give --input FILE and "
            "--output FILE"
        )
    lines = None if job.source == STANDARD_STREAM else _count_checked_lines(job.source, job.settings)
    if not job.resumable:
        _stream(translate_chunk, job, lines, show_progress)
        return
    fingerprint = {
        **job.provenance,
        "input": lines.digest,
        "settings": json.dumps(dataclasses.asdict(job.settings)),
    }
    _claim(job.chunks_directory, fingerprint, state)
    _translate_share(translate_chunk, job, lines.count, state, show_progress)
    state.wait_for_everyone()
    if state.is_main_process:
        _assemble(job, lines.count)


@dataclass(frozen=True)
class _InputLines:
    count: int
    digest: str  # SHA-256 of the lines, line ends as "\n"


def _count_checked_lines(source: str, settings: CorpusSettings) -> _InputLines:
    """The lines of the file `source`, read once: how many, their digest and, with errors "strict", the check
    that each is UTF-8 (the first that is not stops the run before anything is translated)."""
    if not Path(source).is_file():
        raise CorpusTranslationError(f"{source}: no such file")
    digest, count = hashlib.sha256(), 0
    for chunk in _chunks(source, settings.chunk_lines):
        if settings.errors == "strict":
            _decode(chunk, count + 1, source, settings.errors)
        digest.update(b"\n".join(chunk) + b"\n")
        count += len(chunk)
    return _InputLines(count, digest.hexdigest())


def _chunks(source: str, chunk_lines: int) -> Iterator[list[bytes]]:
    """The lines of `source` ("-": stdin) without their line ends, `chunk_lines` at a time."""
    read = sys.stdin.buffer if source == STANDARD_STREAM else raw_lines(source)
    lines = (line.removesuffix(b"\n").removesuffix(b"\r") for line in read)
    while chunk := list(itertools.islice(lines, chunk_lines)):
        yield chunk


def _decode(lines: Sequence[bytes], first_line: int, source: str, errors: str) -> list[str]:
    """`lines` (numbered from `first_line`) as text; one that is not UTF-8 is an error naming it, or with
    errors "replace" translated with replacement characters and named in a warning."""
    texts, replaced = [], []
    for number, line in enumerate(lines, first_line):
        try:
            texts.append(line.decode("utf-8"))
        except UnicodeDecodeError as err:
            if errors == "strict":
                raise CorpusTranslationError(
                    f"{source} line {number} {not_utf8(line, err)}: fix the line, or give --errors replace "
                    "to translate it with replacement characters"
                ) from None
            texts.append(line.decode("utf-8", errors))
            replaced.append(number)
    if replaced:
        logger.warning(
            "%d lines are not UTF-8 and were translated with replacement characters: line %s",
            len(replaced),
            named_lines(replaced),
        )
    return texts


def _translated(translate_chunk: ChunkTranslator, index: int, lines: Sequence[bytes], job: CorpusJob) -> str:
    """Chunk `index` (its `lines` read from `job.source`) translated and written in `job.settings`' format."""
    settings = job.settings
    first_line = index * settings.chunk_lines + 1
    sources = _decode(lines, first_line, job.source, settings.errors)
    # Independent streams by chunk, so that a chunk draws the same whichever process translates it, and when.
    set_seed(int(np.random.SeedSequence([settings.seed, index]).generate_state(1)[0]))
    with lines_numbered_from(first_line):
        hypotheses = translate_chunk(sources)
    return "".join(
        _format(first_line - 1 + position, each, settings) for position, each in enumerate(hypotheses)
    )


def _format(index: int, hypotheses: Sequence[Hypothesis], settings: CorpusSettings) -> str:
    """The output lines of source `index` (from 0): its n best, a line each (blank where it has fewer)."""
    if settings.output_format == "jsonl":
        return "".join(
            json.dumps({"index": index, "rank": rank, "score": score, "text": text}, ensure_ascii=False)
            + "\n"
            for rank, (text, score) in enumerate(hypotheses)
        )
    texts = [text for text, _ in hypotheses]
    return "".join(f"{text}\n" for text in texts + [""] * (settings.nbest - len(texts)))


def _sources_covered(output_lines: Iterable[str | bytes], settings: CorpusSettings) -> float:
    """How many source lines `output_lines` translate: nbest lines each, or in JSON lines the distinct
    indices."""
    if settings.output_format == "text":
        return sum(1 for _ in output_lines) / settings.nbest  # a fraction where a source lost a line
    indices = (json.loads(line)["index"] for line in output_lines)
    return sum(1 for _ in itertools.groupby(indices))


def _check_covered(covered: float, expected: int, output: str) -> None:
    if covered != expected:
        raise CorpusTranslationError(
            f"{output}: the translations cover {covered:g} lines of the input's {expected}; nothing was "
            "written under the output's name (a decoder that writes line breaks?)"
        )


def _progress(total: int | None, enabled: bool, done: int = 0) -> tqdm:
    """Lines translated, lines/s and, with a `total`, the share done and the time left."""
    return tqdm(
        total=total, initial=done, unit="line", desc="Translating", disable=not enabled, smoothing=0.1
    )


def _stream(
    translate_chunk: ChunkTranslator, job: CorpusJob, lines: _InputLines | None, show_progress: bool
) -> None:
    """From stdin or to stdout: each chunk written once translated, in order (a file output atomically)."""
    covered = read = 0
    with _output_stream(job.output) as output, _progress(lines and lines.count, show_progress) as progress:
        for index, chunk in enumerate(_chunks(job.source, job.settings.chunk_lines)):
            text = _translated(translate_chunk, index, chunk, job)
            output.write(text)
            output.flush()
            covered += _sources_covered(text.split("\n")[:-1], job.settings)
            read += len(chunk)
            progress.update(len(chunk))
        _check_covered(covered, read, job.output)


@contextlib.contextmanager
def _output_stream(output: str) -> Iterator[TextIO]:
    if output == STANDARD_STREAM:
        yield sys.stdout
        return
    with atomic_file(output) as staging, staging.open("w", encoding="utf-8", newline="") as file:
        yield file


def _claim(directory: Path, fingerprint: Mapping[str, str], state: PartialState) -> None:
    """Check that the chunks committed in `directory` were translated as `fingerprint` says this run
    translates (every process checks, so that all refuse together), and record it there for a run that finds
    none."""
    recorded = directory / FINGERPRINT_FILE
    if recorded.is_file():
        earlier = json.loads(recorded.read_text())
        changed = [
            FINGERPRINT_PARTS.get(part, part)
            for part in fingerprint
            if earlier.get(part) != fingerprint[part]
        ]
        if changed:
            raise CorpusTranslationError(
                f"{directory} holds the chunks of a run with other {', '.join(changed)}: give that run's to "
                f"continue it, or delete {directory} to start again"
            )
    with state.main_process_first():
        if state.is_main_process and not recorded.is_file():
            directory.mkdir(parents=True, exist_ok=True)
            write_json(recorded, fingerprint)


def _chunk_file(directory: Path, index: int) -> Path:
    return directory / f"{index:09d}"


def _translate_share(
    translate_chunk: ChunkTranslator,
    job: CorpusJob,
    line_count: int,
    state: PartialState,
    show_progress: bool,
) -> None:
    """Translate and commit the chunks of this process's share (chunk i is process i % processes') not
    committed yet; the main process's progress bar counts the share's lines, those committed before as
    done."""
    chunk_lines, directory = job.settings.chunk_lines, job.chunks_directory
    share = range(state.process_index, math.ceil(line_count / chunk_lines), state.num_processes)
    to_do = {index for index in share if not _chunk_file(directory, index).is_file()}

    def lines_of(chunks: Iterable[int]) -> int:
        return sum(min(chunk_lines, line_count - index * chunk_lines) for index in chunks)

    progress = _progress(
        lines_of(share), show_progress and state.is_main_process, lines_of(set(share) - to_do)
    )
    with progress:
        chunks = itertools.islice(_chunks(job.source, chunk_lines), max(to_do, default=-1) + 1)
        try:
            for index, chunk in enumerate(chunks):
                if index in to_do:
                    translated = _translated(translate_chunk, index, chunk, job)
                    # committed whole or not at all
                    write_text_atomic(_chunk_file(directory, index), translated)
                    progress.update(len(chunk))
        except KeyboardInterrupt:
            logger.warning(
                "Stopped: %s keeps the chunks committed; the same command continues after them", directory
            )
            raise


def _assemble(job: CorpusJob, line_count: int) -> None:
    """Join the committed chunks into `job.output` atomically once it checks out, then remove them."""
    directory = job.chunks_directory
    chunks = [
        _chunk_file(directory, index) for index in range(math.ceil(line_count / job.settings.chunk_lines))
    ]
    missing = [chunk.name for chunk in chunks if not chunk.is_file()]
    if missing:
        raise CorpusTranslationError(
            f"{directory} lacks chunks {', '.join(missing[:10])}: a process stopped early; give the command "
            "again"
        )
    with atomic_file(job.output) as staging:
        with staging.open("wb") as output:
            for chunk in chunks:
                with chunk.open("rb") as part:
                    shutil.copyfileobj(part, output)
        with staging.open("rb") as written:
            _check_covered(_sources_covered(written, job.settings), line_count, job.output)
    shutil.rmtree(directory)
    logger.info("Wrote %s: %d lines translated", job.output, line_count)
