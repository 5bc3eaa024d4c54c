"""sacreBLEU scoring of translations: of sentences, and of a dataset split decoded with a saved model (section
6.1)."""

from __future__ import annotations

import logging
import os
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

import datasets
from sacrebleu.metrics import BLEU, CHRF, TER
from transformers import set_seed

from hf_vanilla.checkpoints.loading import decoding_for, generation_defaults
from hf_vanilla.data.corpus import load_translation_split
from hf_vanilla.evaluation.paper_bleu import (
    PAPER_BLEU_LANGUAGES,
    PAPER_BLEU_NAME,
    moses_signature,
    moses_tokenized,
    paper_bleu_report,
    require_moses_tokenizer,
)
from hf_vanilla.files import write_json
from hf_vanilla.model.decoding import (
    DEFAULT_DECODING,
    DEFAULT_MAX_TOKENS,
    PAPER_EXTRA_OUTPUT_TOKENS,
    DecodingOptions,
    decoding_report,
    resolve_decoding,
)
from hf_vanilla.translation.decoding import Batching, write_lines_atomic
from hf_vanilla.translation.engines import DEFAULT_ENGINE, EngineSettings, TranslationEngine, load_engine

logger = logging.getLogger(__name__)


TEST_SPLIT = "test"


def bleu_metric(target_lang: str = "", lowercase: bool = False) -> BLEU:
    """sacreBLEU's BLEU with the tokenizer of `target_lang` (zh, ja and ko have their own; 13a otherwise),
    which its signature names; a ValueError of one line where that tokenizer needs a package not installed
    (ja, ko: MeCab)."""
    try:
        return BLEU(lowercase=lowercase, trg_lang=target_lang)
    except (
        RuntimeError
    ) as err:  # sacreBLEU's several lines: "... requires extra dependencies ... pip install"
        raise ValueError(
            f"BLEU of a {target_lang!r} target uses sacreBLEU's {target_lang} tokenizer, which needs MeCab: "
            f"pip install 'sacrebleu[{target_lang}]'"
        ) from err


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
        "bleu": bleu_metric(target_lang, lowercase),
        "chrf": CHRF(lowercase=lowercase),
    }
    if ter:
        metrics["ter"] = TER(case_sensitive=not lowercase)
    scores: dict[str, float | str] = {}
    for name, metric in metrics.items():
        scores[name] = metric.corpus_score(list(hypotheses), [list(references)]).score
        scores[f"{name}_signature"] = str(metric.get_signature())
    return scores


