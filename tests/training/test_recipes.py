"""The recipe chosen by corpus size: the table's rows, the configs that use it,
and a run that fills its keys."""

import logging

import pytest
import yaml
from conftest import REPO, tiny_config

from hf_vanilla.training.recipes import AUTO, RECIPE_KEYS, keys_left_auto, recipe_for
from hf_vanilla.training.run_directory import CONFIG_FILE
from hf_vanilla.training.settings import TrainingConfig, TrainingError, load_training_config
from hf_vanilla.training.train import train


@pytest.mark.parametrize(
    ("pairs", "row", "batch"),
    [(7_112, "small-corpus", 1024), (29_000, "medium-corpus", 2048), (200_000, "large-corpus", 4096)],
)
def test_the_row_follows_the_number_of_training_pairs(pairs, row, batch):
    name, recipe = recipe_for(pairs)
    assert (name, recipe.max_tokens) == (row, batch)
    # The paper's corpus: the paper's recipe.
    assert recipe_for(4_500_000)[1].dropout == TrainingConfig().dropout


def test_only_your_pair_leaves_keys_to_the_table_so_the_paper_configs_stay_as_they_are():
    for path in sorted((REPO / "configs").glob("*.yaml")):
        left = keys_left_auto(load_training_config(path))
        assert left == (list(RECIPE_KEYS) if path.name == "your-pair.yaml" else []), path.name


def test_auto_is_refused_for_a_key_the_table_does_not_fill():
    with pytest.raises(TrainingError, match="seed must be int, got 'auto'"):
        load_training_config(seed=AUTO)


def test_a_run_fills_the_keys_left_auto_by_corpus_size_before_training_its_tokenizer(
    tiny_dataset, tmp_path, caplog
):
    """360 pairs (40 held out for a test split): the small-corpus row picks the BPE size (before it is
    trained), the dropout schedule and early stopping; the keys the config sets keep their values; the choice
    is logged, saved and on the card."""
    left_auto = {key: AUTO for key in RECIPE_KEYS if key not in ("model_preset", "max_tokens", "lr")}
    config = tiny_config(tiny_dataset, str(tmp_path / "bpe"), tmp_path / "run", max_steps=2, **left_auto)
    with caplog.at_level(logging.INFO, logger="hf_vanilla.training"):
        train(config)
    assert "training one of 5000 tokens" in caplog.text
    line = (
        "360 pairs: small-corpus recipe: BPE 5,000, d_model 32, d_ff 64, 2+2 layers, "
        "dropout 0.2, attention 0.0, activation 0.0, layer 0.0, source words 0.0, "
        "target words 0.0 (0.1 for the first 2,000 updates), label smoothing 0.1, max_tokens 256, "
        "lr 0.003, warmup 400, early stopping after 5 validations without improvement "
        "(set in the config: model_preset, max_tokens, lr)"
    )
    assert line in caplog.text
    saved = yaml.safe_load((tmp_path / "run" / CONFIG_FILE).read_text())
    regularization = (saved["dropout"], saved["early_dropout_updates"], saved["early_stopping_patience"])
    assert regularization == (0.2, 2000, 5)
    assert (saved["max_tokens"], saved["corpus_recipe"]) == (256, line)
    assert line in (tmp_path / "run" / "checkpoint_last" / "README.md").read_text()


def test_the_medium_row_is_the_multi30k_small_recipe_so_29000_pairs_train_as_that_config_does():
    """Multi30k's 29,000 pairs fall in the medium row: the same values as configs/multi30k-small.yaml, tuned
    on them, but for early stopping, which a 30-minute run does not reach."""
    name, recipe = recipe_for(29_000)
    config = load_training_config(REPO / "configs" / "multi30k-small.yaml")
    differ = [key for key in RECIPE_KEYS if getattr(recipe, key) != getattr(config, key)]
    assert (name, differ) == ("medium-corpus", ["early_stopping_patience"])
