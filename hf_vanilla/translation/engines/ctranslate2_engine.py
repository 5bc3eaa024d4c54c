"""Decoding with CTranslate2: the same `DecodingOptions`, the same translations, at CTranslate2's speed.

A checkpoint converts straight to CTranslate2's own Transformer spec (`transformer_spec`): the paper's post-LN
model and the departures (`pre_layernorm`, an untied output projection) alike, its sinusoid table and
LayerNorm epsilon as they are. The conversion runs on first use and is cached by the checkpoint's digest,
outside the checkpoint directory (`cached_conversion`).

The options mean what they mean to `generate` (`hf_vanilla.translation.decoding.translate_sentences`):
- length penalty: both rank a finished hypothesis by sum(log p) / length**length_penalty, the end token
  counted in the length (CTranslate2 counts it when asked to return it, `return_end_token`, which is asked
  here);
- each sentence's own limit of source length + 50: CTranslate2's `max_decoding_length` is one number a call,
  so beam search decodes a batch's sentences of equal limits together; greedy search decodes the batch at its
  longest limit and cuts each translation at its own, which gives the same tokens;
- blank lines, long lines (cut or left blank with the same warning) and word order are the shared code's
  (`hf_vanilla.translation.decoding.encoded_batches`); a corpus goes to `translate_batch` in chunks of
  `CHUNK_BATCHES` batches' worth of sorted sentences, which CTranslate2 cuts into batches of `max_tokens`
  itself (and decodes on its `inter_threads` replicas at once), token ids mapped to its token strings by one
  list lookup each. One rule differs: CTranslate2's beam search stops a sentence once `num_beams` hypotheses
  have finished, which is `generate`'s `early_stopping=True`; `generate`'s default goes on while a running
  hypothesis might still beat a finished one, so the two can differ where a longer hypothesis would have won
  (docs/speed.md). What CTranslate2 has no equivalent for (sampling, logits processors, other `generate`
  keywords) is refused before decoding.
"""

from __future__ import annotations

import hashlib
import logging
import os
import shutil
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch
from huggingface_hub import constants
from transformers import GenerationConfig, PreTrainedConfig, PreTrainedTokenizerBase

from hf_vanilla.checkpoints.loading import (
    TOKENIZER_FILE,
    WEIGHTS_FILE,
    generation_defaults,
    load_config,
    load_model_and_tokenizer,
    load_tokenizer,
    model_digest,
    model_directory,
)
from hf_vanilla.data.tokenization import check_tokenizer_matches_model
from hf_vanilla.extras import require
from hf_vanilla.files import atomic_directory, refuse_existing
from hf_vanilla.model.configuration_vanilla import VanillaTransformerConfig
from hf_vanilla.model.decoding import (
    DEFAULT_DECODING,
    DecodingOptions,
    max_source_tokens,
    paper_max_new_tokens,
    resolve_decoding,
)
from hf_vanilla.model.modeling_vanilla import sinusoidal_positions
from hf_vanilla.translation.decoding import (
    DEFAULT_BATCHING,
    Batching,
    BatchLogitsProcessors,
    detokenize,
    encoded_batches,
)
from hf_vanilla.translation.engines.base import (
    CTRANSLATE2,
    LOGITS_PROCESSORS,
    NBEST_SCORES,
    VOCABULARY_MAP,
    EngineSettings,
    missing_ability,
    register_engine,
)
from hf_vanilla.translation.shortlist import VOCAB_MAP_FILE

logger = logging.getLogger(__name__)
# Raised when the spec built here changes: models converted before are then converted again.
CONVERSION_REVISION = "1"
# What a conversion needs of a model directory.
CONVERTED_FILES = ("config.json", WEIGHTS_FILE, TOKENIZER_FILE)
# `generate` keywords CTranslate2 takes under its own name, with the same meaning.
EQUIVALENT_KEYWORDS = {"min_new_tokens": "min_decoding_length"}
ABILITIES = frozenset({NBEST_SCORES, VOCABULARY_MAP})
# A corpus goes to translate_batch this many batches (of `max_tokens`) at a time: few calls, and a progress
# bar.
CHUNK_BATCHES = 16
GREEDY_LENGTH_PENALTY = 1.0  # what CTranslate2 is told where greedy search takes none: it ranks nothing by it


