#!/usr/bin/env bash
# The main job on a fresh machine: install, train a Multi30k recipe, choose on validation, report sacreBLEU.
#   bash scripts/quickstart.sh                # de->en, the 30-minute recipe (configs/multi30k-small.yaml)
#   bash scripts/quickstart.sh en de          # en->de (en fr, en cs with MULTI30K: the Hub's copy has only de, en)
#   bash scripts/quickstart.sh de en best     # the no-time-limit recipe (configs/multi30k-best.yaml)
# Trains configs/multi30k-RECIPE.yaml, chooses between the best, last and averaged checkpoints and the beam size /
# length penalty on validation BLEU, then decodes test2016 once (sacreBLEU, with the papers' tokenized BLEU beside
# it). An interrupted run continues where its last checkpoint left it when the same command is given again.
# Data: the Hub's bentrevett/multi30k; MULTI30K=PATH reads a local copy in the Hub translation layout instead
# (offline machines). PyTorch: an installed one is kept; where none is, the CPU build is installed (TORCH_PIP
# overrides what pip is asked for). Precision: chosen for the hardware (the log says which and why).
set -euo pipefail
cd "$(dirname "$0")/.."
source_lang=${1:-de}
target_lang=${2:-en}
recipe=${3:-small}
config=configs/multi30k-$recipe.yaml
if [ ! -f "$config" ]; then
    echo "quickstart: no recipe '$recipe' ($config does not exist); the recipes are:" \
        $(ls configs/multi30k-*.yaml | sed 's|configs/multi30k-\(.*\)\.yaml|\1|') >&2
    exit 2
fi
run=outputs/multi30k-$recipe-$source_lang-$target_lang
# One joint BPE for each language pair, whichever direction (a tokenizer refuses a run of another pair).
pair=$(printf '%s\n' "$source_lang" "$target_lang" | sort | paste -sd- -)
tokenizer=$(sed -n 's/^tokenizer: *\([^ ]*\)-de-en.*/\1/p' "$config")-$pair
dataset=${MULTI30K:-bentrevett/multi30k}
if [ -n "${MULTI30K:-}" ] && [ ! -d "$MULTI30K" ]; then
    echo "quickstart: MULTI30K=$MULTI30K is not a directory; give a local copy of Multi30k in the Hub layout" >&2
    exit 2
fi
echo "quickstart: $recipe recipe, $source_lang->$target_lang on $dataset, into $run"

if ! python3 -c "import torch" 2>/dev/null; then
    # A plain `pip install torch` pulls the CUDA build (gigabytes); for a GPU, install the torch for your CUDA first.
    echo "quickstart: no PyTorch installed; installing the CPU build (${TORCH_PIP:-from the PyTorch CPU wheel index})"
    # shellcheck disable=SC2086  # TORCH_PIP is a list of pip arguments
    python3 -m pip install --quiet ${TORCH_PIP:-torch --index-url https://download.pytorch.org/whl/cpu}
fi
python3 -m pip install --quiet -e ".[tensorboard,tokenized]"
# An existing run directory is continued; train.py decides what in it can resume (and says so when nothing can).
resume=
if [ -d "$run" ]; then resume=--resume; fi
python3 scripts/train.py --config "$config" --dataset "$dataset" --tokenizer "$tokenizer" \
    --source-lang "$source_lang" --target-lang "$target_lang" --output-dir "$run" $resume
python3 scripts/select_checkpoint.py "$run" --dataset "$dataset" \
    --source-lang "$source_lang" --target-lang "$target_lang" \
    --num-beams 4 8 --length-penalty 0.6 1.0 --tokenized-bleu --output-dir "$run/evaluation"
