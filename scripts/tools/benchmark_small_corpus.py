"""The small-corpus sweep: the corpus-size recipe, the fixed recipe and a MarianMT baseline, each trained on
seeded subsets of Multi30k (5,000 and 10,000 pairs) for the same minutes on one core, scored on test2016
(BLEU, chrF).

    python scripts/tools/benchmark_small_corpus.py --multi30k PATH/TO/multi30k          # 12 runs of 20
    minutes python scripts/tools/benchmark_small_corpus.py --multi30k PATH --minutes 1 --sizes 5000 --pairs
    de-en --output /tmp/check.json

Writes one JSON (the machine, the settings and a row a run) after every run; docs/your-data.md explains the
rows.
"""

import os
import sys
from pathlib import Path

from hf_vanilla.cli import ArgumentParser, add_logging_argument, configure_logging
from hf_vanilla.tools.small_corpus import LANGUAGE_PAIRS, RECIPES, SIZES, Sweep, run_sweep
from hf_vanilla.training.settings import TrainingError


def main() -> None:
    parser = ArgumentParser(description=__doc__)
    parser.add_argument(
        "--multi30k", default=os.environ.get("MULTI30K"), help="Multi30k in the Hub translation layout (or "
            "$MULTI30K)"
    )
    parser.add_argument("--minutes", type=float, default=20.0, help="training minutes a run")
    parser.add_argument("--sizes", type=int, nargs="+", default=list(SIZES), help="training pairs of each "
        "subset")
    parser.add_argument("--pairs", nargs="+", default=list(LANGUAGE_PAIRS), help="language pairs, as de-en")
    parser.add_argument("--seed", type=int, default=1, help="seed of the subsets and the runs")
    parser.add_argument(
        "--recipes", nargs="+", choices=RECIPES, default=list(RECIPES), help="the recipes trained, in this "
            "order"
    )
    parser.add_argument("--work-dir", default="outputs/small-corpus", help="where the subsets and runs go")
    parser.add_argument(
        "--output", default="docs/benchmarks/small-corpus-1thread.json", help="the JSON report"
    )
    add_logging_argument(parser)
    args = parser.parse_args()
    configure_logging(args.log_level)
    if not args.multi30k or not (Path(args.multi30k) / "train.jsonl").is_file():
        sys.exit(
            "error: --multi30k (or $MULTI30K) must name a folder with train.jsonl, validation.jsonl, "
            "test.jsonl"
        )
    malformed = [pair for pair in args.pairs if len(pair.split("-")) != 2]
    if malformed:
        sys.exit(
            f"error: --pairs takes SOURCE-TARGET language codes such as de-en, got {' '.join(malformed)}"
        )
    sweep = Sweep(
        Path(args.multi30k),
        Path(args.work_dir),
        args.minutes,
        tuple(args.sizes),
        tuple(args.pairs),
        args.seed,
        tuple(args.recipes),
    )
    try:
        run_sweep(sweep, Path(args.output))
    except (TrainingError, ValueError) as err:
        sys.exit(f"error: {err}")
    print(f"wrote {args.output}")


if __name__ == "__main__":
    main()
