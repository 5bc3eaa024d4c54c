"""Evaluation's decoder (`hf_vanilla.evaluation.scoring.Decoder`) with the research extras: an ensemble's
models translate as one (`hf_vanilla.research.ensemble`), and reranking models rerank beam search's n-best
list (`hf_vanilla.research.reranking`). Passed into evaluation and selection; the core never imports it."""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, fields
from typing import Any

from transformers import PreTrainedModel

from hf_vanilla.evaluation.scoring import BEAM_SEARCH, Runtime, Variant
from hf_vanilla.model.decoding import DEFAULT_DECODING
from hf_vanilla.research.ensemble import ensemble_logits_processors, load_ensemble
from hf_vanilla.research.reranking import (
    RerankingModels,
    load_reranking_models,
    translate_reranked,
    weight_grid,
)
from hf_vanilla.translation.engines import LOGITS_PROCESSORS, TranslationEngine, require

ENSEMBLE_NEEDS = "an ensemble mixes its members' scores into the decoded model's by logits processors"


@dataclass(frozen=True)
class ResearchModels:
    """The saved models the research options name beside the evaluated one: an ensemble's other members,
    models of the reverse direction, right-to-left models and language models that rerank."""

    ensemble: Sequence[str | os.PathLike] = ()
    rerank_with: Sequence[str | os.PathLike] = ()
    rerank_right_to_left: Sequence[str | os.PathLike] = ()
    rerank_language_model: Sequence[str | os.PathLike] = ()

    def by_role(self) -> dict[str, list[str]]:
        """Each role's models as the paths a report records, by role; a role without models is left out."""
        return {
            role.name: [str(path) for path in getattr(self, role.name)]
            for role in fields(self)
            if getattr(self, role.name)
        }


@dataclass(frozen=True)
class ResearchDecoder:
    """Decodes with `members` (an ensemble's models beside the evaluated one) and, given `weights` (each
    reranking weight's values to try, by name: `reranking_weights`), reranks beam search's n-best list with
    `rerankers` once for every combination of weights: one variant each, its weights in its settings. A weight
    named in the settings is taken as given, so a variant's settings decode that variant alone. Members need
    an engine with `LOGITS_PROCESSORS` (which decodes a torch `model`), reranking one that scores its n-best
    lists: a ValueError otherwise."""

    members: Sequence[PreTrainedModel] = ()
    rerankers: RerankingModels = RerankingModels()
    weights: Mapping[str, Sequence[float]] = field(default_factory=dict)
    extra_models: Mapping[str, Sequence[str]] = field(default_factory=dict)

    def __call__(
        self, engine: TranslationEngine, sources: Sequence[str], settings: Mapping[str, Any], runtime: Runtime
    ) -> list[Variant]:
        if not self.members and not self.weights:
            return BEAM_SEARCH(engine, sources, settings, runtime)
        processors = None
        if self.members:
            require(engine, LOGITS_PROCESSORS, ENSEMBLE_NEEDS)
            processors = ensemble_logits_processors(engine.model, engine.tokenizer, self.members)
        if not self.weights:
            translations = engine.translate(
                sources, DEFAULT_DECODING.replace(**settings), runtime.batching, processors
            )
            return [Variant(dict(settings), translations)]
        beam_search = {name: value for name, value in settings.items() if name not in self.weights}
        weightings = weight_grid(
            {name: [settings[name]] if name in settings else tried for name, tried in self.weights.items()}
        )
        translations = translate_reranked(
            engine,
            sources,
            weightings,
            self.rerankers,
            DEFAULT_DECODING.replace(**beam_search),
            runtime.batching,
            processors,
        )
        return [
            Variant({**beam_search, **weights}, hypotheses)
            for weights, hypotheses in zip(weightings, translations, strict=True)
        ]


def load_research_decoder(
    models: ResearchModels,
    weights: Mapping[str, Sequence[float]] | None = None,
    device: str | None = None,
    dtype: str = "float32",
) -> ResearchDecoder:
    """A `ResearchDecoder` with `models` loaded on `device` in `dtype` and the reranking `weights` to try; a
    model that does not load, or does not fit its role, is a ValueError or FileNotFoundError naming it."""
    return ResearchDecoder(
        members=load_ensemble(models.ensemble, device, dtype),
        rerankers=load_reranking_models(
            models.rerank_with, models.rerank_right_to_left, device, dtype, models.rerank_language_model
        ),
        weights=dict(weights or {}),
        extra_models=models.by_role(),
    )
