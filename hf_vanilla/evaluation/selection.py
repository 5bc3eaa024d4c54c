"""Section 6.1's choice on the development set: checkpoint, beam size and length penalty, then test once."""

from __future__ import annotations

import hashlib
import os
from collections.abc import Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from tqdm.auto import tqdm

from hf_vanilla.checkpoints.cards import CARD_FILE, record_results, set_decoding_defaults
from hf_vanilla.checkpoints.run_model import publish_run_model
from hf_vanilla.evaluation.paper_bleu import PAPER_BLEU_KEY, require_moses_tokenizer
from hf_vanilla.evaluation.scoring import (
    BEAM_SEARCH,
    DEFAULT_RUNTIME,
    DEFAULT_SCORES,
    ROW_SCORES,
    Decoder,
    Runtime,
    ScoreOptions,
    TranslationData,
    evaluate_bleu,
    score_model,
)
from hf_vanilla.files import write_json
from hf_vanilla.model.decoding import (
    DEFAULT_DECODING,
    PAPER_GENERATION_KWARGS,
    DecodingOptions,
    resolve_decoding,
)

RUN_CANDIDATES = ("checkpoint_best", "checkpoint_last", "checkpoint_average")
# A report's scores in selection.json
SCORE_KINDS = ("cased", "lowercased", "tokenized_lowercased", PAPER_BLEU_KEY)


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
                f"{path} is neither a saved model directory nor a training run "
                f"(with {', '.join(RUN_CANDIDATES)})"
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
    settings = [
        resolve_decoding(None, DecodingOptions(beams, penalty))[0].generate_kwargs()
        for beams in num_beams
        for penalty in length_penalties
    ]
    return [dict(unique) for unique in dict.fromkeys(tuple(setting.items()) for setting in settings)]


@dataclass(frozen=True)
class SelectionGrid:
    """What selection tries on `validation_split` (its first `validation_pairs` pairs where given): every beam
    size of `num_beams` with every length penalty (`decoding_grid`); the winner alone is then decoded on each
    of `report_splits`, whole."""

    num_beams: Sequence[int] = (PAPER_GENERATION_KWARGS["num_beams"],)
    length_penalties: Sequence[float] = (PAPER_GENERATION_KWARGS["length_penalty"],)
    validation_split: str = "validation"
    report_splits: Sequence[str] = ("test",)
    validation_pairs: int | None = None


def _validation_rows(candidates, settings, pairs, target_lang, runtime, decoder):
    """Each candidate decoded with each setting on `pairs`: the score rows, and the BLEU signature."""
    rows = []
    with tqdm(total=len(candidates) * len(settings), unit="decoding", desc="Validation") as progress:
        for candidate in candidates:
            rows += score_model(candidate, pairs, settings, target_lang, runtime, decoder)
            progress.update(len(settings))
    signature = rows[-1]["signature"]
    return [{name: value for name, value in row.items() if name != "signature"} for row in rows], signature


