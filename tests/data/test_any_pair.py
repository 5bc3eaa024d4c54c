"""Any language pair, any script: no German/English default in the code, a BPE that round-trips every script,
and BLEU tokenized as the target language needs."""

import re
from pathlib import Path

import pytest

from hf_vanilla.data.tokenization import round_trip_rate, train_tokenizer
from hf_vanilla.evaluation.scoring import bleu_metric, score_translations

REPO = Path(__file__).resolve().parents[2]
# A language given a default value or a fallback: `default="de"`, `setting("en", ...)`,
# `lang or "en"`, `= "de"`.
LANGUAGE_DEFAULT = re.compile(r"""(default=|setting\(|\bor |= )["'](de|en)["']""")
# Where German and English belong: the WMT 2014 English-German paper's own BLEU and its synthetic stand-in.
RECIPE_FILES = {"hf_vanilla/evaluation/paper_bleu.py", "scripts/tools/benchmark_data.py"}

SENTENCES = {
    "zh": "一个穿着红色衬衫的男人正在街上骑自行车。",
    "ja": "赤いシャツを着た男性が通りで自転車に乗っている。",
    "ko": "빨간 셔츠를 입은 남자가 거리에서 자전거를 타고 있다.",
    "ar": "رجل يرتدي قميصًا أحمر يركب دراجة في الشارع.",
    "ru": "Мужчина в красной рубашке едет на велосипеде по улице.",
    "cs": "Muž v červené košili jede na kole po ulici; řeže čtyři žluté dýně.",
    "fr": "Un homme en chemise rouge fait du vélo dans la rue, près d'un café « très » animé…",
}


def test_no_language_pair_is_assumed_outside_the_recipes():
    offending = []
    sources = [*REPO.glob("hf_vanilla/**/*.py"), *REPO.glob("scripts/**/*.py"), *REPO.glob("scripts/**/*.sh")]
    for path in sources:
        relative = str(path.relative_to(REPO))
        if relative in RECIPE_FILES or "/research/" in relative:
            continue
        for number, line in enumerate(path.read_text().splitlines(), 1):
            if LANGUAGE_DEFAULT.search(line):
                offending.append(f"{relative}:{number}: {line.strip()}")
    assert not offending, "\n".join(offending)


def test_the_check_sees_a_default_language():
    assert LANGUAGE_DEFAULT.search('parser.add_argument("--source-lang", default="de")')
    assert LANGUAGE_DEFAULT.search('MosesTokenizer(lang=lang or "en")')
    assert not LANGUAGE_DEFAULT.search('pair = ("de", "en")  # Multi30k')


def test_byte_level_bpe_round_trips_every_script_exactly():
    texts = list(SENTENCES.values()) + [text.upper() for text in SENTENCES.values()]
    tokenizer = train_tokenizer(texts, vocab_size=400, show_progress=False)
    unseen = ["她在公园里读书。", "Ёжик в тумане.", "コーヒーを飲みます"]
    unseen += ["안녕하세요, 세계!", "مرحبا بالعالم", "Příliš žluťoučký kůň"]
    assert round_trip_rate(tokenizer, texts + unseen) == 1.0
    assert tokenizer.unk_token_id not in sum(tokenizer(unseen)["input_ids"], [])


@pytest.mark.parametrize(("lang", "tokenizer"), [("zh", "tok:zh"), ("fr", "tok:13a"), ("cs", "tok:13a")])
def test_bleu_is_tokenized_for_the_target_language(lang, tokenizer):
    scores = score_translations([SENTENCES[lang]], [SENTENCES[lang]], target_lang=lang)
    assert tokenizer in scores["bleu_signature"] and scores["bleu"] == pytest.approx(100)


def test_chinese_bleu_counts_characters_not_whole_sentences():
    """13a leaves a Chinese sentence one token, so one wrong character would score it 0."""
    hypothesis = SENTENCES["zh"].replace("红", "蓝")
    assert score_translations([hypothesis], [SENTENCES["zh"]], target_lang="zh")["bleu"] > 50
    assert score_translations([hypothesis], [SENTENCES["zh"]])["bleu"] == 0


@pytest.mark.parametrize("lang", ["ja", "ko"])
def test_a_target_whose_bleu_needs_mecab_says_what_to_install(lang):
    try:
        bleu_metric(lang)
    except ValueError as err:
        assert str(err).endswith(f"pip install 'sacrebleu[{lang}]'") and "\n" not in str(err)
    else:
        pytest.skip(f"MeCab for {lang} is installed here")
