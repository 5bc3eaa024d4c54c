"""A saved model directory that works alone: loaded, run and published without this package installed; and its
model card, generated from what the checkpoint is.

`save_pretrained` alone copies the modeling code and maps one Auto class. A checkpoint written with
`save_model_directory` also maps `AutoModel`, registers the `vanilla-translation` pipeline in its config (as
transformers' `Pipeline.save_pretrained` does; the model's `save_pretrained` then copies the pipeline's code,
here and wherever transformers saves the model again), and holds a README.md model card with Hub metadata, so
that `push_to_hub` of the directory publishes a usable model. The card's facts come from the checkpoint's own
files (architecture from config.json, decoding defaults from generation_config.json) and from what its run
recorded (`RunRecord`); `set_decoding_defaults` and `record_results` change checkpoint and card together.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch
from huggingface_hub import EvalResult, ModelCard, ModelCardData
from transformers import GenerationConfig, PreTrainedModel, PreTrainedTokenizerBase
from transformers.pipelines import PIPELINE_REGISTRY
from transformers.utils import GENERATION_CONFIG_NAME

from hf_vanilla.data.corpus import TRAIN_SPLIT, parse_dataset
from hf_vanilla.files import atomic_file, write_text_atomic
from hf_vanilla.model.configuration_vanilla import VanillaTransformerConfig
from hf_vanilla.model.decoding import FROM_PAPER, PAPER_EXTRA_OUTPUT_TOKENS, resolve_decoding
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
    registered = dict(PIPELINE_REGISTRY.check_task(TASK)[1])
    registered["impl"] = _code_reference(VanillaTranslationPipeline)
    registered["pt"] = tuple(model_class.__name__ for model_class in registered["pt"])
    return {TASK: registered}


def save_model_directory(
    model: PreTrainedModel,
    tokenizer: PreTrainedTokenizerBase,
    directory: str | os.PathLike,
    run: RunRecord,
    state_dict: dict[str, torch.Tensor] | None = None,
) -> Path:
    """`save_pretrained` of model (with the pipeline's code) and tokenizer into `directory`, and the model
    card of what was saved and the `run` that made it."""
    directory = Path(directory)
    model.config.auto_map = dict(AUTO_MAP)
    model.config.custom_pipelines = custom_pipeline_entry()
    model.save_pretrained(directory, state_dict=state_dict)
    tokenizer.save_pretrained(directory)
    save_card(directory_card(directory, run), directory)
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
    """How a card names the training data: a Hub id as given, a local copy by its folder's or file's name only
    (a card is published; the training machine's paths are nobody's business)."""
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
MODEL_DETAILS_HEADING = "## Model details"
EVALUATION_HEADING = "## Evaluation"
DEPARTURES_HEADING = "## Departures from the paper"
TOKENIZED_BLEUS = ("tokenized_lowercased", "bleu_paper")  # report keys of the BLEUs on Moses tokens


@dataclass(frozen=True)
class RunRecord:
    """What a card says of the run that made a checkpoint, beside what the checkpoint's own files say: its
    languages and data, a one-line summary, the training settings the run recorded (config key -> value; none:
    the card says they were not recorded) and the checkpoint's validation scores while training."""

    source_lang: str
    target_lang: str
    dataset: str
    summary: str
    settings: Mapping[str, Any] = field(default_factory=dict)
    validation: Mapping[str, float] | None = None
    validation_sentences: int | None = None


def _results(dataset: str, name: str, split: str, scores) -> list[EvalResult]:
    """Model-index rows of `dataset`'s `split` (named `name` in the card): one for each (metric type, metric
    name, value, sacreBLEU signature or None) of `scores`."""
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


def _validation_results(run: RunRecord) -> list[EvalResult]:
    """A checkpoint's validation scores during training (greedy decoding) as model-index rows."""
    smoothing = run.settings.get("label_smoothing")  # the validation loss is the training loss
    loss = "cross-entropy per target token" + (f", label smoothing {smoothing}" if smoothing else "")
    scores = [
        (metric, name, round(run.validation[key], 4), None)
        for key, metric, name in (("val_bleu", "bleu", "sacreBLEU, greedy"), ("val_loss", "loss", loss))
        if key in (run.validation or {})
    ]
    name = f"{dataset_name(run.dataset)} validation ({run.validation_sentences or 'all'} sentences)"
    return _results(run.dataset, name, "validation", scores)


def _card_metadata(run: RunRecord, results: list[EvalResult]) -> ModelCardData:
    """The card's YAML block, as Hub model cards carry it: languages, license, task, dataset, model-index."""
    return ModelCardData(
        language=[run.source_lang, run.target_lang],
        license="apache-2.0",
        library_name="transformers",
        pipeline_tag="translation",
        tags=["translation", "hf_vanilla", "vanilla-transformer"],
        datasets=None if is_local_dataset(run.dataset) else [run.dataset],
        metrics=["bleu", "chrf"],
        model_name=f"hf_vanilla-{run.source_lang}-{run.target_lang}",
        eval_results=results or None,
    )


def architecture(config: VanillaTransformerConfig) -> str:
    """What the config makes of the paper's encoder-decoder: LayerNorm placement, embedding sharing, sizes."""
    layer_norm = (
        "pre-LayerNorm, x + Sublayer(LayerNorm(x)) with a LayerNorm after each stack (a departure from the "
        "paper's post-LayerNorm)"
        if config.pre_layernorm
        else "post-LayerNorm, LayerNorm(x + Sublayer(x)), as in the paper"
    )
    embeddings = (
        "one embedding matrix shared by the encoder input, the decoder input and the pre-softmax projection, "
        "as in the paper"
        if config.tie_word_embeddings
        else "one embedding matrix shared by the encoder and decoder inputs, and a pre-softmax projection of "
        "its own (a departure: the paper shares that matrix too)"
    )
    return (
        f"the paper's encoder-decoder with sinusoidal positions and ReLU feed-forward layers; {layer_norm}; "
        f"{embeddings}. d_model {config.d_model}, d_ff {config.d_ff}, {config.num_attention_heads} heads, "
        f"{config.encoder_layers}+{config.decoder_layers} layers, a joint BPE vocabulary of "
        f"{config.vocab_size} tokens"
    )


def decoding_defaults(generation: GenerationConfig) -> str:
    """The decoding a checkpoint's generation config makes the default of `pipeline` and the scripts
    (`resolve_decoding`), with what a plain `generate` does instead where that differs."""
    decoding, sources = resolve_decoding(generation)
    if decoding.num_beams == 1:
        return "greedy search (num_beams 1)"
    beam_search = f"beam search with {decoding.num_beams} beams, length penalty {decoding.length_penalty}"
    if sources["num_beams"] == FROM_PAPER:
        return (
            f"none saved: the pipeline and the scripts use the paper's {beam_search}, "
            "a plain `generate` greedy search"
        )
    if sources["length_penalty"] == FROM_PAPER:
        return f"{beam_search} (the paper's penalty; a plain `generate` takes transformers' default)"
    return beam_search


def decoding_label(settings: Mapping[str, Any]) -> str:
    """The beam size and length penalty of decoding `settings`, as reports name a decoding: "num_beams 8,
    length_penalty 1.0"; "greedy" where they set neither."""
    chosen = [f"{key} {settings[key]}" for key in ("num_beams", "length_penalty") if key in settings]
    return ", ".join(chosen) or "greedy"


def model_details(config: VanillaTransformerConfig, generation: GenerationConfig) -> str:
    """The card's section of what the checkpoint's config.json and generation_config.json say."""
    reversed_words = (
        "- Writes each translation's words last first (trained on reversed target words, for reranking: a "
        "departure); the pipeline returns them in reading order, a plain `generate` as written.\n"
        if config.right_to_left
        else ""
    )
    return (
        f"{MODEL_DETAILS_HEADING}\n\n- Architecture: {architecture(config)}.\n{reversed_words}"
        "- Decoding defaults (generation_config.json, what `pipeline` and `generate` use unless told "
        f"otherwise): {decoding_defaults(generation)}. The pipeline stops each translation at its source "
        f"length + {PAPER_EXTRA_OUTPUT_TOKENS} tokens (section 6.1), a plain `generate` at the decoder's "
        f"{config.max_position_embeddings} positions.\n- License: Apache-2.0.\n"
    )


def training_procedure(settings: Mapping[str, Any]) -> str:
    """The card's recipe: the settings the run recorded, as its training config names them."""
    if not settings:
        return "Not recorded with this checkpoint.\n"
    listed = "".join(f"- {name}: {value}\n" for name, value in settings.items() if name != "corpus_recipe")
    chosen = settings.get("corpus_recipe")
    by_size = ""
    if chosen:
        by_size = f"\nSettings the config left to the corpus size (hf_vanilla's size table): {chosen}.\n"
    return (
        "hf_vanilla's training loop (section 5: Adam, the learning rate warmed up, then decayed with the "
        f"inverse square root of the update), with these settings of its training config:\n{listed}{by_size}"
    )


def evaluation_section(results: list[EvalResult] | None) -> str:
    """The card's results table, one row a score, with sacreBLEU's signature where it has one."""
    if not results:
        return (
            f"{EVALUATION_HEADING}\n\nNot evaluated yet: `scripts/select_checkpoint.py` records test scores "
            "here.\n"
        )
    rows = "\n".join(
        f"| {result.dataset_name} | {result.metric_name} | {result.metric_value} | "
        # a signature's bars escaped for the table
        f"{(result.metric_config or '').replace('|', chr(92) + '|')} |"
        for result in results
    )
    table_head = "| data | metric | score | sacreBLEU signature |\n|---|---|---|---|"
    return f"{EVALUATION_HEADING}\n\n{table_head}\n{rows}\n"


CARD_TEXT = """
# {name}

The Transformer of ["Attention Is All You Need"]({paper}) (Vaswani et al., 2017), trained with hf_vanilla to
translate {source_lang} -> {target_lang} on {data}. {summary}

{details}
## Intended uses and limitations

Translation of single sentences {source_lang} -> {target_lang} in the domain of its training data, \
and research on
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

{procedure}
{evaluation}
## Citation

{citations}"""
MULTI30K_DOMAIN = (
    "Trained on image descriptions (Multi30k): short, literal sentences; expect poor output on news, "
    "dialogue or long documents."
)


def card_of(metadata: ModelCardData, text: str) -> ModelCard:
    """A card (a model's or a tokenizer's README.md): `metadata`, the YAML block the Hub reads, then
    `text`."""
    return ModelCard(f"---\n{metadata.to_yaml()}\n---\n{text}")


def model_card(config: VanillaTransformerConfig, generation: GenerationConfig, run: RunRecord) -> ModelCard:
    """A checkpoint's model card, by the Hub's conventions, generated from what the checkpoint is: metadata
    with model-index; model details from its config and generation config; intended use and limitations; how
    to use; training data and procedure from `run`; evaluation (validation scores while training, test scores
    once `record_results` adds them); citation."""
    multi30k = "multi30k" in dataset_name(run.dataset).lower()
    citations = [CITATION, MULTI30K_CITATION] if multi30k else [CITATION]
    validation = _validation_results(run)
    return card_of(
        _card_metadata(run, validation),
        CARD_TEXT.format(
            name=f"hf_vanilla-{run.source_lang}-{run.target_lang}",
            paper=PAPER,
            source_lang=run.source_lang,
            target_lang=run.target_lang,
            data=dataset_label(run.dataset),
            summary=run.summary,
            details=model_details(config, generation),
            domain=MULTI30K_DOMAIN if multi30k else "Trained on the data named above only.",
            task=TASK,
            procedure=training_procedure(run.settings),
            evaluation=evaluation_section(validation),
            citations="\n".join(f"```bibtex\n{citation}\n```\n" for citation in citations),
        ),
    )


def directory_card(directory: str | os.PathLike, run: RunRecord) -> ModelCard:
    """`model_card` of the checkpoint saved in `directory`, from its config.json and
    generation_config.json."""
    return model_card(
        VanillaTransformerConfig.from_pretrained(directory), GenerationConfig.from_pretrained(directory), run
    )


def save_card(card: ModelCard, directory: str | os.PathLike) -> Path:
    """Write `card` as the README.md of `directory`, atomically."""
    return write_text_atomic(Path(directory) / CARD_FILE, str(card))


def _replace_section(text: str, section: str) -> str:
    """`text` with the section of `section`'s heading (its first line) replaced by `section`."""
    heading = section.partition("\n")[0]
    head, _, rest = text.partition(heading + "\n")
    tail = rest[rest.find("\n## ") + 1 :] if "\n## " in rest else ""
    return head + section + ("\n" if tail else "") + tail


def record_departures(directory: str | os.PathLike, text: str) -> None:
    """`text` as the departures section of the card of the checkpoint in `directory` (a new section at the
    end, or in place of the earlier one), where it has a card."""
    if not (Path(directory) / CARD_FILE).is_file():
        return
    card = ModelCard.load(Path(directory) / CARD_FILE)
    section = f"{DEPARTURES_HEADING}\n\n{text}\n"
    if f"{DEPARTURES_HEADING}\n" in card.text:
        card.text = _replace_section(card.text, section)
    else:
        card.text = f"{card.text.rstrip()}\n\n{section}"
    save_card(card, directory)


def set_decoding_defaults(directory: str | os.PathLike, num_beams: int, length_penalty: float | None) -> Path:
    """Make `num_beams` and `length_penalty` (None: none, as greedy search takes) the decoding that `pipeline`
    and `generate` use by default for the checkpoint in `directory`: its generation_config.json, written
    atomically, and its card's model details, where it has a card. Returns the generation config's path."""
    directory = Path(directory)
    generation = GenerationConfig.from_pretrained(directory)
    generation.update(num_beams=num_beams, length_penalty=length_penalty)
    generation.validate(strict=True)
    path = directory / GENERATION_CONFIG_NAME
    with atomic_file(path) as staging:
        generation.to_json_file(staging)
    if (directory / CARD_FILE).is_file():
        card = ModelCard.load(directory / CARD_FILE)
        details = model_details(VanillaTransformerConfig.from_pretrained(directory), generation)
        card.text = _replace_section(card.text, details)
        save_card(card, directory)
    return path


def record_results(
    directory: str | os.PathLike, dataset: str, split: str, report: Mapping[str, Any]
) -> ModelCard:
    """Write a split's scores (an evaluation report) into the card of the checkpoint in `directory`:
    model-index rows and the Evaluation table, replacing that split's earlier rows, so a pushed model shows
    them."""
    card = ModelCard.load(Path(directory) / CARD_FILE)
    setting = decoding_label(report.get("generation", {}))
    name = f"{dataset_name(dataset)} {split} ({report.get('sentences', 'all')} sentences; {setting})"
    scores = [
        ("bleu", "sacreBLEU", report["cased"]["bleu"], report["cased"].get("bleu_signature")),
        (
            "bleu",
            "sacreBLEU, lowercased",
            report["lowercased"]["bleu"],
            report["lowercased"].get("bleu_signature"),
        ),
        ("chrf", "chrF", report["cased"]["chrf"], report["cased"].get("chrf_signature")),
    ]
    scores += [  # the tokenized BLEUs printed beside sacreBLEU, where the report has them
        (
            "bleu",
            report[key].get("name", key.replace("_", " ")),
            report[key]["bleu"],
            report[key].get("bleu_signature"),
        )
        for key in TOKENIZED_BLEUS
        if key in report
    ]
    kept = [result for result in card.data.eval_results or [] if result.dataset_split != split]
    card.data.eval_results = kept + _results(
        dataset,
        name,
        split,
        [(metric, label, round(value, 2), signature) for metric, label, value, signature in scores],
    )
    card.text = _replace_section(card.text, evaluation_section(card.data.eval_results))
    save_card(card, directory)
    return card