def vocabulary(tokenizer: PreTrainedTokenizerBase, config: PreTrainedConfig) -> list[str]:
    """The tokenizer's token strings by id, which is how CTranslate2 takes and gives tokens."""
    tokens = tokenizer.convert_ids_to_tokens(list(range(config.vocab_size)))
    if None in tokens or len(set(tokens)) != len(tokens):
        raise ValueError(
            f"the tokenizer does not name each of the model's {config.vocab_size} ids once: load the "
            "tokenizer saved with the model"
        )
    return tokens


def transformer_spec(model: torch.nn.Module, tokenizer: PreTrainedTokenizerBase):
    """CTranslate2's `TransformerSpec` holding `model`'s weights: post-LN or pre-LN (with the final
    LayerNorms), one embedding matrix for both inputs, the output projection tied or not, our sinusoid table
    and epsilon."""
    specs = require("ctranslate2", extra="ct2").specs
    config = model.config
    spec = specs.TransformerSpec.from_config(
        (config.encoder_layers, config.decoder_layers),
        config.num_attention_heads,
        pre_norm=config.pre_layernorm,
        activation=specs.Activation.RELU,
    )
    # Copies: CTranslate2 quantizes the arrays it is given in place, which would change the model's weights.
    weights = {
        name: tensor.detach().to(torch.float32, copy=True).numpy()
        for name, tensor in model.state_dict().items()
    }

    def linear(target, name: str) -> None:
        target.weight = weights[f"{name}.weight"]
        if f"{name}.bias" in weights:
            target.bias = weights[f"{name}.bias"]

    def layer_norm(target, name: str) -> None:
        target.gamma, target.beta = weights[f"{name}.weight"], weights[f"{name}.bias"]

    def layer(target, name: str) -> None:
        linear(target.self_attention.linear[0], f"{name}.self_attn.qkv_proj")  # q, k, v fused, in that order
        linear(target.self_attention.linear[1], f"{name}.self_attn.out_proj")
        layer_norm(target.self_attention.layer_norm, f"{name}.self_attn_residual.layer_norm")
        if hasattr(target, "attention"):  # a decoder layer's attention over the encoder output
            linear(target.attention.linear[0], f"{name}.encoder_attn.q_proj")
            linear(target.attention.linear[1], f"{name}.encoder_attn.kv_proj")  # k, v fused
            linear(target.attention.linear[2], f"{name}.encoder_attn.out_proj")
            layer_norm(target.attention.layer_norm, f"{name}.encoder_attn_residual.layer_norm")
        linear(target.ffn.linear_0, f"{name}.feed_forward.fc1")
        linear(target.ffn.linear_1, f"{name}.feed_forward.fc2")
        layer_norm(target.ffn.layer_norm, f"{name}.feed_forward_residual.layer_norm")

    positions = sinusoidal_positions(config.max_position_embeddings, config.d_model).numpy()
    embeddings = weights["model.shared.weight"]
    for stack, stack_spec in (("encoder", spec.encoder), ("decoder", spec.decoder)):
        (stack_spec.embeddings[0] if stack == "encoder" else stack_spec.embeddings).weight = embeddings
        stack_spec.position_encodings.encodings = positions
        for index, layer_spec in enumerate(stack_spec.layer):
            layer(layer_spec, f"model.{stack}.layers.{index}")
        if config.pre_layernorm:
            layer_norm(stack_spec.layer_norm, f"model.{stack}.final_layer_norm")
    spec.decoder.projection.weight = weights["lm_head.weight"]  # the shared matrix, or its own when untied

    tokens = vocabulary(tokenizer, config)
    spec.register_source_vocabulary(tokens)
    spec.register_target_vocabulary(tokens)
    end_ids = config.eos_token_id if isinstance(config.eos_token_id, list) else [config.eos_token_id]
    spec.config.layer_norm_epsilon = config.layer_norm_eps
    spec.config.decoder_start_token = tokens[config.decoder_start_token_id]
    spec.config.bos_token = tokens[config.bos_token_id]
    spec.config.eos_token = tokens[end_ids[0]]
    spec.config.unk_token = tokenizer.unk_token or spec.config.unk_token
    return spec


