#!/bin/bash
# Waits for the seed-5 de->en diversified run (resumed once), then, 1 thread each, side by side:
#  de->en: the 3-model ensemble (H200 seed 4 + diversification students seeds 4 and 5) reranked by the three en->de
#          models; beam 8, lp 1.0, the weight chosen on validation; test2016 decoded once, only if it beats the
#          2-model reranked ensemble's 44.40 on validation
#  en->de: the 3-model en->de ensemble reranked by the three de->en models (seed 5 joining); test2016 decoded once
#          only if it beats the 42.70 of the same ensemble reranked by two
# then the seed-5 run alone (validation only).
cd /work/main && source /work/venv/bin/activate
while pgrep -f "multi30k-best-de-en-diversified-seed5 --max-minutes" >/dev/null; do sleep 20; done
date
RUN=outputs/multi30k-best-de-en-diversified-seed5
DATA="--dataset ../shared/datasets/multi30k"
DE_EN="outputs/gpu-h200/de-en-seed4/checkpoint_average outputs/multi30k-best-de-en-diversified-seed4/checkpoint_average $RUN/checkpoint_average"
EN_DE="outputs/multi30k-best-en-de-seed2/checkpoint_average outputs/multi30k-best-en-de-diversified-seed2/checkpoint_average outputs/multi30k-best-en-de-diversified-seed3/checkpoint_average"
first() { echo "$1"; }
rest() { shift; echo "$@"; }
choose_then_test() {  # SRC TGT FORWARD REVERSE GATE OUT
  local out=$6
  OMP_NUM_THREADS=1 python scripts/select_checkpoint.py $(first $3) --ensemble $(rest $3) --rerank-with $4 \
    --source-lang $1 --target-lang $2 $DATA --num-beams 8 --length-penalty 1.0 --report-split --output-dir $out > $out.log 2>&1
  read BEAMS LP WEIGHT BLEU < <(python -c "import json; c=json.load(open('$out/selection.json'))['chosen']; print(c['num_beams'], c['length_penalty'], c['rerank_weight'], c['bleu'])")
  echo "$1->$2 chosen: beam $BEAMS lp $LP weight $WEIGHT validation $BLEU (gate $5)"
  if python -c "import sys; sys.exit(0 if $BLEU > $5 else 1)"; then
    OMP_NUM_THREADS=1 python scripts/evaluate_bleu.py $(first $3) --ensemble $(rest $3) --rerank-with $4 --rerank-weight $WEIGHT \
      --source-lang $1 --target-lang $2 $DATA --split test --num-beams $BEAMS --length-penalty $LP --tokenized-bleu \
      --output-dir $out/test > $out-test.log 2>&1
  fi
  date
}
choose_then_test de en "$DE_EN" "$EN_DE" 44.40 outputs/rerank3-de-en &
choose_then_test en de "$EN_DE" "$DE_EN" 42.70 outputs/rerank3-en-de &
wait
python scripts/select_checkpoint.py $RUN --source-lang de --target-lang en $DATA --num-beams 4 8 --length-penalty 1.0 \
  --report-split --output-dir $RUN/selection > outputs/div-de-en-seed5-select.log 2>&1
date
