"""One resolution of the beam size, length penalty and output limit: what the caller gives, else what the
checkpoint's generation config saved, else the paper's; greedy search takes no length penalty."""

import json

import pytest
from transformers import GenerationConfig

from hf_vanilla.model.decoding import (
    FROM_CALLER,
    FROM_CHECKPOINT,
    FROM_PAPER,
    FROM_SAMPLING,
    DecodingOptions,
    decoding_report,
    describe_resolved,
    resolve_decoding,
)


def saved(directory, **values) -> GenerationConfig:
    """A generation config as a checkpoint's generation_config.json holds `values`, read back."""
    (directory / "generation_config.json").write_text(json.dumps(values))
    return GenerationConfig.from_pretrained(directory)


@pytest.mark.parametrize("bare", [None, GenerationConfig()])
def test_a_bare_generation_config_leaves_everything_to_the_paper(bare):
    decoding, sources = resolve_decoding(bare)
    assert (decoding.num_beams, decoding.length_penalty, decoding.max_new_tokens) == (4, 0.6, None)
    assert set(sources) == {"num_beams", "length_penalty", "max_new_tokens"}
    assert set(sources.values()) == {FROM_PAPER}
    assert describe_resolved(decoding, sources) == (
        "num_beams 4 (paper), length_penalty 0.6 (paper), max_new_tokens source length + 50 (paper)"
    )


def test_the_checkpoints_saved_values_come_before_the_papers_and_given_ones_before_both(tmp_path):
    checkpoint = saved(tmp_path, num_beams=2, length_penalty=1.0, max_new_tokens=9)
    decoding, sources = resolve_decoding(checkpoint)
    assert decoding.generate_kwargs() == {"num_beams": 2, "length_penalty": 1.0, "max_new_tokens": 9}
    assert set(sources.values()) == {FROM_CHECKPOINT}
    given = DecodingOptions(num_beams=5, length_penalty=None, max_new_tokens=3)
    assert decoding_report(*resolve_decoding(checkpoint, given)) == {
        "num_beams": 5,
        "length_penalty": 1.0,
        "max_new_tokens": 3,
        "sources": {
            "num_beams": FROM_CALLER,
            "length_penalty": FROM_CHECKPOINT,
            "max_new_tokens": FROM_CALLER,
        },
    }


def test_each_value_falls_back_on_its_own(tmp_path):
    decoding, sources = resolve_decoding(saved(tmp_path, num_beams=6), DecodingOptions(max_new_tokens=7))
    assert decoding.generate_kwargs() == {"num_beams": 6, "length_penalty": 0.6, "max_new_tokens": 7}
    assert (sources["num_beams"], sources["length_penalty"], sources["max_new_tokens"]) == (
        FROM_CHECKPOINT,
        FROM_PAPER,
        FROM_CALLER,
    )


@pytest.mark.parametrize(
    "checkpoint, given",
    [
        ({"num_beams": 1}, {}),  # greedy saved (selection's choice)
        # Greedy asked for.
        ({"num_beams": 4, "length_penalty": 0.6}, {"num_beams": 1, "length_penalty": 2.0}),
        ({}, {"do_sample": True}),  # sampling draws one hypothesis
    ],
)
def test_greedy_search_takes_no_length_penalty_whoever_set_one(tmp_path, checkpoint, given):
    decoding, sources = resolve_decoding(saved(tmp_path, **checkpoint), DecodingOptions().replace(**given))
    assert (decoding.num_beams, decoding.length_penalty) == (1, None)
    assert "length_penalty" not in decoding.generate_kwargs() and "length_penalty" not in sources
    assert "no length_penalty (greedy)" in describe_resolved(decoding, sources)


def test_a_greedy_checkpoint_asked_for_beams_takes_the_papers_length_penalty(tmp_path):
    decoding, sources = resolve_decoding(saved(tmp_path, num_beams=1), DecodingOptions(num_beams=3))
    assert (decoding.num_beams, decoding.length_penalty) == (3, 0.6)
    assert sources["length_penalty"] == FROM_PAPER


def test_sampling_without_a_beam_size_draws_with_one(tmp_path):
    sampling = DecodingOptions().replace(do_sample=True)
    assert resolve_decoding(None, sampling)[1]["num_beams"] == FROM_SAMPLING
    assert resolve_decoding(saved(tmp_path, num_beams=2), sampling)[0].num_beams == 2


def test_resolved_values_replace_the_settings_they_resolve():
    settings = {"num_beams": 1, "length_penalty": 0.6, "cache_implementation": "static"}
    resolved, _ = resolve_decoding(None, DecodingOptions().replace(**settings))
    assert resolved.settings() == {"num_beams": 1, "cache_implementation": "static"}
