"""Parallel corpora in the forms they ship in, one loader for every script:
a split as `source` / `target` columns.

A dataset is named by one string (`--dataset`, a config's `dataset`), of one or more items separated by
spaces:

- a Hub id or a local folder of split files (`bentrevett/multi30k`, `wmt/wmt14` with a config,
  `data/multi30k`);
- a file: JSON lines, JSON, CSV, TSV or Parquet, with a `translation` column or a column per language
  (`corpus.tsv`, `train.jsonl.gz`). A TSV or CSV without a header names its language columns after `#`,
  counted from 1: `tatoeba.tsv#en=3,fr=4` (Tatoeba's `lang lang source target` lines);
- two aligned plain-text files, one sentence a line, as a pattern with `{lang}` (`corpus.{lang}` for corpus.en
  and corpus.fr: what OPUS and Moses ship).

A file or pattern alone is the training split; `SPLIT=FILE` names the split it holds (`validation=dev.{lang}
test=test.tsv`), beside a Hub id or folder or instead of one. Compressed files (.gz, .bz2, .xz, .zst) are read
as they are. Everything is read by `datasets`' builders (text, json, csv, parquet) into its Arrow cache, so a
corpus of millions of lines is memory-mapped and read once. A problem is a `CorpusError` of one line that
names the file and line, and the fix where there is one.
"""

from __future__ import annotations

import json
import logging
import re
import shlex
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

import datasets
import fsspec
import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
from datasets.exceptions import DatasetGenerationError

logger = logging.getLogger(__name__)

TRANSLATION_COLUMN = "translation"
LANGUAGE_PLACEHOLDER = "{lang}"
TRAIN_SPLIT = "train"
# The suffix of a data file (after any compression suffix) and the datasets builder that reads it.
FILE_BUILDERS = {".jsonl": "json", ".json": "json", ".csv": "csv", ".tsv": "tsv", ".parquet": "parquet"}
COMPRESSION_SUFFIXES = (".gz", ".bz2", ".xz", ".zst")  # read as datasets reads them, through fsspec
ACCEPTED_FORMS = (
    "a Hub id or folder, a .jsonl/.json/.csv/.tsv/.parquet file (a `translation` column or one per language; "
    "FILE#en=3,fr=4 for a TSV/CSV without a header), or two text files as PATTERN.{lang}; SPLIT=FILE names a "
    "file's split"
)


class CorpusError(ValueError):
    """A corpus that cannot be read, told in one line naming the file, the line and the fix."""


@dataclass(frozen=True)
class DataFile:
    """One split held in a file (or, for a `{lang}` pattern, in two aligned text files)."""

    path: str
    columns: tuple[tuple[str, int], ...] = ()  # (language, column from 1) of a file without a header

    @classmethod
    def parse(cls, text: str) -> DataFile:
        path, _, columns = text.partition("#") if "#" in Path(text).name else (text, "", "")
        if not columns:
            return cls(path)
        try:
            items = (item.split("=") for item in columns.split(","))
            pairs = tuple((lang, int(number)) for lang, number in items)
        except ValueError:
            raise CorpusError(
                f"{text}: after '#' name each language's column, counted from 1, e.g. {path}#en=3,fr=4"
            ) from None
        if any(number < 1 for _, number in pairs):
            raise CorpusError(f"{text}: columns are counted from 1")
        return cls(path, pairs)

    def __str__(self) -> str:
        columns = ",".join(f"{lang}={number}" for lang, number in self.columns)
        return f"{self.path}#{columns}" if columns else self.path

    @property
    def builder(self) -> str:
        """"text" for a pattern of two text files, else the builder of the file's suffix."""
        if LANGUAGE_PLACEHOLDER in self.path:
            return "text"
        suffixes = Path(self.path).suffixes
        if suffixes and suffixes[-1] in COMPRESSION_SUFFIXES:
            suffixes = suffixes[:-1]
        return FILE_BUILDERS.get(suffixes[-1] if suffixes else "", "")

    def load(self, source_lang: str, target_lang: str) -> datasets.Dataset:
        """The file's pairs as string columns `source` and `target`."""
        if self.builder == "text":
            return _load_text_pair(self.path, source_lang, target_lang)
        if not self.builder:
            raise CorpusError(
                f"{self.path}: not a file form that is read ({', '.join(FILE_BUILDERS)}, "
                f"or two text files as a pattern such as {_suggested_pattern(self.path)})"
            )
        _require_file(self.path)
        if self.columns and self.builder not in ("csv", "tsv"):
            raise CorpusError(f"{self}: numbered columns are for a TSV or CSV without a header")
        table = _build(self.path, self.builder, self.columns)
        return _language_pair(table, source_lang, target_lang, self.path)


