from itertools import chain
from types import SimpleNamespace

import pytest
import sacrebleu
import torch
from transformers import AutoModelForSeq2SeqLM, AutoTokenizer

from hf_vanilla import VanillaTransformerConfig, VanillaTransformerForConditionalGeneration
from hf_vanilla.data import load_translation_split
from hf_vanilla.evaluation import score_translations, translate_sentences
from hf_vanilla.tokenization import config_kwargs_from_tokenizer, save_tokenizer, train_tokenizer


def save_tiny_model(multi30k_path, directory):
    """An untrained tiny model and a 1,000-token BPE from 2,000 Multi30k pairs, saved together."""
    pairs = load_translation_split(multi30k_path, "de", "en", "train").select(range(2000))
    tokenizer = train_tokenizer(chain(pairs["source"], pairs["target"]), vocab_size=1000, show_progress=False)
    torch.manual_seed(0)
    config = VanillaTransformerConfig.from_preset("tiny", **config_kwargs_from_tokenizer(tokenizer))
    save_tokenizer(tokenizer, directory)  # first: it replaces the whole directory
    VanillaTransformerForConditionalGeneration(config).save_pretrained(directory)
    return directory


@pytest.fixture(scope="module")
def tiny_model_dir(multi30k_path, tmp_path_factory):
    return save_tiny_model(multi30k_path, tmp_path_factory.mktemp("tiny_model"))


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


def test_real_model_beam_search_runs_with_paper_settings(tiny_model_and_tokenizer):
    model, tokenizer = tiny_model_and_tokenizer
    translations = translate_sentences(
        model, tokenizer, SOURCES[:3], show_progress=False, num_beams=4, length_penalty=0.6
    )
    assert len(translations) == 3 and translations[1] == ""


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
