"""The paper's BLEU against the perl scripts themselves.

paper_bleu_perl/ holds what replace-unicode-punctuation.perl, tokenizer.perl, get_ende_bleu.sh's ##AT##
one-liner and multi-bleu.perl (mosesdecoder 34452895) printed for German and English text with curly quotes,
ellipses, apostrophes, compounds and lines ending in white space; its README.md holds the commands that made
them.
"""

import re
from pathlib import Path

import pytest

from hf_vanilla.evaluation.paper_bleu import (
    replace_unicode_punctuation,
    score_paper_bleu,
    split_compounds,
    tokenizer_perl,
)

pytest.importorskip("sacremoses")

PERL_OUTPUT = Path(__file__).with_name("paper_bleu_perl")
LANGUAGES = ("de", "en")


def lines(name: str) -> list[str]:
    """A file's lines as perl reads them: split at \\n alone, each keeping the spaces and tabs that end it."""
    return (PERL_OUTPUT / name).read_text(encoding="utf-8").split("\n")[:-1]


def test_unicode_punctuation_is_replaced_as_the_script_does():
    assert replace_unicode_punctuation(lines("punct.txt")) == lines("punct.txt.n")


@pytest.mark.parametrize("lang", LANGUAGES)
def test_hypotheses_have_the_scripts_tokens_line_for_line(lang):
    ours = tokenizer_perl(replace_unicode_punctuation(lines(f"hyp.{lang}")), lang)
    assert [line.split() for line in ours] == [line.split() for line in lines(f"hyp.{lang}.tok")]


@pytest.mark.parametrize("lang", LANGUAGES)
def test_references_have_the_scripts_tokens_without_the_punctuation_replacement(lang):
    ours = tokenizer_perl(lines(f"ref.{lang}"), lang)
    assert [line.split() for line in ours] == [line.split() for line in lines(f"ref.{lang}.tok")]


@pytest.mark.parametrize("name", [f"{side}.{lang}" for side in ("hyp", "ref") for lang in LANGUAGES])
def test_compounds_split_as_the_one_liner_split_them(name):
    assert [split_compounds(line) for line in lines(f"{name}.tok")] == lines(f"{name}.tok.atat")


@pytest.mark.parametrize("lang", LANGUAGES)
def test_bleu_is_multi_bleu_perls(lang):
    # multi-bleu.perl prints BLEU to two decimals.
    printed = float(re.match(r"BLEU = (\d+\.\d\d),", lines(f"multi-bleu.{lang}")[0]).group(1))
    ours = score_paper_bleu(lines(f"hyp.{lang}"), lines(f"ref.{lang}"), lang)["bleu"]
    assert ours == pytest.approx(printed, abs=0.01)
