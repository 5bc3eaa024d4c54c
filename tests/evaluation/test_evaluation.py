import json
import shutil
import sys
from types import SimpleNamespace

import pytest
import sacrebleu
import torch
from conftest import DE_EN, run_script, with_another_vocabulary_of_the_same_size, with_truncated_weights
from huggingface_hub import ModelCard
from synthetic_corpus import SPLIT_SIZES
from transformers import AutoModelForSeq2SeqLM, AutoTokenizer, GenerationConfig

from hf_vanilla.checkpoints.cards import CARD_FILE, RunRecord, model_card, save_card, set_decoding_defaults
from hf_vanilla.checkpoints.loading import load_model_and_tokenizer
from hf_vanilla.checkpoints.tokenizer_directory import save_tokenizer
from hf_vanilla.data.corpus import load_translation_split
from hf_vanilla.evaluation import scoring as scoring_module
from hf_vanilla.evaluation.paper_bleu import PAPER_BLEU_KEY, PAPER_BLEU_NAME
from hf_vanilla.evaluation.scoring import (
    Runtime,
    ScoreOptions,
    TranslationData,
    evaluate_bleu,
    evaluate_translation,
    score_tokenized_lowercased,
    score_translations,
)
from hf_vanilla.evaluation.selection import SelectionGrid, select_on_validation
from hf_vanilla.model.decoding import DecodingOptions, cut_source
from hf_vanilla.translation.decoding import (
    Batching,
    read_lines,
    translate_nbest,
    translate_sentences,
    write_lines_atomic,
)
from hf_vanilla.translation.engines import TransformersEngine

QUIET = Runtime(show_progress=False)


@pytest.fixture(scope="module")
def tiny_model_and_tokenizer(tiny_model_dir):
    return AutoModelForSeq2SeqLM.from_pretrained(tiny_model_dir), AutoTokenizer.from_pretrained(
        tiny_model_dir
    )


class EchoModel:
    """Stands in for a model: "translates" each sentence into itself and records the generate calls."""

    def __init__(self):
        self.config = SimpleNamespace(max_position_embeddings=1024)
        self.generation_config = GenerationConfig()
        self.device = torch.device("cpu")
        self.training = True
        self.calls = []

    def eval(self):
        self.training = False

    def train(self, mode=True):
        self.training = mode

    def generate(self, input_ids, attention_mask, **kwargs):
        self.calls.append(
            {"batch_size": len(input_ids), "longest": int(attention_mask.sum(1).max()), **kwargs}
        )
        return input_ids


SOURCES = [
    "Ein Mann fährt Fahrrad.",
    "",
    "Zwei Hunde spielen im Schnee, während ein kleines Kind auf einer Bank sitzt und zuschaut.",
    "Kinder.",
    "   ",
    "Eine Frau mit rotem Hut verkauft Blumen auf dem Markt.",
]


def test_translations_come_back_in_input_order_with_blank_lines_blank(tiny_model_and_tokenizer):
    _, tokenizer = tiny_model_and_tokenizer
    echo = EchoModel()
    translations = translate_sentences(echo, tokenizer, SOURCES, batching=Batching(40, show_progress=False))
    assert translations == [source if source.strip() else "" for source in SOURCES]
    assert sum(call["batch_size"] for call in echo.calls) == 4
    assert len(echo.calls) > 1  # the token budget split the sentences into several batches
    assert echo.training  # the caller's mode is restored


def test_batches_are_length_sorted_within_the_token_budget_with_paper_output_length(tiny_model_and_tokenizer):
    _, tokenizer = tiny_model_and_tokenizer
    echo = EchoModel()
    translate_sentences(echo, tokenizer, SOURCES, batching=Batching(40, show_progress=False), num_beams=4)
    longest = [call["longest"] for call in echo.calls]
    assert longest == sorted(longest)
    for call in echo.calls:
        assert call["batch_size"] * call["longest"] <= 40 or call["batch_size"] == 1
        assert call["max_new_tokens"] == call["longest"] + 50
        assert call["num_beams"] == 4


def test_explicit_max_new_tokens_wins(tiny_model_and_tokenizer):
    _, tokenizer = tiny_model_and_tokenizer
    echo = EchoModel()
    translate_sentences(echo, tokenizer, SOURCES, batching=QUIET.batching, max_new_tokens=7)
    assert {call["max_new_tokens"] for call in echo.calls} == {7}


