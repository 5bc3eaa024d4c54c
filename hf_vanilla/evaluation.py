"""Batched translation with `generate` and sacreBLEU scoring (paper section 6.1).

Decoding defaults follow the paper: beam 4, length penalty 0.6, output at most input length + 50.
transformers' beam search ranks a finished hypothesis by sum(log p) / length**length_penalty, not by
GNMT's ((5 + length) / 6)**alpha that the paper used, so the same 0.6 weighs length a little
differently; we keep transformers' beam search rather than reimplement it.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import logging
import os
import sys
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import datasets
import torch
from sacrebleu.metrics import BLEU, CHRF, TER
from tqdm.auto import tqdm
from transformers import (
    AutoModelForSeq2SeqLM,
    AutoTokenizer,
    PreTrainedModel,
    PreTrainedTokenizerBase,
    set_seed,
)

from .configuration_vanilla import VanillaTransformerConfig
from .data import TokenBatchSampler, load_translation_split
from .modeling_vanilla import AUTO_ATTENTION
from .tokenization import check_tokenizer_matches_model

logger = logging.getLogger(__name__)

PAPER_GENERATION_KWARGS = {"num_beams": 4, "length_penalty": 0.6}
PAPER_EXTRA_OUTPUT_TOKENS = 50
DEFAULT_MAX_TOKENS = 4096


def translate_sentences(
    model: PreTrainedModel,
    tokenizer: PreTrainedTokenizerBase,
    sources: Sequence[str],
    max_tokens: int = DEFAULT_MAX_TOKENS,
    extra_output_tokens: int = PAPER_EXTRA_OUTPUT_TOKENS,
    show_progress: bool = True,
    **generate_kwargs,
) -> list[str]:
    """Translate `sources` and return the detokenized translations in the order of `sources`.

    Sentences are sorted by length and batched so that sentences * longest source stays within
    `max_tokens` (beam search multiplies the memory by num_beams). Unless `max_new_tokens` is among
    `generate_kwargs`, each batch may produce up to its longest source + `extra_output_tokens` new
    tokens (section 6.1), capped by the model's max_position_embeddings. `generate_kwargs` (num_beams,
    length_penalty, do_sample...) go to `model.generate`, over the model's generation config: pass
    num_beams=1 for greedy search whatever the saved model says.
    Blank or empty sources translate to "" without running the model; a line break inside a
    translation becomes a space, so one line in gives one line out.
    """
    translations = [""] * len(sources)
    nonblank = [index for index, source in enumerate(sources) if source.strip()]
    if not nonblank:
        return translations
    input_ids = tokenizer([sources[index] for index in nonblank])["input_ids"]
    sampler = TokenBatchSampler([len(ids) for ids in input_ids], max_tokens, shuffle=False)
    model_was_training = model.training
    model.eval()
    try:
        with (
            torch.inference_mode(),
            tqdm(total=len(nonblank), unit="sent", desc="Translating", disable=not show_progress) as progress,
        ):
            for batch in sampler:
                batch_ids = [input_ids[position] for position in batch]
                encoded = tokenizer.pad({"input_ids": batch_ids}, return_tensors="pt").to(model.device)
                max_new_tokens = paper_max_new_tokens(model, max(map(len, batch_ids)), extra_output_tokens)
                outputs = model.generate(**encoded, **{"max_new_tokens": max_new_tokens, **generate_kwargs})
                for position, text in zip(batch, decode_translations(tokenizer, outputs), strict=True):
                    translations[nonblank[position]] = text
                progress.update(len(batch))
    finally:
        model.train(model_was_training)
    return translations


def paper_max_new_tokens(
    model: PreTrainedModel, longest_source: int, extra_output_tokens: int = PAPER_EXTRA_OUTPUT_TOKENS
) -> int:
    """Section 6.1's output limit, input length + 50, capped so the decoder stays within its positions."""
    # The decoder start token takes one position.
    return min(longest_source + extra_output_tokens, model.config.max_position_embeddings - 1)


def paper_decoding_defaults(settings: Mapping[str, Any]) -> dict[str, Any]:
    """Beam 4 with length penalty 0.6 (section 6.1), unless `settings` choose num_beams or sampling."""
    return {} if "num_beams" in settings or settings.get("do_sample") else dict(PAPER_GENERATION_KWARGS)


