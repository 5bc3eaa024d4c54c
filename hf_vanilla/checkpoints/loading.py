"""Opening a saved checkpoint: the one way the package loads a model's weights, its tokenizer, its config and
its decoding defaults, whoever asks (translation, evaluation, export, the service, training's `init_from`, the
research extras).

Each fault a user can make is one line naming the file and the fix, before transformers would raise its own
report: a path that is no checkpoint, a directory without tokenizer.json, a truncated safetensors file,
weights of other shapes than config.json gives them, a tokenizer of another vocabulary than the model's.
"""

from __future__ import annotations

import hashlib
import logging
import os
from collections.abc import Sequence
from pathlib import Path

import torch
from huggingface_hub import snapshot_download
from safetensors import SafetensorError, safe_open
from transformers import (
    AutoConfig,
    AutoModelForSeq2SeqLM,
    AutoTokenizer,
    GenerationConfig,
    PreTrainedConfig,
    PreTrainedModel,
    PreTrainedTokenizerBase,
)

from hf_vanilla.data.tokenization import check_tokenizer_matches_model
from hf_vanilla.model.attention_kernels import AUTO_ATTENTION
from hf_vanilla.model.configuration_vanilla import VanillaTransformerConfig
from hf_vanilla.model.decoding import (
    DEFAULT_DECODING,
    DecodingOptions,
    describe_resolved,
    resolve_decoding,
    writes_right_to_left,
)
from hf_vanilla.precision import resolve_device, resolve_precision

logger = logging.getLogger(__name__)
TOKENIZER_FILE, WEIGHTS_FILE = "tokenizer.json", "model.safetensors"
# What a saved tokenizer needs to load here, and a saved model directory: the model's config and weights too.
TOKENIZER_FILES = (TOKENIZER_FILE, "tokenizer_config.json")
MODEL_DIRECTORY_FILES = ("config.json", WEIGHTS_FILE, *TOKENIZER_FILES)


# The files of a model directory its translations depend on: weights, configs, tokenizer (not its model card)
MODEL_FILE_PATTERNS = ("*.safetensors", "*.bin", "*.json")


def model_directory(model_name_or_path: str | os.PathLike, local_files_only: bool = False) -> Path:
    """A saved model directory as it is, or a Hub id's weights, configs and tokenizer in the Hub cache
    (downloaded unless `local_files_only`)."""
    if Path(model_name_or_path).is_dir():
        return Path(model_name_or_path)
    patterns = [pattern for pattern in MODEL_FILE_PATTERNS if pattern != "*.bin"]
    return Path(
        snapshot_download(str(model_name_or_path), allow_patterns=patterns, local_files_only=local_files_only)
    )


def model_digest(model_name_or_path: str | os.PathLike) -> str:
    """The SHA-256 of what a saved model's translations depend on (`MODEL_FILE_PATTERNS`: weights, configs,
    tokenizer; not its model card); a Hub id's, of its cached copy. The one fingerprint of a model: resumed
    corpus translations, distillation's saved translations and CTranslate2's cached conversions are keyed by
    it."""
    directory = model_directory(model_name_or_path, local_files_only=True)
    digest = hashlib.sha256()
    for path in sorted(path for pattern in MODEL_FILE_PATTERNS for path in directory.glob(pattern)):
        digest.update(path.name.encode())
        with path.open("rb") as file:
            while block := file.read(1 << 20):
                digest.update(block)
    return digest.hexdigest()


def _no_checkpoint(model_name_or_path: str | os.PathLike, err: OSError) -> FileNotFoundError:
    return FileNotFoundError(
        f"cannot load a model and tokenizer from {str(model_name_or_path)!r}: it is no saved model directory "
        f"and could not be loaded from the Hub ({err})"
    )


def load_config(model_name_or_path: str | os.PathLike) -> PreTrainedConfig:
    """A saved model's config.json (or a Hub id's); none there is a FileNotFoundError."""
    try:
        return AutoConfig.from_pretrained(model_name_or_path)
    except OSError as err:
        raise _no_checkpoint(model_name_or_path, err) from err


def generation_defaults(model_name_or_path: str | os.PathLike) -> GenerationConfig:
    """A saved model's generation_config.json, or the one transformers derives from its config.json: what
    decides the options a `DecodingOptions` leaves to the model (beam size, length penalty)."""
    try:
        return GenerationConfig.from_pretrained(model_name_or_path)
    except OSError:
        return GenerationConfig.from_model_config(load_config(model_name_or_path))


def decoding_for(
    model_name_or_path: str | os.PathLike, options: DecodingOptions = DEFAULT_DECODING
) -> tuple[DecodingOptions, dict[str, str]]:
    """`options` as a saved model decodes with them, and where each value came from: the beam size, length
    penalty and output limit of `options`, else of its generation config, else the paper's
    (`resolve_decoding`); logged in one line that names where each came from."""
    resolved, sources = resolve_decoding(generation_defaults(model_name_or_path), options)
    logger.info("%s decodes with %s", model_name_or_path, describe_resolved(resolved, sources))
    return resolved, sources


def load_tokenizer(
    model_name_or_path: str | os.PathLike, needed_files: Sequence[str] = MODEL_DIRECTORY_FILES
) -> PreTrainedTokenizerBase:
    """AutoTokenizer's, and a plain ValueError naming the `needed_files` for a directory without
    tokenizer.json (transformers would blame a missing sentencepiece or tiktoken); no checkpoint there is a
    FileNotFoundError."""
    try:
        return AutoTokenizer.from_pretrained(model_name_or_path)
    except OSError as err:
        raise _no_checkpoint(model_name_or_path, err) from err
    except ValueError as err:
        directory = Path(model_name_or_path)
        if directory.is_dir() and not (directory / TOKENIZER_FILE).is_file():
            needed = ", ".join(needed_files)
            raise ValueError(f"{directory} has no {TOKENIZER_FILE} (needed files: {needed})") from err
        raise


