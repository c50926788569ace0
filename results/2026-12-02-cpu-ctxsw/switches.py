"""Per-step voluntary context switches of two stepping threads: free vs a whole-step lock."""
import sys, threading, time, statistics
import torch
torch.set_num_threads(1)
LOCK = threading.Lock()
def vol():
    for line in open("/proc/thread-self/status"):
        if line.startswith("voluntary_ctxt_switches"):
            return int(line.split()[1])
def step(x, w, locked):
    if locked:
        with LOCK:
            for _ in range(20): x = torch.tanh(x @ w)
    else:
        for _ in range(20): x = torch.tanh(x @ w)
    return x
def worker(i, locked, out):
    x = torch.randn(64, 256); w = torch.randn(256, 256) / 16
    res = []
    for k in range(40):
        v0, t0 = vol(), time.monotonic(); step(x, w, locked); res.append((vol() - v0, time.monotonic() - t0))
    out[i] = res[5:]
for si in (1e-5, 5e-3):
    sys.setswitchinterval(si)
    for locked in (False, True):
        out = {}
        ts = [threading.Thread(target=worker, args=(i, locked, out)) for i in range(2)]
        [t.start() for t in ts]; [t.join() for t in ts]
        sw = [s for i in out for s, _ in out[i]]; dur = [d for i in out for _, d in out[i]]
        print(f"switch {si:g} locked={locked}: vol switches/step median {statistics.median(sw)} min {min(sw)} max {max(sw)}; step ms {1000*statistics.median(dur):.1f}")
