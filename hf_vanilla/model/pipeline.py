"""A translation pipeline under our own task name, since transformers v5 removed "translation".

After `import hf_vanilla`:

    translator = pipeline("vanilla-translation", model="path/to/model")
    translator("Ein Hund rennt.")                     # [{"translation_text": "..."}]
    translator(["Ein Hund.", "Zwei Katzen."], batch_size=8, num_beams=1)
"""

from __future__ import annotations

import copy
import logging
from typing import Any

from transformers import AutoModelForSeq2SeqLM, GenerationConfig, Pipeline, StoppingCriteriaList
from transformers.pipelines import PIPELINE_REGISTRY

from .decoding import (
    PAPER_EXTRA_OUTPUT_TOKENS,
    DecodingOptions,
    check_tokenizer_fingerprint,
    decode_translations,
    encode_sources,
    max_source_tokens,
    paper_length_limit,
    resolve_decoding,
    writes_right_to_left,
)

logger = logging.getLogger(__name__)
TASK = "vanilla-translation"
GENERATION_KEYS = {key for key in vars(GenerationConfig()) if not key.startswith("_")} | {"generation_config"}


class VanillaTranslationPipeline(Pipeline):
    """Text in, `[{"translation_text": ...}]` out (one dict per returned sequence), with `model.generate`.

    Decoding follows the paper (section 6.1) where the call, the pipeline's construction and the model's
    generation config leave it open (`resolve_decoding`): beam 4 with length penalty 0.6 (transformers' length
    penalty, not GNMT's; see `hf_vanilla.model.decoding`), one beam with do_sample, and each sentence at most
    its source length + `extra_output_tokens` new tokens unless max_new_tokens or max_length is set. Any
    `generate` keyword (num_beams, max_new_tokens, do_sample, num_return_sequences, generation_config...)
    can be given at construction or per call. A blank input gives an empty translation; an input longer than
    the model's positions (`max_position_embeddings`) is cut to fit, with a warning. A tokenizer whose
    vocabulary is not the one the model's config records (`tokenizer_fingerprint`) is a ValueError.
    """

    _pipeline_calls_generate = True
    _load_tokenizer = True
    _load_processor = False
    _load_image_processor = False
    _load_video_processor = False
    _load_feature_extractor = False

    def __init__(self, *args, **kwargs):
        # Generation settings given here are kept by us, not by the base class, whose handling of them
        # differs between transformers 5.17 and 5.2x.
        self._construction_generate_kwargs = {key: kwargs.pop(key) for key in GENERATION_KEYS & kwargs.keys()}
        super().__init__(*args, **kwargs)
        if self.tokenizer is not None:
            check_tokenizer_fingerprint(self.tokenizer, self.model.config)

    def __call__(self, inputs: str | list[str], **kwargs) -> list[dict[str, str]] | list[Any]:
        """A list of strings gives one dict per string when each has one translation, as v4's pipeline did."""
        if isinstance(inputs, list) and not inputs:
            return []
        result = super().__call__(inputs, **kwargs)
        if isinstance(inputs, list) and all(len(translations) == 1 for translations in result):
            return [translations[0] for translations in result]
        return result

    def _sanitize_parameters(self, extra_output_tokens: int | None = None, **generate_kwargs):
        forward_params = dict(generate_kwargs)
        if extra_output_tokens is not None:
            forward_params["extra_output_tokens"] = extra_output_tokens
        return {}, forward_params, {}

    def preprocess(self, text: str) -> dict[str, Any]:
        if not isinstance(text, str):
            raise TypeError(f"{TASK} takes a string or a list of strings, got {type(text).__name__}")
        limit = max_source_tokens(self.model.config)
        input_ids, too_long = encode_sources(self.tokenizer, [text], limit)
        if too_long:
            logger.warning(
                "an input of %d characters is longer than the model's %d positions: translating its first %d "
                "tokens",
                len(text),
                limit,
                limit,
            )
        return {
            **self.tokenizer.pad({"input_ids": input_ids}, return_tensors="pt"),
            "blank": not text.strip(),
        }

    def _forward(
        self,
        model_inputs: dict[str, Any],
        extra_output_tokens: int = PAPER_EXTRA_OUTPUT_TOKENS,
        **call_kwargs,
    ) -> dict[str, Any]:
        blank = model_inputs.pop("blank")
        generate_kwargs = {**self._construction_generate_kwargs, **call_kwargs}
        generation_config = copy.deepcopy(
            generate_kwargs.pop("generation_config", None) or self.model.generation_config
        )
        resolved, _ = resolve_decoding(generation_config, DecodingOptions().replace(**generate_kwargs))
        model_kwargs = generation_config.update(**{**generate_kwargs, **resolved.generate_kwargs()})
        generation_config.length_penalty = resolved.length_penalty  # None for greedy search, whoever set one
        if resolved.max_new_tokens is None and generation_config.max_length is None:
            limit = paper_length_limit(self.model, model_inputs["attention_mask"], extra_output_tokens)
            generation_config.max_new_tokens = limit["max_new_tokens"]
            model_kwargs["stopping_criteria"] = StoppingCriteriaList(
                [*model_kwargs.get("stopping_criteria", []), *limit["stopping_criteria"]]
            )
        output_ids = self.model.generate(**model_inputs, generation_config=generation_config, **model_kwargs)
        batch_size = model_inputs["input_ids"].shape[0]
        return {"output_ids": output_ids.reshape(batch_size, -1, output_ids.shape[-1]), "blank": blank}

    def postprocess(self, model_outputs: dict[str, Any]) -> list[dict[str, str]]:
        texts = decode_translations(
            self.tokenizer, model_outputs["output_ids"][0], writes_right_to_left(self.model.config)
        )
        return [{"translation_text": "" if model_outputs["blank"] else text} for text in texts]


PIPELINE_REGISTRY.register_pipeline(
    TASK, pipeline_class=VanillaTranslationPipeline, pt_model=AutoModelForSeq2SeqLM
)
