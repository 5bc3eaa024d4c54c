# Issue 25, best_recipe.sh's stage 3 on one GPU call: students on the diversified data side by side, each with the
# command run_tries.py gives it (configs/multi30k-best.yaml), bounded by --max-minutes so that each ends normally:
# it saves, then averages its last five saves into checkpoint_average (a run stopped by a signal saves to resume
# but averages nothing: the first call of this script, 2026-11-27, stopped its runs with `timeout` and brought
# back no model). Four runs side by side on an H200 ran 25.3 updates/s each in that call (GPU 91-99% busy) and
# 34.6-35.0 in the next session's (another H200, the same Intel Xeon host kind): all 14,000 updates in 6.7 minutes,
# 446 s for the whole call. Two side by side ran ~38 each (GPU 71-79% busy): a run's pace is bound by its host
# process more than by the GPU. Records of that session's calls: docs/research/tries/gpu-2026-11-27-students/.
#   bash docs/research/tries/gpu-2026-11-27/run.sh en-de-seed2:en:de:2 en-de-seed3:en:de:3 de-en-seed4:de:en:4 de-en-seed5:de:en:5
# (NAME:SOURCE:TARGET:SEED, and :r2l for a right-to-left run), from the repository root on the device machine,
# carrying the wheels of datasets 5.2.0, dill 0.4.1 and multiprocess 0.70.19 in .whl/, the tokenizer
# outputs/multi30k-bpe5k and the diversified data outputs/multi30k-best-recipe/data (stage 2). What comes back,
# at most 64 MiB a call: the first two runs in this call's $OUT; the next call on the same warm machine (within
# its 30 s) brings the others with `cp outputs/multi30k-best-recipe/students/second.tar.part-* $OUT/`.
# Here: cat first.tar.part-* | tar xf -  (parts under 16 MiB, so that they come back); run_tries.py then chooses
# each run as saved (no checkpoint_last, 4x a model's size, comes back) and trains the rest.
set -u
MINUTES=${MINUTES:-8.0}; STOP=${STOP:-575}
R=${R:-outputs/multi30k-best-recipe/students}; D=${D:-outputs/multi30k-best-recipe/data/diversified}
if [ -n "${OUT:-}" ]; then
  python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl || exit 1
  export PYTHONPATH=/tmp/site:$PWD
fi
export PYTHONUNBUFFERED=1 HF_DATASETS_OFFLINE=1 HF_HUB_OFFLINE=1 TOKENIZERS_PARALLELISM=false
mkdir -p $R/logs
{ date -u; nvidia-smi -L; lscpu | grep 'Model name'; python3 -c "import torch,transformers,accelerate,datasets;print(torch.__version__,transformers.__version__,accelerate.__version__,datasets.__version__)"; } > $R/logs/environment.txt 2>&1
(nvidia-smi --query-gpu=timestamp,utilization.gpu,memory.used --format=csv -l 30 > $R/logs/smi.csv 2>&1 &)
student() {  # student NAME SOURCE TARGET SEED [r2l]
  local direction=""
  [ "${5:-}" = r2l ] && direction="--right-to-left true"
  # shellcheck disable=SC2086  # direction is zero or two flags
  timeout -s TERM $STOP python3 scripts/train.py --config configs/multi30k-best.yaml --source-lang $2 --target-lang $3 \
    --seed $4 --dataset $D-$2-$3 $direction --max-minutes $MINUTES --output-dir $R/$1 > $R/logs/$1.train.log 2>&1
  echo "$1: exit $? $(date -u)" >> $R/logs/environment.txt
}
names=()
for run in "$@"; do
  IFS=: read -r name source target seed r2l <<<"$run"
  names+=("$name")
  student "$name" "$source" "$target" "$seed" "$r2l" &
done
wait
pack() {  # pack NAME RUN...: each run's average, log and config, in parts under 16 MiB
  local name=$1; shift
  for run in "$@"; do echo $R/$run/checkpoint_average $R/$run/train_log.jsonl $R/$run/training_config.yaml $R/logs/$run.train.log; done \
    | xargs tar cf - $R/logs/environment.txt $R/logs/smi.csv | split -b 15M - $R/$name.tar.part-
}
pack first "${names[@]:0:2}"
[ ${#names[@]} -gt 2 ] && pack second "${names[@]:2}"
cp $R/first.tar.part-* ${OUT:-/tmp}/
ls -la $R/*.tar.part-*
