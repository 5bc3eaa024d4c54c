#!/usr/bin/env bash
# What hf_vanilla does on this GPU, in one command of at most 8 minutes: train.py's speed on multi30k-small with
# compile auto and off, on base and on big (updates/s, target tokens/s, time to the first log record, MFU against
# this card's measured matmul peak), and the decoding benchmark at batch 1 and 64, greedy and beam 4, with the
# dynamic and the static cache. Writes OUT_DIR/report.json and each part's log in OUT_DIR/logs; docs/speed.md says
# how to read it.
#
#   bash scripts/tools/gpu_report.sh OUT_DIR [--data DIR] [--tokenizer DIR] [--minutes N] [--parts A,B] [--smoke]
#
#   --data DIR       a local copy of the training data in the Hub translation layout (a copy of Multi30k, say), for
#                    a host without network; without it, bentrevett/multi30k comes from the Hub
#   --tokenizer DIR  a saved tokenizer; without it a 5k BPE is trained on the data into OUT_DIR/tokenizer
#   --minutes N      the report's time (default 8): each part runs under `timeout`, within its own limit and what
#                    is left of the report's; a part that fails, times out or finds no time left is recorded as
#                    such and the next one runs
#   --parts A,B      run only these parts (names below), their records replacing earlier ones in OUT_DIR: a rerun
#   --smoke          every part at a tiny size on whatever device there is, a CPU included, each in seconds past
#                    its imports: a check of the plumbing whose numbers mean nothing
#
# PYTHON names the interpreter (default python3). The exit status is 1 when a part did not end ok.
set -euo pipefail

ALL_PARTS=(prepare train_small_compile_auto train_small_compile_no train_base train_big decode_dynamic decode_static)
# A part given less time than this would only time out.
MIN_PART_SECONDS=10

usage() {
    sed -n '2,21p' "$0" | sed 's/^# \{0,1\}//' >&2
    exit 2
}

invocation=("$@")
out_dir="" data="" tokenizer="" minutes=8 parts="" smoke=0
while [ $# -gt 0 ]; do
    case $1 in
        --data) data=$2; shift 2 ;;
        --tokenizer) tokenizer=$2; shift 2 ;;
        --minutes) minutes=$2; shift 2 ;;
        --parts) parts=$2; shift 2 ;;
        --smoke) smoke=1; shift ;;
        -h|--help) usage ;;
        -*) echo "unknown flag $1" >&2; usage ;;
        *) [ -z "$out_dir" ] || usage; out_dir=$1; shift ;;
    esac
