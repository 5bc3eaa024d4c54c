"""Throwaway: two dumps of the same validation set (e.g. 3 and 4 ensemble members) compared on held-out halves: for
each of 200 random halves and each feature set, weights chosen on one half, scored on the other; the second dump's
held-out score minus the first's, paired by split. python crossval2.py FIRST.json SECOND.json [SPLITS]"""
import itertools, json, sys
import numpy as np
from sacrebleu.metrics import BLEU

bleu = BLEU(lowercase=True)
grid = {"rev": [0, 0.1, 0.2, 0.3, 0.5, 1], "r2l": [0, 0.2, 0.5, 1, 2], "lm": [0, 0.1, 0.2, 0.3, 0.5, 0.7], "wb": [0, 0.02, 0.04]}
variants = {"beam": (), "rev+r2l": ("rev", "r2l"), "+lm": ("rev", "r2l", "lm"), "all": ("rev", "r2l", "lm", "wb")}
combos = list(itertools.product(*grid.values()))

def chosen_stats(path):
    d = json.load(open(path))
    refs, nbest, F = d["refs"], d["nbest"], d["features"]
    n, k = len(nbest), max(len(h) for h in nbest)
    pad = lambda rows, fill: np.array([[*r, *[fill] * (k - len(r))] for r in rows], dtype=float)
    feature = {"rev": pad(F["rerank_weight"], 0), "r2l": pad(F["right_to_left_weight"], 0), "lm": pad(F["lm"], 0),
               "wb": pad([[len(t.split()) for t, _ in h] for h in nbest], 0)}
    base = pad([[s for _, s in h] for h in nbest], -1e9)
    stats = np.zeros((n, k, 10))
    for i, hyps in enumerate(nbest):
        stats[i, : len(hyps)] = np.array(bleu._extract_corpus_statistics([t.lower() for t, _ in hyps], [[refs[i].lower()] * len(hyps)]))
    out = {}
    for combo in combos:
        total = base + sum(w * feature[name] for name, w in zip(grid, combo))
        out[combo] = stats[np.arange(n), total.argmax(1)]
    return out, n

corpus = lambda rows: bleu._compute_score_from_stats(list(rows.sum(0))).score
first, n = chosen_stats(sys.argv[1])
second, n2 = chosen_stats(sys.argv[2])
assert n == n2
splits = int(sys.argv[3]) if len(sys.argv) > 3 else 200
rng = np.random.default_rng(0)
rows = {v: [] for v in variants}
for _ in range(splits):
    order = rng.permutation(n)
    a, b = order[: n // 2], order[n // 2 :]
    for v, names in variants.items():
        allowed = [c for c in combos if all(w == 0 for name, w in zip(grid, c) if name not in names)]
        scores = []
        for chosen in (first, second):
            best = max(allowed, key=lambda c: corpus(chosen[c][a]))
            scores.append(corpus(chosen[best][b]))
        rows[v].append(scores)
full = {v: (corpus(first[max([c for c in combos if all(w == 0 for nm, w in zip(grid, c) if nm not in names)], key=lambda c: corpus(first[c]))]),
            corpus(second[max([c for c in combos if all(w == 0 for nm, w in zip(grid, c) if nm not in names)], key=lambda c: corpus(second[c]))]))
        for v, names in variants.items()}
for v, r in rows.items():
    r = np.array(r); gain = r[:, 1] - r[:, 0]
    print(f"{v:8s} full validation, chosen on it: {full[v][0]:.2f} -> {full[v][1]:.2f};  held-out halves {r[:,0].mean():.2f} -> {r[:,1].mean():.2f}: "
          f"{gain.mean():+.2f} (sd {gain.std():.2f}, better in {(gain > 0).mean():.0%})")
