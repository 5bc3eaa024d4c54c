# Session-local driver: best_recipe.sh's stage 4 (its choose commands with its new default grid) for both
# directions side by side at one thread each; the earlier choice moved aside to en-de-try2/, de-en-try2/.
cd /work/main && . /work/venv/bin/activate
O=outputs/multi30k-best-recipe; data=../shared/datasets/multi30k
t() { echo $O/teachers/$1/checkpoint_average; }; s() { echo $O/students/$1/checkpoint_average; }
choose() {
  local src=$1 tgt=$2; shift 2
  OMP_NUM_THREADS=1 python3 scripts/select_checkpoint.py "$@" --rerank-language-model $O/language-models/$tgt \
    --dataset $data --source-lang $src --target-lang $tgt --num-beams 12 --length-penalty 1.0 \
    --rerank-weight 0 0.1 0.2 0.3 0.5 1 --right-to-left-weight 0 0.2 0.5 1 2 \
    --language-model-weight 0 0.1 0.2 0.3 0.5 0.7 --word-bonus 0 0.02 0.04 --tokenized-bleu \
    --output-dir $O/$src-$tgt > outputs/choose3-$src-$tgt.log 2>&1
  echo "=== choose $src-$tgt exit $? $(date -u)"
}
echo "=== start $(date -u)"
choose en de $(t en-de-seed2) --ensemble $(s en-de-seed2) $(s en-de-seed3) \
  --rerank-with $(t de-en-seed4) $(s de-en-seed4) $(s de-en-seed5) --rerank-right-to-left $(s en-de-r2l-seed6) &
choose de en $(t de-en-seed4) --ensemble $(s de-en-seed4) $(s de-en-seed5) \
  --rerank-with $(t en-de-seed2) $(s en-de-seed2) $(s en-de-seed3) --rerank-right-to-left $(s de-en-r2l-seed6) &
wait
