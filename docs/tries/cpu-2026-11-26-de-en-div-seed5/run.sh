#!/bin/bash
# waits for the seed-5 de->en diversified run; chooses the 3-model ensemble's beam/lp on validation, decodes test2016
# once with it only if it beats the 2-model one (43.51) on validation, then selects the run alone
cd /work/main && source /work/venv/bin/activate
while pgrep -f "multi30k-best-de-en-diversified-seed5 --max-minutes" >/dev/null; do sleep 20; done
date
RUN=outputs/multi30k-best-de-en-diversified-seed5
LANGS="--source-lang de --target-lang en --dataset ../shared/datasets/multi30k"
MEMBERS="--ensemble outputs/multi30k-best-de-en-diversified-seed4/checkpoint_average $RUN/checkpoint_average"
python scripts/select_checkpoint.py outputs/gpu-h200/de-en-seed4/checkpoint_average $LANGS $MEMBERS \
  --num-beams 4 8 --length-penalty 1.0 --report-split --output-dir outputs/ensemble3-de-en > outputs/ensemble3-de-en.log 2>&1
date
read BEAMS LP BLEU < <(python -c "import json; c=json.load(open('outputs/ensemble3-de-en/selection.json'))['chosen']; print(c['num_beams'], c['length_penalty'], c['bleu'])")
echo "3-model chosen: beam $BEAMS lp $LP validation $BLEU"
if python -c "import sys; sys.exit(0 if $BLEU > 43.51 else 1)"; then
  python scripts/evaluate_bleu.py outputs/gpu-h200/de-en-seed4/checkpoint_average $LANGS $MEMBERS --split test \
    --num-beams $BEAMS --length-penalty $LP --tokenized-bleu --output-dir outputs/ensemble3-de-en/test > outputs/ensemble3-de-en-test.log 2>&1
  date
fi
python scripts/select_checkpoint.py $RUN $LANGS --num-beams 4 8 --length-penalty 1.0 --report-split --output-dir $RUN/selection > outputs/div-de-en-seed5-select.log 2>&1
date
