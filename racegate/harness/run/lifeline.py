"""Process lifetimes on Linux: a child dies with its runner; a runner reaps and kills its run.

Uses prctl(2) (PR_SET_PDEATHSIG, PR_SET_CHILD_SUBREAPER) through ctypes: the standard library
has no binding, and a package for two calls is not worth a dependency. Imports nothing heavy,
so the worker can arm its death signal before it imports torch.
"""

from __future__ import annotations

import contextlib
import ctypes
import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterator

from racegate.harness.scenario import env_names

PR_SET_PDEATHSIG = 1
PR_SET_NAME = 15
THREAD_PREFIX = "racegate-"  # the stepping threads' names, in Python and for the kernel
PR_SET_CHILD_SUBREAPER = 36
# Every process of a run carries this variable (inherited through fork/exec, kept by setsid),
# so what is left of a run can be found however it re-parented or re-sessioned itself.
RUN_MARKER = env_names.RUN_ID
# The runner's two requests to a child: dump every stack (faulthandler), give up your threads.
# Real-time signals, not SIGUSR1/SIGUSR2: LLVM, inside triton, installs its own handlers for
# those two at a process's first GPU compile, over ours. Measured on an H200 (torch 2.11,
# Python 3.12): after one torch.compile on CUDA, SIGUSR1's handler lay in libtriton.so and its
# dump no longer landed, while one on SIGRTMIN+3 still did (tests/fault_workloads.py has the
# same theft as the fault `signal_thief`). No library racegate runs takes these two.
# Without real-time signals (macOS: no CUDA, so no triton to take the user signals) the user
# signals do.
_RT = getattr(signal, "SIGRTMIN", None)
DUMP_SIGNAL: int = _RT + 3 if _RT is not None else signal.SIGUSR1
GIVE_UP_SIGNAL: int = _RT + 4 if _RT is not None else signal.SIGUSR2
RUN_SIGNALS = frozenset({DUMP_SIGNAL, GIVE_UP_SIGNAL})


@contextlib.contextmanager
def run_signals_blocked() -> Iterator[None]:
    """Block RUN_SIGNALS in this thread while it starts a child. The signal mask survives fork
    and exec, so one sent before the child's first line (interpreter start-up) stays pending
    instead of killing it (a real-time signal's default action; measured: exit -37), and the
    worker unblocks them once it has set their handlers (`unblock_run_signals`)."""
    old = signal.pthread_sigmask(signal.SIG_BLOCK, RUN_SIGNALS)
    try:
        yield
    finally:
        signal.pthread_sigmask(signal.SIG_SETMASK, old)


def unblock_run_signals() -> None:
    """The worker, once its handlers for RUN_SIGNALS are set (SIG_IGN first): one that came
    while they were blocked is then delivered to that handler, or discarded if ignored."""
    signal.pthread_sigmask(signal.SIG_UNBLOCK, RUN_SIGNALS)


def _prctl(option: int, arg: int) -> bool:
    if not sys.platform.startswith("linux"):
        return False
    libc = ctypes.CDLL(None, use_errno=True)
    return libc.prctl(option, arg, 0, 0, 0) == 0


def die_with_parent(expected_parent: int | None) -> None:
    """SIGKILL this process when its parent dies; exit now if the parent already has.

    `expected_parent` is the runner's pid (passed in the environment): a child whose parent
    died before the prctl took effect was re-parented, and getppid() no longer matches.
    """
    _prctl(PR_SET_PDEATHSIG, signal.SIGKILL)
    if expected_parent is not None and os.getppid() != expected_parent:
        os._exit(3)


def run_dying_with_me(args: list[str], **kw) -> subprocess.CompletedProcess:
    """subprocess.run, the child dying with this process even by SIGKILL (a killed `upgrade`
    or bootstrap.py left its pip install running on, PPID 1). For single-threaded callers
    (preexec_fn): the making of an environment, the bootstrapper."""
    me = os.getpid()
    return subprocess.run(list(args), preexec_fn=lambda: die_with_parent(me), **kw)


