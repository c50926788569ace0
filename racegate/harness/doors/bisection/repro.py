"""Standalone reproducers: one file per hazard (torch only, no racegate import), verified first.

`verified(probe, bad_env, good_env)` renders the reproducer for a probe's hazard, runs that
exact text with both environments' interpreters, and hands it back only when it exits 1 on
the release that has the hazard and 0 on the one that does not; its docstring states the
versions, commits, hardware and those exit codes. Each reproducer forces the interleaving the
probe of the same name forces (racegate/harness/probes/cases.py): deterministic, CPU-runnable.
"""

from __future__ import annotations

import os
import platform
import tempfile
from dataclasses import dataclass
from pathlib import Path

from racegate.harness.doors.bisection.evidence import Runner, installed

MAX_LINES = 80
EXIT_HAZARD, EXIT_CLEAN = 1, 0  # 2: the reproducer's own setup failed


@dataclass(frozen=True)
class Template:
    title: str
    shows: str
    body: str  # defines a_fn() (parks via park()) and b_fn() -> (hazard, detail)


_COMPILED_CALL = """
compiled = torch.compile(lambda t: t * 2 + 1, backend="eager")
x = torch.ones(4)
compiled(x)  # compiled here; B's call is a cache hit


def b_fn():
    try:
        compiled(x)
    except RuntimeError as e:
        return True, f"B's compiled call raised: {str(e).splitlines()[0]}"
    return False, "B's compiled call returned normally"
"""

_PARKING_COMPILE = """
def backend(gm, example_inputs):
    park()  # A is inside a dynamo compile (its backend callback)
    return gm.forward


def a_fn():
    torch.compile(lambda t: t.sin() + 1, backend=backend)(torch.ones(3))
"""

TEMPLATES: dict[str, Template] = {
    "compiled_call_during_make_fx": Template(
        "A compiled call raises while another thread is inside make_fx (nested-FX error).",
        "thread A is held inside torch.fx's make_fx (Tracer.trace, as AOTAutograd and inductor\n"
        "trace); thread B calls a function compiled earlier. Where the FX tracing flag is\n"
        "process-global, B raises 'Detected that you are using FX to symbolically trace a\n"
        "dynamo-optimized function'.",
        "from torch.fx.experimental.proxy_tensor import make_fx\n"
        + _COMPILED_CALL
        + """

def traced(t):
    park()  # A is inside Tracer.trace: the FX tracing flag is set
    return t + 1


def a_fn():
    make_fx(traced)(torch.ones(2))
""",
    ),
    "compiled_call_during_compile": Template(
        "A compiled call raises while another thread compiles (the incident's error).",
        "thread A is inside torch.compile, held inside make_fx in its backend (as AOTAutograd\n"
        "and inductor trace); thread B calls a function compiled earlier. B raises the\n"
        "nested-FX error unless the release masks it (2.13's compile-session flag) or keeps\n"
        "the flag per thread (2.14+).",
        "from torch.fx.experimental.proxy_tensor import make_fx\n"
        + _COMPILED_CALL
        + """

def backend(gm, example_inputs):
    def traced(*args):
        park()  # A is inside make_fx inside its compile
        return gm(*args)

    make_fx(traced)(*example_inputs)
    return gm.forward


def a_fn():
    torch.compile(lambda t: t.sin() + 1, backend=backend)(torch.ones(3))
""",
    ),
    "compile_friendly_flex_uncompiled": Template(
        "transformers' flex branch runs uncompiled flex_attention while another thread compiles.",
        "transformers (integrations/flex_attention.py, 5.6-5.25) calls plain flex_attention when\n"
        "torch.compiler.is_compiling() is True, else its compiled singleton. Thread A is inside\n"
        "a dynamo compile; thread B takes that branch. Where the compile holds a process-global\n"
        "is_compiling flag, B silently runs uncompiled flex (a dense score matrix: slow).",
        "from torch.nn.attention.flex_attention import flex_attention\n"
        + _PARKING_COMPILE
        + """
compiled_flex = torch.compile(flex_attention, backend="eager")
qkv = [torch.randn(1, 1, 16, 8) for _ in range(3)]
compiled_flex(*qkv), flex_attention(*qkv)  # warm both paths: B compiles nothing


def b_fn():
    uncompiled = torch.compiler.is_compiling()  # what transformers' branch asks
    (flex_attention if uncompiled else compiled_flex)(*qkv)
    return uncompiled, f"B ran {'UNCOMPILED' if uncompiled else 'compiled'} flex_attention"
""",
    ),
    "is_compiling_leak": Template(
        "torch.compiler.is_compiling() reads True in a thread that is not compiling.",
        "thread A is inside a dynamo compile (its backend callback); thread B, in eager code,\n"
        "reads torch.compiler.is_compiling().",
        _PARKING_COMPILE
        + """

def b_fn():
    seen = torch.compiler.is_compiling()
    return seen, f"B read torch.compiler.is_compiling() == {seen}"
""",
    ),
    "gc_threshold_during_compile": Template(
        "A compile in one thread changes the GC thresholds of the whole process.",
        "thread A is inside a dynamo compile; thread B reads gc.get_threshold().",
        "import gc\n\nBEFORE = gc.get_threshold()\n"
        + _PARKING_COMPILE
        + """

def b_fn():
    seen = gc.get_threshold()
    return seen != BEFORE, f"gc thresholds {BEFORE} before, {seen} in B while A compiled"
""",
    ),
}

