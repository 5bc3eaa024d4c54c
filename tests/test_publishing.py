"""A checkpoint's model card: Hub metadata and sections on one template, and the test scores selection records."""

from pathlib import Path

from huggingface_hub import ModelCard

from hf_vanilla import VanillaTransformerConfig
from hf_vanilla.publishing import CARD_FILE, model_card, record_results

SECTIONS = (
    "## Model details",
    "## Intended uses and limitations",
    "## How to use",
    "## Training data",
    "## Training procedure",
    "## Evaluation",
    "## Citation",
)


def report(bleu: float) -> dict:
    signature = "nrefs:1|case:mixed|eff:no|tok:13a|smooth:exp|version:2.6.0"
    return {
        "cased": {"bleu": bleu, "bleu_signature": signature, "chrf": 60.0, "chrf_signature": "chrF2"},
        "lowercased": {"bleu": bleu + 1, "bleu_signature": signature.replace("mixed", "lc")},
        "sentences": 1000,
        "generation": {"num_beams": 4, "length_penalty": 0.6, "max_tokens": 4096},
    }


def saved_card(tmp_path, **kwargs) -> ModelCard:
    config = VanillaTransformerConfig.from_preset("tiny", vocab_size=100)
    card = model_card(config, "de", "en", "bentrevett/multi30k", "Trained.", **kwargs)
    card.save(tmp_path / CARD_FILE)
    return ModelCard.load(tmp_path / CARD_FILE)


def test_card_follows_the_hub_template(tmp_path):
    card = saved_card(tmp_path, validation={"val_bleu": 12.345678}, training={"updates": 2000})
    assert (card.data.pipeline_tag, card.data.library_name, card.data.license) == (
        "translation",
        "transformers",
        "apache-2.0",
    )
    assert card.data.datasets == ["bentrevett/multi30k"] and card.data.language == ["de", "en"]
    positions = [card.text.index(section) for section in SECTIONS]
    assert positions == sorted(positions)
    assert 'AutoTokenizer.from_pretrained("PATH_OR_HUB_ID", trust_remote_code=True)' in card.text
    assert "- updates: 2000" in card.text and "Vaswani" in card.text and "elliott2016multi30k" in card.text
    assert [result.metric_value for result in card.data.eval_results] == [12.3457]


def test_selection_writes_test_scores_into_the_card(tmp_path):
    saved_card(tmp_path, validation={"val_bleu": 12.0})
    record_results(tmp_path, "bentrevett/multi30k", "test", report(38.456))
    card = ModelCard.load(tmp_path / CARD_FILE)
    test = [result for result in card.data.eval_results if result.dataset_split == "test"]
    assert [(r.metric_name, r.metric_value) for r in test] == [
        ("sacreBLEU", 38.46),
        ("sacreBLEU, lowercased", 39.46),
        ("chrF", 60.0),
    ]
    assert test[0].metric_config.startswith("nrefs:1|case:mixed") and "num_beams 4" in test[0].dataset_name
    assert r"| sacreBLEU | 38.46 | nrefs:1\|case:mixed\|" in card.text
    assert [r.dataset_split for r in card.data.eval_results].count("validation") == 1  # kept
    assert card.text.index("## Evaluation") < card.text.index("## Citation")

    record_results(
        tmp_path, "bentrevett/multi30k", "test", report(40.0)
    )  # a later selection replaces its rows
    card = ModelCard.load(tmp_path / CARD_FILE)
    assert [r.metric_value for r in card.data.eval_results if r.dataset_split == "test"] == [40.0, 41.0, 60.0]
    assert card.text.count("## Evaluation") == 1 and "38.46" not in card.text


def test_the_repositorys_model_card_follows_the_same_template(tmp_path):
    """model_card.md, the card of the quickstart's checkpoint, has the sections and metadata every card has."""
    published = ModelCard.load(Path(__file__).resolve().parents[1] / "model_card.md")
    generated = saved_card(tmp_path)
    assert [line for line in published.text.splitlines() if line.startswith("## ")] == [
        line for line in generated.text.splitlines() if line.startswith("## ")
    ]
    for field in ("language", "license", "library_name", "pipeline_tag", "tags", "metrics"):
        assert getattr(published.data, field) == getattr(generated.data, field), field
    test = [result for result in published.data.eval_results if result.dataset_split == "test"]
    assert {result.metric_name for result in test} == {"sacreBLEU", "sacreBLEU, lowercased", "chrF"}
    assert all(result.metric_config.startswith("nrefs:1|") for result in test)
