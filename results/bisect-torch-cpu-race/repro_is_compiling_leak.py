"""torch.compiler.is_compiling() reads True in a thread that is not compiling.

thread A is inside a dynamo compile (its backend callback); thread B, in eager code,
reads torch.compiler.is_compiling().

Exits 1 when the hazard shows, 0 when it does not, 2 when its own setup failed.
Verified by racegate (python -m harness repro) on CPU Intel(R) Xeon(R) Processor, 2 cores, Linux:
  torch 2.13.0+cpu (commit cf30153c4c13), Python 3.11.7: exit 1
  torch 2.12.1+cu130 (commit 7269437d6557), Python 3.11.7: exit 0
Run: python repro_is_compiling_leak.py   (torch only; no GPU needed)
"""

import sys
import threading

import torch

TIMEOUT = 60.0
arrived, go = threading.Event(), threading.Event()


def park():
    arrived.set()
    go.wait(TIMEOUT)

def backend(gm, example_inputs):
    park()  # A is inside a dynamo compile (its backend callback)
    return gm.forward


def a_fn():
    torch.compile(lambda t: t.sin() + 1, backend=backend)(torch.ones(3))


def b_fn():
    seen = torch.compiler.is_compiling()
    return seen, f"B read torch.compiler.is_compiling() == {seen}"


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
