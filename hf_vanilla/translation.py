"""Batched translation with `generate` (paper section 6.1): the decoding options, the engines that take them, and
the text files they work on."""

from __future__ import annotations

import contextlib
import contextvars
import dataclasses
import logging
import os
import sys
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

import torch
from tqdm.auto import tqdm
from transformers import (
    LogitsProcessor,
    LogitsProcessorList,
    PreTrainedConfig,
    PreTrainedModel,
    PreTrainedTokenizerBase,
)

from hf_vanilla.attention import SentenceAttentions, teacher_forced_attentions
from hf_vanilla.model.decoding import (
    DEFAULT_MAX_TOKENS,
    PAPER_EXTRA_OUTPUT_TOKENS,
    decode_translations,
    encode_sources,
    max_new_tokens_room,
    max_source_tokens,
    paper_length_limit,
    writes_right_to_left,
)

from .checkpoints import load_model_and_tokenizer
from .data import TokenBatchSampler
from .files import write_text_atomic

logger = logging.getLogger(__name__)
LINES_NAMED = 10  # a warning about lines (too long, not UTF-8) names this many of them
# Logits processors made for each batch from its encoded sources (`input_ids`, `attention_mask`), for those that
# need the sources: an ensemble's other members encode them (`hf_vanilla.research.ensemble`).
BatchLogitsProcessors = Callable[[Mapping[str, torch.Tensor]], Sequence[LogitsProcessor]]
# The line number of the first source, for the warnings that name lines: 1, unless a caller translating a file
# a chunk at a time says where its chunk begins (`lines_numbered_from`).
_FIRST_LINE_NUMBER = contextvars.ContextVar("first_line_number", default=1)


@dataclass(frozen=True)
class DecodingOptions:
    """How sentences are decoded and batched: the one object `translate_sentences`, evaluation and the service share.

    `num_beams`, `length_penalty`, `max_new_tokens` and `cache_implementation` go to `generate`; None leaves the
    model's generation config to decide, and a None `max_new_tokens` gives each sentence its source length +
    `extra_output_tokens` (section 6.1). `other_generate_kwargs`: any other `generate` keyword (do_sample...).
    `max_tokens`: source tokens a batch (sentences * longest source); `skip_long_lines`: translate a source longer
    than the model's positions to "" rather than cut it; `clean_up_tokenization_spaces`: detokenize with
    transformers' clean-up of spaces before punctuation. Frozen and hashable, so options can key batches."""

    num_beams: int | None = None
    length_penalty: float | None = None
    max_new_tokens: int | None = None
    cache_implementation: str | None = None
    extra_output_tokens: int = PAPER_EXTRA_OUTPUT_TOKENS
    skip_long_lines: bool = False
    max_tokens: int = DEFAULT_MAX_TOKENS
    show_progress: bool = True
    clean_up_tokenization_spaces: bool = False
    # Left out of the hash (a dict has none) but not of equality, so equal options still hash alike.
    other_generate_kwargs: Mapping[str, Any] = field(default_factory=dict, hash=False)

    def replace(self, **settings) -> DecodingOptions:
        """These options with `settings` over them: fields by name, any other name a `generate` keyword."""
        names = {option.name for option in dataclasses.fields(self)} - {"other_generate_kwargs"}
        own = {name: value for name, value in settings.items() if name in names}
        others = {name: value for name, value in settings.items() if name not in names}
        return dataclasses.replace(
            self, **own, other_generate_kwargs={**self.other_generate_kwargs, **others}
        )

    def generate_kwargs(self) -> dict[str, Any]:
        """The keywords `generate` takes from these options: those set, and the others."""
        chosen = {
            "num_beams": self.num_beams,
            "length_penalty": self.length_penalty,
            "max_new_tokens": self.max_new_tokens,
            "cache_implementation": self.cache_implementation,
        }
        return {
            **{name: value for name, value in chosen.items() if value is not None},
            **self.other_generate_kwargs,
        }

    def detokenize(self, config: PreTrainedConfig, tokenizer: PreTrainedTokenizerBase, output_ids) -> list[str]:
        """`output_ids` (rows of token ids) as one line of text each, in the word order of a model with `config`."""
        return decode_translations(
            tokenizer, output_ids, writes_right_to_left(config), self.clean_up_tokenization_spaces
        )


