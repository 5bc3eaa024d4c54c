import json, sys, math, itertools
import sacrebleu
from sacrebleu.metrics import BLEU
fw, beam = sys.argv[1], sys.argv[2]
d = json.load(open(f"/tmp/analysis/{fw}-validation-b{beam}.json"))
refs, nbest, F, L = d["refs"], d["nbest"], d["features"], d["target_token_lengths"]
def lc_bleu(hyps): return sacrebleu.corpus_bleu([h.lower() for h in hyps], [[r.lower() for r in refs]]).score
def pick(score_fn):
    out = []
    for i, hyps in enumerate(nbest):
        tot = [score_fn(i, k) for k in range(len(hyps))]
        out.append(hyps[max(range(len(tot)), key=tot.__getitem__)][0])
    return out
W = [0, 0.1, 0.2, 0.3, 0.5, 1, 1.5, 2]
rev, r2l = F["rerank_weight"], F["right_to_left_weight"]
def base(i, k): return nbest[i][k][1]
res = {}
for a, b in itertools.product(W, W):
    res[(a, b)] = lc_bleu(pick(lambda i, k: base(i, k) + a * rev[i][k] + b * r2l[i][k]))
best = max(res, key=res.get); print("grid best", best, round(res[best], 2), "beam only", round(res[(0, 0)], 2))
a0, b0 = best
# length penalty variants at rerank time (raw sum = score * len)
for lp in [0.6, 0.8, 1.2, 1.4]:
    r = {}
    for a, b in itertools.product(W, W):
        r[(a, b)] = lc_bleu(pick(lambda i, k: base(i, k) * L[i][k] / L[i][k] ** lp + a * rev[i][k] + b * r2l[i][k]))
    bb = max(r, key=r.get); print("lp", lp, bb, round(r[bb], 2))
# word bonus
for wb in [float(x) for x in sys.argv[3].split(",")]:
    r = {}
    for a, b in itertools.product(W, W):
        r[(a, b)] = lc_bleu(pick(lambda i, k: base(i, k) + a * rev[i][k] + b * r2l[i][k] + wb * len(nbest[i][k][0].split())))
    bb = max(r, key=r.get); print("word bonus", wb, bb, round(r[bb], 2))
