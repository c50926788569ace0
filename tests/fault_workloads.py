"""Workloads that misbehave on purpose (crash, hang, OOM, run serially, leave processes) to test
the harness's isolation and its verdicts.

They train a real (tiny) torch module; only the failure is injected, and it is the real fault: a
real signal, a real deadlock, a real allocation failure under a real rlimit. The preset names
the fault (`FAULTS` lists them with the outcome the harness must give); thread i of a run is
the replica with seed i (scenarios here use seed 0).
"""

from __future__ import annotations

import ctypes
import os
import resource
import signal
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

import torch

from racegate.harness.run.child_spec import ChildSpec
from racegate.harness.scenario.workload_api import StepResult
from tests.busy import compute_for, one_intra_op_thread

# fault → (outcome the harness must record, threads to run it at, where it fires)
FAULTS: dict[str, tuple[str, int, str]] = {
    "ok": ("ok", 2, "nothing"),
    "raise": ("other_error", 2, "thread 0 raises RuntimeError at its 2nd step"),
    "segv_kill": ("crash", 2, "thread 0 sends itself SIGSEGV at its 2nd step"),
    "segv_null": ("crash", 2, "thread 0 reads address 0 (ctypes.string_at(0)) at its 2nd step"),
    "exit0_mid": ("crash", 2, "os._exit(0) at thread 0's 2nd step"),
    "exit7_mid": ("crash", 2, "os._exit(7) at thread 0's 2nd step"),
    "exit0_after": ("crash", 2, "os._exit(0) in flops_per_step, after every thread reported"),
    "exit7_after": ("crash", 2, "os._exit(7) in flops_per_step, after every thread reported"),
    "sys_exit": ("crash", 2, "sys.exit(3) in flops_per_step (the worker's main thread)"),
    "self_sigkill": ("crash", 2, "thread 0 sends itself SIGKILL at its 2nd step (no OOM killer)"),
    "memoryerror": ("oom", 1, "MemoryError: a 4 GiB bytearray under RLIMIT_AS"),
    "alloc_oom": ("oom", 1, "torch's CPU allocator fails a 4 GiB tensor under RLIMIT_AS"),
    "big_output": ("ok", 2, "100 MB written to stderr at thread 0's 2nd step"),
    "fork_grandchild": ("ok", 2, "thread 0 forks a child that sleeps (same session)"),
    "setsid_grandchild": ("ok", 2, "thread 0 starts `sleep` in a new session"),
    "deadlock2": ("hang", 2, "lock-order deadlock between 2 threads"),
    "deadlock4": ("hang", 4, "lock-order deadlock in a ring of 4 threads"),
    # As torch's own helper threads do (inductor's compile-worker timer, tqdm's monitor): a
    # thread that polls, so its stack moves while the deadlocked threads' do not.
    "deadlock_poller": ("hang", 2, "lock-order deadlock beside a thread that keeps polling"),
    # As LLVM inside triton does at a process's first GPU compile: it installs its own handlers
    # for SIGUSR1 and SIGUSR2 over whatever was there, so a dump asked for by SIGUSR1 never comes.
    "signal_thief": ("hang", 2, "SIGUSR1/SIGUSR2 taken over by a library, then a deadlock"),
    # Too late for the stall watch to stop it early (it asks for dumps until 85% of the timeout):
    # the watch finds the stall at the end, from the threads' final stacks.
    "late_deadlock": ("hang", 2, "both threads compute until 70% of the timeout, then deadlock"),
    "gil_hang": ("hang", 2, "thread 0 calls libc sleep() holding the GIL"),
    "sleep_past": ("hang", 2, "thread 0 sleeps past the timeout inside a step"),
    # A run too slow for its timeout, as a cold compile on an overloaded host is: `hang` with
    # the stall watch off (as here: nothing saw it at work), `timeout` under the watch.
    "busy_past": ("hang", 2, "thread 0 computes past the timeout inside a step"),
    "first_step_block": ("hang", 2, "thread 1's first step blocks until thread 0 stops stepping"),
    # Each step's time includes its wait for the lock, so by step times the steps overlap;
    # what tells is that the runner finds each thread running alone for its turns (coactive_shares).
    "serial": ("not_concurrent", 2, "every step holds one process-wide lock (threads take turns)"),
    "busy_step": ("ok", 2, "thread 0's 2nd step computes for 6 s (busy: not a stall)"),
    "flops_raise": ("other_error", 2, "flops_per_step raises ValueError"),
    "flops_segv": ("crash", 2, "flops_per_step segfaults (ctypes.string_at(0))"),
    "abort": ("crash", 2, "thread 0 calls os.abort() at its 2nd step"),
    # As a training script "with nothing to do" does: sys.exit(0), which once read as a clean
    # exit. Each is a failure to run, with its own line (workload_api.no_exit).
    "exit_factory": ("crash", 2, "sys.exit(0) in the workload's factory"),
    "exit_replica": ("crash", 2, "sys.exit(0) in make_replica"),
    "exit_step": ("other_error", 2, "sys.exit(0) at thread 0's 2nd step"),
    # A step of no tokens: tokens/s 0, which `run` judged and the report refused.
    "zero_tokens": ("other_error", 2, "thread 0's 2nd step returns StepResult(tokens=0)"),
}

