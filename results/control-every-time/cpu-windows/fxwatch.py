"""Experiment: when is torch's FX-tracing flag up, and when do compiled calls check it.

A workload (`fxwatch:tiny5`: the built-in drafter, tiny preset, five buckets) whose run
children log every FX trace (torch.fx Tracer.trace: start, end, thread) and every check of the
flag a compiled call makes (torch.fx._symbolic_trace.is_fx_symbolic_tracing: time, thread,
value), one JSON line each, into a file per run child under the folder FXWATCH_OUT names (made
by you, private). an2.py FOLDER prints, per window, when the other thread called last before
it and next after it."""

import json
import os
import threading
import time
import uuid

import torch
import torch.fx._symbolic_trace as st

from racegate.model.workload import make_workload as _make

EVENTS = []
_state = {"path": None}


def _after_fork():
    EVENTS.clear()
    _state["path"] = os.path.join(os.environ["FXWATCH_OUT"], f"{uuid.uuid4().hex}.jsonl")
    threading.Thread(target=_flush, daemon=True).start()


os.register_at_fork(after_in_child=_after_fork)


def _flush():
    while True:
        time.sleep(0.1)
        if EVENTS:
            batch = EVENTS[:]
            del EVENTS[: len(batch)]
            with open(_state["path"], "a") as f:
                for e in batch:
                    f.write(json.dumps(e) + "\n")


_orig_trace = st.Tracer.trace


def trace(self, *a, **k):
    t0 = time.monotonic()
    try:
        return _orig_trace(self, *a, **k)
    finally:
        tid, kind = threading.get_native_id(), type(self).__name__
        EVENTS.append(("trace", tid, t0, time.monotonic(), kind))


st.Tracer.trace = trace
_orig_is = st.is_fx_symbolic_tracing


def is_fx_symbolic_tracing():
    v = _orig_is()
    EVENTS.append(("check", threading.get_native_id(), time.monotonic(), v))
    return v


st.is_fx_symbolic_tracing = is_fx_symbolic_tracing


def tiny5(preset="tiny"):
    return _make("tiny", seq_buckets=(128, 96, 64, 112, 80))


def tiny5_1t(preset="tiny"):
    torch.set_num_threads(1)
    return _make("tiny", seq_buckets=(128, 96, 64, 112, 80))