_FRAME = '''"""{title}

{shows}

Exits 1 when the hazard shows, 0 when it does not, 2 when its own setup failed.
Verified by racegate (python -m racegate repro) on {hardware}:
{results}
Run: python {name}   (torch only; no GPU needed)
"""

import sys
import threading

import torch

TIMEOUT = 60.0
arrived, go = threading.Event(), threading.Event()


def park():
    arrived.set()
    go.wait(TIMEOUT)

{body}

def main():
    a = threading.Thread(target=a_fn, daemon=True)
    a.start()
    if not arrived.wait(TIMEOUT):
        print("setup: thread A never reached its hold point")
        return 2
    out = {{}}
    b = threading.Thread(target=lambda: out.update(r=b_fn()), daemon=True)
    b.start()
    b.join(TIMEOUT)
    go.set()
    a.join(TIMEOUT)
    if "r" not in out:
        print("setup: thread B did not finish")
        return 2
    hazard, detail = out["r"]
    print(f"torch {{torch.__version__}}: {{detail}}")
    return 1 if hazard else 0


if __name__ == "__main__":
    sys.exit(main())
'''


def hardware() -> str:
    model = platform.processor() or platform.machine()
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                model = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    return f"CPU {model}, {os.cpu_count()} cores, {platform.system()}"


def render(probe: str, results: str, name: str = "repro.py") -> str:
    t = TEMPLATES[probe]
    return _FRAME.format(
        title=t.title,
        shows=t.shows,
        hardware=hardware(),
        results=results,
        name=name,
        body=t.body.strip("\n") + "\n",
    )


def run_text(text: str, env: Runner, timeout: float = 300) -> tuple[int, str]:
    """(exit code, its last line of output) of the reproducer `text` run with `env`."""
    with tempfile.TemporaryDirectory(prefix="racegate-repro-") as tmp:
        path = Path(tmp) / "repro.py"
        path.write_text(text)
        done = env.run([str(path)], timeout)
    output = (done.stdout.strip() or done.stderr.strip()).splitlines()
    return done.returncode, output[-1] if output else ""


def verified(
    probe: str, bad: Runner, good: Runner, name: str = "repro.py"
) -> tuple[bool, str, str]:
    """(ok, the reproducer's text, a report): ok when it exits 1 with `bad` and 0 with `good`."""
    seen = {}
    lines = []
    for env, want in ((bad, EXIT_HAZARD), (good, EXIT_CLEAN)):
        v = installed(env)
        seen[id(env)] = v
        lines.append(
            f"  torch {v['torch']} (commit {v.get('git_version', '?')[:12]}), "
            f"Python {v['python']}: exit {want}"
        )
    text = render(probe, "\n".join(lines), name)
    if len(text.splitlines()) > MAX_LINES:
        raise ValueError(
            f"the {probe} reproducer has {len(text.splitlines())} lines (over {MAX_LINES})"
        )
    report, ok = [], True
    for env, want in ((bad, EXIT_HAZARD), (good, EXIT_CLEAN)):
        code, last = run_text(text, env)
        ok = ok and code == want
        report.append(f"torch {seen[id(env)]['torch']}: exit {code} (want {want}): {last}")
    return ok, text, "\n".join(report)
