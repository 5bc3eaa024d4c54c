"""Plot a saved model's attention for one sentence: encoder self-, decoder self- and cross-attention.

Writes one PNG per attention kind and layer (a grid of heads, tokens on the axes) into --output-dir.
The target side is --target when given (teacher-forced), else the model's own greedy translation.

    python scripts/tools/plot_attention.py outputs/multi30k-small-de-en/checkpoint_best \\
        --source "Ein Hund rennt durch den Schnee." --target "A dog runs through the snow." \\
        --output-dir outputs/attention
"""

import sys

from hf_vanilla.checkpoints.loading import load_model_and_tokenizer
from hf_vanilla.cli import (
    ArgumentParser,
    add_device_argument,
    add_dtype_argument,
    add_logging_argument,
    add_model_argument,
    configure_logging,
    exits_on_missing_extra,
)
from hf_vanilla.tools.attention_plots import ATTENTION_KINDS, save_attention_plots, sentence_attentions


def build_parser() -> ArgumentParser:
    parser = ArgumentParser(description=__doc__)
    add_model_argument(parser)
    parser.add_argument("--source", required=True, help="source sentence")
    parser.add_argument(
        "--target", default=None, help="reference translation (default: the model's greedy one)"
    )
    parser.add_argument(
        "--kinds",
        nargs="+",
        default=list(ATTENTION_KINDS),
        choices=list(ATTENTION_KINDS),
        help="which attentions to draw",
    )
    parser.add_argument("--output-dir", default="outputs/attention", help="where the PNGs go")
    add_device_argument(parser)
    add_dtype_argument(parser)
    parser.add_argument("--dpi", type=int, default=120, help="resolution of the PNGs")
    add_logging_argument(parser)
    return parser


def main() -> None:
    args = build_parser().parse_args()
    configure_logging(args.log_level)

    try:
        model, tokenizer = load_model_and_tokenizer(
            args.model, args.device, args.dtype, attn_implementation="eager"
        )
        attentions = sentence_attentions(model, tokenizer, args.source, args.target)
    except (ValueError, FileNotFoundError) as err:
        sys.exit(f"error: {err}")
    print(f"source: {args.source}\ntarget ({'given' if args.target else 'greedy'}): {attentions.target_text}")
    for path in save_attention_plots(attentions, args.output_dir, tuple(args.kinds), args.dpi):
        print(f"wrote {path}")


if __name__ == "__main__":
    with exits_on_missing_extra():
        main()