def score_tokenized_lowercased(
    hypotheses: Sequence[str], references: Sequence[str], target_lang: str
) -> dict[str, float | str]:
    """BLEU on lowercased, Moses-tokenized text: the score Multi30k papers print, to set beside sacreBLEU.

    Lowercases, then splits with the Moses tokenizer (sacremoses, no aggressive hyphen splits), as the
    Multi30k task files are prepared: that gives test2016's German references the 12,103 tokens of the fairseq
    transformer_tiny score (Wu et al., 2021). Its tokens differ from sacreBLEU's 13a ones (Moses splits
    English clitics, "isn 't"), so it is reported beside sacreBLEU, never instead. Nor is it the WMT paper's
    tokenized BLEU (`paper_bleu.score_paper_bleu`, get_ende_bleu.sh). That one is cased where this lowercases,
    HTML-escapes & ' " (this does not), replaces the hypotheses' unicode punctuation (” -> ", ’ -> '; here ”
    stays a token of its own), splits the period off an abbreviation ending a line as today's tokenizer.perl
    does (here "usw." stays whole, as in tokenizer.perl before 2018), splits compounds as ##AT##-##AT## (here
    "E-Mail" is one token), and is multi-bleu.perl without smoothing (here sacreBLEU's default exponential
    smoothing). Returns {"bleu", "bleu_signature"}.
    """

    def tokenized(sentences: Sequence[str]) -> list[str]:
        return moses_tokenized([sentence.lower() for sentence in sentences], target_lang, escape=False)

    _require_pairs(hypotheses, references)
    # The text is split already (on spaces only); force: its tokenized periods are meant, not a mistake.
    bleu = BLEU(lowercase=True, tokenize="none", force=True)
    return {
        "bleu": bleu.corpus_score(tokenized(hypotheses), [tokenized(references)]).score,
        "bleu_signature": f"{bleu.get_signature()}|{moses_signature()}",
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


@dataclass(frozen=True)
class TranslationData:
    """A translation dataset (Hub name or local copy, with its config) in one direction, each split cut to its
    first `max_sentences` pairs when given."""

    dataset: str
    source_lang: str
    target_lang: str
    config_name: str | None = None
    max_sentences: int | None = None

    def pairs(self, split: str) -> datasets.Dataset:
        """The `source` / `target` pairs of `split` (`load_evaluation_pairs`)."""
        return load_evaluation_pairs(
            self.dataset, self.source_lang, self.target_lang, split, self.config_name, self.max_sentences
        )


@dataclass(frozen=True)
class Runtime:
    """How models run: the engine that decodes, on its device in its precision (`EngineSettings`), source
    tokens per batch, and whether a progress bar shows."""

    engine: EngineSettings = DEFAULT_ENGINE
    max_tokens: int = DEFAULT_MAX_TOKENS
    show_progress: bool = True

    @property
    def batching(self) -> Batching:
        """How the engine batches sentences and whether a progress bar shows, beside the decoding options."""
        return Batching(self.max_tokens, self.show_progress)


@dataclass(frozen=True)
class ScoreOptions:
    """The scores beside cased and lowercased sacreBLEU and chrF: TER, the papers' tokenized, lowercased BLEU
    (`score_tokenized_lowercased`, needs sacremoses), and the Transformer paper's own BLEU
    (`paper_bleu_report`: German and English targets, where sacremoses is installed)."""

    ter: bool = False
    tokenized_bleu: bool = False
    paper_bleu: bool = True


DEFAULT_RUNTIME, DEFAULT_SCORES = Runtime(), ScoreOptions()
SACREBLEU_ONLY = ScoreOptions(paper_bleu=False)  # for rows that keep sacreBLEU's scores alone
# The columns of `score_model`'s rows beside the model and its decoding settings (the same names, in its rows)
ROW_SCORES = ("bleu", "bleu_lowercased", "chrf", "signature", "seconds")


@dataclass(frozen=True)
class Variant:
    """One way of decoding: the settings it was decoded with (they decode it again) and its translations."""

    settings: dict[str, Any]
    translations: list[str]


@dataclass(frozen=True)
class Evaluated(Variant):
    """A variant scored: `evaluate_translation`'s report of its translations."""

    report: dict[str, Any]


class Decoder(Protocol):
    """How evaluation turns sources into translations; research extras (ensembles, reranking) plug in here.

    Called with the engine of the evaluated model, the sources, the decoding `settings` (`translate_sentences`
    keywords and the decoder's own) and the `runtime`, it returns one or more variants, each with its
    settings: passed back in, a variant's settings decode that variant alone. `extra_models`: the saved models
    it decodes with beside the evaluated one, by role, for the reports.
    """

    extra_models: Mapping[str, Sequence[str]]

    def __call__(
        self, engine: TranslationEngine, sources: Sequence[str], settings: Mapping[str, Any], runtime: Runtime
    ) -> list[Variant]: ...


@dataclass(frozen=True)
class BeamSearch:
    """The paper's decoding, the engine's with the settings given: one variant, no other models."""

    extra_models: Mapping[str, Sequence[str]] = field(default_factory=dict)

    def __call__(self, engine, sources, settings, runtime: Runtime) -> list[Variant]:
        options = DEFAULT_DECODING.replace(**settings)
        return [Variant(dict(settings), engine.translate(sources, options, runtime.batching))]


BEAM_SEARCH = BeamSearch()


def _check_evaluation_input(sources: Sequence[str], references: Sequence[str | None]) -> int:
    """Raise a ValueError naming what cannot be scored: no sources, sources and references that do not pair
    up, a missing or blank reference (it would lower the score silently). Returns the number of blank
    sources."""
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


# Scripts written without spaces between words, which the Moses tokenizer leaves whole.
UNSPLIT_BY_MOSES = ("zh", "ja", "ko", "th", "my", "km", "lo")


def _translation_report(
    hypotheses: Sequence[str], references: Sequence[str], target_lang: str, scoring: ScoreOptions
) -> dict[str, Any]:
    """The scores of `evaluate_translation`'s report; a score not defined for the target says so in one
    line."""
    ter = scoring.ter
    tokenized_bleu = scoring.tokenized_bleu and target_lang not in UNSPLIT_BY_MOSES
    if scoring.tokenized_bleu and not tokenized_bleu:
        logger.info(
            "tokenized BLEU left out: the Moses tokenizer leaves %s text unsplit, so it would score whole "
            "sentences; sacreBLEU's own %s tokenizer (in its signature) is the score to read",
            target_lang,
            target_lang,
        )
    if scoring.paper_bleu and target_lang not in PAPER_BLEU_LANGUAGES:
        logger.info(
            "%s left out: it is defined for the WMT 2014 English-German targets (de, en), not %s",
            PAPER_BLEU_NAME,
            target_lang,
        )
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
        **(paper_bleu_report(hypotheses, references, target_lang) if scoring.paper_bleu else {}),
    }