def dataset_spec(value: str | Sequence[str] | Mapping[str, str]) -> str:
    """The one string that names a dataset, from a config's string or mapping
    ({split: file}) or a flag's words."""
    if isinstance(value, str):
        return value
    items = [f"{split}={path}" for split, path in value.items()] if isinstance(value, Mapping) else value
    # Quoted only where needed, so that a saved config reads as it was typed: train=corpus.{lang}
    return " ".join(shlex.quote(item) if re.search(r"[\s'\"]", item) or not item else item for item in items)


def parse_dataset(spec: str) -> tuple[str | None, dict[str, DataFile]]:
    """(the Hub id or folder, or None; the files by split) named by `spec` (see the module docstring)."""
    base, files = None, {}
    for item in shlex.split(spec):
        split, separator, location = item.partition("=")
        if not separator or "/" in split or "{" in split:
            split, location = "", item
        file = DataFile.parse(location)
        # A file or text-pair pattern, not a Hub id or folder.
        if split or file.builder or Path(location).is_file():
            files[split or TRAIN_SPLIT] = file
        elif base is None:
            base = location
        else:
            raise CorpusError(
                f"dataset {spec!r} names two datasets ({base}, {location}); name files as SPLIT=FILE"
            )
    return base, files


def split_names(dataset: str, config_name: str | None = None) -> list[str]:
    """Every split the dataset has: those of its Hub id or folder and those named by its files."""
    base, files = parse_dataset(dataset)
    names = list(_hub_splits(base, config_name)) if base else []
    return names + [split for split in files if split not in names]


def load_translation_split(
    dataset: str, source_lang: str, target_lang: str, split: str, config_name: str | None = None
) -> datasets.Dataset:
    """One split of a dataset (see the module docstring) as string columns `source` and `target`."""
    if source_lang == target_lang:
        raise CorpusError(f"Source and target language are both {source_lang!r}")
    base, files = parse_dataset(dataset)
    if split in files:
        return files[split].load(source_lang, target_lang)
    if base is None:
        raise CorpusError(
            f"Split {split!r} not in dataset {dataset!r} (it has {sorted(files)}); name a file for it as "
            f"{split}=FILE, or let training hold pairs out (holdout)"
        )
    splits = _hub_splits(base, config_name)
    if split not in splits:
        raise CorpusError(f"Split {split!r} not in dataset {base!r}; available splits: {sorted(splits)}")
    return _language_pair(splits[split], source_lang, target_lang, base, config_name)


def _hub_splits(dataset: str, config_name: str | None) -> datasets.DatasetDict:
    """`datasets.load_dataset` of a Hub id or folder, its failures one line each."""
    try:
        return _load_dataset_quietly(dataset, config_name)
    except (FileNotFoundError, ConnectionError) as err:
        raise CorpusError(
            f"dataset {dataset!r} (config {config_name!r}) is no local path "
            f"and could not be loaded from the Hub ({err}); check the name and your connection, "
            f"or give a local copy instead (--dataset PATH: {ACCEPTED_FORMS})"
        ) from err
    except (ValueError, DatasetGenerationError) as err:
        if str(err).startswith("BuilderConfig"):  # "BuilderConfig 'xx' not found. Available: [...]"
            raise CorpusError(
                f"dataset {dataset!r} has no config {config_name!r} ({err}); "
                "pass one of those as the dataset config"
            ) from err
        raise CorpusError(_first_unreadable_line_of_folder(dataset, config_name) or str(err)) from err


def _load_dataset_quietly(dataset: str, config_name: str | None, **kwargs) -> datasets.DatasetDict:
    """`datasets.load_dataset`, without huggingface_hub's warning that a local copy's README.md has no Hub
    metadata block (datasets reads it as a dataset card; nothing is wrong with the data)."""
    card_logger = logging.getLogger("huggingface_hub.repocard")
    level = card_logger.level
    card_logger.setLevel(logging.ERROR)
    try:
        return datasets.load_dataset(dataset, config_name, **kwargs)
    finally:
        card_logger.setLevel(level)


def _build(path: str, builder: str, columns: tuple[tuple[str, int], ...]) -> datasets.Dataset:
    """The file's rows through its datasets builder; a TSV through the text builder, split on tabs by Arrow
    (MT's TSVs are never quoted, and a line with the wrong number of fields must be named, which pandas does
    not do for a short one)."""
    options: dict = {}
    if builder == "csv":
        # Every field a string as written: no "NA" read as missing, no "1990" read as a number.
        options = {"keep_default_na": False}
        if columns:
            languages = [lang for lang, _ in columns]
            options.update(
                header=None,
                usecols=[number - 1 for _, number in columns],
                column_names=languages,
                features=datasets.Features({lang: datasets.Value("string") for lang in languages}),
            )
    try:
        rows = _read(path, "text" if builder == "tsv" else builder, **options)
    except DatasetGenerationError as err:
        cause = err.__cause__ or err
        if isinstance(cause, UnicodeDecodeError):
            raise CorpusError(_first_non_utf8_line(path) or f"{path}: not UTF-8 ({cause})") from err
        if builder == "json":
            raise CorpusError(_first_unreadable_json_line(path) or f"{path}: {cause}") from err
        raise CorpusError(f"{path}: {str(cause).strip()}") from err
    return _tsv_columns(rows, path, columns) if builder == "tsv" else rows