def save_ctranslate2_model(
    model: torch.nn.Module,
    tokenizer: PreTrainedTokenizerBase,
    output_dir: Path,
    quantization: str | None = None,
    vocab_map: Path | None = None,
) -> None:
    """Convert `model` into the (empty) `output_dir`, weights in `quantization` (int8, float16...; None keeps
    float32, and any compute type is then chosen when the model loads), with the `vocab_map` file given
    (`translation.shortlist`) for decoding with `use_vmap`."""
    spec = transformer_spec(model, tokenizer)
    if vocab_map is not None:
        spec.register_vocabulary_mapping(str(vocab_map))
    spec.validate()
    spec.optimize(quantization=quantization)
    spec.save(str(output_dir))


def convert_to_ctranslate2(
    model_dir: str | os.PathLike,
    output_dir: str | os.PathLike,
    quantization: str | None = None,
    overwrite: bool = False,
) -> Path:
    """Write the CTranslate2 model of a saved model directory to `output_dir` (`save_ctranslate2_model`),
    atomically; translate with `ctranslate2.Translator(output_dir)` on token strings."""
    refuse_existing(output_dir, overwrite)
    with atomic_directory(output_dir) as staging:
        save_ctranslate2_model(*load_model_and_tokenizer(model_dir, "cpu"), staging, quantization)
    return Path(output_dir)


def default_cache_dir() -> Path:
    """Where converted models are cached unless told: beside the Hugging Face cache (HF_HOME)."""
    return Path(constants.HF_HOME) / "hf_vanilla" / "ctranslate2"


def checkpoint_digest(model_dir: Path, vocab_map: Path | None = None) -> str:
    """The SHA-256 of the model's digest (`checkpoints.model_digest`) and of the converter's revision, and of
    the `vocab_map` file converted with it, if any."""
    for name in CONVERTED_FILES:
        if not (model_dir / name).is_file():
            raise FileNotFoundError(f"{model_dir} has no {name}: it is no saved model directory")
    revision = f"hf_vanilla ctranslate2 conversion {CONVERSION_REVISION} of {model_digest(model_dir)}"
    if vocab_map is not None:
        revision += f" with the vocabulary map {hashlib.sha256(vocab_map.read_bytes()).hexdigest()}"
    return hashlib.sha256(revision.encode()).hexdigest()


def cached_conversion(
    model_dir: Path,
    cache_dir: str | os.PathLike | None = None,
    rebuild: bool = False,
    vocab_map: Path | None = None,
) -> Path:
    """The CTranslate2 model of `model_dir` (with the `vocab_map` file, if given), converted on first use into
    `cache_dir` (default: `default_cache_dir`) under the checkpoint's digest. Written atomically: a process
    converting at the same time keeps the copy of whichever finished first; `rebuild` replaces a copy that
    does not load."""
    converted = Path(cache_dir or default_cache_dir()) / checkpoint_digest(model_dir, vocab_map)
    if rebuild:
        shutil.rmtree(converted, ignore_errors=True)
    if not converted.is_dir():
        logger.info("converting %s to CTranslate2 in %s (once; cached by its digest)", model_dir, converted)
        with atomic_directory(converted, keep_existing=True) as staging:
            save_ctranslate2_model(*load_model_and_tokenizer(model_dir, "cpu"), staging, vocab_map=vocab_map)
    return converted


def vocab_map_file(model_dir: Path, settings: EngineSettings) -> Path | None:
    """The checkpoint's vocabulary map where `settings` ask for one (`vocab_map`); a FileNotFoundError if it
    has none."""
    if not settings.vocab_map:
        return None
    path = model_dir / VOCAB_MAP_FILE
    if not path.is_file():
        raise FileNotFoundError(
            f"{model_dir} has no {VOCAB_MAP_FILE} for --vocab-map: build one with "
            "scripts/research/make_student.py"
        )
    return path


def ctranslate2_device(device: str | None) -> tuple[str, int]:
    """CTranslate2's device and device index for ours: None or "auto" the GPU where CTranslate2 sees one."""
    ctranslate2 = require("ctranslate2", extra="ct2")
    if device in (None, "auto"):
        return ("cuda" if ctranslate2.get_cuda_device_count() else "cpu"), 0
    kind, _, index = str(device).partition(":")
    if kind not in ("cpu", "cuda"):
        raise ValueError(f"the ctranslate2 engine runs on cpu or cuda, not {device!r}")
    if kind == "cuda" and not ctranslate2.get_cuda_device_count():
        raise ValueError(f"device {device!r} requested but CTranslate2 sees no CUDA GPU; use --device cpu")
    return kind, int(index or 0)