def evaluate_translation(
    engine: TranslationEngine,
    sources: Sequence[str],
    references: Sequence[str | None],
    target_lang: str = "",
    runtime: Runtime = DEFAULT_RUNTIME,
    scoring: ScoreOptions = DEFAULT_SCORES,
    decoder: Decoder = BEAM_SEARCH,
    **settings,
) -> list[Evaluated]:
    """Translate `sources` with `engine` through `decoder` with `settings` and score against `references`:
    one `Evaluated` for each variant the decoder gives (plain beam search: one).

    The report holds "cased" and "lowercased" sacreBLEU / chrF (and TER with `scoring.ter`), each with its
    signature, the number of sentences and of blank sources (translated to "", logged), the variant's
    generation settings, the engine (`describe`) and the speed (a decoding's whole time, for each of its
    variants); with `scoring.tokenized_bleu`, also "tokenized_lowercased" (the papers' BLEU,
    `score_tokenized_lowercased`). `target_lang` selects sacreBLEU's tokenizer for zh / ja / ko. A missing or
    blank reference is an error: it would lower the score silently.
    """
    if scoring.tokenized_bleu:
        require_moses_tokenizer()  # before decoding, not after
    blank_sources = _check_evaluation_input(sources, references)
    started = time.perf_counter()
    variants = decoder(engine, sources, settings, runtime)
    seconds = time.perf_counter() - started
    speed = {
        **engine.describe(),
        "seconds": round(seconds, 3),
        "sentences_per_second": round(len(sources) / seconds, 2),
    }
    generation = {"max_new_tokens": f"source length + {PAPER_EXTRA_OUTPUT_TOKENS}, each sentence"}
    return [
        Evaluated(
            variant.settings,
            variant.translations,
            {
                **_translation_report(variant.translations, references, target_lang, scoring),
                "sentences": len(variant.translations),
                "blank_sources": blank_sources,
                "generation": {**generation, **variant.settings, "max_tokens": runtime.max_tokens},
                **speed,
            },
        )
        for variant in variants
    ]


