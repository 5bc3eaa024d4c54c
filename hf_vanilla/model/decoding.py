"""The paper's decoding settings (section 6.1) and the small helpers every decoder here shares.

Beam 4, length penalty 0.6, output at most input length + 50. transformers' beam search ranks a finished
hypothesis by sum(log p) / length**length_penalty, not by GNMT's ((5 + length) / 6)**alpha that the paper
used, so the same 0.6 weighs length a little differently; we keep transformers' beam search rather than
reimplement it.

Kept free of data and scoring code: a saved checkpoint carries this file with the pipeline's, so that
`pipeline("vanilla-translation", model=dir, trust_remote_code=True)` works without this package.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, fields
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
    """The longest source the encoder of a model with `config` takes: one position per token, `</s>`
    included."""
    return config.max_position_embeddings


def cut_source(ids: Sequence[int], limit: int) -> list[int]:
    """Encoded source `ids` cut to `limit` tokens as the tokenizer's truncation cuts them: its first tokens,
    then the end token `</s>` that ends every encoded source, so the model sees what it was trained on."""
    return list(ids) if len(ids) <= limit else [*ids[: limit - 1], ids[-1]]


def encode_sources(
    tokenizer: PreTrainedTokenizerBase, sources: Sequence[str], max_length: int
) -> tuple[list[list[int]], list[int]]:
    """The token ids of `sources`, a source over `max_length` tokens cut to its first ones (`cut_source`); and
    the indices cut."""
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
    """`generate` keywords for section 6.1's limit: each sentence at most its own source length + 50 new
    tokens."""
    # One transfer of the source lengths, not one per sentence (each a device synchronisation on a GPU).
    lengths = attention_mask.sum(-1).tolist()
    limits = torch.tensor(
        [paper_max_new_tokens(model.config, length, extra_output_tokens) for length in lengths]
    )
    return {
        "max_new_tokens": int(limits.max()),
        "stopping_criteria": StoppingCriteriaList([NewTokenLimit(limits)]),
    }


# Where a resolved decoding value came from, first found first: the caller, the checkpoint's generation
# config, sampling (one draw a step, where neither sets a beam size), the paper (section 6.1).
FROM_CALLER, FROM_CHECKPOINT, FROM_SAMPLING, FROM_PAPER = "given", "checkpoint", "sampling", "paper"
DECODING_NAMES = ("num_beams", "length_penalty", "max_new_tokens")


@dataclass(frozen=True)
class DecodingOptions:
    """How sentences are decoded: the one object the pipeline, scripts, evaluation, engines and
    the service share. Here, beside the paper's values, so that `resolve_decoding` returns it to the pipeline
    too, which a checkpoint carries without the rest of the package.

    The search: `num_beams`, `length_penalty`, `max_new_tokens` and `other_generate_kwargs` (any other
    `generate` keyword: do_sample...) go to `generate`; None leaves the first three to `resolve_decoding`
    (the model's generation config, else the paper's), and the paper's `max_new_tokens` gives each sentence
    its source length + `extra_output_tokens` (section 6.1).
    What else decides the text, so it is kept with the search: `skip_long_lines`, translate a source longer
    than the model's positions to "" rather than cut it; `clean_up_tokenization_spaces`, detokenize with
    transformers' clean-up of spaces before punctuation (the service takes it per request).
    How a decoding runs, not what it gives: `cache_implementation` (generate's cache, the same tokens;
    reports record it with the search). How sentences are batched travels beside these options
    (`hf_vanilla.translation.decoding.Batching`).
    Frozen and hashable, so options can key batches."""

    num_beams: int | None = None
    length_penalty: float | None = None
    max_new_tokens: int | None = None
    cache_implementation: str | None = None
    extra_output_tokens: int = PAPER_EXTRA_OUTPUT_TOKENS
    skip_long_lines: bool = False
    clean_up_tokenization_spaces: bool = False
    # Left out of the hash (a dict has none) but not of equality, so equal options still hash alike.
    other_generate_kwargs: Mapping[str, Any] = field(default_factory=dict, hash=False)

    def replace(self, **settings) -> DecodingOptions:
        """These options with `settings` over them: fields by name, any other name a `generate` keyword."""
        names = {option.name for option in fields(self)} - {"other_generate_kwargs"}
        own = {name: value for name, value in settings.items() if name in names}
        others = {name: value for name, value in settings.items() if name not in names}
        return dataclasses.replace(
            self, **own, other_generate_kwargs={**self.other_generate_kwargs, **others}
        )

    def generate_kwargs(self) -> dict[str, Any]:
        """The keywords `generate` takes from these options: those set, and the others."""
        chosen = {name: getattr(self, name) for name in (*DECODING_NAMES, "cache_implementation")}
        return {
            **{name: value for name, value in chosen.items() if value is not None},
            **self.other_generate_kwargs,
        }

    def settings(self) -> dict[str, Any]:
        """The options that differ from the defaults, as keywords that `replace` reads back: what a report
        records of a decoding."""
        decoding = (*DECODING_NAMES, "other_generate_kwargs")
        own = {
            option.name: getattr(self, option.name)
            for option in fields(self)
            if option.name not in decoding and getattr(self, option.name) != option.default
        }
        return {**own, **self.other_generate_kwargs, **self.generate_kwargs()}


DEFAULT_DECODING = DecodingOptions()


def resolve_decoding(
    generation_config: GenerationConfig | None, options: DecodingOptions = DEFAULT_DECODING
) -> tuple[DecodingOptions, dict[str, str]]:
    """`options` with the beam size, length penalty and output limit each the first set of: `options`' own
    (None is not set), what `generation_config` (a checkpoint's) saved, the paper's (beam 4, length penalty
    0.6, source length + 50; with sampling, one beam); and where each came from, by name (FROM_CALLER,
    FROM_CHECKPOINT, FROM_SAMPLING or FROM_PAPER). What every decoder here decodes with.

    A saved value is one the config holds beyond GenerationConfig's own defaults (`to_diff_dict`), so a bare
    config leaves everything to the paper. Greedy search (one beam) takes no length penalty, whoever set one:
    it ranks no finished hypotheses, and generate warns of one. The paper's output limit, None, is each
    sentence its source length + `PAPER_EXTRA_OUTPUT_TOKENS`."""
    given = options.generate_kwargs()
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
    return dataclasses.replace(options, **values), sources


def describe_resolved(options: DecodingOptions, sources: Mapping[str, str]) -> str:
    """One line for a log of resolved `options` and their `sources` (`resolve_decoding`): "num_beams 4
    (checkpoint), length_penalty 0.6 (paper), max_new_tokens source length + 50 (paper)"."""
    limit = options.max_new_tokens or f"source length + {options.extra_output_tokens}"
    penalty = (
        "no length_penalty (greedy)"
        if options.length_penalty is None
        else f"length_penalty {options.length_penalty} ({sources['length_penalty']})"
    )
    return (
        f"num_beams {options.num_beams} ({sources['num_beams']}), {penalty}, "
        f"max_new_tokens {limit} ({sources['max_new_tokens']})"
    )


def decoding_report(options: DecodingOptions, sources: Mapping[str, str]) -> dict[str, Any]:
    """What a report records of resolved `options`: the beam size, length penalty and output limit set, and
    where each came from."""
    chosen = {name: getattr(options, name) for name in DECODING_NAMES}
    return {**{name: value for name, value in chosen.items() if value is not None}, "sources": dict(sources)}


def tokenizer_fingerprint(tokenizer: PreTrainedTokenizerBase) -> str:
    """16 hex digits of the sha256 of the vocabulary (token -> id, as sorted JSON): another vocabulary,
    another print."""
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
    """`text`'s white-space-separated words in reverse order (white space normalized): "a b c." -> "c. b
    a"."""
    return " ".join(reversed(text.split()))


def writes_right_to_left(config: PreTrainedConfig) -> bool:
    """Whether a model with `config` was trained on reversed target words (`config.right_to_left`); other
    model classes (MarianMT) have no such switch and write left to right."""
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