def check_compute_type(compute_type: str, device: str) -> None:
    """A ValueError naming what the device runs, for a compute type it does not."""
    supported = require("ctranslate2", extra="ct2").get_supported_compute_types(device)
    if compute_type != "auto" and compute_type not in supported:
        raise ValueError(
            f"compute type {compute_type} is not supported on this {device} by CTranslate2; choose auto or "
            f"one of {', '.join(sorted(supported))}"
        )


def load_translator(converted: Path, settings: EngineSettings):
    """A `ctranslate2.Translator` over a converted model, on the device and in the compute type `settings` ask
    for ("auto": CTranslate2's fastest there, logged), on a CPU with the threads of
    `EngineSettings.cpu_threads`."""
    ctranslate2 = require("ctranslate2", extra="ct2")
    device, index = ctranslate2_device(settings.device)
    check_compute_type(settings.compute_type, device)
    inter_threads, intra_threads = settings.cpu_threads() if device == "cpu" else (1, 0)
    torch_threads = torch.get_num_threads()
    translator = ctranslate2.Translator(
        str(converted),
        device=device,
        device_index=index,
        compute_type=settings.compute_type,
        inter_threads=inter_threads,
        intra_threads=intra_threads,
    )
    # CTranslate2 sets the process's OpenMP threads to intra_threads, torch's with them: a student trained
    # after its teacher translated in the same process ran on one thread of two, 1.6x slower.
    torch.set_num_threads(torch_threads)
    supported = ", ".join(sorted(ctranslate2.get_supported_compute_types(device)))
    how = f"auto: CTranslate2's fastest of {supported}" if settings.compute_type == "auto" else "asked for"
    logger.info("ctranslate2 engine: %s on %s (%s)", translator.compute_type, device, how)
    if device == "cpu":
        logger.info(
            "ctranslate2 engine: %d batches at once (--inter-threads) of %d threads each (--threads %d)",
            inter_threads,
            intra_threads,
            inter_threads * intra_threads,
        )
    return translator


