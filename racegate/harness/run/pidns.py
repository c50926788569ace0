"""Containment by the kernel: every process a worker starts dies with it, in a PID namespace.

A death signal (PR_SET_PDEATHSIG) reaches one child, never a grandchild, and a process that
called setsid() leaves the worker's process group. A PID namespace takes them all: when its
first process (its init) dies, the kernel SIGKILLs every other process in it, whatever their
session. So the worker process the runner starts (P) makes a new PID namespace for its
children and forks two processes into it:

    runner ─ P (outside; its exit status is the worker's) ─ init (pid 1) ─ worker (pid 2) ─ …

P dies with the runner (its death signal), init with P (its own), and everything in the
namespace with init; so a SIGKILL to the runner takes every process of the run down. The
worker is not the namespace's init: an init ignores signals it has no handler for, even its
own (a workload's os.kill(os.getpid(), SIGKILL) or abort() would not end it), and torch's
compile workers check that their parent is still the worker (getppid() in the same namespace).

/proc stays the runner's (no new mount), so the worker tells the runner its pid and its
threads' ids as the runner sees them. Where no namespace can be made (no CAP_SYS_ADMIN and no
user namespace to get one, not Linux, a run on a GPU, or RACEGATE_PID_NAMESPACE=0), P is the worker,
as before,
and the record's `containment` says why. Imports nothing heavy: it runs before torch's import.
"""

from __future__ import annotations

import contextlib
import ctypes
import json
import os
import resource
import select
import signal
import sys
import time
from pathlib import Path
from typing import Protocol

from racegate.harness.run import lifeline
from racegate.harness.run.files import write_whole
from racegate.harness.scenario import env_names

CLONE_NEWUSER = 0x10000000
CLONE_NEWPID = 0x20000000
CONTAINED = "pid_namespace"  # the record's `containment` when the namespace was made
SWITCH = env_names.PID_NAMESPACE  # "0": make none (the record says so); GPU: set by the runner
# The runner's value of SWITCH for a run on a GPU: no namespace. On one H200 (torch 2.11, CUDA
# 13.0) every worker started in one failed CUDA's first call (cudaGetDeviceCount: error 304,
# "OS call failed or operation not supported on this OS"), so such a run keeps the death
# signals and the process group only, and its record's `containment` says so.
GPU = "gpu"
ON_GPU = f"none: a run on a GPU (CUDA failed to start inside a PID namespace; {SWITCH}={GPU})"
ANNOUNCE = "worker.json"  # in the run dir: the worker's pid (as the runner sees it), containment
LEFT = "namespace_left.json"  # in the run dir: pids the kernel killed with the namespace


def _unshare(flags: int) -> int:
    """unshare(2); 0 or the errno."""
    libc = ctypes.CDLL(None, use_errno=True)
    return 0 if libc.unshare(flags) == 0 else ctypes.get_errno()


def _map_self() -> None:
    """In a new user namespace: this uid and gid map to themselves (files keep their owner)."""
    uid, gid = os.getuid(), os.getgid()
    Path("/proc/self/setgroups").write_text("deny")
    Path("/proc/self/uid_map").write_text(f"{uid} {uid} 1")
    Path("/proc/self/gid_map").write_text(f"{gid} {gid} 1")


def _user_namespace_works() -> str:
    """'' when a user namespace with a PID namespace can be made and mapped here; else why not.
    Tried in a throwaway child: a half-made one (unmapped) would leave this process unable to
    create a file."""
    pid = os.fork()
    if pid == 0:
        try:
            if _unshare(CLONE_NEWUSER | CLONE_NEWPID):
                os._exit(1)
            _map_self()
            os._exit(0)
        except BaseException:
            os._exit(2)
    status = os.waitpid(pid, 0)[1]
    code = os.waitstatus_to_exitcode(status)
    return "" if code == 0 else ("could not be made" if code == 1 else "could not be mapped")


def enter(run_dir: Path | None = None) -> str:
    """Make a PID namespace for this process's children; returns its containment.

    Only in the process the runner started, before any thread or child exists. Returns in the
    worker: `CONTAINED` (in the namespace's pid 2; P and init never return), or "none: why"
    (in P, now the worker itself). P writes what the namespace still held when the worker
    ended into `run_dir`/LEFT (the kernel killed them)."""
    if not sys.platform.startswith("linux"):
        return f"none: {sys.platform} has no PID namespaces"
    if os.environ.get(SWITCH) == "0":
        return f"none: {SWITCH}=0"
    if os.environ.get(SWITCH) == GPU:
        return ON_GPU
    err = _unshare(CLONE_NEWPID)
    if err == 1:  # EPERM: no CAP_SYS_ADMIN; a user namespace of our own gives one
        why = _user_namespace_works()
        if why:
            return f"none: unshare(CLONE_NEWPID) not permitted and a user namespace {why}"
        err = _unshare(CLONE_NEWUSER | CLONE_NEWPID)
        if not err:
            _map_self()
    if err:
        return f"none: unshare(CLONE_NEWPID): {os.strerror(err)}"
    alive_r, alive_w = os.pipe()  # P holds the write end: EOF at init means P is gone
    status_r, status_w = os.pipe()  # init → P: the worker's wait status
    init = os.fork()
    if init == 0:
        os.close(alive_w)
        os.close(status_r)
        _init(alive_r, status_w)  # returns in the worker only
        return CONTAINED
    os.close(alive_r)
    os.close(status_w)
    try:
        _outside(init, status_r, run_dir)
    finally:  # P must never go on as a worker, whatever failed
        os._exit(70)