DEFAULT_DECODING = DecodingOptions()


def unencodable_character(text: str) -> int | None:
    """Where `text` holds a lone UTF-16 surrogate (JSON's "\\ud800" decodes to one), which is no Unicode text and
    which the tokenizer cannot take; None for text that is all Unicode."""
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
                f"line {index + _FIRST_LINE_NUMBER.get()} holds a lone surrogate ({sources[index][position]!a}) at "
                f"character {position}, which is no Unicode text and no tokenizer takes: decode the text as UTF-8"
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
    tokenizer: PreTrainedTokenizerBase, config: PreTrainedConfig, sources: Sequence[str], options: DecodingOptions
) -> dict[int, list[int]]:
    """The token ids of the nonblank `sources` by index, each within the model's positions (`translate_sentences`
    says how a longer one is cut or left out). An explicit `max_new_tokens` beyond the decoder's positions is a
    ValueError before anything is encoded."""
    if (options.max_new_tokens or 0) > (room := max_new_tokens_room(config)):
        raise ValueError(
            f"max_new_tokens={options.max_new_tokens} is more than the decoder has positions for: at most {room} "
            f"(max_position_embeddings {config.max_position_embeddings} less the start token)"
        )
    return _encode_within_positions(tokenizer, sources, max_source_tokens(config), options.skip_long_lines)


def encoded_batches(
    tokenizer: PreTrainedTokenizerBase,
    config: PreTrainedConfig,
    sources: Sequence[str],
    options: DecodingOptions,
    batch_tokens: int | None = None,
) -> Iterator[tuple[list[int], list[list[int]]]]:
    """The token ids of the nonblank `sources` (`encoded_sources`) sorted by length and batched so that sentences *
    longest source stays within `batch_tokens` (default: `options.max_tokens`), each batch with the indices in
    `sources` of its sentences, under a progress bar."""
    to_translate = encoded_sources(tokenizer, config, sources, options)
    if not to_translate:
        return
    indices, input_ids = list(to_translate), list(to_translate.values())
    lengths = [len(ids) for ids in input_ids]
    sampler = TokenBatchSampler(lengths, batch_tokens or options.max_tokens, shuffle=False)
    with tqdm(total=len(indices), unit="sent", desc="Translating", disable=not options.show_progress) as progress:
        for batch in sampler:
            yield [indices[position] for position in batch], [input_ids[position] for position in batch]
            progress.update(len(batch))


def _generate(
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
    processors = {"logits_processor": LogitsProcessorList(logits_processors(encoded))} if logits_processors else {}
    return model.generate(**encoded, **limit, **processors, **generate_kwargs)


@contextlib.contextmanager
def _evaluating(model: PreTrainedModel) -> Iterator[None]:
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
    logits_processors: BatchLogitsProcessors | None = None,
) -> Iterator[tuple[list[int], Any]]:
    """`generate`'s output for each batch of the nonblank `sources` (`encoded_batches`), with the indices in
    `sources` of its sentences."""
    with _evaluating(model):
        for indices, batch_ids in encoded_batches(tokenizer, model.config, sources, options):
            yield indices, _generate(model, tokenizer, batch_ids, options, logits_processors)