def test_an_explicit_output_limit_beyond_the_decoders_positions_is_refused_before_decoding(
    tiny_model_and_tokenizer,
):
    _, tokenizer = tiny_model_and_tokenizer
    echo = EchoModel()
    room = echo.config.max_position_embeddings - 1
    with pytest.raises(ValueError, match=f"max_new_tokens={room + 1} is more than .* at most {room}"):
        translate_sentences(echo, tokenizer, SOURCES, batching=QUIET.batching, max_new_tokens=room + 1)
    assert echo.calls == []
    translate_sentences(echo, tokenizer, SOURCES, batching=QUIET.batching, max_new_tokens=room)
    assert {call["max_new_tokens"] for call in echo.calls} == {room}


@pytest.mark.parametrize("num_beams", [1, 3])
def test_each_sentence_stops_at_its_own_source_length_plus_50_whatever_it_is_batched_with(
    tiny_model_and_tokenizer, num_beams, monkeypatch
):
    model, tokenizer = tiny_model_and_tokenizer  # untrained: it runs to the limit
    short, long = SOURCES[3], SOURCES[2]
    generated_lengths = []
    unrecorded_generate = model.generate

    def recording_generate(**kwargs):
        # Counted from the ids: an untrained model's random bytes need not encode back to as many tokens.
        outputs = unrecorded_generate(**kwargs)
        special = set(tokenizer.all_special_ids)  # start, end and the padding of rows that ended early
        generated_lengths.extend(sum(token not in special for token in row) for row in outputs.tolist())
        return outputs

    monkeypatch.setattr(model, "generate", recording_generate)
    batched = translate_sentences(
        model, tokenizer, [short, long], batching=QUIET.batching, num_beams=num_beams
    )
    alone = [
        translate_sentences(model, tokenizer, [source], batching=QUIET.batching, num_beams=num_beams)[0]
        for source in (short, long)
    ]
    assert batched == alone
    batched_lengths = generated_lengths[:2]
    assert batched_lengths == generated_lengths[2:]
    assert batched_lengths[0] < batched_lengths[1] <= len(tokenizer(long)["input_ids"]) + 50


def test_real_model_batched_greedy_equals_one_by_one(tiny_model_and_tokenizer):
    model, tokenizer = tiny_model_and_tokenizer
    batched = translate_sentences(model, tokenizer, SOURCES, batching=QUIET.batching, max_new_tokens=12)
    one_by_one = [
        translate_sentences(model, tokenizer, [source], batching=QUIET.batching, max_new_tokens=12)[0]
        for source in SOURCES
    ]
    assert batched == one_by_one
    assert batched[1] == batched[4] == ""
    assert all(batched[index] for index in (0, 2, 3, 5))


HYPOTHESES = ["The dog bit the man.", "It wasn't surprising.", "The man had just bitten him."]
REFERENCES = ["The dog bit the man.", "It was not unexpected.", "The man bit him first."]


def test_the_transformers_engine_decodes_as_translate_sentences_and_translate_nbest(tiny_model_and_tokenizer):
    model, tokenizer = tiny_model_and_tokenizer
    engine = TransformersEngine(model, tokenizer)
    options = DecodingOptions(num_beams=2, length_penalty=0.6, max_new_tokens=6)
    assert engine.translate(SOURCES, options) == translate_sentences(model, tokenizer, SOURCES, options)
    assert engine.translate_nbest(SOURCES, options) == translate_nbest(model, tokenizer, SOURCES, 2, options)
    long_line = " ".join(["Hund"] * 2 * model.config.max_position_embeddings)
    [long_ids, short_ids] = engine.encode([long_line, "Kinder."])
    assert len(long_ids) > engine.max_source_tokens == model.config.max_position_embeddings
    assert short_ids == tokenizer("Kinder.")["input_ids"]
    cut = tokenizer(long_line, truncation=True, max_length=engine.max_source_tokens)["input_ids"]
    assert cut_source(long_ids, engine.max_source_tokens) == cut  # as the tokenizer's truncation cuts


def test_scores_equal_sacrebleu_own():
    scores = score_translations(HYPOTHESES, REFERENCES, ter=True)
    assert scores["bleu"] == pytest.approx(sacrebleu.corpus_bleu(HYPOTHESES, [REFERENCES]).score)
    assert scores["chrf"] == pytest.approx(sacrebleu.corpus_chrf(HYPOTHESES, [REFERENCES]).score)
    assert scores["ter"] == pytest.approx(sacrebleu.corpus_ter(HYPOTHESES, [REFERENCES]).score)
    assert 0 < scores["bleu"] < 100
    assert scores["bleu_signature"].startswith("nrefs:1|case:mixed|eff:no|tok:13a|smooth:exp|version:")
    assert "case:mixed" in scores["chrf_signature"]


