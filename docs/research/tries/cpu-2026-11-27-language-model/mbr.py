import json, sys, math, itertools
import sacrebleu
from sacrebleu.metrics import BLEU, CHRF
fw, beam, a0, b0 = sys.argv[1], sys.argv[2], float(sys.argv[3]), float(sys.argv[4])
d = json.load(open(f"/tmp/analysis/{fw}-validation-b{beam}.json"))
refs, nbest, F = d["refs"], d["nbest"], d["features"]
rev, r2l = F["rerank_weight"], F["right_to_left_weight"]
bleu = BLEU(effective_order=True)
def lc_bleu(hyps): return sacrebleu.corpus_bleu([h.lower() for h in hyps], [[r.lower() for r in refs]]).score
util = []
for hyps in nbest:
    texts = [h for h, _ in hyps]
    util.append([[bleu.sentence_score(texts[k], [texts[j]]).score / 100 if j != k else 1.0 for j in range(len(texts))] for k in range(len(texts))])
print("utilities done")
tot = [[nbest[i][k][1] + a0 * rev[i][k] + b0 * r2l[i][k] for k in range(len(nbest[i]))] for i in range(len(nbest))]
print("reranked", round(lc_bleu([nbest[i][max(range(len(t)), key=t.__getitem__)][0] for i, t in enumerate(tot)]), 2))
for T in [1, 2, 5, 10, 20]:
    exp_u = []
    for i, t in enumerate(tot):
        m = max(t); p = [math.exp(T * (x - m)) for x in t]; z = sum(p); p = [x / z for x in p]
        exp_u.append([sum(p[j] * util[i][k][j] for j in range(len(t))) for k in range(len(t))])
    for m in [0.5, 1, 2, 5, 1000]:
        out = [nbest[i][max(range(len(t)), key=lambda k: t[k] + m * exp_u[i][k])][0] for i, t in enumerate(tot)]
        print("T", T, "mbr weight", m, round(lc_bleu(out), 2))
