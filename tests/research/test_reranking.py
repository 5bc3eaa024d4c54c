"""Reranking beam search's n-best list with models of the reverse direction (noisy-channel reranking) and
right-to-left models."""

import json

import pytest
import torch
from conftest import DE_EN, run_script
from test_ensemble import SOURCES
from transformers import pipeline

from hf_vanilla.checkpoints.loading import load_model_and_tokenizer
from hf_vanilla.evaluation.scoring import Runtime, TranslationData, evaluate_translation
from hf_vanilla.evaluation.selection import SelectionGrid, select_on_validation
from hf_vanilla.model.decoding import DecodingOptions, reverse_words
from hf_vanilla.research.decoders import ResearchDecoder, ResearchModels, load_research_decoder
from hf_vanilla.research.ensemble import ensemble_logits_processors
from hf_vanilla.research.language_model import load_language_models, sentence_log_probs
from hf_vanilla.research.reranking import (
    LANGUAGE_MODEL_WEIGHT,
    REVERSE_WEIGHT,
    RIGHT_TO_LEFT_WEIGHT,
    WORD_BONUS,
    RerankingModels,
    conditional_log_probs,
    language_model_scores,
    load_reranking_models,
    rerank,
    reranking_features,
    reranking_weights,
    reverse_scores,
    right_to_left_scores,
    translate_reranked,
    weight_grid,
    word_counts,
)
from hf_vanilla.translation.decoding import QUIET, translate_nbest, translate_sentences
from hf_vanilla.translation.engines import EngineSettings, TransformersEngine

# A sentence's log-probability is a float32 sum of ~50 terms: batched with other sentences or alone, on CPUs
# with other kernels, it agrees to a few parts in ten million (1.9e-5 of -57.3 seen on an AVX512 Xeon), not to
# an absolute 1e-5.
FLOAT32_SUM = 1e-6
REFERENCES = ["A man rides a bike.", "Two dogs play in the snow.", "Nothing.", "Children."]


@pytest.fixture(scope="module")
def reverse(second, tokenizer):
    """`second` standing for a model of the other direction, with its tokenizer."""
    return second, tokenizer


def test_nbest_lists_start_with_beam_searchs_translation_and_fall_in_score(first, tokenizer):
    settings = {"length_penalty": 1.0, "max_new_tokens": 8, "batching": QUIET}
    nbest = translate_nbest(first, tokenizer, SOURCES, num_beams=3, **settings)
    chosen = translate_sentences(first, tokenizer, SOURCES, num_beams=3, **settings)
    assert [hypotheses[0][0] for hypotheses in nbest] == chosen
    assert nbest[2] == [("", 0.0)]  # a blank source is not decoded
    for index in (0, 1, 3):
        scores = [score for _, score in nbest[index]]
        assert len(scores) == 3 and scores == sorted(scores, reverse=True)
    greedy = translate_sentences(
        first, tokenizer, SOURCES, num_beams=1, max_new_tokens=8, batching=QUIET
    )
    one_best = translate_nbest(first, tokenizer, SOURCES, num_beams=1, max_new_tokens=8, batching=QUIET)
    assert one_best == [[(translation, 0.0)] for translation in greedy]


def test_conditional_log_probs_are_the_models_per_token_log_likelihood(reverse, tokenizer):
    model, _ = reverse
    sources, translations = (
        ["Ein Mann fährt Fahrrad.", "Kinder."],
        ["A man rides a bike.", "Children playing."],
    )
    scores = conditional_log_probs(model, tokenizer, sources, translations)
    for source, translation, score in zip(sources, translations, scores, strict=True):
        encoded = tokenizer(text=translation, text_target=source, return_tensors="pt")
        with torch.inference_mode():
            loss = model(**encoded).loss  # plain cross-entropy, averaged over the source's tokens
        assert score == pytest.approx(-loss.item(), abs=1e-4)
    # batched with others of other lengths (padding), a pair scores as it does alone
    assert conditional_log_probs(model, tokenizer, sources[1:], translations[1:]) == pytest.approx(
        scores[1:], abs=1e-4
    )


