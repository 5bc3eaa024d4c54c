"""Ensemble decoding: several models translate as one through generate, their next-token probabilities
averaged."""

import json
import math

import pytest
import torch
from conftest import run_script
from transformers import AutoModelForSeq2SeqLM, LogitsProcessorList

from hf_vanilla.evaluation.scoring import Runtime, TranslationData, evaluate_bleu
from hf_vanilla.evaluation.selection import SelectionGrid, select_on_validation
from hf_vanilla.model.decoding import DecodingOptions
from hf_vanilla.model.modeling_vanilla import VanillaTransformerForConditionalGeneration
from hf_vanilla.research.decoders import ResearchModels, load_research_decoder
from hf_vanilla.research.ensemble import EnsembleLogitsProcessor, ensemble_logits_processors
from hf_vanilla.translation.decoding import QUIET, translate_sentences
from hf_vanilla.translation.engines import EngineSettings

SOURCES = ["Ein Mann fährt Fahrrad.", "Zwei Hunde spielen im Schnee.", "", "Kinder."]


def as_one(model, tokenizer, *members):
    """`translate_sentences`' keyword that makes `members` translate with `model` as one."""
    return {"logits_processors": ensemble_logits_processors(model, tokenizer, members)}


def mixture_log_probs(models, encoded, decoder_ids):
    """log of the models' mean next-token probabilities at every position, from whole-prefix forward
    passes."""
    log_probs = [
        torch.log_softmax(model(**encoded, decoder_input_ids=decoder_ids).logits.float(), dim=-1)
        for model in models
    ]
    return torch.logsumexp(torch.stack(log_probs), dim=0) - math.log(len(models))


def test_a_model_in_ensemble_with_itself_translates_as_it_does_alone(first, tokenizer):
    for settings in ({"num_beams": 1}, {"num_beams": 3, "length_penalty": 1.0}):
        alone = translate_sentences(
            first, tokenizer, SOURCES, batching=QUIET, max_new_tokens=8, **settings
        )
        doubled = translate_sentences(
            first,
            tokenizer,
            SOURCES,
            batching=QUIET,
            max_new_tokens=8,
            **as_one(first, tokenizer, first),
            **settings,
        )
        assert doubled == alone


def test_two_models_translate_otherwise_than_either_alone(first, second, tokenizer):
    both = translate_sentences(
        first, tokenizer, SOURCES, batching=QUIET, max_new_tokens=8, **as_one(first, tokenizer, second)
    )
    assert both != translate_sentences(first, tokenizer, SOURCES, batching=QUIET, max_new_tokens=8)
    assert both != translate_sentences(second, tokenizer, SOURCES, batching=QUIET, max_new_tokens=8)


def test_greedy_ensemble_takes_the_argmax_of_the_averaged_probabilities(first, second, tokenizer):
    encoded = tokenizer(SOURCES[:2], padding=True, return_tensors="pt")
    processor = EnsembleLogitsProcessor([second], **encoded)
    with torch.inference_mode():
        output = first.generate(
            **encoded, num_beams=1, max_new_tokens=8, logits_processor=LogitsProcessorList([processor])
        )
        expected = mixture_log_probs([first, second], encoded, output[:, :-1]).argmax(-1)
    generated = output[:, 1:]
    running = torch.ones_like(generated, dtype=torch.bool)
    running[:, 1:] = (generated[:, :-1] != first.config.eos_token_id).cumprod(-1).bool()
    assert torch.equal(generated[running], expected[running])


