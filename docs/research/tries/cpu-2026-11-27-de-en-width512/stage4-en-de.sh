# Issue 25, en->de stage 4 as scripts/research/best_recipe.sh now runs it: its two wide students as one, reranked by de->en's
# teacher and its two students now at the paper's base width (in place of the d_model-256 ones), the en->de
# right-to-left student, the German language model and a word bonus; the script's grid, chosen on validation,
# test2016 decoded once.
B=outputs/multi30k-best-recipe; W=$B/students-width512
grid="--num-beams 12 --length-penalty 1.0 --rerank-weight 0 0.1 0.2 0.3 0.5 1 --right-to-left-weight 0 0.2 0.5 1 2"
grid+=" --language-model-weight 0 0.1 0.2 0.3 0.5 0.7 --word-bonus 0 0.02 0.04"
python3 scripts/select_checkpoint.py $W/en-de-width512-seed2/checkpoint_average \
    --ensemble $W/en-de-width512-seed3/checkpoint_best \
    --rerank-with $B/teachers/de-en-seed4/checkpoint_average \
    $W/de-en-width512-seed4/checkpoint_average $W/de-en-width512-seed5/checkpoint_average \
    --rerank-right-to-left $B/students/en-de-r2l-seed6/checkpoint_average \
    --rerank-language-model $B/language-models/de --dataset ../shared/datasets/multi30k --source-lang en \
    --target-lang de $grid --tokenized-bleu --output-dir $B/en-de-width512-reverse-width512