def test_reverse_scores_average_the_reverse_models_and_skip_blank_sources(first, reverse, tokenizer):
    nbest = translate_nbest(first, tokenizer, SOURCES, num_beams=2, max_new_tokens=8, batching=QUIET)
    alone = reverse_scores(nbest, SOURCES, [reverse], show_progress=False)
    other = reverse_scores(nbest, SOURCES, [(first, tokenizer)], show_progress=False)
    both = reverse_scores(nbest, SOURCES, [reverse, (first, tokenizer)], show_progress=False)
    assert alone[2] == [0.0]
    for index in (0, 1, 3):
        assert both[index] == pytest.approx(
            [(a + b) / 2 for a, b in zip(alone[index], other[index], strict=True)], rel=FLOAT32_SUM, abs=1e-5
        )
    with pytest.raises(ValueError, match="at least one model of the reverse direction"):
        reverse_scores(nbest, SOURCES, [])


def test_right_to_left_scores_read_each_translations_words_reversed(first, second, tokenizer):
    nbest = translate_nbest(first, tokenizer, SOURCES, num_beams=2, max_new_tokens=8, batching=QUIET)
    scores = right_to_left_scores(nbest, SOURCES, [(second, tokenizer)], show_progress=False)
    assert scores[2] == [0.0]  # a blank source
    for index in (0, 1, 3):
        translations = [reverse_words(translation) for translation, _ in nbest[index]]
        expected = conditional_log_probs(
            second, tokenizer, translations, [SOURCES[index]] * len(translations)
        )
        assert scores[index] == pytest.approx(expected, rel=FLOAT32_SUM, abs=1e-5)
    features = reranking_features(
        nbest, SOURCES, RerankingModels(right_to_left=[(second, tokenizer)]), show_progress=False
    )
    assert list(features) == [RIGHT_TO_LEFT_WEIGHT] and features[RIGHT_TO_LEFT_WEIGHT] == scores
    with pytest.raises(
        ValueError, match="models of the reverse direction, right-to-left models or language models"
    ):
        reranking_features(nbest, SOURCES, RerankingModels())


def test_rerank_weighs_each_feature_against_beam_searchs_score():
    nbest = [[("beam's choice", -0.1), ("explains the source", -0.5)], [("only one", -0.3)]]
    reverse = {REVERSE_WEIGHT: [[-2.0, -1.0], [-4.0]]}
    assert rerank(nbest, reverse, {REVERSE_WEIGHT: 0.0}) == ["beam's choice", "only one"]
    assert rerank(nbest, reverse, {REVERSE_WEIGHT: 0.3}) == ["beam's choice", "only one"]  # -0.7 against -0.8
    assert rerank(nbest, reverse, {REVERSE_WEIGHT: 0.5}) == ["explains the source", "only one"]  # -1.1, -1.0
    assert rerank([[("a", -1.0), ("b", -1.0)]], {REVERSE_WEIGHT: [[-1.0, -1.0]]}, {REVERSE_WEIGHT: 1.0}) == [
        "a"
    ]
    both = {**reverse, RIGHT_TO_LEFT_WEIGHT: [[-0.2, -2.0], [-1.0]]}
    # 0.5 reverse alone prefers the second (-1.0 against -1.1); right to left at 0.1 tips it back (-1.2,
    # -1.12)
    assert rerank(nbest, both, {REVERSE_WEIGHT: 0.5, RIGHT_TO_LEFT_WEIGHT: 0.0})[0] == "explains the source"
    assert rerank(nbest, both, {REVERSE_WEIGHT: 0.5, RIGHT_TO_LEFT_WEIGHT: 0.1})[0] == "beam's choice"
    with pytest.raises(ValueError, match="at least 0"):
        rerank(nbest, reverse, {REVERSE_WEIGHT: -1.0})
    with pytest.raises(ValueError, match="do not name the features"):
        rerank(nbest, both, {REVERSE_WEIGHT: 0.5})


def test_a_word_bonus_favours_longer_translations_and_a_penalty_shorter_ones():
    nbest = [[("a dog", -0.1), ("a dog runs fast", -0.3)], [("", 0.0)]]
    assert word_counts(nbest) == [[2.0, 4.0], [0.0]]
    features = {REVERSE_WEIGHT: [[-1.0, -1.0], [0.0]], WORD_BONUS: word_counts(nbest)}
    # per word 0.05: -0.1 + 0.1 against -0.3 + 0.2; per word 0.2: 0.3 against 0.5
    assert rerank(nbest, features, {REVERSE_WEIGHT: 0.0, WORD_BONUS: 0.05})[0] == "a dog"
    assert rerank(nbest, features, {REVERSE_WEIGHT: 0.0, WORD_BONUS: 0.2})[0] == "a dog runs fast"
    assert rerank(nbest, features, {REVERSE_WEIGHT: 0.0, WORD_BONUS: -0.2}) == [
        "a dog",
        "",
    ]  # a penalty is allowed


