"""POST /attention's work on the worker: one sentence translated as POST / translates it, and the
cross-attention behind that translation as JSON (`hf_vanilla.translation.attention`), for the page's heatmap
and for any other client.

The engine that serves translates; an engine with the `ATTENTION` ability weighs its translation (every
layer and head, teacher-forced): the serving engine itself where it has the ability, else the reference
engine loaded beside it on the first request for attention (`AttentionModel`), so that a server whose clients
never ask for attention holds one model only.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

import torch

from hf_vanilla.model.decoding import DecodingOptions, cut_source
from hf_vanilla.serving.batching import RequestRefused
from hf_vanilla.translation.attention import SentenceAttentions
from hf_vanilla.translation.engines import (
    ATTENTION,
    EngineSettings,
    TranslationEngine,
    engine_abilities,
    engine_names,
)

logger = logging.getLogger(__name__)
DECIMALS = 4  # of each weight in the JSON: a heatmap shows no finer difference, and the answer stays small


def attention_settings(serving: EngineSettings) -> EngineSettings:
    """The engine that weighs translations beside the serving engine: the first registered with `ATTENTION`
    (the reference first), on the same device and threads."""
    able = next(name for name in engine_names() if ATTENTION in engine_abilities()[name])
    return EngineSettings(able, device=serving.device, threads=serving.threads)


class AttentionModel:
    """The engine that weighs translations for an engine without `ATTENTION`: loaded by `load` on first use,
    once, and used by one worker at a time (teacher forcing switches the model's attention kernel)."""

    def __init__(self, load: Callable[[], TranslationEngine]):
        self._load = load
        self._engine: TranslationEngine | None = None
        self._lock = threading.Lock()

    @contextmanager
    def weigher(self, serving: TranslationEngine) -> Iterator[TranslationEngine]:
        """The engine that weighs `serving`'s translations: `serving` itself where it has `ATTENTION`, else
        the one loaded beside it."""
        if ATTENTION in serving.abilities:
            yield serving
            return
        with self._lock:
            if self._engine is None:
                self._engine = self._load()
                logger.info("attention: %s loaded beside the serving engine", self._engine.describe())
            yield self._engine


@dataclass(frozen=True)
class AttentionQuery:
    """One sentence, the options it decodes with, whether every head's weights are wanted (else their mean a
    layer), the most source tokens the server draws attention for, and the model that weighs translations
    where the serving engine cannot."""

    text: str
    options: DecodingOptions
    heads: bool
    max_tokens: int
    beside: AttentionModel

    def __call__(self, engine: TranslationEngine) -> dict[str, Any]:
        """The answer, computed on the worker (`Batcher.submit_job`); RequestRefused (422) for a source over
        `max_tokens`."""
        [source_ids] = engine.encode([self.text])  # its one tokenization
        if len(source_ids) > self.max_tokens:
            raise RequestRefused(
                422,
                f"inputs is {len(source_ids)} tokens, over the {self.max_tokens} this server shows attention "
                "for (--request-max-attention-tokens): send a shorter sentence",
            )
        source_ids = cut_source(source_ids, engine.max_source_tokens)
        [output_ids] = engine.translate_encoded([source_ids], self.options)
        [text] = engine.detokenize([output_ids], self.options)
        with self.beside.weigher(engine) as weigher:
            attentions = weigher.forced_attention(source_ids, output_ids, text)
            engines = {"translation_engine": engine_name(engine), "attention_engine": engine_name(weigher)}
        return {**attention_json(attentions, self.heads), **engines}


def engine_name(engine: TranslationEngine) -> str:
    return engine.describe()["engine"]


def attention_json(attentions: SentenceAttentions, heads: bool) -> dict[str, Any]:
    """The translation, its tokens and the cross-attention behind it: rows the output tokens, columns the
    source tokens, each row summing to 1; per layer the mean of its `num_heads` heads, and with `heads` each
    head's own."""
    cross = torch.stack(attentions.weights["cross"]).double()  # (layers, heads, output, source)
    answer = {
        "translation_text": attentions.target_text,
        "source_tokens": attentions.source_tokens,
        "output_tokens": attentions.predicted_tokens,
        "num_heads": cross.shape[1],
        "cross_attention": cross.mean(dim=1).round(decimals=DECIMALS).tolist(),
    }
    if heads:
        answer["cross_attention_heads"] = cross.round(decimals=DECIMALS).tolist()
    return answer
