"""Why the CPU loss goes in row blocks: the label-smoothed cross-entropy (forward and backward) and R-Drop's
symmetric KL, in `loss_block_rows` blocks and over every row at once, timed in turn in one process.

    python scripts/tools/benchmark_loss_blocks.py              # prints JSON with the CPU and the ratios
"""

import json
import statistics

import torch
import torch.nn.functional as F

from hf_vanilla.cli import ArgumentParser, add_logging_argument, configure_logging, positive_int
from hf_vanilla.precision import cpu_description
from hf_vanilla.tools.benchmark import interleaved_seconds
from hf_vanilla.training.loss import label_smoothed_cross_entropy, symmetric_kl


def cross_entropy_runs(rows: int, vocabulary: int) -> dict:
    """Forward and backward of the label-smoothed loss over (rows, vocabulary) logits, blocked and at once."""
    logits = torch.randn(rows, vocabulary, requires_grad=True)
    labels = torch.randint(0, vocabulary, (rows,))

    def blocked():
        logits.grad = None
        label_smoothed_cross_entropy(logits, labels, 0.1, rows).backward()

    def at_once():
        logits.grad = None
        (F.cross_entropy(logits, labels, label_smoothing=0.1, reduction="sum") / rows).backward()

    return {"blocked": blocked, "at_once": at_once}


def symmetric_kl_runs(rows: int, vocabulary: int) -> dict:
    """The symmetric KL over (rows, vocabulary) logits, blocked (as training runs it) and at once."""
    first, second, kept = torch.randn(rows, vocabulary), torch.randn(rows, vocabulary), torch.ones(rows)

    def at_once():
        p, q = first.log_softmax(-1), second.log_softmax(-1)
        (((p.exp() - q.exp()) * (p - q)).sum(-1) * kept).sum()

    return {"blocked": lambda: symmetric_kl(first, second, kept), "at_once": at_once}


def build_parser() -> ArgumentParser:
    parser = ArgumentParser(description=__doc__)
    parser.add_argument("--repeats", type=positive_int, default=10, help="timed rounds of each way")
    add_logging_argument(parser)
    return parser


def main() -> None:
    args = build_parser().parse_args()
    configure_logging(args.log_level)
    results = {"cpu": cpu_description(), "threads": torch.get_num_threads(), "torch": torch.__version__}
    for name, runs in (
        ("label_smoothed_cross_entropy 4096 x 8000", cross_entropy_runs(4096, 8000)),
        ("symmetric_kl 1900 x 5000", symmetric_kl_runs(1900, 5000)),
    ):
        seconds = interleaved_seconds(runs, args.repeats)
        median = {way: statistics.median(times) for way, times in seconds.items()}
        results[name] = {**median, "at_once / blocked": median["at_once"] / median["blocked"]}
    print(json.dumps(results, indent=2))


if __name__ == "__main__":
    main()