def score_model(
    model_name_or_path: str | os.PathLike,
    pairs: datasets.Dataset,
    settings: Sequence[dict[str, Any]] = ({},),
    target_lang: str = "",
    runtime: Runtime = Runtime(show_progress=False),
    decoder: Decoder = BEAM_SEARCH,
) -> list[dict[str, Any]]:
    """A saved model decoded on `pairs` (`source` / `target`) by `decoder` with each of `settings`: one row
    for each variant, with its settings, cased and lowercased BLEU, chrF, the BLEU signature and the seconds
    spent. What a setting leaves open of the beam size, length penalty and output limit is the model's
    generation config's, else the paper's (`resolve_decoding`), and its row names the values used."""
    engine = load_engine(model_name_or_path, runtime.engine)
    generation = generation_defaults(model_name_or_path)
    sources, references = pairs["source"], pairs["target"]
    rows = []
    for setting in settings:
        setting = resolve_decoding(generation, DecodingOptions().replace(**setting))[0].settings()
        evaluated = evaluate_translation(
            engine, sources, references, target_lang, runtime, SACREBLEU_ONLY, decoder, **setting
        )
        rows += [
            {
                "model": str(model_name_or_path),
                **scored.settings,
                "bleu": scored.report["cased"]["bleu"],
                "bleu_lowercased": scored.report["lowercased"]["bleu"],
                "chrf": scored.report["cased"]["chrf"],
                "signature": scored.report["cased"]["bleu_signature"],
                "seconds": scored.report["seconds"],
            }
            for scored in evaluated
        ]
    return rows


def evaluate_bleu(
    model_name_or_path: str | os.PathLike,
    data: TranslationData,
    output_dir: str | os.PathLike,
    split: str = "test",
    runtime: Runtime = DEFAULT_RUNTIME,
    scoring: ScoreOptions = DEFAULT_SCORES,
    decoder: Decoder = BEAM_SEARCH,
    seed: int = 0,
    options: DecodingOptions = DEFAULT_DECODING,
) -> dict[str, Any]:
    """Translate a dataset split with a saved model, score it, and write hypotheses and a JSON report.

    Decodes with the beam size, length penalty and output limit of `options`, else of the checkpoint's
    generation_config.json, else the paper's (beam 4, length penalty 0.6, input length + 50;
    `resolve_decoding`: logged, and the report's "generation" names where each came from, under "sources"),
    through `decoder` (plain beam search unless a research extra is passed in); the decoder must give one
    variant. Writes `{split}.{source_lang}-{target_lang}.hyp` (one translation a line, in dataset order) and
    `.json` into `output_dir`, each atomically, and returns the report (`evaluate_translation`'s, with the
    model, the decoder's other models, the data and the seed).
    """
    if scoring.tokenized_bleu:
        require_moses_tokenizer()  # before loading anything
    pairs = data.pairs(split)
    engine = load_engine(model_name_or_path, runtime.engine)
    set_seed(seed)
    resolved, origins = decoding_for(model_name_or_path, options)
    settings = resolved.settings()
    sources, references = pairs["source"], pairs["target"]
    evaluated = evaluate_translation(
        engine, sources, references, data.target_lang, runtime, scoring, decoder, **settings
    )
    if len(evaluated) != 1:
        raise ValueError(
            f"the decoder gave {len(evaluated)} translations of {split}, one is written: give it one "
            f"setting each"
        )
    (scored,) = evaluated
    stem = f"{split}.{data.source_lang}-{data.target_lang}"
    hypotheses_path = write_lines_atomic(Path(output_dir) / f"{stem}.hyp", scored.translations)
    report = {
        "model": str(model_name_or_path),
        **decoder.extra_models,
        "dataset": data.dataset,
        "config_name": data.config_name,
        "split": split,
        "source_lang": data.source_lang,
        "target_lang": data.target_lang,
        **scored.report,
        "generation": {**scored.report["generation"], **decoding_report(resolved, origins)},
        "seed": seed,
        "hypotheses_file": str(hypotheses_path),
    }
    write_json(Path(output_dir) / f"{stem}.json", report)
    return report
