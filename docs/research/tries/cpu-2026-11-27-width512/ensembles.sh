# Issue 25, en->de on validation only (beam 4, lp 1.0): the two width-512 students as one, then with the recipe's
# teacher and two d_model-256 students. (Run with the models at their earlier paths: the wide ones where the GPU call put them, the d_model-256
# students in students/, where the script trains wide runs now; the same models.)
B=outputs/multi30k-best-recipe; W=$B/students-width512
T=$B/teachers/en-de-seed2/checkpoint_average; S2=$B/students-width256/en-de-seed2/checkpoint_average; S3=$B/students-width256/en-de-seed3/checkpoint_average
W2=$W/en-de-width512-seed2/checkpoint_average; W3=$W/en-de-width512-seed3/checkpoint_best
out=${OUTPUT:-outputs/ens512}; mkdir -p $out
sel() { local name=$1; shift; /usr/bin/time -v python scripts/select_checkpoint.py "$@" --dataset ../shared/datasets/multi30k --source-lang en --target-lang de --num-beams 4 --length-penalty 1.0 --report-split --output-dir $out/$name > $out/$name.log 2>&1; echo "$name: $(date -u) $(tail -1 $out/$name.log)"; }
date -u
sel w2-w3 $W2 --ensemble $W3
sel w2-w3-t-s2-s3 $W2 --ensemble $W3 $T $S2 $S3