def test_lowercase_ignores_case():
    shouted = [hypothesis.upper() for hypothesis in REFERENCES]
    assert score_translations(shouted, REFERENCES)["bleu"] < 10
    lowercased = score_translations(shouted, REFERENCES, lowercase=True)
    assert lowercased["bleu"] == pytest.approx(100.0)
    assert "case:lc" in lowercased["bleu_signature"]
    assert "ter" not in lowercased


def test_tokenized_bleu_scores_lowercased_moses_tokens():
    """The papers' tokenized BLEU: lowercase, Moses tokens (English clitics split, hyphens kept), then
    BLEU."""
    hypotheses = ["A man's T-shirt, isn't it?", "Two dogs run."]
    references = ["The man's T-shirt, isn't it?", "Two dogs are running."]
    by_hand = (
        ["a man 's t-shirt , isn 't it ?", "two dogs run ."],
        ["the man 's t-shirt , isn 't it ?", "two dogs are running ."],
    )
    scores = score_tokenized_lowercased(hypotheses, references, "en")
    assert scores["bleu"] == pytest.approx(
        sacrebleu.corpus_bleu(by_hand[0], [by_hand[1]], tokenize="none").score
    )
    assert scores["bleu"] != pytest.approx(score_translations(hypotheses, references, lowercase=True)["bleu"])
    assert "case:lc" in scores["bleu_signature"] and "tok:none" in scores["bleu_signature"]
    assert "pretok:moses-sacremoses-" in scores["bleu_signature"]


@pytest.mark.parametrize(
    ("hypotheses", "references", "message"),
    [(["a", "b"], ["a"], "2 hypotheses but 1 references"), ([], [], "no references")],
)
def test_scoring_rejects_bad_input(hypotheses, references, message):
    with pytest.raises(ValueError, match=message):
        score_translations(hypotheses, references)


def test_evaluate_bleu_writes_hypotheses_and_report_with_paper_beam_search(
    tiny_model_dir, corpus_path, tmp_path
):
    report = evaluate_bleu(
        tiny_model_dir,
        TranslationData(corpus_path, "de", "en", max_sentences=6),
        tmp_path,
        split="validation",
        runtime=QUIET,
        options=DecodingOptions(max_new_tokens=6),
    )
    hypotheses = read_lines(tmp_path / "validation.de-en.hyp")
    assert json.loads((tmp_path / "validation.de-en.json").read_text()) == report
    pairs = load_translation_split(corpus_path, "de", "en", "validation").select(range(6))
    model, tokenizer = load_model_and_tokenizer(tiny_model_dir)
    assert hypotheses == translate_sentences(
        model,
        tokenizer,
        pairs["source"],
        batching=QUIET.batching,
        num_beams=4,
        length_penalty=0.6,
        max_new_tokens=6,
    )
    assert report["generation"]["num_beams"] == 4 and report["generation"]["length_penalty"] == 0.6
    assert report["cased"]["bleu"] == pytest.approx(
        sacrebleu.corpus_bleu(hypotheses, [pairs["target"]]).score
    )
    assert "case:lc" in report["lowercased"]["bleu_signature"]
    assert (report["model"], report["dataset"], report["split"], report["sentences"]) == (
        str(tiny_model_dir),
        corpus_path,
        "validation",
        6,
    )
    assert report["sentences_per_second"] > 0
    assert sorted(path.name for path in tmp_path.iterdir()) == [
        "validation.de-en.hyp",
        "validation.de-en.json",
    ]


def test_blank_sources_become_blank_hypotheses_and_are_counted(tiny_model_and_tokenizer, caplog):
    model, tokenizer = tiny_model_and_tokenizer
    (evaluated,) = evaluate_translation(
        TransformersEngine(model, tokenizer),
        ["Ein Hund.", " "],
        ["A dog.", "Nothing."],
        runtime=QUIET,
        max_new_tokens=3,
    )
    hypotheses, report = evaluated.translations, evaluated.report
    assert hypotheses[1] == "" and report["blank_sources"] == 1
    assert "1 of 2 source lines are blank" in caplog.text


@pytest.mark.parametrize(
    ("sources", "references", "message"),
    [
        (["Ein Hund.", "Zwei."], ["A dog.", None], "1 of 2 references are missing or blank .first at line 2"),
        (["Ein Hund."], [""], "references are missing or blank"),
        ([], [], "no sentences"),
    ],
)
def test_evaluation_rejects_missing_references(tiny_model_and_tokenizer, sources, references, message):
    model, tokenizer = tiny_model_and_tokenizer
    with pytest.raises(ValueError, match=message):
        evaluate_translation(TransformersEngine(model, tokenizer), sources, references, runtime=QUIET)


