"""A fast student of a trained model (a departure from the paper, off unless asked for): sequence-level
knowledge distillation (Kim and Rush, 2016) into a deep encoder and a shallow decoder (Kasai et al., 2021: the
decoder runs once a token and beam, the encoder once a sentence), with a vocabulary shortlist for the
CTranslate2 engine (`translation.shortlist`, `--vocab-map`).

`make_student` runs four stages into one work directory, each skipped when its output is there and was made
from the same inputs (`stages.json` records what each was made from), so that a stopped command given again
goes on: the teacher's translations of the training sources (`distilled/`, through `distill_dataset`, which
saves them as they come into `translations/`), the student's training run (`run/`, resumed where stopped),
selection on validation (`selection/`), and the student (`student/`): the chosen checkpoint with the shortlist
of the original training pairs (`vocab_map.txt`) and `student.json`, which says how it was made.
"""

from __future__ import annotations

import hashlib
import json
import logging
import shutil
from collections.abc import Callable, Mapping
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from hf_vanilla.checkpoints.cards import record_departures
from hf_vanilla.checkpoints.loading import load_config, load_tokenizer, model_digest
from hf_vanilla.data.corpus import split_names
from hf_vanilla.evaluation.scoring import DEFAULT_RUNTIME, Runtime, TranslationData
from hf_vanilla.evaluation.selection import SelectionGrid, select_on_validation
from hf_vanilla.files import write_json
from hf_vanilla.model.decoding import DEFAULT_DECODING, DecodingOptions
from hf_vanilla.research.distillation import SavedTranslations, Teachers, distill_dataset
from hf_vanilla.training.settings import load_training_config
from hf_vanilla.training.train import train
from hf_vanilla.translation.shortlist import (
    VOCAB_MAP_FILE,
    ShortlistSize,
    build_shortlist,
    save_shortlist,
    tokenized_pairs,
)

logger = logging.getLogger(__name__)
STUDENT_CONFIG = Path(__file__).resolve().parents[2] / "configs" / "student-multi30k.yaml"  # the repository's
STAGES_FILE = "stages.json"
STUDENT_FILE = "student.json"
STUDENT_DIR = "student"  # the last stage's output, OUTPUT_DIR/student: the student itself
# The length penalties the student is selected with, beside its config's (the quickstart's: its teacher
# chose 1.0 over 0.6 on validation); one beam size, the config's, for speed is the point of a student.
SELECTION_LENGTH_PENALTIES = (0.6, 1.0)
# What a student takes of its teacher's shape; the layer counts are `StudentShape`'s.
TEACHER_SHAPE = ("d_model", "d_ff", "num_attention_heads", "pre_layernorm", "tie_word_embeddings")
DEPARTURE = (
    "a student distilled from its teacher's beam-search translations (Kim and Rush, 2016) with a deep "
    "encoder and a shallow decoder (Kasai et al., 2021), and a vocabulary shortlist for --vocab-map: "
    "departures from the paper, for decoding speed"
)


@dataclass(frozen=True)
class StudentShape:
    """The student's layers: `encoder_layers` (None: the teacher's) and `decoder_layers`; the rest of its
    shape and its vocabulary are the teacher's."""

    encoder_layers: int | None = None
    decoder_layers: int = 1

    def model_overrides(self, teacher_dir: str | Path) -> dict[str, Any]:
        teacher = load_config(teacher_dir)
        return {
            **{name: getattr(teacher, name) for name in TEACHER_SHAPE},
            "encoder_layers": self.encoder_layers or teacher.encoder_layers,
            "decoder_layers": self.decoder_layers,
        }


@dataclass(frozen=True)
class StudentRecipe:
    """How the student is made: the training config file and keys over it (`max_minutes`, `seed`...), its
    shape, its shortlist's size, the teacher's decoding options (what they leave open, the teacher's
    generation config's), the splits the chosen student is evaluated on (those the data has) and whether it
    trains on the original pairs too, beside the teacher's translations (`keep_original`)."""

    config_file: str | Path = STUDENT_CONFIG
    training_overrides: Mapping[str, Any] = field(default_factory=dict)
    shape: StudentShape = StudentShape()
    shortlist: ShortlistSize = ShortlistSize()
    teacher_decoding: DecodingOptions = DEFAULT_DECODING
    report_splits: tuple[str, ...] = ("test",)
    keep_original: bool = False


