"""Reranking beam search's n-best list with models that read each translation another way: models of the
reverse direction, right-to-left models and language models of the target language. A departure from the
paper's plain beam search, used only where asked for (`--rerank-with`, `--rerank-right-to-left`,
`--rerank-language-model`, `--word-bonus`). Hypothesis y of source x scores

    beam score(y) + reverse weight * log p(x | y) / |x| + right-to-left weight * log p(reversed(y) | x) / |y|
                  + language model weight * log p(y) / |y| + word bonus * words(y)

each log-probability averaged over its models, lengths in those models' tokens; weights 0 keep beam search's
first choice. Why each term, and the papers it follows: docs/research/extras.md, "The reranking score".
"""

from __future__ import annotations

import itertools
import os
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import TypeVar

import torch
from tqdm.auto import tqdm
from transformers import PreTrainedModel, PreTrainedTokenizerBase

from hf_vanilla.checkpoints.loading import load_models
from hf_vanilla.data.batches import TokenBatchSampler
from hf_vanilla.model.decoding import DEFAULT_MAX_TOKENS, DecodingOptions, reverse_words
from hf_vanilla.research.language_model import (
    IGNORED,
    load_language_models,
    mean_label_log_probs,
    sentence_log_probs,
)
from hf_vanilla.translation.decoding import DEFAULT_BATCHING, Batching, BatchLogitsProcessors
from hf_vanilla.translation.engines import NBEST_SCORES, TranslationEngine, require

T = TypeVar("T")
# Weights `select_checkpoint.py` tries (0: beam search's own choice), and the one a single decoding uses
# unless told: the middle of the winners on Multi30k validation, one model reranked by one of the other
# direction (0.2 and 0.3).
RERANK_WEIGHTS = (0.0, 0.1, 0.2, 0.3, 0.5, 1.0)
DEFAULT_RERANK_WEIGHT = 0.3
# The right-to-left weight: the same grid; 0.1 and 0.2 tied best beside three reverse models (Multi30k
# en->de).
RIGHT_TO_LEFT_WEIGHTS = RERANK_WEIGHTS
DEFAULT_RIGHT_TO_LEFT_WEIGHT = 0.2
# The language model's weight: the same grid; 0.5 (de->en) and 0.1-0.2 (en->de) won on Multi30k validation
# beside the reverse and right-to-left models.
LANGUAGE_MODEL_WEIGHTS = RERANK_WEIGHTS
DEFAULT_LANGUAGE_MODEL_WEIGHT = 0.2
# The names of the weights in reports and selection tables
REVERSE_WEIGHT = "rerank_weight"
RIGHT_TO_LEFT_WEIGHT = "right_to_left_weight"
LANGUAGE_MODEL_WEIGHT = "language_model_weight"
WORD_BONUS = "word_bonus"
ModelAndTokenizer = tuple[PreTrainedModel, PreTrainedTokenizerBase]


@dataclass(frozen=True)
class RerankingModels:
    """The models that rerank an n-best list, each with its tokenizer: of the reverse direction, right-to-left
    models of this direction, language models of the target language."""

    reverse: Sequence[ModelAndTokenizer] = ()
    right_to_left: Sequence[ModelAndTokenizer] = ()
    language: Sequence[ModelAndTokenizer] = ()


def conditional_log_probs(
    model: PreTrainedModel,
    tokenizer: PreTrainedTokenizerBase,
    outputs: Sequence[str],
    inputs: Sequence[str],
    max_tokens: int = DEFAULT_MAX_TOKENS,
) -> list[float]:
    """log p(output | input) per output token (its end token included) under the seq2seq `model`; one float
    per pair. Texts longer than the model's positions are cut to fit. Batched as `translate_sentences`
    batches: rows * longest text <= `max_tokens`."""
    if len(outputs) != len(inputs):
        raise ValueError(f"{len(outputs)} outputs but {len(inputs)} inputs; they must pair up")
    limit = model.config.max_position_embeddings
    encoded = tokenizer(
        text=list(inputs), text_target=list(outputs), truncation=True, max_length=limit, verbose=False
    )
    lengths = [
        (len(ids), len(labels)) for ids, labels in zip(encoded["input_ids"], encoded["labels"], strict=True)
    ]
    scores = [0.0] * len(outputs)
    with torch.inference_mode():
        for batch in TokenBatchSampler(lengths, max_tokens, shuffle=False):
            padded = tokenizer.pad(
                {"input_ids": [encoded["input_ids"][row] for row in batch]}, return_tensors="pt"
            )
            labels = torch.nn.utils.rnn.pad_sequence(
                [torch.tensor(encoded["labels"][row]) for row in batch],
                batch_first=True,
                padding_value=IGNORED,
            )
            padded, labels = padded.to(model.device), labels.to(model.device)
            logits = model(
                **padded, decoder_input_ids=model.prepare_decoder_input_ids_from_labels(labels)
            ).logits
            for row, score in zip(batch, mean_label_log_probs(logits, labels), strict=True):
                scores[row] = score
    return scores


