#!/bin/bash
# en->de: the 3-model ensemble (teacher seed 2 + diversification students seeds 2 and 3) with its n-best list
# reranked by the two de->en models (H200 seed 4, its diversification student seed 4); beam 8, lp 1.0 (the ensemble's
# own choice), the weight chosen on validation (0 = the ensemble as before, 42.50), test2016 decoded once with the choice
cd /work/main && source /work/venv/bin/activate
date
OMP_NUM_THREADS=1 python scripts/select_checkpoint.py outputs/multi30k-best-en-de-seed2/checkpoint_average \
  --ensemble outputs/multi30k-best-en-de-diversified-seed2/checkpoint_average outputs/multi30k-best-en-de-diversified-seed3/checkpoint_average \
  --rerank-with outputs/gpu-h200/de-en-seed4/checkpoint_average outputs/multi30k-best-de-en-diversified-seed4/checkpoint_average \
  --source-lang en --target-lang de --dataset ../shared/datasets/multi30k --num-beams 8 --length-penalty 1.0 \
  --tokenized-bleu --output-dir outputs/rerank-en-de
date
