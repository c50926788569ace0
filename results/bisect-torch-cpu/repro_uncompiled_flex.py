"""transformers' flex branch runs uncompiled flex_attention while another thread compiles.

transformers (integrations/flex_attention.py, 5.6-5.25) calls plain flex_attention when
torch.compiler.is_compiling() is True, else its compiled singleton. Thread A is inside
a dynamo compile; thread B takes that branch. Where the compile holds a process-global
is_compiling flag, B silently runs uncompiled flex (a dense score matrix: slow).

Exits 1 when the hazard shows, 0 when it does not, 2 when its own setup failed.
Verified by racegate (python -m harness repro) on CPU Intel(R) Xeon(R) Processor, 2 cores, Linux:
  torch 2.13.0+cpu (commit cf30153c4c13), Python 3.11.7: exit 1
  torch 2.12.1+cu130 (commit 7269437d6557), Python 3.11.7: exit 0
Run: python repro_uncompiled_flex.py   (torch only; no GPU needed)
"""

import sys
import threading

import torch

TIMEOUT = 60.0
arrived, go = threading.Event(), threading.Event()


def park():
    arrived.set()
    go.wait(TIMEOUT)

from torch.nn.attention.flex_attention import flex_attention

def backend(gm, example_inputs):
    park()  # A is inside a dynamo compile (its backend callback)
    return gm.forward


def a_fn():
    torch.compile(lambda t: t.sin() + 1, backend=backend)(torch.ones(3))

compiled_flex = torch.compile(flex_attention, backend="eager")
qkv = [torch.randn(1, 1, 16, 8) for _ in range(3)]
compiled_flex(*qkv), flex_attention(*qkv)  # warm both paths: B compiles nothing


def b_fn():
    uncompiled = torch.compiler.is_compiling()  # what transformers' branch asks
    (flex_attention if uncompiled else compiled_flex)(*qkv)
    return uncompiled, f"B ran {'UNCOMPILED' if uncompiled else 'compiled'} flex_attention"


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
