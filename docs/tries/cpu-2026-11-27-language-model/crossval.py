"""Throwaway: how much each reranking feature is worth on held-out validation. Random halves of validation: the
weights chosen on one half (grid of best_recipe.sh), scored on the other; mean over splits, per feature set."""
import itertools, json, sys
import numpy as np
from sacrebleu.metrics import BLEU

fw, splits = sys.argv[1], int(sys.argv[2])  # fw: a direction (its dump here) or a dump's path
d = json.load(open(fw if fw.endswith(".json") else f"/tmp/analysis/{fw}-validation-b12-lm.json"))
refs, nbest, F = d["refs"], d["nbest"], d["features"]
n, k = len(nbest), max(len(h) for h in nbest)
bleu = BLEU(lowercase=True)
def pad(rows, fill):
    return np.array([[*r, *[fill] * (k - len(r))] for r in rows], dtype=float)
base = pad([[s for _, s in h] for h in nbest], -1e9)
rev, r2l, lm = (pad(F[name], 0.0) for name in ("rerank_weight", "right_to_left_weight", "lm"))
words = pad([[len(t.split()) for t, _ in h] for h in nbest], 0.0)
stats = np.zeros((n, k, 10))  # sacreBLEU's sufficient statistics per hypothesis
for i, hyps in enumerate(nbest):
    s = bleu._extract_corpus_statistics([t.lower() for t, _ in hyps], [[refs[i].lower()] * len(hyps)])
    stats[i, : len(hyps)] = np.array(s)
def corpus(rows):
    return bleu._compute_score_from_stats(list(rows.sum(0))).score
grid = {"rev": [0, 0.1, 0.2, 0.3, 0.5, 1], "r2l": [0, 0.2, 0.5, 1, 2], "lm": [0, 0.1, 0.2, 0.3, 0.5, 0.7], "wb": [0, 0.02, 0.04]}
variants = {"beam": ("",), "rev+r2l": ("rev", "r2l"), "+wb": ("rev", "r2l", "wb"), "+lm": ("rev", "r2l", "lm"), "all": ("rev", "r2l", "lm", "wb")}
feature = {"rev": rev, "r2l": r2l, "lm": lm, "wb": words}
combos = list(itertools.product(*grid.values()))
chosen = {}
for combo in combos:
    total = base + sum(w * feature[name] for name, w in zip(grid, combo))
    chosen[combo] = stats[np.arange(n), total.argmax(1)]  # (n, 10)
rng = np.random.default_rng(0)
result = {v: [] for v in variants}
for _ in range(splits):
    order = rng.permutation(n)
    a, b = order[: n // 2], order[n // 2 :]
    for v, names in variants.items():
        allowed = [c for c in combos if all(w == 0 for name, w in zip(grid, c) if name not in names)]
        best = max(allowed, key=lambda c: corpus(chosen[c][a]))
        result[v].append((corpus(chosen[best][a]), corpus(chosen[best][b])))
reference = np.array(result["rev+r2l"])[:, 1]
for v, rows in result.items():
    rows = np.array(rows)
    gain = rows[:, 1] - reference
    print(f"{fw} {v:8s} chosen-half {rows[:,0].mean():.2f}  held-out {rows[:,1].mean():.2f}  held-out minus rev+r2l "
          f"{gain.mean():+.2f} (sd {gain.std():.2f}, better in {(gain > 0).mean():.0%})")
