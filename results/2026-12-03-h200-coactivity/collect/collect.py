"""Scratch (device): small on cuda:0 at 2 threads, built-in and serial; pickle each run's
evidence and append its record, so a judge's rule can be re-read offline."""
import os, pickle, sys, time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
sys.path.insert(0, os.getcwd())
from harness.run import runner
from harness.judge.decide import decide
from harness.record import append_jsonl
from harness.scenario import make_scenario
out = Path(sys.argv[1]); out.mkdir(parents=True, exist_ok=True)
deadline = time.time() + float(sys.argv[2])
SERIAL = "tests.serial_workload:make_workload"
CASES = [  # (name, strategy, cache_state, workload, repeats)
    ("serial", "warmup_locked", "cold", SERIAL, 2),
    ("serial", "eager", "cold", SERIAL, 2),
    ("builtin", "warmup_locked", "cold", None, 2),
    ("builtin", "warmup_locked", "warm", None, 2),
    ("builtin", "processes", "cold", None, 2),
    ("builtin", "warmup", "deleted", None, 1),
    ("builtin", "eager", "cold", None, 1),
    ("serial", "processes", "cold", SERIAL, 1),
]
def one(job):
    name, strategy, cache, wl, k = job
    if time.time() > deadline - 100:
        return f"{name} {strategy} {cache} #{k}: not started"
    extra = {"workload": wl} if wl else {}
    sc = make_scenario(preset="small", strategy=strategy, cache_state=cache, devices="0",
                       threads_per_device=2, timeout_s=120, **extra)
    ev = runner.collect(sc)
    rec = decide(ev)
    tag = f"{name}-{strategy}-{cache}-{k}"
    (out / f"{tag}.pkl").write_bytes(pickle.dumps(ev))
    append_jsonl(out / "records.jsonl", rec)
    sh = " ".join("-" if t.coactive_share is None else f"{t.coactive_share:.2f}" for t in rec.threads)
    return f"{tag}\t{rec.outcome}\t{sh}\t{(rec.detail or '')[:200]}"
jobs = [(n, s, c, w, k) for n, s, c, w, r in CASES for k in range(r)]
with ThreadPoolExecutor(4) as pool:
    for line in pool.map(one, jobs):
        print(line, flush=True)
