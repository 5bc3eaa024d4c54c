#!/usr/bin/env bash
# The main job on a fresh machine: install, train a Multi30k recipe, choose on validation, report sacreBLEU.
#   bash scripts/quickstart.sh de en smoke    # the whole pipeline in minutes (configs/multi30k-smoke.yaml)
#   bash scripts/quickstart.sh                # de->en, the 30-minute recipe (configs/multi30k-small.yaml)
#   bash scripts/quickstart.sh en de          # en->de (en fr, en cs with MULTI30K: the Hub's copy has only de, en)
#   bash scripts/quickstart.sh de en best     # the no-time-limit recipe (configs/multi30k-best.yaml)
# Trains configs/multi30k-RECIPE.yaml, chooses between the best, last and averaged checkpoints and the beam size /
# length penalty on validation BLEU, then decodes test2016 once (sacreBLEU, with the papers' tokenized BLEU beside
# it). An interrupted run continues where its last checkpoint left it when the same command is given again.
# Data: the Hub's bentrevett/multi30k; MULTI30K=PATH reads a local copy in the Hub translation layout instead
# (offline machines). PyTorch: an installed one is kept; where none is, the CPU build is installed (TORCH_PIP
# overrides what pip is asked for). Precision: chosen for the hardware (the log says which and why).
# Install: the package with its tensorboard and tokenized extras, except offline: with MULTI30K set and the
# package (and sacremoses) importable, nothing is installed; QUICKSTART_SKIP_INSTALL=1 keeps the package as
# it is in any case. QUICKSTART_OUTPUTS=DIR writes the tokenizer and the run under DIR instead of outputs/;
# QUICKSTART_TRAIN_ARGS adds flags to train.py (e.g. "--max-steps 5 --max-minutes null").
# It ends with the three commands that use the run's model, RUN/model: translate a line, serve it, evaluate
# it.
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
outputs=${QUICKSTART_OUTPUTS:-outputs}
run=$outputs/multi30k-$recipe-$source_lang-$target_lang
# One joint BPE for each language pair, whichever direction (a tokenizer refuses a run of another pair).
pair=$(printf '%s\n' "$source_lang" "$target_lang" | sort | paste -sd- -)
tokenizer=$outputs/$(sed -n 's|^tokenizer: *outputs/\([^ ]*\)-de-en.*|\1|p' "$config")-$pair
# The validation decodings that choose checkpoint and beam: few for the smoke recipe, to stay in its minutes.
case $recipe in
    # One thread unless told: a model of d_model 64 has little work to share between threads, and on cores others
    # use, two threads waiting on each other made 26 updates in the minute where one made 451 (troubleshooting.md).
    smoke) grid=(--num-beams 1 4 --length-penalty 0.6 --validation-pairs 100)
        export OMP_NUM_THREADS=${OMP_NUM_THREADS:-1} ;;
    *) grid=(--num-beams 4 8 --length-penalty 0.6 1.0) ;;
esac
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
# Imported from another directory, so that the clone's own folder does not pass for an installed package.
if [ "${QUICKSTART_SKIP_INSTALL:-}" = 1 ]; then
    :
elif [ -n "${MULTI30K:-}" ] && (cd / && python3 -c "import hf_vanilla, sacremoses") 2>/dev/null; then
    echo "quickstart: MULTI30K is set and hf_vanilla is importable: installing nothing"
else
    python3 -m pip install --quiet -e ".[tensorboard,tokenized]"
fi
# An existing run directory is continued; train.py decides what in it can resume (and says so when nothing can).
resume=
if [ -d "$run" ]; then resume=--resume; fi
python3 scripts/train.py --config "$config" --dataset "$dataset" --tokenizer "$tokenizer" \
    --source-lang "$source_lang" --target-lang "$target_lang" --output-dir "$run" $resume \
    ${QUICKSTART_TRAIN_ARGS:-}
python3 scripts/select_checkpoint.py "$run" --dataset "$dataset" \
    --source-lang "$source_lang" --target-lang "$target_lang" \
    "${grid[@]}" --tokenized-bleu --output-dir "$run/evaluation"
chosen=$(python3 -c 'import json, sys; print(json.load(open(sys.argv[1]))["chosen"]["model"])' \
    "$run/evaluation/selection.json")
echo "quickstart: the chosen model is $chosen (its model card: $chosen/README.md); test translations and" \
    "BLEU reports: $run/evaluation; the training log: $run/train_log.jsonl"
if [ "$recipe" = smoke ]; then
    echo "quickstart: the smoke recipe trains for a minute, so its BLEU is low; the 30-minute recipe that" \
        "translates: bash scripts/quickstart.sh $source_lang $target_lang"
fi
case $source_lang in
    de) sentence="Ein Hund rennt durch den Schnee." ;;
    fr) sentence="Un chien court dans la neige." ;;
    cs) sentence="Pes běží sněhem." ;;
    *) sentence="A dog runs through the snow." ;;
esac
model=$run/model
echo "quickstart: the model to use is $model (the chosen checkpoint, its decoding defaults and card):" \
    "translate a line, serve it, evaluate it with"
printf 'echo %q | python3 scripts/translate.py %q\n' "$sentence" "$model"
printf 'python3 scripts/serve.py %q --port 8000\n' "$model"
printf 'python3 scripts/evaluate_bleu.py %q --dataset %q --source-lang %q --target-lang %q' \
    "$model" "$dataset" "$source_lang" "$target_lang"
printf ' --output-dir %q\n' "$run/evaluation/model"