def translate_sentences(
    model: PreTrainedModel,
    tokenizer: PreTrainedTokenizerBase,
    sources: Sequence[str],
    options: DecodingOptions = DEFAULT_DECODING,
    logits_processors: BatchLogitsProcessors | None = None,
    **settings,
) -> list[str]:
    """Translate `sources` with `options` and return the detokenized translations in the order of `sources`.

    `settings` (fields of `DecodingOptions` or other `generate` keywords) go over `options`, as `generate`'s
    keywords go over its generation config. Sentences are sorted by length and batched so that sentences *
    longest source stays within `max_tokens` (beam search multiplies the memory by num_beams). Unless
    `max_new_tokens` is set, each sentence may produce up to its source length + `extra_output_tokens` new
    tokens (section 6.1), capped by the model's max_position_embeddings, whatever it is batched with.
    The `generate` options (num_beams, length_penalty, do_sample...) go over the model's generation config:
    pass num_beams=1 for greedy search whatever the saved model says.
    Blank or empty sources translate to "" without running the model; a line break inside a
    translation becomes a space, so one line in gives one line out. A source longer than the model's
    positions (`max_position_embeddings`) is cut to fit, or with `skip_long_lines` translates to "";
    a warning names those lines (1-based positions in `sources`, or numbered as `lines_numbered_from` says).
    An explicit `max_new_tokens` beyond the decoder's positions is a ValueError before anything is decoded. `logits_processors` gives each batch
    logits processors made from its encoded sources (an ensemble's: `hf_vanilla.research.ensemble`); `generate`'s
    own (temperature, top-k...) act on `model`'s scores before them.
    """
    translations = [""] * len(sources)
    options = options.replace(**settings)
    for indices, outputs in _generate_in_batches(model, tokenizer, sources, options, logits_processors):
        for index, text in zip(indices, options.detokenize(model.config, tokenizer, outputs), strict=True):
            translations[index] = text
    return translations


def translate_nbest(
    model: PreTrainedModel,
    tokenizer: PreTrainedTokenizerBase,
    sources: Sequence[str],
    num_beams: int,
    options: DecodingOptions = DEFAULT_DECODING,
    logits_processors: BatchLogitsProcessors | None = None,
    **settings,
) -> list[list[tuple[str, float]]]:
    """Each source's `num_beams` best translations from beam search, best first, with the score beam search
    ranked them by (sum of token log-probabilities / length ** length_penalty); `options`, `settings` and
    everything else as `translate_sentences`, whose first translations these are. A blank source gets [("", 0.0)]; greedy search
    (`num_beams` 1) gives each source its one translation, scored 0.

    Keeping the scores costs one (rows, vocab) tensor per decoding step until a batch ends: lower `max_tokens`
    if that does not fit."""
    nbest = [[("", 0.0)] for _ in sources]
    beam_search = num_beams > 1  # greedy search returns no sequence scores
    nbest_options = options.replace(
        **settings,
        num_beams=num_beams,
        num_return_sequences=num_beams,
        return_dict_in_generate=True,
        output_scores=beam_search,
    )
    batches = _generate_in_batches(model, tokenizer, sources, nbest_options, logits_processors)
    for indices, outputs in batches:
        texts = nbest_options.detokenize(model.config, tokenizer, outputs.sequences)
        scores = outputs.sequences_scores.tolist() if beam_search else [0.0] * len(texts)
        for position, index in enumerate(indices):
            rows = range(position * num_beams, (position + 1) * num_beams)
            nbest[index] = [(texts[row], scores[row]) for row in rows]
    return nbest


