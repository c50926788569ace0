"""Look at each stepping thread's scheduler state every few milliseconds, from a process of its
own: the evidence for the judge's co-activity check (racegate.harness.judge.decide.coactive_shares).

Why: a step's start and end times cannot tell threads that take turns under a whole-step lock
from threads that step together, since a thread blocked on the lock is inside its step too.
What differs is whether the threads *work* at the same time. At each look the sampler reads
whether each thread is running or ready to run (state R in /proc/<pid>/task/<tid>/stat): a
thread that computes, waits for a core or spins on a GPU wait is; one blocked on a lock, a
futex or a sleep is not. Each look is an instant, so a look that comes late (the sampler
starved of a core) is as good as any: there is no interval over which turns could blur.

Why states, not CPU time: the kernel brings a running thread's time counts (schedstat) up to
date only at its scheduler ticks (every 4 ms on this kernel, CONFIG_HZ=250). At 2 ms looks a
thread that computed the whole time read 1.00 0.00 1.00 0.00 ... cores, and a judge of rates
found turns where there were none (the project's CI failed two concurrent runs, at 0.17-0.23).

Each look also reads the thread's CPU time (schedstat's sum_exec_runtime): the judge tells a
thread at work in its step from one parked in it (on a lock, an event) by whether that time has
moved since the step began, and tells interleaving threads by whether another thread moved on
while it was at work in its step (racegate.harness.judge.decide.interleaving). The count is up to
date for a thread that is not running and up to a scheduler tick behind for one that is: it
can only read less progress than was made, never more.

Why a process, not a thread of the runner: the runner's own work (the stall watch's scans of
/proc) held its GIL for up to 200 ms at a time on a loaded 2-core box, and a thread sampling
beside it missed most of a 0.3 s steady window. The sampler dies with the runner
(PR_SET_PDEATHSIG) and is stopped by closing its stdin; it then writes what it saw to stdout.

The stepping threads are found by the native ids the child reports (racegate.harness.run.stall reads
the same event); a child that never reports them leaves no trace here.
"""

from __future__ import annotations

import base64
import contextlib
import json
import os
import subprocess
import sys
import threading
import time
from array import array
from pathlib import Path

from racegate.harness.run import code_root, lifeline, stall
from racegate.harness.run.protocol import ThreadActivity

# 500 looks a second, well under a step of the cases (≥ 20 ms): on a loaded 2-core box the
# sampler gets a core late now and then, and the judge needs a number of looks at each thread's
# steady steps (racegate.harness.judge.decide.COACTIVITY_LOOKS).
SAMPLE_EVERY_S = 0.002
SAMPLER_NICE = -10
_STOP_WAIT_S = 10.0  # for the sampler to write what it saw once asked to stop


def _pack(values: array) -> str:
    return base64.b64encode(values.tobytes()).decode()


def _unpack(text: str, code: str) -> tuple:
    values = array(code)
    values.frombytes(base64.b64decode(text))
    return tuple(values)


