# Issue 25, after the GPU call of run.sh beside this file: here (the CPU machine), from the repository root,
#   bash docs/research/tries/gpu-next/unpack.sh /work/.device/1 /work/.device/2 /work/.device/3
# (each call's files_at): every model-N.tar.part-* found there is unpacked into the repository, a run directory
# it brings replacing the one here (a run trained on the CPU meanwhile is moved to
# students-cpu/), and each brought model is saved again in float32. Then the script, given again, finds the
# second seed's students trained:
#   PARALLEL=2 SEED_OFFSET=10 OUT=outputs/multi30k-best-recipe-seed12 bash scripts/research/best_recipe.sh
set -euo pipefail
students=outputs/multi30k-best-recipe-seed12/students
brought=()
for folder in "$@"; do
  for first in "$folder"/model-*.tar.part-aa; do
    parts=("${first%aa}"*)
    for run in $(cat "${parts[@]}" | tar tf - | sed -n "s|^\($students/[^/]*\)//*selection/selection.json$|\1|p"); do
      if [ -d "$run" ]; then  # trained here meanwhile: kept aside, not mixed with the one brought
        mkdir -p "${students}-cpu" && mv "$run" "${students}-cpu/"
      fi
      brought+=("$run")
    done
    cat "${parts[@]}" | tar xf -
  done
done
for run in "${brought[@]}"; do
  chosen=$(python3 -c "import json,sys; print(json.load(open(sys.argv[1]))['chosen']['model'])" "$run/selection/selection.json")
  python3 -c "import sys, torch; from hf_vanilla import VanillaTransformerForConditionalGeneration as M
m = M.from_pretrained(sys.argv[1], dtype=torch.float32)
m.save_pretrained(sys.argv[1]); print(sys.argv[1], m.dtype)" "$chosen"
done
