"""Throwaway: the en->de wide dump with its reverse feature averaged over other de->en model sets."""
import json
d = json.load(open("/tmp/analysis/en-de-wide-validation.json"))
parts = json.load(open("/tmp/analysis/en-de-wide-rev-parts.json"))
old = d["features"]["rerank_weight"]
def mix(terms):  # terms: (weight, rows)
    total = sum(w for w, _ in terms)
    return [[sum(w * rows[i][r] for w, rows in terms) / total for r in range(len(old[i]))] for i in range(len(old))]
variants = {
    "teacher-wide": mix([(1, parts["T"]), (1, parts["W4"]), (1, parts["W5"])]),
    "all5": mix([(3, old), (1, parts["W4"]), (1, parts["W5"])]),
    "wide": mix([(1, parts["W4"]), (1, parts["W5"])]),
}
for name, rows in variants.items():
    d["features"]["rerank_weight"] = rows
    json.dump(d, open(f"/tmp/analysis/en-de-wide-rev-{name}.json", "w"))
    print(name)