class ActivitySampler:
    """The runner's handle on one sampler process, for the children of one run."""

    def __init__(
        self,
        children: dict[int, Path],
        env: dict[str, str] | None = None,
        every_s: float = SAMPLE_EVERY_S,
    ) -> None:
        self._children = children  # pid → its run dir (where progress.jsonl lands)
        # The children's environment: the sampler carries the run's markers, so what finds and
        # kills the processes of a run (lifeline.kill_run) finds it too.
        self._env = env
        self._every_s = every_s
        self._proc: subprocess.Popen[bytes] | None = None
        self._seen: dict[str, dict] = {}
        self.error: str | None = None  # why nothing was sampled, when the sampler failed

    def __enter__(self) -> ActivitySampler:
        self._proc = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "racegate.harness.run.activity",
                str(os.getpid()),
                str(self._every_s),
            ],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            cwd=code_root.child_cwd(),
            env=self._env,
        )
        lifeline.LIVE_POPENS.add(self._proc.pid)  # reaped by its own wait, not reap_orphans
        assert self._proc.stdin is not None
        children = {str(pid): str(d) for pid, d in self._children.items()}
        try:
            self._proc.stdin.write((json.dumps(children) + "\n").encode())
            self._proc.stdin.flush()
        except OSError:  # it died at start-up: stop() reads why (its exit status, its stderr)
            pass
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()

    @property
    def pid(self) -> int | None:
        """The sampler process's pid while it runs."""
        return self._proc.pid if self._proc is not None else None

    def stop(self) -> None:
        """Ask the sampler for what it saw (close its stdin) and wait for it."""
        proc, self._proc = self._proc, None
        if proc is None:
            return
        try:
            out, err = proc.communicate(timeout=_STOP_WAIT_S)  # closes stdin first
            if proc.returncode != 0:
                self.error = f"the sampler exited {proc.returncode}: {err.decode()[-300:]}"
            else:
                self._seen = json.loads(out)
        except (subprocess.TimeoutExpired, ValueError) as exc:
            self.error = f"the sampler gave nothing back ({type(exc).__name__})"
        finally:
            if proc.poll() is None:
                proc.kill()
                proc.wait()
            lifeline.LIVE_POPENS.discard(proc.pid)

    def traces(self, pid: int) -> tuple[ThreadActivity, ...]:
        """The child's stepping threads' traces, in the order it reported them (its threads'
        order); () when it never reported them."""
        mine = self._seen.get(str(pid), {})
        return tuple(
            ThreadActivity(
                int(tid),
                _unpack(seen[0], "d"),
                _unpack(seen[1], "b"),
                _unpack(seen[2], "d") if len(seen) > 2 else (),
            )
            for tid, seen in mine.items()
        )


class _Looker:
    """The sampler process's state: each child's stepping threads and what it saw of them."""

    def __init__(self, children: dict[int, Path]) -> None:
        self.children = children
        self.tids: dict[int, list[int]] = {}
        # pid → tid → (times, running then: 1 or 0, its CPU time then in seconds: -1 unread),
        # in the order the child reported its threads
        self.traces: dict[int, dict[int, tuple[array, array, array]]] = {}

    def look(self) -> None:
        for pid, run_dir in self.children.items():
            if pid not in self.tids:
                # At every look until it has: a fault run's steady steps can last 0.2 s.
                if (tids := stall.reported_tids(run_dir)) is None:
                    continue
                self.tids[pid] = tids
                self.traces[pid] = {tid: (array("d"), array("b"), array("d")) for tid in tids}
            for tid, (times, running, cpu) in self.traces[pid].items():
                task = Path(f"/proc/{pid}/task/{tid}")
                fields = stall.stat_fields(task / "stat")
                if fields:  # else the thread ended
                    times.append(time.monotonic())
                    running.append(fields[0] == "R")
                    cpu.append(_cpu_s(task / "schedstat"))

    def seen(self) -> dict[str, dict[str, list[str]]]:
        return {
            str(pid): {str(t): [_pack(a), _pack(b), _pack(c)] for t, (a, b, c) in mine.items() if a}
            for pid, mine in self.traces.items()
        }


def _cpu_s(schedstat: Path) -> float:
    """A thread's CPU time (schedstat's first field: sum_exec_runtime, the counter
    time.thread_time reads for itself), seconds; -1 where unreadable (the thread ended)."""
    with contextlib.suppress(OSError, ValueError, IndexError):
        return int(schedstat.read_text().split()[0]) / 1e9
    return -1.0


def main(argv: list[str]) -> int:
    """`python -m racegate.harness.run.activity RUNNER_PID EVERY_S`; stdin: one JSON line of the
    children ({pid: run dir}), then EOF to stop; stdout: what it saw."""
    lifeline.die_with_parent(int(argv[0]))
    # A higher priority where allowed (root, or CAP_SYS_NICE): beside two spinning processes
    # on a 2-core box the sampler waited on the run queue up to 74 ms in one look (its
    # schedstat's run delay) and a 0.4 s steady window got 4 looks; at nice -10, 12 ms at most.
    with contextlib.suppress(PermissionError):
        os.setpriority(os.PRIO_PROCESS, 0, SAMPLER_NICE)
    every_s = float(argv[1])
    children = {int(pid): Path(d) for pid, d in json.loads(sys.stdin.readline()).items()}
    stop = threading.Event()

    def wait_for_eof() -> None:
        sys.stdin.read()
        stop.set()

    threading.Thread(target=wait_for_eof, daemon=True).start()
    looker = _Looker(children)
    while not stop.wait(every_s):
        looker.look()
    sys.stdout.write(json.dumps(looker.seen()))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
