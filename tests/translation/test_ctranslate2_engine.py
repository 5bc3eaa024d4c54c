"""The CTranslate2 engine decodes as the transformers engine does: every trainable variant converts, greedy
and beam search give the same translations and n-best scores in float32, each option means the same, and what
CTranslate2 cannot do is refused before decoding. The models are sharpened (conftest.py), as a trained model's
outputs are peaked, so that float rounding cannot flip a close call; an untrained model also runs into its
output limits."""

import json
import logging
import multiprocessing
import shutil

import pytest
import torch
from conftest import DE_EN, run_script, sharpened

from hf_vanilla import VanillaTransformerConfig, VanillaTransformerForConditionalGeneration
from hf_vanilla.checkpoints.cards import set_decoding_defaults
from hf_vanilla.checkpoints.loading import load_tokenizer
from hf_vanilla.data.corpus import load_translation_split
from hf_vanilla.files import atomic_directory
from hf_vanilla.model.decoding import DEFAULT_DECODING, DEFAULT_MAX_TOKENS
from hf_vanilla.translation.decoding import Batching
from hf_vanilla.translation.engines import EngineSettings, load_engine

ctranslate2 = pytest.importorskip("ctranslate2")
from hf_vanilla.translation.engines.ctranslate2_engine import (  # noqa: E402
    cached_conversion,
    checkpoint_digest,
)

VARIANTS = {
    "post-LN, tied (the paper)": {},
    "pre-LN": {"pre_layernorm": True},
    "untied output projection": {"tie_word_embeddings": False},
    "right to left": {"right_to_left": True},
}


def ctranslate2_float32(cache_dir) -> EngineSettings:
    return EngineSettings("ctranslate2", "cpu", compute_type="float32", ctranslate2_dir=cache_dir)


def save_variant(directory, tokenizer_dir, **overrides):
    """A sharpened tiny model with `overrides`, its LayerNorms scrambled (a misplaced one shows), saved with
    the tokenizer of `tokenizer_dir`. The decoder start token's embedding is zero: an untrained pre-LN model
    would otherwise carry it through its residual stream and say it again and again (blank translations)."""
    tokenizer = load_tokenizer(tokenizer_dir)
    base = VanillaTransformerConfig.from_pretrained(tokenizer_dir)
    model = VanillaTransformerForConditionalGeneration(
        VanillaTransformerConfig.from_dict({**base.to_dict(), **overrides})
    )
    generator = torch.Generator().manual_seed(0)
    with torch.no_grad():
        for name, parameter in model.named_parameters():
            if "layer_norm" in name:
                parameter.add_(0.2 * torch.randn(parameter.shape, generator=generator))
        model.model.shared.weight[model.config.decoder_start_token_id].zero_()
    sharpened(model).save_pretrained(directory)
    tokenizer.save_pretrained(directory)
    return directory


@pytest.fixture(scope="module")
def sources(corpus_path):
    """Validation sources and blank lines: sentences of many lengths batched together."""
    sentences = list(load_translation_split(corpus_path, "de", "en", "validation")["source"])[:40]
    return [*sentences[:20], "", "   ", *sentences[20:]]


@pytest.fixture(scope="module")
def cache_dir(tmp_path_factory):
    return tmp_path_factory.mktemp("ctranslate2-cache")


@pytest.fixture(scope="module", params=list(VARIANTS))
def engines(request, tiny_model_dir, tmp_path_factory, cache_dir):
    """The transformers engine and the CTranslate2 engine (float32) of one variant."""
    directory = save_variant(tmp_path_factory.mktemp("variant"), tiny_model_dir, **VARIANTS[request.param])
    return (
        load_engine(directory, EngineSettings(device="cpu")),
        load_engine(directory, ctranslate2_float32(cache_dir)),
    )


def test_every_variant_scores_tokens_as_the_model_does(engines, tokenizer):
    """CTranslate2's log-probabilities of given translations are the model's: the weights are where they
    belong."""
    reference, engine = engines
    sources = ["Ein Hund rennt.", "Zwei Kinder spielen im Park."]
    targets = ["A dog runs.", "Two children play."]
    source_ids, target_ids = tokenizer(sources)["input_ids"], tokenizer(targets)["input_ids"]
    results = engine.translator.score_batch(
        [tokenizer.convert_ids_to_tokens(ids) for ids in source_ids],
        [tokenizer.convert_ids_to_tokens(ids[:-1]) for ids in target_ids],  # CTranslate2 adds the end token
    )
    for source, target, result in zip(source_ids, target_ids, results, strict=True):
        with torch.no_grad():
            logits = reference.model(
                input_ids=torch.tensor([source]), labels=torch.tensor([target])
            ).logits[0]
        expected = logits.log_softmax(-1).gather(-1, torch.tensor(target)[:, None])[:, 0]
        torch.testing.assert_close(torch.tensor(result.log_probs), expected, rtol=0, atol=1e-4)


