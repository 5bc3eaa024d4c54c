"""Throwaway exploration for the corpus-size table's small rows, run on a lent H200 (16 CPU cores): validation-BLEU
curves (greedy, whole validation split, every few hundred updates) of recipe variants on seeded Multi30k subsets,
all runs of a round side by side on the one GPU, each stopped by the round's deadline; round 1 also trained a
multi30k-small de->en checkpoint (CHECKPOINT_STEPS) for the serving benchmark. Run from the repository root, with a
folder CARRY holding this script, multi30k/ (Hub translation layout) and the wheels the device lacked:

    ROUND=1 CARRY=.devcarry WORK=/tmp/gx DEADLINE=470 CHECKPOINT_STEPS=5000 python3 .devcarry/explore.py
    ROUND=2 CARRY=.devcarry WORK=/tmp/gx DEADLINE=200 python3 .devcarry/explore.py

Writes $OUT/curves.json (round1-curves.json, round2-curves.json here)."""
import json
import os
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(os.environ.get("CARRY", Path(__file__).resolve().parent))
WORK = Path(os.environ.get("WORK", "/tmp/explore"))
OUT = Path(os.environ.get("OUT", "/tmp/out"))
DEADLINE = float(os.environ.get("DEADLINE", "500"))
SCALE = float(os.environ.get("SCALE", "1"))  # 1 on the device; small locally to test the script

COMMON = dict(lr=1e-3, warmup=400, attention_dropout=0.0, activation_dropout=0.0, layer_dropout=0.0,
              source_word_dropout=0.0, target_word_dropout=0.0)
FIXED = dict(COMMON, tokenizer_vocab_size=5000, d_ff=1024, max_tokens=2048, dropout=0.2, early_dropout_updates=2000,
             early_dropout=0.1, label_smoothing=0.1)
F2 = dict(FIXED, tokenizer_vocab_size=2000, max_tokens=1024)
LIGHT = dict(COMMON, tokenizer_vocab_size=2000, d_ff=512, max_tokens=1024, dropout=0.3, attention_dropout=0.1)
ROUNDS = {
    # Round 1: the literature's low-resource regularisation against the fixed recipe, 5k and 10k pairs.
    "1": {
        "variants": {
            "fixed": FIXED,
            "table": dict(LIGHT, activation_dropout=0.3, layer_dropout=0.1, source_word_dropout=0.1,
                          target_word_dropout=0.1, label_smoothing=0.2),
            "light": dict(LIGHT, activation_dropout=0.1, label_smoothing=0.1),
            "light-lr2": dict(LIGHT, activation_dropout=0.1, label_smoothing=0.1, lr=2e-3),
            "light-d2": dict(LIGHT, dropout=0.2, label_smoothing=0.1),
            "light-word": dict(LIGHT, activation_dropout=0.1, source_word_dropout=0.1, label_smoothing=0.2),
            "fixed-bpe2k-1024": F2,
            "light-bpe5k": dict(LIGHT, tokenizer_vocab_size=5000, activation_dropout=0.1, label_smoothing=0.1),
        },
        "cells": [(5000, "de", "en"), (5000, "en", "cs"), (10000, "de", "en"), (10000, "en", "cs")],
        "steps": {1024: 5400, 2048: 2400},
    },
    # Round 2: the fixed recipe's neighbours (BPE, d_ff, late dropout 0.3), 5k pairs.
    "2": {
        "variants": {
            "fixed-bpe2k-1024": F2,
            "fixed-bpe2k-d512-1024": dict(F2, d_ff=512),
            "late03-bpe2k-1024": dict(F2, dropout=0.3, early_dropout_updates=1500),
            "late03-bpe2k-d512-1024": dict(F2, d_ff=512, dropout=0.3, early_dropout_updates=1500),
            "fixed-bpe5k-1024": dict(FIXED, max_tokens=1024),
        },
        "cells": [(5000, "de", "en"), (5000, "en", "cs")],
        "steps": {1024: 4200, 2048: 2400},
    },
}
ROUND = ROUNDS[os.environ.get("ROUND", "2")]
VARIANTS, CELLS, STEPS = ROUND["variants"], ROUND["cells"], ROUND["steps"]
EVERY = {1024: 300, 2048: 150}


def child(spec):
    import torch
    torch.set_num_threads(1)
    from hf_vanilla.training.settings import load_training_config
    from hf_vanilla.training.train import train
    v = dict(spec["variant"])
    d_ff = v.pop("d_ff")
    steps = max(4, int(STEPS[v["max_tokens"]] * SCALE))
    every = max(2, int(EVERY[v["max_tokens"]] * SCALE))
    config = load_training_config(dataset=spec["data"], source_lang=spec["source"], target_lang=spec["target"],
        tokenizer=spec["tokenizer"], output_dir=spec["run"], model_preset="small", model_overrides={"d_ff": d_ff},
        max_steps=steps, save_interval_updates=every, keep_checkpoints=1, average_last=None,
        validation_max_sentences=spec.get("validation_max_sentences"), tensorboard=False, seed=1, log_interval=100, **v)
    train(config, overwrite_output_dir=True)