def _scored_nbest(
    nbest: Sequence[Sequence[tuple[str, float]]],
    sources: Sequence[str],
    models: Sequence[ModelAndTokenizer],
    scored_text: Callable[[str, str], tuple[str, str]],
    description: str,
    max_tokens: int,
    show_progress: bool,
    log_probs: Callable[..., list[float]] = conditional_log_probs,
) -> list[list[float]]:
    """For each hypothesis of `nbest`, the per-token log-probability `models` give the first text of
    `scored_text(source, hypothesis)` given the second, averaged over the models; a blank source's hypotheses
    score 0. `log_probs(model, tokenizer, outputs, inputs, max_tokens)` scores a model's texts."""
    if len(nbest) != len(sources):
        raise ValueError(f"{len(nbest)} n-best lists but {len(sources)} sources; they must pair up")
    pairs = [
        (index, rank)
        for index, source in enumerate(sources)
        if source.strip()
        for rank in range(len(nbest[index]))
    ]
    texts = [scored_text(sources[index], nbest[index][rank][0]) for index, rank in pairs]
    outputs, inputs = [output for output, _ in texts], [given for _, given in texts]
    totals = [0.0] * len(pairs)
    for model, tokenizer in tqdm(models, desc=description, unit="model", disable=not show_progress):
        model.eval()
        for position, score in enumerate(
            log_probs(model, tokenizer, outputs, inputs, max_tokens)
        ):
            totals[position] += score / len(models)
    scores = [[0.0] * len(hypotheses) for hypotheses in nbest]
    for (index, rank), score in zip(pairs, totals, strict=True):
        scores[index][rank] = score
    return scores


def reverse_scores(
    nbest: Sequence[Sequence[tuple[str, float]]],
    sources: Sequence[str],
    reverse_models: Sequence[ModelAndTokenizer],
    max_tokens: int = DEFAULT_MAX_TOKENS,
    show_progress: bool = True,
) -> list[list[float]]:
    """For each hypothesis of `nbest` (one list of (translation, beam score) per source, `translate_nbest`'s),
    log p(source | translation) per source token, averaged over `reverse_models` (each with its own
    tokenizer). A blank source's hypotheses score 0."""
    if not reverse_models:
        raise ValueError("reranking needs at least one model of the reverse direction")
    return _scored_nbest(
        nbest,
        sources,
        reverse_models,
        lambda source, translation: (source, translation),
        "Reverse scoring",
        max_tokens,
        show_progress,
    )


def right_to_left_scores(
    nbest: Sequence[Sequence[tuple[str, float]]],
    sources: Sequence[str],
    right_to_left_models: Sequence[ModelAndTokenizer],
    max_tokens: int = DEFAULT_MAX_TOKENS,
    show_progress: bool = True,
) -> list[list[float]]:
    """For each hypothesis of `nbest`, log p(its words reversed | source) per token under
    `right_to_left_models` (same direction, trained on reversed target words: `TrainingConfig.right_to_left`),
    averaged over them. A blank source's hypotheses score 0."""
    if not right_to_left_models:
        raise ValueError("right-to-left reranking needs at least one right-to-left model")
    return _scored_nbest(
        nbest,
        sources,
        right_to_left_models,
        lambda source, translation: (reverse_words(translation), source),
        "Right-to-left scoring",
        max_tokens,
        show_progress,
    )


def language_model_scores(
    nbest: Sequence[Sequence[tuple[str, float]]],
    sources: Sequence[str],
    language_models: Sequence[ModelAndTokenizer],
    max_tokens: int = DEFAULT_MAX_TOKENS,
    show_progress: bool = True,
) -> list[list[float]]:
    """For each hypothesis of `nbest`, log p(it) per token under the target-language `language_models`
    (`hf_vanilla.research.language_model`), averaged over them. A blank source's hypotheses score 0."""
    if not language_models:
        raise ValueError("language model reranking needs at least one language model")
    return _scored_nbest(
        nbest,
        sources,
        language_models,
        lambda source, translation: (translation, source),
        "Language model scoring",
        max_tokens,
        show_progress,
        lambda model, tokenizer, outputs, _, limit: sentence_log_probs(model, tokenizer, outputs, limit),
    )


def rerank(
    nbest: Sequence[Sequence[tuple[str, float]]],
    features: Mapping[str, Sequence[Sequence[float]]],
    weights: Mapping[str, float],
) -> list[str]:
    """The best translation of each n-best list by beam score + each feature's score (one per hypothesis:
    `reranking_features`) times the weight of the same name; the first of equals wins."""
    if set(weights) != set(features):
        raise ValueError(f"reranking weights {sorted(weights)} do not name the features {sorted(features)}")
    if any(weight < 0 for name, weight in weights.items() if name != WORD_BONUS):
        raise ValueError(f"a reranking model's weight must be at least 0, got {dict(weights)}")
    chosen = []
    for index, hypotheses in enumerate(nbest):
        totals = [
            score + sum(weights[name] * feature[index][rank] for name, feature in features.items())
            for rank, (_, score) in enumerate(hypotheses)
        ]
        chosen.append(hypotheses[max(range(len(totals)), key=totals.__getitem__)][0])
    return chosen