_GiB = 1 << 30


def _vm_bytes() -> int:
    with open("/proc/self/status") as fh:
        for line in fh:
            if line.startswith("VmSize:"):
                return int(line.split()[1]) * 1024
    raise RuntimeError("no VmSize in /proc/self/status")


def _busy_until(share: float) -> None:
    """Compute until `share` of the run's timeout by the runner's clock: its start and the
    timeout are in the run dir's scenario.json (the worker's argument)."""
    spec = ChildSpec.read(Path(sys.argv[1]))
    assert spec.runner_t0 is not None, "the runner sets it at the child's start"
    until = spec.runner_t0 + share * spec.scenario.timeout_s
    while time.monotonic() < until:
        pass


def _take_user_signals() -> None:
    """SIGUSR1 and SIGUSR2 to SIG_IGN through libc, from this (non-main) thread, as a native
    library sets its handlers: Python's signal.signal works on the main thread only."""
    libc = ctypes.CDLL(None, use_errno=True)
    libc.signal.restype = ctypes.c_void_p
    libc.signal.argtypes = [ctypes.c_int, ctypes.c_void_p]
    for sig in (signal.SIGUSR1, signal.SIGUSR2):
        libc.signal(int(sig), ctypes.c_void_p(1))  # SIG_IGN


def _poll() -> None:
    """Wake up every 0.3 s, at one of two lines in turn: a stack that moves, using no CPU."""
    while True:
        time.sleep(0.3)
        time.sleep(0.3)


class _Shared:
    """State the replicas of one process share (locks and marks of a deadlock, a serialiser)."""

    def __init__(self, n_locks: int = 4) -> None:
        self.locks = [threading.Lock() for _ in range(n_locks)]
        self.holding = threading.Barrier(2)
        self.ring = threading.Barrier(4)
        self.serial = threading.Lock()
        self.last_step_of_0: float | None = None  # thread 0 has not stepped yet


