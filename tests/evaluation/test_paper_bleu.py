"""The paper's BLEU (tensor2tensor's get_ende_bleu.sh): Moses tokens, ##AT## compounds, cased multi-bleu."""

import math

import pytest
from sacrebleu.metrics import BLEU

from hf_vanilla.evaluation.paper_bleu import (
    PAPER_BLEU_KEY,
    PAPER_BLEU_NAME,
    paper_bleu_report,
    paper_tokenized,
    score_paper_bleu,
    split_compounds,
)

pytest.importorskip("sacremoses")


@pytest.mark.parametrize(
    ("line", "split"),
    [
        ("rich-text format", "rich ##AT##-##AT## text format"),
        # perl's matches do not overlap: the b of a-b is taken, so b-c keeps its hyphen.
        ("a-b-c", "a ##AT##-##AT## b-c"),
        ("x--y", "x ##AT##-##AT## -y"),
        # a hyphen with a space beside it joins nothing
        ("Formate , -Adresse und - oder E-", "Formate , -Adresse und - oder E-"),
        # perl reads bytes: a no-break space is no white space to its \S
        ("ab-\u00a0c", "ab ##AT##-##AT## \u00a0c"),
    ],
)
def test_compounds_split_as_the_perl_one_liner_does(line, split):
    assert split_compounds(line) == split


@pytest.mark.parametrize(
    ("sentence", "tokens"),
    [
        ('Die "E-Mail"-Adresse, bitte.', "Die &quot; E ##AT##-##AT## Mail &quot; -Adresse , bitte ."),
        ('Er sagte: "Ja!" (3-4 Mal)', "Er sagte : &quot; Ja ! &quot; ( 3 ##AT##-##AT## 4 Mal )"),
        ("Preis: 3,50 € & mehr|weniger [1]", "Preis : 3,50 € &amp; mehr &#124; weniger &#91; 1 &#93;"),
        # already tokenized: the same tokens again
        ("Das ist gut .", "Das ist gut ."),
        ("Ja , die E-Mail ( 3-4 Mal ) !", "Ja , die E ##AT##-##AT## Mail ( 3 ##AT##-##AT## 4 Mal ) !"),
    ],
)
def test_german_is_moses_tokenized_escaped_and_compound_split(sentence, tokens):
    assert paper_tokenized([sentence], "de") == [tokens]


def test_score_by_hand_counts_the_split_compound():
    # Tokens: hypothesis "Die E ##AT##-##AT## Mail kam an ." (7), reference "... kam heute an ." (8).
    # Matches: 1-grams 7/7, 2-grams 5/6, 3-grams 3/5, 4-grams 2/4; brevity penalty exp(1 - 8/7).
    scores = score_paper_bleu(["Die E-Mail kam an."], ["Die E-Mail kam heute an."], "de")
    assert scores["bleu"] == pytest.approx(100 * math.exp(1 - 8 / 7) * (5 / 6 * 3 / 5 * 2 / 4) ** (1 / 4))
    assert scores["name"] == PAPER_BLEU_NAME
    assert "tok:none" in scores["bleu_signature"] and "case:mixed" in scores["bleu_signature"]
    assert "compounds:##AT##" in scores["bleu_signature"]


def test_cased_unlike_the_lowercased_tokenized_bleu():
    # "Das" and "Haus" match nothing: 1-grams 4/6, 2-grams 3/5, 3-grams 2/4, 4-grams 1/3
    scores = score_paper_bleu(["Das Haus ist sehr groß ."], ["das haus ist sehr groß ."], "de")
    assert scores["bleu"] == pytest.approx(100 * (4 / 6 * 3 / 5 * 2 / 4 * 1 / 3) ** (1 / 4))
    assert score_paper_bleu(["Das Haus ist groß ."], ["Das Haus ist groß ."], "de")["bleu"] == pytest.approx(
        100
    )


def test_equals_sacrebleu_tokenize_none_on_text_split_by_hand():
    hypotheses = ["Der Zug nach Berlin-Mitte fährt um 8 Uhr ab.", 'Sie las "Krieg und Frieden" im Zug.']
    references = ["Der Zug nach Berlin-Mitte fährt um 8 Uhr.", 'Sie las gestern "Krieg und Frieden" im Zug.']
    by_hand_hypotheses = [
        "Der Zug nach Berlin ##AT##-##AT## Mitte fährt um 8 Uhr ab .",
        "Sie las &quot; Krieg und Frieden &quot; im Zug .",
    ]
    by_hand_references = [
        "Der Zug nach Berlin ##AT##-##AT## Mitte fährt um 8 Uhr .",
        "Sie las gestern &quot; Krieg und Frieden &quot; im Zug .",
    ]
    expected = BLEU(tokenize="none").corpus_score(by_hand_hypotheses, [by_hand_references]).score
    assert score_paper_bleu(hypotheses, references, "de")["bleu"] == pytest.approx(expected)
    # and it differs from sacreBLEU's own tokenization of the same text
    assert BLEU().corpus_score(hypotheses, [references]).score != pytest.approx(expected)


def test_report_holds_it_for_german_and_english_targets_only():
    assert set(paper_bleu_report(["Ein Test."], ["Ein Test."], "de")) == {PAPER_BLEU_KEY}
    assert set(paper_bleu_report(["A test."], ["A test."], "en")) == {PAPER_BLEU_KEY}
    assert paper_bleu_report(["Un test."], ["Un test."], "fr") == {}


def test_unpaired_input_is_refused():
    with pytest.raises(ValueError, match="1 hypotheses but 2 references"):
        score_paper_bleu(["a"], ["a", "b"], "de")
    with pytest.raises(ValueError, match="no references"):
        score_paper_bleu([], [], "de")
