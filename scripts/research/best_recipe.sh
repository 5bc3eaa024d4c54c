#!/usr/bin/env bash
# The best Multi30k results, both directions, with one command: every model they need, then each direction's
# ensemble, its n-best list reranked, beam, length penalty and reranking weights chosen on validation,
# test2016 decoded once (docs/results.md, "The best recipe"). Departures from the paper, each a switch used
# only here: data diversification, ensembles, reranking with the reverse direction, right-to-left models, a
# language model and a word bonus.
#   bash scripts/research/best_recipe.sh                    # 8 runs of configs/multi30k-best.yaml one after another
#   PARALLEL=4 bash scripts/research/best_recipe.sh         # on one GPU: runs side by side (four fit an H200)
#   SEED_OFFSET=10 OUT=outputs/multi30k-best-recipe-seed12 bash scripts/research/best_recipe.sh   # another seed of it all
# Given again, it goes on where it stopped: finished runs train nothing more, a stopped run resumes from its last
# checkpoint, written data and a direction's final choice are kept. The stages, all under OUT:
#   1. teachers/: multi30k-best en->de (seed 2) and de->en (seed 4) on the original pairs; language-models/en, de:
#      a small GPT-2 a language on the training targets (scripts/research/train_language_model.py, 3 epochs)
#   2. data/diversified-en-de, -de-en: the original pairs, then each teacher's translations of the training split
#      (data diversification, Nguyen et al., 2020; scripts/research/distill.py), 87,000 pairs on Multi30k; each teacher's
#      translations are made once (data/translations/) and serve both directions, en->de's forward pairs being
#      de->en's backward ones
#   3. students/: on those, at the paper's base width (d_model 512, d_ff 2048, 8 heads), en->de seeds 2 and 3
#      and de->en seeds 4 and 5; and a right-to-left model a direction (seed 6, right_to_left: true)
#   4. en-de/, de-en/: the direction's ensemble (its two students),
#      reranked by the other direction's teacher and students (--rerank-with), the right-to-left model, the target
#      language's language model and a word bonus; each model is its run's checkpoint_average; validation
#      chooses, test2016 is decoded once
# Stages 1 and 3 are scripts/research/run_tries.py (each run also chosen alone on validation: OUT/*/tries.md).
# Settings (environment):
#   MULTI30K      the data: a Hub id or a local copy in the Hub layout (default: the Hub's bentrevett/multi30k)
#   OUT           where everything goes (default: outputs/multi30k-best-recipe)
#   PARALLEL      runs training at once; 2 or more also runs the two directions' language models, diversification
#                 and final choices side by side, each on half the cores (default 1; on a 2-core CPU, 2 trained
#                 1.4 times the updates a second of one run on both cores, docs/results.md; 4 on one GPU)
#   CONFIG        every run's config (default: configs/multi30k-best.yaml)
#   TRAIN_FLAGS   more train.py flags for every run, e.g. a time box: "--max-minutes 8"
#   MEMBER_SELECT select_checkpoint.py flags for each run alone (default: beam 4, lp 1.0)
#   SEED_OFFSET   added to every run's seed, for another seed of the whole recipe (default 0: the seeds above;
#                 give it its own OUT)
#   FINAL_SELECT  select_checkpoint.py flags for each direction's ensemble (default: beam 12, lp 1.0, the
#                 weights of the grid below, the tokenized BLEU beside; needs the [tokenized] extra)
set -euo pipefail
cd "$(dirname "$0")/../.."
data=${MULTI30K:-bentrevett/multi30k}
out=${OUT:-outputs/multi30k-best-recipe}
parallel=${PARALLEL:-1}
config=${CONFIG:-configs/multi30k-best.yaml}
train_flags=${TRAIN_FLAGS:-}
member_select=${MEMBER_SELECT:---num-beams 4 --length-penalty 1.0}
# Beam 12 won over 8 in both directions; the weights: each direction's validation n-best list (beam 12), reranked
# offline, chose reverse weights 0-1, right-to-left weights 0.2-2, language model weights 0.1-0.5 and word bonuses
# 0-0.04 (docs/research/tries/cpu-2026-11-27-language-model/); 540 weightings, each a BLEU and chrF score of
# validation.
grid="--num-beams 12 --length-penalty 1.0 --rerank-weight 0 0.1 0.2 0.3 0.5 1 --right-to-left-weight 0 0.2 0.5 1 2"
grid+=" --language-model-weight 0 0.1 0.2 0.3 0.5 0.7 --word-bonus 0 0.02 0.04"
final_select=${FINAL_SELECT:-$grid --tokenized-bleu}
case " $final_select " in
*" --tokenized-bleu "*)
    python3 -c "import sacremoses" 2>/dev/null || {
        echo "best_recipe: --tokenized-bleu needs sacremoses: pip install -e \".[tokenized]\" (or set FINAL_SELECT)" >&2
        exit 2
    } ;;
