"""Warm starts: a fork server per environment imports torch, transformers and the workload once,
and forks each run's worker from there (a run starts in milliseconds, not seconds of imports).

Isolation stays a fresh process's. Every run is a new process forked from a launcher that has
run no step, made no CUDA context and started no thread of its own; the fork takes the run's
own environment, working folder, output files and session (and, off the GPU, its own PID
namespace: racegate.harness.run.pidns), and nothing it changes reaches the launcher or the next
run. Where that cannot hold, the runner starts the worker as a fresh interpreter and the run's
record says why (`launch`): not Linux, no subreaper, a workload whose import starts a thread or
CUDA or fails, a library that keeps a run's variable from import time, or
RACEGATE_LAUNCHER=fresh.

The worker re-parents to the runner (a subreaper: lifeline.become_subreaper) through a middle
process that exits at once, so the runner waits for it as for a child of its own (`Forked`: the
part of subprocess.Popen the runner uses). multiprocessing's forkserver does not fit: it hands
back a Process the runner could not signal as a process group, wait for with a timeout while
the stall watch samples it, or give its own environment, folder and files.
"""

from __future__ import annotations

import atexit
import contextlib
import importlib
import json
import os
import select
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from collections import OrderedDict
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType

from racegate.harness.run import cache_state, code_root, lifeline, private_root
from racegate.harness.scenario import env_names

SWITCH = env_names.LAUNCHER  # settings.LAUNCHER_VALUES: "fork" (the default) or "fresh"
FORK, FRESH = "fork", "fresh"  # a fresh process's record says why: `launch` is "fresh: <why>"
READY_TIMEOUT_S = 300.0  # the launcher's imports (a loaded box: a minute or more)
_REPARENT_S = 5.0  # the middle process exits at once; the worker waits this long at most
# Variables that differ between runs of one environment: the runner sets each run's own, and
# the launcher checks that the libraries it imported read them late (`_late_readers`).
# pytest's PYTEST_CURRENT_TEST too: it names the test in progress, so every case of a pytest
# session would have started a launcher of its own.
PER_RUN = frozenset(cache_state.PRIVATE_DIRS) | {lifeline.RUN_MARKER, "PYTEST_CURRENT_TEST"}
# Launchers kept at once (each holds torch and transformers imported, about 1 GB): the least
# recently used one stops when another environment needs one.
MAX_LIVE = 2
PARENT_CHECK_S = 1.0  # between requests the launcher looks this often whether the runner lives


# ---------------------------------------------------------------- the launcher process itself


def _prepare(module: str) -> str:
    """Import what every run imports; '' when forks of this process are fresh runs, else why
    not."""
    import torch

    with contextlib.suppress(ImportError):
        import transformers  # noqa: F401
    with contextlib.suppress(ImportError):
        import torch._dynamo
        import torch._inductor.config
    from racegate.harness.run import worker  # noqa: F401  (the forks' entry: its imports too)

    try:
        importlib.import_module(module)
    except BaseException as exc:  # its fresh worker reports the error as a run's
        return f"the workload module {module} did not import here ({type(exc).__name__})"
    _learn_this_cpu(torch)
    # A thread of the workload's own (telemetry, a prefetcher) would be lost in every fork.
    # Native pools of libraries are not counted: numpy's and scipy's BLAS start one per core at
    # import (31 threads after transformers' Qwen3 import on a 16-core H100 host) and re-make
    # it after a fork (their pthread_atfork handlers), as jemalloc does its background thread.
    if threading.active_count() > 1:
        names = ", ".join(t.name for t in threading.enumerate() if t is not threading.main_thread())
        return f"importing {module} started a thread ({names}): a fork would lose it"
    if torch.cuda.is_initialized():
        return f"importing {module} initialised CUDA, which a forked process cannot use"
    return _late_readers()


def _learn_this_cpu(torch: ModuleType) -> None:
    """What inductor learns of this CPU once per process, learned here so every fork starts
    with it: pick_vec_isa() builds and loads a test library per instruction set with the C++
    compiler, cached in the process only (functools.cache). That was 24 s of a CPU run's 33 s
    first compile (2 cores, torch 2.12.1): every cold CPU run paid it. A run's compile cache
    stays its own and cold (the test libraries go to the launcher's folder; no graph of the
    workload is compiled here). Where a GPU is seen, nothing: its runs compile no CPU kernels
    (the check is NVML's: CUDA stays uninitialised, _launcher_env)."""
    if torch.cuda.is_available():
        return
    with contextlib.suppress(Exception):  # an older or other inductor: the runs learn it
        from torch._inductor import cpu_vec_isa

        cpu_vec_isa.pick_vec_isa()