@pytest.mark.parametrize("num_beams", [1, 4])
def test_every_variant_translates_as_generate_does_greedy_and_beam(engines, sources, num_beams):
    reference, engine = engines
    options = DEFAULT_DECODING.replace(num_beams=num_beams, length_penalty=0.6 if num_beams > 1 else None)
    expected = reference.translate(sources, options)
    assert engine.translate(sources, options) == expected
    assert expected[20:22] == ["", ""]  # blank lines stay blank
    assert len(set(expected)) > 5


def test_nbest_lists_and_their_scores_are_generates(engines, sources):
    reference, engine = engines
    options = DEFAULT_DECODING.replace(num_beams=4, length_penalty=0.6)
    expected = reference.translate_nbest(sources[:8], options)
    found = engine.translate_nbest(sources[:8], options)
    assert [[text for text, _ in hypotheses] for hypotheses in found] == [
        [text for text, _ in hypotheses] for hypotheses in expected
    ]
    torch.testing.assert_close(
        torch.tensor([[score for _, score in hypotheses] for hypotheses in found]),
        torch.tensor([[score for _, score in hypotheses] for hypotheses in expected]),
        rtol=0,
        atol=1e-4,
    )


@pytest.fixture(scope="module")
def paper_engines(tiny_model_dir, tmp_path_factory, cache_dir):
    directory = save_variant(tmp_path_factory.mktemp("paper"), tiny_model_dir)
    engines = (
        load_engine(directory, settings)
        for settings in (EngineSettings(device="cpu"), ctranslate2_float32(cache_dir))
    )
    return directory, *engines


@pytest.mark.parametrize(
    "settings",
    [
        # the length penalty divides by length**lp, the end token counted
        {"num_beams": 4, "length_penalty": 0.0},
        {"num_beams": 4, "length_penalty": 2.0},
        {"num_beams": 3, "length_penalty": 1.0, "max_new_tokens": 7},  # one limit for all
        {"num_beams": 1, "max_new_tokens": 3},
        {"num_beams": 2, "extra_output_tokens": 2},  # each sentence its own source length + 2
        {"num_beams": 4, "early_stopping": True, "min_new_tokens": 4},
        {"max_tokens": 40, "max_new_tokens": 12},  # small batches, and the paper's beam (none saved)
    ],
)
def test_each_option_means_what_it_means_to_generate(paper_engines, sources, settings):
    _, reference, engine = paper_engines
    settings = dict(settings)
    batching = Batching(settings.pop("max_tokens", DEFAULT_MAX_TOKENS), show_progress=False)
    options = DEFAULT_DECODING.replace(**settings)
    assert engine.translate(sources, options, batching) == reference.translate(sources, options, batching)


def test_both_engines_take_what_the_options_leave_open_from_the_checkpoint_else_the_paper(
    paper_engines, sources, cache_dir, tmp_path
):
    directory, reference, engine = paper_engines  # its generation config saves no beam: the paper's 4 / 0.6
    paper = DEFAULT_DECODING.replace(num_beams=4, length_penalty=0.6)
    assert (
        engine.translate(sources, DEFAULT_DECODING)
        == reference.translate(sources, DEFAULT_DECODING)
        == reference.translate(sources, paper)
    )
    assert [len(each) for each in engine.translate_nbest(sources[:3], DEFAULT_DECODING)] == [4, 4, 4]
    chosen = shutil.copytree(directory, tmp_path / "chosen")
    set_decoding_defaults(chosen, 3, 1.0)
    reference, engine = (
        load_engine(chosen, each) for each in (EngineSettings(device="cpu"), ctranslate2_float32(cache_dir))
    )
    saved = DEFAULT_DECODING.replace(num_beams=3, length_penalty=1.0)
    assert (
        engine.translate(sources, DEFAULT_DECODING)
        == reference.translate(sources, DEFAULT_DECODING)
        == reference.translate(sources, saved)
    )
    for found in (
        engine.translate_nbest(sources[:3], DEFAULT_DECODING),
        reference.translate_nbest(sources[:3], DEFAULT_DECODING),
    ):
        assert [len(each) for each in found] == [3, 3, 3]
    # greedy search takes no length penalty
    greedy = DEFAULT_DECODING.replace(num_beams=1, length_penalty=2.0)
    assert engine.translate(sources, greedy) == reference.translate(
        sources, DEFAULT_DECODING.replace(num_beams=1)
    )


