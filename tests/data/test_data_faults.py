"""Faults in the data and the saved models a user hands the scripts: each is one line naming what is wrong
(the scripts print it as "error: ..." and exit non-zero), or a rule applied and counted, never a traceback."""

import json
import logging
import shutil
import subprocess
from itertools import chain
from pathlib import Path

import pytest
from conftest import run_script, tiny_config, with_truncated_weights
from synthetic_corpus import synthetic_pairs
from transformers import AutoTokenizer

from hf_vanilla import VanillaTransformerConfig, VanillaTransformerForConditionalGeneration
from hf_vanilla.checkpoints.loading import load_model_and_tokenizer
from hf_vanilla.checkpoints.tokenizer_directory import save_tokenizer
from hf_vanilla.data.corpus import load_translation_split
from hf_vanilla.data.tokenization import config_kwargs_from_tokenizer, train_tokenizer
from hf_vanilla.training.settings import TrainingError
from hf_vanilla.training.train import train


def json_line(source: str, target: str) -> bytes:
    return json.dumps({"translation": {"de": source, "en": target}}).encode() + b"\n"


def write_corpus(directory: Path, train_size: int = 80, validation_size: int = 8) -> Path:
    """train.jsonl, validation.jsonl and test.jsonl in the Hub `translation` layout."""
    directory.mkdir(parents=True, exist_ok=True)
    for split, size in (("train", train_size), ("validation", validation_size), ("test", validation_size)):
        (directory / f"{split}.jsonl").write_bytes(
            b"".join(json_line(*pair) for pair in synthetic_pairs(size))
        )
    return directory


def replace_line(path: Path, number: int, line: bytes) -> None:
    lines = path.read_bytes().splitlines(keepends=True)
    lines[number - 1] = line
    path.write_bytes(b"".join(lines))


@pytest.fixture(scope="module")
def tokenizer_dir(tmp_path_factory) -> Path:
    pairs = synthetic_pairs(80)
    tokenizer = train_tokenizer(chain.from_iterable(pairs), vocab_size=300, show_progress=False)
    return save_tokenizer(tokenizer, tmp_path_factory.mktemp("tokenizer") / "bpe")


@pytest.fixture(scope="module")
def model_dir(tokenizer_dir, tmp_path_factory) -> Path:
    """An untrained tiny model saved with its tokenizer."""
    directory = tmp_path_factory.mktemp("model") / "model"
    shutil.copytree(tokenizer_dir, directory)
    tokenizer = AutoTokenizer.from_pretrained(tokenizer_dir)
    config = VanillaTransformerConfig.from_preset("tiny", **config_kwargs_from_tokenizer(tokenizer))
    VanillaTransformerForConditionalGeneration(config).save_pretrained(directory)
    return directory


def run_config(dataset, tokenizer, output_dir, **overrides):
    """conftest's tiny run, two updates long, without validation BLEU or periodic saves unless asked."""
    settings = {"max_steps": 2, "validation_bleu": False, "save_interval_updates": None, **overrides}
    return tiny_config(str(dataset), str(tokenizer), output_dir, **settings)


def assert_one_error_line(finished: subprocess.CompletedProcess, *expected: str) -> None:
    """The script failed with one "error: ..." line holding each of `expected`, and no traceback."""
    assert finished.returncode != 0
    assert "Traceback" not in finished.stderr, finished.stderr[-3000:]
    errors = [line for line in finished.stderr.splitlines() if line.startswith("error: ")]
    assert len(errors) == 1, finished.stderr[-3000:]
    for text in expected:
        assert text in errors[0]


# Items 1 to 3 of the issue: a line of a split that cannot be read is named, file and line.

UNREADABLE_LINES = {
    "malformed_json": (b'{"translation": {"de": "der Hund", "en": \n', "line 3 is not valid JSON"),
    "missing_target": (b'{"translation": {"de": "der Hund"}}\n', "line 3 has no 'en' text"),
    "not_utf8": (b'{"translation": {"de": "gro\xdf", "en": "big"}}\n', "line 3 is not UTF-8 (byte 0xdf"),
}


@pytest.mark.parametrize("fault", sorted(UNREADABLE_LINES))
def test_unreadable_line_is_named_with_its_file(tmp_path, fault):
    line, expected = UNREADABLE_LINES[fault]
    corpus = write_corpus(tmp_path / "corpus")
    replace_line(corpus / "train.jsonl", 3, line)
    with pytest.raises(ValueError, match="train.jsonl " + expected.replace("(", r"\(")) as raised:
        load_translation_split(str(corpus), "de", "en", "train")
    assert str(corpus) in str(raised.value)


def test_unreadable_line_in_another_split_is_named(tmp_path):
    """datasets reads every split at once: a bad test.jsonl stops a run on train, and must say where."""
    corpus = write_corpus(tmp_path / "corpus")
    replace_line(corpus / "test.jsonl", 2, UNREADABLE_LINES["malformed_json"][0])
    with pytest.raises(ValueError, match="test.jsonl line 2 is not valid JSON"):
        load_translation_split(str(corpus), "de", "en", "train")


def test_missing_language_in_every_line_still_lists_the_languages(tmp_path):
    corpus = write_corpus(tmp_path / "corpus")
    with pytest.raises(
        ValueError, match=r"Language 'fr' not in dataset .*available languages: \['de', 'en'\]"
    ):
        load_translation_split(str(corpus), "de", "fr", "train")