def test_unknown_language_is_named(tiny_model_dir, corpus_path, tmp_path):
    with pytest.raises(ValueError, match="Language 'xx' not in dataset"):
        evaluate_bleu(tiny_model_dir, TranslationData(corpus_path, "de", "xx"), tmp_path, runtime=QUIET)
    assert not any(tmp_path.iterdir())


def test_loading_rejects_a_tokenizer_that_does_not_match_the_model(tiny_model_dir, tmp_path):
    model, tokenizer = (
        AutoModelForSeq2SeqLM.from_pretrained(tiny_model_dir),
        AutoTokenizer.from_pretrained(tiny_model_dir),
    )
    save_tokenizer(tokenizer, tmp_path)
    model.config.eos_token_id = 3
    model.save_pretrained(tmp_path)
    with pytest.raises(ValueError, match="eos_token_id: tokenizer has 2, model config has 3"):
        load_model_and_tokenizer(tmp_path)
    with pytest.raises(FileNotFoundError, match="cannot load a model and tokenizer"):
        load_model_and_tokenizer(tmp_path / "missing")
    with pytest.raises(ValueError, match="unknown precision 'int8'"):
        load_model_and_tokenizer(tiny_model_dir, dtype="int8")


def test_bfloat16_model_translates_on_cpu(tiny_model_dir):
    model, tokenizer = load_model_and_tokenizer(tiny_model_dir, device="cpu", dtype="bfloat16")
    assert model.dtype == torch.bfloat16
    assert translate_sentences(model, tokenizer, ["Ein Hund."], batching=QUIET.batching, max_new_tokens=3)[0]


def test_lines_round_trip_through_files(tmp_path):
    path = tmp_path / "input.txt"
    path.write_bytes(b"Ein Hund.\r\n\n  \nZwei Katzen.\n")
    assert read_lines(path) == ["Ein Hund.", "", "  ", "Zwei Katzen."]
    path.write_bytes(b"no final line end")
    assert read_lines(path) == ["no final line end"]
    output = tmp_path / "out" / "translations.txt"
    write_lines_atomic(output, ["old"])
    write_lines_atomic(output, ["a", "", "b"])
    assert output.read_text() == "a\n\nb\n"
    assert [item.name for item in output.parent.iterdir()] == ["translations.txt"]  # no temporary file left
    path.write_bytes(b"\xff\xfe broken")
    with pytest.raises(ValueError, match="is not UTF-8 text"):
        read_lines(path)


@pytest.mark.parametrize("cache", ["dynamic", "static"])
def test_translate_script_keeps_lines_in_order(tiny_model_dir, tiny_model_and_tokenizer, cache):
    """With either cache (static: the one generate compiles on a GPU), the dynamic cache's translations."""
    lines = ["Ein Hund rennt.", "", "Zwei Katzen schlafen auf dem Sofa.", "Kinder."]
    completed = run_script(
        "translate.py", tiny_model_dir, "--num-beams", "2", "--max-new-tokens", "4", "--device", "cpu",
        "--quiet", "--cache-implementation", cache, stdin="\n".join(lines) + "\n", check=True,
    )  # fmt: skip
    model, tokenizer = tiny_model_and_tokenizer
    expected = translate_sentences(
        model, tokenizer, lines, batching=QUIET.batching, num_beams=2, max_new_tokens=4
    )
    assert completed.stdout.split("\n") == [*expected, ""]
    assert expected[1] == ""


def test_translate_script_decodes_with_the_checkpoints_saved_beam_unless_told(
    tiny_model_copy, tiny_model_and_tokenizer
):
    set_decoding_defaults(tiny_model_copy, 3, 1.0)
    lines = ["Ein Hund rennt.", "Zwei Katzen schlafen auf dem Sofa.", "Kinder."]
    flags = ("--max-new-tokens", "4", "--device", "cpu", "--quiet")
    completed = run_script("translate.py", tiny_model_copy, *flags, stdin="\n".join(lines) + "\n", check=True)
    model, tokenizer = tiny_model_and_tokenizer
    chosen = translate_sentences(
        model, tokenizer, lines, batching=QUIET.batching, num_beams=3, length_penalty=1.0, max_new_tokens=4
    )
    assert completed.stdout.splitlines() == chosen
    assert (
        "num_beams 3 (checkpoint), length_penalty 1.0 (checkpoint), max_new_tokens 4 (given)"
        in completed.stderr
    )
    refused = run_script("translate.py", tiny_model_copy, *flags, "--nbest", "4", stdin="Ein Hund.\n")
    assert refused.returncode != 0 and "give --num-beams 4 or more" in refused.stderr
    told = run_script(
        "translate.py", tiny_model_copy, *flags, "--num-beams", "1", stdin="Ein Hund.\n", check=True
    )
    assert "num_beams 1 (given), no length_penalty (greedy)" in told.stderr


