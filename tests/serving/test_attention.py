"""POST /attention's work without a server: which engine weighs a translation (the serving one where it has
the attention ability, else the reference model loaded beside it, once, on first use), and the reference
engine weighing a translation made by another."""

import threading
import time
from concurrent.futures import ThreadPoolExecutor

import pytest
import torch

from hf_vanilla.checkpoints.loading import load_model_and_tokenizer
from hf_vanilla.model.decoding import DecodingOptions
from hf_vanilla.serving.attention import AttentionModel, AttentionQuery, attention_settings
from hf_vanilla.translation.attention import SentenceAttentions
from hf_vanilla.translation.engines import ATTENTION, NBEST_SCORES, EngineSettings, TransformersEngine

from .test_batching import EchoEngine

OPTIONS = DecodingOptions(num_beams=1)
WITHOUT_ATTENTION = EngineSettings("ctranslate2", compute_type="int8", device="cpu", threads=2)


class Abilities:
    """An engine as the choice of a weigher sees it: its abilities, and what a log line names."""

    def __init__(self, *abilities: str):
        self.abilities = frozenset(abilities)

    def describe(self) -> dict[str, str]:
        return {"engine": "fake", "device": "cpu", "precision": "float32"}


def test_an_engine_with_attention_weighs_its_own_translations_and_nothing_loads():
    serving = Abilities(ATTENTION, NBEST_SCORES)
    beside = AttentionModel(lambda: pytest.fail("the model beside loaded"))
    with beside.weigher(serving) as weigher:
        assert weigher is serving


def test_the_model_beside_loads_once_on_first_use_and_weighs_for_one_worker_at_a_time():
    loaded, inside, most_inside = [], [0], [0]
    counting = threading.Lock()

    def load():
        loaded.append(Abilities(ATTENTION))
        return loaded[-1]

    beside = AttentionModel(load)
    assert loaded == []  # nothing until attention is asked for

    def count(step: int) -> None:
        with counting:
            inside[0] += step
            most_inside[0] = max(most_inside[0], inside[0])

    def weigh(_):
        with beside.weigher(Abilities(NBEST_SCORES)) as weigher:
            count(1)
            time.sleep(0.01)  # long enough for another worker to come in, were it let in
            count(-1)
            return weigher

    with ThreadPoolExecutor(4) as pool:
        weighers = list(pool.map(weigh, range(16)))
    assert len(loaded) == 1 and all(weigher is loaded[0] for weigher in weighers)
    assert most_inside[0] == 1


class Weigher(Abilities):
    """An engine with attention that weighs each translation given it evenly over the source, and records
    what it was given."""

    def __init__(self):
        super().__init__(ATTENTION)
        self.given = []

    def forced_attention(self, source_ids, output_ids, text):
        self.given.append((source_ids, output_ids, text))
        even = torch.full((1, len(output_ids), len(source_ids)), 1 / len(source_ids))
        return SentenceAttentions(source_ids, [], output_ids, text, {"cross": [even, even]})


def test_an_engine_without_attention_translates_and_the_model_beside_weighs_its_translation():
    weigher = Weigher()
    query = AttentionQuery("a b", OPTIONS, heads=False, max_tokens=8, beside=AttentionModel(lambda: weigher))
    answer = query(EchoEngine())
    assert weigher.given == [(["a", "b", "</s>"], ["A", "B"], "A B")]
    assert answer["translation_text"] == "A B" and answer["output_tokens"] == ["A", "B"]
    assert (answer["translation_engine"], answer["attention_engine"]) == ("echo", "fake")
    assert answer["cross_attention"] == [[[0.3333] * 3] * 2] * 2


def test_the_weigher_is_the_reference_engine_on_the_serving_engines_device_and_threads():
    settings = attention_settings(WITHOUT_ATTENTION)
    assert (settings.engine, settings.device, settings.threads) == ("transformers", "cpu", 2)
    assert settings.dtype == "float32"


def test_a_translation_weighed_from_its_ids_without_the_start_token_is_weighed_as_its_own(tiny_model_dir):
    engine = TransformersEngine(*load_model_and_tokenizer(tiny_model_dir, "cpu"))
    [source_ids] = engine.encode(["Ein Hund läuft über die Wiese."])
    greedy = DecodingOptions(num_beams=1)
    own = engine.attention(source_ids, greedy)
    [output_ids] = engine.translate_encoded([source_ids], greedy)
    assert output_ids[0] == engine.config.decoder_start_token_id
    # Another engine's ids (CTranslate2's) start with the first token written, not the decoder start.
    forced = engine.forced_attention(source_ids, output_ids[1:], own.target_text)
    assert forced.predicted_tokens == own.predicted_tokens
    for ours, theirs in zip(own.weights["cross"], forced.weights["cross"], strict=True):
        torch.testing.assert_close(ours, theirs)