def decode_translations(tokenizer: PreTrainedTokenizerBase, output_ids: torch.Tensor) -> list[str]:
    """Detokenized text, one line each: a line break the model produced becomes a space."""
    return [
        " ".join(text.splitlines()) for text in tokenizer.batch_decode(output_ids, skip_special_tokens=True)
    ]


def score_translations(
    hypotheses: Sequence[str],
    references: Sequence[str],
    lowercase: bool = False,
    ter: bool = False,
    target_lang: str = "",
) -> dict[str, float | str]:
    """Corpus sacreBLEU, chrF and optionally TER of `hypotheses` against one reference each.

    Returns {"bleu", "bleu_signature", "chrf", "chrf_signature"} and, with `ter`, {"ter",
    "ter_signature"}. `lowercase` scores case-insensitively (as most Multi30k / IWSLT papers report);
    `target_lang` selects sacreBLEU's tokenizer for zh / ja / ko targets.
    """
    if len(hypotheses) != len(references):
        raise ValueError(f"{len(hypotheses)} hypotheses but {len(references)} references; they must pair up")
    if not references:
        raise ValueError("no references to score against")
    metrics = {
        "bleu": BLEU(lowercase=lowercase, trg_lang=target_lang),
        "chrf": CHRF(lowercase=lowercase),
    }
    if ter:
        metrics["ter"] = TER(case_sensitive=not lowercase)
    scores: dict[str, float | str] = {}
    for name, metric in metrics.items():
        scores[name] = metric.corpus_score(list(hypotheses), [list(references)]).score
        scores[f"{name}_signature"] = str(metric.get_signature())
    return scores


DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16}


def add_decoding_arguments(parser: argparse.ArgumentParser) -> None:
    """The command-line options of the translating scripts; read them back with `decoding_kwargs`."""
    parser.add_argument("model", help="saved model directory (with its tokenizer) or Hub id")
    parser.add_argument("--num-beams", type=int, default=PAPER_GENERATION_KWARGS["num_beams"])
    parser.add_argument("--length-penalty", type=float, default=PAPER_GENERATION_KWARGS["length_penalty"])
    parser.add_argument(
        "--max-new-tokens",
        type=int,
        default=None,
        help=f"fixed output limit (default: the batch's longest source + {PAPER_EXTRA_OUTPUT_TOKENS})",
    )
    add_runtime_arguments(parser)


def add_runtime_arguments(parser: argparse.ArgumentParser) -> None:
    """Batch size, device and dtype options of the translating scripts."""
    parser.add_argument("--max-tokens", type=int, default=DEFAULT_MAX_TOKENS, help="source tokens per batch")
    parser.add_argument("--device", default="auto", help="cpu, cuda, cuda:1... (default: the GPU if present)")
    parser.add_argument("--dtype", default="float32", choices=sorted(DTYPES))


def runtime_kwargs(args: argparse.Namespace) -> dict[str, Any]:
    """`max_tokens`, `device` and `dtype` from the options of `add_runtime_arguments`."""
    return {"max_tokens": args.max_tokens, "device": args.device, "dtype": args.dtype}


def add_dataset_arguments(parser: argparse.ArgumentParser) -> None:
    """The options that name a translation dataset and its direction; read them back with `dataset_kwargs`."""
    parser.add_argument("--dataset", default="../shared/datasets/multi30k", help="Hub name or local path")
    parser.add_argument("--dataset-config", default=None, help="Hub config, e.g. de-en for wmt14")
    parser.add_argument("--source-lang", default="de")
    parser.add_argument("--target-lang", default="en")
    parser.add_argument(
        "--max-sentences", type=int, default=None, help="the first N pairs of each split only"
    )


def dataset_kwargs(args: argparse.Namespace) -> dict[str, Any]:
    """The dataset, direction and sentence-limit keywords of `evaluate_bleu` and `select_on_validation`."""
    return {
        "dataset": args.dataset,
        "source_lang": args.source_lang,
        "target_lang": args.target_lang,
        "config_name": args.dataset_config,
        "max_sentences": args.max_sentences,
    }