def test_a_language_model_reranks_by_how_likely_each_translation_reads(first, tokenizer, language_model_dir):
    language_models = load_language_models([language_model_dir], "cpu")
    settings = {"length_penalty": 1.0, "max_new_tokens": 8}
    nbest = translate_nbest(first, tokenizer, SOURCES, num_beams=3, batching=QUIET, **settings)
    scores = language_model_scores(nbest, SOURCES, language_models, show_progress=False)
    assert scores[2] == [0.0]  # a blank source
    ((model, lm_tokenizer),) = language_models
    assert scores[0] == sentence_log_probs(model, lm_tokenizer, [text for text, _ in nbest[0]], 4096)
    weightings = [
        {LANGUAGE_MODEL_WEIGHT: 0.0, WORD_BONUS: 0.0},
        {LANGUAGE_MODEL_WEIGHT: 5.0, WORD_BONUS: 0.1},
    ]
    unchanged, reranked = translate_reranked(
        TransformersEngine(first, tokenizer),
        SOURCES,
        weightings,
        RerankingModels(language=language_models),
        DecodingOptions(num_beams=3, **settings),
        QUIET,
    )
    assert unchanged == [hypotheses[0][0] for hypotheses in nbest]
    features = {LANGUAGE_MODEL_WEIGHT: scores, WORD_BONUS: word_counts(nbest)}
    assert reranked == rerank(nbest, features, weightings[1])


def test_a_word_bonus_without_a_reranking_model_is_refused():
    assert reranking_weights(["reverse"], 0.3, [], 0.2, 0.1) == {REVERSE_WEIGHT: 0.3, WORD_BONUS: 0.1}
    assert reranking_weights([], 0.3, [], 0.2) == {}
    assert reranking_weights([], 0.3, [], 0.2, 0.1, ["lm"], 0.5) == {
        LANGUAGE_MODEL_WEIGHT: 0.5,
        WORD_BONUS: 0.1,
    }
    with pytest.raises(ValueError, match="--rerank-with.*--rerank-right-to-left.*--rerank-language-model"):
        reranking_weights([], 0.3, [], 0.2, 0.1)


def test_weight_grid_is_every_combination_the_last_name_fastest():
    assert weight_grid({REVERSE_WEIGHT: (0.0, 0.5), RIGHT_TO_LEFT_WEIGHT: (0.0, 1.0)}) == [
        {REVERSE_WEIGHT: 0.0, RIGHT_TO_LEFT_WEIGHT: 0.0},
        {REVERSE_WEIGHT: 0.0, RIGHT_TO_LEFT_WEIGHT: 1.0},
        {REVERSE_WEIGHT: 0.5, RIGHT_TO_LEFT_WEIGHT: 0.0},
        {REVERSE_WEIGHT: 0.5, RIGHT_TO_LEFT_WEIGHT: 1.0},
    ]
    assert weight_grid({REVERSE_WEIGHT: (0.3,)}) == [{REVERSE_WEIGHT: 0.3}]


def test_reranking_with_weight_zero_scores_as_beam_search(first, reverse, tokenizer):
    settings = {"length_penalty": 1.0, "max_new_tokens": 8}
    quiet = Runtime(show_progress=False)
    engine = TransformersEngine(first, tokenizer)
    (beam_search,) = evaluate_translation(engine, SOURCES, REFERENCES, runtime=quiet, num_beams=3, **settings)
    plain, plain_report = beam_search.translations, beam_search.report
    rerankers = RerankingModels(reverse=[reverse], right_to_left=[reverse])
    weights = {REVERSE_WEIGHT: [0.0, 5.0], RIGHT_TO_LEFT_WEIGHT: [0.0, 1.0], WORD_BONUS: [0.0, 0.1]}
    decoder = ResearchDecoder(rerankers=rerankers, weights=weights)
    evaluated = evaluate_translation(
        engine, SOURCES, REFERENCES, runtime=quiet, decoder=decoder, num_beams=3, **settings
    )
    assert len(evaluated) == 8  # every combination of the weights, the last weight varying fastest
    lightest, heaviest = evaluated[0], evaluated[-1]
    unchanged_settings, unchanged, report = lightest.settings, lightest.translations, lightest.report
    heavy, reranked, heavy_report = heaviest.settings, heaviest.translations, heaviest.report
    assert unchanged == plain and report["cased"] == plain_report["cased"]
    assert unchanged_settings == {
        "num_beams": 3,
        **settings,
        REVERSE_WEIGHT: 0.0,
        RIGHT_TO_LEFT_WEIGHT: 0.0,
        WORD_BONUS: 0.0,
    }
    assert report["generation"][REVERSE_WEIGHT] == 0.0 and heavy_report["generation"][REVERSE_WEIGHT] == 5.0
    assert (
        heavy_report["generation"][RIGHT_TO_LEFT_WEIGHT] == 1.0
        and heavy_report["generation"][WORD_BONUS] == 0.1
    )
    nbest = translate_nbest(first, tokenizer, SOURCES, num_beams=3, batching=QUIET, **settings)
    features = reranking_features(nbest, SOURCES, rerankers, show_progress=False)
    weighting = {name: heavy[name] for name in weights}
    assert reranked == rerank(nbest, {**features, WORD_BONUS: word_counts(nbest)}, weighting)
    # A variant's settings, passed back in, decode that variant alone.
    (decoded_again,) = evaluate_translation(
        engine, SOURCES, REFERENCES, runtime=quiet, decoder=decoder, **heavy
    )
    again, rerun = decoded_again.settings, decoded_again.translations
    assert (again, rerun) == (heavy, reranked)


