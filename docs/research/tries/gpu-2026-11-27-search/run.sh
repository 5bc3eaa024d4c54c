# Issue 25, one GPU call: the four en->de tries of tries.yaml (beside this script) side by side, each bounded by
# --max-minutes so that it ends normally and averages its last five saves, then chosen on full validation on the
# GPU (run_tries.py). Run from the repository root on the device machine:
#   bash docs/research/tries/gpu-2026-11-27-search/run.sh
# carrying the wheels of datasets 5.2.0, dill 0.4.1 and multiprocess 0.70.19 in .whl/, the tokenizer
# outputs/multi30k-bpe5k and the recipe's diversified data outputs/multi30k-best-recipe/data/diversified-en-de.
# What comes back in $OUT: the table, each run's log, training log and selection, and the best try's chosen
# checkpoint in bfloat16 (a d_model 512 model is 49 MB so; $OUT takes 64 MiB), in parts under 16 MiB.
# Here: cat search.tar.part-* | tar xf -
set -u
MINUTES=${MINUTES:-6.5}; STOP=${STOP:-540}; R=${R:-outputs/gpu-search}
if [ -n "${OUT:-}" ]; then
  python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl || exit 1
  export PYTHONPATH=/tmp/site:$PWD
fi
export PYTHONUNBUFFERED=1 HF_DATASETS_OFFLINE=1 HF_HUB_OFFLINE=1 TOKENIZERS_PARALLELISM=false
mkdir -p $R/logs
{ date -u; nvidia-smi -L; lscpu | grep 'Model name'; python3 -c "import torch,transformers,accelerate,datasets;print(torch.__version__,transformers.__version__,accelerate.__version__,datasets.__version__)"; } > $R/logs/environment.txt 2>&1
(nvidia-smi --query-gpu=timestamp,utilization.gpu,memory.used --format=csv -l 30 > $R/logs/smi.csv 2>&1 &)
timeout -s TERM $STOP python3 scripts/research/run_tries.py docs/research/tries/gpu-2026-11-27-search/tries.yaml --parallel 4 \
  --minutes $MINUTES --output-dir $R > $R/logs/run_tries.log 2>&1
echo "run_tries: exit $? $(date -u)" >> $R/logs/environment.txt
# the best try's chosen checkpoint in bfloat16, its path in best.txt
python3 - "$R" > $R/logs/pack.log 2>&1 <<'PACK'
import json, sys, torch
from pathlib import Path
from hf_vanilla import VanillaTransformerForConditionalGeneration
runs = Path(sys.argv[1])
rows = [row for row in json.loads((runs / "tries.json").read_text())["tries"] if row.get("chosen")]
if rows:
    best = max(rows, key=lambda row: row["chosen"]["bleu_lowercased"])
    path = runs / best["name"] / best["chosen"]["model"]
    VanillaTransformerForConditionalGeneration.from_pretrained(path).to(torch.bfloat16).save_pretrained(path)
    (runs / "best.txt").write_text(str(path))
PACK
best=$(cat $R/best.txt 2>/dev/null)
for run in $R/*/; do [ -f $run/train_log.jsonl ] && cp $run/train_log.jsonl $R/logs/$(basename $run).train_log.jsonl; done
for run in $R/*/selection; do cp $run/selection.json $R/logs/$(basename $(dirname $run)).selection.json; done
tar cf - $R/tries.md $R/tries.json $R/logs $R/*/training_config.yaml ${best:+"$best"} | split -b 15M - ${OUT:-$R}/search.tar.part-
ls -la ${OUT:-$R}