class TranslationEngine(Protocol):
    """What decodes sentences with `DecodingOptions`, whichever engine is behind it: transformers' `generate`
    (`TransformersEngine`, the reference) or another that gives the options the same meaning.

    Text in, text out (`translate`, `translate_nbest`), or in three steps for a caller that batches sentences
    itself (the service): `encode` once, `translate_encoded` a batch of those ids, `detokenize` the outputs.
    An engine that can also give the attention behind a translation has `attention(source_ids, options)`
    returning `SentenceAttentions` (`TransformersEngine.attention`); the service refuses attention to one without."""

    def translate(self, sources: Sequence[str], options: DecodingOptions) -> list[str]:
        """`translate_sentences`' contract: one translation a source, in order, "" for a blank one."""
        ...

    def translate_nbest(self, sources: Sequence[str], options: DecodingOptions) -> list[list[tuple[str, float]]]:
        """`translate_nbest`'s contract, `options.num_beams` (1 if None) translations a source."""
        ...

    @property
    def max_source_tokens(self) -> int:
        """The longest source the model takes, in tokens: a longer one is cut or left blank (`skip_long_lines`)."""
        ...

    @property
    def concurrent_batches(self) -> int:
        """How many batches `translate_encoded` decodes at once when called from that many threads."""
        ...

    def encode(self, sources: Sequence[str]) -> list[list[int]]:
        """Each source's token ids, `</s>` included, not cut to `max_source_tokens` (`cut_source` cuts one)."""
        ...

    def translate_encoded(self, batch: Sequence[Sequence[int]], options: DecodingOptions) -> list[list[int]]:
        """The output token ids of one batch of nonblank encoded sources, each within `max_source_tokens`,
        decoded together as given: no sorting, no cutting into smaller batches. Thread-safe."""
        ...

    def detokenize(self, output_ids: Sequence[Sequence[int]], options: DecodingOptions) -> list[str]:
        """Each output of `translate_encoded` as one line of text."""
        ...

    def describe(self) -> dict[str, str]:
        """What a report records of the engine: `engine`, `device` and `precision` (a dtype or compute type)."""
        ...


@dataclass(frozen=True)
class TransformersEngine:
    """Decoding through transformers' `generate`, as `translate_sentences` and `translate_nbest` do."""

    model: PreTrainedModel
    tokenizer: PreTrainedTokenizerBase

    def translate(self, sources: Sequence[str], options: DecodingOptions = DEFAULT_DECODING) -> list[str]:
        return translate_sentences(self.model, self.tokenizer, sources, options)

    def translate_nbest(
        self, sources: Sequence[str], options: DecodingOptions = DEFAULT_DECODING
    ) -> list[list[tuple[str, float]]]:
        return translate_nbest(self.model, self.tokenizer, sources, options.num_beams or 1, options)

    @property
    def max_source_tokens(self) -> int:
        return max_source_tokens(self.model.config)

    @property
    def concurrent_batches(self) -> int:
        return 1  # torch's threads already share each batch's work

    def encode(self, sources: Sequence[str]) -> list[list[int]]:
        return self.tokenizer(list(sources), verbose=False)["input_ids"]

    def translate_encoded(
        self, batch: Sequence[Sequence[int]], options: DecodingOptions = DEFAULT_DECODING
    ) -> list[list[int]]:
        with _evaluating(self.model):
            return _generate(self.model, self.tokenizer, batch, options).tolist()

    def detokenize(self, output_ids: Sequence[Sequence[int]], options: DecodingOptions = DEFAULT_DECODING) -> list[str]:
        return options.detokenize(self.model.config, self.tokenizer, output_ids)

    def describe(self) -> dict[str, str]:
        dtype = str(self.model.dtype).removeprefix("torch.")
        return {"engine": TRANSFORMERS, "device": str(self.model.device), "precision": dtype}

    def attention(self, source_ids: Sequence[int], options: DecodingOptions = DEFAULT_DECODING) -> SentenceAttentions:
        """The translation of one encoded source (within `max_source_tokens`) as `translate` gives it with
        `options`, and the attention behind it: the output's own tokens teacher-forced through the model
        (`hf_vanilla.attention`)."""
        [output_ids] = self.translate_encoded([source_ids], options)
        [text] = self.detokenize([output_ids], options)
        return teacher_forced_attentions(self.model, self.tokenizer, list(source_ids), output_ids, text)


