"""Data preparation as a step of its own (scripts/prepare_data.py):
once into datasets' cache, then read from it."""

import dataclasses
import json
import os
import shutil
import subprocess
import sys

import pytest
from conftest import SCRIPTS, tiny_config
from transformers import AutoTokenizer

from hf_vanilla.checkpoints.tokenizer_directory import PairsSource, train_tokenizer_on_pairs
from hf_vanilla.data.corpus import load_translation_split
from hf_vanilla.data.tokenization import sample_pairs
from hf_vanilla.model.configuration_vanilla import DROPOUT_FIELDS
from hf_vanilla.tools.options_page import script_parser
from hf_vanilla.training.preparation import PREPARATION_SETTINGS, prepare_training_data
from hf_vanilla.training.recipes import RECIPE_KEYS
from hf_vanilla.training.settings import TrainingConfig, TrainingError


def prepare(*flags: str, cache) -> subprocess.CompletedProcess:
    environment = {**os.environ, "HF_DATASETS_CACHE": str(cache), "HF_HUB_OFFLINE": "1"}
    return subprocess.run(
        [sys.executable, str(SCRIPTS / "prepare_data.py"), *flags],
        capture_output=True,
        text=True,
        env=environment,
        timeout=300,
    )


def test_prepares_once_then_reads_the_cache(corpus_path, tmp_path):
    # A corpus of its own, so that no other test has prepared it into the cache before.
    corpus = shutil.copytree(corpus_path, tmp_path / "corpus")
    flags = [
        f"--dataset={corpus}", "--source-lang=en", "--target-lang=de", f"--tokenizer={tmp_path / 'bpe'}",
        "--tokenizer-vocab-size=300", "--tokenizer-sample-pairs=200", "--model-preset=tiny",
    ]  # fmt: skip
    first = prepare(*flags, cache=tmp_path / "cache")
    assert first.returncode == 0, first.stderr[-3000:]
    assert "BPE: counting words" in first.stderr and "Tokenizing" in first.stderr
    assert "learned from 200 pairs" in first.stderr and "the whole corpus would take about" in first.stderr
    report = json.loads(first.stdout[: first.stdout.rindex("}") + 1])
    tokenizer_training = report["tokenizer_training"]
    assert tokenizer_training["pairs"] == 200 and tokenizer_training["corpus_pairs"] == 800
    assert report["train_pairs"] == 800 and report["validation_pairs"] == 50
    assert report["train_source_tokens"] > 800
    assert report["cache_directory"].startswith(str(tmp_path / "cache"))
    assert len(AutoTokenizer.from_pretrained(tmp_path / "bpe")) == 300

    again = prepare(*flags, cache=tmp_path / "cache")
    assert again.returncode == 0, again.stderr[-3000:]
    assert "BPE" not in again.stderr  # the tokenizer is there
    assert "Tokenizing" not in again.stderr  # read from the cache
    assert json.loads(again.stdout[: again.stdout.rindex("}") + 1])["cache_files"] == report["cache_files"]


@pytest.mark.parametrize(
    ("overrides", "message"),
    [
        ({"target_lang": "fr"}, r"Language 'fr' not in dataset .*; available languages: \['de', 'en'\]"),
        (
            {"dataset_config": "de-en"},
            r"has no config 'de-en' \(BuilderConfig 'de-en' not found\. Available: \['default'\]\); pass one",
        ),
        ({"clean_max_tokens": 1}, "no train pairs left in .* after cleaning"),
    ],
)
def test_bad_input_is_one_line_and_leaves_no_tokenizer_half_written(
    corpus_path, tmp_path, overrides, message
):
    settings = {"source_lang": "en", "target_lang": "de", "tokenizer_vocab_size": 300, **overrides}
    config = tiny_config(corpus_path, tmp_path / "bpe", tmp_path / "run", **settings)
    with pytest.raises(TrainingError, match=message) as raised:
        prepare_training_data(config)
    assert "\n" not in str(raised.value)
    assert not (tmp_path / "run").exists()
    # No staging leftover beside the tokenizer: it is whole (a split empty only after cleaning) or absent.
    assert {path.name for path in tmp_path.iterdir()} <= {"bpe"}
    if (tmp_path / "bpe").exists():
        AutoTokenizer.from_pretrained(tmp_path / "bpe")


