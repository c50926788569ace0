"""A cross-thread race in dynamo's cache lookup: a compiled function whose cache already holds
an entry for every input a thread will pass still "recompiles" when threads hit *different*
entries at once and those entries carry dynamic-shape (Python-level) guards.

Setup: one function, warmed single-threaded on three sizes × two dtypes (the second size makes
dynamo mark the dim dynamic: symbolic guards), then `set_stance("fail_on_recompile")`; four
threads each call it on one of those already-compiled inputs, N times. Any RuntimeError
"Detected recompile" is a spurious cache miss (every input was compiled before).

    python scripts/guard_lookup_race.py N [one|two] [static] [default] [retry] [lock]

one/two: one torch.compile wrapper, or two (one per dtype, like a per-device wrapper);
static: torch.compile(dynamic=False) (one static entry per size: C++-only guards);
default: keep Python's default GIL switch interval (else 10 µs);
retry: call again once when the stance raises (a spurious miss hits the cache on the retry; a
real recompile raises again);
lock: one process-wide lock around every compiled call (lookups no longer overlap).
Prints the torch version, the number of threads that hit a spurious recompile, and (retry)
how many calls needed a retry.
"""

import sys
import threading

import torch

sys.setswitchinterval(sys.getswitchinterval() if "default" in sys.argv else 1e-5)


def f(x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    return (x * 2).sin() + y.sum()


DYNAMIC = False if "static" in sys.argv else None
first = torch.compile(f, dynamic=DYNAMIC)
wrappers = [first, first] if "one" in sys.argv else [first, torch.compile(f, dynamic=DYNAMIC)]
dtypes = [torch.float32, torch.float64]
inputs = {}
for i in range(2):
    for n in (64, 96, 128):
        args = (torch.randn(n, dtype=dtypes[i]), torch.randn(n // 2, dtype=dtypes[i]))
        wrappers[i](*args)
        inputs[(i, n)] = args
torch.compiler.set_stance("fail_on_recompile")
errors: list[str] = []
retried: list[int] = []
calls = int(sys.argv[1]) if len(sys.argv) > 1 and sys.argv[1].isdigit() else 5000
RETRY = "retry" in sys.argv
LOCK = threading.Lock() if "lock" in sys.argv else None


def call(fn, *args):
    if LOCK is not None:
        with LOCK:
            return fn(*args)
    try:
        return fn(*args)
    except RuntimeError as e:
        if not (RETRY and "Detected recompile" in str(e)):
            raise
        retried.append(1)
        return fn(*args)  # a real recompile raises here again


def body(k: int) -> None:
    i, n = k % 2, (64, 128)[k // 2]
    try:
        for _ in range(calls):
            call(wrappers[i], *inputs[(i, n)])
    except RuntimeError as e:
        errors.append(str(e)[:600])


threads = [threading.Thread(target=body, args=(k,)) for k in range(4)]
for t in threads:
    t.start()
for t in threads:
    t.join()
print(torch.__version__, "spurious recompiles:", len(errors), "retried calls:", len(retried))
if errors:
    print(errors[0])
