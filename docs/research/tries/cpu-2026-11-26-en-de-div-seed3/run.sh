#!/bin/bash
# waits for the seed-3 en->de diversified run; chooses the 3-model ensemble's beam/lp on validation, selects the run
# alone, then decodes test2016 once with the 3-model ensemble only if it beats the 2-model one (42.49) on validation
cd /work/main && source /work/venv/bin/activate
while pgrep -f "multi30k-best-en-de-diversified-seed3 --max-minutes" >/dev/null; do sleep 20; done
date
RUN=outputs/multi30k-best-en-de-diversified-seed3
LANGS="--source-lang en --target-lang de --dataset ../shared/datasets/multi30k"
MEMBERS="--ensemble outputs/multi30k-best-en-de-diversified-seed2/checkpoint_average $RUN/checkpoint_average"
python scripts/select_checkpoint.py outputs/multi30k-best-en-de-seed2/checkpoint_average $LANGS $MEMBERS \
  --num-beams 4 8 --length-penalty 1.0 --report-split --output-dir outputs/ensemble3-en-de > outputs/ensemble3-en-de.log 2>&1
date
read BEAMS LP BLEU < <(python -c "import json; c=json.load(open('outputs/ensemble3-en-de/selection.json'))['chosen']; print(c['num_beams'], c['length_penalty'], c['bleu'])")
echo "3-model chosen: beam $BEAMS lp $LP validation $BLEU"
if python -c "import sys; sys.exit(0 if $BLEU > 42.49 else 1)"; then
  python scripts/evaluate_bleu.py outputs/multi30k-best-en-de-seed2/checkpoint_average $LANGS $MEMBERS --split test \
    --num-beams $BEAMS --length-penalty $LP --tokenized-bleu --output-dir outputs/ensemble3-en-de/test > outputs/ensemble3-en-de-test.log 2>&1
  date
fi
python scripts/select_checkpoint.py $RUN $LANGS --num-beams 4 8 --length-penalty 1.0 --report-split --output-dir $RUN/selection > outputs/div-en-de-seed3-select.log 2>&1
date
