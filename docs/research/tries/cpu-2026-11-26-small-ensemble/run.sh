#!/bin/bash
# The session-sized ensemble try (tries.yaml): four 25-minute runs, then each direction's pair as one ensemble
# (members: each run's checkpoint_average, fixed before decoding), its beam-8 n-best list reranked by the other
# direction's pair, the reranking weight chosen on full validation, test2016 decoded once with the choice.
set -euo pipefail
cd "$(dirname "$0")/../../../.."
data=../shared/datasets/multi30k
out=outputs/small-ensemble
date
python scripts/research/run_tries.py docs/research/tries/cpu-2026-11-26-small-ensemble/tries.yaml --dataset $data --output-dir $out
date
avg() { echo "$out/$1/checkpoint_average"; }
python scripts/select_checkpoint.py "$(avg de-en-seed1)" --ensemble "$(avg de-en-seed2)" \
    --rerank-with "$(avg en-de-seed1)" "$(avg en-de-seed2)" --dataset $data --source-lang de --target-lang en \
    --num-beams 8 --length-penalty 1.0 --tokenized-bleu --output-dir $out/de-en
date
python scripts/select_checkpoint.py "$(avg en-de-seed1)" --ensemble "$(avg en-de-seed2)" \
    --rerank-with "$(avg de-en-seed1)" "$(avg de-en-seed2)" --dataset $data --source-lang en --target-lang de \
    --num-beams 8 --length-penalty 1.0 --tokenized-bleu --output-dir $out/en-de
date
