"""Throwaway: how much each reranking feature is worth on held-out validation. Random halves of validation: the
weights chosen on one half (grid of best_recipe.sh), scored on the other; mean over splits, per feature set.
python crossval.py DIRECTION|DUMP.json SPLITS; `chosen_stats` and `held_out` serve ../cpu-2026-11-27-seed12/crossval2.py."""
import itertools, json, sys
import numpy as np
from sacrebleu.metrics import BLEU

bleu = BLEU(lowercase=True)
grid = {"rev": [0, 0.1, 0.2, 0.3, 0.5, 1], "r2l": [0, 0.2, 0.5, 1, 2], "lm": [0, 0.1, 0.2, 0.3, 0.5, 0.7], "wb": [0, 0.02, 0.04]}
combos = list(itertools.product(*grid.values()))

def chosen_stats(path):
    """Each weighting's chosen hypotheses, as sacreBLEU's sufficient statistics (sentences, 10); and the sentences."""
    d = json.load(open(path))
    refs, nbest, F = d["refs"], d["nbest"], d["features"]
    n, k = len(nbest), max(len(h) for h in nbest)
    def pad(rows, fill):
        return np.array([[*r, *[fill] * (k - len(r))] for r in rows], dtype=float)
    base = pad([[s for _, s in h] for h in nbest], -1e9)
    feature = {"rev": pad(F["rerank_weight"], 0.0), "r2l": pad(F["right_to_left_weight"], 0.0), "lm": pad(F["lm"], 0.0),
               "wb": pad([[len(t.split()) for t, _ in h] for h in nbest], 0.0)}
    stats = np.zeros((n, k, 10))
    for i, hyps in enumerate(nbest):
        s = bleu._extract_corpus_statistics([t.lower() for t, _ in hyps], [[refs[i].lower()] * len(hyps)])
        stats[i, : len(hyps)] = np.array(s)
    chosen = {}
    for combo in combos:
        total = base + sum(w * feature[name] for name, w in zip(grid, combo))
        chosen[combo] = stats[np.arange(n), total.argmax(1)]
    return chosen, n

def corpus(rows):
    return bleu._compute_score_from_stats(list(rows.sum(0))).score

def held_out(chosen, names, chosen_on, scored_on):
    """The weighting of features `names` best on sentences `chosen_on`: its BLEU there and on `scored_on`."""
    allowed = [c for c in combos if all(w == 0 for name, w in zip(grid, c) if name not in names)]
    best = max(allowed, key=lambda c: corpus(chosen[c][chosen_on]))
    return corpus(chosen[best][chosen_on]), corpus(chosen[best][scored_on])

def halves(n, splits):
    """`splits` random halves of n sentences (the same ones on every call): (chosen on, scored on)."""
    rng = np.random.default_rng(0)
    for _ in range(splits):
        order = rng.permutation(n)
        yield order[: n // 2], order[n // 2 :]

if __name__ == "__main__":
    fw, splits = sys.argv[1], int(sys.argv[2])  # fw: a direction (its dump here) or a dump's path
    chosen, n = chosen_stats(fw if fw.endswith(".json") else f"/tmp/analysis/{fw}-validation-b12-lm.json")
    variants = {"beam": ("",), "rev+r2l": ("rev", "r2l"), "+wb": ("rev", "r2l", "wb"), "+lm": ("rev", "r2l", "lm"), "all": ("rev", "r2l", "lm", "wb")}
    result = {v: [] for v in variants}
    for a, b in halves(n, splits):
        for v, names in variants.items():
            result[v].append(held_out(chosen, names, a, b))
    reference = np.array(result["rev+r2l"])[:, 1]
    for v, rows in result.items():
        rows = np.array(rows)
        gain = rows[:, 1] - reference
        print(f"{fw} {v:8s} chosen-half {rows[:,0].mean():.2f}  held-out {rows[:,1].mean():.2f}  held-out minus rev+r2l "
              f"{gain.mean():+.2f} (sd {gain.std():.2f}, better in {(gain > 0).mean():.0%})")
