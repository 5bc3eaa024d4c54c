"""Throwaway: two dumps of the same validation set (e.g. 3 and 4 ensemble members) compared on held-out halves: for
each of 200 random halves and each feature set, weights chosen on one half, scored on the other; the second dump's
held-out score minus the first's, paired by split. python crossval2.py FIRST.json SECOND.json [SPLITS]"""
import sys
from pathlib import Path
import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "cpu-2026-11-27-language-model"))
from crossval import chosen_stats, halves, held_out  # noqa: E402

variants = {"beam": (), "rev+r2l": ("rev", "r2l"), "+lm": ("rev", "r2l", "lm"), "all": ("rev", "r2l", "lm", "wb")}
(first, n), (second, n2) = chosen_stats(sys.argv[1]), chosen_stats(sys.argv[2])
assert n == n2
splits = int(sys.argv[3]) if len(sys.argv) > 3 else 200
everything = np.arange(n)
rows = {v: [] for v in variants}
for a, b in halves(n, splits):
    for v, names in variants.items():
        rows[v].append([held_out(chosen, names, a, b)[1] for chosen in (first, second)])
for v, names in variants.items():
    full = [held_out(chosen, names, everything, everything)[0] for chosen in (first, second)]
    r = np.array(rows[v]); gain = r[:, 1] - r[:, 0]
    print(f"{v:8s} full validation, chosen on it: {full[0]:.2f} -> {full[1]:.2f};  held-out halves {r[:,0].mean():.2f} -> {r[:,1].mean():.2f}: "
          f"{gain.mean():+.2f} (sd {gain.std():.2f}, better in {(gain > 0).mean():.0%})")