@dataclass(frozen=True)
class CTranslate2Engine:
    """`TranslationEngine` through `ctranslate2.Translator`: the batches, limits and texts of
    `translate_sentences`, and what the options leave open resolved over the model's generation config as for
    `generate`. `tokens` names each token id as CTranslate2 takes and gives tokens (`vocabulary`); with
    `use_vmap`, a batch's outputs stay within the vocabulary map converted with the model
    (`translation.shortlist`)."""

    translator: Any  # ctranslate2.Translator
    tokenizer: PreTrainedTokenizerBase
    config: PreTrainedConfig
    generation: GenerationConfig
    tokens: list[str]
    use_vmap: bool = False
    token_ids: dict[str, int] = field(init=False, repr=False)

    def __post_init__(self):
        object.__setattr__(self, "token_ids", {token: index for index, token in enumerate(self.tokens)})

    abilities = ABILITIES

    def translate(
        self,
        sources: Sequence[str],
        options: DecodingOptions = DEFAULT_DECODING,
        batching: Batching = DEFAULT_BATCHING,
        logits_processors: BatchLogitsProcessors | None = None,
    ) -> list[str]:
        decoded = self._decode(sources, options, batching, False, logits_processors)
        return [hypotheses[0][0] for hypotheses in decoded]

    def translate_nbest(
        self,
        sources: Sequence[str],
        options: DecodingOptions = DEFAULT_DECODING,
        batching: Batching = DEFAULT_BATCHING,
        logits_processors: BatchLogitsProcessors | None = None,
    ) -> list[list[tuple[str, float]]]:
        return self._decode(sources, options, batching, True, logits_processors)

    @property
    def max_source_tokens(self) -> int:
        return max_source_tokens(self.config)

    @property
    def concurrent_batches(self) -> int:
        return self.translator.num_translators

    def encode(self, sources: Sequence[str]) -> list[list[int]]:
        return self.tokenizer(list(sources), verbose=False)["input_ids"]

    def translate_encoded(
        self,
        batch: Sequence[Sequence[int]],
        options: DecodingOptions = DEFAULT_DECODING,
        batching: Batching = DEFAULT_BATCHING,
    ) -> list[list[int]]:
        options, _ = resolve_decoding(self.generation, options)
        keywords = self.translate_keywords(options, nbest=False)
        hypotheses = self._translate_batch(batch, options, batching.max_tokens, keywords)
        return [best for [(best, _)] in hypotheses]

    def detokenize(
        self, output_ids: Sequence[Sequence[int]], options: DecodingOptions = DEFAULT_DECODING
    ) -> list[str]:
        return detokenize(self.config, self.tokenizer, output_ids, options)

    def describe(self) -> dict[str, str]:
        return {
            "engine": CTRANSLATE2,
            "device": self.translator.device,
            "precision": self.translator.compute_type,
        }

    def _decode(
        self,
        sources: Sequence[str],
        options: DecodingOptions,
        batching: Batching,
        nbest: bool,
        logits_processors: BatchLogitsProcessors | None,
    ) -> list[list[tuple[str, float]]]:
        """Each source's translations with their scores (one unless `nbest`; a blank source and greedy search
        score 0, as `translate_nbest` scores them), in order, decoded with the options `generate` would
        resolve."""
        if logits_processors is not None:
            raise ValueError(
                missing_ability(CTRANSLATE2, LOGITS_PROCESSORS, "logits processors mix other scores in")
            )
        options, _ = resolve_decoding(self.generation, options)
        keywords = self.translate_keywords(options, nbest)
        results = [[("", 0.0)] for _ in sources]
        chunks = encoded_batches(
            self.tokenizer, self.config, sources, options, batching, CHUNK_BATCHES * batching.max_tokens
        )
        for indices, chunk_ids in chunks:
            hypotheses = self._translate_batch(chunk_ids, options, batching.max_tokens, keywords)
            texts = iter(self.detokenize([ids for sentence in hypotheses for ids, _ in sentence], options))
            for index, sentence in zip(indices, hypotheses, strict=True):
                results[index] = [(next(texts), score) for _, score in sentence]
        return results

    def _translate_batch(
        self,
        batch_ids: Sequence[Sequence[int]],
        options: DecodingOptions,
        max_tokens: int,
        keywords: Mapping[str, Any],
    ) -> list[list[tuple[list[int], float]]]:
        """The hypotheses of sentences sorted by length, as token ids with scores, each sentence within its
        own output limit.

        They decode at their longest limit. Greedy tokens up to a limit do not depend on it: each translation
        is cut at its own. Beam search returns every finished hypothesis here, the longest of which ended the
        sentence's search: a sentence that ended before its own limit decoded as it would have at that limit;
        one that ran to it decodes again with the others of its limit (rare once a model is trained: it ends
        its translations long before). With no length penalty CTranslate2 stops at the first finished best
        hypothesis and the number asked for matters: each limit decodes on its own."""
        if options.max_new_tokens is not None:
            limits = [options.max_new_tokens] * len(batch_ids)
        else:
            limits = [
                paper_max_new_tokens(self.config, len(ids), options.extra_output_tokens) for ids in batch_ids
            ]
        wanted, beam_size, longest = keywords["num_hypotheses"], keywords["beam_size"], max(limits)
        keywords = {**keywords, "max_batch_size": max_tokens, "batch_type": "tokens"}
        everything = range(len(batch_ids))
        if beam_size > 1 and keywords["length_penalty"] == 0:
            hypotheses, again = {}, list(everything)
        else:
            hypotheses = self._decode_at(
                batch_ids, everything, longest, {**keywords, "num_hypotheses": beam_size}
            )
            again = [
                position
                for position in everything
                if beam_size > 1
                and limits[position] < longest
                and max(len(tokens) for tokens, _ in hypotheses[position]) >= limits[position]
            ]
        for limit in sorted({limits[position] for position in again}):
            group = [position for position in again if limits[position] == limit]
            hypotheses.update(self._decode_at(batch_ids, group, limit, keywords))
        token_ids = self.token_ids
        return [
            [
                ([token_ids[token] for token in tokens[: limits[position]]], score)
                for tokens, score in hypotheses[position][:wanted]
            ]
            for position in everything
        ]

    def _decode_at(
        self,
        batch_ids: Sequence[Sequence[int]],
        positions: Sequence[int],
        limit: int,
        keywords: Mapping[str, Any],
    ) -> dict[int, list[tuple[list[str], float]]]:
        """The hypotheses (CTranslate2's tokens, score: 0 where none is asked for) of the sentences at
        `positions`, decoded for at most `limit` new tokens, in batches of `max_tokens` source tokens, by
        position."""
        tokens = self.tokens
        sources = [[tokens[index] for index in batch_ids[position]] for position in positions]
        results = self.translator.translate_batch(sources, max_decoding_length=limit, **keywords)
        return {
            position: list(
                zip(
                    result.hypotheses,
                    result.scores if keywords["return_scores"] else [0.0] * len(result.hypotheses),
                    strict=True,
                )
            )
            for position, result in zip(positions, results, strict=True)
        }

    def translate_keywords(self, options: DecodingOptions, nbest: bool) -> dict[str, Any]:
        """`translate_batch`'s keywords for resolved `options` (`resolve_decoding`); a ValueError
        naming what CTranslate2 cannot do as `generate` does, before anything is decoded."""
        if options.cache_implementation is not None:
            raise ValueError(
                f"cache_implementation {options.cache_implementation!r} is generate's; the ctranslate2 "
                "engine keeps its own cache (leave --cache-implementation at its default)"
            )
        others = dict(options.other_generate_kwargs)
        early_stopping = others.pop("early_stopping", True)
        if others.pop("do_sample", False) or early_stopping is not True:
            raise ValueError(
                "the ctranslate2 engine has no sampling and stops beam search once num_beams hypotheses are "
                "finished (early_stopping=True): decode with --engine transformers"
            )
        unknown = sorted(set(others) - set(EQUIVALENT_KEYWORDS))
        if unknown:
            raise ValueError(
                f"the ctranslate2 engine has no equivalent of generate's {', '.join(unknown)}: decode with "
                "--engine transformers"
            )
        num_beams = options.num_beams
        eos = self.config.eos_token_id
        end_ids = eos if isinstance(eos, list) else [eos]
        return {
            "beam_size": num_beams,
            "num_hypotheses": num_beams if nbest else 1,
            # Greedy search has none (it ranks no finished hypotheses); CTranslate2 wants a number anyway.
            "length_penalty": (
                GREEDY_LENGTH_PENALTY if options.length_penalty is None else options.length_penalty
            ),
            "return_scores": nbest and num_beams > 1,
            # Counted in the length that the length penalty divides by, as generate counts it.
            "return_end_token": True,
            "end_token": self.tokenizer.convert_ids_to_tokens(end_ids),
            "min_decoding_length": 0,  # generate may end a translation at once; CTranslate2's default is 1
            "max_input_length": 0,  # sources are cut to the model's positions already
            "use_vmap": self.use_vmap,
            **{EQUIVALENT_KEYWORDS[name]: value for name, value in others.items()},
        }