esac
seed_offset=${SEED_OFFSET:-0}
case $seed_offset in
'' | *[!0-9]*) echo "best_recipe: SEED_OFFSET must be a whole number, not '$seed_offset'" >&2; exit 2 ;;
esac
seed() { echo $(($1 + seed_offset)); }
mkdir -p "$out"
echo "best_recipe: $config on $data into $out, $parallel run(s) at a time, seeds offset by $seed_offset"

# Every run of each direction, named by its direction and seed.
declare -A teacher_run=([en-de]=en-de-seed$(seed 2) [de-en]=de-en-seed$(seed 4))
declare -A student_runs=(
    [en-de]="en-de-seed$(seed 2) en-de-seed$(seed 3)" [de-en]="de-en-seed$(seed 4) de-en-seed$(seed 5)"
)
declare -A right_to_left_run=([en-de]=en-de-r2l-seed$(seed 6) [de-en]=de-en-r2l-seed$(seed 6))
# The students at the paper's base width over the config's 3+3 layers (24.6M parameters against 6.8M): on the
# same data and seeds, +1.43 (en->de) and +1.22 to +1.69 (de->en) validation BLEU over the config's width. The
# teachers (the config's width) stay out of the ensembles: en->de's wide pair alone scored above the same pair with
# its teacher and narrow students added (measured for en->de only; docs/research/diary.md, "The paper's base
# width for en->de's students" and "... for de->en's students too").
student_flags="--model-overrides '{\"d_model\": 512, \"d_ff\": 2048, \"num_attention_heads\": 8}'"

# Stage files name every run's flags, so that each stage's record says what it ran.
try_line() {  # try_line RUN DIRECTION [FLAGS...]: RUN's line in a stage file, its seed read from its name
    local run=$1 direction=$2 flags
    shift 2
    flags="--source-lang ${direction%-*} --target-lang ${direction#*-} --seed ${run##*seed}${*:+ $*}"
    echo "  $run: '${flags//\'/\'\'}'"  # single-quoted YAML: the flags may hold JSON
}
cat >"$out/teachers.yaml" <<EOF
config: $config
train: $train_flags
select: $member_select
tries:
$(for direction in en-de de-en; do try_line "${teacher_run[$direction]}" $direction; done)
EOF
diversified="$out/data/diversified"
cat >"$out/students.yaml" <<EOF
config: $config
train: $train_flags
select: $member_select
tries:
$(for direction in en-de de-en; do
    for run in ${student_runs[$direction]}; do
        # shellcheck disable=SC2086  # the flags as words; try_line joins them again
        try_line "$run" $direction --dataset "$diversified-$direction" $student_flags
    done
    try_line "${right_to_left_run[$direction]}" $direction --dataset "$diversified-$direction" --right-to-left true
done)
EOF
# Both stage files are checked before anything trains (the students' data need not exist yet).
python3 scripts/research/run_tries.py "$out/teachers.yaml" --dataset "$data" --check >/dev/null
python3 scripts/research/run_tries.py "$out/students.yaml" --dataset "$data" --check >/dev/null

python3 scripts/research/run_tries.py "$out/teachers.yaml" --dataset "$data" --parallel "$parallel" \
    --output-dir "$out/teachers"
teacher() { echo "$out/teachers/$1/checkpoint_average"; }
student() { echo "$out/students/$1/checkpoint_average"; }
language_model() { echo "$out/language-models/$1"; }