TRANSFORMERS, CTRANSLATE2 = "transformers", "ctranslate2"
# A small model's decoding step is too little work to share among many threads: past this many, another batch
# decodes at once instead (CTranslate2's inter_threads), each on its share of the threads.
CPU_THREADS_PER_BATCH = 4
ENGINES = (TRANSFORMERS, CTRANSLATE2)
# CTranslate2's compute types (weights_activations); "auto": the fastest the device runs (`hf_vanilla.ctranslate2_engine`)
COMPUTE_TYPES = ("auto", "int8", "int8_float32", "int8_float16", "int8_bfloat16", "float32", "float16", "bfloat16")


@dataclass(frozen=True)
class EngineSettings:
    """Which engine decodes and how it runs: `engine` "transformers" (`generate`, the reference) or "ctranslate2";
    `device` (None or "auto": the GPU if present); the transformers engine's `dtype` ("auto", "float32",
    "bfloat16", "float16"); the CTranslate2 engine's `compute_type` (`COMPUTE_TYPES`) and `ctranslate2_dir`, where
    its converted models are cached (None: under the Hugging Face cache); on a CPU, `threads` and the
    CTranslate2 engine's `inter_threads` (`cpu_threads`)."""

    engine: str = TRANSFORMERS
    device: str | None = None
    dtype: str = "float32"
    compute_type: str = "auto"
    ctranslate2_dir: str | os.PathLike | None = None
    threads: int | None = None
    inter_threads: int | None = None

    def cpu_threads(self) -> tuple[int, int]:
        """On a CPU: how many batches decode at once (`inter_threads`; CTranslate2 keeps a replica of the model
        for each) and the threads each decodes with, `threads` (None: torch's count, OMP_NUM_THREADS or the
        cores) shared among them. Unless told, a replica for every `CPU_THREADS_PER_BATCH` threads."""
        threads = self.threads or torch.get_num_threads()
        inter_threads = self.inter_threads or max(1, threads // CPU_THREADS_PER_BATCH)
        return inter_threads, max(1, threads // inter_threads)

    @property
    def precision(self) -> str:
        """What the engine was asked to compute in: the transformers engine's dtype, the ctranslate2 engine's
        compute type."""
        return self.dtype if self.engine == TRANSFORMERS else self.compute_type

    def __post_init__(self):
        if self.engine not in ENGINES:
            raise ValueError(f"unknown engine {self.engine!r}; choose one of {', '.join(ENGINES)}")
        if self.compute_type not in COMPUTE_TYPES:
            raise ValueError(f"unknown compute type {self.compute_type!r}; choose one of {', '.join(COMPUTE_TYPES)}")
        if self.engine == TRANSFORMERS and self.compute_type != "auto":
            raise ValueError(
                f"compute type {self.compute_type} is the ctranslate2 engine's (--engine ctranslate2); the transformers "
                "engine takes --dtype"
            )
        if self.engine == CTRANSLATE2 and self.dtype != "float32":
            raise ValueError(
                f"dtype {self.dtype} is the transformers engine's; the ctranslate2 engine takes --compute-type "
                "(float32, bfloat16, float16, int8...)"
            )


DEFAULT_ENGINE = EngineSettings()


def load_engine(
    model_name_or_path: str | os.PathLike, settings: EngineSettings = DEFAULT_ENGINE
) -> TranslationEngine:
    """The engine `settings` name for a saved model directory (or Hub id) and its tokenizer: `generate` over the
    model as `load_model_and_tokenizer` loads it, or CTranslate2 over the model converted on first use
    (`hf_vanilla.ctranslate2_engine.load_ctranslate2_engine`)."""
    if settings.engine == CTRANSLATE2:
        # ctranslate2 is an optional extra, imported only when chosen
        from .ctranslate2_engine import load_ctranslate2_engine

        return load_ctranslate2_engine(model_name_or_path, settings)
    if settings.threads:
        torch.set_num_threads(settings.threads)
    engine = TransformersEngine(*load_model_and_tokenizer(model_name_or_path, settings.device, settings.dtype))
    if engine.model.device.type == "cpu":
        logger.info("transformers engine: %d threads (--threads)", torch.get_num_threads())
    return engine


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