def test_each_sentence_stops_at_its_own_source_length_plus_extra(paper_engines, tokenizer):
    """An untrained model repeats itself to the limit: batched with a long sentence, a short one still stops
    at its own limit, where the long one's limit for all would let it run on."""
    _, reference, engine = paper_engines
    sources = ["Ein Hund.", "Ein Hund rennt über die große grüne Wiese zu seinem Besitzer."]
    options = DEFAULT_DECODING.replace(num_beams=4, extra_output_tokens=3)
    own_limits = engine.translate(sources, options)
    assert own_limits == reference.translate(sources, options)
    longest_limit = options.replace(max_new_tokens=len(tokenizer(sources[1])["input_ids"]) + 3)
    one_limit = engine.translate(sources, longest_limit)
    assert one_limit == reference.translate(sources, longest_limit)
    assert len(own_limits[0]) < len(one_limit[0]) and own_limits[1] == one_limit[1]


@pytest.mark.parametrize("skip_long_lines", [False, True])
def test_lines_longer_than_the_positions_are_cut_or_left_blank_with_the_same_warning(
    tiny_model_dir, tmp_path, cache_dir, caplog, skip_long_lines
):
    directory = save_variant(tmp_path / "short", tiny_model_dir, max_position_embeddings=24)
    long_line = " ".join(["Ein Hund rennt über die Wiese."] * 8)
    sources = ["Ein Hund.", long_line, ""]
    options = DEFAULT_DECODING.replace(num_beams=2, skip_long_lines=skip_long_lines)
    found = {}
    float32 = {"transformers": EngineSettings(device="cpu"), "ctranslate2": ctranslate2_float32(cache_dir)}
    for name, settings in float32.items():
        engine = load_engine(directory, settings)
        caplog.clear()
        with caplog.at_level(logging.WARNING, logger="hf_vanilla.translation.decoding"):
            found[name] = engine.translate(sources, options)
        assert "1 of 3 lines are longer than the model's 24 positions" in caplog.text
        assert engine.max_source_tokens == 24 < len(engine.encode([long_line])[0])
    assert found["ctranslate2"] == found["transformers"]
    assert (found["ctranslate2"][1] == "") == skip_long_lines


@pytest.mark.parametrize(
    "settings, refusal",
    [
        ({"do_sample": True}, "no sampling"),
        ({"early_stopping": False}, "early_stopping=True"),
        ({"num_return_sequences": 2}, "no equivalent of generate's num_return_sequences"),
        ({"cache_implementation": "static"}, "cache_implementation 'static' is generate's"),
    ],
)
def test_what_ctranslate2_cannot_do_is_refused_before_decoding(paper_engines, settings, refusal):
    _, _, engine = paper_engines
    with pytest.raises(ValueError, match=refusal):
        engine.translate(["Ein Hund."], DEFAULT_DECODING.replace(**settings))


def test_int8_translates_and_auto_chooses_and_logs_a_compute_type(paper_engines, sources, cache_dir, caplog):
    directory, reference, _ = paper_engines
    with caplog.at_level(logging.INFO, logger="hf_vanilla.translation.engines.ctranslate2_engine"):
        engine = load_engine(directory, EngineSettings("ctranslate2", "cpu", ctranslate2_dir=cache_dir))
    chosen = engine.describe()["precision"]
    assert chosen in ctranslate2.get_supported_compute_types("cpu")
    assert f"ctranslate2 engine: {chosen} on cpu (auto: CTranslate2's fastest of" in caplog.text
    int8 = load_engine(
        directory, EngineSettings("ctranslate2", "cpu", compute_type="int8", ctranslate2_dir=cache_dir)
    )
    translations = int8.translate(sources, DEFAULT_DECODING.replace(num_beams=4))
    # What int8 costs in quality is measured on a trained model (docs/speed.md): an untrained one has only
    # close calls.
    assert int8.describe()["precision"].startswith("int8") and len(translations) == len(sources)
    assert translations[20:22] == ["", ""] and all(translations[:20])


def test_loading_leaves_torchs_threads_as_they_were(paper_engines, cache_dir):
    """CTranslate2 sets the process's OpenMP threads to a replica's (one, here): a model trained in the same
    process afterwards (the student after its teacher translated) would run on one thread."""
    directory, _, _ = paper_engines
    threads = torch.get_num_threads()
    torch.set_num_threads(2)
    try:
        settings = EngineSettings("ctranslate2", "cpu", ctranslate2_dir=cache_dir, threads=2)
        load_engine(directory, settings).translate(["Ein Hund."], DEFAULT_DECODING)
        assert torch.get_num_threads() == 2
    finally:
        torch.set_num_threads(threads)


@pytest.mark.parametrize(
    "settings, problem",
    [
        ({"engine": "onnx"}, "unknown engine 'onnx'"),
        ({"compute_type": "int8"}, "compute type int8 is the ctranslate2 engine's"),
        ({"engine": "ctranslate2", "dtype": "bfloat16"}, "dtype bfloat16 is the transformers engine's"),
        ({"engine": "ctranslate2", "compute_type": "int4"}, "unknown compute type 'int4'"),
    ],
)
def test_settings_that_cannot_work_are_named(settings, problem):
    with pytest.raises(ValueError, match=problem):
        EngineSettings(**settings)


