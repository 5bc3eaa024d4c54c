"""The paper's BLEU: tensor2tensor's `get_ende_bleu.sh`, with which Vaswani et al. (2017) scored WMT 2014
(Table 2).

That script (tensor2tensor c886a73) replaces the hypotheses' unicode punctuation
(`replace-unicode-punctuation.perl`: ” “ -> ", ’ -> ', … -> ...), Moses-tokenizes them (`tokenizer.perl -l
de`: HTML-escaped, no aggressive hyphen splits), splits hyphenated compounds as `rich ##AT##-##AT## text` in
hypotheses and references alike (`perl -ple 's{(\\S)-(\\S)}{$1 ##AT##-##AT## $2}g'`), and runs
`multi-bleu.perl`: cased BLEU on those tokens, without smoothing. The references are a file tokenized by
`tokenizer.perl` alone (`newstest2014.tok.de`), so their punctuation is not replaced: a “ in a hypothesis
becomes &quot; and no longer matches the reference's “. It reads 0.5-1.5 above sacreBLEU on the same output
(tensor2tensor issue 317), so it is reported beside sacreBLEU and its signature, never instead.

It reproduces those scripts as moses-smt/mosesdecoder commit 34452895 (2025-02-03) holds them:
`tokenizer.perl` last changed in 75d4c67 (2021), `replace-unicode-punctuation.perl` in 5d3331b (2019),
`multi-bleu.perl` in 48fa6e9 (2018), the nonbreaking prefixes in 93bff3f (de, 2012) and 4da86c3 (en, 2019).
`tests/evaluation/paper_bleu_perl/` holds those scripts' own output on German and English text, which this
module matches token for token. The paper itself (2017) ran a `tokenizer.perl` from before 9fc964d (2018-11),
which kept the period of an abbreviation ending a line (`usw.`, `a.m.`); today's script splits it off (`usw
.`).
"""

from __future__ import annotations

import logging
import re
from collections.abc import Sequence

from sacrebleu.metrics import BLEU

from hf_vanilla.extras import MissingExtra, require

logger = logging.getLogger(__name__)

PAPER_BLEU_NAME = "BLEU (paper: tokenized, compound-split, cased)"
# The report key; its presence says the paper's BLEU was computed.
PAPER_BLEU_KEY = "bleu_paper"
# Languages whose Moses tokenization the WMT 2014 en-de papers scored with (get_ende_bleu.sh is -l de; the
# same script with -l en scores the other direction).
PAPER_BLEU_LANGUAGES = ("de", "en")
# The mosesdecoder scripts whose output the paper's BLEU reproduces, named in its signature.
PAPER_SCRIPTS = "mosesdecoder@34452895"
# perl -p reads bytes, so its \S is every byte but ASCII white space: re.ASCII gives Python's \S the same set
# (a no-break space stays inside a token, as it does for perl).
_COMPOUND_HYPHEN = re.compile(r"(\S)-(\S)", re.ASCII)
# tokenizer.perl splits the period off a line's last word whatever the word is (mosesdecoder 9fc964d);
# sacremoses keeps the older rule, under which a nonbreaking prefix ("usw.", "Nr. 7.", "a.m.") or a word
# holding a period ("bund.de.") kept it. Multi-dots ("...") are tokens of their own by then, and stay whole.
_FINAL_PERIOD = re.compile(r"(?<=[^\s.])\.$")


def require_moses_tokenizer() -> None:
    """MissingExtra naming the tokenized extra where sacremoses, which tokenized BLEU needs, is missing."""
    require("sacremoses", extra="tokenized")


def moses_tokenized(sentences: Sequence[str], lang: str, escape: bool) -> list[str]:
    """`sentences` split by the Moses tokenizer of `lang` (sacremoses, as tokenizer.perl -l LANG before
    9fc964d, no aggressive hyphen splits), tokens joined by spaces; `escape`: HTML-escape & < > ' " | [ ] as
    tokenizer.perl does by default."""
    require_moses_tokenizer()
    from sacremoses import MosesTokenizer

    moses = MosesTokenizer(lang=lang or "en")
    return [moses.tokenize(sentence, return_str=True, escape=escape) for sentence in sentences]


