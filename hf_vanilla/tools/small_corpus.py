"""The small-corpus sweep: the corpus-size recipe against the fixed recipe and a MarianMT baseline.

Each run trains on a seeded subset of Multi30k's training pairs (the same pairs for every run and language
pair), on one core for the same minutes, and is scored on the whole test2016 split (beam 4, length penalty
0.6; cased sacreBLEU and chrF). The three recipes:
- `size table`: every key the corpus-size table fills left auto (hf_vanilla/training/recipes.py);
- `fixed`: the one recipe configs/your-pair.yaml gave every corpus before the table (the 30-minute Multi30k
  one);
- `marian`: transformers' MarianMTModel of the small shape, trained with Seq2SeqTrainer on the size-table
  run's BPE, as a transformers user would (bf16 where our runs' mixed_precision auto picks it).
Validation during training reads the first 300 pairs of the full validation split, as configs/your-pair.yaml
does.
"""

from __future__ import annotations

import json
import logging
import random
import shutil
import time
from dataclasses import dataclass
from pathlib import Path

import torch

from hf_vanilla.checkpoints.loading import load_tokenizer
from hf_vanilla.data.corpus import load_translation_split
from hf_vanilla.evaluation.scoring import TEST_SPLIT, score_model
from hf_vanilla.files import write_json
from hf_vanilla.precision import auto_precision, cpu_description
from hf_vanilla.training.recipes import AUTO, RECIPE_KEYS
from hf_vanilla.training.run_directory import AVERAGE, BEST, CONFIG_FILE, LAST, PROGRESS_FILE, TRAINING_STATE
from hf_vanilla.training.settings import load_training_config
from hf_vanilla.training.train import train

logger = logging.getLogger(__name__)

SIZES = (5_000, 10_000)
LANGUAGE_PAIRS = ("de-en", "en-cs")
BEAM = {"num_beams": 4, "length_penalty": 0.6}
RECIPES = ("size table", "fixed", "marian")

# configs/your-pair.yaml's recipe before the corpus-size table; the keys it leaves out keep the paper's
# defaults.
FIXED_RECIPE = {
    "tokenizer_vocab_size": 5000,
    "model_preset": "small",
    "early_dropout_updates": 2000,
    "early_dropout": 0.1,
    "dropout": 0.2,
    "label_smoothing": 0.1,
    "max_tokens": 2048,
    "lr": 1e-3,
    "warmup": 400,
}
# The MarianMT peer: the small preset's shape with Seq2SeqTrainer's usual settings, as the same-budget peer of
# docs/results.md is trained.
MARIAN_SHAPE = {"d_model": 256, "layers": 3, "heads": 4, "ffn": 1024}
MARIAN_TRAINING = {"per_device_train_batch_size": 128, "learning_rate": 1e-3, "warmup_steps": 1000}


@dataclass(frozen=True)
class Sweep:
    """What to run: Multi30k's folder (Hub translation layout), where runs go, and the sizes, pairs, minutes
    and recipes."""

    multi30k: Path
    work_dir: Path
    minutes: float = 20.0
    sizes: tuple[int, ...] = SIZES
    language_pairs: tuple[str, ...] = LANGUAGE_PAIRS
    seed: int = 1
    recipes: tuple[str, ...] = RECIPES


