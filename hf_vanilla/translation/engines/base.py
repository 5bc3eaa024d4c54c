"""What every engine is to its callers: the protocol, the abilities an engine may have beyond it, the settings
that choose and run one, and the registry that loads one by name. Callers ask an engine (or the registry,
before loading) for an ability, never for its name or type."""

from __future__ import annotations

import os
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Protocol

import torch

from hf_vanilla.model.decoding import DecodingOptions
from hf_vanilla.translation.decoding import DEFAULT_BATCHING, Batching, BatchLogitsProcessors

# Abilities beyond the protocol's plain decoding, which an engine lists in `abilities`:
# `attention(source_ids, options)`: the attention behind its own translation, and `forced_attention`: behind
# another engine's (the service weighs a CTranslate2 translation with it)
ATTENTION = "attention"
NBEST_SCORES = "n-best scores"  # `translate_nbest` scores beam search's hypotheses as generate ranks them
SAMPLING = "sampling"  # options with do_sample, top_k, temperature...
LOGITS_PROCESSORS = "logits processors"  # `translate(..., logits_processors=)`: an ensemble's scores mixed in
VOCABULARY_MAP = "vocabulary map"  # `EngineSettings.vocab_map`: outputs within the checkpoint's shortlist

TRANSFORMERS, CTRANSLATE2 = "transformers", "ctranslate2"  # the engines this package registers
# CTranslate2's compute types (weights_activations); "auto": the fastest the device runs
COMPUTE_TYPES = (
    "auto", "int8", "int8_float32", "int8_float16", "int8_bfloat16", "float32", "float16", "bfloat16"
)


class TranslationEngine(Protocol):
    """What decodes sentences with `DecodingOptions`, batched as `Batching` says, whichever engine is behind
    it: transformers' `generate` (the reference) or another that gives the options the same meaning.

    Text in, text out (`translate`, `translate_nbest`), or in three steps for a caller that batches sentences
    itself (the service): `encode` once, `translate_encoded` a batch of those ids, `detokenize` the outputs.
    `abilities` lists what else it can do (`ATTENTION`, `NBEST_SCORES`, `SAMPLING`, `LOGITS_PROCESSORS`);
    `require` refuses a caller that needs one it lacks."""

    abilities: frozenset[str]

    def translate(
        self,
        sources: Sequence[str],
        options: DecodingOptions,
        batching: Batching = DEFAULT_BATCHING,
        logits_processors: BatchLogitsProcessors | None = None,
    ) -> list[str]:
        """`translate_sentences`' contract: one translation a source, in order, "" for a blank one."""
        ...

    def translate_nbest(
        self,
        sources: Sequence[str],
        options: DecodingOptions,
        batching: Batching = DEFAULT_BATCHING,
        logits_processors: BatchLogitsProcessors | None = None,
    ) -> list[list[tuple[str, float]]]:
        """`translate_nbest`'s contract, `options.num_beams` (1 if None) translations a source."""
        ...

    @property
    def max_source_tokens(self) -> int:
        """The longest source the model takes, in tokens: a longer one is cut or left blank
        (`skip_long_lines`)."""
        ...

    @property
    def concurrent_batches(self) -> int:
        """How many batches `translate_encoded` decodes at once when called from that many threads."""
        ...

    def encode(self, sources: Sequence[str]) -> list[list[int]]:
        """Each source's token ids, `</s>` included, not cut to `max_source_tokens` (`cut_source` cuts
        one)."""
        ...

    def translate_encoded(
        self, batch: Sequence[Sequence[int]], options: DecodingOptions, batching: Batching = DEFAULT_BATCHING
    ) -> list[list[int]]:
        """The output token ids of one batch of nonblank encoded sources, each within `max_source_tokens`,
        decoded together as given: no sorting, no cutting into smaller batches. Thread-safe."""
        ...

    def detokenize(self, output_ids: Sequence[Sequence[int]], options: DecodingOptions) -> list[str]:
        """Each output of `translate_encoded` as one line of text."""
        ...

    def describe(self) -> dict[str, str]:
        """What a report records of the engine: `engine`, `device` and `precision` (a dtype or compute
        type)."""
        ...


