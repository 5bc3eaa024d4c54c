"""Minutes of training a run needed to reach a BLEU score: a peer model's, or one given.

Decodes every numbered checkpoint of the run on the split (what the flags leave open: as its generation config
says, else the paper's beam 4, length penalty 0.6) and takes each one's minutes from the run's log; writes
time_to_quality.json and time_to_quality.png. Compare only runs made side by side on one machine:

    python scripts/train.py --config configs/multi30k-small.yaml --output-dir RUN
    # PEER: the saved model to compare with, e.g. a MarianMTModel of the same shape trained for the same
    # minutes
    python scripts/tools/time_to_quality.py RUN --peer PEER --source-lang de --target-lang en
"""

import sys

from hf_vanilla.cli import (
    ArgumentParser,
    add_beam_arguments,
    add_dataset_arguments,
    add_logging_argument,
    add_runtime_arguments,
    beam_kwargs,
    cache_kwargs,
    configure_logging,
    exits_on_missing_extra,
    runtime_kwargs,
    translation_data,
)
from hf_vanilla.evaluation.scoring import Runtime
from hf_vanilla.tools.time_to_quality import QualityTarget, time_to_quality


def build_parser() -> ArgumentParser:
    parser = ArgumentParser(description=__doc__)
    parser.add_argument("run", help="a training run directory (its numbered checkpoints and train_log.jsonl)")
    parser.add_argument(
        "--peer", help="a saved seq2seq model whose BLEU, decoded the same way, is the target"
    )
    parser.add_argument("--target-bleu", type=float, help="the cased BLEU to reach (instead of --peer)")
    add_dataset_arguments(parser)
    parser.add_argument("--split", default="validation", help="the split to score on")
    add_beam_arguments(parser)
    add_runtime_arguments(parser)
    parser.add_argument("--output-dir", help="where the report and plot go (default: the run directory)")
    add_logging_argument(parser)
    return parser


def main() -> None:
    args = build_parser().parse_args()
    configure_logging(args.log_level)
    try:
        report = time_to_quality(
            args.run,
            translation_data(args),
            args.split,
            QualityTarget(peer=args.peer, bleu=args.target_bleu),
            Runtime(**runtime_kwargs(args), show_progress=False),
            args.output_dir,
            **cache_kwargs(args),
            **beam_kwargs(args),
        )
    except (ValueError, FileNotFoundError) as err:
        sys.exit(f"error: {err}")
    print(f"{args.split} ({report['sentences']} sentences), {report['checkpoints'][0]['signature']}")
    print(f"{'minutes':>7} {'BLEU':>6} {'lc':>6} {'chrF':>6}  checkpoint")
    for point in report["checkpoints"]:
        print(
            f"{point['minutes']:7.1f} {point['bleu']:6.2f} {point['bleu_lowercased']:6.2f} "
            f"{point['chrf']:6.2f}  {point['checkpoint']}"
        )
    target, reached = report["target"], report["reached"]
    if target is not None:
        where = f"after {reached['minutes']:.1f} minutes ({reached['checkpoint']})" if reached else "never"
        print(f"target {target['bleu']:.2f} ({target['source']}): reached {where}")


if __name__ == "__main__":
    with exits_on_missing_extra():
        main()