def test_evaluate_bleu_script_decodes_a_selected_checkpoint_as_selection_did(
    tiny_model_copy, corpus_path, tmp_path
):
    """Selection saves its choice (greedy here, not the paper's 4 / 0.6) into the checkpoint; evaluate_bleu.py
    on it without decoding flags decodes the test split as selection did and reports the same score."""
    data = ("--dataset", corpus_path, *DE_EN, "--first-pairs", "4", "--device", "cpu")
    run_script(
        "select_checkpoint.py", tiny_model_copy, *data, "--num-beams", "1", "2", "--length-penalty", "1.0",
        "--output-dir", tmp_path / "selection", check=True,
    )  # fmt: skip
    selection = json.loads((tmp_path / "selection" / "selection.json").read_text())
    completed = run_script(
        "evaluate_bleu.py", tiny_model_copy, *data, "--output-dir", tmp_path / "again", check=True
    )
    report = json.loads((tmp_path / "again" / "test.de-en.json").read_text())
    chosen = selection["chosen"]
    assert (report["generation"]["num_beams"], report["generation"].get("length_penalty")) == (
        chosen["num_beams"],
        chosen.get("length_penalty"),
    )
    assert report["generation"]["sources"]["num_beams"] == "checkpoint"
    assert f"num_beams {chosen['num_beams']} (checkpoint)" in completed.stderr
    assert read_lines(tmp_path / "again" / "test.de-en.hyp") == read_lines(
        tmp_path / "selection" / "test.de-en.hyp"
    )
    assert report["cased"] == selection["reports"]["test"]["cased"]
    assert f"cased BLEU {report['cased']['bleu']:.2f}" in completed.stdout


@pytest.fixture
def run_dir(tiny_model_dir, tmp_path):
    """A training run directory: best and average hold the tiny model, last holds other weights."""
    run = tmp_path / "run"
    for name in ("checkpoint_best", "checkpoint_last", "checkpoint_average"):
        shutil.copytree(tiny_model_dir, run / name)
    last = AutoModelForSeq2SeqLM.from_pretrained(run / "checkpoint_last")
    with torch.no_grad():
        last.lm_head.weight.mul_(2)
    last.save_pretrained(run / "checkpoint_last")
    return run


def test_selection_takes_the_best_validation_setting_and_decodes_test_with_it_only(
    run_dir, corpus_path, tmp_path, monkeypatch
):
    # An untrained model scores ~0 everywhere: give each (model, beams, penalty) a known validation BLEU.
    # checkpoint_average holds the same weights as checkpoint_best: it is decoded once, as the best.
    decoded = []

    def scripted_evaluation(engine, sources, references, *args, **settings):
        evaluated = evaluate_translation(engine, sources, references, *args, **settings)
        decoded.append(settings)
        is_last = "checkpoint_last" in engine.model.name_or_path
        for scored in evaluated:
            scored.report["cased"]["bleu"] = (
                10 * is_last + settings["num_beams"] - settings.get("length_penalty", 0)
            )
        return evaluated

    # Validation decodes (scoring.score_model) and the test decode (scoring.evaluate_bleu) both go through it.
    monkeypatch.setattr(scoring_module, "evaluate_translation", scripted_evaluation)
    output_dir = tmp_path / "selection"
    selection = select_on_validation(
        [run_dir],
        TranslationData(corpus_path, "de", "en", max_sentences=4),
        output_dir,
        SelectionGrid(num_beams=[1, 2], length_penalties=[0.6, 1.0]),
    )
    settings = [
        (row["model"], row["num_beams"], row.get("length_penalty")) for row in selection["validation"]
    ]
    assert settings == [
        (str(run_dir / name), beams, penalty)
        for name in ("checkpoint_best", "checkpoint_last")
        for beams, penalty in ((1, None), (2, 0.6), (2, 1.0))
    ]
    assert (selection["chosen"]["model"], selection["chosen"]["num_beams"]) == (
        str(run_dir / "checkpoint_last"),
        2,
    )
    assert selection["chosen"]["length_penalty"] == 0.6
    assert len(decoded) == 6 + 1  # six validation decodings, then test with the choice only
    assert {"num_beams": 2, "length_penalty": 0.6}.items() <= decoded[-1].items()
    test_report = json.loads((output_dir / "test.de-en.json").read_text())
    assert (test_report["model"], test_report["sentences"]) == (str(run_dir / "checkpoint_last"), 4)
    assert selection["reports"]["test"]["cased"] == test_report["cased"]
    assert json.loads((output_dir / "selection.json").read_text()) == selection
    saved = {
        name: GenerationConfig.from_pretrained(run_dir / name)
        for name in ("checkpoint_best", "checkpoint_last")
    }
    assert (saved["checkpoint_last"].num_beams, saved["checkpoint_last"].length_penalty) == (2, 0.6)
    assert saved["checkpoint_best"].num_beams is None  # only the chosen checkpoint changes
    assert selection["decoding_defaults_file"] == str(run_dir / "checkpoint_last" / "generation_config.json")