class _Replica:
    def __init__(self, device: torch.device, fault: str, seed: int, shared: _Shared) -> None:
        torch.manual_seed(seed)
        self.layer = torch.nn.Linear(8, 8).to(device)
        self.opt = torch.optim.SGD(self.layer.parameters(), lr=0.1)
        self.fault, self.seed, self.device, self.shared = fault, seed, device, shared
        self.calls = 0
        if fault == "late_start" and seed == 1:
            time.sleep(3.0)  # one process is ready long after the other (a loaded host)

    def step(self, shape: int) -> StepResult:
        self.calls += 1
        me, fault = self.seed, self.fault
        if self.calls == 2 and me == 0:
            self._fire_in_thread_0(fault)
            if fault == "zero_tokens":
                return StepResult(tokens=0)
        if fault == "deadlock_poller" and self.calls == 2 and me == 0:
            threading.Thread(target=_poll, daemon=True).start()
        if fault == "signal_thief" and self.calls == 2 and me == 0:
            _take_user_signals()
        if fault == "late_deadlock" and self.calls == 2:
            _busy_until(0.7)
        deadlocks = ("deadlock2", "deadlock4", "deadlock_poller", "signal_thief", "late_deadlock")
        if fault in deadlocks and self.calls == 2:
            self._deadlock(4 if fault == "deadlock4" else 2)
        if fault == "hang" and me == 1 and self.calls == 2:
            threading.Event().wait()  # one thread never returns
        if fault == "first_step_block" and me == 1 and self.calls == 1:
            # "Until thread 0 is done": it has not stepped for a second.
            while (last := self.shared.last_step_of_0) is None or time.monotonic() - last < 1.0:
                time.sleep(0.05)
        if fault == "serial":
            with self.shared.serial:  # the whole step under one process-wide lock
                return self._train(shape)
        if fault in ("memoryerror", "alloc_oom") and self.calls == 2:
            self._allocate_under_rlimit(fault)
        if me == 0:
            self.shared.last_step_of_0 = time.monotonic()
        return self._train(shape)

    def _fire_in_thread_0(self, fault: str) -> None:
        if fault == "raise":
            raise RuntimeError("injected failure: not a race")
        if fault == "segv_kill":
            os.kill(os.getpid(), signal.SIGSEGV)
        if fault == "segv_null":
            ctypes.string_at(0)
        if fault == "exit0_mid":
            os._exit(0)
        if fault == "exit7_mid":
            os._exit(7)
        if fault == "exit_step":
            sys.exit(0)
        if fault == "fill_tmp":
            with tempfile.TemporaryFile() as fh:  # in the run's private root, under TMPDIR
                fh.write(b"x" * (4 << 20))
                fh.flush()
                os.fsync(fh.fileno())

        if fault == "self_sigkill":
            os.kill(os.getpid(), signal.SIGKILL)
        if fault == "abort":
            # Last words on stderr first, as a native library's abort leaves them (libstdc++'s
            # "terminate called after throwing ..."): the run's report must show them.
            os.write(2, b"fault: thread 0 aborts at its 2nd step\n")
            os.abort()
        if fault == "big_output":
            chunk = b"x" * (1 << 20)
            for _ in range(100):
                os.write(2, chunk)
        if fault == "fork_grandchild" and os.fork() == 0:
            time.sleep(600)  # the forked child: lingers in the run's session
            os._exit(0)
        if fault == "setsid_grandchild":
            subprocess.Popen(["sleep", "600"], start_new_session=True)
        if fault == "fork_setsid" and os.fork() == 0:
            os.setsid()  # a daemon forked, not exec'd: its own session, the process's environ
            time.sleep(600)
            os._exit(0)
        if fault == "gil_hang":
            ctypes.PyDLL(None).sleep(600)  # a PyDLL call never releases the GIL
        if fault == "sleep_past":
            time.sleep(600)
        if fault in ("busy_step", "busy_past"):
            # Only the CPU shows it works. Torch ops, not a bare Python loop: a loop holding the
            # GIL for 6 s starves the other thread (it demanded ~10% of a core beside it), and
            # the judge then rightly finds their work did not meet.
            compute_for(6.0 if fault == "busy_step" else 600.0)

    def _deadlock(self, n: int) -> None:
        """Thread i takes lock i, waits until every thread holds its own, then takes lock i+1."""
        me = self.seed
        first, second = self.shared.locks[me], self.shared.locks[(me + 1) % n]
        with first:
            (self.shared.ring if n == 4 else self.shared.holding).wait()
            with second:
                pass

    def _allocate_under_rlimit(self, fault: str) -> None:
        soft, hard = resource.getrlimit(resource.RLIMIT_AS)
        resource.setrlimit(resource.RLIMIT_AS, (_vm_bytes() + _GiB // 2, hard))
        try:
            if fault == "memoryerror":
                bytearray(4 * _GiB)
            else:
                torch.empty(4 * _GiB, dtype=torch.uint8)
        finally:
            resource.setrlimit(resource.RLIMIT_AS, (soft, hard))

    def _train(self, shape: int) -> StepResult:
        # A real step lasts long enough for the other threads' steps to overlap it; a 1 ms step
        # can finish before the next thread is scheduled, which the judge rightly calls serial.
        # Computing, not sleeping: a thread that sleeps demands no CPU, and the judge's
        # co-activity check sees threads that work at the same time, or take turns. A hang's
        # steps sleep: the stall watch calls a hang early only while the run sits idle, and the
        # thread that did not hang keeps the hung one company, stepping, until the end.
        if FAULTS.get(self.fault, ("hang" if self.fault == "hang" else "ok",))[0] == "hang":
            time.sleep(0.1)
        else:
            compute_for(0.1, self.device)
        x = torch.randn(4 + shape, 8, device=self.device)
        loss = self.layer(x).square().mean()
        loss.backward()
        self.opt.step()
        self.opt.zero_grad()
        return StepResult(tokens=x.shape[0], loss=float(loss))

    def eager_fallbacks(self) -> int:
        return 0


class FaultWorkload:
    name = "fault"

    def __init__(self, preset: str = "ok") -> None:
        self.fault = preset
        self.shared = _Shared()

    def strategies(self) -> list[str]:
        return ["eager"]

    def shapes(self) -> list[int]:
        return [0, 1]

    def make_replica(self, device: torch.device, strategy: str, *, seed: int) -> _Replica:
        if self.fault == "exit_replica":
            sys.exit(0)
        one_intra_op_thread()
        return _Replica(device, self.fault, seed, self.shared)

    def flops_per_step(self, shape: int) -> float | None:
        if self.fault == "exit0_after":
            os._exit(0)
        if self.fault == "exit7_after":
            os._exit(7)
        if self.fault == "sys_exit":
            sys.exit(3)
        if self.fault == "flops_raise":
            raise ValueError("injected: flops_per_step failed")
        if self.fault == "flops_segv":
            ctypes.string_at(0)
        return None


# Besides the fault table's kinds, the runner tests' own: a hang in one thread's 2nd step, a
# process that starts its steps late (`processes`), thread 0 writing 4 MB into its TMPDIR at
# its 2nd step (`fill_tmp`: ENOSPC where TMPDIR is a small tmpfs, nothing otherwise), and thread
# 0 forking a child that leaves the run's session without exec (`fork_setsid`).
KNOWN = frozenset(FAULTS) | {"hang", "late_start", "fill_tmp", "fork_setsid"}


def make_workload(preset: str = "ok") -> FaultWorkload:
    if preset not in KNOWN:  # an unknown fault must not run as the harmless one
        raise ValueError(f"unknown preset {preset!r}; choose from: {', '.join(sorted(KNOWN))}")
    if preset == "exit_factory":
        sys.exit(0)
    return FaultWorkload(preset)


class MissingMethods:
    name = "incomplete"

    def shapes(self) -> list[int]:
        return [0]


def make_incomplete(preset: str = "") -> MissingMethods:
    return MissingMethods()
