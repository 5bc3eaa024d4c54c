"""Batched translation with `generate` (paper section 6.1): the decoding options every engine takes
(`DecodingOptions`, at home in `hf_vanilla.model.decoding` so the pipeline resolves them too), how sentences
are batched beside them (`Batching`), `generate` over batches of them, and the text files they work on."""

from __future__ import annotations

import contextlib
import contextvars
import logging
import os
import sys
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
from tqdm.auto import tqdm
from transformers import (
    LogitsProcessor,
    LogitsProcessorList,
    PreTrainedConfig,
    PreTrainedModel,
    PreTrainedTokenizerBase,
)

from hf_vanilla.data.batches import TokenBatchSampler
from hf_vanilla.files import write_text_atomic
from hf_vanilla.model.decoding import (
    DEFAULT_DECODING,
    DEFAULT_MAX_TOKENS,
    DecodingOptions,
    decode_translations,
    encode_sources,
    max_new_tokens_room,
    max_source_tokens,
    paper_length_limit,
    resolve_decoding,
    writes_right_to_left,
)

logger = logging.getLogger(__name__)
LINES_NAMED = 10  # a warning about lines (too long, not UTF-8) names this many of them
# Logits processors made for each batch from its encoded sources (`input_ids`, `attention_mask`), for those
# that need the sources: an ensemble's other members encode them (`hf_vanilla.research.ensemble`).
BatchLogitsProcessors = Callable[[Mapping[str, torch.Tensor]], Sequence[LogitsProcessor]]
# The line number of the first source, for the warnings that name lines: 1, unless a caller translating a file
# a chunk at a time says where its chunk begins (`lines_numbered_from`).
_FIRST_LINE_NUMBER = contextvars.ContextVar("first_line_number", default=1)


@dataclass(frozen=True)
class Batching:
    """How a decoding runs, not what it gives, which travels beside its `DecodingOptions`: `max_tokens`,
    source tokens a batch (sentences * longest source), and whether a progress bar shows."""

    max_tokens: int = DEFAULT_MAX_TOKENS
    show_progress: bool = True


DEFAULT_BATCHING = Batching()
QUIET = Batching(show_progress=False)


def detokenize(
    config: PreTrainedConfig, tokenizer: PreTrainedTokenizerBase, output_ids, options: DecodingOptions
) -> list[str]:
    """`output_ids` (rows of token ids) as one line of text each, in the word order of a model with `config`,
    cleaned up as `options` say."""
    return decode_translations(
        tokenizer, output_ids, writes_right_to_left(config), options.clean_up_tokenization_spaces
    )



def unencodable_character(text: str) -> int | None:
    """Where `text` holds a lone UTF-16 surrogate (JSON's "\\ud800" decodes to one), which is no Unicode text
    and which the tokenizer cannot take; None for text that is all Unicode."""
    try:
        text.encode("utf-8")
    except UnicodeEncodeError as err:
        return err.start
    return None


def named_lines(numbers: Sequence[int]) -> str:
    """The first LINES_NAMED line `numbers` for a warning, "..." after them if there are more."""
    return ", ".join(map(str, numbers[:LINES_NAMED])) + ("..." if len(numbers) > LINES_NAMED else "")


@contextlib.contextmanager
def lines_numbered_from(first_line: int) -> Iterator[None]:
    """Within the block, the warnings that name sources by line number count them from `first_line`: a chunk's
    sources by their lines in the file it was read from."""
    token = _FIRST_LINE_NUMBER.set(first_line)
    try:
        yield
    finally:
        _FIRST_LINE_NUMBER.reset(token)


def _encode_within_positions(
    tokenizer: PreTrainedTokenizerBase, sources: Sequence[str], positions: int, skip_long_lines: bool
) -> dict[int, list[int]]:
    """The token ids of each nonblank source, by index: a source longer than the encoder's `positions` cut to
    fit, or left out with `skip_long_lines`; either way one warning counts them and names the first lines."""
    nonblank = [index for index, source in enumerate(sources) if source.strip()]
    if not nonblank:
        return {}
    for index in nonblank:
        if (position := unencodable_character(sources[index])) is not None:
            raise ValueError(
                f"line {index + _FIRST_LINE_NUMBER.get()} holds a lone surrogate "
                f"({sources[index][position]!a}) at character {position}, which is no Unicode text and no "
                f"tokenizer takes: decode the text as UTF-8"
            )
    input_ids, too_long = encode_sources(tokenizer, [sources[index] for index in nonblank], positions)
    if too_long:
        lines = [nonblank[position] + _FIRST_LINE_NUMBER.get() for position in too_long]
        logger.warning(
            "%d of %d lines are longer than the model's %d positions and were %s: line %s",
            len(lines),
            len(sources),
            positions,
            "left blank" if skip_long_lines else f"cut to their first {positions} tokens",
            named_lines(lines),
        )
    left_out = set(too_long) if skip_long_lines else set()
    return {
        index: ids
        for position, (index, ids) in enumerate(zip(nonblank, input_ids, strict=True))
        if position not in left_out
    }


