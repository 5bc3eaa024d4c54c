"""sacreBLEU scoring of translations: of sentences, and of a dataset split decoded with a saved model (section 6.1)."""

from __future__ import annotations

import importlib.util
import json
import logging
import os
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import datasets
from sacrebleu.metrics import BLEU, CHRF, TER
from transformers import (
    PreTrainedModel,
    PreTrainedTokenizerBase,
    set_seed,
)

from hf_vanilla.data import load_translation_split
from hf_vanilla.files import write_text_atomic
from hf_vanilla.model.decoding import (
    DEFAULT_MAX_TOKENS,
    PAPER_EXTRA_OUTPUT_TOKENS,
    paper_decoding_defaults,
)
from hf_vanilla.research.reranking import (
    DEFAULT_LANGUAGE_MODEL_WEIGHT,
    DEFAULT_RERANK_WEIGHT,
    DEFAULT_RIGHT_TO_LEFT_WEIGHT,
    load_reranking_models,
    reranking_weights,
    translate_reranked,
    weight_grid,
)
from hf_vanilla.translation import (
    load_ensemble,
    load_model_and_tokenizer,
    translate_sentences,
    write_lines_atomic,
)

logger = logging.getLogger(__name__)


def _require_pairs(hypotheses: Sequence[str], references: Sequence[str]) -> None:
    """Raise a ValueError naming the problem unless there is one reference for each of the hypotheses."""
    if len(hypotheses) != len(references):
        raise ValueError(f"{len(hypotheses)} hypotheses but {len(references)} references; they must pair up")
    if not references:
        raise ValueError("no references to score against")


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
    _require_pairs(hypotheses, references)
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


def require_moses_tokenizer() -> None:
    """Raise a clear ImportError when sacremoses, which tokenized BLEU needs, is not installed."""
    if importlib.util.find_spec("sacremoses") is None:
        raise ImportError(
            "tokenized BLEU needs the Moses tokenizer of sacremoses: pip install 'hf_vanilla[tokenized]'"
        )