def load_evaluation_pairs(
    dataset: str,
    source_lang: str,
    target_lang: str,
    split: str,
    config_name: str | None = None,
    max_sentences: int | None = None,
) -> datasets.Dataset:
    """A split's `source` / `target` pairs, the first `max_sentences` of them when given."""
    pairs = load_translation_split(dataset, source_lang, target_lang, split, config_name)
    if max_sentences is not None:
        pairs = pairs.select(range(min(max_sentences, len(pairs))))
    return pairs


def decoding_kwargs(args: argparse.Namespace) -> dict[str, Any]:
    """`generate` kwargs from the options of `add_decoding_arguments`."""
    kwargs: dict[str, Any] = {"num_beams": args.num_beams}
    if args.num_beams > 1:  # greedy search has no length penalty; generate warns if given one
        kwargs["length_penalty"] = args.length_penalty
    if args.max_new_tokens is not None:
        kwargs["max_new_tokens"] = args.max_new_tokens
    return kwargs


def resolve_device(device: str | None = None) -> torch.device:
    """`device`, or else the GPU if there is one and the CPU if not; an absent GPU asked for is an error."""
    if device in (None, "auto"):
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    resolved = torch.device(device)
    if resolved.type == "cuda" and not torch.cuda.is_available():
        raise ValueError(f"device {device!r} requested but torch sees no CUDA GPU; use --device cpu")
    return resolved


def load_model_and_tokenizer(
    model_name_or_path: str | os.PathLike, device: str | None = None, dtype: str = "float32", **model_kwargs
) -> tuple[PreTrainedModel, PreTrainedTokenizerBase]:
    """A saved model directory (or Hub id) and its tokenizer, in eval mode on `device` in `dtype`.

    `model_kwargs` go to `from_pretrained` (e.g. attn_implementation="eager"; ours default to AUTO_ATTENTION).
    For our own model type the tokenizer's vocabulary size and special token ids must match the
    model config (`check_tokenizer_matches_model`); other seq2seq models are taken as they are.
    """
    if dtype not in DTYPES:
        raise ValueError(f"unknown dtype {dtype!r}; choose one of {sorted(DTYPES)}")
    device = resolve_device(device)
    try:
        tokenizer = AutoTokenizer.from_pretrained(model_name_or_path)
        model = AutoModelForSeq2SeqLM.from_pretrained(model_name_or_path, dtype=DTYPES[dtype], **model_kwargs)
    except OSError as err:
        raise FileNotFoundError(
            f"cannot load a model and tokenizer from {str(model_name_or_path)!r}: it is no saved model "
            f"directory and could not be loaded from the Hub ({err})"
        ) from err
    if model.config.model_type == VanillaTransformerConfig.model_type:
        check_tokenizer_matches_model(tokenizer, model.config)
        if "attn_implementation" not in model_kwargs:
            model.set_attn_implementation(AUTO_ATTENTION)
    return model.to(device).eval(), tokenizer


def evaluate_translation(
    model: PreTrainedModel,
    tokenizer: PreTrainedTokenizerBase,
    sources: Sequence[str],
    references: Sequence[str | None],
    max_tokens: int = DEFAULT_MAX_TOKENS,
    ter: bool = False,
    target_lang: str = "",
    show_progress: bool = True,
    **generate_kwargs,
) -> tuple[list[str], dict[str, Any]]:
    """Translate `sources` and score against `references`: (hypotheses, report).

    The report holds "cased" and "lowercased" sacreBLEU / chrF (and TER with `ter`), each with its
    signature, the number of sentences and of blank sources (translated to "", logged), the
    generation settings and the speed. A missing or blank reference is an error: it would lower
    the score silently.
    """
    if not sources:
        raise ValueError("no sentences to evaluate")
    if len(sources) != len(references):
        raise ValueError(f"{len(sources)} sources but {len(references)} references; they must pair up")
    missing = [
        line for line, reference in enumerate(references, 1) if reference is None or not reference.strip()
    ]
    if missing:
        raise ValueError(
            f"{len(missing)} of {len(references)} references are missing or blank (first at line "
            f"{missing[0]}); this split has no complete references to score against"
        )
    blank_sources = sum(not source.strip() for source in sources)
    if blank_sources:
        logger.warning(
            "%d of %d source lines are blank; their translations are blank", blank_sources, len(sources)
        )
    started = time.perf_counter()
    hypotheses = translate_sentences(
        model, tokenizer, sources, max_tokens=max_tokens, show_progress=show_progress, **generate_kwargs
    )
    seconds = time.perf_counter() - started
    report = {
        "cased": score_translations(hypotheses, references, ter=ter, target_lang=target_lang),
        "lowercased": score_translations(
            hypotheses, references, lowercase=True, ter=ter, target_lang=target_lang
        ),
        "sentences": len(sources),
        "blank_sources": blank_sources,
        "generation": {
            "max_new_tokens": f"longest source in the batch + {PAPER_EXTRA_OUTPUT_TOKENS}",
            **generate_kwargs,
            "max_tokens": max_tokens,
        },
        "device": str(model.device),
        "dtype": str(model.dtype).removeprefix("torch."),
        "seconds": round(seconds, 3),
        "sentences_per_second": round(len(sources) / seconds, 2),
    }
    return hypotheses, report


