"""The target-language model that reranking weighs (hf_vanilla.research.language_model): trained with
transformers' Trainer, saved whole or not at all, scoring each sentence by its per-token log-likelihood."""

import json
import shutil

import pytest
import torch
from conftest import TINY_LANGUAGE_MODEL, run_script, with_truncated_weights
from transformers import AutoTokenizer

from hf_vanilla.data.corpus import load_translation_split
from hf_vanilla.research.language_model import (
    RECORD_FILE,
    LanguageModelTraining,
    load_language_models,
    sentence_log_probs,
    train_language_model,
)


def test_a_trained_language_model_is_saved_with_its_tokenizer_and_record(language_model_dir, tiny_model_dir):
    record = json.loads((language_model_dir / RECORD_FILE).read_text())
    assert record["epochs"] == 1 and record["updates"] > 0 and record["training_sentences"] > 0
    assert record["shape"]["n_layer"] == 1 and record["machine"]["cpu_model"]
    assert (language_model_dir / "model.safetensors").is_file()
    ((model, tokenizer),) = load_language_models([language_model_dir], "cpu")
    assert tokenizer.get_vocab() == AutoTokenizer.from_pretrained(tiny_model_dir).get_vocab()
    assert model.config.vocab_size == len(tokenizer) and not model.training


def test_a_language_model_that_does_not_load_is_one_line_naming_it(language_model_dir, tmp_path):
    """Loaded as translation models are: a truncated weights file or weights unlike config.json are named."""
    weights = with_truncated_weights(language_model_dir, tmp_path / "truncated")
    truncated = f"language model {weights.parent}: {weights} is truncated or corrupt"
    with pytest.raises(ValueError, match=truncated):
        load_language_models([weights.parent], "cpu")
    edited = shutil.copytree(language_model_dir, tmp_path / "edited")
    config = json.loads((edited / "config.json").read_text())
    (edited / "config.json").write_text(json.dumps({**config, "n_embd": config["n_embd"] * 2}))
    with pytest.raises(ValueError, match=f"{edited / 'model.safetensors'} does not match"):
        load_language_models([edited], "cpu")
    with pytest.raises(FileNotFoundError, match=f"language model {tmp_path / 'none'}: cannot load"):
        load_language_models([tmp_path / "none"], "cpu")


def test_training_lowers_the_validation_perplexity(corpus_path, tiny_model_dir, tmp_path):
    pairs = load_translation_split(corpus_path, "de", "en", "train")
    record = train_language_model(
        pairs["target"],
        AutoTokenizer.from_pretrained(tiny_model_dir),
        tmp_path / "lm",
        load_translation_split(corpus_path, "de", "en", "validation")["target"],
        LanguageModelTraining(
            epochs=3,
            batch_size=16,
            lr=3e-3,
            warmup=10,
            precision="no",  # as conftest's language_model_dir, for the training tests after it
            device="cpu",
            show_progress=False,
        ),
        **TINY_LANGUAGE_MODEL,
    )
    perplexities = [row["validation_perplexity"] for row in record["validation"]]
    assert len(perplexities) == 3 and perplexities[-1] < perplexities[0] < len(
        AutoTokenizer.from_pretrained(tiny_model_dir)
    )


def test_sentence_scores_are_the_models_per_token_log_likelihood_batched_or_not(language_model_dir):
    ((model, tokenizer),) = load_language_models([language_model_dir], "cpu")
    texts = ["A man rides a bike.", "Two dogs play in the snow with a red ball.", ""]
    batched = sentence_log_probs(model, tokenizer, texts, max_tokens=4096)
    one_by_one = [sentence_log_probs(model, tokenizer, [text], max_tokens=4096)[0] for text in texts]
    assert batched == pytest.approx(one_by_one, abs=1e-5)
    for text, score in zip(texts, batched, strict=True):  # GPT-2's own loss: the mean over tokens after <s>
        ids = torch.tensor(
            [
                [
                    tokenizer.bos_token_id,
                    *tokenizer(text, add_special_tokens=False)["input_ids"],
                    tokenizer.eos_token_id,
                ]
            ]
        )
        with torch.no_grad():
            assert score == pytest.approx(-model(input_ids=ids, labels=ids).loss.item(), abs=1e-5)


def test_nothing_is_written_without_training_sentences(tiny_model_dir, tmp_path):
    with pytest.raises(ValueError, match="needs training sentences"):
        train_language_model(
            ["", "  "],
            AutoTokenizer.from_pretrained(tiny_model_dir),
            tmp_path / "lm",
            settings=LanguageModelTraining(device="cpu"),
        )
    assert not (tmp_path / "lm").exists()


def test_the_script_trains_on_the_target_side_and_names_a_missing_tokenizer(
    corpus_path, tiny_model_dir, tmp_path
):
    missing = run_script(
        "research/train_language_model.py", "--dataset", corpus_path, "--source-lang", "en",
        "--target-lang", "de", "--epochs", "1", "--device", "cpu", "--quiet",
        "--tokenizer", tmp_path / "none", "--output-dir", tmp_path / "lm",
    )  # fmt: skip
    assert missing.returncode == 1 and missing.stderr.splitlines()[-1].startswith("error: ")
    assert "Traceback" not in missing.stderr and not (tmp_path / "lm").exists()