def test_train_script_names_the_unreadable_line_in_one_line(tmp_path, tokenizer_dir):
    corpus = write_corpus(tmp_path / "corpus")
    replace_line(corpus / "train.jsonl", 3, UNREADABLE_LINES["not_utf8"][0])
    finished = run_script(
        "train.py", "--dataset", corpus, "--source-lang", "de", "--target-lang", "en",
        "--tokenizer", tokenizer_dir, "--output-dir", tmp_path / "run", "--max-steps", 2,
    )  # fmt: skip
    assert_one_error_line(finished, f"{corpus / 'train.jsonl'} line 3 is not UTF-8")
    assert not (tmp_path / "run").exists()


# Items 4 and 5: a saved model directory that cannot load says which file is missing or which sizes differ.


def test_model_without_tokenizer_file_names_it(model_dir, tmp_path):
    broken = shutil.copytree(model_dir, tmp_path / "model")
    (broken / "tokenizer.json").unlink()
    with pytest.raises(
        ValueError, match=r"model has no tokenizer.json \(needed files: config.json, model.safetensors"
    ):
        load_model_and_tokenizer(broken, "cpu")


def test_translate_script_names_the_missing_tokenizer_file(model_dir, tmp_path):
    broken = shutil.copytree(model_dir, tmp_path / "model")
    (broken / "tokenizer.json").unlink()
    (tmp_path / "input.de").write_text("der Hund\n")
    finished = run_script("translate.py", broken, "--input", tmp_path / "input.de", "--device", "cpu")
    assert_one_error_line(finished, f"{broken} has no tokenizer.json (needed files:")


def test_vocab_size_unlike_the_weights_names_both_sizes(model_dir, tmp_path):
    edited = shutil.copytree(model_dir, tmp_path / "model")
    config = json.loads((edited / "config.json").read_text())
    saved_size = config["vocab_size"]
    config["vocab_size"] = saved_size + 8
    (edited / "config.json").write_text(json.dumps(config))
    with pytest.raises(
        ValueError, match=rf"vocab_size {saved_size + 8}\).*\({saved_size}, \d+\) in the weights"
    ):
        load_model_and_tokenizer(edited, "cpu")


def test_vocab_size_check_passes_a_sound_model(model_dir):
    model, _ = load_model_and_tokenizer(model_dir, "cpu")
    assert model.config.vocab_size == model.get_input_embeddings().num_embeddings


# Averaging more checkpoints than the run saved averages those there are, and says so.


def test_average_last_beyond_the_saves_averages_what_was_saved(tmp_path, tokenizer_dir, caplog):
    corpus = write_corpus(tmp_path / "corpus")
    output_dir = tmp_path / "run"
    config = run_config(
        corpus, tokenizer_dir, output_dir, max_steps=5, save_interval_updates=2, average_last=4
    )
    caplog.set_level(logging.INFO, logger="hf_vanilla.training.train")
    train(config)
    assert "average_last is 4 but the run saved 3 numbered checkpoints: averaging those 3" in caplog.text
    assert "Averaged checkpoint_2, checkpoint_4, checkpoint_5" in caplog.text
    assert (output_dir / "checkpoint_average" / "model.safetensors").is_file()


def test_average_last_within_the_saves_trains(tmp_path, tokenizer_dir):
    corpus = write_corpus(tmp_path / "corpus")
    output_dir = tmp_path / "run"
    train(run_config(corpus, tokenizer_dir, output_dir, max_steps=3, save_interval_updates=1, average_last=3))
    assert (output_dir / "checkpoint_average" / "model.safetensors").is_file()


# Item 7: the validation split is cleaned by the training split's rule, and the drops are counted.


def test_overlong_validation_pair_is_dropped_and_counted(tmp_path, tokenizer_dir, caplog):
    corpus = write_corpus(tmp_path / "corpus")
    replace_line(corpus / "validation.jsonl", 2, json_line(" ".join(["Hund"] * 5000), "a dog"))
    caplog.set_level(logging.INFO, logger="hf_vanilla.data.batches")
    train(run_config(corpus, tokenizer_dir, tmp_path / "run", max_steps=1))
    assert "Cleaning kept 7 of 8 validation pairs; dropped 0 empty, 1 over 250 tokens" in caplog.text
    assert "Cleaning kept 80 of 80 train pairs" in caplog.text


def test_init_from_a_checkpoint_with_truncated_weights_names_the_file(model_dir, tmp_path):
    weights = with_truncated_weights(model_dir, tmp_path / "model")
    config = run_config(write_corpus(tmp_path / "data"), "", tmp_path / "run", init_from=str(weights.parent))
    with pytest.raises(TrainingError, match=f"init_from {weights.parent}: {weights} is truncated or corrupt"):
        train(config)


def test_init_from_a_checkpoint_without_tokenizer_file_names_it(model_dir, tmp_path):
    broken = shutil.copytree(model_dir, tmp_path / "model")
    (broken / "tokenizer.json").unlink()
    config = run_config(write_corpus(tmp_path / "data"), "", tmp_path / "run", init_from=str(broken))
    with pytest.raises(TrainingError, match=r"model has no tokenizer.json \(needed files: config.json"):
        train(config)