def enter_env(env: dict[str, str]) -> None:
    """This process's environment becomes `env`; what the standard library cached of the old
    one goes (tempfile's folder)."""
    os.environ.clear()
    os.environ.update(env)
    tempfile.tempdir = None


def _late_readers() -> str:
    """'' when torch and triton read a run's cache folders when they use them (so a fork's own
    environment counts); else which one kept the launcher's. Checked in a throwaway fork."""
    r, w = os.pipe()
    pid = os.fork()
    if pid == 0:  # pragma: no cover - a fork's exit status is the result
        os.close(r)
        said = ""
        try:
            probe = Path(tempfile.mkdtemp())  # in the launcher's own folder
            enter_env({**os.environ, **cache_state.private_env(probe)})
            seen = _cache_dirs()
            said = "; ".join(
                f"{name} reads {got} after {var} changed"
                for name, (var, got) in seen.items()
                if got != os.environ[var]
            )
        except BaseException as exc:
            said = f"the check failed: {type(exc).__name__}: {exc}"
        os.write(w, said.encode())
        os._exit(0)
    os.close(w)
    said = _read_all(r)
    os.waitpid(pid, 0)
    return said.decode(errors="replace")


def _cache_dirs() -> dict[str, tuple[str, str]]:
    """Where the imported libraries would write now: reader → (its variable, the folder)."""
    found = {"tempfile": ("TMPDIR", tempfile.gettempdir())}
    with contextlib.suppress(ImportError):
        from torch._inductor.runtime.cache_dir_utils import cache_dir

        found["inductor"] = ("TORCHINDUCTOR_CACHE_DIR", cache_dir())
    triton = sys.modules.get("triton")
    knobs = getattr(triton, "knobs", None)
    if knobs is not None:
        found["triton"] = ("TRITON_CACHE_DIR", str(knobs.cache.dir))
    return found


def _read_all(fd: int) -> bytes:
    data = b""
    with contextlib.closing(os.fdopen(fd, "rb", buffering=0)) as fh:
        while chunk := fh.read(65536):
            data += chunk
    return data


def _send(message: dict[str, object]) -> None:
    sys.stdout.write(json.dumps(message) + "\n")
    sys.stdout.flush()


def _spawn(request: dict[str, str]) -> int:
    """Fork the run's worker through a middle process that exits at once; the worker's pid."""
    r, w = os.pipe()
    middle = os.fork()
    if middle == 0:  # pragma: no cover - runs in the fork
        os.close(r)
        try:
            pid = os.fork()
            if pid == 0:
                os.close(w)
                _become_worker(request)
            os.write(w, str(pid).encode())
        finally:
            os._exit(0)
    os.close(w)
    said = _read_all(r)
    os.waitpid(middle, 0)
    if not said:
        raise RuntimeError("the middle process died before it forked the worker")
    return int(said)


def _become_worker(request: dict[str, str]) -> None:  # pragma: no cover - runs in the fork
    """The fork becomes the run's worker: its session, files, environment, folder; then the
    worker's own start (racegate.harness.run.worker.forked_main). Never returns."""
    code = 1
    try:
        os.setsid()  # as start_new_session: a timeout kills the whole process group
        # What it starts stays below it, even a daemon of its own session: the runner finds
        # that by its tree while it lives, and kills it as an orphan after (lifeline.kill_adopted).
        lifeline.become_subreaper()
        run_dir = Path(request["run_dir"])
        flags = os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW
        null = os.open(os.devnull, os.O_RDONLY)
        out = os.open(run_dir / "stdout.txt", flags, 0o600)
        err = os.open(run_dir / "stderr.txt", flags, 0o600)
        for fd, target in ((null, 0), (out, 1), (err, 2)):  # the launcher's pipes go
            os.dup2(fd, target)
            os.close(fd)
        enter_env(dict(request["env"]))
        os.chdir(request["cwd"])
        sys.argv = ["racegate.harness.run.worker", str(run_dir)]
        runner = int(request["env"][env_names.RUNNER_PID])
        until = time.monotonic() + _REPARENT_S
        while os.getppid() != runner and time.monotonic() < until:
            time.sleep(0.0005)  # the middle process is exiting: then the runner adopts us
        from racegate.harness.run import worker

        code = worker.forked_main(run_dir)
    except SystemExit as exc:
        code = exc.code if isinstance(exc.code, int) else 1
    except BaseException:
        import traceback

        traceback.print_exc()
    finally:
        with contextlib.suppress(Exception):
            sys.stdout.flush()
            sys.stderr.flush()
        os._exit(code)


