"""The command-line options the scripts share, spelled as Hugging Face users type them.

Every `--a-b` flag also answers to `--a_b` (as `HfArgumentParser` does), and every flag shows its default.
"""

from __future__ import annotations

import argparse
from typing import Any

from hf_vanilla.model.decoding import DEFAULT_MAX_TOKENS, PAPER_EXTRA_OUTPUT_TOKENS, PAPER_GENERATION_KWARGS
from hf_vanilla.research.reranking import (
    DEFAULT_LANGUAGE_MODEL_WEIGHT,
    DEFAULT_RERANK_WEIGHT,
    DEFAULT_RIGHT_TO_LEFT_WEIGHT,
    LANGUAGE_MODEL_WEIGHTS,
    RERANK_WEIGHTS,
    RIGHT_TO_LEFT_WEIGHTS,
)
from hf_vanilla.training.settings import PUBLIC_MULTI30K

from .precision import DTYPE_NAMES


class HelpFormatter(argparse.ArgumentDefaultsHelpFormatter, argparse.RawDescriptionHelpFormatter):
    """The module docstring as written, and each flag's default after its help."""


class ArgumentParser(argparse.ArgumentParser):
    """argparse whose dashed long flags also take underscores: `--source-lang` and `--source_lang`."""

    def __init__(self, *args, **kwargs):
        kwargs.setdefault("formatter_class", HelpFormatter)
        super().__init__(*args, **kwargs)

    def add_argument(self, *names, **kwargs):
        underscored = [
            "--" + name[2:].replace("-", "_") for name in names if name.startswith("--") and "-" in name[2:]
        ]
        return super().add_argument(*names, *underscored, **kwargs)


def add_decoding_arguments(parser: argparse.ArgumentParser) -> None:
    """The options of the translating scripts; read them back with `decoding_kwargs` and `runtime_kwargs`."""
    parser.add_argument("model", help="saved model directory (with its tokenizer) or Hub id")
    add_generation_arguments(parser)


def add_generation_arguments(parser: argparse.ArgumentParser) -> None:
    """`add_decoding_arguments` without the model, for a script that names its models otherwise."""
    add_beam_arguments(parser)
    parser.add_argument(
        "--max-new-tokens",
        type=positive_int,
        default=None,
        help=f"fixed output limit (default: each sentence its source length + {PAPER_EXTRA_OUTPUT_TOKENS})",
    )
    parser.add_argument(
        "--skip-long-lines",
        action="store_true",
        help="leave a line longer than the model's positions blank (default: translate its first tokens); "
        "either way a warning names such lines",
    )
    add_runtime_arguments(parser)


def add_beam_arguments(parser: argparse.ArgumentParser) -> None:
    """Beam size and length penalty (the paper's by default); read them back with `beam_kwargs`."""
    parser.add_argument(
        "--num-beams",
        type=positive_int,
        default=PAPER_GENERATION_KWARGS["num_beams"],
        help="beam size; 1: greedy",
    )
    parser.add_argument(
        "--length-penalty",
        type=float,
        default=PAPER_GENERATION_KWARGS["length_penalty"],
        help="beam search divides a hypothesis' log-probability by length**this",
    )


def beam_kwargs(args: argparse.Namespace) -> dict[str, Any]:
    """`generate` kwargs from `add_beam_arguments`: greedy search has no length penalty (generate warns)."""
    kwargs: dict[str, Any] = {"num_beams": args.num_beams}
    if args.num_beams > 1:
        kwargs["length_penalty"] = args.length_penalty
    return kwargs


def add_runtime_arguments(parser: argparse.ArgumentParser) -> None:
    """Batch size, device, dtype and cache options of the translating scripts."""
    parser.add_argument(
        "--max-tokens", type=positive_int, default=DEFAULT_MAX_TOKENS, help="source tokens per batch"
    )
    parser.add_argument("--device", default="auto", help="cpu, cuda, cuda:1... (auto: the GPU if present)")
    parser.add_argument(
        "--dtype",
        default="float32",
        choices=["auto", *DTYPE_NAMES],
        help="weights and activations; auto: bfloat16 where the GPU or CPU runs it natively, float16 on a GPU "
        "without bfloat16, float32 otherwise",
    )
    parser.add_argument(
        "--cache-implementation",
        choices=["dynamic", "static"],
        default="dynamic",
        help="generate's key/value cache; static preallocates it, and on a GPU generate then compiles the "
        "decoding step (CUDA graphs) once per batch shape: measured on an H100 at one repeated shape, 3.1-3.4x "
        "faster greedy, 0.7x with beam search (README); the same tokens in float32",
    )


def runtime_kwargs(args: argparse.Namespace) -> dict[str, Any]:
    """`max_tokens`, `device` and `dtype` from the options of `add_runtime_arguments`."""
    return {"max_tokens": args.max_tokens, "device": args.device, "dtype": args.dtype}


def cache_kwargs(args: argparse.Namespace) -> dict[str, Any]:
    """The `generate` kwarg of `--cache-implementation` (none for the dynamic cache, generate's default)."""
    return {"cache_implementation": "static"} if args.cache_implementation == "static" else {}


def add_ensemble_argument(parser: argparse.ArgumentParser) -> None:
    """`--ensemble`: more models that translate with the first as one; read it back with `ensemble_kwargs`."""
    parser.add_argument(
        "--ensemble",
        nargs="+",
        default=[],
        metavar="MODEL",
        help="saved models sharing the first model's tokenizer that translate with it as one, their next-token "
        "probabilities averaged (a departure from the paper's single models; default: none)",
    )