def load_pretrained(
    model_name_or_path: str | os.PathLike, model_class: type = AutoModelForSeq2SeqLM, **model_kwargs
) -> PreTrainedModel:
    """`model_class.from_pretrained` (an Auto class) of a saved model directory or Hub id, with `model_kwargs`
    (dtype, config, attn_implementation...), in the mode transformers leaves it.

    A saved directory's weights are checked against its config.json first (`_check_weights_match_config`);
    unreadable weights (a truncated or corrupt safetensors file) are a ValueError naming the file."""
    directory = Path(model_name_or_path)
    try:
        if directory.is_dir():
            _check_weights_match_config(directory, model_class)
        return model_class.from_pretrained(model_name_or_path, **model_kwargs)
    except OSError as err:
        raise _no_checkpoint(model_name_or_path, err) from err
    except SafetensorError as err:
        weights = directory / WEIGHTS_FILE
        where = weights if weights.is_file() else f"the weights of {model_name_or_path}"
        raise ValueError(f"{where} is truncated or corrupt ({err}); re-save or re-download it") from err


def load_model_and_tokenizer(
    model_name_or_path: str | os.PathLike,
    device: str | None = None,
    dtype: str = "float32",
    model_class: type = AutoModelForSeq2SeqLM,
    **model_kwargs,
) -> tuple[PreTrainedModel, PreTrainedTokenizerBase]:
    """A saved model directory (or Hub id) and its tokenizer, in eval mode on `device` in `dtype`: a
    translation model, or with `model_class` another kind (AutoModelForCausalLM: a language model).

    `dtype` is "auto" (the precision the device runs natively, see `hf_vanilla.precision`), "float32",
    "bfloat16" or "float16".

    `model_kwargs` go to `from_pretrained` (e.g. attn_implementation="eager"; ours default to AUTO_ATTENTION).
    For our own model type the tokenizer's vocabulary size, special token ids and vocabulary fingerprint
    must match the model config (`check_tokenizer_matches_model`); other models are taken as they are. Faults
    are one-line errors (`load_tokenizer`, `load_pretrained`).
    """
    device = resolve_device(device)
    torch_dtype = resolve_precision(dtype, device.type).dtype
    tokenizer = load_tokenizer(model_name_or_path)
    model = load_pretrained(model_name_or_path, model_class, dtype=torch_dtype, **model_kwargs)
    if model.config.model_type == VanillaTransformerConfig.model_type:
        check_tokenizer_matches_model(tokenizer, model.config)
        if "attn_implementation" not in model_kwargs:
            model.set_attn_implementation(AUTO_ATTENTION)
    return model.to(device).eval(), tokenizer


# What a role that takes one word order (load_models' `right_to_left`) says of a model written in the other.
_WRONG_WORD_ORDER = {
    True: "was not trained right to left (its config's right_to_left is false): train one with "
    "train.py --right-to-left true",
    False: "writes right to left (its config's right_to_left is true): this role takes left-to-right models; "
    "a right-to-left one reranks with --rerank-right-to-left",
}


def load_models(
    model_names_or_paths: Sequence[str | os.PathLike],
    device: str | None = None,
    dtype: str = "float32",
    role: str = "ensemble member",
    right_to_left: bool | None = None,
    model_class: type = AutoModelForSeq2SeqLM,
) -> list[tuple[PreTrainedModel, PreTrainedTokenizerBase]]:
    """More models with their tokenizers (an ensemble's members, reranking's reverse or language models),
    each loaded as `load_model_and_tokenizer` loads one; a model that does not load, or (given
    `right_to_left`) writes in the other word order (`config.right_to_left`), is a ValueError or
    FileNotFoundError that names it and its `role`."""
    loaded = []
    for path in model_names_or_paths:
        try:
            model, tokenizer = load_model_and_tokenizer(path, device, dtype, model_class)
        except (ValueError, FileNotFoundError) as err:
            raise type(err)(f"{role} {path}: {err}") from err
        if right_to_left is not None and writes_right_to_left(model.config) != right_to_left:
            raise ValueError(f"{role} {path} {_WRONG_WORD_ORDER[right_to_left]}")
        loaded.append((model, tokenizer))
    return loaded


def _check_weights_match_config(directory: Path, model_class: type) -> None:
    """Raise a ValueError naming each tensor whose shape in the saved weights differs from the one config.json
    gives it in a `model_class` model (a vocab_size edited after saving, say): checked before loading, for
    transformers would only log the shapes in a report and then raise."""
    weights = directory / WEIGHTS_FILE
    if not weights.is_file():
        return
    config = AutoConfig.from_pretrained(directory)
    with torch.device("meta"):
        configured = {
            name: tuple(tensor.shape) for name, tensor in model_class.from_config(config).state_dict().items()
        }
    with safe_open(weights, framework="pt") as saved:
        found = {name: tuple(saved.get_slice(name).get_shape()) for name in saved.keys()}
    mismatches = [
        f"{name} has shape {found[name]} in the weights, {shape} by config.json"
        for name, shape in configured.items()
        if name in found and found[name] != shape
    ]
    if mismatches:
        raise ValueError(
            f"{weights} does not match {directory / 'config.json'} (vocab_size {config.vocab_size}): "
            + "; ".join(mismatches)
        )