def encoded_sources(
    tokenizer: PreTrainedTokenizerBase,
    config: PreTrainedConfig,
    sources: Sequence[str],
    options: DecodingOptions,
) -> dict[int, list[int]]:
    """The token ids of the nonblank `sources` by index, each within the model's positions
    (`translate_sentences` says how a longer one is cut or left out). An explicit `max_new_tokens` beyond the
    decoder's positions is a ValueError before anything is encoded."""
    if (options.max_new_tokens or 0) > (room := max_new_tokens_room(config)):
        raise ValueError(
            f"max_new_tokens={options.max_new_tokens} is more than the decoder has positions for: at most "
            f"{room} (max_position_embeddings {config.max_position_embeddings} less the start token)"
        )
    return _encode_within_positions(tokenizer, sources, max_source_tokens(config), options.skip_long_lines)


def encoded_batches(
    tokenizer: PreTrainedTokenizerBase,
    config: PreTrainedConfig,
    sources: Sequence[str],
    options: DecodingOptions,
    batching: Batching = DEFAULT_BATCHING,
    batch_tokens: int | None = None,
) -> Iterator[tuple[list[int], list[list[int]]]]:
    """The token ids of the nonblank `sources` (`encoded_sources`) sorted by length and batched so that
    sentences * longest source stays within `batch_tokens` (default: `batching.max_tokens`), each batch with
    the indices in `sources` of its sentences, under a progress bar unless `batching` hides it."""
    to_translate = encoded_sources(tokenizer, config, sources, options)
    if not to_translate:
        return
    indices, input_ids = list(to_translate), list(to_translate.values())
    lengths = [len(ids) for ids in input_ids]
    sampler = TokenBatchSampler(lengths, batch_tokens or batching.max_tokens, shuffle=False)
    with tqdm(
        total=len(indices), unit="sent", desc="Translating", disable=not batching.show_progress
    ) as progress:
        for batch in sampler:
            yield [indices[position] for position in batch], [input_ids[position] for position in batch]
            progress.update(len(batch))


def generate_batch(
    model: PreTrainedModel,
    tokenizer: PreTrainedTokenizerBase,
    batch_ids: Sequence[Sequence[int]],
    options: DecodingOptions,
    logits_processors: BatchLogitsProcessors | None = None,
) -> Any:
    """`generate`'s output for one batch of encoded sources, each sentence within its own output limit."""
    generate_kwargs = options.generate_kwargs()
    encoded = tokenizer.pad({"input_ids": list(batch_ids)}, return_tensors="pt").to(model.device)
    limit = (
        {}
        if "max_new_tokens" in generate_kwargs
        else paper_length_limit(model, encoded["attention_mask"], options.extra_output_tokens)
    )
    processors = (
        {"logits_processor": LogitsProcessorList(logits_processors(encoded))} if logits_processors else {}
    )
    return model.generate(**encoded, **limit, **processors, **generate_kwargs)


@contextlib.contextmanager
def evaluation_mode(model: PreTrainedModel) -> Iterator[None]:
    """`model` in eval mode without autograd within the block, back in the mode it was in after."""
    model_was_training = model.training
    model.eval()
    try:
        with torch.inference_mode():
            yield
    finally:
        model.train(model_was_training)


def _generate_in_batches(
    model: PreTrainedModel,
    tokenizer: PreTrainedTokenizerBase,
    sources: Sequence[str],
    options: DecodingOptions,
    batching: Batching,
    logits_processors: BatchLogitsProcessors | None = None,
) -> Iterator[tuple[list[int], Any]]:
    """`generate`'s output for each batch of the nonblank `sources` (`encoded_batches`), with the indices in
    `sources` of its sentences."""
    options, _ = resolve_decoding(model.generation_config, options)
    with evaluation_mode(model):
        for indices, batch_ids in encoded_batches(tokenizer, model.config, sources, options, batching):
            yield indices, generate_batch(model, tokenizer, batch_ids, options, logits_processors)


