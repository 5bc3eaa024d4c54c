"""Section 6.1's choice on the development set: checkpoint, beam size and length penalty, then test once."""

from __future__ import annotations

import hashlib
import json
import os
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from tqdm.auto import tqdm

from hf_vanilla.files import write_text_atomic
from hf_vanilla.model.decoding import (
    DEFAULT_MAX_TOKENS,
    PAPER_GENERATION_KWARGS,
)
from hf_vanilla.research.reranking import (
    LANGUAGE_MODEL_WEIGHT,
    LANGUAGE_MODEL_WEIGHTS,
    RERANK_WEIGHTS,
    REVERSE_WEIGHT,
    RIGHT_TO_LEFT_WEIGHT,
    RIGHT_TO_LEFT_WEIGHTS,
    WORD_BONUS,
)

from .scoring import (
    evaluate_bleu,
    load_evaluation_pairs,
    named_model_paths,
    require_moses_tokenizer,
    score_model,
)

RUN_CANDIDATES = ("checkpoint_best", "checkpoint_last", "checkpoint_average")
SCORE_KINDS = ("cased", "lowercased", "tokenized_lowercased")  # the scores of a report kept in selection.json


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
        distinct.setdefault(weights_digest(candidate) or candidate, candidate)
    return list(distinct.values())


def weights_digest(model_dir: str | os.PathLike) -> str | None:
    """The SHA-256 of a saved model's weights (its model.safetensors), or None where it has none."""
    weights = Path(model_dir) / "model.safetensors"
    return hashlib.sha256(weights.read_bytes()).hexdigest() if weights.is_file() else None


def decoding_grid(num_beams: Sequence[int], length_penalties: Sequence[float]) -> list[dict[str, Any]]:
    """Every beam size with every length penalty; greedy search (beam 1) once, as it has no length penalty."""
    if not num_beams or not length_penalties or min(num_beams) < 1:
        raise ValueError(
            f"need beam sizes >= 1 and length penalties, got {list(num_beams)}, {list(length_penalties)}"
        )
    return [
        {"num_beams": beams, **({"length_penalty": penalty} if beams > 1 else {})}
        for beams in dict.fromkeys(num_beams)
        for penalty in (dict.fromkeys(length_penalties) if beams > 1 else (None,))
    ]


def _validation_rows(candidates, settings, pairs, target_lang, device, dtype, max_tokens, extra_models):
    """Each candidate decoded with each setting on `pairs`: the score rows, and the BLEU signature.
    `extra_models`: `score_model`'s ensemble and reranking keywords."""
    rows = []
    with tqdm(total=len(candidates) * len(settings), unit="decoding", desc="Validation") as progress:
        for candidate in candidates:
            rows += score_model(
                candidate, pairs, target_lang, device, dtype, max_tokens, settings, **extra_models
            )
            progress.update(len(settings))
    signature = rows[-1]["signature"]
    return [{name: value for name, value in row.items() if name != "signature"} for row in rows], signature


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
    tokenized_bleu: bool = False,
    ensemble: Sequence[str | os.PathLike] = (),
    rerank_with: Sequence[str | os.PathLike] = (),
    rerank_weights: Sequence[float] = RERANK_WEIGHTS,
    rerank_right_to_left: Sequence[str | os.PathLike] = (),
    right_to_left_weights: Sequence[float] = RIGHT_TO_LEFT_WEIGHTS,
    word_bonuses: Sequence[float] | None = None,
    rerank_language_model: Sequence[str | os.PathLike] = (),
    language_model_weights: Sequence[float] = LANGUAGE_MODEL_WEIGHTS,
    **generate_kwargs,
) -> dict[str, Any]:
    """Pick the model, beam size and length penalty with the best cased validation BLEU, then report other splits.

    Every model of `models` (run directories expand to their best, last and average checkpoints) is
    decoded on `validation_split` with every beam size and length penalty (greedy search, beam 1,
    once: it has no length penalty). The winner alone is then evaluated on each of `report_splits`
    with `evaluate_bleu`, so a test set is reported, never tuned on. `max_sentences` limits every split;
    `generate_kwargs` (`cache_implementation="static"`, say) go to every decoding; `tokenized_bleu` adds
    the papers' tokenized, lowercased BLEU to the reports (validation is chosen on sacreBLEU alone).
    With `ensemble` (saved models), every candidate decodes together with them as one (`hf_vanilla.research.ensemble`):
    choose each member's checkpoint on its own first, then the ensemble's beam size and length penalty here.
    With `rerank_with` (saved models of the reverse direction), `rerank_right_to_left` (saved right-to-left models
    of this direction) or `rerank_language_model` (saved language models of the target language), each decoding's
    n-best list is reranked with each combination of `rerank_weights`, `right_to_left_weights`,
    `language_model_weights` and `word_bonuses` where given (`hf_vanilla.research.reranking`; 0 keeps beam search's choice),
    and the weights are chosen too.
    Writes `selection.json` (every validation score and the choice) and the reports into `output_dir`;
    returns the same dictionary.
    """
    if tokenized_bleu:
        require_moses_tokenizer()  # before the validation decodings, not after them
    candidates = expand_candidates(models)
    settings = [{**setting, **generate_kwargs} for setting in decoding_grid(num_beams, length_penalties)]
    pairs = load_evaluation_pairs(
        dataset, source_lang, target_lang, validation_split, config_name, max_sentences
    )
    extra_models = {
        "ensemble": ensemble,
        "rerank_with": rerank_with,
        "rerank_weights": rerank_weights,
        "rerank_right_to_left": rerank_right_to_left,
        "right_to_left_weights": right_to_left_weights,
        "word_bonuses": word_bonuses,
        "rerank_language_model": rerank_language_model,
        "language_model_weights": language_model_weights,
    }
    rows, signature = _validation_rows(
        candidates, settings, pairs, target_lang, device, dtype, max_tokens, extra_models
    )
    chosen = max(rows, key=lambda row: row["bleu"])  # the first of equals: models and settings in given order
    decoding = {
        name: chosen[name]
        for name in (
            "num_beams",
            "length_penalty",
            REVERSE_WEIGHT,
            RIGHT_TO_LEFT_WEIGHT,
            LANGUAGE_MODEL_WEIGHT,
            WORD_BONUS,
        )
        if name in chosen
    }
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
            tokenized_bleu=tokenized_bleu,
            ensemble=ensemble,
            rerank_with=rerank_with,
            rerank_right_to_left=rerank_right_to_left,
            rerank_language_model=rerank_language_model,
            **decoding,
            **generate_kwargs,
        )
        for split in report_splits
    }
    selection = {
        "validation_split": validation_split,
        "validation_sentences": len(pairs),
        **named_model_paths(
            ensemble=ensemble,
            rerank_with=rerank_with,
            rerank_right_to_left=rerank_right_to_left,
            rerank_language_model=rerank_language_model,
        ),
        "signature": signature,
        "validation": rows,
        "chosen": chosen,
        "reports": {
            split: {case: report[case] for case in SCORE_KINDS if case in report}
            for split, report in reports.items()
        },
    }
    write_text_atomic(
        Path(output_dir) / "selection.json", json.dumps(selection, indent=2, ensure_ascii=False) + "\n"
    )
    return selection