def test_a_compute_type_the_device_lacks_is_named(paper_engines, cache_dir):
    directory = paper_engines[0]
    if "float16" in ctranslate2.get_supported_compute_types("cpu"):
        pytest.skip("this CPU runs float16")
    with pytest.raises(ValueError, match="compute type float16 is not supported on this cpu"):
        load_engine(
            directory, EngineSettings("ctranslate2", "cpu", compute_type="float16", ctranslate2_dir=cache_dir)
        )


def test_the_conversion_is_cached_outside_the_checkpoint_and_a_damaged_copy_is_rebuilt(
    paper_engines, cache_dir, caplog, sources
):
    directory, reference, _ = paper_engines
    converted = cache_dir / checkpoint_digest(directory)
    assert converted.is_dir() and not any(path.name.startswith("model.bin") for path in directory.iterdir())
    settings = ctranslate2_float32(cache_dir)
    with caplog.at_level(logging.INFO, logger="hf_vanilla.translation.engines.ctranslate2_engine"):
        load_engine(directory, settings)
    assert "converting" not in caplog.text  # cached
    weights = converted / "model.bin"
    weights.write_bytes(weights.read_bytes()[: weights.stat().st_size // 2])
    with caplog.at_level(logging.WARNING, logger="hf_vanilla.translation.engines.ctranslate2_engine"):
        engine = load_engine(directory, settings)
    assert "does not load" in caplog.text and "converting again" in caplog.text
    assert engine.translate(sources, DEFAULT_DECODING) == reference.translate(sources, DEFAULT_DECODING)


def test_two_conversions_at_once_leave_one_whole_copy(paper_engines, tmp_path):
    """Two processes (forked: no new imports) convert the same checkpoint into one cache at the same time."""
    with multiprocessing.get_context("fork").Pool(2) as pool:
        converted = pool.starmap(cached_conversion, [(paper_engines[0], tmp_path)] * 2)
    assert converted[0] == converted[1]
    assert [path.name for path in tmp_path.iterdir()] == [converted[0].name]  # no staging left behind
    ctranslate2.Translator(str(converted[0]))


def test_a_directory_published_first_is_kept(tmp_path):
    for content in ("first", "second"):
        with atomic_directory(tmp_path / "model", keep_existing=True) as staging:
            (staging / "weights").write_text(content)
    assert (tmp_path / "model" / "weights").read_text() == "first"
    assert [path.name for path in tmp_path.iterdir()] == ["model"]



def test_translate_evaluate_and_select_decode_with_either_engine(
    paper_engines, corpus_path, cache_dir, tmp_path
):
    directory = paper_engines[0]
    ctranslate2_flags = (
        "--engine", "ctranslate2", "--compute-type", "float32", "--ctranslate2-dir", cache_dir
    )
    lines = "Ein Hund rennt.\n\nZwei Kinder spielen im Park.\n"
    translations = [
        run_script("translate.py", directory, "--quiet", *flags, stdin=lines, check=True).stdout
        for flags in ((), ctranslate2_flags)
    ]
    assert translations[0] == translations[1] and translations[1].split("\n")[1] == ""
    data = ("--dataset", corpus_path, *DE_EN, "--first-pairs", "4")
    run_script("evaluate_bleu.py", directory, *data, "--output-dir", tmp_path, *ctranslate2_flags, check=True)
    report = json.loads((tmp_path / "test.de-en.json").read_text())
    assert (report["engine"], report["precision"], report["sentences"]) == ("ctranslate2", "float32", 4)
    selection = tmp_path / "selection"
    run_script(
        "select_checkpoint.py", directory, *data, "--num-beams", "1", "2", "--output-dir", selection,
        *ctranslate2_flags, check=True,
    )  # fmt: skip
    assert len(json.loads((selection / "selection.json").read_text())["validation"]) == 2


@pytest.mark.parametrize(
    "flags, refusal",
    [
        (
            ("--engine", "ctranslate2", "--ensemble", "{model}"),
            "an ensemble mixes its members' scores into the decoded model's by logits processors, which the "
            "ctranslate2 engine cannot (logits processors): decode with --engine transformers",
        ),
        (("--compute-type", "int8"), "compute type int8 is the ctranslate2 engine's"),
    ],
)
def test_what_an_engine_cannot_do_is_one_line_before_any_model_loads(paper_engines, flags, refusal):
    directory = paper_engines[0]
    result = run_script(
        "translate.py", directory, *(flag.format(model=directory) for flag in flags), stdin="Ein Hund.\n"
    )
    assert result.returncode == 1 and result.stderr.startswith(f"error: {refusal}")
