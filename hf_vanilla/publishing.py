"""A saved model directory that works alone: loaded, run and published without this package installed.

`save_pretrained` alone copies the modeling code and maps one Auto class. A checkpoint written with
`save_model_directory` also maps `AutoModel`, registers the `vanilla-translation` pipeline in its config (as
transformers' `Pipeline.save_pretrained` does; the model's `save_pretrained` then copies the pipeline's code, here
and wherever transformers saves the model again), and holds a README.md model card with Hub metadata, so that
`push_to_hub` of the directory publishes a usable model.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import torch
from huggingface_hub import EvalResult, ModelCard, ModelCardData
from transformers import PreTrainedModel, PreTrainedTokenizerBase

from hf_vanilla.corpus import TRAIN_SPLIT, parse_dataset
from hf_vanilla.model.configuration_vanilla import VanillaTransformerConfig
from hf_vanilla.model.hub import CARD_FILE
from hf_vanilla.model.modeling_vanilla import (
    VanillaTransformerForConditionalGeneration,
    VanillaTransformerModel,
)
from hf_vanilla.model.pipeline import TASK, VanillaTranslationPipeline


def _code_reference(cls: type) -> str:
    """How a saved config names a class of the code copied beside it: "module.Class"."""
    return f"{cls.__module__.rsplit('.', 1)[-1]}.{cls.__name__}"


AUTO_MAP = {
    "AutoConfig": _code_reference(VanillaTransformerConfig),
    "AutoModel": _code_reference(VanillaTransformerModel),
    "AutoModelForSeq2SeqLM": _code_reference(VanillaTransformerForConditionalGeneration),
}


def custom_pipeline_entry() -> dict:
    """The `custom_pipelines` entry of config.json, as `Pipeline.save_pretrained` writes it."""
    registered = dict(VanillaTranslationPipeline._registered_impl[TASK])
    registered["impl"] = _code_reference(VanillaTranslationPipeline)
    registered["pt"] = tuple(model_class.__name__ for model_class in registered["pt"])
    return {TASK: registered}


def save_model_directory(
    model: PreTrainedModel,
    tokenizer: PreTrainedTokenizerBase,
    directory: str | os.PathLike,
    card: ModelCard,
    state_dict: dict[str, torch.Tensor] | None = None,
) -> Path:
    """`save_pretrained` of model (with the pipeline's code) and tokenizer into `directory`, and the model card."""
    directory = Path(directory)
    model.config.auto_map = dict(AUTO_MAP)
    model.config.custom_pipelines = custom_pipeline_entry()
    model.save_pretrained(directory, state_dict=state_dict)
    tokenizer.save_pretrained(directory)
    card.save(directory / CARD_FILE)
    return directory


def is_local_dataset(dataset: str) -> bool:
    """Whether training read `dataset` from this machine (a folder or files) rather than from the Hub."""
    base, files = parse_dataset(dataset)
    return bool(files) or base is None or Path(base).exists()


def dataset_name(dataset: str) -> str:
    """The data's own name: a Hub id's last part, a local copy's folder name, or the training file's name."""
    base, files = parse_dataset(dataset)
    if base is None:
        return Path(files.get(TRAIN_SPLIT, next(iter(files.values()))).path).name
    return (Path(base).resolve() if Path(base).exists() else Path(base)).name


def dataset_label(dataset: str) -> str:
    """How a card names the training data: a Hub id as given, a local copy by its folder's or file's name only (a
    card is published; the training machine's paths are nobody's business)."""
    return f"a local copy of {dataset_name(dataset)}" if is_local_dataset(dataset) else dataset


PAPER = "https://arxiv.org/abs/1706.03762"
CITATION = r"""@inproceedings{vaswani2017attention,
  title     = {Attention Is All You Need},
  author    = {Vaswani, Ashish and Shazeer, Noam and Parmar, Niki and Uszkoreit, Jakob and Jones, Llion and
               Gomez, Aidan N. and Kaiser, {\L}ukasz and Polosukhin, Illia},
  booktitle = {Advances in Neural Information Processing Systems},
  year      = {2017}
}"""
MULTI30K_CITATION = """@inproceedings{elliott2016multi30k,
  title     = {Multi30K: Multilingual English-German Image Descriptions},
  author    = {Elliott, Desmond and Frank, Stella and Sima'an, Khalil and Specia, Lucia},
  booktitle = {Proceedings of the 5th Workshop on Vision and Language},
  year      = {2016}
}"""
EVALUATION_HEADING = "## Evaluation"
TOKENIZED_BLEUS = ("tokenized_lowercased", "bleu_paper")  # report keys of the BLEUs on Moses tokens


def _results(dataset: str, name: str, split: str, scores) -> list[EvalResult]:
    """Model-index rows of `dataset`'s `split` (named `name` in the card): one for each (metric type, metric name,
    value, sacreBLEU signature or None) of `scores`."""
    return [
        EvalResult(
            task_type="translation",
            dataset_type="local" if is_local_dataset(dataset) else dataset,
            dataset_name=name,
            dataset_split=split,
            metric_type=metric,
            metric_name=metric_name,
            metric_value=value,
            metric_config=signature,
        )
        for metric, metric_name, value, signature in scores
    ]


def _validation_results(dataset: str, validation, validation_sentences) -> list[EvalResult]:
    """A checkpoint's validation scores during training (greedy decoding) as model-index rows."""
    scores = [
        (metric, name, round(validation[key], 4), None)
        for key, metric, name in (
            ("val_bleu", "bleu", "sacreBLEU, greedy"),
            ("val_loss", "loss", "label-smoothed cross-entropy per target token"),
        )
        if key in (validation or {})
    ]
    name = f"{dataset_name(dataset)} validation ({validation_sentences or 'all'} sentences)"
    return _results(dataset, name, "validation", scores)


def _card_metadata(source_lang, target_lang, dataset, results: list[EvalResult]) -> ModelCardData:
    """The card's YAML block, as Hub model cards carry it: languages, license, task, dataset, model-index."""
    return ModelCardData(
        language=[source_lang, target_lang],
        license="apache-2.0",
        library_name="transformers",
        pipeline_tag="translation",
        tags=["translation", "hf_vanilla", "vanilla-transformer"],
        datasets=None if is_local_dataset(dataset) else [dataset],
        metrics=["bleu", "chrf"],
        model_name=f"hf_vanilla-{source_lang}-{target_lang}",
        eval_results=results or None,
    )


def evaluation_section(results: list[EvalResult] | None) -> str:
    """The card's results table, one row a score, with sacreBLEU's signature where it has one."""
    if not results:
        return f"{EVALUATION_HEADING}\n\nNot evaluated yet: `scripts/select_checkpoint.py` records test scores here.\n"
    rows = "\n".join(
        f"| {result.dataset_name} | {result.metric_name} | {result.metric_value} | "
        f"{(result.metric_config or '').replace('|', chr(92) + '|')} |"  # a signature's bars escaped for the table
        for result in results
    )
    return f"{EVALUATION_HEADING}\n\n| data | metric | score | sacreBLEU signature |\n|---|---|---|---|\n{rows}\n"


CARD_TEMPLATE = """---
{metadata}
---

# {name}

The Transformer of ["Attention Is All You Need"]({paper}) (Vaswani et al., 2017), trained with hf_vanilla to
translate {source_lang} -> {target_lang} on {data}. {summary}

## Model details

- Architecture: the paper's encoder-decoder (post-LayerNorm, sinusoidal positions, ReLU feed-forward, one
  embedding matrix shared by encoder input, decoder input and output projection); d_model {d_model},
  d_ff {d_ff}, {heads} heads, {encoder_layers}+{decoder_layers} layers, a joint BPE vocabulary of {vocab_size} tokens.
- Decoding defaults (generation_config.json): beam 4, length penalty 0.6, at most source length + 50 tokens.
- License: Apache-2.0.

## Intended uses and limitations

Translation of single sentences {source_lang} -> {target_lang} in the domain of its training data, and research on
the paper's model. {domain} It inherits the data's biases and has no safety filtering; do not use its output
unchecked where errors matter.

## How to use

The directory carries its code; transformers runs it with `trust_remote_code=True` (model and tokenizer).

```python
from transformers import AutoModelForSeq2SeqLM, AutoTokenizer, pipeline

translator = pipeline("{task}", model="PATH_OR_HUB_ID", trust_remote_code=True)
translator(["..."])  # [{{"translation_text": "..."}}]

tokenizer = AutoTokenizer.from_pretrained("PATH_OR_HUB_ID", trust_remote_code=True)
model = AutoModelForSeq2SeqLM.from_pretrained("PATH_OR_HUB_ID", trust_remote_code=True)
```

## Training data

{data}, {source_lang} -> {target_lang}, cleaned and tokenized with the checkpoint's joint BPE.

## Training procedure

The paper's recipe (section 5): Adam (0.9, 0.98, 1e-9) with warm-up and inverse square root decay, label
smoothing 0.1, dropout on sublayer outputs and embeddings.
{training}
{evaluation}
## Citation

{citations}"""
MULTI30K_DOMAIN = (
    "Trained on image descriptions (Multi30k): short, literal sentences; expect poor output on news, dialogue or "
    "long documents."
)


def model_card(
    config: VanillaTransformerConfig,
    source_lang: str,
    target_lang: str,
    dataset: str,
    summary: str,
    validation: dict[str, float] | None = None,
    validation_sentences: int | None = None,
    training: Mapping[str, Any] | None = None,
) -> ModelCard:
    """A checkpoint's model card (`CARD_TEMPLATE`, the Hub's conventions): metadata with model-index, model details,
    intended use and limitations, how to use, training data and procedure (`training`: setting name -> value),
    evaluation (validation scores while training; test scores once `record_results` adds them), citation."""
    data = _card_metadata(
        source_lang, target_lang, dataset, _validation_results(dataset, validation, validation_sentences)
    )
    multi30k = "multi30k" in dataset_name(dataset).lower()
    citations = [CITATION, MULTI30K_CITATION] if multi30k else [CITATION]
    return ModelCard(
        CARD_TEMPLATE.format(
            metadata=data.to_yaml(),
            name=data.model_name,
            paper=PAPER,
            source_lang=source_lang,
            target_lang=target_lang,
            data=dataset_label(dataset),
            summary=summary,
            d_model=config.d_model,
            d_ff=config.d_ff,
            heads=config.num_attention_heads,
            encoder_layers=config.encoder_layers,
            decoder_layers=config.decoder_layers,
            vocab_size=config.vocab_size,
            domain=MULTI30K_DOMAIN if multi30k else "Trained on the data named above only.",
            task=TASK,
            training="".join(f"- {name}: {value}\n" for name, value in (training or {}).items()),
            evaluation=evaluation_section(data.eval_results),
            citations="\n".join(f"```bibtex\n{citation}\n```\n" for citation in citations),
        )
    )


def record_results(directory: str | os.PathLike, dataset: str, split: str, report: Mapping[str, Any]) -> ModelCard:
    """Write a split's scores (an evaluation report) into the card of the checkpoint in `directory`: model-index
    rows and the Evaluation table, replacing that split's earlier rows, so a pushed model shows them."""
    card_path = Path(directory) / CARD_FILE
    card = ModelCard.load(card_path)
    decoding = report.get("generation", {})
    setting = ", ".join(f"{key} {value}" for key, value in decoding.items() if key in ("num_beams", "length_penalty"))
    name = f"{dataset_name(dataset)} {split} ({report.get('sentences', 'all')} sentences; {setting or 'greedy'})"
    scores = [
        ("bleu", "sacreBLEU", report["cased"]["bleu"], report["cased"].get("bleu_signature")),
        ("bleu", "sacreBLEU, lowercased", report["lowercased"]["bleu"], report["lowercased"].get("bleu_signature")),
        ("chrf", "chrF", report["cased"]["chrf"], report["cased"].get("chrf_signature")),
    ]
    scores += [  # the tokenized BLEUs printed beside sacreBLEU, where the report has them
        ("bleu", report[key].get("name", key.replace("_", " ")), report[key]["bleu"], report[key].get("bleu_signature"))
        for key in TOKENIZED_BLEUS
        if key in report
    ]
    kept = [result for result in card.data.eval_results or [] if result.dataset_split != split]
    card.data.eval_results = kept + _results(
        dataset, name, split, [(metric, label, round(value, 2), signature) for metric, label, value, signature in scores]
    )
    head, _, rest = card.text.partition(EVALUATION_HEADING)
    tail = rest[rest.find("\n## ") :] if "\n## " in rest else "\n"
    card.text = head + evaluation_section(card.data.eval_results) + tail
    card.save(card_path)
    return card
