"""A saved model directory that works alone: loaded, run and published without this package installed.

`save_pretrained` alone copies the modeling code and maps one Auto class. A checkpoint written with
`save_model_directory` also maps `AutoModel`, registers the `vanilla-translation` pipeline in its config (as
transformers' `Pipeline.save_pretrained` does; the model's `save_pretrained` then copies the pipeline's code, here
and wherever transformers saves the model again), and holds a README.md model card with Hub metadata, so that
`push_to_hub` of the directory publishes a usable model.
"""

from __future__ import annotations

import os
from pathlib import Path

import torch
from huggingface_hub import EvalResult, ModelCard, ModelCardData
from transformers import PreTrainedModel, PreTrainedTokenizerBase

from hf_vanilla.model.configuration_vanilla import VanillaTransformerConfig
from hf_vanilla.model.modeling_vanilla import (
    CARD_FILE,
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
    """Whether training read `dataset` from a directory of this machine rather than the Hub."""
    return Path(dataset).exists()


def dataset_name(dataset: str) -> str:
    """The data's own name: a Hub id's last part, a local copy's folder name."""
    return (Path(dataset).resolve() if is_local_dataset(dataset) else Path(dataset)).name


def dataset_label(dataset: str) -> str:
    """How a card names the training data: a Hub id as given, a local copy by its folder's name only (a card is
    published; the training machine's paths are nobody's business)."""
    return f"a local copy of {dataset_name(dataset)}" if is_local_dataset(dataset) else dataset


def _card_metadata(source_lang, target_lang, dataset, validation, validation_sentences) -> ModelCardData:
    """The card's YAML block: languages, license, task, dataset (a Hub one), validation scores as model-index."""
    public_dataset = not is_local_dataset(dataset)
    results = [
        EvalResult(
            task_type="translation",
            dataset_type=dataset if public_dataset else "local",
            dataset_name=f"{dataset_name(dataset)} validation ({validation_sentences or 'all'} sentences)",
            dataset_split="validation",
            metric_type=metric,
            metric_name=name,
            metric_value=round(validation[key], 4),
        )
        for key, metric, name in (
            ("val_bleu", "bleu", "sacreBLEU, greedy"),
            ("val_loss", "loss", "label-smoothed cross-entropy per target token"),
        )
        if validation and key in validation
    ]
    return ModelCardData(
        language=[source_lang, target_lang],
        license="apache-2.0",
        library_name="transformers",
        pipeline_tag="translation",
        tags=["translation", "hf_vanilla", "vanilla-transformer"],
        datasets=[dataset] if public_dataset else None,
        model_name=f"hf_vanilla-{source_lang}-{target_lang}",
        eval_results=results or None,
    )


def model_card(
    config: VanillaTransformerConfig,
    source_lang: str,
    target_lang: str,
    dataset: str,
    summary: str,
    validation: dict[str, float] | None = None,
    validation_sentences: int | None = None,
) -> ModelCard:
    """A model card with the Hub's metadata (languages, license, dataset, task, validation scores) and usage."""
    data = _card_metadata(source_lang, target_lang, dataset, validation, validation_sentences)
    name = data.model_name
    results = data.eval_results or []
    scores = (
        ", ".join(f"{result.metric_name} {result.metric_value}" for result in results)
        if results
        else "not validated"
    )
    content = f"""---
{data.to_yaml()}
---

# {name}

The Transformer of "Attention Is All You Need" (Vaswani et al., 2017), trained with
hf_vanilla to translate {source_lang} -> {target_lang} on {dataset_label(dataset)}.
{summary}

- Shape: d_model {config.d_model}, d_ff {config.d_ff}, {config.num_attention_heads} heads, \
{config.encoder_layers}+{config.decoder_layers} layers, a joint vocabulary of {config.vocab_size} tokens.
- Validation: {scores}.

## Use

The directory carries its code: no package beyond transformers is needed.

```python
from transformers import AutoModelForSeq2SeqLM, AutoTokenizer, pipeline

translator = pipeline("{TASK}", model="PATH_OR_HUB_ID", trust_remote_code=True)
translator(["..."])  # [{{"translation_text": "..."}}]; beam 4, length penalty 0.6, source length + 50

tokenizer = AutoTokenizer.from_pretrained("PATH_OR_HUB_ID")
model = AutoModelForSeq2SeqLM.from_pretrained("PATH_OR_HUB_ID", trust_remote_code=True)
```
"""
    return ModelCard(content)
