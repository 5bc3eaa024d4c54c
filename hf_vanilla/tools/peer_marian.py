"""The same-budget peer: what a transformers user trains instead of this package, to compare on the same work.

transformers' own MarianMTModel of `multi30k-small`'s shape (post-LN, ReLU, sinusoidal positions, one shared
embedding; `hf_vanilla.tools.small_corpus.train_marian`), trained by Seq2SeqTrainer on the run's own joint BPE
for the same minutes of wall clock, on the same machine: machines differ (native bf16 or not), so compare only
runs made side by side on one. The saved directory is a plain MarianMTModel, which `evaluate_bleu.py`,
`select_checkpoint.py` and `time_to_quality.py --peer` decode as they decode ours.
"""

from __future__ import annotations

import os
import time
from dataclasses import asdict, dataclass
from pathlib import Path

from hf_vanilla.files import write_json
from hf_vanilla.precision import cpu_description
from hf_vanilla.tools.small_corpus import train_marian

RECORD_FILE = "peer_train.json"


@dataclass(frozen=True)
class PeerRun:
    """What the peer trains on: `dataset` (a local copy in the Hub translation layout, or any form
    `load_translation_split` reads) from `source_lang` to `target_lang`, with the BPE in `tokenizer`, for
    `minutes` of wall clock."""

    dataset: str
    source_lang: str
    target_lang: str
    tokenizer: str
    minutes: float = 30.0


def train_peer(run: PeerRun, output_dir: str | os.PathLike) -> dict:
    """Train the peer into `output_dir` and write its record there (`peer_train.json`: updates, wall clock,
    parameters, what it was given, the CPU); returns the record."""
    output_dir = Path(output_dir)
    started = time.monotonic()
    model_dir, facts = train_marian(
        Path(run.tokenizer), Path(run.dataset), (run.source_lang, run.target_lang), run.minutes, output_dir
    )
    record = {
        **facts,
        "wall_seconds": round(time.monotonic() - started),
        "given": asdict(run),
        "machine": cpu_description(),
    }
    write_json(Path(model_dir) / RECORD_FILE, record)
    return record