def serve(module: str) -> int:
    """The launcher's loop: one JSON request per line on stdin, one answer per line out."""
    runner = os.environ.get(env_names.RUNNER_PID, "")
    parent = int(runner) if runner.isdigit() else os.getppid()
    # No death signal (lifeline.die_with_parent): the kernel sends it when the *thread* that
    # started this process ends, and the runner starts a launcher from whichever case's thread
    # runs first, which ends long before the session (one H200: every later run of that
    # pytest worker went fresh, "the launcher is gone"). It serves while the runner lives
    # instead: its stdin closes when the runner dies, and between requests it looks at its
    # parent (PARENT_CHECK_S).
    if os.getppid() != parent:
        return 3
    # Blocked here, so every fork starts with them blocked: the runner may signal a worker the
    # instant it knows its pid, and they stay pending until the worker's handlers are set.
    signal.pthread_sigmask(signal.SIG_BLOCK, lifeline.RUN_SIGNALS)
    if not sys.platform.startswith("linux"):
        why = "not Linux"
    else:
        try:
            why = _prepare(module)
        except BaseException as exc:
            why = f"its imports failed ({type(exc).__name__}: {exc})"
    _send({"ready": not why, "why": why})
    if why:
        return 0
    # Unbuffered: a line read ahead into a buffer would sit there unseen by select().
    requests = os.fdopen(sys.stdin.fileno(), "rb", buffering=0, closefd=False)
    while os.getppid() == parent:
        ready, _, _ = select.select([requests], [], [], PARENT_CHECK_S)
        if not ready:
            continue
        line = requests.readline()
        if not line:  # the runner closed it, or died
            return 0
        try:
            _send({"pid": _spawn(json.loads(line))})
        except Exception as exc:
            _send({"error": f"{type(exc).__name__}: {exc}"})
    return 0


# ---------------------------------------------------------------- the runner's side


class Forked:
    """A forked worker as the runner sees it: the part of subprocess.Popen it uses. The runner
    is its parent (subreaper), so waitpid works as for a Popen's child."""

    def __init__(self, pid: int) -> None:
        self.pid = pid
        self.returncode: int | None = None
        self._lock = threading.Lock()

    def poll(self) -> int | None:
        with self._lock:
            if self.returncode is None:
                try:
                    pid, status = os.waitpid(self.pid, os.WNOHANG)
                except ChildProcessError:  # reaped by another's waitpid(-1): status unknown
                    self.returncode = -255
                else:
                    if pid:
                        self.returncode = os.waitstatus_to_exitcode(status)
            return self.returncode

    def send_signal(self, sig: int) -> None:
        if self.poll() is None:  # never a pid the kernel may have given to another process
            with contextlib.suppress(ProcessLookupError):
                os.kill(self.pid, sig)

    def kill(self) -> None:
        self.send_signal(signal.SIGKILL)

    def wait(self, timeout: float | None = None) -> int:
        deadline = None if timeout is None else time.monotonic() + timeout
        try:
            fd = os.pidfd_open(self.pid)
        except OSError:  # gone already, or a kernel without pidfd: poll in small steps
            fd = None
        try:
            while (code := self.poll()) is None:
                left = None if deadline is None else deadline - time.monotonic()
                if left is not None and left <= 0:
                    raise subprocess.TimeoutExpired(f"worker {self.pid}", timeout or 0.0)
                wait = 0.05 if left is None else min(0.05, left)
                if fd is not None:
                    select.select([fd], [], [], wait)
                else:
                    time.sleep(min(wait, 0.005))
            return code
        finally:
            if fd is not None:
                os.close(fd)


@dataclass
class _Server:
    proc: subprocess.Popen[bytes]
    root: Path  # its private folder (its caches, its TMPDIR)
    why: str  # '' when ready
    lock: threading.Lock


