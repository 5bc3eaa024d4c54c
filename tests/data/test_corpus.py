"""A corpus as parallel data ships: every form loads the same pairs, trains and scores, and every bad input is
one line naming the file, the line and the fix."""

import bz2
import csv
import gzip
import json
from pathlib import Path

import datasets
import pytest
from conftest import tiny_config
from synthetic_corpus import synthetic_pairs

from hf_vanilla.data.corpus import (
    CorpusError,
    dataset_spec,
    load_translation_split,
    parse_dataset,
    split_names,
)
from hf_vanilla.evaluation.scoring import Runtime, ScoreOptions, TranslationData, evaluate_bleu
from hf_vanilla.model.decoding import DecodingOptions
from hf_vanilla.training.heldout import HELDOUT_DIR
from hf_vanilla.training.train import train

PAIRS = synthetic_pairs(120)  # (German, English)
# A pair of another language and script, so nothing assumes de-en: these tests translate "en" into "xx".
LANGS = ("en", "xx")


def english_pairs() -> list[tuple[str, str]]:
    return [(english, german) for german, english in PAIRS]


def write_text_pair(directory: Path, stem: str = "corpus", pairs=None, compress: bool = False) -> str:
    pairs = pairs or english_pairs()
    opener, suffix = (gzip.open, ".gz") if compress else (open, "")
    for index, lang in enumerate(LANGS):
        with opener(directory / f"{stem}.{lang}{suffix}", "wt", encoding="utf-8") as file:
            file.writelines(pair[index] + "\n" for pair in pairs)
    return str(directory / f"{stem}.{{lang}}{suffix}")


def write_tsv(path: Path, header: bool = True, tatoeba: bool = False) -> str:
    rows = [("eng", "xxx", *pair) if tatoeba else pair for pair in english_pairs()]
    lines = ([] if not header else ["\t".join(LANGS)]) + ["\t".join(row) for row in rows]
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return str(path)


def write_csv(path: Path) -> str:
    with open(path, "w", newline="", encoding="utf-8") as file:
        writer = csv.writer(file)
        writer.writerow(LANGS)
        writer.writerows(english_pairs())
    return str(path)


def write_jsonl(path: Path, translation_column: bool = True, compress=None) -> str:
    rows = [
        {"translation": dict(zip(LANGS, pair, strict=True))}
        if translation_column
        else dict(zip(LANGS, pair, strict=True))
        for pair in english_pairs()
    ]
    text = "".join(json.dumps(row, ensure_ascii=False) + "\n" for row in rows)
    (compress or open)(path, "wt", encoding="utf-8").write(text)
    return str(path)


def write_parquet(path: Path) -> str:
    columns = {lang: [pair[i] for pair in english_pairs()] for i, lang in enumerate(LANGS)}
    datasets.Dataset.from_dict(columns).to_parquet(str(path))
    return str(path)


FORMS = {
    "two text files": lambda d: write_text_pair(d),
    "two gzipped text files": lambda d: write_text_pair(d, compress=True),
    "TSV with a header": lambda d: write_tsv(d / "corpus.tsv"),
    "Tatoeba TSV": lambda d: write_tsv(d / "tatoeba.tsv", header=False, tatoeba=True) + "#en=3,xx=4",
    "CSV with a header": lambda d: write_csv(d / "corpus.csv"),
    "JSON lines, translation column": lambda d: write_jsonl(d / "train.jsonl"),
    "JSON lines, a column per language, bz2": lambda d: write_jsonl(d / "train.jsonl.bz2", False, bz2.open),
    "Parquet": lambda d: write_parquet(d / "corpus.parquet"),
}


@pytest.mark.parametrize("form", FORMS)
def test_every_form_gives_the_same_pairs(form, tmp_path):
    location = FORMS[form](tmp_path)
    pairs = load_translation_split(location, "en", "xx", "train")
    assert pairs.column_names == ["source", "target"]
    assert list(zip(pairs["source"], pairs["target"], strict=True)) == english_pairs()
    # The other direction from the same files
    assert load_translation_split(location, "xx", "en", "train")[0] == {
        "source": english_pairs()[0][1],
        "target": english_pairs()[0][0],
    }


def test_files_name_their_splits_beside_or_instead_of_a_folder(tmp_path, corpus_path):
    test_file = write_tsv(tmp_path / "test.tsv")
    spec = dataset_spec({"train": write_text_pair(tmp_path), "test": test_file})
    assert spec == f"train={tmp_path}/corpus.{{lang}} test={test_file}"
    assert split_names(spec) == ["train", "test"]
    assert len(load_translation_split(spec, "en", "xx", "test")) == len(PAIRS)
    beside = f"{corpus_path} test={test_file}"
    assert parse_dataset(beside)[0] == corpus_path
    assert split_names(beside) == ["train", "validation", "test"]
    missing_language = r"Language 'xx' not in dataset .*available languages: \['de', 'en'\]"
    with pytest.raises(CorpusError, match=missing_language):
        load_translation_split(beside, "en", "xx", "validation")


def test_a_path_with_spaces_survives_the_saved_config(tmp_path):
    directory = tmp_path / "my data"
    directory.mkdir()
    spec = dataset_spec([f"train={write_text_pair(directory)}"])
    assert len(load_translation_split(spec, "en", "xx", "train")) == len(PAIRS)


# Each bad input: (what to write, the dataset string, the languages, what the one line says)
def _unequal(d):
    write_text_pair(d)
    (d / "corpus.xx").write_text("".join(f"{pair[1]}\n" for pair in english_pairs()[:-1]))
    return str(d / "corpus.{lang}")