def evaluate_bleu(
    model_name_or_path: str | os.PathLike,
    dataset: str,
    source_lang: str,
    target_lang: str,
    output_dir: str | os.PathLike,
    split: str = "test",
    config_name: str | None = None,
    max_sentences: int | None = None,
    device: str | None = None,
    dtype: str = "float32",
    max_tokens: int = DEFAULT_MAX_TOKENS,
    ter: bool = False,
    seed: int = 0,
    show_progress: bool = True,
    **generate_kwargs,
) -> dict[str, Any]:
    """Translate a dataset split with a saved model, score it, and write hypotheses and a JSON report.

    Decodes with the paper's settings (beam 4, length penalty 0.6, input length + 50) unless
    `generate_kwargs` say otherwise. Writes `{split}.{source_lang}-{target_lang}.hyp` (one
    translation a line, in dataset order) and `.json` into `output_dir`, each atomically, and
    returns the report.
    """
    pairs = load_evaluation_pairs(dataset, source_lang, target_lang, split, config_name, max_sentences)
    model, tokenizer = load_model_and_tokenizer(model_name_or_path, device, dtype)
    set_seed(seed)
    hypotheses, report = evaluate_translation(
        model,
        tokenizer,
        pairs["source"],
        pairs["target"],
        max_tokens=max_tokens,
        ter=ter,
        target_lang=target_lang,
        show_progress=show_progress,
        **paper_decoding_defaults(generate_kwargs),
        **generate_kwargs,
    )
    stem = f"{split}.{source_lang}-{target_lang}"
    hypotheses_path = write_lines_atomic(Path(output_dir) / f"{stem}.hyp", hypotheses)
    report = {
        "model": str(model_name_or_path),
        "dataset": dataset,
        "config_name": config_name,
        "split": split,
        "source_lang": source_lang,
        "target_lang": target_lang,
        **report,
        "seed": seed,
        "hypotheses_file": str(hypotheses_path),
    }
    write_text_atomic(
        Path(output_dir) / f"{stem}.json", json.dumps(report, indent=2, ensure_ascii=False) + "\n"
    )
    return report


RUN_CANDIDATES = ("checkpoint_best", "checkpoint_last", "checkpoint_average")


def expand_candidates(paths: Sequence[str | os.PathLike]) -> list[Path]:
    """Model directories to choose from: a training run directory stands for its best, last and average.

    Directories holding the same weights (model.safetensors) as an earlier one are left out.
    """
    candidates = []
    for path in map(Path, paths):
        if (path / "config.json").is_file():
            candidates.append(path)
        elif any((path / name).is_dir() for name in RUN_CANDIDATES):
            candidates.extend(path / name for name in RUN_CANDIDATES if (path / name).is_dir())
        else:
            raise FileNotFoundError(
                f"{path} is neither a saved model directory nor a training run (with {', '.join(RUN_CANDIDATES)})"
            )
    if not candidates:
        raise ValueError("no models to choose from")
    # A run's best checkpoint is often its last one too: decode each set of weights once.
    distinct = {}
    for candidate in candidates:
        weights = candidate / "model.safetensors"
        key = hashlib.sha256(weights.read_bytes()).hexdigest() if weights.is_file() else candidate
        distinct.setdefault(key, candidate)
    return list(distinct.values())