def score_tokenized_lowercased(
    hypotheses: Sequence[str], references: Sequence[str], target_lang: str
) -> dict[str, float | str]:
    """BLEU on lowercased, Moses-tokenized text: the score Multi30k papers print, to set beside sacreBLEU.

    Lowercases, then splits with the Moses tokenizer (sacremoses, no aggressive hyphen splits), as the
    Multi30k task files are prepared: that gives test2016's German references the 12,103 tokens of the
    fairseq transformer_tiny score (Wu et al., 2021). Its tokens differ from sacreBLEU's 13a ones (Moses
    splits English clitics, "isn 't"), so it is reported beside sacreBLEU, never instead.
    Returns {"bleu", "bleu_signature"}.
    """
    require_moses_tokenizer()
    from sacremoses import MosesTokenizer
    from sacremoses import __version__ as sacremoses_version

    moses = MosesTokenizer(lang=target_lang or "en")

    def tokenized(sentences: Sequence[str]) -> list[str]:
        return [moses.tokenize(sentence.lower(), return_str=True, escape=False) for sentence in sentences]

    _require_pairs(hypotheses, references)
    # The text is split already (on spaces only); force: its tokenized periods are meant, not a mistake.
    bleu = BLEU(lowercase=True, tokenize="none", force=True)
    return {
        "bleu": bleu.corpus_score(tokenized(hypotheses), [tokenized(references)]).score,
        "bleu_signature": f"{bleu.get_signature()}|pretok:moses-sacremoses-{sacremoses_version}",
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


def _check_evaluation_input(
    sources: Sequence[str], references: Sequence[str | None], tokenized_bleu: bool
) -> int:
    """Raise a ValueError naming what cannot be scored: no sources, sources and references that do not pair up,
    a missing or blank reference (it would lower the score silently). Returns the number of blank sources."""
    if tokenized_bleu:
        require_moses_tokenizer()  # before decoding, not after
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
    return blank_sources


def _translation_report(
    model: PreTrainedModel,
    hypotheses: Sequence[str],
    references: Sequence[str],
    blank_sources: int,
    seconds: float,
    generation: dict[str, Any],
    ter: bool,
    target_lang: str,
    tokenized_bleu: bool,
) -> dict[str, Any]:
    """`evaluate_translation`'s report of `hypotheses`, decoded by `model` with `generation` in `seconds`."""
    return {
        "cased": score_translations(hypotheses, references, ter=ter, target_lang=target_lang),
        "lowercased": score_translations(
            hypotheses, references, lowercase=True, ter=ter, target_lang=target_lang
        ),
        **(
            {"tokenized_lowercased": score_tokenized_lowercased(hypotheses, references, target_lang)}
            if tokenized_bleu
            else {}
        ),
        "sentences": len(hypotheses),
        "blank_sources": blank_sources,
        "generation": {
            "max_new_tokens": f"source length + {PAPER_EXTRA_OUTPUT_TOKENS}, each sentence",
            **generation,
        },
        "device": str(model.device),
        "dtype": str(model.dtype).removeprefix("torch."),
        "seconds": round(seconds, 3),
        "sentences_per_second": round(len(hypotheses) / seconds, 2),
    }


def evaluate_translation(
    model: PreTrainedModel,
    tokenizer: PreTrainedTokenizerBase,
    sources: Sequence[str],
    references: Sequence[str | None],
    max_tokens: int = DEFAULT_MAX_TOKENS,
    ter: bool = False,
    target_lang: str = "",
    show_progress: bool = True,
    tokenized_bleu: bool = False,
    ensemble: Sequence[PreTrainedModel] = (),
    **generate_kwargs,
) -> tuple[list[str], dict[str, Any]]:
    """Translate `sources` and score against `references`: (hypotheses, report).

    The report holds "cased" and "lowercased" sacreBLEU / chrF (and TER with `ter`), each with its
    signature, the number of sentences and of blank sources (translated to "", logged), the
    generation settings and the speed; with `tokenized_bleu`, also "tokenized_lowercased" (the
    papers' BLEU, `score_tokenized_lowercased`). A missing or blank reference is an error: it would
    lower the score silently. `ensemble`: models that translate with `model` as one (`translate_sentences`).
    """
    blank_sources = _check_evaluation_input(sources, references, tokenized_bleu)
    started = time.perf_counter()
    hypotheses = translate_sentences(
        model,
        tokenizer,
        sources,
        max_tokens=max_tokens,
        show_progress=show_progress,
        ensemble=ensemble,
        **generate_kwargs,
    )
    seconds = time.perf_counter() - started
    generation = {**generate_kwargs, "max_tokens": max_tokens}
    report = _translation_report(
        model, hypotheses, references, blank_sources, seconds, generation, ter, target_lang, tokenized_bleu
    )
    return hypotheses, report


def named_model_paths(**models: Sequence[str | os.PathLike]) -> dict[str, list[str]]:
    """Each role's saved models (an ensemble's members, each kind of reranking model) as the paths a report records,
    by role; a role without models is left out."""
    return {role: [str(path) for path in paths] for role, paths in models.items() if paths}


def evaluate_reranked(
    model: PreTrainedModel,
    tokenizer: PreTrainedTokenizerBase,
    sources: Sequence[str],
    references: Sequence[str | None],
    weightings: Sequence[Mapping[str, float]],
    num_beams: int,
    reverse_models: Sequence[tuple[PreTrainedModel, PreTrainedTokenizerBase]] = (),
    right_to_left_models: Sequence[tuple[PreTrainedModel, PreTrainedTokenizerBase]] = (),
    max_tokens: int = DEFAULT_MAX_TOKENS,
    ter: bool = False,
    target_lang: str = "",
    show_progress: bool = True,
    tokenized_bleu: bool = False,
    ensemble: Sequence[PreTrainedModel] = (),
    language_models: Sequence[tuple[PreTrainedModel, PreTrainedTokenizerBase]] = (),
    **generate_kwargs,
) -> list[tuple[list[str], dict[str, Any]]]:
    """`evaluate_translation` with beam search's `num_beams`-best list reranked by `reverse_models` (models of the
    other direction), `right_to_left_models` (of this direction, trained right to left) and `language_models` (of
    the target language), each with its tokenizer (`hf_vanilla.research.reranking`), once for each of `weightings` ({weight
    name: weight} for each kind of model given: `reranking_weights`): one (hypotheses, report) each, the report's
    generation settings holding the weights. The n-best list and its scores are computed once for all weightings; each report's seconds are that
    whole time."""
    blank_sources = _check_evaluation_input(sources, references, tokenized_bleu)
    started = time.perf_counter()
    translations = translate_reranked(
        model,
        tokenizer,
        sources,
        num_beams,
        weightings,
        reverse_models,
        right_to_left_models,
        max_tokens,
        show_progress,
        language_models,
        ensemble=ensemble,
        **generate_kwargs,
    )
    seconds = time.perf_counter() - started
    evaluated = []
    for weights, hypotheses in zip(weightings, translations, strict=True):
        generation = {"num_beams": num_beams, **generate_kwargs, **weights, "max_tokens": max_tokens}
        report = _translation_report(
            model,
            hypotheses,
            references,
            blank_sources,
            seconds,
            generation,
            ter,
            target_lang,
            tokenized_bleu,
        )
        evaluated.append((hypotheses, report))
    return evaluated


def score_model(
    model_name_or_path: str | os.PathLike,
    pairs: datasets.Dataset,
    target_lang: str = "",
    device: str | None = None,
    dtype: str = "float32",
    max_tokens: int = DEFAULT_MAX_TOKENS,
    settings: Sequence[dict[str, Any]] = ({},),
    show_progress: bool = False,
    ensemble: Sequence[str | os.PathLike] = (),
    rerank_with: Sequence[str | os.PathLike] = (),
    rerank_weights: Sequence[float] = (0.0,),
    rerank_right_to_left: Sequence[str | os.PathLike] = (),
    right_to_left_weights: Sequence[float] = (0.0,),
    word_bonuses: Sequence[float] | None = None,
    rerank_language_model: Sequence[str | os.PathLike] = (),
    language_model_weights: Sequence[float] = (0.0,),
) -> list[dict[str, Any]]:
    """A saved model decoded on `pairs` (`source` / `target`) with each of `settings` (generate kwargs): one row
    each, with cased and lowercased BLEU, chrF, the BLEU signature and the seconds spent. With `ensemble` (saved
    models), they decode with it as one. With `rerank_with` (saved models of the reverse direction),
    `rerank_right_to_left` (saved right-to-left models of this direction) or `rerank_language_model` (saved language
    models of the target language), each setting's n-best list is reranked with each combination of
    `rerank_weights`, `right_to_left_weights`, `language_model_weights` and `word_bonuses` (`evaluate_reranked`):
    one row each, with its weights ("rerank_weight", "right_to_left_weight", "language_model_weight",
    "word_bonus")."""
    weightings = weight_grid(
        reranking_weights(
            rerank_with,
            rerank_weights,
            rerank_right_to_left,
            right_to_left_weights,
            word_bonuses,
            rerank_language_model,
            language_model_weights,
        )
    )
    model, tokenizer = load_model_and_tokenizer(model_name_or_path, device, dtype)
    members = load_ensemble(ensemble, device, dtype)
    reranking_models = load_reranking_models(
        rerank_with, rerank_right_to_left, device, dtype, rerank_language_model
    )
    common = {"max_tokens": max_tokens, "target_lang": target_lang, "show_progress": show_progress}
    rows = []
    for setting in settings:
        if weightings != [{}]:  # reranking
            beam_search = {name: value for name, value in setting.items() if name != "num_beams"}
            evaluated = evaluate_reranked(
                model,
                tokenizer,
                pairs["source"],
                pairs["target"],
                weightings,
                setting.get("num_beams", 1),
                **reranking_models,
                ensemble=members,
                **common,
                **beam_search,
            )
            reports = [
                ({**setting, **weights}, report)
                for weights, (_, report) in zip(weightings, evaluated, strict=True)
            ]
        else:
            _, report = evaluate_translation(
                model, tokenizer, pairs["source"], pairs["target"], ensemble=members, **common, **setting
            )
            reports = [(setting, report)]
        rows += [
            {
                "model": str(model_name_or_path),
                **row_setting,
                "bleu": report["cased"]["bleu"],
                "bleu_lowercased": report["lowercased"]["bleu"],
                "chrf": report["cased"]["chrf"],
                "signature": report["cased"]["bleu_signature"],
                "seconds": report["seconds"],
            }
            for row_setting, report in reports
        ]
    return rows


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
    tokenized_bleu: bool = False,
    ensemble: Sequence[str | os.PathLike] = (),
    rerank_with: Sequence[str | os.PathLike] = (),
    rerank_weight: float = DEFAULT_RERANK_WEIGHT,
    rerank_right_to_left: Sequence[str | os.PathLike] = (),
    right_to_left_weight: float = DEFAULT_RIGHT_TO_LEFT_WEIGHT,
    word_bonus: float | None = None,
    rerank_language_model: Sequence[str | os.PathLike] = (),
    language_model_weight: float = DEFAULT_LANGUAGE_MODEL_WEIGHT,
    **generate_kwargs,
) -> dict[str, Any]:
    """Translate a dataset split with a saved model, score it, and write hypotheses and a JSON report.

    Decodes with the paper's settings (beam 4, length penalty 0.6, input length + 50) unless
    `generate_kwargs` say otherwise. Writes `{split}.{source_lang}-{target_lang}.hyp` (one
    translation a line, in dataset order) and `.json` into `output_dir`, each atomically, and
    returns the report. `tokenized_bleu` adds the papers' tokenized, lowercased BLEU beside sacreBLEU.
    `ensemble` (saved models sharing the model's tokenizer) translate with it as one (`hf_vanilla.research.ensemble`).
    `rerank_with` (saved models of the reverse direction), `rerank_right_to_left` (saved right-to-left models of
    this direction) and `rerank_language_model` (saved language models of the target language) rerank beam search's
    n-best list with `rerank_weight`, `right_to_left_weight` and `language_model_weight`, and `word_bonus` for each
    word where given (`hf_vanilla.research.reranking`).
    """
    if tokenized_bleu:
        require_moses_tokenizer()  # before loading anything
    weights = reranking_weights(
        rerank_with,
        rerank_weight,
        rerank_right_to_left,
        right_to_left_weight,
        word_bonus,
        rerank_language_model,
        language_model_weight,
    )
    pairs = load_evaluation_pairs(dataset, source_lang, target_lang, split, config_name, max_sentences)
    model, tokenizer = load_model_and_tokenizer(model_name_or_path, device, dtype)
    members = load_ensemble(ensemble, device, dtype)
    reranking_models = load_reranking_models(
        rerank_with, rerank_right_to_left, device, dtype, rerank_language_model
    )
    set_seed(seed)
    settings = {**paper_decoding_defaults(generate_kwargs), **generate_kwargs}
    common = {
        "max_tokens": max_tokens,
        "ter": ter,
        "target_lang": target_lang,
        "show_progress": show_progress,
        "tokenized_bleu": tokenized_bleu,
        "ensemble": members,
    }
    if weights:
        num_beams = settings.pop("num_beams")
        ((hypotheses, report),) = evaluate_reranked(
            model,
            tokenizer,
            pairs["source"],
            pairs["target"],
            [weights],
            num_beams,
            **reranking_models,
            **common,
            **settings,
        )
    else:
        hypotheses, report = evaluate_translation(
            model, tokenizer, pairs["source"], pairs["target"], **common, **settings
        )
    stem = f"{split}.{source_lang}-{target_lang}"
    hypotheses_path = write_lines_atomic(Path(output_dir) / f"{stem}.hyp", hypotheses)
    report = {
        "model": str(model_name_or_path),
        **named_model_paths(
            ensemble=ensemble,
            rerank_with=rerank_with,
            rerank_right_to_left=rerank_right_to_left,
            rerank_language_model=rerank_language_model,
        ),
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