def test_selection_chooses_the_weights_and_the_test_decoding_uses_them(
    tiny_model_dir, second_dir, right_to_left_dir, language_model_dir, corpus_path, tmp_path
):
    models = ResearchModels(
        rerank_with=[second_dir],
        rerank_right_to_left=[right_to_left_dir],
        rerank_language_model=[language_model_dir],
    )
    weights = {
        REVERSE_WEIGHT: [0.0, 1.0],
        RIGHT_TO_LEFT_WEIGHT: [0.0, 0.5],
        LANGUAGE_MODEL_WEIGHT: [0.0, 2.0],
        WORD_BONUS: [0.0, 0.2],
    }
    selection = select_on_validation(
        [tiny_model_dir],
        TranslationData(corpus_path, "de", "en", max_sentences=3),
        tmp_path,
        SelectionGrid(num_beams=[2]),
        Runtime(EngineSettings(device="cpu")),
        decoder=load_research_decoder(models, weights, device="cpu"),
    )
    names = (REVERSE_WEIGHT, RIGHT_TO_LEFT_WEIGHT, LANGUAGE_MODEL_WEIGHT, WORD_BONUS)
    grid = [tuple(row[name] for name in names) for row in selection["validation"]]
    assert grid == [
        (reverse, r2l, lm, words)
        for reverse in (0.0, 1.0)
        for r2l in (0.0, 0.5)
        for lm in (0.0, 2.0)
        for words in (0.0, 0.2)
    ]
    assert selection["rerank_with"] == [str(second_dir)]
    assert selection["rerank_right_to_left"] == [str(right_to_left_dir)]
    test_report = json.loads((tmp_path / "test.de-en.json").read_text())
    assert test_report["rerank_with"] == [str(second_dir)]
    assert test_report["rerank_right_to_left"] == [str(right_to_left_dir)]
    assert (
        selection["rerank_language_model"]
        == test_report["rerank_language_model"]
        == [str(language_model_dir)]
    )
    for name in names:
        assert test_report["generation"][name] == selection["chosen"][name]
    assert test_report["cased"]["bleu"] == selection["reports"]["test"]["cased"]["bleu"]


def test_select_script_names_a_reranking_model_that_does_not_load(tiny_model_dir, corpus_path, tmp_path):
    missing = tmp_path / "no-such-model"
    completed = run_script(
        "select_checkpoint.py", tiny_model_dir, "--rerank-with", missing, "--dataset", corpus_path, *DE_EN,
        "--first-pairs", "2", "--device", "cpu", "--output-dir", tmp_path,
    )  # fmt: skip
    assert completed.returncode == 1
    assert completed.stderr.splitlines()[-1].startswith(f"error: reranking model {missing}: ")
    assert "Traceback" not in completed.stderr and not (tmp_path / "selection.json").exists()