def run_sweep(sweep: Sweep, output: Path) -> dict:
    """Train and score every (size, language pair, recipe) of `sweep` on one core; write the rows, the machine
    and the settings to `output` (JSON) after each run, so that a stopped sweep keeps what it measured."""
    torch.set_num_threads(1)
    report = {
        "what": __doc__.split("\n\n")[0],
        "machine": cpu_description(),
        "torch": torch.__version__,
        "minutes": sweep.minutes,
        "seed": sweep.seed,
        "test": "Multi30k test2016 (1,000 sentences), cased sacreBLEU and chrF",
        "decoding": BEAM,
        "rows": [],
    }
    for size in sweep.sizes:
        data = seeded_subset(sweep.multi30k, size, sweep.seed, sweep.work_dir / f"multi30k-{size}")
        for language_pair in sweep.language_pairs:
            source, target = language_pair.split("-")
            test_pairs = load_translation_split(str(data), source, target, TEST_SPLIT)
            for recipe in sweep.recipes:
                run_dir = sweep.work_dir / f"{language_pair}-{size}-{recipe.replace(' ', '-')}"
                started = time.monotonic()
                model_dir, facts = _train(recipe, sweep, data, source, target, run_dir)
                (scores,) = score_model(model_dir, test_pairs, (BEAM,), target_lang=target)
                report["rows"].append(
                    {
                        "pairs": size,
                        "language_pair": language_pair,
                        "recipe": recipe,
                        "bleu": round(scores["bleu"], 2),
                        "chrf": round(scores["chrf"], 2),
                        "model": model_dir.name,
                        "minutes_with_scoring": round((time.monotonic() - started) / 60, 1),
                        **facts,
                        "signature": scores["signature"],
                    }
                )
                write_json(output, report)
                logger.info("%s", report["rows"][-1])
    return report


def seeded_subset(multi30k: Path, size: int, seed: int, folder: Path) -> Path:
    """`folder` in the Hub translation layout: `size` training pairs drawn by `seed` (the same pairs whatever
    the language pair), and Multi30k's whole validation and test splits."""
    lines = (multi30k / "train.jsonl").read_text(encoding="utf-8").splitlines(keepends=True)
    if size > len(lines):
        raise ValueError(f"{multi30k} holds {len(lines):,} training pairs, fewer than {size:,}")
    chosen = sorted(random.Random(seed).sample(range(len(lines)), size))
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "train.jsonl").write_text("".join(lines[index] for index in chosen), encoding="utf-8")
    for split in ("validation", TEST_SPLIT):
        shutil.copyfile(multi30k / f"{split}.jsonl", folder / f"{split}.jsonl")
    return folder


def _train(
    recipe: str, sweep: Sweep, data: Path, source: str, target: str, run_dir: Path
) -> tuple[Path, dict]:
    """Train `recipe` into `run_dir`: (the model directory to score, facts of the run for the report)."""
    size_table_bpe = sweep.work_dir / f"bpe-{data.name}-{source}-{target}-size-table"
    if recipe == "marian":
        if not size_table_bpe.is_dir():
            raise ValueError(
                f"the MarianMT baseline trains on the size table run's BPE, and {size_table_bpe} is not "
                "there yet: run the size table recipe first (--recipes 'size table' marian)"
            )
        return train_marian(size_table_bpe, data, (source, target), sweep.minutes, run_dir)
    keys = {key: AUTO for key in RECIPE_KEYS} if recipe == "size table" else FIXED_RECIPE
    tokenizer = (
        size_table_bpe if recipe == "size table" else sweep.work_dir / f"bpe-{data.name}-{source}-{target}-5k"
    )
    config = load_training_config(
        dataset=str(data),
        source_lang=source,
        target_lang=target,
        tokenizer=str(tokenizer),
        output_dir=str(run_dir),
        max_minutes=sweep.minutes,
        save_interval_minutes=sweep.minutes / 10,
        average_last=5,
        validation_max_sentences=300,
        tensorboard=False,
        seed=sweep.seed,
        **keys,
    )
    train(config, overwrite_output_dir=True)
    model_dir = next(run_dir / name for name in (AVERAGE, BEST, LAST) if (run_dir / name).is_dir())
    progress = json.loads((run_dir / LAST / TRAINING_STATE / PROGRESS_FILE).read_text())
    saved = load_training_config(run_dir / CONFIG_FILE)
    facts = {
        "updates": progress["step"],
        "stopped": progress["stop_reason"],
        "corpus_recipe": saved.corpus_recipe,
    }
    return model_dir, facts


