"""A target-language model for reranking: log p(translation), the prior beside the channel model in
noisy-channel reranking (Yee et al., 2019; `hf_vanilla.research.reranking`). Not part of the paper's model,
and used only where asked for (`--rerank-language-model`).

It is transformers' own GPT-2 (a decoder-only Transformer), small, over the translation models' joint BPE
vocabulary and trained with transformers' `Trainer` on the target side of the training pairs: the sentences
the translations should read like. A sentence is read as <s> tokens... </s>.
"""

from __future__ import annotations

import math
import os
import tempfile
import time
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import datasets
import torch
from transformers import (
    AutoModelForCausalLM,
    DataCollatorForLanguageModeling,
    GPT2Config,
    GPT2LMHeadModel,
    PreTrainedModel,
    PreTrainedTokenizerBase,
    Trainer,
    TrainingArguments,
)

from hf_vanilla.checkpoints.loading import load_models
from hf_vanilla.data.batches import TokenBatchSampler
from hf_vanilla.files import atomic_directory, write_json
from hf_vanilla.precision import cpu_description, resolve_device, resolve_precision

IGNORED = -100  # the label of a padding position
# multi30k-best's width and depth, and its dropout after the switch (Multi30k's 29,000 target sentences are
# few).
LANGUAGE_MODEL_SHAPE = {
    "n_embd": 256,
    "n_layer": 3,
    "n_head": 4,
    "n_positions": 256,
    "resid_pdrop": 0.3,
    "embd_pdrop": 0.3,
    "attn_pdrop": 0.1,
}
RECORD_FILE = "language_model.json"


def language_model_config(tokenizer: PreTrainedTokenizerBase, **shape: Any) -> GPT2Config:
    """A GPT-2 config over `tokenizer`'s vocabulary and special tokens, LANGUAGE_MODEL_SHAPE unless `shape`
    says otherwise."""
    return GPT2Config(
        vocab_size=len(tokenizer),
        bos_token_id=tokenizer.bos_token_id,
        eos_token_id=tokenizer.eos_token_id,
        pad_token_id=tokenizer.pad_token_id,
        **{**LANGUAGE_MODEL_SHAPE, **shape},
    )


def _sentence_ids(tokenizer: PreTrainedTokenizerBase, texts: Sequence[str], limit: int) -> list[list[int]]:
    """Each text as <s> its tokens </s>, cut to `limit` tokens."""
    if tokenizer.bos_token_id is None or tokenizer.eos_token_id is None:
        raise ValueError("the language model's tokenizer needs a start (bos) and an end (eos) token")
    encoded = tokenizer(list(texts), add_special_tokens=False, verbose=False)["input_ids"] if texts else []
    return [[tokenizer.bos_token_id, *ids, tokenizer.eos_token_id][:limit] for ids in encoded]


@dataclass(frozen=True)
class LanguageModelTraining:
    """How a language model trains: `epochs` with transformers' `Trainer` (AdamW, `lr` after `warmup` linear
    steps, then constant), `batch_size` sentences an update, `seed` for the initialisation and the data order,
    `precision` ("auto", "no", "bf16", "fp16") on `device` (None or "auto": the GPU if present)."""

    epochs: int = 3
    batch_size: int = 64
    lr: float = 1e-3
    warmup: int = 400
    seed: int = 1
    precision: str = "auto"
    device: str | None = None
    show_progress: bool = True


def _training_arguments(
    settings: LanguageModelTraining, output_dir: str, mixed_precision: str, evaluate: bool
) -> TrainingArguments:
    """`Trainer`'s arguments for `settings`, evaluating after each epoch where `evaluate`, saving nothing
    itself."""
    return TrainingArguments(
        output_dir=output_dir,
        num_train_epochs=settings.epochs,
        per_device_train_batch_size=settings.batch_size,
        per_device_eval_batch_size=settings.batch_size,
        learning_rate=settings.lr,
        warmup_steps=settings.warmup,
        lr_scheduler_type="constant_with_warmup",
        weight_decay=0.01,
        eval_strategy="epoch" if evaluate else "no",
        save_strategy="no",
        logging_strategy="epoch",
        report_to="none",
        seed=settings.seed,
        bf16=mixed_precision == "bf16",
        fp16=mixed_precision == "fp16",
        use_cpu=resolve_device(settings.device).type == "cpu",
        disable_tqdm=not settings.show_progress,
    )