def _read(path: str, builder: str, **options) -> datasets.Dataset:
    return _load_dataset_quietly(builder, None, data_files={TRAIN_SPLIT: path}, **options)[TRAIN_SPLIT]


def _tsv_columns(
    lines: datasets.Dataset, path: str, columns: tuple[tuple[str, int], ...]
) -> datasets.Dataset:
    """A TSV's lines (the text builder's `text` column) as one string column per language: those numbered in
    `columns`, or else every column named by the header line."""
    header = None
    if not columns:
        if len(lines) == 0:
            raise CorpusError(f"{path} is empty")
        header = lines[0]["text"].split("\t")
        columns = tuple((name, number) for number, name in enumerate(header, 1))
        lines = lines.select(range(1, len(lines)))
    fields = len(header) if header else None
    needed = max(number for _, number in columns)
    first_line = 2 if header else 1

    def split_fields(batch, indices):
        split = pc.split_pattern(pa.array(batch["text"], pa.large_string()), "\t")
        counts = pc.list_value_length(split).to_numpy()
        wrong = np.flatnonzero(counts != fields if fields else counts < needed)
        if len(wrong):
            expected = fields or f"at least {needed}"
            raise CorpusError(
                f"{path} line {indices[wrong[0]] + first_line} has {counts[wrong[0]]} tab-separated fields, "
                f"not {expected}"
            )
        return {lang: pc.list_element(split, number - 1).to_pylist() for lang, number in columns}

    return lines.map(
        split_fields,
        batched=True,
        with_indices=True,
        remove_columns=["text"],
        desc=f"Reading {Path(path).name}",
    )


def _load_text_pair(pattern: str, source_lang: str, target_lang: str) -> datasets.Dataset:
    """Two aligned text files, `pattern` with each language for `{lang}`, as `source` and `target`."""
    sides = {}
    for lang in (source_lang, target_lang):
        path = pattern.replace(LANGUAGE_PLACEHOLDER, lang)
        if not Path(path).is_file():
            any_language = Path(pattern).name.replace(LANGUAGE_PLACEHOLDER, "*")
            present = sorted(found.name for found in Path(path).parent.glob(any_language))
            raise CorpusError(
                f"{path}: no such file, so language {lang!r} is not in {pattern}"
                + (f" (there are {', '.join(present)})" if present else "")
            )
        sides[lang] = (path, _build(path, "text", ()))
    (source_path, source), (target_path, target) = sides[source_lang], sides[target_lang]
    if len(source) != len(target):
        raise CorpusError(
            f"{source_path} has {len(source):,} lines and {target_path} {len(target):,}: "
            "aligned files must have one line for each pair"
        )
    return datasets.concatenate_datasets(
        [source.rename_column("text", "source"), target.rename_column("text", "target")], axis=1
    )


def _language_pair(
    pairs: datasets.Dataset, source_lang: str, target_lang: str, where: str, config_name: str | None = None
) -> datasets.Dataset:
    """`pairs` (a `translation` column or one per language) as `source` and `target`,
    checked to be UTF-8 text."""
    language_columns = _language_columns(pairs)
    languages = (source_lang, target_lang)
    # One line without a language makes datasets read the whole `translation` column as untyped JSON.
    unreadable = not language_columns and _first_unreadable_line(where, config_name, languages)
    if unreadable:
        raise CorpusError(unreadable)
    for lang in (source_lang, target_lang):
        if lang not in language_columns:
            raise CorpusError(
                f"Language {lang!r} not in dataset {where!r}; available languages: {sorted(language_columns)}"
            )
    pairs = (
        pairs.flatten()
        .select_columns([language_columns[source_lang], language_columns[target_lang]])
        .rename_columns({language_columns[source_lang]: "source", language_columns[target_lang]: "target"})
    )
    try:
        # Arrow takes bytes that are not UTF-8 into a text column; they would fail only when first read.
        pairs.data.table.validate(full=True)
    except pa.ArrowInvalid as err:
        raise CorpusError(
            _first_unreadable_line(where, config_name, languages) or f"dataset {where!r}: {err}"
        ) from err
    return pairs


