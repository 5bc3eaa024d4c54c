"""The speed-quality frontier of a teacher and its fast students, in one run on the same sentences:
the teacher, the teacher + shortlist, and each student (named by its encoder and decoder layers) with and
without its shortlist, all on the ctranslate2 engine in one compute type (int8 by default) with --threads
threads, each with its own selected decoding (its generation config; the beam flags override them all).
For each: offline decoding (`translate`, --repeats timings taken in turn), the service under --clients
concurrent clients (one sentence a request), and the sacreBLEU of its offline translations; the rates' ratios
to the teacher's; the CPU named. Writes a JSON report to --output and the frontier (sentences/s against BLEU)
to --plot.

The teacher's shortlist is the first student's vocab_map.txt (scripts/research/make_student.py): the teacher
shares its vocabulary, and decodes with it from a scratch copy.

    python scripts/tools/benchmark_student.py --teacher outputs/multi30k-small-de-en/model \\
        --student outputs/multi30k-student-mix-de-en/student outputs/multi30k-student-de-en/student \\
        --dataset bentrevett/multi30k --source-lang de --target-lang en --threads 1 --clients 32 \\
        --output docs/benchmarks/student-int8-epyc-2core.json --plot docs/images/student-frontier.png
"""

import functools
import itertools
import json
import os
import shutil
import sys
import tempfile
from pathlib import Path

from _server_process import ServerProcess  # beside this script
from benchmark_serving import STARTUP_SECONDS, load, offline

from hf_vanilla.checkpoints.loading import decoding_for, load_config
from hf_vanilla.cli import (
    ArgumentParser,
    add_beam_arguments,
    add_dataset_arguments,
    add_logging_argument,
    add_max_new_tokens_argument,
    add_max_tokens_argument,
    configure_logging,
    decoding_options,
    exits_on_missing_extra,
    positive_int,
    translation_data,
)
from hf_vanilla.evaluation.scoring import score_translations
from hf_vanilla.files import write_json
from hf_vanilla.research.student import STUDENT_DIR
from hf_vanilla.tools.machine import run_record
from hf_vanilla.translation.decoding import Batching
from hf_vanilla.translation.engines import COMPUTE_TYPES, EngineSettings, load_engine
from hf_vanilla.translation.engines.base import CTRANSLATE2
from hf_vanilla.translation.shortlist import VOCAB_MAP_FILE

BASELINE = "teacher"


def build_parser() -> ArgumentParser:
    parser = ArgumentParser(description=__doc__)
    parser.add_argument("--teacher", required=True, help="the teacher's checkpoint directory")
    parser.add_argument(
        "--student", required=True, nargs="+", help="students' directories, each with its vocab_map.txt"
    )
    add_dataset_arguments(parser)
    parser.add_argument("--split", default="test", help="the split whose sources are decoded and scored")
    parser.add_argument(
        "--compute-type", choices=COMPUTE_TYPES, default="int8", help="the ctranslate2 engine's, for all four"
    )
    parser.add_argument("--threads", type=positive_int, default=1, help="CPU threads, a replica each")
    parser.add_argument("--clients", type=positive_int, default=32, help="concurrent clients of the service")
    parser.add_argument(
        "--requests", type=positive_int, default=2000, help="requests to each service (the sentences in turn)"
    )
    parser.add_argument(
        "--repeats", type=positive_int, default=3, help="timings of each offline decoding, taken in turn"
    )
    parser.add_argument("--offline-only", action="store_true", help="decode offline only, no service")
    add_beam_arguments(parser)
    add_max_tokens_argument(parser)
    add_max_new_tokens_argument(parser)
    parser.add_argument("--output", default="docs/benchmarks/student.json", help="the JSON report")
    parser.add_argument("--plot", default=None, help="the frontier's PNG (default: none)")
    add_logging_argument(parser)
    return parser


def systems(args, scratch: Path) -> dict[str, tuple[str, bool]]:
    """The systems by name: a model directory and whether it decodes with a shortlist (the teacher's: the
    first student's, from a scratch copy holding it)."""
    shortlisted_teacher = shutil.copytree(args.teacher, scratch / "teacher-with-shortlist")
    shutil.copy(Path(args.student[0]) / VOCAB_MAP_FILE, shortlisted_teacher / VOCAB_MAP_FILE)
    measured = {BASELINE: (args.teacher, False), f"{BASELINE} + shortlist": (str(shortlisted_teacher), True)}
    for name, student in zip(student_names(args.student), args.student, strict=True):
        measured |= {name: (student, False), f"{name} + shortlist": (student, True)}
    return measured


def student_names(students: list[str]) -> list[str]:
    """Each student's name in the report: "student E-D" by its encoder and decoder layers, followed by its
    work directory's name (make_student.py's OUTPUT_DIR, or the folder itself) where two share a shape."""
    configs = [load_config(student) for student in students]
    shapes = [f"student {config.encoder_layers}-{config.decoder_layers}" for config in configs]
    if len(set(shapes)) == len(shapes):
        return shapes
    folders = [Path(student).resolve() for student in students]
    work_dirs = [folder.parent.name if folder.name == STUDENT_DIR else folder.name for folder in folders]
    if len(set(work_dirs)) < len(work_dirs):
        work_dirs = list(students)
    return [f"{shape} ({work_dir})" for shape, work_dir in zip(shapes, work_dirs, strict=True)]


