"""The vocabulary shortlist: built from pairs, it holds what it must; saved, it loads back the same; decoded
with (`--vocab-map`), no output token falls outside it; a checkpoint that has one decodes as before without
the flag; an engine that cannot use one refuses it in one line."""

import shutil

import pytest
from conftest import run_script, sharpened
from transformers import AutoModelForSeq2SeqLM

from hf_vanilla.checkpoints.loading import load_tokenizer
from hf_vanilla.data.corpus import load_translation_split
from hf_vanilla.model.decoding import DecodingOptions
from hf_vanilla.translation.engines import EngineSettings, load_engine
from hf_vanilla.translation.shortlist import (
    VOCAB_MAP_FILE,
    Shortlist,
    ShortlistSize,
    build_shortlist,
    load_shortlist,
    save_shortlist,
    tokenized_pairs,
)

pytest.importorskip("ctranslate2")
BEAM = DecodingOptions(num_beams=4)
SMALL = ShortlistSize(top_k=3, frequent=5)  # far fewer tokens than the model's 600: the map bites


def ctranslate2_settings(cache_dir, vocab_map: bool) -> EngineSettings:
    return EngineSettings(
        "ctranslate2", "cpu", compute_type="float32", ctranslate2_dir=cache_dir, vocab_map=vocab_map
    )


@pytest.fixture(scope="module")
def training_pairs(corpus_path):
    pairs = load_translation_split(corpus_path, "de", "en", "train")
    return list(pairs["source"]), list(pairs["target"])


@pytest.fixture(scope="module")
def sources(corpus_path):
    return list(load_translation_split(corpus_path, "de", "en", "validation")["source"])[:12]


@pytest.fixture(scope="module")
def model_with_map(tiny_model_dir, training_pairs, tmp_path_factory):
    """The tiny model, sharpened (its outputs peaked, as a trained model's are), saved with a small shortlist
    of the training pairs."""
    directory = shutil.copytree(tiny_model_dir, tmp_path_factory.mktemp("shortlisted") / "model")
    sharpened(AutoModelForSeq2SeqLM.from_pretrained(tiny_model_dir)).save_pretrained(directory)
    tokenized = tokenized_pairs(load_tokenizer(directory), *training_pairs)
    save_shortlist(build_shortlist(*tokenized, SMALL), directory / VOCAB_MAP_FILE)
    return directory


@pytest.fixture(scope="module")
def cache_dir(tmp_path_factory):
    return tmp_path_factory.mktemp("ctranslate2-cache")


def test_a_source_token_lists_the_target_token_it_always_comes_with_and_every_list_the_frequent_ones():
    sources = [["Hund", "bellt"], ["Hund", "schläft"], ["Katze", "schläft"], ["Katze", "bellt"]]
    targets = [["dog", "barks", "."], ["dog", "sleeps", "."], ["cat", "sleeps", "."], ["cat", "barks", "."]]
    shortlist = build_shortlist(sources, targets, ShortlistSize(top_k=1, frequent=1))
    assert shortlist.frequent == (".",)
    assert shortlist.by_source["Hund"] == ("dog",) and shortlist.by_source["Katze"] == ("cat",)
    assert shortlist.allowed(["Hund"]) == {"dog", ".", "<unk>", "<s>", "</s>"}
    assert shortlist.allowed(["unseen"]) == {".", "<unk>", "<s>", "</s>"}


def test_on_the_corpus_a_source_word_allows_its_translation_and_every_one_the_frequent_tokens(
    model_with_map, training_pairs
):
    sources, targets = tokenized_pairs(load_tokenizer(model_with_map), *training_pairs)
    shortlist = load_shortlist(model_with_map / VOCAB_MAP_FILE)
    assert len(shortlist.frequent) == SMALL.frequent
    assert {".", "</s>"} <= set(shortlist.frequent)  # in every pair
    for word, translation in (("ĠHund", "Ġdog"), ("ĠKatze", "Ġcat")):  # of the synthetic corpus's tables
        companions = [target for source, target in zip(sources, targets, strict=True) if word in source]
        assert companions and all(translation in target for target in companions)
        assert translation in shortlist.by_source[word] and translation in shortlist.allowed([word])


def test_a_saved_shortlist_loads_back_the_same(tmp_path):
    shortlist = Shortlist(("</s>", "."), {"Hund": ("dog", "Ġdog"), "ĠKatze": ()})
    assert load_shortlist(save_shortlist(shortlist, tmp_path / VOCAB_MAP_FILE)) == shortlist
    assert (tmp_path / VOCAB_MAP_FILE).read_text() == "\t</s> .\nHund\tdog Ġdog\nĠKatze\t\n"


def test_a_token_with_a_space_is_refused(tmp_path):
    with pytest.raises(ValueError, match="a vocabulary map's tokens are words without spaces"):
        save_shortlist(Shortlist(("a b",), {}), tmp_path / VOCAB_MAP_FILE)


def test_with_the_map_no_output_token_falls_outside_the_shortlist(model_with_map, sources, cache_dir):
    shortlist = load_shortlist(model_with_map / VOCAB_MAP_FILE)
    outside = []
    for vocab_map in (False, True):
        engine = load_engine(model_with_map, ctranslate2_settings(cache_dir, vocab_map))
        for source_ids in engine.encode(sources):  # one at a time: CTranslate2 allows a batch its union
            allowed = shortlist.allowed(engine.tokens[index] for index in source_ids)
            [output] = engine.translate_encoded([source_ids], BEAM)
            outside.append(sorted({engine.tokens[index] for index in output} - allowed))
    without, within = outside[: len(sources)], outside[len(sources) :]
    assert any(without)  # the test can fail: unmapped, the model says other tokens
    assert within == [[]] * len(sources)


def test_without_the_flag_a_checkpoint_with_a_map_decodes_as_the_reference(
    model_with_map, sources, cache_dir
):
    reference = load_engine(model_with_map, EngineSettings(device="cpu")).translate(sources, BEAM)
    engine = load_engine(model_with_map, ctranslate2_settings(cache_dir, vocab_map=False))
    assert engine.translate(sources, BEAM) == reference


def test_an_engine_that_cannot_use_a_map_refuses_it_in_one_line():
    with pytest.raises(ValueError) as refused:
        EngineSettings(vocab_map=True)
    assert str(refused.value) == (
        "--vocab-map decodes within the checkpoint's shortlist, which the transformers engine cannot "
        "(vocabulary map): decode with --engine ctranslate2"
    )


def test_a_checkpoint_without_a_map_is_named(tiny_model_dir, cache_dir):
    with pytest.raises(FileNotFoundError, match=f"has no {VOCAB_MAP_FILE} for --vocab-map"):
        load_engine(tiny_model_dir, ctranslate2_settings(cache_dir, vocab_map=True))


def test_translate_refuses_the_flag_for_the_transformers_engine(model_with_map):
    run = run_script("translate.py", model_with_map, "--vocab-map", stdin="Ein Hund.\n")
    assert run.returncode != 0
    last_line = run.stderr.strip().splitlines()[-1]
    assert last_line.startswith("error: --vocab-map decodes within the checkpoint's shortlist, which the")