def prepare(multi30k):
    from hf_vanilla.corpus import load_translation_split
    from hf_vanilla.tokenization import PairsSource, train_tokenizer_on_pairs
    from hf_vanilla.tools.small_corpus import seeded_subset
    jobs = []
    for size, source, target in CELLS:
        data = seeded_subset(multi30k, size, 1, WORK / f"multi30k-{size}")
        for vocab in sorted({v["tokenizer_vocab_size"] for v in VARIANTS.values()}):
            path = WORK / f"bpe-{size}-{source}-{target}-{vocab}"
            if not path.exists():
                pairs = load_translation_split(str(data), source, target, "train")
                train_tokenizer_on_pairs(pairs, path, vocab, PairsSource((source, target), str(data), "train"))
        for name, variant in VARIANTS.items():
            jobs.append(dict(name=name, size=size, source=source, target=target, data=str(data), variant=variant,
                             tokenizer=str(WORK / f"bpe-{size}-{source}-{target}-{variant['tokenizer_vocab_size']}"),
                             run=str(WORK / f"{size}-{source}-{target}-{name}")))
    return jobs


def curve(run):
    points = []
    log = Path(run) / "train_log.jsonl"
    if log.exists():
        for line in log.read_text().splitlines():
            record = json.loads(line)
            if "val_bleu" in record:
                points.append([record.get("step"), record.get("val_bleu"), record.get("val_loss")])
    return points


def main():
    started = time.monotonic()
    OUT.mkdir(parents=True, exist_ok=True)
    WORK.mkdir(parents=True, exist_ok=True)
    jobs = prepare(ROOT / "multi30k")[: int(os.environ.get("JOBS", "1000"))]
    print(f"prepared in {time.monotonic() - started:.0f} s", flush=True)
    env = dict(os.environ, OMP_NUM_THREADS="1", PYTHONPATH=str(ROOT.parent) + ":" + os.environ.get("PYTHONPATH", ""))
    procs = []
    for job in jobs:
        log = open(WORK / (Path(job["run"]).name + ".log"), "w")
        procs.append((job, subprocess.Popen([sys.executable, __file__, "child", json.dumps(job)], env=env,
                                            stdout=log, stderr=subprocess.STDOUT)))
    if os.environ.get("CHECKPOINT_STEPS"):
        ck = dict(name="multi30k-small", run=str(WORK / "multi30k-small-de-en"))
        log = open(WORK / "multi30k-small.log", "w")
        procs.append((ck, subprocess.Popen([sys.executable, "scripts/train.py", "--config", "configs/multi30k-small.yaml",
            "--dataset", str(ROOT / "multi30k"), "--output-dir", ck["run"], "--tokenizer", str(WORK / "bpe5k-de-en"),
            "--max-minutes", "60", "--max-steps", os.environ["CHECKPOINT_STEPS"], "--save-interval-updates", "500",
            "--no-tensorboard"], env=env, cwd=ROOT.parent, stdout=log, stderr=subprocess.STDOUT)))
    while any(p.poll() is None for _, p in procs) and time.monotonic() - started < DEADLINE:
        time.sleep(5)
        write(procs, started)
    for _, p in procs:
        if p.poll() is None:
            p.kill()
    write(procs, started)
    ck = WORK / "multi30k-small-de-en"
    if os.environ.get("CHECKPOINT_STEPS") and (ck / "checkpoint_average").is_dir():
        subprocess.run(f"tar -C {ck} -cf {WORK}/ck.tar checkpoint_average train_log.jsonl training_config.yaml && "
                       f"split -b 15m {WORK}/ck.tar {OUT}/ck.tar.", shell=True)
    tails = {Path(job["run"]).name: (WORK / (Path(job["run"]).name + ".log")).read_text()[-1500:]
             for job, p in procs if p.returncode not in (0, None)}
    (OUT / "failures.json").write_text(json.dumps(tails, indent=1))


def write(procs, started):
    rows = [dict(name=job["name"], size=job.get("size"), pair=f"{job.get('source')}-{job.get('target')}",
                 returncode=p.poll(), curve=curve(job["run"])) for job, p in procs]
    (OUT / "curves.json").write_text(json.dumps({"seconds": round(time.monotonic() - started), "rows": rows,
                                                 "variants": VARIANTS, "steps": STEPS}, indent=1))


if __name__ == "__main__":
    if sys.argv[1:2] == ["child"]:
        child(json.loads(sys.argv[2]))
    else:
        main()