@dataclass(frozen=True)
class EngineSettings:
    """Which engine decodes and how it runs: `engine`, a registered name ("transformers": `generate`, the
    reference; "ctranslate2"); `device` (None or "auto": the GPU if present); the transformers engine's
    `dtype` ("auto", "float32", "bfloat16", "float16"); the CTranslate2 engine's `compute_type`
    (`COMPUTE_TYPES`) and `ctranslate2_dir`, where its converted models are cached (None: under the Hugging
    Face cache); on a CPU, `threads` and the CTranslate2 engine's `inter_threads` (`cpu_threads`);
    `vocab_map`: decode within the checkpoint's vocabulary shortlist (`translation.shortlist`), for an engine
    with `VOCABULARY_MAP`."""

    engine: str = TRANSFORMERS
    device: str | None = None
    dtype: str = "float32"
    compute_type: str = "auto"
    ctranslate2_dir: str | os.PathLike | None = None
    threads: int | None = None
    inter_threads: int | None = None
    vocab_map: bool = False

    def cpu_threads(self) -> tuple[int, int]:
        """On a CPU: how many batches decode at once (`inter_threads`; CTranslate2 keeps a replica of the
        model for each) and the threads each decodes with, `threads` (None: torch's count, OMP_NUM_THREADS or
        the cores) shared among them. Unless told, a replica for every thread: a batch's decoding step is too
        little work to share among threads (the service on 2 cores answered 1.5x as many sentences with two
        replicas of one thread as with one of two, docs/serving.md)."""
        threads = self.threads or torch.get_num_threads()
        inter_threads = self.inter_threads or threads
        return inter_threads, max(1, threads // inter_threads)

    @property
    def precision(self) -> str:
        """What the engine was asked to compute in: the transformers engine's dtype, the ctranslate2 engine's
        compute type."""
        return self.dtype if self.engine == TRANSFORMERS else self.compute_type

    def __post_init__(self):
        if self.engine not in _REGISTRY:
            raise ValueError(f"unknown engine {self.engine!r}; choose one of {', '.join(engine_names())}")
        if self.compute_type not in COMPUTE_TYPES:
            raise ValueError(
                f"unknown compute type {self.compute_type!r}; choose one of {', '.join(COMPUTE_TYPES)}"
            )
        if self.engine == TRANSFORMERS and self.compute_type != "auto":
            raise ValueError(
                f"compute type {self.compute_type} is the ctranslate2 engine's (--engine ctranslate2); the "
                "transformers engine takes --dtype"
            )
        if self.engine == CTRANSLATE2 and self.dtype != "float32":
            raise ValueError(
                f"dtype {self.dtype} is the transformers engine's; the ctranslate2 engine takes "
                "--compute-type (float32, bfloat16, float16, int8...)"
            )
        if self.vocab_map and VOCABULARY_MAP not in _REGISTRY[self.engine].abilities:
            why = "--vocab-map decodes within the checkpoint's shortlist"
            raise ValueError(missing_ability(self.engine, VOCABULARY_MAP, why))


EngineLoader = Callable[[str | os.PathLike, EngineSettings], TranslationEngine]


@dataclass(frozen=True)
class _Registered:
    load: EngineLoader
    abilities: frozenset[str]


_REGISTRY: dict[str, _Registered] = {}


def register_engine(name: str, load: EngineLoader, abilities: frozenset[str]) -> None:
    """Make `load(model_name_or_path, settings)` the engine called `name` (`EngineSettings.engine`), whose
    engines have `abilities`, known before one loads."""
    _REGISTRY[name] = _Registered(load, abilities)


def engine_names() -> tuple[str, ...]:
    """The registered engines, the reference (transformers) first."""
    return tuple(sorted(_REGISTRY, key=lambda name: name != TRANSFORMERS))


def compared_engines(
    engines: Sequence[str], compute_types: Sequence[str], **settings
) -> list[EngineSettings]:
    """The settings of each of `engines` in turn, once for each of `compute_types` where the engine takes one
    (the ctranslate2 engine), with `settings` besides: the runs of a comparison of engines, named by `engine`
    and `precision`."""
    return [
        EngineSettings(engine, compute_type=compute_type, **settings)
        for engine in engines
        for compute_type in (("auto",) if engine == TRANSFORMERS else compute_types)
    ]


def engine_abilities() -> Mapping[str, frozenset[str]]:
    """Each registered engine's abilities, by name: what a caller can check before loading one."""
    return {name: registered.abilities for name, registered in _REGISTRY.items()}


def engines_with(ability: str) -> list[str]:
    return [name for name, abilities in engine_abilities().items() if ability in abilities]


def missing_ability(engine: str, ability: str, why: str) -> str:
    """The one line that refuses `engine` for want of `ability`, naming the engines that have it."""
    able = ", ".join(f"--engine {name}" for name in engines_with(ability))
    return f"{why}, which the {engine} engine cannot ({ability}): decode with {able}"


def require(engine: TranslationEngine, ability: str, why: str) -> None:
    """A ValueError of one line (`missing_ability`) unless `engine` has `ability`."""
    if ability not in engine.abilities:
        raise ValueError(missing_ability(engine.describe()["engine"], ability, why))


def load_engine(
    model_name_or_path: str | os.PathLike, settings: EngineSettings | None = None
) -> TranslationEngine:
    """The engine `settings` name for a saved model directory (or Hub id) and its tokenizer."""
    settings = settings or EngineSettings()
    return _REGISTRY[settings.engine].load(model_name_or_path, settings)
