#!/bin/bash
# de->en: the 2-model ensemble (H200 seed 4 + its diversification student seed 4) with its n-best list reranked by
# the three en->de models (teacher seed 2, diversification students seeds 2 and 3); beam 8, lp 1.0, the weight
# chosen on validation (0 = the pair at beam 8, 43.43; its own choice was beam 4, 43.51), test2016 decoded once
cd /work/main && source /work/venv/bin/activate
date
OMP_NUM_THREADS=1 python scripts/select_checkpoint.py outputs/gpu-h200/de-en-seed4/checkpoint_average \
  --ensemble outputs/multi30k-best-de-en-diversified-seed4/checkpoint_average \
  --rerank-with outputs/multi30k-best-en-de-seed2/checkpoint_average outputs/multi30k-best-en-de-diversified-seed2/checkpoint_average outputs/multi30k-best-en-de-diversified-seed3/checkpoint_average \
  --source-lang de --target-lang en --dataset ../shared/datasets/multi30k --num-beams 8 --length-penalty 1.0 \
  --tokenized-bleu --output-dir outputs/rerank-de-en
date
