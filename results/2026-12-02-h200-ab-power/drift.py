"""Issue 21: each A/B pool's tokens/s against time: the plain two-sample fit and one with a linear
drift term (log tokens/s ~ 1 + minutes + side). Run from the repo root:
  .venv/bin/python results/2026-12-02-h200-ab-power/drift.py $(find results -name reference.jsonl -path "*ab*" -exec dirname {} \;)
"""
import json, sys, datetime as dt, numpy as np
from pathlib import Path
def fit(d):
    rows=[]
    for side in ("reference","candidate"):
        p=Path(d)/f"{side}.jsonl"
        for l in open(p):
            r=json.loads(l)
            if r.get("tokens_per_s"): rows.append((dt.datetime.fromisoformat(r["started_at"]).timestamp(), side=="candidate", r["tokens_per_s"]))
    rows.sort()
    t=np.array([r[0] for r in rows]); t=(t-t[0])/60; c=np.array([r[1] for r in rows],float); y=np.log([r[2] for r in rows])
    for name, X in (("plain", np.c_[np.ones_like(t), c]), ("drift", np.c_[np.ones_like(t), t, c])):
        beta,*_=np.linalg.lstsq(X,y,rcond=None); r=y-X@beta; k=X.shape[1]; s=np.sqrt((r**2).sum()/(len(y)-k))
        se=np.sqrt((s**2*np.linalg.inv(X.T@X))[-1,-1])
        print(f"  {name}: ratio {np.exp(beta[-1]):.3f} ±{1.96*se*100:.1f}% (z), resid sd {s*100:.2f}%", f"drift {beta[1]*100:+.2f}%/min" if name=="drift" else "")
for d in sys.argv[1:]:
    print(d); fit(d)