def load_ctranslate2_engine(
    model_name_or_path: str | os.PathLike, settings: EngineSettings
) -> CTranslate2Engine:
    """The CTranslate2 engine of a saved model directory (or Hub id), converted on first use
    (`cached_conversion`); a cached copy that does not load is converted again."""
    require("ctranslate2", extra="ct2")  # before anything is read or converted
    model_dir = model_directory(model_name_or_path)
    tokenizer, config = load_tokenizer(model_dir), load_config(model_dir)
    if config.model_type != VanillaTransformerConfig.model_type:
        raise ValueError(
            f"the ctranslate2 engine converts {VanillaTransformerConfig.model_type} models, "
            f"{model_name_or_path} is {config.model_type}: decode it with --engine transformers"
        )
    check_tokenizer_matches_model(tokenizer, config)  # before any conversion
    vocab_map = vocab_map_file(model_dir, settings)
    converted = cached_conversion(model_dir, settings.ctranslate2_dir, vocab_map=vocab_map)
    try:
        translator = load_translator(converted, settings)
    except (RuntimeError, OSError) as err:
        logger.warning("the cached CTranslate2 model %s does not load (%s): converting again", converted, err)
        converted = cached_conversion(model_dir, settings.ctranslate2_dir, rebuild=True, vocab_map=vocab_map)
        translator = load_translator(converted, settings)
    tokens = vocabulary(tokenizer, config)
    generation = generation_defaults(model_dir)
    use_vmap = vocab_map is not None
    return CTranslate2Engine(translator, tokenizer, config, generation, tokens, use_vmap=use_vmap)


register_engine(CTRANSLATE2, load_ctranslate2_engine, ABILITIES)
