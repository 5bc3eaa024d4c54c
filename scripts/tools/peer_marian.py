"""Train the same-budget peer of docs/results.md: transformers' MarianMTModel of `multi30k-small`'s shape, by
Seq2SeqTrainer, on a run's joint BPE for the same minutes, on this machine; then score it as ours are scored.

    python scripts/tools/peer_marian.py outputs/peer-marian-de-en --dataset /path/to/multi30k \\
        --source-lang de --target-lang en --tokenizer outputs/multi30k-bpe5k-de-en --minutes 30
    python scripts/evaluate_bleu.py outputs/peer-marian-de-en --dataset /path/to/multi30k \\
        --source-lang de --target-lang en --num-beams 4 --length-penalty 0.6
"""

import json

from hf_vanilla.cli import (
    ArgumentParser,
    add_dataset_arguments,
    add_logging_argument,
    configure_logging,
    exits_on_missing_extra,
    translation_data,
)
from hf_vanilla.tools.peer_marian import PeerRun, train_peer


def build_parser() -> ArgumentParser:
    parser = ArgumentParser(description=__doc__)
    parser.add_argument("output_dir", help="where the peer model, its tokenizer and peer_train.json go")
    add_dataset_arguments(parser)  # its training split is what the peer learns from
    parser.add_argument("--tokenizer", required=True, help="the joint BPE directory our run of the pair used")
    parser.add_argument("--minutes", type=float, default=30.0, help="wall-clock budget of training")
    add_logging_argument(parser)
    return parser


def main() -> None:
    args = build_parser().parse_args()
    configure_logging(args.log_level)
    data = translation_data(args)
    run = PeerRun(str(data.dataset), data.source_lang, data.target_lang, args.tokenizer, args.minutes)
    print(json.dumps(train_peer(run, args.output_dir)))


if __name__ == "__main__":
    with exits_on_missing_extra():
        main()
