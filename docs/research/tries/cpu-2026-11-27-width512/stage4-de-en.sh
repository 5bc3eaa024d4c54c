# Issue 25, de->en stage 4 as scripts/research/best_recipe.sh now runs it: its ensemble (teacher and both students) reranked
# by en->de's teacher and its two width-512 students, the de->en right-to-left student, the English language model
# and a word bonus; the script's grid, chosen on validation, test2016 decoded once.
B=outputs/multi30k-best-recipe
grid="--num-beams 12 --length-penalty 1.0 --rerank-weight 0 0.1 0.2 0.3 0.5 1 --right-to-left-weight 0 0.2 0.5 1 2"
grid+=" --language-model-weight 0 0.1 0.2 0.3 0.5 0.7 --word-bonus 0 0.02 0.04"
python3 scripts/select_checkpoint.py $B/teachers/de-en-seed4/checkpoint_average \
    --ensemble $B/students/de-en-seed4/checkpoint_average $B/students/de-en-seed5/checkpoint_average \
    --rerank-with $B/teachers/en-de-seed2/checkpoint_average \
    $B/students-width512/en-de-width512-seed2/checkpoint_average $B/students-width512/en-de-width512-seed3/checkpoint_best \
    --rerank-right-to-left $B/students/de-en-r2l-seed6/checkpoint_average \
    --rerank-language-model $B/language-models/en --dataset ../shared/datasets/multi30k --source-lang de \
    --target-lang en $grid --tokenized-bleu --output-dir $B/de-en-width512
