#!/bin/bash
# en->de with a right-to-left model: waits for the R2L run (trained on .data/diversified-en-de-r2l, the
# diversification data with the German words reversed, as right_to_left: true reads .data/diversified-en-de), then
# reranks the 3-model en->de ensemble's beam-8 n-best list with the three de->en models and the R2L model, both
# weights chosen on validation (R2L weight 0 = the ensemble reranked by three, as before: 42.67); test2016 decoded
# once only if validation beats the best en->de so far (42.70)
cd /work/main && source /work/venv/bin/activate
while pgrep -f "multi30k-best-en-de-r2l-seed6 --max-minutes" >/dev/null; do sleep 20; done
date
OUT=outputs/rerank-en-de-r2l
FORWARD="outputs/multi30k-best-en-de-seed2/checkpoint_average --ensemble outputs/multi30k-best-en-de-diversified-seed2/checkpoint_average outputs/multi30k-best-en-de-diversified-seed3/checkpoint_average"
REVERSE="--rerank-with outputs/gpu-h200/de-en-seed4/checkpoint_average outputs/multi30k-best-de-en-diversified-seed4/checkpoint_average outputs/multi30k-best-de-en-diversified-seed5/checkpoint_average"
R2L="--rerank-right-to-left outputs/multi30k-best-en-de-r2l-seed6/checkpoint_average"
COMMON="--source-lang en --target-lang de --dataset ../shared/datasets/multi30k --num-beams 8 --length-penalty 1.0"
python scripts/select_checkpoint.py $FORWARD $REVERSE $R2L $COMMON --rerank-weight 0 0.1 0.2 0.3 0.5 \
  --right-to-left-weight 0 0.1 0.2 0.3 0.5 1.0 --report-split --output-dir $OUT
date
read WEIGHT R2L_WEIGHT BLEU < <(python -c "import json; c=json.load(open('$OUT/selection.json'))['chosen']; print(c['rerank_weight'], c['right_to_left_weight'], c['bleu'])")
echo "chosen: reverse weight $WEIGHT, right-to-left weight $R2L_WEIGHT, validation $BLEU"
if python -c "import sys; sys.exit(0 if $BLEU > 42.70 else 1)"; then
  python scripts/evaluate_bleu.py $FORWARD $REVERSE $R2L --rerank-weight $WEIGHT --right-to-left-weight $R2L_WEIGHT \
    $COMMON --split test --tokenized-bleu --output-dir $OUT/test
  date
fi
