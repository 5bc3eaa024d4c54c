"""The research extras' command-line options, which the evaluating and translating scripts add beside their
own: `--ensemble` and the reranking options; `research_decoder` reads them back as evaluation's decoder."""

from __future__ import annotations

import argparse

from hf_vanilla.research.decoders import (
    ENSEMBLE_NEEDS,
    ResearchDecoder,
    ResearchModels,
    load_research_decoder,
)
from hf_vanilla.research.reranking import (
    DEFAULT_LANGUAGE_MODEL_WEIGHT,
    DEFAULT_RERANK_WEIGHT,
    DEFAULT_RIGHT_TO_LEFT_WEIGHT,
    LANGUAGE_MODEL_WEIGHTS,
    RERANK_WEIGHTS,
    RIGHT_TO_LEFT_WEIGHTS,
    reranking_weights,
)
from hf_vanilla.translation.engines import LOGITS_PROCESSORS, engine_abilities, missing_ability

# Each kind of reranking model: its models' option, its weight's option, the weights tried and the one used
# unless told, what the models are and what of theirs the weight multiplies.
RERANKING_ROLES = (
    (
        "rerank_with",
        "rerank_weight",
        RERANK_WEIGHTS,
        DEFAULT_RERANK_WEIGHT,
        "saved models of the reverse direction (target to source language) that rerank beam search's n-best "
        "list by how well each translation explains the source, the channel model of noisy-channel reranking",
        "the reverse models' log p(source | translation) per source token",
    ),
    (
        "rerank_right_to_left",
        "right_to_left_weight",
        RIGHT_TO_LEFT_WEIGHTS,
        DEFAULT_RIGHT_TO_LEFT_WEIGHT,
        "saved right-to-left models of this direction (trained with right_to_left: true) that rerank beam "
        "search's n-best list by how likely each translation is written last word first",
        "the right-to-left models' log p(reversed translation | source) per token",
    ),
    (
        "rerank_language_model",
        "language_model_weight",
        LANGUAGE_MODEL_WEIGHTS,
        DEFAULT_LANGUAGE_MODEL_WEIGHT,
        "saved language models of the target language (scripts/research/train_language_model.py) that rerank "
        "beam search's n-best list by how likely each translation is as a sentence",
        "the language models' log p(translation) per token",
    ),
)


def add_research_arguments(parser: argparse.ArgumentParser, several_weights: bool = False) -> None:
    """`--ensemble`, each of RERANKING_ROLES' models and weight options (one weight each, or with
    `several_weights` lists to choose from on validation) and `--word-bonus`; read them back with
    `research_decoder`."""
    group = parser.add_argument_group("research (departures from the paper's decoding)")
    group.add_argument(
        "--ensemble",
        nargs="+",
        default=[],
        metavar="MODEL",
        help="saved models sharing the first model's tokenizer that translate with it as one, their "
            "next-token "
        "probabilities averaged (a departure from the paper's single models; default: none)",
    )
    tried = "; each is tried, 0 keeps beam search's choice" if several_weights else ""
    for models, weight, weights, default, what, scored in RERANKING_ROLES:
        group.add_argument(
            f"--{models.replace('_', '-')}",
            nargs="+",
            default=[],
            metavar="MODEL",
            help=f"{what} (a departure from the paper's beam search; default: none)",
        )
        group.add_argument(
            f"--{weight.replace('_', '-')}",
            type=float,
            nargs="+" if several_weights else None,
            default=list(weights) if several_weights else default,
            help=f"weight of {scored} beside beam search's score{tried}",
        )
    group.add_argument(
        "--word-bonus",
        type=float,
        nargs="+" if several_weights else None,
        default=None,
        help="added to a reranked translation's score for each of its words (a penalty where negative), "
            "beside the "
        "reranking models' scores (default: none)" + ("; each is tried" if several_weights else ""),
    )


def research_decoder(args: argparse.Namespace) -> ResearchDecoder:
    """The decoder the options of `add_research_arguments` ask for, its models loaded on `args.device` in
    `args.dtype`: plain beam search without them. A word bonus without a reranking model, or research models
    with an engine other than transformers (`cli.add_runtime_arguments`), is a ValueError raised before any
    model loads."""

    def tried(weight: float | list[float] | None) -> list[float] | None:
        return weight if weight is None or isinstance(weight, list) else [weight]

    models = ResearchModels(
        args.ensemble, args.rerank_with, args.rerank_right_to_left, args.rerank_language_model
    )
    if models.ensemble and LOGITS_PROCESSORS not in engine_abilities()[args.engine]:
        raise ValueError(missing_ability(args.engine, LOGITS_PROCESSORS, ENSEMBLE_NEEDS))
    weights = reranking_weights(
        models.rerank_with,
        tried(args.rerank_weight),
        models.rerank_right_to_left,
        tried(args.right_to_left_weight),
        tried(args.word_bonus),
        models.rerank_language_model,
        tried(args.language_model_weight),
    )
    return load_research_decoder(models, weights, args.device, args.dtype)
