"""The paper's decoding settings (section 6.1) and the small helpers every decoder here shares.

Beam 4, length penalty 0.6, output at most input length + 50. transformers' beam search ranks a finished
hypothesis by sum(log p) / length**length_penalty, not by GNMT's ((5 + length) / 6)**alpha that the paper used,
so the same 0.6 weighs length a little differently; we keep transformers' beam search rather than reimplement it.

Kept free of data and scoring code: a saved checkpoint carries this file with the pipeline's, so that
`pipeline("vanilla-translation", model=dir, trust_remote_code=True)` works without this package.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import torch
from transformers import (
    GenerationConfig,
    PreTrainedConfig,
    PreTrainedModel,
    PreTrainedTokenizerBase,
    StoppingCriteria,
    StoppingCriteriaList,
)

PAPER_GENERATION_KWARGS = {"num_beams": 4, "length_penalty": 0.6}
PAPER_EXTRA_OUTPUT_TOKENS = 50
DEFAULT_MAX_TOKENS = 4096
DECODER_PROMPT_LENGTH = 1  # the decoder start token, which generate counts in max_length


def max_source_tokens(config: PreTrainedConfig) -> int:
    """The longest source the encoder of a model with `config` takes: one position per token, `</s>` included."""
    return config.max_position_embeddings


def cut_source(ids: Sequence[int], limit: int) -> list[int]:
    """Encoded source `ids` cut to `limit` tokens as the tokenizer's truncation cuts them: its first tokens, then
    the end token `</s>` that ends every encoded source, so the model sees what it was trained on."""
    return list(ids) if len(ids) <= limit else [*ids[: limit - 1], ids[-1]]


def encode_sources(
    tokenizer: PreTrainedTokenizerBase, sources: Sequence[str], max_length: int
) -> tuple[list[list[int]], list[int]]:
    """The token ids of `sources`, a source over `max_length` tokens cut to its first ones (`cut_source`); and the
    indices cut."""
    input_ids = tokenizer(list(sources), verbose=False)["input_ids"]
    too_long = [index for index, ids in enumerate(input_ids) if len(ids) > max_length]
    for index in too_long:
        input_ids[index] = cut_source(input_ids[index], max_length)
    return input_ids, too_long


def max_new_tokens_room(config: PreTrainedConfig) -> int:
    """The most tokens the decoder can produce: one position each, after the decoder start token's."""
    return config.max_position_embeddings - DECODER_PROMPT_LENGTH


def paper_max_new_tokens(
    config: PreTrainedConfig, longest_source: int, extra_output_tokens: int = PAPER_EXTRA_OUTPUT_TOKENS
) -> int:
    """Section 6.1's output limit, input length + 50, capped so the decoder stays within its positions."""
    return min(longest_source + extra_output_tokens, max_new_tokens_room(config))


class NewTokenLimit(StoppingCriteria):
    """Stop each sentence at its own number of new tokens, however the sentences are batched.

    `limits` holds one limit per sentence of the batch; beam search and num_return_sequences put several rows
    per sentence, consecutively, which this expands to.
    """

    def __init__(self, limits: torch.Tensor, prompt_length: int = DECODER_PROMPT_LENGTH):
        self.limits = limits
        self.prompt_length = prompt_length
        self.row_limits = limits  # expanded to the rows once, on the rows' device, then reused every step

    def __call__(self, input_ids: torch.Tensor, scores: torch.Tensor, **kwargs) -> torch.BoolTensor:
        if self.row_limits.shape[0] != input_ids.shape[0] or self.row_limits.device != input_ids.device:
            rows_per_sentence = input_ids.shape[0] // self.limits.shape[0]
            self.row_limits = self.limits.to(input_ids.device).repeat_interleave(rows_per_sentence)
        return input_ids.shape[-1] - self.prompt_length >= self.row_limits


def paper_length_limit(
    model: PreTrainedModel, attention_mask: torch.Tensor, extra_output_tokens: int = PAPER_EXTRA_OUTPUT_TOKENS
) -> dict[str, Any]:
    """`generate` keywords for section 6.1's limit: each sentence at most its own source length + 50 new tokens."""
    # One transfer of the source lengths, not one per sentence (each a device synchronisation on a GPU).
    lengths = attention_mask.sum(-1).tolist()
    limits = torch.tensor([paper_max_new_tokens(model.config, length, extra_output_tokens) for length in lengths])
    return {
        "max_new_tokens": int(limits.max()),
        "stopping_criteria": StoppingCriteriaList([NewTokenLimit(limits)]),
    }


# Where a resolved decoding value came from, first found first: the caller, the checkpoint's generation
# config, sampling (one draw a step, where neither sets a beam size), the paper (section 6.1).
FROM_CALLER, FROM_CHECKPOINT, FROM_SAMPLING, FROM_PAPER = "given", "checkpoint", "sampling", "paper"
DECODING_NAMES = ("num_beams", "length_penalty", "max_new_tokens")


