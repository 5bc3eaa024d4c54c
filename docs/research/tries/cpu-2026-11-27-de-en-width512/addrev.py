"""Throwaway: each given reverse model's per-hypothesis scores on a dump's n-best lists, saved beside it.
python addrev.py DUMP.json OUT.json NAME=MODEL ..."""
import json, sys, time, torch
from hf_vanilla.translation import load_model_and_tokenizer
from hf_vanilla.reranking import reverse_scores
torch.set_num_threads(1)
d = json.load(open(sys.argv[1]))
out = {}
for spec in sys.argv[3:]:
    name, path = spec.split("=", 1)
    start = time.time()
    out[name] = reverse_scores(d["nbest"], d["sources"], [load_model_and_tokenizer(path)], show_progress=False)
    print(name, time.time() - start, flush=True)
json.dump(out, open(sys.argv[2], "w"))