def train_language_model(
    texts: Sequence[str],
    tokenizer: PreTrainedTokenizerBase,
    output_dir: str | os.PathLike,
    validation_texts: Sequence[str] = (),
    settings: LanguageModelTraining = LanguageModelTraining(),
    **shape: Any,
) -> dict[str, Any]:
    """A language model of `texts` (sentences of one language), trained as `settings` say and saved with its
    tokenizer and a record (RECORD_FILE: settings, validation perplexity after each epoch, seconds, machine)
    into `output_dir`, which appears only once whole. `shape`: GPT-2 config fields over LANGUAGE_MODEL_SHAPE.
    Returns the record."""
    texts = [text for text in texts if text.strip()]
    if not texts:
        raise ValueError("a language model needs training sentences; none was given")
    use_cpu = resolve_device(settings.device).type == "cpu"
    chosen = resolve_precision(settings.precision, "cpu" if use_cpu else "cuda")
    config = language_model_config(tokenizer, **shape)
    ids = {
        "train": _sentence_ids(tokenizer, texts, config.n_positions),
        "validation": _sentence_ids(
            tokenizer, [text for text in validation_texts if text.strip()], config.n_positions
        ),
    }
    splits = {name: datasets.Dataset.from_dict({"input_ids": rows}) for name, rows in ids.items() if rows}
    torch.manual_seed(settings.seed)  # the weights' initialisation; Trainer seeds the data order
    model = GPT2LMHeadModel(config)
    started = time.perf_counter()
    with tempfile.TemporaryDirectory() as scratch, atomic_directory(output_dir) as staging:
        trainer = Trainer(
            model=model,
            args=_training_arguments(settings, scratch, chosen.mixed_precision, "validation" in splits),
            train_dataset=splits["train"],
            eval_dataset=splits.get("validation"),
            data_collator=DataCollatorForLanguageModeling(tokenizer, mlm=False),
        )
        trainer.train()
        record = {
            "shape": {**LANGUAGE_MODEL_SHAPE, **shape},
            "parameters": sum(parameter.numel() for parameter in model.parameters()),
            "training_sentences": len(ids["train"]),
            "epochs": settings.epochs,
            "updates": trainer.state.global_step,
            "batch_size": settings.batch_size,
            "lr": settings.lr,
            "warmup": settings.warmup,
            "seed": settings.seed,
            "precision": chosen.dtype_name,
            "validation": [
                {"epoch": round(entry["epoch"]), "validation_perplexity": math.exp(entry["eval_loss"])}
                for entry in trainer.state.log_history
                if "eval_loss" in entry
            ],
            "seconds": round(time.perf_counter() - started, 1),
            "machine": cpu_description() if use_cpu else {"gpu": torch.cuda.get_device_name()},
        }
        model.save_pretrained(staging)
        tokenizer.save_pretrained(staging)
        write_json(staging / RECORD_FILE, record)
    return record


def load_language_models(
    model_names_or_paths: Sequence[str | os.PathLike], device: str | None = None, dtype: str = "float32"
) -> list[tuple[PreTrainedModel, PreTrainedTokenizerBase]]:
    """Saved causal language models with their tokenizers, in eval mode on `device` in `dtype`, each loaded
    and checked as `hf_vanilla.checkpoints.loading.load_models` loads one; one that does not load is a
    FileNotFoundError or ValueError naming it."""
    return load_models(
        model_names_or_paths, device, dtype, role="language model", model_class=AutoModelForCausalLM
    )


def mean_label_log_probs(logits: torch.Tensor, labels: torch.Tensor) -> list[float]:
    """Each row's mean log-probability of its labels under `logits` (rows, positions, vocabulary), the
    positions labelled IGNORED left out: a model's per-token log-likelihood of each text it was given."""
    real = labels != IGNORED
    log_probs = torch.log_softmax(logits.float(), dim=-1)
    token_log_probs = log_probs.gather(-1, labels.clamp(min=0).unsqueeze(-1)).squeeze(-1)
    return ((token_log_probs * real).sum(-1) / real.sum(-1)).tolist()


def sentence_log_probs(
    model: PreTrainedModel, tokenizer: PreTrainedTokenizerBase, texts: Sequence[str], max_tokens: int
) -> list[float]:
    """log p(text) per token (its end token included, its start token given) under the causal language
    `model`; one float per text. Batched so that rows * longest text <= `max_tokens`, padded as training
    pads."""
    ids = _sentence_ids(tokenizer, texts, model.config.max_position_embeddings)
    collate = DataCollatorForLanguageModeling(tokenizer, mlm=False)
    scores = [0.0] * len(ids)
    with torch.inference_mode():
        for batch in TokenBatchSampler([len(row) for row in ids], max_tokens, shuffle=False):
            padded = collate([{"input_ids": ids[row]} for row in batch]).to(model.device)
            logits = model(input_ids=padded["input_ids"], attention_mask=padded["attention_mask"]).logits
            # position t predicts token t + 1
            for row, score in zip(
                batch, mean_label_log_probs(logits[:, :-1], padded["labels"][:, 1:]), strict=True
            ):
                scores[row] = score
    return scores