def make_student(
    teacher: str | Path,
    data: TranslationData,
    output_dir: str | Path,
    recipe: StudentRecipe = StudentRecipe(),
    runtime: Runtime = DEFAULT_RUNTIME,
) -> dict[str, Any]:
    """Distil `teacher` (a saved model directory) on `data`'s training split into a student in
    `output_dir/student` (see the module), decoding on `runtime`'s engine; returns `student.json`'s record."""
    output_dir, teacher = Path(output_dir), Path(teacher)
    stages = _Stages(output_dir)
    distilled = stages.run(
        "distilled",
        {
            "teacher": model_digest(teacher),
            "data": asdict(data),
            "decoding": recipe.teacher_decoding.settings(),
            "keep_original": recipe.keep_original,
        },
        lambda path: distill_dataset(
            data,
            path,
            Teachers([teacher], keep_original=recipe.keep_original),
            runtime,
            SavedTranslations(output_dir / "translations"),
            options=recipe.teacher_decoding,
        ),
    )
    config = load_training_config(
        recipe.config_file,
        **{
            **recipe.training_overrides,
            "dataset": str(distilled),
            "source_lang": data.source_lang,
            "target_lang": data.target_lang,
            "tokenizer": str(teacher),
            "model_overrides": recipe.shape.model_overrides(teacher),
            "output_dir": str(output_dir / "run"),
        },
    )
    run = stages.run(
        "run",
        {"distilled": stages.key("distilled"), "config": asdict(config)},
        lambda path: train(config, resume=path.is_dir()),
        remove_partial=False,  # a stopped run resumes
    )
    splits = split_names(data.dataset, data.config_name)
    reports = tuple(split for split in recipe.report_splits if split in splits)
    penalties = tuple(sorted({config.length_penalty, *SELECTION_LENGTH_PENALTIES}))
    grid = SelectionGrid((config.num_beams,), penalties, report_splits=reports)
    selection_dir = stages.run(
        "selection",
        {"run": stages.key("run"), "grid": asdict(grid), "data": asdict(data)},
        lambda path: select_on_validation([run], data, path, grid, runtime),
    )
    chosen = Path(json.loads((selection_dir / "selection.json").read_text())["chosen"]["model"])
    student_dir = stages.run(
        STUDENT_DIR,
        {"chosen": model_digest(chosen), "shortlist": asdict(recipe.shortlist)},
        lambda path: _save_student(chosen, path, teacher, data, recipe),
    )
    return json.loads((student_dir / STUDENT_FILE).read_text())


def _save_student(
    chosen: Path, student_dir: Path, teacher: Path, data: TranslationData, recipe: StudentRecipe
) -> None:
    """The chosen checkpoint copied into `student_dir`, with the shortlist of `data`'s training pairs in the
    student's vocabulary (the teacher's), `student.json` and the departures in its card."""
    shutil.copytree(chosen, student_dir)
    pairs = data.pairs("train")
    tokenized = tokenized_pairs(load_tokenizer(student_dir), pairs["source"], pairs["target"])
    save_shortlist(build_shortlist(*tokenized, recipe.shortlist), student_dir / VOCAB_MAP_FILE)
    record = {
        "departure": DEPARTURE,
        "teacher": str(teacher),
        "teacher_digest": model_digest(teacher),
        "chosen_checkpoint": str(chosen),
        "shape": asdict(recipe.shape),
        "shortlist": {"file": VOCAB_MAP_FILE, **asdict(recipe.shortlist)},
        "teacher_decoding": recipe.teacher_decoding.settings(),
        "keep_original": recipe.keep_original,
        "training_pairs": len(pairs),
    }
    write_json(student_dir / STUDENT_FILE, record)
    departures = f"{DEPARTURE[0].upper()}{DEPARTURE[1:]}; {STUDENT_FILE} says how it was made."
    record_departures(student_dir, departures)


class _Stages:
    """The stages of a work directory: each an output path named after it, made once from inputs whose digest
    `stages.json` records; an output there from other inputs is refused, not overwritten."""

    def __init__(self, output_dir: Path):
        self.output_dir = output_dir
        self.file = output_dir / STAGES_FILE
        self.made = json.loads(self.file.read_text()) if self.file.is_file() else {}

    def key(self, name: str) -> str:
        return self.made[name]

    def run(
        self, name: str, inputs: Mapping[str, Any], make: Callable[[Path], Any], remove_partial: bool = True
    ) -> Path:
        """The output of stage `name`, made by `make(path)` unless made before from the same `inputs`."""
        path, key = self.output_dir / name, _digest(inputs)
        if self.made.get(name) == key and path.exists():
            logger.info("student: %s is made already (%s)", name, path)
            return path
        if name in self.made and path.exists():
            raise ValueError(
                f"{path} was made from other inputs: remove it (and what follows) or use another --output-dir"
            )
        if path.exists() and remove_partial:
            shutil.rmtree(path)  # a stage stopped before it was recorded
        logger.info("student: making %s", path)
        make(path)
        self.made[name] = key
        self.output_dir.mkdir(parents=True, exist_ok=True)
        write_json(self.file, self.made)
        return path


def _digest(inputs: Mapping[str, Any]) -> str:
    return hashlib.sha256(json.dumps(inputs, sort_keys=True, default=str).encode()).hexdigest()