done
[ -n "$out_dir" ] || usage
[[ $minutes =~ ^[1-9][0-9]*$ ]] || { echo "--minutes takes a whole number of minutes, got $minutes" >&2; exit 2; }
for part in ${parts//,/ }; do
    [[ " ${ALL_PARTS[*]} " == *" $part "* ]] || { echo "unknown part $part; parts: ${ALL_PARTS[*]}" >&2; exit 2; }
done

repo=$(cd "$(dirname "$0")/../.." && pwd)
mkdir -p "$out_dir/logs" "$out_dir/runs"
out_dir=$(cd "$out_dir" && pwd)
[ -z "$data" ] || data=$(cd "$data" && pwd)
[ -z "$tokenizer" ] || tokenizer=$(cd "$tokenizer" && pwd)
tokenizer=${tokenizer:-$out_dir/tokenizer}
python=${PYTHON:-python3}
cd "$repo"
# The code measured is this checkout's, whatever copy of hf_vanilla pip installed.
export PYTHONPATH="$repo${PYTHONPATH:+:$PYTHONPATH}"
# Local data and tokenizer leave nothing to fetch; an offline host would otherwise wait on the Hub's retries.
[ -z "$data" ] || export HF_HUB_OFFLINE=1

if [ "$smoke" = 0 ] && ! "$python" -c 'import sys, torch; sys.exit(not torch.cuda.is_available())'; then
    echo "torch sees no CUDA GPU: this report measures one (--smoke checks its plumbing on a CPU)" >&2
    exit 2
fi

# A whole report starts a new record; --parts adds to the one in OUT_DIR.
[ -n "$parts" ] || rm -f "$out_dir/parts.tsv" "$out_dir/commands.txt"
printf -v command '%q ' bash scripts/tools/gpu_report.sh "${invocation[@]}"
echo "${command% }" >> "$out_dir/commands.txt"
deadline=$((SECONDS + minutes * 60))

# run_part NAME KIND CAP OUTPUT CONFIG BUDGET COMMAND...: COMMAND under `timeout`, for at most CAP seconds and what
# is left of the report's time, its output in logs/NAME.log; one line of parts.tsv records how it ended ("-": none).
# OUTPUT, what the part writes (relative to OUT_DIR), goes first: a part skipped or failed leaves no older numbers.
run_part() {
    local name=$1 kind=$2 cap=$3 output=$4 config=$5 budget=$6
    shift 6
    [ -z "$parts" ] || [[ ",$parts," == *",$name,"* ]] || return 0
    local log="logs/$name.log" left=$((deadline - SECONDS)) command status code=0 started ended limit began
    limit=$((cap < left ? cap : left))
    printf -v command '%q ' "$@"
    [ "$output" = - ] || rm -rf "${out_dir:?}/$output"
    started=$(date +%s.%N)
    began=$SECONDS
    echo "$name (at most $limit s): $command"
    if [ "$limit" -lt "$MIN_PART_SECONDS" ]; then
        status=skipped code=-
        echo "skipped: ${left} s were left of the report's $minutes minutes" > "$out_dir/$log"
    else
        # 30 s after SIGTERM (train.py saves its checkpoint and stops), SIGKILL: exit status 137.
        timeout --kill-after=30 "$limit" "$@" > "$out_dir/$log" 2>&1 || code=$?
        status=failed
        if [ "$code" = 0 ]; then
            status=ok
        elif [ "$code" = 124 ] || { [ "$code" = 137 ] && [ $((SECONDS - began)) -ge "$limit" ]; }; then
            status=timeout  # a 137 before the limit is a kill from elsewhere (out of memory): failed
        fi
    fi
    ended=$(date +%s.%N)
    printf '%s\t' "$name" "$kind" "$status" "$code" "$started" "$ended" "$limit" "$log" "$output" "$config" \
        "$budget" >> "$out_dir/parts.tsv"
    printf '%s\n' "${command% }" >> "$out_dir/parts.tsv"
    echo "  $status after $((SECONDS - began)) s (log: $out_dir/$log)"
}

small=configs/multi30k-small.yaml base=configs/wmt14-en-de-base.yaml big=configs/wmt14-en-de-big.yaml
# The data and tokenizer of every run; no validation, which would only add time after the budget.
data_flags=(--dataset "${data:-bentrevett/multi30k}" --dataset-config null --tokenizer "$tokenizer" --validation-split null)
if [ "$smoke" = 1 ]; then
    # Tiny model, batches and runs; datasets' worker processes would cost more than they save on a few pairs.
    data_flags+=(--model-preset tiny --preprocessing-workers null)
    size_flags=(--max-steps 6 --log-interval 2) small_batch=(--max-tokens 256) wmt_batch=256 peak_seconds=0.05
    benchmark=(scripts/tools/benchmark.py --size tiny --quick)
else
    # A record every 10 updates: the first times the start-up within 10 updates, at the cost of a host read each.
    size_flags=(--max-steps null --log-interval 10) small_batch=() wmt_batch=25000 peak_seconds=0.5
    benchmark=(scripts/tools/benchmark.py --device cuda --size base --repeats 3 --generation-batch-sizes 64 1)
fi
benchmark+=(--attn sdpa --engine transformers)  # one training case beside the decoding ones; CTranslate2 is for CPUs

# train_part NAME CONFIG SECONDS FLAGS...: train.py with CONFIG for SECONDS (its --max-minutes, start-up included)
# and FLAGS, in a new run directory. Only the final save is written, then deleted: the report keeps the log.
train_part() {
    local name=$1 config=$2 seconds=$3 run="runs/$1"
    shift 3
    run_part "$name" train $((seconds + 90)) "$run" "$config" "$seconds" \
        "$python" scripts/train.py --config "$config" "${data_flags[@]}" "${size_flags[@]}" "$@" \
        --max-minutes "$(awk -v s="$seconds" 'BEGIN { print s / 60 }')" --save-interval-minutes null \
        --save-interval-updates null --average-last null --tensorboard false --output-dir "$out_dir/$run"
    rm -rf "$out_dir/$run"/checkpoint_*
}

run_part prepare prepare 240 prepared.json - - \
    "$python" -m hf_vanilla.tools.gpu_report prepare "$out_dir" "$small" "$base" "$big" \
    --peak-seconds "$peak_seconds" -- "${data_flags[@]}"
train_part train_small_compile_auto "$small" 90 "${small_batch[@]}" --compile auto
train_part train_small_compile_no "$small" 90 "${small_batch[@]}" --compile no
train_part train_base "$base" 90 --max-tokens "$wmt_batch" --tokens-per-update null
train_part train_big "$big" 60 --max-tokens "$wmt_batch" --tokens-per-update null
run_part decode_dynamic decode 180 decode_dynamic.json - - \
    "$python" "${benchmark[@]}" --generation-cache cached --output "$out_dir/decode_dynamic.json"
# Last: generate compiles the decoding step for each batch shape, the part whose time is hardest to foresee.
run_part decode_static decode 300 decode_static.json - - \
    "$python" "${benchmark[@]}" --generation-cache static --output "$out_dir/decode_static.json"

assemble=("$python" -m hf_vanilla.tools.gpu_report assemble "$out_dir")
[ "$smoke" = 0 ] || assemble+=(--smoke)
timeout 300 "${assemble[@]}"