train_language_model() {  # train_language_model SOURCE TARGET: TARGET's language model, on SOURCE->TARGET's targets
    if [ ! -d "$(language_model "$2")" ]; then  # train_language_model.py writes it only once it is whole
        python3 scripts/research/train_language_model.py --tokenizer "$(teacher "${teacher_run[$1-$2]}")" --dataset "$data" \
            --source-lang "$1" --target-lang "$2" --seed "$(seed 1)" --output-dir "$(language_model "$2")"
    fi
}

diversify() {  # diversify SOURCE TARGET: the pairs SOURCE->TARGET students train on
    local forward=$1-$2 backward=$2-$1
    if [ ! -d "$diversified-$forward" ]; then  # distill.py writes the directory only once it is whole
        python3 scripts/research/distill.py --forward "$(teacher "${teacher_run[$forward]}")" \
            --backward "$(teacher "${teacher_run[$backward]}")" --keep-original --dataset "$data" \
            --source-lang "$1" --target-lang "$2" --num-beams 4 --length-penalty 1.0 --output-dir "$diversified-$forward" \
            --translations-dir "$out/data/translations"
    fi
}

choose() {  # choose SOURCE TARGET: the ensemble and its reranking models chosen on validation, test2016 once
    local forward=$1-$2 backward=$2-$1 run
    local ensemble=() reverse=()
    if [ -f "$out/$forward/selection.json" ]; then  # written once the test decoding is done
        echo "best_recipe: $out/$forward is chosen already (remove it to choose again)"
        return
    fi
    for run in ${student_runs[$forward]}; do ensemble+=("$(student "$run")"); done
    for run in ${student_runs[$backward]}; do reverse+=("$(student "$run")"); done
    # shellcheck disable=SC2086  # FINAL_SELECT is a list of flags
    python3 scripts/select_checkpoint.py "${ensemble[0]}" --ensemble "${ensemble[@]:1}" \
        --rerank-with "$(teacher "${teacher_run[$backward]}")" "${reverse[@]}" \
        --rerank-right-to-left "$(student "${right_to_left_run[$forward]}")" \
        --rerank-language-model "$(language_model "$2")" --dataset "$data" --source-lang "$1" \
        --target-lang "$2" $final_select --output-dir "$out/$forward"
}

both() {  # both STAGE: STAGE for each direction; with PARALLEL of 2 or more, side by side, each on half the cores
    if [ "$parallel" -lt 2 ]; then
        "$1" en de
        "$1" de en
        return
    fi
    local cores direction failed=()
    cores=$(nproc)
    local -A side=()
    mkdir -p "$out/logs"
    for direction in en-de de-en; do
        echo "best_recipe: $1 ${direction%-*} ${direction#*-}, its output in $out/logs/$1-$direction.log"
        OMP_NUM_THREADS=${OMP_NUM_THREADS:-$((cores > 1 ? cores / 2 : 1))} \
            "$1" "${direction%-*}" "${direction#*-}" >"$out/logs/$1-$direction.log" 2>&1 &
        side[$direction]=$!
    done
    trap 'kill -TERM "${side[@]}" 2>/dev/null' TERM INT  # stopped, the script stops both sides
    for direction in en-de de-en; do
        if wait "${side[$direction]}"; then  # its last line says what it did (a choice: its test scores)
            echo "best_recipe: $1 ${direction%-*} ${direction#*-} ended: $(tail -n 1 "$out/logs/$1-$direction.log")"
        else
            tail -n 20 "$out/logs/$1-$direction.log" >&2
            echo "best_recipe: $1 ${direction%-*} ${direction#*-} failed (above: the end of its log)" >&2
            failed+=("$direction")
        fi
    done
    trap - TERM INT
    [ ${#failed[@]} -eq 0 ]
}

both train_language_model
# One direction after the other: each direction's backward teacher is the other's forward one on the same
# sentences, so the second reads the first's saved translations instead of decoding them again beside it.
diversify en de
diversify de en
python3 scripts/research/run_tries.py "$out/students.yaml" --dataset "$data" --parallel "$parallel" \
    --output-dir "$out/students"
both choose
