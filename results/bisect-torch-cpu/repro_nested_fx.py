"""A compiled call raises while another thread is inside make_fx (nested-FX error).

thread A is held inside torch.fx's make_fx (Tracer.trace, as AOTAutograd and inductor
trace); thread B calls a function compiled earlier. Where the FX tracing flag is
process-global, B raises 'Detected that you are using FX to symbolically trace a
dynamo-optimized function'.

Exits 1 when the hazard shows, 0 when it does not, 2 when its own setup failed.
Verified by racegate (python -m harness repro) on CPU Intel(R) Xeon(R) Processor, 2 cores, Linux:
  torch 2.13.0+cpu (commit cf30153c4c13), Python 3.11.7: exit 1
  torch 2.14.0+cu130 (commit 08187d9e0fba), Python 3.11.7: exit 0
Run: python repro_nested_fx.py   (torch only; no GPU needed)
"""

import sys
import threading

import torch

TIMEOUT = 60.0
arrived, go = threading.Event(), threading.Event()


def park():
    arrived.set()
    go.wait(TIMEOUT)

from torch.fx.experimental.proxy_tensor import make_fx

compiled = torch.compile(lambda t: t * 2 + 1, backend="eager")
x = torch.ones(4)
compiled(x)  # compiled here; B's call is a cache hit


def b_fn():
    try:
        compiled(x)
    except RuntimeError as e:
        return True, f"B's compiled call raised: {str(e).splitlines()[0]}"
    return False, "B's compiled call returned normally"


def traced(t):
    park()  # A is inside Tracer.trace: the FX tracing flag is set
    return t + 1


def a_fn():
    make_fx(traced)(torch.ones(2))


def main():
    a = threading.Thread(target=a_fn, daemon=True)
    a.start()
    if not arrived.wait(TIMEOUT):
        print("setup: thread A never reached its hold point")
        return 2
    out = {}
    b = threading.Thread(target=lambda: out.update(r=b_fn()), daemon=True)
    b.start()
    b.join(TIMEOUT)
    go.set()
    a.join(TIMEOUT)
    if "r" not in out:
        print("setup: thread B did not finish")
        return 2
    hazard, detail = out["r"]
    print(f"torch {torch.__version__}: {detail}")
    return 1 if hazard else 0


if __name__ == "__main__":
    sys.exit(main())
