"""Seconds an update of one recipe shape on one CPU core, no validation, on the seeded 5,000-pair de-en subset:

    PYTHONPATH=$PWD OMP_NUM_THREADS=1 python3 probe_cpu_rate.py NAME VOCAB D_FF MAX_TOKENS STEPS

(two at a time, one a core, as the sweep runs them)."""

import json
import sys
import time
from pathlib import Path

import torch

from hf_vanilla.tools.small_corpus import seeded_subset
from hf_vanilla.training.settings import load_training_config
from hf_vanilla.training.train import train

torch.set_num_threads(1)
name, vocab, d_ff, max_tokens, steps = sys.argv[1], *map(int, sys.argv[2:6])
data = seeded_subset(Path("../shared/datasets/multi30k"), 5000, 1, Path("/tmp/probe/multi30k-5000"))
config = load_training_config(
    dataset=str(data), source_lang="de", target_lang="en", tokenizer=f"/tmp/probe/bpe{vocab}",
    tokenizer_vocab_size=vocab, output_dir=f"/tmp/probe/run-{name}", model_preset="small",
    model_overrides={"d_ff": d_ff}, max_tokens=max_tokens, lr=1e-3, warmup=400, max_steps=steps,
    validation_split=None, tensorboard=False, log_interval=10,
)
started = time.monotonic()
train(config, overwrite_output_dir=True)
seconds = time.monotonic() - started
print(json.dumps({"name": name, "seconds": seconds, "steps": steps, "per_update": seconds / steps}))
