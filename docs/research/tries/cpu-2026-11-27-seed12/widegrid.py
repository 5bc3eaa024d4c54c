"""Throwaway: does a wider weight grid than best_recipe.sh's help on held-out validation halves?
python widegrid.py DUMP.json [SPLITS]"""
import itertools, sys
from pathlib import Path
import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "cpu-2026-11-27-language-model"))
import crossval  # noqa: E402

wide = {"rev": [0, 0.1, 0.2, 0.3, 0.5, 0.7, 1, 1.5, 2], "r2l": [0, 0.2, 0.5, 1, 2, 3], "lm": [0, 0.1, 0.2, 0.3, 0.5, 0.7, 1],
        "wb": [0, 0.02, 0.04, 0.06, 0.08, 0.1, 0.15]}
path, splits = sys.argv[1], int(sys.argv[2]) if len(sys.argv) > 2 else 100
names = ("rev", "r2l", "lm", "wb")
results = {}
for name, g in (("script grid", dict(crossval.grid)), ("wide grid", wide)):
    crossval.grid = g
    crossval.combos = list(itertools.product(*g.values()))
    chosen, n = crossval.chosen_stats(path)
    full = crossval.held_out(chosen, names, np.arange(n), np.arange(n))[0]
    rows = np.array([crossval.held_out(chosen, names, a, b) for a, b in crossval.halves(n, splits)])
    results[name] = rows[:, 1]
    print(f"{name} ({len(crossval.combos)} weightings): full validation {full:.2f}; chosen half {rows[:,0].mean():.2f}, held-out {rows[:,1].mean():.2f}")
gain = results["wide grid"] - results["script grid"]
print(f"wide minus script grid, held-out: {gain.mean():+.2f} (sd {gain.std():.2f}, better in {(gain > 0).mean():.0%})")