def test_sample_is_random_the_same_for_a_seed_and_the_whole_split_when_smaller(corpus_path):
    pairs = load_translation_split(corpus_path, "en", "de", "train")
    sample = sample_pairs(pairs, 100)
    assert len(sample) == 100 and sample["source"] == sample_pairs(pairs, 100)["source"]
    assert sample["source"] != pairs["source"][:100]
    assert set(sample["source"]) <= set(pairs["source"])
    assert sample_pairs(pairs, 10_000) is pairs and sample_pairs(pairs, None) is pairs


def test_tokenizer_from_a_sample_estimates_the_whole_corpus_linearly(corpus_path, tmp_path):
    pairs = load_translation_split(corpus_path, "en", "de", "train")
    report = train_tokenizer_on_pairs(
        pairs, tmp_path / "bpe", 300, PairsSource(("de", "en")), max_sentences=200
    )
    assert (report["pairs"], report["corpus_pairs"], report["vocabulary"]) == (200, 800, 300)
    assert report["whole_corpus_seconds_estimate"] == pytest.approx(4 * report["seconds"], abs=0.2)
    assert len(AutoTokenizer.from_pretrained(tmp_path / "bpe")) == 300


def test_train_tokenizer_script_learns_from_a_sample_and_estimates_the_whole(corpus_path, tmp_path):
    trained = subprocess.run(
        [sys.executable, str(SCRIPTS / "train_tokenizer.py"), f"--dataset={corpus_path}", "--source-lang=en",
         "--target-lang=de", "--vocab-size=300", "--tokenizer-sample-pairs=100",
         f"--output-dir={tmp_path / 'bpe'}"],
        capture_output=True, text=True, env={**os.environ, "HF_HUB_OFFLINE": "1"}, timeout=300,
    )  # fmt: skip
    assert trained.returncode == 0, trained.stderr[-3000:]
    assert "learned from 100 pairs" in trained.stdout and "a random sample of the 800" in trained.stdout
    assert "the whole corpus would take about" in trained.stdout
    assert "BPE: counting words" in trained.stderr
    assert "validation de: round trip 100.00%" in trained.stdout


class ReadSettings(TrainingConfig):
    """A TrainingConfig that notes each key read from it."""

    read: set[str] = set()

    def __getattribute__(self, name):
        if name in TRAINING_KEYS:
            ReadSettings.read.add(name)
        return super().__getattribute__(name)


TRAINING_KEYS = {field.name for field in dataclasses.fields(TrainingConfig)}
# The model's dropout goes into the model config that preparation builds for its positions, and changes no
# pair; the keys the corpus-size table fills are each looked at to see whether the config leaves it auto.
READ_FOR_THE_MODEL_CONFIG_ONLY = {*DROPOUT_FIELDS, *RECIPE_KEYS}


def test_preparation_reads_only_the_settings_prepare_data_takes_as_flags(corpus_path, tmp_path):
    config = tiny_config(corpus_path, tmp_path / "bpe", tmp_path / "run", tokenizer_vocab_size=300)
    recording = ReadSettings(**{name: getattr(config, name) for name in TRAINING_KEYS})
    ReadSettings.read.clear()
    prepare_training_data(recording, tokenizer_sample_pairs=200)
    assert ReadSettings.read - READ_FOR_THE_MODEL_CONFIG_ONLY <= PREPARATION_SETTINGS
    # It notes what is read.
    assert {"dataset", "tokenizer", "model_preset", "clean_max_tokens"} <= ReadSettings.read


def test_prepare_data_takes_the_data_settings_and_refuses_the_training_ones():
    parser = script_parser(SCRIPTS / "prepare_data.py")
    parsed = parser.parse_args(
        ["--config", "c.yaml", "--clean-max-tokens", "100", "--tokenizer-sample-pairs", "9"]
    )
    assert (parsed.clean_max_tokens, parsed.tokenizer_sample_pairs) == (100, 9)
    flags = {flag for action in parser._actions for flag in action.option_strings}
    assert {"--max-steps", "--lr", "--output-dir", "--num-beams", "--mixed-precision"}.isdisjoint(flags)