def _outside(init: int, status_r: int, run_dir: Path | None) -> None:
    """P: wait for init, then end as the worker ended (its exit code, or killed by its signal),
    so the runner reads the worker's status from its own child."""
    os.waitpid(init, 0)
    raw = b""
    with contextlib.suppress(OSError):
        while chunk := os.read(status_r, 64):
            raw += chunk
    code, sig, left = json.loads(raw) if raw else (None, signal.SIGKILL, [])  # init was killed
    if left and run_dir is not None:
        with contextlib.suppress(OSError):
            (run_dir / LEFT).write_text(json.dumps(left))
    if sig is not None:
        resource.setrlimit(resource.RLIMIT_CORE, (0, 0))  # the worker dumped its own core
        with contextlib.suppress(OSError, ValueError):  # SIGKILL, SIGSTOP: no handler to reset
            signal.signal(sig, signal.SIG_DFL)
        signal.pthread_sigmask(signal.SIG_UNBLOCK, {sig})
        os.kill(os.getpid(), sig)
        code = 128 + sig  # not reached for a signal that kills
    os._exit(code)


def _init(alive_r: int, status_w: int) -> None:
    """The namespace's pid 1: fork the worker, reap orphans, hand the worker's status to P."""
    lifeline.die_with_parent(None)  # P dies → this dies → the kernel kills the namespace
    # P may have died before the death signal was armed: then the pipe's only writer is gone.
    if select.select([alive_r], [], [], 0)[0]:
        os._exit(1)
    lifeline.name_this_thread("racegate-pidns")
    worker = os.fork()
    if worker == 0:
        os.close(alive_r)
        os.close(status_w)
        # Its parent is init; if init dies, the kernel has already killed this process.
        lifeline.die_with_parent(None)
        return
    try:
        _reap(worker, status_w)
    finally:  # init must never go on as a worker, whatever failed
        os._exit(1)


def _reap(worker: int, status_w: int) -> None:
    """Init's life: reap orphans until the worker ends, then give P its status and exit."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # P's death, not a signal, ends this
    while True:
        # WNOWAIT: the worker's pid stays its own (a zombie) until init exits, so a signal
        # the runner sends it meanwhile reaches no other process.
        info = os.waitid(os.P_ALL, 0, os.WEXITED | os.WNOWAIT)
        if info is None:
            continue
        if info.si_pid != worker:
            with contextlib.suppress(ChildProcessError):
                os.waitpid(info.si_pid, 0)  # an orphan re-parented here
            continue
        exited = info.si_code == os.CLD_EXITED
        status = [info.si_status, None] if exited else [None, info.si_status]
        os.write(status_w, json.dumps([*status, _members()]).encode())
        os._exit(0)  # the kernel kills what the worker left in the namespace


def _members() -> list[int]:
    """The live processes of this (init's) namespace but init, by their pids outside it."""
    mine, me, found = os.readlink("/proc/self/ns/pid"), outer_pid(), []
    for entry in os.listdir("/proc"):
        if entry.isdigit() and int(entry) != me:
            with contextlib.suppress(OSError, IndexError):  # gone meanwhile
                if os.readlink(f"/proc/{entry}/ns/pid") != mine:
                    continue
                state = Path(f"/proc/{entry}/stat").read_text().rsplit(")", 1)[1].split()[0]
                if state != "Z":  # a zombie (the worker itself, kept by WNOWAIT) is dead
                    found.append(int(entry))
    return found


def outer_pid() -> int:
    """This process's pid as the runner sees it (/proc is the runner's mount)."""
    return int(os.readlink("/proc/self"))


def outer_tids(tids: list[int]) -> list[int]:
    """These threads' ids (of this process, in its own namespace) as the runner sees them:
    each task's NSpid line lists its id in every namespace, outermost first."""
    me = outer_pid()
    seen: dict[int, int] = {}
    with contextlib.suppress(OSError):
        for task in os.listdir(f"/proc/{me}/task"):
            with contextlib.suppress(OSError, ValueError):
                for line in Path(f"/proc/{me}/task/{task}/status").read_text().splitlines():
                    if line.startswith("NSpid:"):
                        ids = [int(x) for x in line.split()[1:]]
                        seen[ids[-1]] = ids[0]
    return [seen.get(t, t) for t in tids]


def announce(run_dir: Path, containment: str) -> None:
    """The worker's pid as the runner sees it, and its containment, in the run dir (atomic)."""
    write_whole(run_dir / ANNOUNCE, json.dumps({"pid": outer_pid(), "containment": containment}))


def left_in_namespace(run_dir: Path) -> list[int]:
    """Pids the worker's namespace still held when it ended (killed with it): P's note."""
    with contextlib.suppress(OSError, ValueError, TypeError):
        return [int(pid) for pid in json.loads((run_dir / LEFT).read_text())]
    return []


class Polled(Protocol):
    """A started worker as the runner holds it: a subprocess.Popen, or a forked one
    (racegate.harness.run.launcher.Forked)."""

    pid: int

    def poll(self) -> int | None: ...


def await_worker(proc: Polled, run_dir: Path, until: float) -> tuple[int, str]:
    """The worker's pid and containment once it announced them; P's pid (and why) if P ended
    or `until` (time.monotonic()) passed first."""
    path = run_dir / ANNOUNCE
    while True:
        with contextlib.suppress(OSError, ValueError, KeyError, TypeError):
            said = json.loads(path.read_text())
            return int(said["pid"]), str(said["containment"])
        if proc.poll() is not None:
            return proc.pid, "none: the worker ended before it said"
        if time.monotonic() >= until:
            return proc.pid, "none: the worker did not say in time"
        time.sleep(0.002)
