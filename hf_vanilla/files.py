"""Atomic writes, the one way this package writes files:
a crash leaves the old file or the new one, never half.

Each writer works on a temporary sibling, which is renamed over the target only when the writing succeeded:
`atomic_file` (any writer's file), `write_text_atomic`, `write_json` (reports and records), `atomic_directory`
(a directory written whole) and `publish_directory`. Only appended logs and lock files are written in place.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path

STAGING_PREFIX = ".staging-"


@contextlib.contextmanager
def atomic_file(path: str | os.PathLike) -> Iterator[Path]:
    """Yield a temporary path beside `path` to write; it replaces `path` when the block ends without error."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    # The suffix stays last (savefig picks the format by it); our own name rather than mkstemp's, whose
    # files are private (0600) rather than following the umask.
    staging = path.with_name(f".{path.stem}.{os.getpid()}.tmp{path.suffix}")
    try:
        yield staging
        os.replace(staging, path)
    finally:
        staging.unlink(missing_ok=True)


def write_text_atomic(path: str | os.PathLike, text: str) -> Path:
    """Write `text` (UTF-8, line ends as given) to `path` atomically."""
    with atomic_file(path) as staging:
        staging.write_text(text, encoding="utf-8", newline="")
    return Path(path)


def write_json(path: str | os.PathLike, data) -> Path:
    """Write `data` to `path` atomically as JSON that people read too: indented,
    non-ASCII kept, a final newline."""
    return write_text_atomic(path, json.dumps(data, indent=2, ensure_ascii=False) + "\n")


def refuse_existing(path: str | os.PathLike, overwrite: bool) -> None:
    """A FileExistsError for an output that exists, unless it may be overwritten."""
    if Path(path).exists() and not overwrite:
        raise FileExistsError(f"{path} exists; pass overwrite=True (--overwrite) to replace it")


def publish_directory(
    staging: str | os.PathLike, final: str | os.PathLike, keep_existing: bool = False
) -> Path:
    """Move the complete directory `staging` to `final`, replacing what was there (with `keep_existing`, a
    `final` that exists stays, and `staging` is left to its owner: another writer published the same content
    first).

    A crash leaves either the old `final`, or (between the two renames) no `final` and the old one
    under a dot-name: never a `final` that is half-written.
    """
    staging, final = Path(staging), Path(final)
    if keep_existing:
        try:
            staging.rename(final)  # fails onto a directory with files
        except OSError:
            if not final.is_dir():
                raise
    elif final.exists():
        # A directory cannot be renamed over a non-empty one: move the old one aside first.
        retired = final.parent / f"{STAGING_PREFIX}retired-{final.name}"
        shutil.rmtree(retired, ignore_errors=True)
        final.rename(retired)
        staging.rename(final)
        shutil.rmtree(retired)
    else:
        staging.rename(final)
    return final


@contextlib.contextmanager
def atomic_directory(output_dir: str | os.PathLike, keep_existing: bool = False) -> Iterator[Path]:
    """Yield a private staging directory that replaces `output_dir` only when the block ends without error
    (with `keep_existing`, one that exists by then stays: `publish_directory`)."""
    output_dir = Path(output_dir)
    output_dir.parent.mkdir(parents=True, exist_ok=True)
    # Under STAGING_PREFIX, so that a run directory's clean-up finds what a crash left here.
    staging = Path(tempfile.mkdtemp(prefix=f"{STAGING_PREFIX}{output_dir.name}-", dir=output_dir.parent))
    staging.chmod(0o755)  # mkdtemp's 0o700 would hide the result from other users
    try:
        yield staging
        publish_directory(staging, output_dir, keep_existing)
    finally:
        shutil.rmtree(staging, ignore_errors=True)
