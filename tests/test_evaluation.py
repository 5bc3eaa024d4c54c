import json
import shutil
import subprocess
import sys
from types import SimpleNamespace

import pytest
import sacrebleu
import torch
from conftest import SCRIPTS
from transformers import AutoModelForSeq2SeqLM, AutoTokenizer

from hf_vanilla import scoring as scoring_module
from hf_vanilla import selection as selection_module
from hf_vanilla.data import load_translation_split
from hf_vanilla.scoring import evaluate_bleu, evaluate_translation, score_translations
from hf_vanilla.selection import select_on_validation
from hf_vanilla.tokenization import save_tokenizer
from hf_vanilla.translation import (
    load_model_and_tokenizer,
    read_lines,
    translate_sentences,
    write_lines_atomic,
)


@pytest.fixture(scope="module")
def tiny_model_and_tokenizer(tiny_model_dir):
    return AutoModelForSeq2SeqLM.from_pretrained(tiny_model_dir), AutoTokenizer.from_pretrained(
        tiny_model_dir
    )


class EchoModel:
    """Stands in for a model: "translates" each sentence into itself and records the generate calls."""

    def __init__(self):
        self.config = SimpleNamespace(max_position_embeddings=1024)
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
    translations = translate_sentences(echo, tokenizer, SOURCES, max_tokens=40, show_progress=False)
    assert translations == [source if source.strip() else "" for source in SOURCES]
    assert sum(call["batch_size"] for call in echo.calls) == 4
    assert len(echo.calls) > 1  # the token budget split the sentences into several batches
    assert echo.training  # the caller's mode is restored


def test_batches_are_length_sorted_within_the_token_budget_with_paper_output_length(tiny_model_and_tokenizer):
    _, tokenizer = tiny_model_and_tokenizer
    echo = EchoModel()
    translate_sentences(echo, tokenizer, SOURCES, max_tokens=40, show_progress=False, num_beams=4)
    longest = [call["longest"] for call in echo.calls]
    assert longest == sorted(longest)
    for call in echo.calls:
        assert call["batch_size"] * call["longest"] <= 40 or call["batch_size"] == 1
        assert call["max_new_tokens"] == call["longest"] + 50
        assert call["num_beams"] == 4


def test_explicit_max_new_tokens_wins(tiny_model_and_tokenizer):
    _, tokenizer = tiny_model_and_tokenizer
    echo = EchoModel()
    translate_sentences(echo, tokenizer, SOURCES, show_progress=False, max_new_tokens=7)
    assert {call["max_new_tokens"] for call in echo.calls} == {7}


@pytest.mark.parametrize("num_beams", [1, 3])
def test_each_sentence_stops_at_its_own_source_length_plus_50_whatever_it_is_batched_with(
    tiny_model_and_tokenizer, num_beams
):
    model, tokenizer = tiny_model_and_tokenizer  # untrained: it runs to the limit
    short, long = SOURCES[3], SOURCES[2]
    batched = translate_sentences(model, tokenizer, [short, long], show_progress=False, num_beams=num_beams)
    alone = [
        translate_sentences(model, tokenizer, [source], show_progress=False, num_beams=num_beams)[0]
        for source in (short, long)
    ]
    assert batched == alone
    lengths = [len(tokenizer(text, add_special_tokens=False)["input_ids"]) for text in batched]
    assert lengths[0] < lengths[1] <= len(tokenizer(long)["input_ids"]) + 50


def test_real_model_batched_greedy_equals_one_by_one(tiny_model_and_tokenizer):
    model, tokenizer = tiny_model_and_tokenizer
    batched = translate_sentences(model, tokenizer, SOURCES, show_progress=False, max_new_tokens=12)
    one_by_one = [
        translate_sentences(model, tokenizer, [source], show_progress=False, max_new_tokens=12)[0]
        for source in SOURCES
    ]
    assert batched == one_by_one
    assert batched[1] == batched[4] == ""
    assert all(batched[index] for index in (0, 2, 3, 5))


HYPOTHESES = ["The dog bit the man.", "It wasn't surprising.", "The man had just bitten him."]
REFERENCES = ["The dog bit the man.", "It was not unexpected.", "The man bit him first."]


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


@pytest.mark.parametrize(
    ("hypotheses", "references", "message"),
    [(["a", "b"], ["a"], "2 hypotheses but 1 references"), ([], [], "no references")],
)
def test_scoring_rejects_bad_input(hypotheses, references, message):
    with pytest.raises(ValueError, match=message):
        score_translations(hypotheses, references)