def ensemble_kwargs(args: argparse.Namespace) -> dict[str, Any]:
    """The `ensemble` keyword of `evaluate_bleu` and `select_on_validation`; none without `--ensemble`."""
    return {"ensemble": args.ensemble} if args.ensemble else {}


# Each kind of reranking model: its models' option, its weight's option, the weights tried and the one used unless
# told, what the models are and what of theirs the weight multiplies.
RERANKING_ROLES = (
    (
        "rerank_with",
        "rerank_weight",
        RERANK_WEIGHTS,
        DEFAULT_RERANK_WEIGHT,
        "saved models of the reverse direction (target to source language) that rerank beam search's n-best list by "
        "how well each translation explains the source, the channel model of noisy-channel reranking",
        "the reverse models' log p(source | translation) per source token",
    ),
    (
        "rerank_right_to_left",
        "right_to_left_weight",
        RIGHT_TO_LEFT_WEIGHTS,
        DEFAULT_RIGHT_TO_LEFT_WEIGHT,
        "saved right-to-left models of this direction (trained with right_to_left: true) that rerank beam search's "
        "n-best list by how likely each translation is written last word first",
        "the right-to-left models' log p(reversed translation | source) per token",
    ),
    (
        "rerank_language_model",
        "language_model_weight",
        LANGUAGE_MODEL_WEIGHTS,
        DEFAULT_LANGUAGE_MODEL_WEIGHT,
        "saved language models of the target language (scripts/train_language_model.py) that rerank beam search's "
        "n-best list by how likely each translation is as a sentence",
        "the language models' log p(translation) per token",
    ),
)


def add_reranking_arguments(parser: argparse.ArgumentParser, several_weights: bool = False) -> None:
    """Each of RERANKING_ROLES' models and weight options (one weight each, or with `several_weights` lists to choose
    from on validation) and `--word-bonus`; read them back with `reranking_kwargs`."""
    tried = "; each is tried, 0 keeps beam search's choice" if several_weights else ""
    for models, weight, weights, default, what, scored in RERANKING_ROLES:
        parser.add_argument(
            f"--{models.replace('_', '-')}",
            nargs="+",
            default=[],
            metavar="MODEL",
            help=f"{what} (a departure from the paper's beam search; default: none)",
        )
        parser.add_argument(
            f"--{weight.replace('_', '-')}",
            type=float,
            nargs="+" if several_weights else None,
            default=list(weights) if several_weights else default,
            help=f"weight of {scored} beside beam search's score{tried}",
        )
    parser.add_argument(
        "--word-bonus",
        type=float,
        nargs="+" if several_weights else None,
        default=None,
        help="added to a reranked translation's score for each of its words (a penalty where negative), beside the "
        "reranking models' scores (default: none)" + ("; each is tried" if several_weights else ""),
    )


def reranking_kwargs(args: argparse.Namespace) -> dict[str, Any]:
    """The reranking keywords of `evaluate_bleu` (one weight each) or `select_on_validation` (lists of weights);
    none for a kind of model not given, no word bonus unless one is given."""
    several = isinstance(args.rerank_weight, list)
    kwargs = {}
    for models, weight, *_ in RERANKING_ROLES:
        if getattr(args, models):
            kwargs |= {models: getattr(args, models), f"{weight}s" if several else weight: getattr(args, weight)}
    if args.word_bonus is not None:
        kwargs["word_bonuses" if several else "word_bonus"] = args.word_bonus
    return kwargs


def add_dataset_arguments(parser: argparse.ArgumentParser) -> None:
    """The options that name a translation dataset and its direction; read them back with `dataset_kwargs`."""
    add_language_arguments(parser)
    parser.add_argument(
        "--max-sentences", type=positive_int, default=None, help="the first N pairs of each split only"
    )


def add_tokenized_bleu_argument(parser: argparse.ArgumentParser) -> None:
    """`--tokenized-bleu`: the papers' tokenized, lowercased BLEU beside sacreBLEU (needs sacremoses)."""
    parser.add_argument(
        "--tokenized-bleu",
        action="store_true",
        help="also report BLEU on lowercased, Moses-tokenized text, as Multi30k papers print it "
        "(beside sacreBLEU, never instead; needs pip install 'hf_vanilla[tokenized]')",
    )


def add_language_arguments(parser: argparse.ArgumentParser) -> None:
    """The dataset (Hub name or local copy), its config and the translation direction."""
    parser.add_argument("--dataset", default=PUBLIC_MULTI30K, help="Hub dataset name or local path")
    parser.add_argument("--dataset-config", default=None, help="Hub dataset config, e.g. de-en for wmt14")
    parser.add_argument("--source-lang", default="de", help="source language code")
    parser.add_argument("--target-lang", default="en", help="target language code")


def dataset_kwargs(args: argparse.Namespace) -> dict[str, Any]:
    """The dataset, direction and sentence-limit keywords of `evaluate_bleu` and `select_on_validation`."""
    return {
        "dataset": args.dataset,
        "source_lang": args.source_lang,
        "target_lang": args.target_lang,
        "config_name": args.dataset_config,
        "max_sentences": args.max_sentences,
    }


def decoding_kwargs(args: argparse.Namespace) -> dict[str, Any]:
    """`translate_sentences` keywords (`generate` kwargs and skip_long_lines) from `add_decoding_arguments`."""
    kwargs = beam_kwargs(args)
    if args.max_new_tokens is not None:
        kwargs["max_new_tokens"] = args.max_new_tokens
    if args.skip_long_lines:
        kwargs["skip_long_lines"] = True
    return {**kwargs, **cache_kwargs(args)}


def positive_int(text: str) -> int:
    """An argparse type: a whole number of at least 1."""
    value = int(text)
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be at least 1, got {value}")
    return value
