"""Run a search's tries side by side (train, then choose on validation), and list them all in one table.

Each try is train.py with the tries file's flags, then select_checkpoint.py on validation only. Results:
OUTPUT/tries.md (a Markdown table, best first) and OUTPUT/tries.json; each run in OUTPUT/NAME, its output in
OUTPUT/logs. Given again, every run resumes from its last checkpoint. Ctrl-C or SIGTERM stops every run with a
save. --only runs some of the file's tries; the table keeps the rows of those an earlier call ran into OUTPUT.

    python scripts/research/run_tries.py docs/research/tries/next-gpu.yaml --dataset PATH_TO_MULTI30K \\
        --parallel 4 --minutes 8 --output-dir outputs/tries
    # the commands it would run, nothing else:
    python scripts/research/run_tries.py docs/research/tries/next-gpu.yaml --check
    python scripts/research/run_tries.py docs/research/tries/next-gpu.yaml --only en-de-seed3 en-de-seed4 \\
        --output-dir outputs/tries
"""

import shlex
import signal
import sys
from pathlib import Path

from hf_vanilla.cli import ArgumentParser, add_logging_argument, configure_logging, positive_int
from hf_vanilla.research.tries import TRIES_TABLE, TriesError, load_tries, run_tries

SCRIPTS = Path(__file__).resolve().parents[1]  # train.py and select_checkpoint.py, which each try runs


def build_parser() -> ArgumentParser:
    parser = ArgumentParser(description=__doc__)
    parser.add_argument("tries_file", help="YAML: config, train and select flags, and tries (name: flags)")
    parser.add_argument(
        "--output-dir", default="outputs/tries", help="one run directory per try, logs, the table"
    )
    parser.add_argument("--dataset", help="Hub id or local copy for every try (default: each config's)")
    parser.add_argument(
        "--parallel", type=positive_int, default=1, help="tries training at once (a GPU fits several)"
    )
    parser.add_argument(
        "--minutes", type=float, help="train.py's --max-minutes for every try (default: none)"
    )
    parser.add_argument(
        "--only", nargs="+", metavar="NAME", help="run only these of the file's tries (default: all)"
    )
    parser.add_argument(
        "--check", action="store_true", help="check the tries and print their commands; run none"
    )
    add_logging_argument(parser)
    return parser


def main() -> None:
    args = build_parser().parse_args()
    configure_logging(args.log_level)
    try:
        if args.check:
            tries, select = load_tries(args.tries_file, args.dataset, args.minutes, args.only)
            for attempt in tries:
                print(f"{attempt.name}: python scripts/train.py {shlex.join(attempt.train_arguments)}")
            print(f"selection: python scripts/select_checkpoint.py RUN --report-split {shlex.join(select)}")
            return
        signal.signal(signal.SIGTERM, signal.default_int_handler)  # a stop that saves every run, as Ctrl-C
        rows = run_tries(
            args.tries_file, args.output_dir, SCRIPTS, args.parallel, args.dataset, args.minutes, args.only
        )
    except TriesError as err:
        sys.exit(f"error: {err}")
    except KeyboardInterrupt:
        sys.exit(
            f"stopped: every run saved; {Path(args.output_dir) / TRIES_TABLE} lists the tries that ended"
        )
    print((Path(args.output_dir) / TRIES_TABLE).read_text(), end="")
    failed = [row["name"] for row in rows if row["training_exit"] != 0 or row.get("selection_exit", 0) != 0]
    if failed:
        sys.exit(
            f"{len(failed)} of {len(rows)} tries did not end cleanly: {', '.join(failed)} (logs in "
            f"{args.output_dir}/logs)"
        )


if __name__ == "__main__":
    main()