@dataclass(frozen=True)
class ResolvedDecoding:
    """The beam size, length penalty and output limit a decoding uses, with where each came from (`sources`,
    by name: FROM_CALLER, FROM_CHECKPOINT, FROM_PAPER or FROM_SAMPLING). `length_penalty` is None for greedy
    search, which ranks no finished hypotheses; `max_new_tokens` None is the paper's limit, each sentence its
    source length + `PAPER_EXTRA_OUTPUT_TOKENS`."""

    num_beams: int
    length_penalty: float | None
    max_new_tokens: int | None
    sources: Mapping[str, str]

    def generate_kwargs(self) -> dict[str, Any]:
        """The values as `generate` keywords, those that are set."""
        values = {name: getattr(self, name) for name in DECODING_NAMES}
        return {name: value for name, value in values.items() if value is not None}

    def applied_to(self, settings: Mapping[str, Any]) -> dict[str, Any]:
        """`settings` (`generate` keywords) with these values in place of theirs."""
        others = {name: value for name, value in settings.items() if name not in DECODING_NAMES}
        return {**others, **self.generate_kwargs()}

    def report(self) -> dict[str, Any]:
        """What a report records: the values set and where each came from."""
        return {**self.generate_kwargs(), "sources": dict(self.sources)}

    def describe(self) -> str:
        """One line for a log: "num_beams 4 (checkpoint), length_penalty 0.6 (paper), max_new_tokens source
        length + 50 (paper)"."""
        limit = self.max_new_tokens or f"source length + {PAPER_EXTRA_OUTPUT_TOKENS}"
        penalty = (
            "no length_penalty (greedy)"
            if self.length_penalty is None
            else f"length_penalty {self.length_penalty} ({self.sources['length_penalty']})"
        )
        return (
            f"num_beams {self.num_beams} ({self.sources['num_beams']}), {penalty}, "
            f"max_new_tokens {limit} ({self.sources['max_new_tokens']})"
        )


def resolve_decoding(
    generation_config: GenerationConfig | None, given: Mapping[str, Any] | None = None
) -> ResolvedDecoding:
    """The beam size, length penalty and output limit to decode with, each the first set of: `given`
    (`generate` keywords; None is not given), what `generation_config` (a checkpoint's) saved, the paper's
    (beam 4, length penalty 0.6, source length + 50; with sampling, one beam).

    A saved value is one the config holds beyond GenerationConfig's own defaults (`to_diff_dict`), so a bare
    config leaves everything to the paper. Greedy search (one beam) takes no length penalty, whoever set one:
    it ranks no finished hypotheses, and generate warns of one."""
    given = given or {}
    saved = generation_config.to_diff_dict() if generation_config is not None else {}
    sampling = {"num_beams": 1} if given.get("do_sample", saved.get("do_sample")) else {}
    layers = (
        (FROM_CALLER, given),
        (FROM_CHECKPOINT, saved),
        (FROM_SAMPLING, sampling),
        (FROM_PAPER, PAPER_GENERATION_KWARGS),
    )
    values, sources = {}, {}
    for name in DECODING_NAMES:
        # The paper's output limit is no one number (None: each sentence its own), so it is what is left.
        found = ((chosen[name], source) for source, chosen in layers if chosen.get(name) is not None)
        values[name], sources[name] = next(found, (None, FROM_PAPER))
    if values["num_beams"] == 1:
        values["length_penalty"] = None
        del sources["length_penalty"]
    return ResolvedDecoding(**values, sources=sources)


def tokenizer_fingerprint(tokenizer: PreTrainedTokenizerBase) -> str:
    """16 hex digits of the sha256 of the vocabulary (token -> id, as sorted JSON): another vocabulary, another print."""
    vocabulary = json.dumps(tokenizer.get_vocab(), sort_keys=True, ensure_ascii=False)
    return hashlib.sha256(vocabulary.encode("utf-8")).hexdigest()[:16]


def check_tokenizer_fingerprint(tokenizer: PreTrainedTokenizerBase, config) -> None:
    """Raise ValueError when `config` records the fingerprint of another vocabulary than `tokenizer`'s.

    A config without one (saved before fingerprints were recorded) passes.
    """
    expected = getattr(config, "tokenizer_fingerprint", None)
    if expected is not None and (found := tokenizer_fingerprint(tokenizer)) != expected:
        raise ValueError(
            f"the tokenizer's vocabulary (fingerprint {found}) is not the one the model was trained with "
            f"(tokenizer_fingerprint {expected} in its config): translations would be wrong; "
            "load the tokenizer saved with the model"
        )


def reverse_words(text: str) -> str:
    """`text`'s white-space-separated words in reverse order (white space normalized): "a b c." -> "c. b a"."""
    return " ".join(reversed(text.split()))


def writes_right_to_left(config: PreTrainedConfig) -> bool:
    """Whether a model with `config` was trained on reversed target words (`config.right_to_left`); other model
    classes (MarianMT) have no such switch and write left to right."""
    return bool(getattr(config, "right_to_left", False))


def decode_translations(
    tokenizer: PreTrainedTokenizerBase,
    output_ids: torch.Tensor,
    right_to_left: bool = False,
    clean_up_tokenization_spaces: bool = False,
) -> list[str]:
    """Detokenized text, one line each: a line break the model produced becomes a space. With `right_to_left`
    (the outputs of a model trained on reversed target words, `config.right_to_left`), the words are put back
    in reading order; with `clean_up_tokenization_spaces`, transformers' clean-up removes the space before
    punctuation and English contractions."""
    decoded = tokenizer.batch_decode(
        output_ids, skip_special_tokens=True, clean_up_tokenization_spaces=clean_up_tokenization_spaces
    )
    texts = [" ".join(text.splitlines()) for text in decoded]
    return [reverse_words(text) for text in texts] if right_to_left else texts
