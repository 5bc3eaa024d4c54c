# Issue 25, the next GPU session's first call: the second seed's four students at the paper's base width
# (seed12-students.yaml, into outputs/multi30k-best-recipe-seed12/students as scripts/research/best_recipe.sh names them),
# side by side, each bounded by --max-minutes (four runs ran 27.7 updates/s each on an H200 on 2026-11-27: ~12,100
# updates in 7.3 min, the most that leaves the call time to choose and pack within its 10 minutes) and chosen on
# validation on the GPU. Needs stages 1-2 of that seed done here first (teachers, language models, diversified data;
# docs/research/tries/cpu-2026-11-27-seed12/README.md). From the repository root on the device machine:
#   bash docs/research/tries/gpu-next/run.sh
# carrying .whl/ (datasets 5.2.0, dill 0.4.1, multiprocess 0.70.19), outputs/multi30k-bpe5k and
# outputs/multi30k-best-recipe-seed12/data (both directions' diversified pairs).
# Each model comes back in bfloat16 (49 MB; a call returns 64 MiB): this call brings the logs, tables and the first
# model; then, on the warm machine (30 s idle release), `cp outputs/gpu-next/model-2.tar.part-* $OUT/`, and models 3
# and 4 the same way, one a call. Here: `bash docs/research/tries/gpu-next/unpack.sh FILES_AT...` (each call's files_at)
# unpacks them (a run trained here on the CPU meanwhile is moved to students-cpu/) and saves each model again in
# float32.
set -u
MINUTES=${MINUTES:-7.3}; STOP=${STOP:-545}; P=outputs/gpu-next
if [ -n "${OUT:-}" ]; then
  python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl || exit 1
  export PYTHONPATH=/tmp/site:$PWD
fi
export PYTHONUNBUFFERED=1 HF_DATASETS_OFFLINE=1 HF_HUB_OFFLINE=1 TOKENIZERS_PARALLELISM=false
mkdir -p $P
{ date -u; nvidia-smi -L; lscpu | grep 'Model name'; python3 -c "import torch,transformers,accelerate,datasets;print(torch.__version__,transformers.__version__,accelerate.__version__,datasets.__version__)"; } > $P/environment.txt 2>&1
(nvidia-smi --query-gpu=timestamp,utilization.gpu,memory.used --format=csv -l 30 > $P/smi.csv 2>&1 &)
students=outputs/multi30k-best-recipe-seed12/students
timeout -s TERM $STOP python3 scripts/research/run_tries.py docs/research/tries/gpu-next/seed12-students.yaml --parallel 4 \
  --minutes $MINUTES --output-dir $students > $P/seed12.log 2>&1
date -u >> $P/environment.txt
# every run's chosen checkpoint (its path in selection.json) in bfloat16, one tar each; the first with the records
n=0
for run in $students/*/; do
  chosen=$(python3 -c "import json,sys; print(json.load(open(sys.argv[1]))['chosen']['model'])" $run/selection/selection.json 2>/dev/null) || continue
  python3 -c "import sys, torch; from hf_vanilla import VanillaTransformerForConditionalGeneration as M; M.from_pretrained(sys.argv[1]).to(torch.bfloat16).save_pretrained(sys.argv[1])" $chosen >> $P/pack.log 2>&1
  n=$((n + 1))
  records=""; [ $n = 1 ] && records="$P/*.txt $P/*.csv $P/*.log $students/tries.* $students/logs"
  # shellcheck disable=SC2086  # records is a list of paths
  tar cf - $records $run/selection $run/train_log.jsonl $run/training_config.yaml $chosen | split -b 15M - $P/model-$n.tar.part-
  [ $n = 1 ] && cp $P/model-1.tar.part-* ${OUT:-/tmp}/
done
ls -la $P