def select_on_validation(
    models: Sequence[str | os.PathLike],
    dataset: str,
    source_lang: str,
    target_lang: str,
    output_dir: str | os.PathLike,
    num_beams: Sequence[int] = (PAPER_GENERATION_KWARGS["num_beams"],),
    length_penalties: Sequence[float] = (PAPER_GENERATION_KWARGS["length_penalty"],),
    validation_split: str = "validation",
    report_splits: Sequence[str] = ("test",),
    config_name: str | None = None,
    max_sentences: int | None = None,
    device: str | None = None,
    dtype: str = "float32",
    max_tokens: int = DEFAULT_MAX_TOKENS,
) -> dict[str, Any]:
    """Pick the model, beam size and length penalty with the best cased validation BLEU, then report other splits.

    Every model of `models` (run directories expand to their best, last and average checkpoints) is
    decoded on `validation_split` with every beam size and length penalty (greedy search, beam 1,
    once: it has no length penalty). The winner alone is then evaluated on each of `report_splits`
    with `evaluate_bleu`, so a test set is reported, never tuned on. `max_sentences` limits every split.
    Writes `selection.json` (every validation score and the choice) and the reports into `output_dir`;
    returns the same dictionary.
    """
    candidates = expand_candidates(models)
    if not num_beams or not length_penalties or min(num_beams) < 1:
        raise ValueError(
            f"need beam sizes >= 1 and length penalties, got {list(num_beams)}, {list(length_penalties)}"
        )
    settings = [
        {"num_beams": beams, **({"length_penalty": penalty} if beams > 1 else {})}
        for beams in dict.fromkeys(num_beams)
        for penalty in (dict.fromkeys(length_penalties) if beams > 1 else (None,))
    ]
    pairs = load_evaluation_pairs(
        dataset, source_lang, target_lang, validation_split, config_name, max_sentences
    )
    rows = []
    with tqdm(total=len(candidates) * len(settings), unit="decoding", desc="Validation") as progress:
        for candidate in candidates:
            model, tokenizer = load_model_and_tokenizer(candidate, device, dtype)
            for setting in settings:
                _, scores = evaluate_translation(
                    model,
                    tokenizer,
                    pairs["source"],
                    pairs["target"],
                    max_tokens=max_tokens,
                    target_lang=target_lang,
                    show_progress=False,
                    **setting,
                )
                rows.append(
                    {
                        "model": str(candidate),
                        **setting,
                        "bleu": scores["cased"]["bleu"],
                        "bleu_lowercased": scores["lowercased"]["bleu"],
                        "chrf": scores["cased"]["chrf"],
                        "seconds": scores["seconds"],
                    }
                )
                progress.update()
    chosen = max(rows, key=lambda row: row["bleu"])  # the first of equals: models and settings in given order
    decoding = {name: chosen[name] for name in ("num_beams", "length_penalty") if name in chosen}
    reports = {
        split: evaluate_bleu(
            chosen["model"],
            dataset,
            source_lang,
            target_lang,
            output_dir,
            split=split,
            config_name=config_name,
            max_sentences=max_sentences,
            device=device,
            dtype=dtype,
            max_tokens=max_tokens,
            **decoding,
        )
        for split in report_splits
    }
    selection = {
        "validation_split": validation_split,
        "validation_sentences": len(pairs),
        "signature": scores["cased"]["bleu_signature"],
        "validation": rows,
        "chosen": chosen,
        "reports": {
            split: {case: report[case] for case in ("cased", "lowercased")}
            for split, report in reports.items()
        },
    }
    write_text_atomic(
        Path(output_dir) / "selection.json", json.dumps(selection, indent=2, ensure_ascii=False) + "\n"
    )
    return selection


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


def write_text_atomic(path: str | os.PathLike, text: str) -> Path:
    """Write to a temporary file beside `path`, then rename it over `path`: never a half-written file."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    # A name of our own rather than mkstemp's, whose files are private (0600) rather than following the umask.
    staging = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    try:
        staging.write_text(text, encoding="utf-8", newline="")
        os.replace(staging, path)
    finally:
        staging.unlink(missing_ok=True)
    return path