def _short_tsv_line(d):
    path = Path(write_tsv(d / "corpus.tsv"))
    lines = path.read_text().splitlines()
    lines[6] = lines[6].split("\t")[0]
    path.write_text("\n".join(lines) + "\n")
    return str(path)


def _long_tsv_line(d):
    path = Path(write_tsv(d / "t.tsv", header=False, tatoeba=True))
    lines = path.read_text().splitlines()
    lines[3] = "eng"
    path.write_text("\n".join(lines) + "\n")
    return f"{path}#en=3,xx=4"


def _not_utf8(d):
    location = write_text_pair(d)
    path = d / "corpus.xx"
    lines = path.read_bytes().splitlines(keepends=True)
    lines[9] = b"caf\xe9\n"
    path.write_bytes(b"".join(lines))
    return location


BAD_INPUTS = {
    "missing file": (lambda d: str(d / "nothing.tsv"), ("en", "xx"), r"nothing.tsv: no such file"),
    "line counts differ": (_unequal, ("en", "xx"), r"corpus.en has 120 lines and .*corpus.xx 119"),
    "language not in the files": (
        write_text_pair, ("en", "cs"), r"corpus.cs: no such file, .*'cs'.*corpus.en"
    ),
    "TSV line too short": (
        _short_tsv_line, ("en", "xx"), r"corpus.tsv line 7 has 1 tab-separated fields, not 2"
    ),
    "headerless line too short": (_long_tsv_line, ("en", "xx"), r"t.tsv line 4 has 1 .*, not at least 4"),
    "not UTF-8": (_not_utf8, ("en", "xx"), r"corpus.xx line 10 is not UTF-8 \(byte 0xe9"),
    "column that does not exist": (
        lambda d: write_tsv(d / "corpus.tsv"),
        ("en", "fr"),
        r"Language 'fr' not in dataset .*corpus.tsv'; available languages: \['en', 'xx'\]",
    ),
    "one side of a pair": (
        lambda d: write_text_pair(d).replace("{lang}", "en"),
        ("en", "xx"),
        r"corpus.en: not a file form .*corpus.\{lang\}",
    ),
    "bad column numbers": (lambda d: write_tsv(d / "c.tsv") + "#en=three", ("en", "xx"), r"counted from 1"),
    "JSON line broken": (
        lambda d: (d / "c.jsonl").write_text('{"translation": {"en": "a", "xx": "b"}}\n{"en": \n')
        and str(d / "c.jsonl"),
        ("en", "xx"),
        r"c.jsonl line 2 is not valid JSON",
    ),
}


@pytest.mark.parametrize("case", BAD_INPUTS)
def test_bad_input_is_one_line_naming_the_file_and_line(case, tmp_path):
    write, languages, message = BAD_INPUTS[case]
    location = write(tmp_path)
    with pytest.raises(CorpusError, match=message) as raised:
        load_translation_split(location, *languages, "train")
    assert "\n" not in str(raised.value)


def test_a_split_no_file_names_says_how_to_give_it(tmp_path):
    with pytest.raises(CorpusError, match=r"Split 'test' not in .*name a file for it as test=FILE"):
        load_translation_split(write_text_pair(tmp_path), "en", "xx", "test")


# Training and scoring on each form


@pytest.mark.parametrize("form", ["two gzipped text files", "Tatoeba TSV", "Parquet"])
def test_one_file_trains_with_held_out_validation_and_test_and_scores(form, tmp_path):
    location = FORMS[form](tmp_path)
    run = tmp_path / "run"
    config = tiny_config(
        location,
        str(tmp_path / "bpe"),
        run,
        source_lang="en",
        target_lang="xx",
        holdout=10,
        max_steps=2,
        save_interval_updates=None,
        validation_bleu=True,
        validation_max_sentences=4,
    )
    train(config)
    heldout = run / HELDOUT_DIR
    validation, test = (
        load_translation_split(str(heldout), "en", "xx", split) for split in ("validation", "test")
    )
    assert len(validation) == len(test) == 10
    assert set(validation["source"]).isdisjoint(test["source"])
    assert json.loads((tmp_path / "bpe" / "learned_from.json").read_text())["languages"] == ["en", "xx"]
    report = evaluate_bleu(
        run / "checkpoint_last",
        TranslationData(str(heldout), "en", "xx"),
        tmp_path / "evaluation",
        runtime=Runtime(show_progress=False),
        scoring=ScoreOptions(paper_bleu=False),
        options=DecodingOptions(num_beams=1, max_new_tokens=5),
    )
    assert report["sentences"] == 10 and 0 <= report["cased"]["bleu"] <= 100


def test_held_out_pairs_never_train(tmp_path):
    """Pairs held out are left out of training, and so are their repeats elsewhere in the corpus."""
    from hf_vanilla.training.train import training_pairs

    repeated = english_pairs() + english_pairs()[:30]
    location = write_text_pair(tmp_path, pairs=repeated)
    config = tiny_config(
        location, str(tmp_path / "bpe"), tmp_path / "run", source_lang="en", target_lang="xx"
    )
    kept, heldout = training_pairs(config)
    held = set(heldout["validation"]["source"]) | set(heldout["test"]["source"])
    assert held and held.isdisjoint(kept["source"])
    assert len(heldout["validation"]) == len(heldout["test"]) == len(repeated) // 10
    again_kept, again = training_pairs(config)
    assert again["test"]["source"] == heldout["test"]["source"] and again_kept["source"] == kept["source"]