def engine_settings(args, vocab_map: bool, cache_dir: Path) -> EngineSettings:
    return EngineSettings(
        CTRANSLATE2,
        "cpu",
        compute_type=args.compute_type,
        ctranslate2_dir=cache_dir,
        threads=args.threads,
        vocab_map=vocab_map,
    )


def server_flags(args, settings: EngineSettings) -> tuple[str, ...]:
    """serve.py's flags for `settings`."""
    vocab_map = ("--vocab-map",) if settings.vocab_map else ()
    return (
        "--device", "cpu", "--engine", CTRANSLATE2, "--compute-type", settings.compute_type,
        "--ctranslate2-dir", str(settings.ctranslate2_dir), "--threads", str(settings.threads),
        "--max-tokens", str(args.max_tokens), *vocab_map,
    )  # fmt: skip


def service_run(args, model: str, settings: EngineSettings, decoding: dict, sentences: list[str], log: Path):
    """The service on `model` under `args.clients` clients: `benchmark_serving.load`'s record."""
    server = ServerProcess(model, log, server_flags(args, settings), settings.threads)
    try:
        server.wait_until_ready(STARTUP_SECONDS)
        return load(server, sentences, args.requests, args.clients, decoding)
    finally:
        server.stop()


def measure(args, sentences: list[str], references: list[str], target_lang: str, scratch: Path) -> dict:
    """Every system decoded offline (timed in turn) and scored, then served, each with its own decoding."""
    decoders, decodings, translations, settings = {}, {}, {}, {}
    measured = systems(args, scratch)
    batching = Batching(args.max_tokens, show_progress=False)
    for name, (model, vocab_map) in measured.items():
        options, _ = decoding_for(model, decoding_options(args))
        decodings[name] = options.generate_kwargs()
        settings[name] = engine_settings(args, vocab_map, scratch / "ctranslate2")
        engine = load_engine(model, settings[name])
        translations[name] = engine.translate(sentences, options, batching)
        decoders[name] = functools.partial(engine.translate, options=options, batching=batching)
    timings = offline(args, sentences, decoders)
    report = {}
    for name, (model, vocab_map) in measured.items():
        bleu = score_translations(translations[name], references, target_lang=target_lang)["bleu"]
        report[name] = {
            "model": model,
            "vocab_map": vocab_map,
            "decoding": decodings[name],
            "bleu": round(bleu, 2),
            "offline": timings[name],
        }
        if not args.offline_only:
            log = scratch / f"serve-{len(report)}.log"
            served = service_run(args, model, settings[name], decodings[name], sentences, log)
            report[name]["service"] = served
    return report


def ratios(report: dict) -> dict:
    """Each system's sentences/s over the teacher's, offline and in the service, and its BLEU minus the
    teacher's."""
    teacher = report[BASELINE]

    def rate(run: dict, where: str) -> float:
        return run[where]["sentences_per_second"]

    return {
        name: {
            **{
                f"{where} / {BASELINE}": round(rate(run, where) / rate(teacher, where), 3)
                for where in ("offline", "service")
                if where in run
            },
            f"bleu - {BASELINE}": round(run["bleu"] - teacher["bleu"], 2),
        }
        for name, run in report.items()
    }


def plot_frontier(report: dict, path: str) -> None:
    """Sentences/s against BLEU: a colour a system, a circle offline and a square in the service."""
    import matplotlib

    matplotlib.use("Agg")
    from matplotlib import pyplot

    figure, axes = pyplot.subplots(figsize=(10, 4.5))
    colors = itertools.cycle(pyplot.rcParams["axes.prop_cycle"].by_key()["color"])
    for (name, run), color in zip(report.items(), colors, strict=False):
        for where, marker in (("offline", "o"), ("service", "s")):
            if where in run:
                rate = run[where]["sentences_per_second"]
                axes.scatter(rate, run["bleu"], marker=marker, color=color, label=f"{name}: {where}")
    axes.set_xlabel("sentences/s")
    axes.set_ylabel("BLEU")
    axes.set_title("Teacher and student: speed against quality")
    axes.legend(fontsize=7, loc="upper left", bbox_to_anchor=(1.02, 1.0))
    figure.tight_layout()
    figure.savefig(path, dpi=120)
    pyplot.close(figure)


def main() -> None:
    args = build_parser().parse_args()
    configure_logging(args.log_level)
    for student in args.student:
        if not (Path(student) / VOCAB_MAP_FILE).is_file():
            sys.exit(f"error: {student} has no {VOCAB_MAP_FILE}: give a student that make_student.py made")
    data = translation_data(args)
    pairs = data.pairs(args.split)
    sentences, references = list(pairs["source"]), list(pairs["target"])
    load_before = os.getloadavg()
    with tempfile.TemporaryDirectory() as scratch:
        systems_report = measure(args, sentences, references, data.target_lang, Path(scratch))
    report = {
        **run_record(load_before),
        "engine": CTRANSLATE2,
        "compute_type": args.compute_type,
        "threads": args.threads,
        "clients": None if args.offline_only else args.clients,
        "dataset": f"{data.dataset} {args.split} ({args.source_lang}), {len(sentences)} sentences",
        "ratios": ratios(systems_report),
        "systems": systems_report,
    }
    write_json(args.output, report)
    if args.plot:
        plot_frontier(systems_report, args.plot)
    print(json.dumps(report, indent=2))


if __name__ == "__main__":
    with exits_on_missing_extra():
        main()
