"""The command-line option groups every script builds its parser from, spelled as Hugging Face users type
them.

Each `add_*_arguments` adds one group of flags (a section of --help), and each `add_*_argument` one flag that
several groups or scripts share; a reader beside each turns the parsed flags into the package's settings.
Every `--a-b` flag also answers to `--a_b` (as `HfArgumentParser` does), and every flag shows its default.
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import logging
import sys
import typing
from collections.abc import Collection, Sequence
from typing import Any

import yaml
from accelerate.utils import clean_state_dict_for_safetensors

from hf_vanilla.data.corpus import ACCEPTED_FORMS, COMPRESSION_SUFFIXES, dataset_spec
from hf_vanilla.evaluation.scoring import TranslationData
from hf_vanilla.extras import MissingExtra
from hf_vanilla.model.decoding import (
    DEFAULT_MAX_TOKENS,
    PAPER_EXTRA_OUTPUT_TOKENS,
    PAPER_GENERATION_KWARGS,
    DecodingOptions,
)
from hf_vanilla.precision import DTYPE_NAMES
from hf_vanilla.training.settings import PUBLIC_MULTI30K, SETTING_GROUPS, TrainingConfig, load_training_config
from hf_vanilla.translation.corpus import DEFAULT_CHUNK_LINES, ERROR_HANDLERS, OUTPUT_FORMATS, CorpusSettings
from hf_vanilla.translation.engines import COMPUTE_TYPES, DEFAULT_ENGINE, EngineSettings, engine_names

LOG_LEVELS = ("debug", "info", "warning", "error")


class HelpFormatter(argparse.ArgumentDefaultsHelpFormatter, argparse.RawDescriptionHelpFormatter):
    """The module docstring as written, and each flag's default after its help where the help does not say it
    (a flag whose default is "not given" says where the value then comes from)."""

    def _get_help_string(self, action: argparse.Action) -> str | None:
        if "(default: " in (action.help or ""):
            return action.help
        return super()._get_help_string(action)


@dataclasses.dataclass
class HelpSection:
    """A section of --help: its title, its description and its arguments, in the order they were added."""

    title: str | None
    description: str | None
    actions: list[argparse.Action] = dataclasses.field(default_factory=list)


class ArgumentParser(argparse.ArgumentParser):
    """argparse whose dashed long flags also take underscores: `--source_lang` is read as `--source-lang`.

    It records its --help sections as they are built (`sections`: argparse keeps them in private fields only),
    the positional arguments' and the options' first, as argparse shows them."""

    def __init__(self, *args, **kwargs):
        kwargs.setdefault("formatter_class", HelpFormatter)
        self.sections: list[HelpSection] = []
        super().__init__(*args, **kwargs)

    def add_argument_group(self, *args, **kwargs) -> _RecordedGroup:
        group = super().add_argument_group(*args, **kwargs)
        self.sections.append(HelpSection(group.title, group.description))
        return _RecordedGroup(group, self.sections[-1])

    def add_argument(self, *args, **kwargs) -> argparse.Action:
        action = super().add_argument(*args, **kwargs)
        positionals, options = self.sections[:2]  # the two sections argparse opens first
        (options if action.option_strings else positionals).actions.append(action)
        return action

    def parse_known_args(
        self, args: Sequence[str] | None = None, namespace: argparse.Namespace | None = None
    ):
        return super().parse_known_args(dashed_flags(sys.argv[1:] if args is None else args), namespace)


class _RecordedGroup:
    """An argument group that also records each argument added to it in its --help section."""

    def __init__(self, group, section: HelpSection):
        self._group, self._section = group, section

    def add_argument(self, *args, **kwargs) -> argparse.Action:
        action = self._group.add_argument(*args, **kwargs)
        self._section.actions.append(action)
        return action

    def __getattr__(self, name: str):
        return getattr(self._group, name)


def dashed_flags(arguments: Sequence[str]) -> list[str]:
    """`arguments` with each long flag's underscores as dashes (`--max_steps=3` -> `--max-steps=3`), up to a
    `--`, after which nothing is a flag."""
    arguments = list(arguments)
    end = arguments.index("--") if "--" in arguments else len(arguments)
    return [_dashed(argument) for argument in arguments[:end]] + arguments[end:]


def _dashed(argument: str) -> str:
    if not argument.startswith("--"):
        return argument  # a value or a short flag
    flag, equals, value = argument.partition("=")
    return flag.replace("_", "-") + equals + value


def add_logging_argument(parser: argparse.ArgumentParser) -> None:
    """`--log-level` of every script; set it with `configure_logging(args.log_level)` right after parsing."""
    parser.add_argument(
        "--log-level",
        choices=LOG_LEVELS,
        default="info",
        help="the least severe log lines written to stderr: info includes progress (training, evaluation, "
        "the precision and engine chosen); warning only what needs attention",
    )


def configure_logging(level: str = "info") -> None:
    """Every script's logging: lines of `level` and above to stderr, each as `time LEVEL logger: message`.

    accelerate's notes at each save (its file lists; "Removed shared tensor" for the tied weights) stay quiet.
    """
    logging.basicConfig(level=level.upper(), format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    logging.getLogger("accelerate").setLevel(logging.WARNING)
    # The shared-tensor note comes from the module of this public function, by its module's logger.
    logging.getLogger(clean_state_dict_for_safetensors.__module__).setLevel(logging.ERROR)


MISSING_EXTRA_STATUS = 2  # as argparse exits for a bad command line: the command cannot run as installed


@contextlib.contextmanager
def exits_on_missing_extra():
    """A missing optional dependency inside ends the script as one `error:` line naming the pip extra that
    installs it (`extras.require`), with exit status 2, instead of a traceback."""
    try:
        yield
    except MissingExtra as missing:
        print(f"error: {missing}", file=sys.stderr)
        sys.exit(MISSING_EXTRA_STATUS)


def add_training_config_arguments(
    parser: argparse.ArgumentParser, settings: Collection[str] | None = None
) -> None:
    """`--config FILE` and a flag for every `TrainingConfig` field (or only those named in `settings`), with
    the field's help, that overrides the file's value, in a --help section a group of `SETTING_GROUPS`; read
    them back with `training_config`.

    A flag left out is absent from the parsed namespace (not set to the field's default), so that the file's
    value stands; values are read as YAML ("null", "1e-3", "{d_model: 128}"), which `load_training_config`
    checks. A yes/no field's flag alone means yes (`--right-to-left`, or `--right-to-left false`);
    `--no-FIELD` turns off one that is on by default."""
    parser.add_argument_group("training config (TrainingConfig keys, configs/*.yaml)").add_argument(
        "--config", help="YAML file of TrainingConfig keys; the flags below override its values"
    )
    fields = [
        field for field in dataclasses.fields(TrainingConfig) if settings is None or field.name in settings
    ]
    for name, description in SETTING_GROUPS.items():
        in_group = [field for field in fields if field.metadata["group"] == name]
        if in_group:
            group = parser.add_argument_group(name, description)
            for field in in_group:
                _add_setting_flag(group, field)


def _add_setting_flag(group, field: dataclasses.Field) -> None:
    flag, kind = "--" + field.name.replace("_", "-"), typing.get_type_hints(TrainingConfig)[field.name]
    default = field.default_factory() if field.default is dataclasses.MISSING else field.default
    described = f"{field.metadata['help']} (default: {default!r})"
    if kind is bool:
        group.add_argument(
            flag, nargs="?", const=True, type=yaml.safe_load, default=argparse.SUPPRESS, help=described
        )
        if default:
            off = f"--no-{flag[2:]}"
            group.add_argument(
                off, dest=field.name, action="store_false", default=argparse.SUPPRESS, help=f"turn off {flag}"
            )
        return
    group.add_argument(
        flag,
        nargs="+" if field.name == "dataset" else None,  # a file a split, as --dataset of the other scripts
        type=str if kind is str else yaml.safe_load,
        metavar=field.name.upper(),
        default=argparse.SUPPRESS,
        help=described,
    )


def training_config_overrides(args: argparse.Namespace) -> dict[str, Any]:
    """The `TrainingConfig` keys given as flags of `add_training_config_arguments`, by name."""
    names = {field.name for field in dataclasses.fields(TrainingConfig)}
    return {name: value for name, value in vars(args).items() if name in names}


def training_config(args: argparse.Namespace, **overrides) -> TrainingConfig:
    """The `TrainingConfig` of `--config` with the flags of `add_training_config_arguments` over its values,
    and `overrides` over theirs (TrainingError for a bad file, key or value)."""
    return load_training_config(args.config, **{**training_config_overrides(args), **overrides})


def add_model_argument(parser: argparse.ArgumentParser) -> None:
    """The `model` the script loads."""
    parser.add_argument("model", help="saved model directory (with its tokenizer) or Hub id")


def add_beam_arguments(parser: argparse.ArgumentParser, several: bool = False) -> None:
    """Beam size and length penalty: one value each, not given by default (the checkpoint's generation config
    decides, else the paper); with `several`, lists of values to try, the paper's by default. Read one value
    each back with `decoding_options`."""
    _add_beam_flags(parser.add_argument_group("beam search"), several)


def _add_beam_flags(group, several: bool = False) -> None:
    nargs = "+" if several else None

    def default(name: str):
        return [PAPER_GENERATION_KWARGS[name]] if several else None

    def where(name: str) -> str:
        paper = PAPER_GENERATION_KWARGS[name]
        if several:
            return f"; each is tried (default: the paper's {paper}, not the checkpoint's)"
        return f" (default: the checkpoint's generation_config.json, else the paper's {paper})"

    group.add_argument(
        "--num-beams",
        type=positive_int,
        nargs=nargs,
        default=default("num_beams"),
        help=f"beam size; 1: greedy, which takes no length penalty{where('num_beams')}",
    )
    group.add_argument(
        "--length-penalty",
        type=float,
        nargs=nargs,
        default=default("length_penalty"),
        help=f"beam search divides a hypothesis' log-probability by length**this{where('length_penalty')}",
    )


def add_decoding_arguments(parser: argparse.ArgumentParser) -> None:
    """How translations are searched: beam size, length penalty, output limit and lines too long for the
    model; read them back with `decoding_options`."""
    group = parser.add_argument_group(
        "decoding (what is not given: the checkpoint's generation_config.json, else the paper's, section 6.1)"
    )
    _add_beam_flags(group)
    add_max_new_tokens_argument(group)
    group.add_argument(
        "--skip-long-lines",
        action="store_true",
        help="leave a line longer than the model's positions blank (default: translate its first tokens); "
        "either way a warning names such lines",
    )


def add_sampling_arguments(parser: argparse.ArgumentParser) -> None:
    """Sampling instead of beam search (back-translation's); read them back with `decoding_options`."""
    group = parser.add_argument_group("sampling")
    group.add_argument(
        "--sampling",
        action="store_true",
        help="draw each translation token by token from the model's distribution instead of beam search "
        "(num_beams becomes 1), as back-translation does; reproducible with --seed",
    )
    group.add_argument(
        "--top-k", type=int, default=0, help="with --sampling, draw from the k likeliest tokens only; 0: all"
    )
    group.add_argument(
        "--top-p",
        type=float,
        default=1.0,
        help="with --sampling, draw from the fewest likeliest tokens whose probabilities sum to p (nucleus)",
    )
    group.add_argument(
        "--temperature", type=float, default=1.0, help="with --sampling, divide the logits by this to draw"
    )


def decoding_options(args: argparse.Namespace) -> DecodingOptions:
    """The decoding the flags ask for: one beam size and length penalty (`add_beam_arguments`,
    `add_decoding_arguments`), the output limit and long lines (`add_decoding_arguments`), sampling
    (`add_sampling_arguments`: one beam, whatever the beam flags say) and the cache (`add_runtime_arguments`),
    of those groups the script has. A value no flag gives stays None: `resolve_decoding` takes it from the
    checkpoint, else from the paper."""
    flags = vars(args)
    options = DecodingOptions(
        num_beams=flags.get("num_beams"),
        length_penalty=flags.get("length_penalty"),
        max_new_tokens=flags.get("max_new_tokens"),
        cache_implementation=cache_implementation(args),
        skip_long_lines=flags.get("skip_long_lines", False),
    )
    if not flags.get("sampling"):
        return options
    return options.replace(
        num_beams=1, do_sample=True, top_k=args.top_k, top_p=args.top_p, temperature=args.temperature
    )


def add_runtime_arguments(parser: argparse.ArgumentParser) -> None:
    """How fast the translations come, not what they are: tokens per batch, the engine that decodes with its
    device and precision, and generate's cache; read them back with `runtime_kwargs`, `engine_settings` and
    `decoding_options`."""
    group = parser.add_argument_group("runtime (speed; the transformers engine in float32 is the reference)")
    add_max_tokens_argument(group)
    group.add_argument(
        "--engine",
        choices=engine_names(),
        default=DEFAULT_ENGINE.engine,
        help="transformers: generate, the reference; ctranslate2: the same decoding, faster (converted from "
        "the checkpoint on first use; pip install 'hf_vanilla[ct2]'; docs/speed.md says what it cannot do)",
    )
    add_device_argument(group)
    add_dtype_argument(group)
    group.add_argument(
        "--compute-type",
        default="auto",
        choices=COMPUTE_TYPES,
        help="the ctranslate2 engine's weights_activations; auto: CTranslate2's fastest on the device (int8 "
        "weights where it has int8 kernels), logged",
    )
    group.add_argument(
        "--ctranslate2-dir",
        default=None,
        help="where the ctranslate2 engine caches converted models, by checkpoint digest (default: "
        "$HF_HOME/hf_vanilla/ctranslate2, never the checkpoint's directory)",
    )
    group.add_argument(
        "--threads",
        type=positive_int,
        default=None,
        help="CPU threads to decode with (default: torch's count: OMP_NUM_THREADS, else the cores), logged",
    )
    group.add_argument(
        "--inter-threads",
        type=positive_int,
        default=None,
        help="the ctranslate2 engine on a CPU: batches decoded at once, a model replica each, sharing "
        "--threads (default: one a thread, each on one thread), logged",
    )
    group.add_argument(
        "--vocab-map",
        action="store_true",
        help="the ctranslate2 engine: decode within the checkpoint's vocabulary shortlist (its "
        "vocab_map.txt, from scripts/research/make_student.py; a departure from the paper): faster, nearly "
        "the same output",
    )
    group.add_argument(
        "--cache-implementation",
        choices=["dynamic", "static"],
        default="dynamic",
        help="generate's key/value cache; static preallocates it, and on a GPU generate then compiles the "
        "decoding step once per batch shape (docs/speed.md: faster greedy, slower beam search); the same "
        "tokens",
    )


def runtime_kwargs(args: argparse.Namespace) -> dict[str, Any]:
    """`max_tokens` and `engine` (evaluation's `Runtime`) from the options of `add_runtime_arguments`."""
    return {"max_tokens": args.max_tokens, "engine": engine_settings(args)}


def engine_settings(args: argparse.Namespace) -> EngineSettings:
    """The `EngineSettings` of the options of `add_runtime_arguments`."""
    return EngineSettings(
        args.engine,
        args.device,
        args.dtype,
        args.compute_type,
        args.ctranslate2_dir,
        args.threads,
        args.inter_threads,
        args.vocab_map,
    )


def cache_implementation(args: argparse.Namespace) -> str | None:
    """generate's cache of `--cache-implementation` (None for the dynamic cache, generate's default; None too
    where the script has no such flag)."""
    return "static" if vars(args).get("cache_implementation") == "static" else None


def add_max_tokens_argument(parser) -> None:
    """`--max-tokens`, the source tokens of a decoding batch, to `parser` or one of its groups."""
    parser.add_argument(
        "--max-tokens",
        type=positive_int,
        default=DEFAULT_MAX_TOKENS,
        help="source tokens a batch (sentences * longest source); 1 decodes each sentence alone",
    )


def add_max_new_tokens_argument(parser) -> None:
    """`--max-new-tokens`, one output limit for every sentence, to `parser` or one of its groups."""
    parser.add_argument(
        "--max-new-tokens",
        type=positive_int,
        default=None,
        help="fixed output limit (default: the checkpoint's generation_config.json, else each sentence its "
        f"source length + {PAPER_EXTRA_OUTPUT_TOKENS}, the paper's)",
    )


def add_device_argument(parser) -> None:
    """`--device`, to `parser` or one of its groups."""
    parser.add_argument("--device", default="auto", help="cpu, cuda, cuda:1... (auto: the GPU if present)")


def add_dtype_argument(parser, several: bool = False) -> None:
    """`--dtype` of the weights and activations (one, or with `several` a list to measure), to `parser` or one
    of its groups."""
    parser.add_argument(
        "--dtype",
        nargs="+" if several else None,
        default=["float32"] if several else "float32",
        choices=["auto", *DTYPE_NAMES],
        help="weights and activations (the ctranslate2 engine takes --compute-type); auto: bfloat16 where "
        "the GPU or CPU runs it natively, float16 on a GPU without bfloat16, float32 otherwise"
        + ("; each is measured" if several else ""),
    )


def add_corpus_arguments(parser: argparse.ArgumentParser) -> None:
    """The input, the output and how a corpus goes between them; read them back with `corpus_settings`."""
    group = parser.add_argument_group("corpus (input and output)")
    group.add_argument(
        "--input",
        default="-",
        help=f"text file, one sentence a line, or compressed ({'/'.join(COMPRESSION_SUFFIXES)}); -: stdin",
    )
    group.add_argument(
        "--output",
        default="-",
        help="file to write atomically; from an --input file, its finished chunks are committed beside it "
        "(OUTPUT.chunks) so that the same command continues after a crash; -: stdout",
    )
    group.add_argument(
        "--chunk-lines",
        type=positive_int,
        default=DEFAULT_CHUNK_LINES,
        help="lines read, translated and committed at a time: memory and the work a crash loses grow with it",
    )
    group.add_argument(
        "--errors",
        choices=ERROR_HANDLERS,
        default="strict",
        help="a line that is not UTF-8: strict stops the run naming it; replace translates it with "
        "replacement characters",
    )
    group.add_argument(
        "--output-format",
        choices=OUTPUT_FORMATS,
        default="text",
        help="text: a line a translation; jsonl: a JSON object a translation, with its source line's index "
        "(from 0), rank and beam search's score",
    )
    group.add_argument(
        "--nbest",
        type=positive_int,
        default=1,
        help="write each line's N best translations (needs --num-beams N or more); in text, N lines a line",
    )
    group.add_argument(
        "--seed",
        type=int,
        default=0,
        help="random seed; each chunk draws from its own stream (this seed, the chunk's number), so sampled "
        "translations are the same resumed, sharded or not",
    )


def corpus_settings(args: argparse.Namespace) -> CorpusSettings:
    """The corpus settings of `add_corpus_arguments`."""
    return CorpusSettings(
        chunk_lines=args.chunk_lines,
        errors=args.errors,
        output_format=args.output_format,
        nbest=args.nbest,
        seed=args.seed,
    )


def add_dataset_arguments(parser: argparse.ArgumentParser) -> None:
    """The dataset (Hub name or local copy) and its config, the translation direction, and how many of each
    split's pairs; read them back with `translation_data`."""
    group = parser.add_argument_group("dataset")
    group.add_argument(
        "--dataset",
        nargs="+",
        default=[PUBLIC_MULTI30K],
        help="the data: " + ACCEPTED_FORMS + " (e.g. corpus.{lang}.gz validation=dev.tsv test=test.jsonl)",
    )
    group.add_argument("--dataset-config", default=None, help="Hub dataset config, e.g. de-en for wmt14")
    group.add_argument(
        "--source-lang", required=True, help="source language code (a column or translation key)"
    )
    group.add_argument("--target-lang", required=True, help="target language code")
    group.add_argument(
        "--first-pairs",
        type=positive_int,
        default=None,
        help="the first N pairs of each split only (default: all)",
    )


def translation_data(args: argparse.Namespace) -> TranslationData:
    """The dataset, direction and pairs of `add_dataset_arguments`."""
    return TranslationData(
        dataset_spec(args.dataset), args.source_lang, args.target_lang, args.dataset_config, args.first_pairs
    )


def add_tokenized_bleu_argument(parser: argparse.ArgumentParser) -> None:
    """`--tokenized-bleu`: the papers' tokenized, lowercased BLEU beside sacreBLEU (needs sacremoses)."""
    parser.add_argument(
        "--tokenized-bleu",
        action="store_true",
        help="also report BLEU on lowercased, Moses-tokenized text, as Multi30k papers print it "
        "(beside sacreBLEU, never instead; needs pip install 'hf_vanilla[tokenized]')",
    )


def add_tokenizer_sample_argument(parser: argparse.ArgumentParser) -> None:
    """`--tokenizer-sample-pairs`: how many random training pairs a new tokenizer learns from."""
    parser.add_argument(
        "--tokenizer-sample-pairs",
        type=positive_int,
        default=None,
        help="a tokenizer trained here learns from this many random training pairs, and the log says how "
        "long all would take (default: all)",
    )


def add_progress_argument(parser: argparse.ArgumentParser) -> None:
    """`--quiet`: no progress bar."""
    parser.add_argument("--quiet", action="store_true", help="no progress bar")


def positive_int(text: str) -> int:
    """An argparse type: a whole number of at least 1."""
    value = int(text)
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be at least 1, got {value}")
    return value