def test_evaluate_bleu_writes_hypotheses_and_report_with_paper_beam_search(
    tiny_model_dir, multi30k_path, tmp_path
):
    report = evaluate_bleu(
        tiny_model_dir,
        multi30k_path,
        "de",
        "en",
        tmp_path,
        split="validation",
        max_sentences=6,
        show_progress=False,
        max_new_tokens=6,
    )
    hypotheses = read_lines(tmp_path / "validation.de-en.hyp")
    assert json.loads((tmp_path / "validation.de-en.json").read_text()) == report
    pairs = load_translation_split(multi30k_path, "de", "en", "validation").select(range(6))
    model, tokenizer = load_model_and_tokenizer(tiny_model_dir)
    assert hypotheses == translate_sentences(
        model,
        tokenizer,
        pairs["source"],
        show_progress=False,
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
        multi30k_path,
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
    hypotheses, report = evaluate_translation(
        model, tokenizer, ["Ein Hund.", " "], ["A dog.", "Nothing."], show_progress=False, max_new_tokens=3
    )
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
        evaluate_translation(model, tokenizer, sources, references, show_progress=False)


def test_unknown_language_is_named(tiny_model_dir, multi30k_path, tmp_path):
    with pytest.raises(ValueError, match="Language 'xx' not in dataset"):
        evaluate_bleu(tiny_model_dir, multi30k_path, "de", "xx", tmp_path, show_progress=False)
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
    assert translate_sentences(model, tokenizer, ["Ein Hund."], show_progress=False, max_new_tokens=3)[0]


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


def test_translate_script_keeps_lines_in_order(tiny_model_dir, tiny_model_and_tokenizer):
    lines = ["Ein Hund rennt.", "", "Zwei Katzen schlafen auf dem Sofa.", "Kinder."]
    completed = subprocess.run(
        [sys.executable, str(SCRIPTS / "translate.py"), str(tiny_model_dir), "--num-beams", "2"]
        + ["--max-new-tokens", "4", "--device", "cpu", "--quiet"],
        input="\n".join(lines) + "\n",
        capture_output=True,
        text=True,
        check=True,
    )
    model, tokenizer = tiny_model_and_tokenizer
    expected = translate_sentences(
        model, tokenizer, lines, show_progress=False, num_beams=2, max_new_tokens=4
    )
    assert completed.stdout.split("\n") == [*expected, ""]
    assert expected[1] == ""


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
    run_dir, multi30k_path, tmp_path, monkeypatch
):
    # An untrained model scores ~0 everywhere: give each (model, beams, penalty) a known validation BLEU.
    # checkpoint_average holds the same weights as checkpoint_best: it is decoded once, as the best.
    decoded = []

    def scripted_evaluation(model, tokenizer, sources, references, **kwargs):
        hypotheses, report = evaluate_translation(model, tokenizer, sources, references, **kwargs)
        decoded.append(kwargs)
        is_last = "checkpoint_last" in model.name_or_path
        report["cased"]["bleu"] = 10 * is_last + kwargs["num_beams"] - kwargs.get("length_penalty", 0)
        return hypotheses, report

    for module in (selection_module, scoring_module):  # validation decodes, and the test decode
        monkeypatch.setattr(module, "evaluate_translation", scripted_evaluation)
    output_dir = tmp_path / "selection"
    selection = select_on_validation(
        [run_dir],
        multi30k_path,
        "de",
        "en",
        output_dir,
        num_beams=[1, 2],
        length_penalties=[0.6, 1.0],
        max_sentences=4,
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


def test_selection_names_a_directory_that_holds_no_model(tmp_path, multi30k_path):
    with pytest.raises(FileNotFoundError, match="neither a saved model directory nor a training run"):
        select_on_validation([tmp_path], multi30k_path, "de", "en", tmp_path / "out")
    assert not (tmp_path / "out").exists()


def test_select_checkpoint_script_prints_the_validation_table(tiny_model_dir, multi30k_path, tmp_path):
    completed = subprocess.run(
        [
            sys.executable,
            str(SCRIPTS / "select_checkpoint.py"),
            str(tiny_model_dir),
            "--dataset",
            multi30k_path,
        ]
        + ["--num-beams", "1", "2", "--max-sentences", "3", "--report-split", "--device", "cpu"]
        + ["--output-dir", str(tmp_path)],
        capture_output=True,
        text=True,
        check=True,
    )
    table = completed.stdout.splitlines()
    assert table[0].startswith("validation (3 sentences), nrefs:1|case:mixed")
    assert len(table) == 2 + 2 and sum("<- chosen" in line for line in table) == 1
    assert json.loads((tmp_path / "selection.json").read_text())["reports"] == {}