def test_beam_scores_are_the_averaged_probabilities_of_the_hypotheses_found(first, second, tokenizer):
    """The other model's cache follows beam search's reordering: each final hypothesis scores what a
    whole-prefix pass of both models gives it (length penalty 0: the score is the sum of its tokens'
    log-probabilities)."""
    encoded = tokenizer(SOURCES[:2], padding=True, return_tensors="pt")
    processor = EnsembleLogitsProcessor([second], **encoded)
    with torch.inference_mode():
        output = first.generate(
            **encoded,
            num_beams=4,
            num_return_sequences=4,
            length_penalty=0.0,
            max_new_tokens=10,
            logits_processor=LogitsProcessorList([processor]),
            return_dict_in_generate=True,
            output_scores=True,
        )
        rows = output.sequences.shape[0]
        per_row = {key: value.repeat_interleave(4, 0) for key, value in encoded.items()}
        log_probs = mixture_log_probs([first, second], per_row, output.sequences[:, :-1])
    assert rows == 8
    for row in range(rows):
        tokens = output.sequences[row, 1:].tolist()
        length = (
            tokens.index(first.config.eos_token_id) + 1
            if first.config.eos_token_id in tokens
            else len(tokens)
        )
        score = sum(log_probs[row, position, tokens[position]].item() for position in range(length))
        assert output.sequences_scores[row].item() == pytest.approx(score, abs=1e-3)


def test_a_member_with_another_vocabulary_is_named(first, tokenizer):
    config = first.config.to_dict() | {"vocab_size": first.config.vocab_size + 8}
    stranger = VanillaTransformerForConditionalGeneration(type(first.config)(**config)).eval()
    with pytest.raises(ValueError, match="ensemble member 1 has a vocabulary of"):
        as_one(first, tokenizer, stranger)


def test_evaluation_and_selection_record_the_ensemble(
    tiny_model_dir, tiny_model_copy, second_dir, corpus_path, tmp_path
):
    data = TranslationData(corpus_path, "de", "en", max_sentences=3)
    runtime = Runtime(EngineSettings(device="cpu"))
    ensemble = load_research_decoder(ResearchModels(ensemble=[second_dir]), device="cpu")
    report = evaluate_bleu(
        tiny_model_dir,
        data,
        tmp_path,
        runtime=runtime,
        decoder=ensemble,
        options=DecodingOptions(num_beams=2),
    )
    assert report["ensemble"] == [str(second_dir)]
    grid = SelectionGrid(num_beams=[2])
    selection = select_on_validation(
        [tiny_model_dir], data, tmp_path / "selection", grid, runtime, decoder=ensemble
    )
    saved = json.loads((tmp_path / "selection" / "selection.json").read_text())
    assert saved["ensemble"] == [str(second_dir)] and selection["reports"]["test"]
    assert saved["decoding_defaults_file"] is None  # an ensemble's choice is not the checkpoint's own
    alone = select_on_validation([tiny_model_copy], data, tmp_path / "alone", grid, runtime)
    assert "ensemble" not in alone


def test_translate_script_prints_the_research_decoders_translations(tiny_model_dir):
    """translate.py with --ensemble decodes through the research decoder: a model with itself as member prints
    what it prints alone."""
    options, stdin = ("--device", "cpu", "--quiet"), "Ein Hund rennt.\nZwei Kinder.\n"
    alone = run_script("translate.py", tiny_model_dir, *options, stdin=stdin, check=True)
    doubled = run_script(
        "translate.py", tiny_model_dir, "--ensemble", tiny_model_dir, *options, stdin=stdin, check=True
    )
    assert len(alone.stdout.splitlines()) == 2 and doubled.stdout == alone.stdout


def test_translate_script_names_a_member_that_does_not_fit(tiny_model_dir, tmp_path):
    other = tmp_path / "other"
    model = AutoModelForSeq2SeqLM.from_pretrained(tiny_model_dir)
    model.config.tokenizer_fingerprint = "0" * 16
    model.save_pretrained(other)
    for name in ("tokenizer.json", "tokenizer_config.json"):
        (other / name).write_bytes((tiny_model_dir / name).read_bytes())
    completed = run_script(
        "translate.py",
        tiny_model_dir,
        "--ensemble",
        tiny_model_dir,
        other,
        "--device",
        "cpu",
        "--quiet",
        stdin="Ein Hund rennt.\n",
    )
    assert completed.returncode == 1 and completed.stdout == ""
    last_line = completed.stderr.splitlines()[-1]
    assert (
        last_line.startswith(f"error: ensemble member {other}: ") and "not the one the model was" in last_line
    )
    assert "Traceback" not in completed.stderr
