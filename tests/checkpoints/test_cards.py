"""A checkpoint's model card: Hub metadata and sections, facts generated from the checkpoint itself (config,
generation config, the run's settings), the test scores selection records, and model_card.md, the example."""

import shutil
import tempfile
from pathlib import Path

import pytest
from conftest import tiny_config
from huggingface_hub import ModelCard
from transformers import GenerationConfig

from hf_vanilla import VanillaTransformerConfig
from hf_vanilla.checkpoints.cards import (
    CARD_FILE,
    RunRecord,
    decoding_defaults,
    model_card,
    record_results,
    save_card,
    set_decoding_defaults,
)
from hf_vanilla.training.run_directory import LAST, TRAINING_STATE, run_record
from hf_vanilla.training.settings import load_training_config
from hf_vanilla.training.train import train

REPO = Path(__file__).resolve().parents[2]
SECTIONS = (
    "## Model details",
    "## Intended uses and limitations",
    "## How to use",
    "## Training data",
    "## Training procedure",
    "## Evaluation",
    "## Citation",
)
SIGNATURE = "nrefs:1|case:mixed|eff:no|tok:13a|smooth:exp|version:2.6.0"
PAPER_DECODING = GenerationConfig(num_beams=4, length_penalty=0.6)
# What the paper's model states, and each departure the tests below make, as cards word them.
POST_LAYERNORM, PRE_LAYERNORM = "post-LayerNorm, LayerNorm(x + Sublayer(x)), as in the paper", "pre-LayerNorm"
TIED, UNTIED = "the pre-softmax projection, as in the paper", "a pre-softmax projection of its own"
BEAM_4 = "beam search with 4 beams, length penalty 0.6"
BEAM_8 = "beam search with 8 beams, length penalty 1.0"


def report(bleu: float, chrf: float = 60.0, **generation) -> dict:
    return {
        "cased": {"bleu": bleu, "bleu_signature": SIGNATURE, "chrf": chrf, "chrf_signature": "chrF2"},
        "lowercased": {"bleu": bleu + 1, "bleu_signature": SIGNATURE.replace("mixed", "lc")},
        "sentences": 1000,
        "generation": generation or {"num_beams": 4, "length_penalty": 0.6, "max_tokens": 4096},
    }


def saved_card(tmp_path, generation: GenerationConfig = PAPER_DECODING, config=None, **record) -> ModelCard:
    config = config or VanillaTransformerConfig.from_preset("tiny", vocab_size=100)
    run = RunRecord("de", "en", "bentrevett/multi30k", "Trained.", **record)
    save_card(model_card(config, generation, run), tmp_path)
    return ModelCard.load(tmp_path / CARD_FILE)


def test_card_follows_the_hub_template(tmp_path):
    card = saved_card(tmp_path, validation={"val_bleu": 12.345678}, settings={"updates": 2000})
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


def test_a_right_to_left_models_card_says_it_writes_last_word_first(tmp_path):
    writes_backwards = "Writes each translation's words last first"
    assert writes_backwards not in saved_card(tmp_path).text
    config = VanillaTransformerConfig.from_preset("tiny", vocab_size=100, right_to_left=True)
    assert writes_backwards in saved_card(tmp_path, config=config).text


def test_a_card_without_the_runs_settings_claims_no_recipe(tmp_path):
    card = saved_card(tmp_path)
    procedure = card.text.partition("## Training procedure")[2].partition("\n## ")[0]
    assert procedure.strip() == "Not recorded with this checkpoint."


@pytest.fixture(scope="module")
def departing_run(tiny_dataset, tokenizer_dir, tmp_path_factory):
    """A run whose checkpoints depart from the paper wherever a card states the paper's choice: pre-LayerNorm,
    an untied pre-softmax projection, label smoothing 0.2, beam 8 with length penalty 1.0 as decoding
    defaults."""
    output_dir = tmp_path_factory.mktemp("departing") / "run"
    config = tiny_config(
        tiny_dataset, tokenizer_dir, output_dir, max_steps=2, save_interval_updates=None,
        validation_bleu=False, model_overrides={"pre_layernorm": True, "tie_word_embeddings": False},
        label_smoothing=0.2,
        num_beams=8, length_penalty=1.0,
    )  # fmt: skip
    train(config)
    return output_dir