def _language_columns(pairs: datasets.Dataset) -> dict[str, str]:
    """Map each language code to its column in `pairs.flatten()`."""
    if TRANSLATION_COLUMN in pairs.column_names:
        prefix = f"{TRANSLATION_COLUMN}."
        names = pairs.flatten().column_names
        return {name.removeprefix(prefix): name for name in names if name.startswith(prefix)}
    return {
        name: name
        for name, feature in pairs.features.items()
        if isinstance(feature, datasets.Value) and feature.dtype in ("string", "large_string")
    }


def _require_file(path: str) -> None:
    if not Path(path).is_file():
        raise CorpusError(f"{path}: no such file")


def _suggested_pattern(path: str) -> str:
    """`path` with its language suffix as `{lang}`: corpus.en -> corpus.{lang}."""
    return re.sub(r"\.[A-Za-z_-]{2,12}(?=(\.(gz|bz2|xz|zst))?$)", "." + LANGUAGE_PLACEHOLDER, path, count=1)


def raw_lines(path: str) -> Iterator[bytes]:
    """The raw lines of a file, line ends kept, decompressed by its suffix as datasets decompresses
    it; a compression whose library is missing (zstandard for .zst) is a CorpusError, not
    compressed bytes read raw."""
    suffix = Path(path).suffix
    if suffix in COMPRESSION_SUFFIXES and fsspec.utils.infer_compression(path) is None:
        raise CorpusError(f"{path}: reading {suffix} files needs a library: pip install zstandard")
    with fsspec.open(path, "rb", compression="infer") as file:
        yield from file


def not_utf8(line: bytes, err: UnicodeDecodeError) -> str:
    """What is wrong with a `line` that does not decode as UTF-8, the first bad byte named."""
    return f"is not UTF-8 (byte {line[err.start]:#04x} at position {err.start})"


def _first_non_utf8_line(path: str) -> str | None:
    for number, line in enumerate(raw_lines(path), 1):
        try:
            line.decode("utf-8")
        except UnicodeDecodeError as err:
            return f"{path} line {number} {not_utf8(line, err)}"
    return None


def _first_unreadable_line(where: str, config_name: str | None, languages: Sequence[str]) -> str | None:
    """The first JSON line of `where` (a file, or a folder's JSON-lines files) that gives
    no pair of `languages`."""
    if Path(where).is_file():
        return _first_unreadable_json_line(where, languages)
    return _first_unreadable_line_of_folder(where, config_name, languages)


def _first_unreadable_line_of_folder(
    dataset: str, config_name: str | None, languages: Sequence[str] = ()
) -> str | None:
    """The first line of a local dataset's JSON-lines files that is no UTF-8 JSON object with a
    text for each of `languages`, as "FILE line N ...", or None when there is none (or the dataset
    is no local JSON lines)."""
    if not Path(dataset).is_dir():
        return None
    builder = datasets.load_dataset_builder(dataset, config_name)
    if builder.name != "json":
        return None
    for path in (path for paths in builder.config.data_files.values() for path in paths):
        problem = _first_unreadable_json_line(path, languages)
        if problem:
            return problem
    return None


def _first_unreadable_json_line(path: str, languages: Sequence[str] = ()) -> str | None:
    if _holds_json_array(path):
        return None
    for number, line in enumerate(raw_lines(path), 1):
        problem = _line_problem(line, languages)
        if problem:
            return f"{path} line {number} {problem}"
    return None


def _holds_json_array(path: str) -> bool:
    """Whether a .json file is one JSON array rather than JSON lines."""
    return next(raw_lines(path), b"").lstrip().startswith(b"[")


def _line_problem(line: bytes, languages: Sequence[str]) -> str:
    """Why a JSON line gives no pair of `languages` texts ("" when it does, or when it is blank)."""
    if not line.strip():
        return ""
    try:
        row = json.loads(line.decode("utf-8").strip())
    except UnicodeDecodeError as err:
        return not_utf8(line, err)
    except json.JSONDecodeError as err:
        return f"is not valid JSON ({err.msg}: column {err.colno})"
    if not isinstance(row, dict):
        return "is not a JSON object"
    texts = row.get(TRANSLATION_COLUMN, row)
    missing = [lang for lang in languages if not isinstance(texts, dict) or lang not in texts]
    return f"has no {missing[0]!r} text" if missing else ""


def write_translation_jsonl(
    path: str | Path, pairs: Iterable[tuple[str, str]], source_lang: str, target_lang: str
) -> None:
    """`pairs` in the Hub `translation` layout, one `{"translation": {source_lang: ..., target_lang: ...}}` a
    line, as `load_translation_split` reads them. Not atomic: write into a staging directory
    (`files.atomic_directory`)."""
    rows = [{source_lang: source, target_lang: target} for source, target in pairs]
    datasets.Dataset.from_dict({"translation": rows}).to_json(path, force_ascii=False)
