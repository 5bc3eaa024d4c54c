"""Decoding through transformers' `generate`: the reference engine, with every ability (attention, n-best
scores, sampling, logits processors)."""

from __future__ import annotations

import logging
import os
from collections.abc import Sequence
from dataclasses import dataclass

import torch
from transformers import PreTrainedConfig, PreTrainedModel, PreTrainedTokenizerBase

from hf_vanilla.checkpoints.loading import load_model_and_tokenizer
from hf_vanilla.model.decoding import DEFAULT_DECODING, DecodingOptions, max_source_tokens, resolve_decoding
from hf_vanilla.translation.attention import SentenceAttentions, teacher_forced_attentions
from hf_vanilla.translation.decoding import (
    DEFAULT_BATCHING,
    Batching,
    BatchLogitsProcessors,
    detokenize,
    evaluation_mode,
    generate_batch,
    translate_nbest,
    translate_sentences,
)
from hf_vanilla.translation.engines.base import (
    ATTENTION,
    LOGITS_PROCESSORS,
    NBEST_SCORES,
    SAMPLING,
    TRANSFORMERS,
    EngineSettings,
    register_engine,
)

logger = logging.getLogger(__name__)
ABILITIES = frozenset({ATTENTION, NBEST_SCORES, SAMPLING, LOGITS_PROCESSORS})


@dataclass(frozen=True)
class TransformersEngine:
    """Decoding through transformers' `generate`, as `translate_sentences` and `translate_nbest` do."""

    model: PreTrainedModel
    tokenizer: PreTrainedTokenizerBase
    abilities = ABILITIES

    def translate(
        self,
        sources: Sequence[str],
        options: DecodingOptions = DEFAULT_DECODING,
        batching: Batching = DEFAULT_BATCHING,
        logits_processors: BatchLogitsProcessors | None = None,
    ) -> list[str]:
        return translate_sentences(self.model, self.tokenizer, sources, options, batching, logits_processors)

    def translate_nbest(
        self,
        sources: Sequence[str],
        options: DecodingOptions = DEFAULT_DECODING,
        batching: Batching = DEFAULT_BATCHING,
        logits_processors: BatchLogitsProcessors | None = None,
    ) -> list[list[tuple[str, float]]]:
        options, _ = resolve_decoding(self.model.generation_config, options)
        return translate_nbest(
            self.model, self.tokenizer, sources, options.num_beams, options, batching, logits_processors
        )

    @property
    def config(self) -> PreTrainedConfig:
        return self.model.config

    @property
    def max_source_tokens(self) -> int:
        return max_source_tokens(self.model.config)

    @property
    def concurrent_batches(self) -> int:
        return 1  # torch's threads already share each batch's work

    def encode(self, sources: Sequence[str]) -> list[list[int]]:
        return self.tokenizer(list(sources), verbose=False)["input_ids"]

    def translate_encoded(
        self,
        batch: Sequence[Sequence[int]],
        options: DecodingOptions = DEFAULT_DECODING,
        batching: Batching = DEFAULT_BATCHING,
    ) -> list[list[int]]:
        del batching  # generate decodes the batch as given
        options, _ = resolve_decoding(self.model.generation_config, options)
        with evaluation_mode(self.model):
            return generate_batch(self.model, self.tokenizer, batch, options).tolist()

    def detokenize(
        self, output_ids: Sequence[Sequence[int]], options: DecodingOptions = DEFAULT_DECODING
    ) -> list[str]:
        return detokenize(self.model.config, self.tokenizer, output_ids, options)

    def describe(self) -> dict[str, str]:
        dtype = str(self.model.dtype).removeprefix("torch.")
        return {"engine": TRANSFORMERS, "device": str(self.model.device), "precision": dtype}

    def attention(
        self, source_ids: Sequence[int], options: DecodingOptions = DEFAULT_DECODING
    ) -> SentenceAttentions:
        """The translation of one encoded source (within `max_source_tokens`) as `translate` gives it with
        `options`, and the attention behind it: the output's own tokens teacher-forced through the model
        (`hf_vanilla.translation.attention`)."""
        [output_ids] = self.translate_encoded([source_ids], options)
        [text] = self.detokenize([output_ids], options)
        return self.forced_attention(source_ids, output_ids, text)

    def forced_attention(
        self, source_ids: Sequence[int], output_ids: Sequence[int], text: str
    ) -> SentenceAttentions:
        """The attention behind a translation already made, by this engine or another: `output_ids` as an
        engine's `translate_encoded` gives them for `source_ids` (led by the decoder start token as
        `generate`'s are, or not as CTranslate2's), teacher-forced through the model; `text` is how it
        reads."""
        start = self.model.config.decoder_start_token_id
        target_ids = list(output_ids) if list(output_ids[:1]) == [start] else [start, *output_ids]
        return teacher_forced_attentions(self.model, self.tokenizer, list(source_ids), target_ids, text)


def load_transformers_engine(
    model_name_or_path: str | os.PathLike, settings: EngineSettings
) -> TransformersEngine:
    """`generate` over the model as `load_model_and_tokenizer` loads it, on `settings.threads` CPU threads if
    set."""
    if settings.threads:
        torch.set_num_threads(settings.threads)
    model, tokenizer = load_model_and_tokenizer(model_name_or_path, settings.device, settings.dtype)
    engine = TransformersEngine(model, tokenizer)
    if engine.model.device.type == "cpu":
        logger.info("transformers engine: %d threads (--threads)", torch.get_num_threads())
    return engine


register_engine(TRANSFORMERS, load_transformers_engine, ABILITIES)