def test_selection_makes_its_choice_what_generate_decodes_with(tiny_model_copy, corpus_path, tmp_path):
    data = TranslationData(corpus_path, "de", "en", max_sentences=3)
    grid = SelectionGrid(num_beams=[3], length_penalties=[1.3], report_splits=())
    select_on_validation([tiny_model_copy], data, tmp_path / "out", grid, QUIET)
    model = AutoModelForSeq2SeqLM.from_pretrained(tiny_model_copy)
    tokenizer = AutoTokenizer.from_pretrained(tiny_model_copy)
    assert (model.generation_config.num_beams, model.generation_config.length_penalty) == (3, 1.3)
    batch = tokenizer(["Ein Hund rennt durch den Schnee."], return_tensors="pt")
    chosen = model.generate(**batch, max_new_tokens=6, num_beams=3, length_penalty=1.3, output_scores=True,
                            return_dict_in_generate=True)  # fmt: skip
    default = model.generate(**batch, max_new_tokens=6, output_scores=True, return_dict_in_generate=True)
    # beam search's scores, with its penalty
    assert torch.equal(default.sequences_scores, chosen.sequences_scores)

    greedy = SelectionGrid(num_beams=[1], report_splits=())
    select_on_validation([tiny_model_copy], data, tmp_path / "out", greedy, QUIET)
    saved = json.loads((tiny_model_copy / "generation_config.json").read_text())
    assert saved["num_beams"] == 1 and "length_penalty" not in saved  # greedy search takes no length penalty


def test_selection_on_the_first_validation_pairs_still_reports_the_whole_test_split(
    tiny_model_copy, corpus_path, tmp_path
):
    data, grid = TranslationData(corpus_path, "de", "en"), SelectionGrid(num_beams=[1], validation_pairs=2)
    selection = select_on_validation([tiny_model_copy], data, tmp_path, grid, QUIET)
    test_report = json.loads((tmp_path / "test.de-en.json").read_text())
    assert (selection["validation_sentences"], test_report["sentences"]) == (2, SPLIT_SIZES["test"])


def test_selection_writes_the_test_scores_into_the_chosen_checkpoints_card(
    tiny_model_copy, corpus_path, tmp_path
):
    model = AutoModelForSeq2SeqLM.from_pretrained(tiny_model_copy)
    run = RunRecord("de", "en", corpus_path, "Trained.", validation={"val_bleu": 1.5})
    save_card(
        model_card(model.config, GenerationConfig(num_beams=4, length_penalty=0.6), run), tiny_model_copy
    )
    data = TranslationData(corpus_path, "de", "en", max_sentences=3)
    select_on_validation([tiny_model_copy], data, tmp_path / "out", SelectionGrid(num_beams=[1]))
    report = json.loads((tmp_path / "out" / "test.de-en.json").read_text())
    card = ModelCard.load(tiny_model_copy / CARD_FILE)
    test = {
        result.metric_name: result.metric_value
        for result in card.data.eval_results
        if result.dataset_split == "test"
    }
    assert test == {
        "sacreBLEU": round(report["cased"]["bleu"], 2),
        "sacreBLEU, lowercased": round(report["lowercased"]["bleu"], 2),
        "chrF": round(report["cased"]["chrf"], 2),
        PAPER_BLEU_NAME: round(report[PAPER_BLEU_KEY]["bleu"], 2),
    }
    assert [result.dataset_split for result in card.data.eval_results].count("validation") == 1
    assert "greedy search (num_beams 1)" in card.text and "beams, length penalty" not in card.text


def test_selection_with_the_static_cache_scores_what_the_dynamic_cache_does(run_dir, corpus_path, tmp_path):
    """`--cache-implementation static` (compiled decoding on a GPU) reaches every decoding, with the same
    scores."""
    selections = {
        cache: select_on_validation(
            [run_dir],
            TranslationData(corpus_path, "de", "en", max_sentences=4),
            tmp_path / cache,
            SelectionGrid(num_beams=[1, 2]),
            options=DecodingOptions(cache_implementation="static" if cache == "static" else None),
        )
        for cache in ("dynamic", "static")
    }
    assert all(row["cache_implementation"] == "static" for row in selections["static"]["validation"])
    scores = {
        cache: [(row["model"], row["num_beams"], row["bleu"], row["chrf"]) for row in selection["validation"]]
        + [selection["reports"]["test"]["cased"]["bleu"]]
        for cache, selection in selections.items()
    }
    assert scores["static"] == scores["dynamic"]
    hypotheses = {cache: (tmp_path / cache / "test.de-en.hyp").read_text() for cache in selections}
    assert hypotheses["static"] == hypotheses["dynamic"]


