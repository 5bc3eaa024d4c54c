"""Throwaway: a dump's lowercased validation BLEU with each feature set's weights chosen on all of validation."""
import sys
from pathlib import Path
import numpy as np
sys.path.insert(0, "/work/main/docs/research/tries/cpu-2026-11-27-language-model")
from crossval import chosen_stats, held_out
chosen, n = chosen_stats(sys.argv[1])
everything = np.arange(n)
for v, names in {"beam": (), "rev+r2l": ("rev", "r2l"), "+lm": ("rev", "r2l", "lm"), "all": ("rev", "r2l", "lm", "wb")}.items():
    print(sys.argv[1], v, f"{held_out(chosen, names, everything, everything)[0]:.2f}")
