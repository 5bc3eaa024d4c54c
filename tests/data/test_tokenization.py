import json
from itertools import chain
from types import SimpleNamespace

import pytest
from transformers import AutoTokenizer

from hf_vanilla.checkpoints.tokenizer_directory import save_tokenizer
from hf_vanilla.data.corpus import load_translation_split
from hf_vanilla.data.tokenization import (
    check_tokenizer_matches_model,
    config_kwargs_from_tokenizer,
    mean_tokens_per_sentence,
    round_trip_rate,
    tokenizer_fingerprint,
    train_tokenizer,
)

# Below the ~650 tokens the synthetic corpus's few words saturate, so that twice the size is still reached.
SMALL_VOCAB = 300


def both_languages(pairs) -> list[str]:
    return list(chain(pairs["source"], pairs["target"]))


@pytest.fixture(scope="module")
def train_texts(corpus_path):
    return both_languages(load_translation_split(corpus_path, "de", "en", "train"))


@pytest.fixture(scope="module")
def tokenizer(train_texts):
    return train_tokenizer(train_texts, vocab_size=SMALL_VOCAB, show_progress=False)


@pytest.fixture(scope="module")
def validation(corpus_path):
    return load_translation_split(corpus_path, "de", "en", "validation")


@pytest.mark.parametrize("column", ["source", "target"])
def test_round_trip_is_exact_on_whole_validation_set(tokenizer, validation, column):
    assert round_trip_rate(tokenizer, list(validation[column])) == 1.0


@pytest.fixture(scope="module")
def multi30k_tokenizer(multi30k_path):
    train = load_translation_split(multi30k_path, "de", "en", "train").select(range(2000))
    return train_tokenizer(both_languages(train), vocab_size=1000, show_progress=False)


@pytest.mark.parametrize("column", ["source", "target"])
def test_round_trip_is_exact_on_whole_real_validation_set(multi30k_tokenizer, multi30k_path, column):
    """Real captions hold what no word table does (odd spacing, rare characters): the real-data check."""
    texts = list(load_translation_split(multi30k_path, "de", "en", "validation")[column])
    assert len(texts) == 1014
    assert round_trip_rate(multi30k_tokenizer, texts) == 1.0


def test_round_trip_keeps_spaces_and_unseen_characters(tokenizer):
    text = "  Ein Mann  mit 漢字, émoji 🙂 und\ttab.  "
    ids = tokenizer(text)["input_ids"]
    assert tokenizer.unk_token_id not in ids
    assert tokenizer.decode(ids, skip_special_tokens=True) == text


def test_special_tokens_have_fixed_ids(tokenizer):
    assert tokenizer.convert_tokens_to_ids(["<pad>", "<s>", "</s>", "<unk>"]) == [0, 1, 2, 3]
    assert (
        tokenizer.pad_token_id,
        tokenizer.bos_token_id,
        tokenizer.eos_token_id,
        tokenizer.unk_token_id,
    ) == (
        0,
        1,
        2,
        3,
    )
    assert len(tokenizer) == SMALL_VOCAB


def test_eos_appended_to_source_and_target_without_bos(tokenizer):
    encoded = tokenizer(text=["Ein Hund läuft."], text_target=["A dog runs."])
    for ids in (encoded["input_ids"][0], encoded["labels"][0]):
        assert ids[-1] == tokenizer.eos_token_id
        assert ids.count(tokenizer.eos_token_id) == 1
        assert tokenizer.bos_token_id not in ids
    assert encoded["labels"][0][:-1] == tokenizer("A dog runs.", add_special_tokens=False)["input_ids"]


def test_autotokenizer_reload_gives_identical_ids(tokenizer, validation, tmp_path):
    reloaded = AutoTokenizer.from_pretrained(save_tokenizer(tokenizer, tmp_path / "tok"))
    texts = both_languages(validation)
    assert reloaded(texts)["input_ids"] == tokenizer(texts)["input_ids"]
    assert config_kwargs_from_tokenizer(reloaded) == config_kwargs_from_tokenizer(tokenizer)
    assert reloaded.unk_token_id == 3
    assert reloaded.model_max_length == tokenizer.model_max_length