def train_marian(
    tokenizer_dir: Path, data: Path, languages: tuple[str, str], minutes: float, output_dir: Path
):
    """transformers' MarianMTModel (post-LN, ReLU, sinusoidal positions, one shared embedding) of the small
    shape, trained by Seq2SeqTrainer on `tokenizer_dir`'s BPE for `minutes` of wall clock: (its directory,
    facts)."""
    from transformers import DataCollatorForSeq2Seq, Seq2SeqTrainer, TrainerCallback

    source, target = languages
    tokenizer = load_tokenizer(tokenizer_dir)
    pairs = load_translation_split(str(data), source, target, "train")
    encoded = pairs.map(
        lambda batch: tokenizer(
            batch["source"], text_target=batch["target"], truncation=True, max_length=128
        ),
        batched=True,
        remove_columns=pairs.column_names,
    )
    model = _small_marian(tokenizer)

    class WallClock(TrainerCallback):
        """Stop after `minutes`, as our runs stop at max_minutes."""

        def on_train_begin(self, args, state, control, **kwargs):
            self.started = time.monotonic()

        def on_step_end(self, args, state, control, **kwargs):
            control.should_training_stop = time.monotonic() - self.started > 60 * minutes

    trainer = Seq2SeqTrainer(
        model=model,
        args=_marian_training_arguments(output_dir),
        train_dataset=encoded,
        data_collator=DataCollatorForSeq2Seq(tokenizer, model=model),
        callbacks=[WallClock()],
    )
    result = trainer.train()
    model.save_pretrained(output_dir)
    tokenizer.save_pretrained(output_dir)
    return output_dir, {"updates": result.global_step, "stopped": f"time budget ({minutes:g} min)"}


def _small_marian(tokenizer):
    """A MarianMTModel of `MARIAN_SHAPE` on `tokenizer`'s vocabulary, its embeddings shared and tied."""
    from transformers import MarianConfig, MarianMTModel

    vocabulary = len(tokenizer)
    config = MarianConfig(
        vocab_size=vocabulary,
        decoder_vocab_size=vocabulary,
        d_model=MARIAN_SHAPE["d_model"],
        encoder_layers=MARIAN_SHAPE["layers"],
        decoder_layers=MARIAN_SHAPE["layers"],
        encoder_attention_heads=MARIAN_SHAPE["heads"],
        decoder_attention_heads=MARIAN_SHAPE["heads"],
        encoder_ffn_dim=MARIAN_SHAPE["ffn"],
        decoder_ffn_dim=MARIAN_SHAPE["ffn"],
        activation_function="relu",
        dropout=0.1,
        scale_embedding=True,
        share_encoder_decoder_embeddings=True,
        tie_word_embeddings=True,
        max_position_embeddings=256,
        pad_token_id=tokenizer.pad_token_id,
        eos_token_id=tokenizer.eos_token_id,
        decoder_start_token_id=tokenizer.pad_token_id,
        forced_eos_token_id=tokenizer.eos_token_id,
    )
    return MarianMTModel(config)


def _marian_training_arguments(output_dir: Path):
    """Seq2SeqTrainer's settings for the baseline: the paper's Adam, inverse square root schedule and label
    smoothing on CPU, `MARIAN_TRAINING`'s batch and rate, nothing saved on the way."""
    from transformers import Seq2SeqTrainingArguments

    return Seq2SeqTrainingArguments(
        output_dir=str(output_dir / "trainer"),
        adam_beta1=0.9,
        adam_beta2=0.98,
        adam_epsilon=1e-9,
        lr_scheduler_type="inverse_sqrt",
        label_smoothing_factor=0.1,
        num_train_epochs=1000,
        use_cpu=True,
        bf16=auto_precision("cpu").mixed_precision == "bf16",  # as our runs' mixed_precision auto chooses
        save_strategy="no",
        report_to=[],
        train_sampling_strategy="group_by_length",
        seed=0,
        dataloader_num_workers=0,
        **MARIAN_TRAINING,
    )
