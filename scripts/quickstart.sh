#!/usr/bin/env bash
# The main job on a fresh machine: install, train the 30-minute Multi30k recipe, report sacreBLEU.
#   bash scripts/quickstart.sh            # de->en
#   bash scripts/quickstart.sh en de      # en->de
# Trains configs/multi30k-small.yaml (30 minutes of wall clock on 2 CPU cores), chooses between the best,
# last and averaged checkpoints and the beam size / length penalty on validation BLEU, then reports test2016.
# Data: the Hub's bentrevett/multi30k, or the local copy at ../shared/datasets/multi30k where that folder exists
# (an offline workspace); MULTI30K=PATH names another local copy. Precision: chosen for the hardware (the log says
# which and why).
set -euo pipefail
cd "$(dirname "$0")/.."
source_lang=${1:-de}
target_lang=${2:-en}
run=outputs/multi30k-small-$source_lang-$target_lang
dataset=${MULTI30K:-bentrevett/multi30k}
if [ -z "${MULTI30K:-}" ] && [ -d ../shared/datasets/multi30k ]; then
    dataset=../shared/datasets/multi30k
fi
echo "quickstart: $source_lang->$target_lang on $dataset, into $run"

python3 -m pip install --quiet torch==2.13.0
python3 -m pip install --quiet -e ".[tensorboard]"
python3 scripts/train.py --config configs/multi30k-small.yaml --dataset "$dataset" \
    --source-lang "$source_lang" --target-lang "$target_lang" --output-dir "$run"
python3 scripts/select_checkpoint.py "$run" --dataset "$dataset" \
    --source-lang "$source_lang" --target-lang "$target_lang" \
    --num-beams 4 8 --length-penalty 0.6 1.0 --output-dir "$run/evaluation"