class Launchers:
    """The runner's launchers, one per environment (its variables but a run's own) and workload
    module; each started at its first run, at most MAX_LIVE kept, all stopped at exit."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        # Least recently used first.
        self._servers: OrderedDict[tuple[str, ...], tuple[threading.Lock, list[_Server]]] = (
            OrderedDict()
        )

    def start(self, run_dir: Path, env: dict[str, str], module: str) -> tuple[Forked | None, str]:
        """The run's worker forked (and owned: lifeline.LIVE_POPENS), or None and why it must
        start fresh."""
        asked = env.get(SWITCH) or FORK  # checked before any run (settings.check_environment)
        if asked != FORK:
            return None, f"{SWITCH}={asked}"
        if not lifeline.become_subreaper():
            return None, "this runner cannot adopt forked workers (no subreaper: not Linux)"
        server = self._server(env, module)
        if server.why:
            return None, server.why
        request = {"run_dir": str(run_dir), "env": env, "cwd": str(code_root.child_cwd())}
        # Owned before any other thread's reap_orphans could take its exit status.
        with server.lock, lifeline.ADOPTING:
            answer = _ask(server, request)
            if "pid" not in answer:
                return None, f"the launcher failed to fork: {answer.get('error', answer)}"
            forked = Forked(int(str(answer["pid"])))
            lifeline.LIVE_POPENS.add(forked.pid)
        return forked, ""

    def _server(self, env: dict[str, str], module: str) -> _Server:
        key = (module, *sorted(f"{k}={v}" for k, v in env.items() if k not in PER_RUN))
        with self._lock:
            lock, made = self._servers.setdefault(key, (threading.Lock(), []))
            self._servers.move_to_end(key)
            old = list(self._servers)[:-MAX_LIVE]
            stale = [s for k in old for s in self._servers.pop(k)[1]]
        for server in stale:  # a run it forked lives on: a worker is the runner's, not its
            _stop(server)
        with lock:  # the first run of an environment starts its launcher; the others wait
            if made and not made[0].why and made[0].proc.poll() is not None:
                _stop(made.pop())  # it died (killed from outside): the next run starts another
            if not made:
                made.append(_start_server(env, module))
        return made[0]

    def pids(self) -> list[int]:
        """The launchers' own pids (live for the session: no run's leftovers)."""
        with self._lock:
            return [s.proc.pid for _, made in self._servers.values() for s in made]

    def close(self) -> None:
        with self._lock:
            servers = [s for _, made in self._servers.values() for s in made]
            self._servers.clear()
        for server in servers:
            _stop(server)


def _stop(server: _Server) -> None:
    with server.lock:  # not while it forks a run's worker
        with contextlib.suppress(OSError):
            server.proc.stdin and server.proc.stdin.close()
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(server.proc.pid, signal.SIGKILL)
        with contextlib.suppress(subprocess.TimeoutExpired):
            server.proc.wait(timeout=5)
        lifeline.LIVE_POPENS.discard(server.proc.pid)
        shutil.rmtree(server.root, ignore_errors=True)


def _launcher_env(env: dict[str, str], root: Path) -> dict[str, str]:
    """A run's environment less its own: the launcher's caches in its private folder, and no
    run marker (killing a run never kills the launcher)."""
    own = cache_state.private_env(root)
    # torch.cuda.is_available() at an import then asks NVML, not the driver (which would make
    # the launcher's forks unable to start CUDA); read when called, so the forks ask as usual.
    own["PYTORCH_NVML_BASED_CUDA_CHECK"] = "1"
    return {k: v for k, v in env.items() if k != lifeline.RUN_MARKER} | own


def _start_server(env: dict[str, str], module: str) -> _Server:
    # In this process's private root (racegate.harness.run.private_root), beside the runs' own.
    home = os.environ.get(private_root.ENV_ROOT)
    where = home if home and os.path.isdir(home) else None
    root = Path(tempfile.mkdtemp(prefix="racegate-launcher-", dir=where))  # 0700, new
    with lifeline.ADOPTING:  # owned at once: never a leftover to lifeline.kill_adopted
        proc = subprocess.Popen(
            [sys.executable, "-m", "racegate.harness.run.launcher", module],
            env=_launcher_env(env, root),
            cwd=code_root.child_cwd(),
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL,
            start_new_session=True,
            bufsize=0,  # answers are read a line at a time after select(): none may sit buffered
        )
        lifeline.LIVE_POPENS.add(proc.pid)
    server = _Server(proc, root, "", threading.Lock())
    hello = _read_line(proc, READY_TIMEOUT_S)
    if hello is None or not hello.get("ready"):
        why = (hello or {}).get("why") or "the launcher did not start in time"
        server.why = f"no launcher: {why}"
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(proc.pid, signal.SIGKILL)
    return server


def _ask(server: _Server, request: dict[str, object]) -> dict[str, object]:
    proc = server.proc
    try:
        assert proc.stdin is not None
        proc.stdin.write((json.dumps(request) + "\n").encode())
        proc.stdin.flush()
    except OSError as exc:
        return {"error": f"the launcher is gone ({exc})"}
    return _read_line(proc, 60.0) or {"error": "the launcher did not answer"}


def _read_line(proc: subprocess.Popen[bytes], timeout: float) -> dict[str, object] | None:
    assert proc.stdout is not None
    ready, _, _ = select.select([proc.stdout], [], [], timeout)
    if not ready:
        return None
    line = proc.stdout.readline()
    with contextlib.suppress(ValueError):
        answer = json.loads(line)
        return answer if isinstance(answer, dict) else None
    return None


LAUNCHERS = Launchers()
atexit.register(LAUNCHERS.close)


if __name__ == "__main__":
    sys.exit(serve(sys.argv[1]))