def test_selection_reports_tokenized_bleu_of_the_test_hypotheses(tiny_model_copy, corpus_path, tmp_path):
    selection = select_on_validation(
        [tiny_model_copy],
        TranslationData(corpus_path, "de", "en", max_sentences=4),
        tmp_path,
        SelectionGrid(num_beams=[1]),
        scoring=ScoreOptions(tokenized_bleu=True),
    )
    hypotheses = read_lines(tmp_path / "test.de-en.hyp")
    references = load_translation_split(corpus_path, "de", "en", "test")["target"][:4]
    expected = score_tokenized_lowercased(hypotheses, references, "en")
    assert json.loads((tmp_path / "test.de-en.json").read_text())["tokenized_lowercased"] == expected
    assert selection["reports"]["test"]["tokenized_lowercased"] == expected
    assert selection["chosen"]["bleu"] == selection["validation"][0]["bleu"]  # chosen on sacreBLEU alone


def test_tokenized_bleu_without_sacremoses_is_refused_before_any_decoding(
    tiny_model_dir, corpus_path, tmp_path, monkeypatch
):
    monkeypatch.setitem(sys.modules, "sacremoses", None)  # as if not installed

    def no_decoding(*args, **kwargs):
        raise AssertionError("decoded before the missing tokenizer was named")

    monkeypatch.setattr(scoring_module, "evaluate_translation", no_decoding)
    data, tokenized = TranslationData(corpus_path, "de", "en"), ScoreOptions(tokenized_bleu=True)
    with pytest.raises(ImportError, match=r"pip install 'hf_vanilla\[tokenized\]'"):
        select_on_validation([tiny_model_dir], data, tmp_path / "out", scoring=tokenized)
    with pytest.raises(ImportError, match="sacremoses"):
        evaluate_bleu(tiny_model_dir, data, tmp_path / "out", scoring=tokenized)
    assert not (tmp_path / "out").exists()


def test_selection_names_a_directory_that_holds_no_model(tmp_path, corpus_path):
    with pytest.raises(FileNotFoundError, match="neither a saved model directory nor a training run"):
        select_on_validation([tmp_path], TranslationData(corpus_path, "de", "en"), tmp_path / "out")
    assert not (tmp_path / "out").exists()


def test_select_checkpoint_script_prints_the_validation_table(tiny_model_copy, corpus_path, tmp_path):
    completed = run_script(
        "select_checkpoint.py", tiny_model_copy, "--dataset", corpus_path, *DE_EN, "--num-beams", "1", "2",
        "--first-pairs", "3", "--report-split", "--device", "cpu", "--output-dir", tmp_path, check=True,
    )  # fmt: skip
    table = completed.stdout.splitlines()
    assert table[0].startswith("validation (3 sentences), nrefs:1|case:mixed")
    assert len(table) == 2 + 2 + 1 and sum("<- chosen" in line for line in table) == 1
    assert table[-1].startswith("decoding defaults (num_beams ") and table[-1].endswith(
        f"saved to {tiny_model_copy / 'generation_config.json'}: pipeline and generate use them"
    )
    assert json.loads((tmp_path / "selection.json").read_text())["reports"] == {}


def test_select_checkpoint_script_prints_tokenized_bleu_beside_sacrebleu(
    tiny_model_copy, corpus_path, tmp_path
):
    completed = run_script(
        "select_checkpoint.py", tiny_model_copy, "--dataset", corpus_path, *DE_EN, "--num-beams", "1",
        "--first-pairs", "3", "--device", "cpu", "--tokenized-bleu", "--output-dir", tmp_path, check=True,
    )  # fmt: skip
    report = json.loads((tmp_path / "test.de-en.json").read_text())
    assert completed.stdout.splitlines()[-2] == (
        f"test: cased BLEU {report['cased']['bleu']:.2f}, lowercased {report['lowercased']['bleu']:.2f}, "
        f"chrF {report['cased']['chrf']:.2f}; tokenized lowercased BLEU "
        f"{report['tokenized_lowercased']['bleu']:.2f}; {PAPER_BLEU_NAME} "
        f"{report[PAPER_BLEU_KEY]['bleu']:.2f} (beside, not instead)"
    )


