# Issue 25, one GPU call: the de->en teacher for data diversification (multi30k-best, seed 4) beside three
# en->de tries (transformer_tiny's recipe with a clip of 5 and with a 2e-3 peak; multi30k-best at d_model 512).
# Run from the repository root on the device machine as `bash docs/research/tries/h200-2026-11-26/run.sh`, with Multi30k
# copied into .data/multi30k, the wheels of datasets 5.2.0, dill 0.4.1 and multiprocess 0.70.19 in .whl/, and
# outputs/multi30k-bpe5k carried (each run loads that tokenizer). The next two calls on the same warm machine:
#   python scripts/research/distill.py --backward outputs/gpu/de-en-seed4/checkpoint_average --keep-original \
#       --dataset .data/multi30k --source-lang en --target-lang de --num-beams 4 --length-penalty 1.0 --device cuda \
#       --max-tokens 16384 --output-dir $OUT/bt          # 29,000 sentences in 7 s
#   python scripts/select_checkpoint.py outputs/gpu/RUN --dataset .data/multi30k --num-beams 4 8 \
#       --length-penalty 0.6 1.0 --report-split --device cuda --source-lang SRC --target-lang TGT \
#       --output-dir $OUT/sel-RUN                        # each RUN; validation only
set -u
MINUTES=${MINUTES:-7.8}; R=${R:-outputs/gpu}; STOP=${STOP:-545}
if [ -n "${OUT:-}" ]; then
  python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl || exit 1
  export PYTHONPATH=/tmp/site:$PWD
fi
export PYTHONUNBUFFERED=1 HF_DATASETS_OFFLINE=1 HF_HUB_OFFLINE=1 TOKENIZERS_PARALLELISM=false
mkdir -p $R/logs
{ date; nvidia-smi -L; lscpu | grep 'Model name'; python -c "import torch,transformers,accelerate,datasets;print(torch.__version__,transformers.__version__,accelerate.__version__,datasets.__version__)"; } > $R/logs/environment.txt 2>&1
(nvidia-smi --query-gpu=timestamp,utilization.gpu,memory.used --format=csv -l 30 > $R/logs/smi.csv 2>&1 &)
TRAIN="timeout -s TERM $STOP python scripts/train.py --config configs/multi30k-best.yaml --dataset .data/multi30k --max-minutes $MINUTES"
TINY='{"d_model": 128, "d_ff": 256, "num_attention_heads": 4, "encoder_layers": 4, "decoder_layers": 4}'
TINY_FLAGS="--early-dropout-updates 0 --dropout 0.3 --attention-dropout 0 --activation-dropout 0 --max-tokens 8192 --warmup 2000 --adam-eps 1e-8 --max-steps 8000 --save-interval-updates 64 --early-stopping-patience 10 --average-last 10 --no-validation-bleu --validation-max-sentences null"
$TRAIN --source-lang de --target-lang en --seed 4 --output-dir $R/de-en-seed4 > $R/logs/de-en-seed4.log 2>&1 &
$TRAIN --source-lang en --target-lang de --model-overrides "$TINY" $TINY_FLAGS --lr 5e-3 --clip-grad-norm 5.0 --output-dir $R/tiny-clip5 > $R/logs/tiny-clip5.log 2>&1 &
$TRAIN --source-lang en --target-lang de --model-overrides "$TINY" $TINY_FLAGS --lr 2e-3 --output-dir $R/tiny-lr2e-3 > $R/logs/tiny-lr2e-3.log 2>&1 &
$TRAIN --source-lang en --target-lang de --seed 3 --model-overrides '{"d_model": 512, "d_ff": 2048, "num_attention_heads": 8}' --output-dir $R/width512-seed3 > $R/logs/width512-seed3.log 2>&1 &
wait
date >> $R/logs/environment.txt
for run in $R/*/; do [ -f $run/train_log.jsonl ] && cp $run/train_log.jsonl $R/logs/$(basename $run).train_log.jsonl; done
tar cf - $R/logs $R/de-en-seed4/checkpoint_average $R/de-en-seed4/training_config.yaml $R/tiny-*/checkpoint_average $R/tiny-*/checkpoint_best $R/tiny-*/training_config.yaml $R/width512-seed3/training_config.yaml \
  | split -b 15M - ${OUT:-$R}/gpu.tar.part-
ls -la ${OUT:-$R}
