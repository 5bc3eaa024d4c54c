"""Reranking beam search's n-best list with models of the reverse direction: how well each translation explains
the source (the channel model of noisy-channel reranking).

Beam search keeps the translations the forward models like; a model translating the other way scores how much of
the source each one accounts for, so a translation that drops or invents content loses. Hypothesis y of source x
scores

    beam score(y) + weight * log p(x | y) / |x|

where the beam score is beam search's own (log p(y | x) / |y| ** length_penalty), log p(x | y) is averaged over the
reverse models, and |x| is the source's length in the reverse models' tokens; the best one wins, and weight 0 keeps
beam search's first choice. Yee et al. (2019, "Simple and Effective Noisy Channel Modeling for Neural Machine
Translation") score so, with a language model beside; this uses none. A departure from the paper's plain beam
search, used only where asked for (`--rerank-with`).
"""

from __future__ import annotations

from collections.abc import Sequence

import torch
from tqdm.auto import tqdm
from transformers import PreTrainedModel, PreTrainedTokenizerBase

from .data import TokenBatchSampler
from .decoding import DEFAULT_MAX_TOKENS

IGNORED = -100  # the label of a padding position
# Weights `select_checkpoint.py` tries (0: beam search's own choice), and the one a single decoding uses unless told:
# the middle of the winners on Multi30k validation, one model reranked by one of the other direction (0.2 and 0.3).
RERANK_WEIGHTS = (0.0, 0.1, 0.2, 0.3, 0.5, 1.0)
DEFAULT_RERANK_WEIGHT = 0.3


def source_log_probs(
    model: PreTrainedModel,
    tokenizer: PreTrainedTokenizerBase,
    sources: Sequence[str],
    translations: Sequence[str],
    max_tokens: int = DEFAULT_MAX_TOKENS,
) -> list[float]:
    """log p(source | translation) per source token (its end token included) under `model`, which translates the
    translations' language into the sources'; one float per pair. Texts longer than the model's positions are cut
    to fit. Batched as `translate_sentences` batches: rows * longest text <= `max_tokens`."""
    if len(sources) != len(translations):
        raise ValueError(f"{len(sources)} sources but {len(translations)} translations; they must pair up")
    limit = model.config.max_position_embeddings
    encoded = tokenizer(
        text=list(translations), text_target=list(sources), truncation=True, max_length=limit, verbose=False
    )
    lengths = [
        (len(ids), len(labels)) for ids, labels in zip(encoded["input_ids"], encoded["labels"], strict=True)
    ]
    scores = [0.0] * len(sources)
    with torch.inference_mode():
        for batch in TokenBatchSampler(lengths, max_tokens, shuffle=False):
            inputs = tokenizer.pad(
                {"input_ids": [encoded["input_ids"][row] for row in batch]}, return_tensors="pt"
            )
            labels = torch.nn.utils.rnn.pad_sequence(
                [torch.tensor(encoded["labels"][row]) for row in batch],
                batch_first=True,
                padding_value=IGNORED,
            )
            inputs, labels = inputs.to(model.device), labels.to(model.device)
            logits = model(
                **inputs, decoder_input_ids=model.prepare_decoder_input_ids_from_labels(labels)
            ).logits.float()
            real = labels != IGNORED
            token_log_probs = torch.log_softmax(logits, dim=-1).gather(-1, labels.clamp(min=0).unsqueeze(-1))
            per_token = (token_log_probs.squeeze(-1) * real).sum(-1) / real.sum(-1)
            for row, score in zip(batch, per_token.tolist(), strict=True):
                scores[row] = score
    return scores


def reverse_scores(
    nbest: Sequence[Sequence[tuple[str, float]]],
    sources: Sequence[str],
    reverse_models: Sequence[tuple[PreTrainedModel, PreTrainedTokenizerBase]],
    max_tokens: int = DEFAULT_MAX_TOKENS,
    show_progress: bool = True,
) -> list[list[float]]:
    """For each hypothesis of `nbest` (one list of (translation, beam score) per source, `translate_nbest`'s),
    log p(source | translation) per source token, averaged over `reverse_models` (each with its own tokenizer).
    A blank source's hypotheses score 0."""
    if len(nbest) != len(sources):
        raise ValueError(f"{len(nbest)} n-best lists but {len(sources)} sources; they must pair up")
    if not reverse_models:
        raise ValueError("reranking needs at least one model of the reverse direction")
    pairs = [
        (index, rank)
        for index, source in enumerate(sources)
        if source.strip()
        for rank in range(len(nbest[index]))
    ]
    pair_sources = [sources[index] for index, _ in pairs]
    pair_translations = [nbest[index][rank][0] for index, rank in pairs]
    totals = [0.0] * len(pairs)
    for model, tokenizer in tqdm(
        reverse_models, desc="Reverse scoring", unit="model", disable=not show_progress
    ):
        model.eval()
        for position, score in enumerate(
            source_log_probs(model, tokenizer, pair_sources, pair_translations, max_tokens)
        ):
            totals[position] += score / len(reverse_models)
    scores = [[0.0] * len(hypotheses) for hypotheses in nbest]
    for (index, rank), score in zip(pairs, totals, strict=True):
        scores[index][rank] = score
    return scores


def rerank(
    nbest: Sequence[Sequence[tuple[str, float]]], reverse: Sequence[Sequence[float]], weight: float
) -> list[str]:
    """The best translation of each n-best list by beam score + `weight` * reverse score (the first of equals)."""
    if weight < 0:
        raise ValueError(f"a reranking weight must be at least 0, got {weight}")
    return [
        max(zip(hypotheses, scores, strict=True), key=lambda scored: scored[0][1] + weight * scored[1])[0][0]
        for hypotheses, scores in zip(nbest, reverse, strict=True)
    ]
