#!/bin/bash
# de->en: the reranked pair of de-en.sh with a longer n-best list (beam 12); test2016 decoded once only if it beats
# beam 8's 44.40 on validation
cd /work/main && source /work/venv/bin/activate
date
OUT=outputs/rerank-de-en-beam12
FORWARD="outputs/gpu-h200/de-en-seed4/checkpoint_average --ensemble outputs/multi30k-best-de-en-diversified-seed4/checkpoint_average"
REVERSE="--rerank-with outputs/multi30k-best-en-de-seed2/checkpoint_average outputs/multi30k-best-en-de-diversified-seed2/checkpoint_average outputs/multi30k-best-en-de-diversified-seed3/checkpoint_average"
COMMON="--source-lang de --target-lang en --dataset ../shared/datasets/multi30k --length-penalty 1.0"
python scripts/select_checkpoint.py $FORWARD $REVERSE $COMMON --num-beams 12 --report-split --output-dir $OUT
read WEIGHT BLEU < <(python -c "import json; c=json.load(open('$OUT/selection.json'))['chosen']; print(c['rerank_weight'], c['bleu'])")
if python -c "import sys; sys.exit(0 if $BLEU > 44.40 else 1)"; then
  python scripts/evaluate_bleu.py $FORWARD $REVERSE --rerank-weight $WEIGHT $COMMON --num-beams 12 --split test \
    --tokenized-bleu --output-dir $OUT/test
fi
date