def test_select_script_prints_a_column_for_each_kind_of_reranking_weight(
    tiny_model_dir, second_dir, right_to_left_dir, language_model_dir, corpus_path, tmp_path
):
    completed = run_script(
        "select_checkpoint.py", tiny_model_dir, "--rerank-with", second_dir, "--rerank-weight", "0", "1",
        "--rerank-right-to-left", right_to_left_dir, "--right-to-left-weight", "0", "0.5",
        "--rerank-language-model", language_model_dir, "--language-model-weight", "0.5",
        "--word-bonus", "-0.1", "0.1",
        "--num-beams", "2", "--report-split", "--dataset", corpus_path, *DE_EN, "--first-pairs", "2",
        "--device", "cpu", "--output-dir", tmp_path,
    )  # fmt: skip
    assert completed.returncode == 0, completed.stderr
    lines = completed.stdout.splitlines()
    assert lines[1].split()[5:10] == ["rerank", "r2l", "lm", "words", "model"]
    rows = [line.split() for line in lines[2:10]]
    assert [tuple(row[5:9]) for row in rows] == [
        (reverse, r2l, "0.5", words)
        for reverse in ("0.0", "1.0")
        for r2l in ("0.0", "0.5")
        for words in ("-0.1", "0.1")
    ]


def test_translate_script_reranks_as_the_library_does(
    second_dir, tiny_model_dir, right_to_left_dir, tmp_path
):
    source_file = tmp_path / "sources.de"
    source_file.write_text("".join(f"{line}\n" for line in SOURCES))

    def run(*reranking):
        return run_script(
            "translate.py", second_dir, "--input", source_file, "--num-beams", "3", "--max-new-tokens", "8",
            "--device", "cpu", "--quiet", *reranking,
        )  # fmt: skip

    def translate(*reranking):
        completed = run(*reranking)
        assert completed.returncode == 0, completed.stderr
        return completed.stdout.splitlines()

    plain = translate()
    assert translate("--rerank-with", tiny_model_dir, "--rerank-weight", 0) == plain
    weights = {REVERSE_WEIGHT: 5.0, RIGHT_TO_LEFT_WEIGHT: 1.0, WORD_BONUS: 0.1}
    reranked = translate(
        "--rerank-with", tiny_model_dir, "--rerank-right-to-left", right_to_left_dir, "--rerank-weight", 5,
        "--right-to-left-weight", 1, "--word-bonus", 0.1,
    )  # fmt: skip
    model, tokenizer = load_model_and_tokenizer(second_dir, "cpu")
    reranking = load_reranking_models([tiny_model_dir], [right_to_left_dir], "cpu", "float32")
    (expected,) = translate_reranked(
        TransformersEngine(model, tokenizer),
        SOURCES,
        [weights],
        reranking,
        DecodingOptions(num_beams=3, max_new_tokens=8, length_penalty=0.6),
    )
    assert reranked == expected and len(reranked) == len(SOURCES) and reranked[2] == ""
    alone = run("--word-bonus", 0.1)
    assert alone.returncode == 1 and alone.stderr.startswith("error: a word bonus weighs the translations")


def test_a_right_to_left_model_translates_in_reading_order(second, right_to_left_dir, tokenizer):
    """The same weights marked right to left: every translation and n-best entry comes back with its words put
    back in reading order, through our helpers and the pipeline."""
    right_to_left, _ = load_model_and_tokenizer(right_to_left_dir, "cpu")
    options = {"max_new_tokens": 8, "batching": QUIET}
    as_written = translate_sentences(second, tokenizer, SOURCES, num_beams=2, **options)
    assert any(len(text.split()) > 1 for text in as_written)  # else the order could not show
    read = translate_sentences(right_to_left, tokenizer, SOURCES, num_beams=2, **options)
    assert read == [reverse_words(text) for text in as_written]
    nbest = translate_nbest(right_to_left, tokenizer, SOURCES, num_beams=2, **options)
    written_nbest = translate_nbest(second, tokenizer, SOURCES, num_beams=2, **options)
    assert nbest == [[(reverse_words(text), score) for text, score in entries] for entries in written_nbest]
    translator = pipeline("vanilla-translation", model=str(right_to_left_dir), device="cpu", num_beams=2)
    outputs = translator([source for source in SOURCES if source.strip()], max_new_tokens=8)
    assert [output["translation_text"] for output in outputs] == [text for text in read if text]


def test_an_ensemble_and_the_reranking_roles_refuse_the_other_word_order(
    second, second_dir, right_to_left_dir, tokenizer
):
    right_to_left, _ = load_model_and_tokenizer(right_to_left_dir, "cpu")
    with pytest.raises(
        ValueError, match="ensemble member 1 writes right to left, the first model left to right"
    ):
        ensemble_logits_processors(second, tokenizer, [right_to_left])
    with pytest.raises(ValueError, match=f"reranking model {right_to_left_dir} writes right to left"):
        load_reranking_models([right_to_left_dir], [], "cpu", "float32")
    with pytest.raises(ValueError, match=f"right-to-left model {second_dir} was not trained right to left"):
        load_reranking_models([], [second_dir], "cpu", "float32")