LONG_LINE = " ".join(["Hund"] * 2000)


@pytest.fixture(scope="module")
def short_model(tiny_model_and_tokenizer):
    """The tiny model's shape with 24 positions, so that a line of a few dozen words is too long for it."""
    model, tokenizer = tiny_model_and_tokenizer
    config = model.config.__class__(**{**model.config.to_dict(), "max_position_embeddings": 24})
    return type(model)(config).eval(), tokenizer


def test_a_line_longer_than_the_model_is_cut_or_left_blank_and_named_once(short_model, caplog):
    model, tokenizer = short_model
    sources = ["Ein Hund rennt.", LONG_LINE, "", "Kinder.", LONG_LINE]
    alone = translate_sentences(
        model, tokenizer, [sources[0], sources[3]], batching=QUIET.batching, num_beams=1
    )
    with caplog.at_level("WARNING"):
        cut = translate_sentences(model, tokenizer, sources, batching=QUIET.batching, num_beams=1)
        skipped = translate_sentences(
            model, tokenizer, sources, batching=QUIET.batching, num_beams=1, skip_long_lines=True
        )
    assert [cut[0], cut[3]] == [skipped[0], skipped[3]] == alone
    assert cut[1] and cut[1] == cut[4]  # the first 24 tokens of the long line, translated
    assert skipped[1] == skipped[2] == skipped[4] == ""
    warnings = [record.getMessage() for record in caplog.records if "positions" in record.getMessage()]
    assert warnings == [
        "2 of 5 lines are longer than the model's 24 positions and were cut to their first 24 tokens: line "
        "2, 5",
        "2 of 5 lines are longer than the model's 24 positions and were left blank: line 2, 5",
    ]


def test_translate_script_writes_every_line_of_a_file_with_a_2000_word_line(tiny_model_dir, tmp_path):
    source = tmp_path / "input.de"
    source.write_text(f"Ein Hund rennt.\n{LONG_LINE}\nKinder.\n")
    outputs = {}
    for flags in ([], ["--skip_long_lines"]):
        output = tmp_path / f"output{len(flags)}.en"
        completed = run_script(
            "translate.py", tiny_model_dir, "--input", source, "--output", output, "--num-beams", "1",
            "--max-new-tokens", "3", "--quiet", *flags, check=True,
        )  # fmt: skip
        assert "1 of 3 lines are longer than the model's 1024 positions" in completed.stderr
        assert "line 2" in completed.stderr and "Traceback" not in completed.stderr
        outputs[len(flags)] = output.read_text().split("\n")
    assert len(outputs[0]) == 4 and all(outputs[0][:3])
    assert outputs[1] == [outputs[0][0], "", outputs[0][2], ""]


@pytest.mark.parametrize("script", ["translate.py", "evaluate_bleu.py"])
@pytest.mark.parametrize("beams", ["0", "-2"])
def test_scripts_reject_a_beam_size_below_one_in_one_line(script, beams, tiny_model_dir):
    completed = run_script(script, tiny_model_dir, "--num-beams", beams)
    assert completed.returncode == 2
    assert completed.stderr.splitlines()[-1] == (
        f"{script}: error: argument --num-beams: must be at least 1, got {beams}"
    )
    assert "Traceback" not in completed.stderr


def test_a_truncated_weights_file_is_named_in_one_line(tiny_model_dir, tmp_path):
    weights = with_truncated_weights(tiny_model_dir, tmp_path / "model")
    with pytest.raises(ValueError, match=f"{weights} is truncated or corrupt .*re-save or re-download it"):
        load_model_and_tokenizer(tmp_path / "model")
    completed = run_script("translate.py", tmp_path / "model", "--quiet", stdin="Ein Hund.\n")
    assert completed.returncode == 1
    assert completed.stderr.splitlines()[-1].startswith(f"error: {weights} is truncated or corrupt")
    assert "Traceback" not in completed.stderr


def test_loading_rejects_a_tokenizer_of_the_same_size_with_another_vocabulary(tiny_model_dir, tmp_path):
    swapped = with_another_vocabulary_of_the_same_size(tiny_model_dir, tmp_path / "swapped")
    assert len(AutoTokenizer.from_pretrained(swapped)) == len(AutoTokenizer.from_pretrained(tiny_model_dir))
    with pytest.raises(ValueError, match="not the one the model was trained with"):
        load_model_and_tokenizer(swapped)
    model = AutoModelForSeq2SeqLM.from_pretrained(swapped)
    model.config.tokenizer_fingerprint = None  # as a checkpoint saved before fingerprints: loads unchecked
    model.save_pretrained(swapped)
    assert load_model_and_tokenizer(swapped)[1]