def moses_signature() -> str:
    """The tokenizer's part of a tokenized BLEU signature: which Moses tokenizer, at which version."""
    from sacremoses import __version__ as sacremoses_version

    return f"pretok:moses-sacremoses-{sacremoses_version}"


def replace_unicode_punctuation(sentences: Sequence[str]) -> list[str]:
    """`sentences` through replace-unicode-punctuation.perl: ” “ -> ", ’ -> ', … -> ..., full-width forms ->
    ASCII.

    sacremoses holds the script's list of replacements; it differs only in taking every white space after 。
    and ． where the script takes spaces, which the tokenizer then collapses into one space anyway."""
    require_moses_tokenizer()
    from sacremoses import MosesPunctNormalizer

    normalizer = MosesPunctNormalizer()
    return [normalizer.replace_unicode_punct(sentence) for sentence in sentences]


def split_compounds(tokenized: str) -> str:
    """get_ende_bleu.sh's compound splitting of one tokenized line: `rich-text` -> `rich ##AT##-##AT## text`.

    As perl's `s{(\\S)-(\\S)}{$1 ##AT##-##AT## $2}g`, matches do not overlap: in `a-b-c` the `b` belongs to
    the first match, so only the first hyphen is split (`a ##AT##-##AT## b-c`)."""
    return _COMPOUND_HYPHEN.sub(r"\1 ##AT##-##AT## \2", tokenized)


def tokenizer_perl(sentences: Sequence[str], lang: str) -> list[str]:
    """`sentences` split as `tokenizer.perl -l LANG` splits them: Moses tokens, HTML-escaped, and a line's
    last word's period split off, tokens joined by spaces."""
    return [_FINAL_PERIOD.sub(" .", line) for line in moses_tokenized(sentences, lang, escape=True)]


def paper_tokenized(sentences: Sequence[str], lang: str) -> list[str]:
    """`sentences` as get_ende_bleu.sh scores a tokenized file: `tokenizer_perl`, then compounds split.
    Hypotheses get `replace_unicode_punctuation` first."""
    return [split_compounds(line) for line in tokenizer_perl(sentences, lang)]


def score_paper_bleu(
    hypotheses: Sequence[str], references: Sequence[str], target_lang: str
) -> dict[str, float | str]:
    """The paper's BLEU of detokenized `hypotheses` against detokenized `references` (one each).

    The hypotheses' unicode punctuation is replaced, the references' is not (tensor2tensor compared with a
    reference file tokenized by tokenizer.perl alone); both are then tokenized and compound-split as
    `paper_tokenized` and scored by sacreBLEU with tokenize="none" and no smoothing: that is multi-bleu.perl
    (cased, 4-grams, corpus brevity penalty) on pre-tokenized text.
    Returns {"name", "bleu", "bleu_signature"}.
    """
    if len(hypotheses) != len(references):
        raise ValueError(f"{len(hypotheses)} hypotheses but {len(references)} references; they must pair up")
    if not references:
        raise ValueError("no references to score against")
    # force: the text is tokenized on purpose, sacreBLEU need not warn of it.
    bleu = BLEU(tokenize="none", smooth_method="none", force=True)
    score = bleu.corpus_score(
        paper_tokenized(replace_unicode_punctuation(hypotheses), target_lang),
        [paper_tokenized(references, target_lang)],
    )
    return {
        "name": PAPER_BLEU_NAME,
        "bleu": score.score,
        "bleu_signature": f"{bleu.get_signature()}|{moses_signature()}-{target_lang}-escaped"
        f"|unicode-punct:hyp|compounds:##AT##|scripts:{PAPER_SCRIPTS}",
    }


def paper_bleu_report(
    hypotheses: Sequence[str], references: Sequence[str], target_lang: str
) -> dict[str, dict[str, float | str]]:
    """{"bleu_paper": `score_paper_bleu`} for a German or English target when sacremoses is installed, else {}
    (the report then holds sacreBLEU alone, as before)."""
    if target_lang not in PAPER_BLEU_LANGUAGES:
        return {}
    try:
        require_moses_tokenizer()
    except MissingExtra as missing:
        logger.info("%s left out (%s)", PAPER_BLEU_NAME, missing)
        return {}
    return {PAPER_BLEU_KEY: score_paper_bleu(hypotheses, references, target_lang)}
