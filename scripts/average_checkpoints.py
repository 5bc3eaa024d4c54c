"""Average the weights of the last N numbered checkpoints of a run into one model directory (paper section 6.1)."""

import argparse
import sys
from pathlib import Path

from hf_vanilla.checkpoints import average_checkpoints, numbered_checkpoints


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("run", help="training output directory holding checkpoint_<step> directories")
    parser.add_argument(
        "-n", "--last", type=int, default=5, help="how many of the latest checkpoints (base: 5, big: 20)"
    )
    parser.add_argument("--output", help="directory to write (default: RUN/checkpoint_average)")
    args = parser.parse_args()
    run = Path(args.run)
    if not run.is_dir():
        sys.exit(f"error: {run} is not a directory")
    checkpoints = numbered_checkpoints(run)[-args.last :]
    if len(checkpoints) < args.last:
        sys.exit(f"error: {run} holds {len(checkpoints)} numbered checkpoints, fewer than {args.last}")
    try:
        written = average_checkpoints(checkpoints, args.output or run / "checkpoint_average")
    except ValueError as err:
        sys.exit(f"error: {err}")
    print(f"averaged {', '.join(path.name for path in checkpoints)} into {written}")


if __name__ == "__main__":
    main()