def name_this_thread(name: str) -> bool:
    """Name the calling thread for the kernel (/proc/<pid>/task/<tid>/comm, 15 bytes), so py-spy
    and top show racegate's threads: Python 3.12 names threads only for itself. Threads it
    starts inherit the name, so nothing should find racegate's threads by it."""
    if not sys.platform.startswith("linux"):
        return False
    libc = ctypes.CDLL(None, use_errno=True)
    return libc.prctl(PR_SET_NAME, ctypes.c_char_p(name.encode()[:15]), 0, 0, 0) == 0


def become_subreaper() -> bool:
    """Orphaned descendants re-parent to this process instead of init, so it can reap them."""
    return _prctl(PR_SET_CHILD_SUBREAPER, 1)


def processes_of_run(run_id: str) -> list[int]:
    """Pids whose environment carries RUN_MARKER=run_id (this user's processes only)."""
    return processes_with(RUN_MARKER, run_id)


def processes_with(var: str, value: str) -> list[int]:
    """Pids (other than this one) whose environment has var=value; zombies have none."""
    needle = f"{var}={value}".encode()
    found = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit() or int(entry) == os.getpid():
            continue
        with contextlib.suppress(OSError), open(f"/proc/{entry}/environ", "rb") as fh:
            if needle in fh.read().split(b"\0"):
                found.append(int(entry))
    return found


def kill_run(run_id: str, attempts: int = 20) -> list[int]:
    """SIGKILL every process of the run until none is left; returns the pids it killed."""
    return kill_with(RUN_MARKER, run_id, attempts)


def kill_with(var: str, value: str, attempts: int = 20) -> list[int]:
    """SIGKILL every process whose environment has var=value until none is left (one that ends
    on its own between the look and the kill is no error); returns the pids it killed."""
    killed: list[int] = []
    for _ in range(attempts):
        pids = processes_with(var, value)
        if not pids:
            break
        for pid in pids:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.kill(pid, signal.SIGKILL)
                killed.append(pid)
        reap_orphans()
        time.sleep(0.02)
    reap_orphans()
    return sorted(set(killed))


def reap_orphans() -> None:
    """Collect exit statuses of re-parented descendants (as subreaper), never blocking.

    Only pids no Popen owns: waitpid(-1) could steal the status of another run's child that
    a Popen of this process (`--jobs` > 1) is about to wait for.
    """
    with ADOPTING:
        _reap_unowned()


def _unowned_children() -> list[int]:
    """This process's children that no Popen of its owns (LIVE_POPENS): re-parented ones."""
    me, found = os.getpid(), []
    for entry in os.listdir("/proc"):
        if not entry.isdigit() or int(entry) in LIVE_POPENS:
            continue
        stat = f"/proc/{entry}/stat"
        with contextlib.suppress(OSError, ValueError, IndexError), open(stat) as fh:
            # pid (comm) state ppid ...: comm may hold spaces, so split after its ')'.
            if int(fh.read().rsplit(")", 1)[1].split()[1]) == me:
                found.append(int(entry))
    return found


def _reap_unowned() -> None:
    for pid in _unowned_children():
        with contextlib.suppress(ChildProcessError):
            os.waitpid(pid, os.WNOHANG)


def kill_adopted() -> list[int]:
    """SIGKILL what forked runs left with this process: its children (as subreaper) that came
    from a launcher (racegate.harness.run.launcher) and that nothing here owns. A forked
    worker is a subreaper, so what it started stays below it while it lives; once it is gone,
    its leftovers re-parent here, marked by this runner's pid and by no run's (a fork keeps its
    launcher's environment, which names no run). Returns the pids it killed."""
    killed = []
    runner = f"{env_names.RUNNER_PID}={os.getpid()}".encode()
    no_run = f"{RUN_MARKER}=".encode()
    with ADOPTING:
        for pid in _unowned_children():
            with contextlib.suppress(OSError), open(f"/proc/{pid}/environ", "rb") as fh:
                env = fh.read().split(b"\0")
                if runner in env and not any(v.startswith(no_run) for v in env):
                    os.kill(pid, signal.SIGKILL)
                    killed.append(pid)
        _reap_unowned()
    return killed


# Pids of children a subprocess.Popen of this process started and will wait for itself, and
# of workers a launcher forked that this process adopted (racegate.harness.run.launcher).
LIVE_POPENS: set[int] = set()
# Held while an adopted worker becomes owned (its pid into LIVE_POPENS): until then
# reap_orphans could take its exit status.
ADOPTING = threading.Lock()