def reranking_features(
    nbest: Sequence[Sequence[tuple[str, float]]],
    sources: Sequence[str],
    models: RerankingModels,
    max_tokens: int = DEFAULT_MAX_TOKENS,
    show_progress: bool = True,
) -> dict[str, list[list[float]]]:
    """The scores `rerank` weighs, named by their weights: REVERSE_WEIGHT's `reverse_scores` with the reverse
    `models`, RIGHT_TO_LEFT_WEIGHT's `right_to_left_scores` with the right-to-left ones,
    LANGUAGE_MODEL_WEIGHT's `language_model_scores` with the language models."""
    scorers = (
        (REVERSE_WEIGHT, reverse_scores, models.reverse),
        (RIGHT_TO_LEFT_WEIGHT, right_to_left_scores, models.right_to_left),
        (LANGUAGE_MODEL_WEIGHT, language_model_scores, models.language),
    )
    features = {
        name: scores(nbest, sources, given, max_tokens, show_progress)
        for name, scores, given in scorers
        if given
    }
    if not features:
        raise ValueError(
            "reranking needs models of the reverse direction, right-to-left models or language models"
        )
    return features


def word_counts(nbest: Sequence[Sequence[tuple[str, float]]]) -> list[list[float]]:
    """Each hypothesis's number of words (runs of characters between spaces): the word bonus's feature."""
    return [[float(len(translation.split())) for translation, _ in hypotheses] for hypotheses in nbest]


def weight_grid(weights: Mapping[str, Sequence[float]]) -> list[dict[str, float]]:
    """Every combination of the weights each name takes, the last name varying fastest:
    {"a": (0, 1), "b": (2,)} -> [{"a": 0, "b": 2}, {"a": 1, "b": 2}]."""
    return [
        dict(zip(weights, combination, strict=True)) for combination in itertools.product(*weights.values())
    ]


def reranking_weights(
    reverse_models: Sequence,
    reverse_weight: T,
    right_to_left_models: Sequence,
    right_to_left_weight: T,
    word_bonus: T | None = None,
    language_models: Sequence = (),
    language_model_weight: T | None = None,
) -> dict[str, T]:
    """The weight (or weights to try, for `weight_grid`) of each kind of reranking model given, and the word
    bonus where one is given, by name; a word bonus without a reranking model is a ValueError."""
    if word_bonus is not None and not (reverse_models or right_to_left_models or language_models):
        raise ValueError(
            "a word bonus weighs the translations of beam search's n-best list beside reranking models' "
            "scores: give models of the reverse direction (--rerank-with), right-to-left models "
            "(--rerank-right-to-left) or language models (--rerank-language-model)"
        )
    return {
        **({REVERSE_WEIGHT: reverse_weight} if reverse_models else {}),
        **({RIGHT_TO_LEFT_WEIGHT: right_to_left_weight} if right_to_left_models else {}),
        **({LANGUAGE_MODEL_WEIGHT: language_model_weight} if language_models else {}),
        **({WORD_BONUS: word_bonus} if word_bonus is not None else {}),
    }


def translate_reranked(
    engine: TranslationEngine,
    sources: Sequence[str],
    weightings: Sequence[Mapping[str, float]],
    models: RerankingModels,
    options: DecodingOptions,
    batching: Batching = DEFAULT_BATCHING,
    logits_processors: BatchLogitsProcessors | None = None,
) -> list[list[str]]:
    """`engine`'s translations with beam search's n-best list (`options.num_beams`, else the model's
    generation config's, else the paper's) reranked by `models` (and each translation's words, where
    `weightings` name a word bonus), once for each of `weightings` (`reranking_weights`' names, one weight
    each): one list of translations each, the n-best list and its scores computed once for all. The engine
    must score its n-best lists as generate ranks them (`NBEST_SCORES`)."""
    require(engine, NBEST_SCORES, "reranking adds beam search's scores of the n-best list to the rerankers'")
    nbest = engine.translate_nbest(sources, options, batching, logits_processors)
    features = reranking_features(nbest, sources, models, batching.max_tokens, batching.show_progress)
    if any(WORD_BONUS in weights for weights in weightings):
        features[WORD_BONUS] = word_counts(nbest)
    return [rerank(nbest, features, weights) for weights in weightings]


def load_reranking_models(
    rerank_with: Sequence[str | os.PathLike],
    rerank_right_to_left: Sequence[str | os.PathLike],
    device: str | None,
    dtype: str,
    rerank_language_model: Sequence[str | os.PathLike] = (),
) -> RerankingModels:
    """The saved models of `rerank_with` (reverse direction), `rerank_right_to_left` and
    `rerank_language_model`, loaded with their tokenizers; one that does not load, or whose word order
    (`config.right_to_left`) is not its role's, is a ValueError or FileNotFoundError naming it."""
    language = load_language_models(rerank_language_model, device, dtype)
    return RerankingModels(
        reverse=load_models(rerank_with, device, dtype, role="reranking model", right_to_left=False),
        right_to_left=load_models(
            rerank_right_to_left, device, dtype, role="right-to-left model", right_to_left=True
        ),
        language=language,
    )
