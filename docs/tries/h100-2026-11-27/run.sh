# Issue 25, best_recipe.sh's stage 3 on one GPU call: the four diversified-data students (en->de seeds 2 and 3,
# de->en seeds 4 and 5) side by side, each with the command run_tries.py gives it (configs/multi30k-best.yaml,
# 14,000 updates), bounded by a SIGTERM after STOP seconds (the run saves, then averages its last five saves).
# Run from the repository root on the device machine as `bash docs/tries/h100-2026-11-27/run.sh`, carrying the
# wheels of datasets 5.2.0, dill 0.4.1 and multiprocess 0.70.19 in .whl/, the tokenizer outputs/multi30k-bpe5k and
# the diversified data outputs/multi30k-best-recipe/data (stage 2, written on the CPU). What comes back, at most
# 64 MiB a call: en-de-seed2 and de-en-seed4 in this call's $OUT; the next call on the same warm machine brings the
# other two with `cp outputs/multi30k-best-recipe/students/second.tar.part-* $OUT/`.
# Here: cat gpu-students.tar.part-* | tar xf -   (each part under 16 MiB, so that it comes back)
set -u
STOP=${STOP:-550}; R=${R:-outputs/multi30k-best-recipe/students}; D=${D:-outputs/multi30k-best-recipe/data/diversified}
if [ -n "${OUT:-}" ]; then
  python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl || exit 1
  export PYTHONPATH=/tmp/site:$PWD
fi
export PYTHONUNBUFFERED=1 HF_DATASETS_OFFLINE=1 HF_HUB_OFFLINE=1 TOKENIZERS_PARALLELISM=false
mkdir -p $R/logs
{ date -u; nvidia-smi -L; lscpu | grep 'Model name'; python3 -c "import torch,transformers,accelerate,datasets;print(torch.__version__,transformers.__version__,accelerate.__version__,datasets.__version__)"; } > $R/logs/environment.txt 2>&1
(nvidia-smi --query-gpu=timestamp,utilization.gpu,memory.used --format=csv -l 30 > $R/logs/smi.csv 2>&1 &)
student() {  # student NAME SOURCE TARGET SEED
  timeout -s TERM $STOP python3 scripts/train.py --config configs/multi30k-best.yaml --source-lang $2 --target-lang $3 \
    --seed $4 --dataset $D-$2-$3 --output-dir $R/$1 > $R/logs/$1.train.log 2>&1
  echo "$1: exit $? $(date -u)" >> $R/logs/environment.txt
}
student en-de-seed2 en de 2 & student en-de-seed3 en de 3 & student de-en-seed4 de en 4 & student de-en-seed5 de en 5 &
wait
pack() {  # pack NAME RUN...: each run's average, log and config, in parts under 16 MiB
  local name=$1; shift
  for run in "$@"; do echo $R/$run/checkpoint_average $R/$run/train_log.jsonl $R/$run/training_config.yaml $R/logs/$run.train.log; done \
    | xargs tar cf - $R/logs/environment.txt $R/logs/smi.csv | split -b 15M - $R/$name.tar.part-
}
pack first en-de-seed2 de-en-seed4
pack second en-de-seed3 de-en-seed5
cp $R/first.tar.part-* ${OUT:-/tmp}/
ls -la $R/*.tar.part-*
