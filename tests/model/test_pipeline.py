import pytest
from transformers import AutoModelForSeq2SeqLM, AutoTokenizer, pipeline

from hf_vanilla.model.pipeline import VanillaTranslationPipeline
from hf_vanilla.translation.decoding import QUIET, translate_sentences

SOURCES = ["Ein Mann fährt Fahrrad.", "", "Zwei Hunde spielen im Schnee.", "Kinder."]



@pytest.fixture(scope="module")
def translator(tiny_model_dir):
    return pipeline("vanilla-translation", model=str(tiny_model_dir), device="cpu")


def record_generation_configs(translator, monkeypatch):
    """Make `generate` echo its input and record the generation config of each call."""
    configs = []

    def echo(input_ids, attention_mask, generation_config, **kwargs):
        configs.append(generation_config)
        return input_ids

    monkeypatch.setattr(translator.model, "generate", echo)
    return configs


def test_task_name_builds_our_pipeline_and_returns_translation_text(translator):
    assert isinstance(translator, VanillaTranslationPipeline)
    result = translator("Ein Hund rennt.", max_new_tokens=4)
    assert len(result) == 1 and set(result[0]) == {"translation_text"}
    assert isinstance(result[0]["translation_text"], str) and result[0]["translation_text"]


@pytest.mark.parametrize("cache", ["dynamic", "static"])
@pytest.mark.parametrize("num_beams", [1, 2])
def test_batched_list_matches_evaluation_translations_in_order(translator, num_beams, cache, monkeypatch):
    """In order, as translate_sentences (dynamic cache) translates; the static cache
    (compiled on a GPU) too."""
    static = {"cache_implementation": "static"} if cache == "static" else {}
    caches, generate = [], translator.model.generate

    def recording_generate(*args, generation_config, **kwargs):
        caches.append(generation_config.cache_implementation)
        return generate(*args, generation_config=generation_config, **kwargs)

    monkeypatch.setattr(translator.model, "generate", recording_generate)
    results = translator(SOURCES, batch_size=3, num_beams=num_beams, max_new_tokens=6, **static)
    monkeypatch.undo()
    assert set(caches) == {static.get("cache_implementation")}
    expected = translate_sentences(
        translator.model,
        translator.tokenizer,
        SOURCES,
        batching=QUIET,
        num_beams=num_beams,
        max_new_tokens=6,
    )
    assert [result["translation_text"] for result in results] == expected
    assert expected[1] == ""


def test_defaults_are_the_papers_beam_and_output_length(translator, monkeypatch):
    configs = record_generation_configs(translator, monkeypatch)
    translator("Zwei Hunde spielen im Schnee.")
    assert (configs[0].num_beams, configs[0].length_penalty) == (4, 0.6)
    source_length = len(translator.tokenizer("Zwei Hunde spielen im Schnee.")["input_ids"])
    assert configs[0].max_new_tokens == source_length + 50
    assert translator.model.generation_config.num_beams in (None, 1)  # the model's own config is untouched


def test_construction_settings_apply_and_call_settings_override_them(tiny_model_dir, monkeypatch):
    greedy = pipeline("vanilla-translation", model=str(tiny_model_dir), num_beams=1, max_new_tokens=3)
    configs = record_generation_configs(greedy, monkeypatch)
    greedy(["Ein Hund.", "Zwei Katzen."], batch_size=2)
    greedy("Ein Hund.", max_new_tokens=1)
    assert [(config.num_beams, config.max_new_tokens) for config in configs] == [(1, 3), (1, 1)]
    assert configs[0].length_penalty != 0.6  # no paper default added once num_beams is set


def test_several_translations_per_input(translator):
    results = translator(["Ein Hund.", "Kinder."], num_beams=3, num_return_sequences=2, max_new_tokens=3)
    assert [len(translations) for translations in results] == [2, 2]
    assert all(
        set(translation) == {"translation_text"} for translations in results for translation in translations
    )


def test_direct_construction_and_bad_input(tiny_model_dir):
    model = AutoModelForSeq2SeqLM.from_pretrained(tiny_model_dir)
    translator = VanillaTranslationPipeline(
        model=model, tokenizer=AutoTokenizer.from_pretrained(tiny_model_dir)
    )
    assert translator(["", "   "], max_new_tokens=3) == [{"translation_text": ""}, {"translation_text": ""}]
    assert translator([]) == []
    with pytest.raises(TypeError, match="string or a list of strings"):
        translator([3])


def test_an_input_longer_than_the_model_is_cut_with_a_warning(tiny_model_dir, caplog):
    model = AutoModelForSeq2SeqLM.from_pretrained(tiny_model_dir)
    model.config.max_position_embeddings = 24  # the limit the model checks its inputs against
    tokenizer = AutoTokenizer.from_pretrained(tiny_model_dir)
    translator = VanillaTranslationPipeline(model=model, tokenizer=tokenizer)
    long_input = " ".join(["Hund"] * 60)
    with caplog.at_level("WARNING"):
        results = translator(["Ein Hund.", long_input], num_beams=1)
    assert all(result["translation_text"] for result in results)
    assert [record.getMessage() for record in caplog.records if "positions" in record.getMessage()] == [
        f"an input of {len(long_input)} characters is longer than the model's 24 positions: translating its "
        "first 24 tokens"
    ]


def test_a_tokenizer_with_another_vocabulary_is_refused(tiny_model_dir, tmp_path):
    tokenizer = AutoTokenizer.from_pretrained(tiny_model_dir)
    vocabulary = tokenizer.get_vocab()
    model = AutoModelForSeq2SeqLM.from_pretrained(tiny_model_dir)
    model.config.tokenizer_fingerprint = "0" * 16
    with pytest.raises(ValueError, match="not the one the model was trained with"):
        VanillaTranslationPipeline(model=model, tokenizer=tokenizer)
    model.config.tokenizer_fingerprint = None  # saved before fingerprints: not checked
    assert VanillaTranslationPipeline(model=model, tokenizer=tokenizer).tokenizer.get_vocab() == vocabulary