def test_a_cards_facts_are_its_checkpoints_own(departing_run, trained_run):
    """Every fact the card states is the checkpoint's, and the paper's choice is not stated where it
    departs."""
    departing = ModelCard.load(departing_run / LAST / CARD_FILE).text
    sizes = "d_model 32, d_ff 64, 4 heads, 2+2 layers"
    for fact in (PRE_LAYERNORM, UNTIED, BEAM_8, "- label_smoothing: 0.2\n", sizes):
        assert fact in departing
    for paper_choice in (POST_LAYERNORM, TIED, BEAM_4, "label_smoothing: 0.1"):
        assert paper_choice not in departing
    paper = ModelCard.load(trained_run / LAST / CARD_FILE).text
    for fact in (POST_LAYERNORM, TIED, BEAM_4, "- label_smoothing: 0.1\n"):
        assert fact in paper
    for departure in (PRE_LAYERNORM, UNTIED, BEAM_8, "label_smoothing: 0.2"):
        assert departure not in paper


def test_new_decoding_defaults_go_into_the_generation_config_and_the_card(trained_run, tmp_path):
    checkpoint = shutil.copytree(
        trained_run / LAST, tmp_path / "checkpoint", ignore=shutil.ignore_patterns(TRAINING_STATE)
    )
    set_decoding_defaults(checkpoint, 8, 1.0)
    saved = GenerationConfig.from_pretrained(checkpoint)
    assert (saved.num_beams, saved.length_penalty, saved.eos_token_id) == (8, 1.0, 2)
    card = ModelCard.load(checkpoint / CARD_FILE)
    assert BEAM_8 in card.text and BEAM_4 not in card.text and card.text.count("## Model details") == 1
    assert card.text.index("## Model details") < card.text.index("## Intended uses")

    set_decoding_defaults(checkpoint, 1, None)  # greedy search takes no length penalty
    saved = GenerationConfig.from_pretrained(checkpoint)
    assert (saved.num_beams, saved.length_penalty) == (1, None)
    assert "greedy search (num_beams 1)" in ModelCard.load(checkpoint / CARD_FILE).text


def quickstart_card(directory: Path) -> str:
    """The card this package writes for `bash scripts/quickstart.sh de en`'s checkpoint, as docs/results.md
    records it: the multi30k-small recipe, checkpoint_best (update 5,934 of 6,524), beam 8 and length penalty
    1.0 chosen on validation, test2016 scores. Written into `directory` (the card is built as selection leaves
    it); its text."""
    config = load_training_config(REPO / "configs" / "multi30k-small.yaml")
    model_config = VanillaTransformerConfig.from_preset(
        config.model_preset, vocab_size=config.tokenizer_vocab_size
    )
    summary = "Checkpoint after 5934 updates, the best on validation of a 30-minute run (6,524 updates)."
    chosen = {"num_beams": 8, "length_penalty": 1.0}
    card = model_card(model_config, GenerationConfig(**chosen), run_record(config, summary, metrics=None))
    save_card(card, directory)
    test = report(41.64, chrf=60.93, **chosen)
    test["lowercased"]["bleu"] = 41.93
    test["cased"]["chrf_signature"] = "nrefs:1|case:mixed|eff:yes|nc:6|nw:0|space:no|version:2.6.0"
    return str(record_results(directory, config.dataset, "test", test))


def test_model_card_md_is_the_card_the_package_writes(tmp_path):
    """model_card.md, the example README links, is what the builder writes for the quickstart's checkpoint."""
    assert (REPO / "model_card.md").read_text() == quickstart_card(tmp_path), (
        "model_card.md is stale: regenerate it with `python tests/checkpoints/test_cards.py`"
    )


if __name__ == "__main__":
    with tempfile.TemporaryDirectory() as scratch:
        (REPO / "model_card.md").write_text(quickstart_card(Path(scratch)))


@pytest.mark.parametrize(
    "saved, line",
    [
        ({}, f"none saved: the pipeline and the scripts use the paper's {BEAM_4}, a plain `generate` greedy"),
        (
            {"num_beams": 8},
            "beam search with 8 beams, length penalty 0.6 (the paper's penalty; a plain `generate`",
        ),
        ({"num_beams": 8, "length_penalty": 1.0}, BEAM_8),
        ({"num_beams": 1}, "greedy search (num_beams 1)"),
    ],
)
def test_the_cards_decoding_line_is_what_the_pipeline_and_scripts_decode_with(saved, line):
    assert decoding_defaults(GenerationConfig(**saved)).startswith(line)