def select_on_validation(
    models: Sequence[str | os.PathLike],
    data: TranslationData,
    output_dir: str | os.PathLike,
    grid: SelectionGrid = SelectionGrid(),
    runtime: Runtime = DEFAULT_RUNTIME,
    scoring: ScoreOptions = DEFAULT_SCORES,
    decoder: Decoder = BEAM_SEARCH,
    options: DecodingOptions = DEFAULT_DECODING,
) -> dict[str, Any]:
    """Pick the model and decoding (beam size, length penalty, a decoder's own settings) with the best cased
    validation BLEU, then report other splits.

    Every model of `models` (run directories expand to their best, last and average checkpoints) is decoded on
    the grid's validation split with each of its settings, by `decoder` (each of its variants is a row: a
    reranking decoder's weights are chosen too). The winner alone is then evaluated on each of the grid's
    report splits with `evaluate_bleu`, so a test set is reported, never tuned on. Where the winner is one
    model decoded alone, its beam size and length penalty become its checkpoint's decoding defaults
    (generation_config.json, `set_decoding_defaults`: what `pipeline` and `generate` then use) and the
    reports' scores go into its model card (`record_results`), so the card's scores are what its users get;
    the selection's "decoding_defaults_file" names the file written (None: none). `options`
    (`cache_implementation="static"`, say) go to every decoding; `scoring` to the reports (validation is
    chosen on sacreBLEU alone). Writes `selection.json` (every validation score and the choice) and the
    reports into `output_dir`; returns the same dictionary. A run's checkpoint so chosen becomes its run's
    `RUN/model` (`publish_run_model`), named in the selection's "run_model" (None: none).
    """
    if scoring.tokenized_bleu:
        require_moses_tokenizer()  # before the validation decodings, not after them
    pairs, rows, signature = _decode_validation(models, data, grid, runtime, decoder, options)
    chosen = max(rows, key=lambda row: row["bleu"])  # the first of equals: models and settings in given order
    decoding = {name: value for name, value in chosen.items() if name not in ("model", *ROW_SCORES)}
    winner_options = options.replace(**decoding)
    reports = {
        split: evaluate_bleu(
            chosen["model"], data, output_dir, split, runtime, scoring, decoder, options=winner_options
        )
        for split in grid.report_splits
    }
    defaults_file, run_model = _adopt_choice(chosen["model"], decoding, data.dataset, reports, decoder)
    selection = {
        "validation_split": grid.validation_split,
        "validation_sentences": len(pairs),
        **decoder.extra_models,
        "signature": signature,
        "validation": rows,
        "chosen": chosen,
        "decoding_defaults_file": defaults_file,
        "run_model": run_model,
        "reports": {
            split: {case: report[case] for case in SCORE_KINDS if case in report}
            for split, report in reports.items()
        },
    }
    write_json(Path(output_dir) / "selection.json", selection)
    return selection


def _decode_validation(models, data, grid, runtime, decoder, options):
    """Every candidate of `models` decoded with every setting of `grid` on its validation split: the
    validation pairs, the score rows and the BLEU signature."""
    candidates = expand_candidates(models)
    settings = [
        {**setting, **options.settings()} for setting in decoding_grid(grid.num_beams, grid.length_penalties)
    ]
    pairs = data.pairs(grid.validation_split)
    if grid.validation_pairs is not None:
        pairs = pairs.select(range(min(grid.validation_pairs, len(pairs))))
    quiet = replace(runtime, show_progress=False)  # one bar counts the validation decodings
    rows, signature = _validation_rows(candidates, settings, pairs, data.target_lang, quiet, decoder)
    return pairs, rows, signature


def _adopt_choice(model, decoding, dataset, reports, decoder):
    """The chosen checkpoint's decoding defaults and card, and its run's `RUN/model`, where the winner is one
    model decoded alone: the defaults file written and the run model published (each None where not)."""
    # An ensemble's or reranker's decoding and scores are not the checkpoint's own
    if decoder.extra_models:
        return None, None
    defaults_file = str(_make_checkpoint_default(Path(model), decoding, dataset, reports))
    run_model = str(publish_run_model(model)) if Path(model).name in RUN_CANDIDATES else None
    return defaults_file, run_model


def _make_checkpoint_default(
    model_dir: Path, decoding: dict[str, Any], dataset: str, reports: dict[str, dict[str, Any]]
) -> Path:
    """The chosen beam size and length penalty into the chosen checkpoint's generation config, and each report
    split's scores into its card, where it has one (a run's checkpoints do). Returns the generation config's
    path."""
    saved = set_decoding_defaults(model_dir, decoding["num_beams"], decoding.get("length_penalty"))
    if (model_dir / CARD_FILE).is_file():
        for split, report in reports.items():
            record_results(model_dir, dataset, split, report)
    return saved
