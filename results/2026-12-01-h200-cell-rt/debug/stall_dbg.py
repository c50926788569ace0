"""Debug: log every stall-watch sample and raw dump, then run `harness run` in-process."""
import hashlib, os, sys, time, threading
from pathlib import Path
sys.path.insert(0, os.getcwd())
from harness.run import stall, stacks
OUT = Path(os.environ["DBG_OUT"]); OUT.mkdir(parents=True, exist_ok=True)
LOG = open(OUT / "samples.log", "a", buffering=1)
_lock = threading.Lock()
_n = {}
_prev = {}
orig_dump = stall.request_dump
def request_dump(pid, path):
    t = time.monotonic()
    text = orig_dump(pid, path)
    o = stacks.ours(text)
    with _lock:
        k = _n[pid] = _n.get(pid, 0) + 1
    import difflib
    prev = _prev.get(pid, "")
    _prev[pid] = o
    with _lock, open(OUT / "diffs.txt", "a") as fh:
        fh.write(f"==== pid {pid} dump {k} raw {len(text)} ours {len(o)}\n")
        if k <= 2 or len(o) == 0:
            fh.write(text[:3000] + "\n")
        fh.write("\n".join(list(difflib.unified_diff(prev.splitlines(), o.splitlines(), lineterm="", n=1))[:60]) + "\n")
    LOG.write(f"{t:.2f} dump pid={pid} k={k} raw={len(text)} ours={len(o)} h={hashlib.md5(o.encode()).hexdigest()[:8]} took={time.monotonic()-t:.2f}\n")
    return text
stall.request_dump = request_dump
orig_sample = stall.StallWatch.sample
def sample(self, live, now):
    r = orig_sample(self, live, now)
    LOG.write(f"{now:.2f} sample live={live} idle_cores={self.idle_cores} ours_last={self._last_ours:.2f} same_since={self._same_since} ret={r}\n")
    return r
stall.StallWatch.sample = sample
from harness.cli import main
sys.exit(main(sys.argv[1:]))
