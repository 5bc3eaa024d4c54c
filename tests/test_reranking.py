"""Reranking beam search's n-best list with models of the reverse direction (noisy-channel reranking)."""

import json
import subprocess
import sys

import pytest
import torch
from conftest import SCRIPTS
from test_ensemble import SOURCES

from hf_vanilla.reranking import rerank, reverse_scores, source_log_probs
from hf_vanilla.scoring import evaluate_reranked, evaluate_translation
from hf_vanilla.selection import select_on_validation
from hf_vanilla.translation import translate_nbest, translate_sentences

REFERENCES = ["A man rides a bike.", "Two dogs play in the snow.", "Nothing.", "Children."]


@pytest.fixture(scope="module")
def reverse(second, tokenizer):
    """`second` standing for a model of the other direction, with its tokenizer."""
    return second, tokenizer


def test_nbest_lists_start_with_beam_searchs_translation_and_fall_in_score(first, tokenizer):
    settings = {"length_penalty": 1.0, "max_new_tokens": 8, "show_progress": False}
    nbest = translate_nbest(first, tokenizer, SOURCES, num_beams=3, **settings)
    chosen = translate_sentences(first, tokenizer, SOURCES, num_beams=3, **settings)
    assert [hypotheses[0][0] for hypotheses in nbest] == chosen
    assert nbest[2] == [("", 0.0)]  # a blank source is not decoded
    for index in (0, 1, 3):
        scores = [score for _, score in nbest[index]]
        assert len(scores) == 3 and scores == sorted(scores, reverse=True)
    greedy = translate_sentences(
        first, tokenizer, SOURCES, num_beams=1, max_new_tokens=8, show_progress=False
    )
    one_best = translate_nbest(first, tokenizer, SOURCES, num_beams=1, max_new_tokens=8, show_progress=False)
    assert one_best == [[(translation, 0.0)] for translation in greedy]


def test_source_log_probs_are_the_reverse_models_per_token_log_likelihood(reverse, tokenizer):
    model, _ = reverse
    sources, translations = (
        ["Ein Mann fährt Fahrrad.", "Kinder."],
        ["A man rides a bike.", "Children playing."],
    )
    scores = source_log_probs(model, tokenizer, sources, translations)
    for source, translation, score in zip(sources, translations, scores, strict=True):
        encoded = tokenizer(text=translation, text_target=source, return_tensors="pt")
        with torch.inference_mode():
            loss = model(**encoded).loss  # plain cross-entropy, averaged over the source's tokens
        assert score == pytest.approx(-loss.item(), abs=1e-4)
    # batched with others of other lengths (padding), a pair scores as it does alone
    assert source_log_probs(model, tokenizer, sources[1:], translations[1:]) == pytest.approx(
        scores[1:], abs=1e-4
    )


def test_reverse_scores_average_the_reverse_models_and_skip_blank_sources(first, reverse, tokenizer):
    nbest = translate_nbest(first, tokenizer, SOURCES, num_beams=2, max_new_tokens=8, show_progress=False)
    alone = reverse_scores(nbest, SOURCES, [reverse], show_progress=False)
    other = reverse_scores(nbest, SOURCES, [(first, tokenizer)], show_progress=False)
    both = reverse_scores(nbest, SOURCES, [reverse, (first, tokenizer)], show_progress=False)
    assert alone[2] == [0.0]
    for index in (0, 1, 3):
        assert both[index] == pytest.approx(
            [(a + b) / 2 for a, b in zip(alone[index], other[index], strict=True)], abs=1e-5
        )
    with pytest.raises(ValueError, match="at least one model of the reverse direction"):
        reverse_scores(nbest, SOURCES, [])


def test_rerank_weighs_the_reverse_score_against_beam_searchs():
    nbest = [[("beam's choice", -0.1), ("explains the source", -0.5)], [("only one", -0.3)]]
    reverse = [[-2.0, -1.0], [-4.0]]
    assert rerank(nbest, reverse, 0.0) == ["beam's choice", "only one"]
    assert rerank(nbest, reverse, 0.3) == ["beam's choice", "only one"]  # -0.7 against -0.8
    assert rerank(nbest, reverse, 0.5) == ["explains the source", "only one"]  # -1.1 against -1.0
    assert rerank([[("a", -1.0), ("b", -1.0)]], [[-1.0, -1.0]], 1.0) == ["a"]  # the first of equals
    with pytest.raises(ValueError, match="at least 0"):
        rerank(nbest, reverse, -1.0)


def test_reranking_with_weight_zero_scores_as_beam_search(first, reverse, tokenizer):
    settings = {"length_penalty": 1.0, "max_new_tokens": 8, "show_progress": False}
    plain, plain_report = evaluate_translation(first, tokenizer, SOURCES, REFERENCES, num_beams=3, **settings)
    evaluated = evaluate_reranked(first, tokenizer, SOURCES, REFERENCES, [reverse], [0.0, 5.0], 3, **settings)
    (unchanged, report), (reranked, heavy_report) = evaluated
    assert unchanged == plain and report["cased"] == plain_report["cased"]
    assert report["generation"]["rerank_weight"] == 0.0 and heavy_report["generation"]["rerank_weight"] == 5.0
    nbest = translate_nbest(first, tokenizer, SOURCES, num_beams=3, **settings)
    assert reranked == rerank(nbest, reverse_scores(nbest, SOURCES, [reverse], show_progress=False), 5.0)


def test_selection_chooses_the_weight_and_the_test_decoding_uses_it(
    tiny_model_dir, second_dir, corpus_path, tmp_path
):
    common = {"dataset": corpus_path, "source_lang": "de", "target_lang": "en", "max_sentences": 3}
    selection = select_on_validation(
        [tiny_model_dir],
        output_dir=tmp_path,
        num_beams=[2],
        rerank_with=[second_dir],
        rerank_weights=[0.0, 1.0],
        device="cpu",
        **common,
    )
    assert [row["rerank_weight"] for row in selection["validation"]] == [0.0, 1.0]
    assert selection["rerank_with"] == [str(second_dir)]
    test_report = json.loads((tmp_path / "test.de-en.json").read_text())
    assert test_report["rerank_with"] == [str(second_dir)]
    assert test_report["generation"]["rerank_weight"] == selection["chosen"]["rerank_weight"]
    assert test_report["cased"]["bleu"] == selection["reports"]["test"]["cased"]["bleu"]


def test_select_script_names_a_reranking_model_that_does_not_load(tiny_model_dir, corpus_path, tmp_path):
    missing = tmp_path / "no-such-model"
    completed = subprocess.run(
        [
            sys.executable,
            str(SCRIPTS / "select_checkpoint.py"),
            str(tiny_model_dir),
            "--rerank-with",
            str(missing),
        ]
        + [
            "--dataset",
            corpus_path,
            "--max-sentences",
            "2",
            "--device",
            "cpu",
            "--output-dir",
            str(tmp_path),
        ],
        capture_output=True,
        text=True,
    )
    assert completed.returncode == 1
    assert completed.stderr.splitlines()[-1].startswith(f"error: reranking model {missing}: ")
    assert "Traceback" not in completed.stderr and not (tmp_path / "selection.json").exists()