def translate_sentences(
    model: PreTrainedModel,
    tokenizer: PreTrainedTokenizerBase,
    sources: Sequence[str],
    options: DecodingOptions = DEFAULT_DECODING,
    batching: Batching = DEFAULT_BATCHING,
    logits_processors: BatchLogitsProcessors | None = None,
    **settings,
) -> list[str]:
    """Translate `sources` with `options` and return the detokenized translations in the order of `sources`.

    `settings` (fields of `DecodingOptions` or other `generate` keywords) go over `options`, as `generate`'s
    keywords go over its generation config. Sentences are sorted by length and batched so that sentences *
    longest source stays within `batching.max_tokens` (beam search multiplies the memory by num_beams). Unless
    `max_new_tokens` is set, each sentence may produce up to its source length + `extra_output_tokens` new
    tokens (section 6.1), capped by the model's max_position_embeddings, whatever it is batched with. The beam
    size, length penalty and output limit not given are the model's generation config's, else the paper's
    (`resolve_decoding`): pass num_beams=1 for greedy search whatever the saved model says. Blank or empty
    sources translate to "" without running the model; a line break inside a translation becomes a space, so
    one line in gives one line out. A source longer than the model's positions (`max_position_embeddings`) is
    cut to fit, or with `skip_long_lines` translates to ""; a warning names those lines (1-based positions in
    `sources`, or numbered as `lines_numbered_from` says). An explicit `max_new_tokens` beyond the decoder's
    positions is a ValueError before anything is decoded. `logits_processors` gives each batch logits
    processors made from its encoded sources (an ensemble's: `hf_vanilla.research.ensemble`); `generate`'s own
    (temperature, top-k...) act on `model`'s scores before them.
    """
    translations = [""] * len(sources)
    options = options.replace(**settings)
    for indices, outputs in _generate_in_batches(
        model, tokenizer, sources, options, batching, logits_processors
    ):
        for index, text in zip(indices, detokenize(model.config, tokenizer, outputs, options), strict=True):
            translations[index] = text
    return translations


def translate_nbest(
    model: PreTrainedModel,
    tokenizer: PreTrainedTokenizerBase,
    sources: Sequence[str],
    num_beams: int,
    options: DecodingOptions = DEFAULT_DECODING,
    batching: Batching = DEFAULT_BATCHING,
    logits_processors: BatchLogitsProcessors | None = None,
    **settings,
) -> list[list[tuple[str, float]]]:
    """Each source's `num_beams` best translations from beam search, best first, with the score beam search
    ranked them by (sum of token log-probabilities / length ** length_penalty); `options`, `settings` and
    everything else as `translate_sentences`, whose first translations these are. A blank source gets [("",
    0.0)]; greedy search (`num_beams` 1) gives each source its one translation, scored 0.

    Keeping the scores costs one (rows, vocab) tensor per decoding step until a batch ends: lower
    `batching.max_tokens` if that does not fit."""
    nbest = [[("", 0.0)] for _ in sources]
    beam_search = num_beams > 1  # greedy search returns no sequence scores
    nbest_options = options.replace(
        **settings,
        num_beams=num_beams,
        num_return_sequences=num_beams,
        return_dict_in_generate=True,
        output_scores=beam_search,
    )
    batches = _generate_in_batches(
        model, tokenizer, sources, nbest_options, batching, logits_processors
    )
    for indices, outputs in batches:
        texts = detokenize(model.config, tokenizer, outputs.sequences, nbest_options)
        scores = outputs.sequences_scores.tolist() if beam_search else [0.0] * len(texts)
        for position, index in enumerate(indices):
            rows = range(position * num_beams, (position + 1) * num_beams)
            nbest[index] = [(texts[row], scores[row]) for row in rows]
    return nbest


def read_lines(path: str | os.PathLike | None = None) -> list[str]:
    """The lines of a UTF-8 text file (stdin for None or "-"), split at "\n" only, line ends removed."""
    data = sys.stdin.buffer.read() if path in (None, "-") else Path(path).read_bytes()
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as err:
        raise ValueError(f"{path or 'stdin'} is not UTF-8 text: {err}") from err
    lines = text.split("\n")
    if lines[-1] == "":
        lines.pop()  # the final line end, not an empty last line
    return [line.removesuffix("\r") for line in lines]


def write_lines_atomic(path: str | os.PathLike, lines: Sequence[str]) -> Path:
    """One line per item, each ended by "\n", written atomically."""
    return write_text_atomic(path, "".join(f"{line}\n" for line in lines))