def test_save_replaces_old_directory_and_leaves_no_staging(tokenizer, tmp_path):
    target = tmp_path / "tok"
    target.mkdir()
    (target / "stale.txt").write_text("from an older tokenizer")
    save_tokenizer(tokenizer, target)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["tok"]
    assert not (target / "stale.txt").exists()
    assert (target / "tokenizer.json").exists()


def test_failed_save_keeps_old_directory(tokenizer, tmp_path, monkeypatch):
    target = save_tokenizer(tokenizer, tmp_path / "tok")
    before = (target / "tokenizer.json").read_bytes()

    def crash_midway(directory, *args, **kwargs):
        (directory / "tokenizer.json").write_text("{half")
        raise OSError("disk full")

    monkeypatch.setattr(tokenizer, "save_pretrained", crash_midway)
    with pytest.raises(OSError, match="disk full"):
        save_tokenizer(tokenizer, target)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["tok"]
    assert (target / "tokenizer.json").read_bytes() == before


def test_training_is_deterministic(train_texts, tmp_path):
    vocab_files = []
    for run in ("a", "b"):
        trained = train_tokenizer(train_texts, vocab_size=SMALL_VOCAB, show_progress=False)
        vocab_files.append((save_tokenizer(trained, tmp_path / run) / "tokenizer.json").read_bytes())
    assert vocab_files[0] == vocab_files[1]
    assert len(json.loads(vocab_files[0])["model"]["vocab"]) == SMALL_VOCAB


def test_larger_vocabulary_gives_fewer_tokens(train_texts, tokenizer, validation):
    larger = train_tokenizer(train_texts, vocab_size=2 * SMALL_VOCAB, show_progress=False)
    texts = list(validation["target"])
    assert mean_tokens_per_sentence(larger, texts) < mean_tokens_per_sentence(tokenizer, texts)


def test_config_kwargs_from_tokenizer(tokenizer):
    assert config_kwargs_from_tokenizer(tokenizer) == {
        "vocab_size": SMALL_VOCAB,
        "pad_token_id": 0,
        "bos_token_id": 1,
        "eos_token_id": 2,
        "decoder_start_token_id": 1,
        "tokenizer_fingerprint": tokenizer_fingerprint(tokenizer),
    }


def test_matching_config_passes_check(tokenizer):
    check_tokenizer_matches_model(tokenizer, SimpleNamespace(**config_kwargs_from_tokenizer(tokenizer)))


@pytest.mark.parametrize(
    ("field", "wrong"),
    [("vocab_size", 37000), ("pad_token_id", 1), ("eos_token_id", 0), ("decoder_start_token_id", 2)],
)
def test_mismatched_config_names_field_and_both_values(tokenizer, field, wrong):
    config = SimpleNamespace(**{**config_kwargs_from_tokenizer(tokenizer), field: wrong})
    right = config_kwargs_from_tokenizer(tokenizer)[field]
    with pytest.raises(ValueError, match=f"{field}: tokenizer has {right}, model config has {wrong}"):
        check_tokenizer_matches_model(tokenizer, config)


def test_fingerprint_tells_vocabularies_of_one_size_apart_and_survives_a_reload(
    tokenizer, train_texts, tmp_path
):
    german_only = train_texts[: len(train_texts) // 2]
    other = train_tokenizer(german_only, vocab_size=SMALL_VOCAB, show_progress=False)
    assert len(other) == len(tokenizer)
    assert tokenizer_fingerprint(other) != tokenizer_fingerprint(tokenizer)
    save_tokenizer(tokenizer, tmp_path)
    assert tokenizer_fingerprint(AutoTokenizer.from_pretrained(tmp_path)) == tokenizer_fingerprint(tokenizer)
    assert len(tokenizer_fingerprint(tokenizer)) == 16

    # The sizes and ids agree, so only the fingerprint tells the other vocabulary apart.
    config = SimpleNamespace(**config_kwargs_from_tokenizer(tokenizer))
    with pytest.raises(ValueError, match="not the one the model was trained with"):
        check_tokenizer_matches_model(other, config)
    config.tokenizer_fingerprint = None  # a config saved before fingerprints: not checked
    check_tokenizer_matches_model(other, config)
