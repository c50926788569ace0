"""The process's private root: where racegate's temp and cache files go, set before torch loads.

Every front door (`python -m racegate`, the pytest plugin) calls `enter()` before anything
imports torch. It makes one 0700 directory under the user's TMPDIR, `racegate-root-<random>`,
writes who owns it (pid and start time) into it, and points TMPDIR and every cache dir torch,
triton and CUDA would otherwise make under TMPDIR or ~ (`<TMPDIR>/torchinductor_<user>`,
~/.triton, ~/.cache, ...) into it; a cache variable the user set keeps the user's value. Each
run's own root (racegate.harness.run.runner) is made inside it. The root goes when the process
exits; one left by a process killed before its exit (SIGKILL) is removed by its janitor (a
small process that waits for the end of a pipe only this process holds: `_start_janitor`), or,
where that janitor was killed too, by the next front door (`sweep`), only when its owner is
gone. A process started by one that entered (a pytest
worker, `harness run` under pytest or `harness ab`) uses the same root.
"""

from __future__ import annotations

import atexit
import contextlib
import importlib.util
import json
import os
import shutil
import stat
import sys
import tempfile
from pathlib import Path

from racegate.harness.run import cache_state
from racegate.harness.run.files import write_whole
from racegate.harness.scenario import env_names

ROOT_PREFIX = "racegate-root-"
OWNER = "owner.json"  # {"pid", "start", "boot", "pidns", "kept"}: who made the root
ENV_ROOT = env_names.PRIVATE_ROOT  # the root, for the processes this one starts
ENV_USER = env_names.USER_ENV  # JSON: each variable enter() set → the user's value, or null
# Temp dirs are always moved into the root (the user's TMPDIR is where the root is made); the
# cache dirs only when the user did not name one. Not XDG_CONFIG/DATA/STATE_HOME: those hold the
# user's settings (git's, say), not caches; a run's children get private ones (cache_state).
TEMP_VARS = ("TMPDIR", "TMP", "TEMP")
_USER_OWNED = ("XDG_CONFIG_HOME", "XDG_DATA_HOME", "XDG_STATE_HOME")
REDIRECTED = {k: v for k, v in cache_state.PRIVATE_DIRS.items() if k not in _USER_OWNED}
# Python's bytecode, where the user's environment says to write none (_cache_bytecode).
BYTECODE_DIR = "pycache"
BYTECODE_OFF, BYTECODE_PREFIX = "PYTHONDONTWRITEBYTECODE", "PYTHONPYCACHEPREFIX"
BYTECODE_VARS = (BYTECODE_OFF, BYTECODE_PREFIX)
BYTECODE_PACKAGES = ("torch", "transformers")  # whose missing bytecode costs every run seconds

# The janitor: started by enter() in a session of its own (a Ctrl-C or a kill of the front
# door's process group does not reach it), stdin the read end of a pipe whose write end only
# the front door holds (non-inheritable; a forked child keeps it, and the root, in use). At EOF
# the front door is gone, however it ended: unless the root was kept (--keep) the janitor
# removes it. Python with -I -S, the standard library only; the front door waits only for the
# posix_spawn (0.4-12 ms on the 2-core box; the janitor starts beside it in 20-100 ms).
JANITOR_MARK = "racegate's janitor"  # its program's first line: `ps` (and a test) find it by it
_JANITOR = f"""\
# {JANITOR_MARK}: removes the front door's private root once the front door is gone
import json, os, shutil, sys
root = sys.argv[1]
sys.stdin.buffer.read()
try:
    with os.fdopen(os.open(os.path.join(root, "{OWNER}"), os.O_RDONLY | os.O_NOFOLLOW)) as f:
        kept = json.load(f).get("kept")
except (OSError, ValueError, AttributeError):
    sys.exit(0)  # gone already (the front door's exit removed it), or not ours to judge
if not kept:
    shutil.rmtree(root, ignore_errors=True)
"""
_janitor_pipe: int | None = None  # the write end, held open for the process's life

_root: Path | None = None
_made_by: int | None = None  # the pid that made _root (a forked child never removes it)
_keep = False


def _proc_start(pid: int) -> int | None:
    """The process's start time (clock ticks since boot, /proc/<pid>/stat field 22), or None."""
    try:
        text = Path(f"/proc/{pid}/stat").read_text()
        return int(text.rsplit(")", 1)[1].split()[19])
    except (OSError, IndexError, ValueError):
        return None


def _boot_id() -> str:
    with contextlib.suppress(OSError):
        return Path("/proc/sys/kernel/random/boot_id").read_text().strip()
    return ""


def _pid_namespace() -> str:
    with contextlib.suppress(OSError):
        return os.readlink("/proc/self/ns/pid")
    return ""


def _owner_facts(pid: int) -> dict:
    return {
        "pid": pid,
        "start": _proc_start(pid),
        "boot": _boot_id(),
        "pidns": _pid_namespace(),
        "kept": _keep,
    }


def _write_owner(root: Path) -> None:
    """The owner file, replaced whole (racegate.harness.run.files)."""
    write_whole(root / OWNER, json.dumps(_owner_facts(_made_by or os.getpid())))


def _read_owner(root: Path) -> dict | None:
    """The owner file of a private directory of this user's, or None (not one of ours)."""
    try:
        st = os.lstat(root)
        if not stat.S_ISDIR(st.st_mode) or st.st_uid != os.getuid() or st.st_mode & 0o077:
            return None
        fd = os.open(root / OWNER, os.O_RDONLY | os.O_NOFOLLOW)
        with os.fdopen(fd) as fh:
            owner = json.load(fh)
        return owner if isinstance(owner, dict) and isinstance(owner.get("pid"), int) else None
    except (OSError, ValueError):
        return None


def owner_gone(owner: dict) -> bool:
    """Whether the process that made a root has ended: after a reboot, or its pid is free or
    taken by a process that started at another time. A root made in another pid namespace is
    never judged (its pid means another process here)."""
    if owner.get("boot") != _boot_id():
        return True
    if owner.get("pidns") != _pid_namespace() or owner.get("start") is None:
        return False  # cannot tell
    start = _proc_start(owner["pid"])
    return start is None or start != owner.get("start")


def sweep(parent: Path) -> list[Path]:
    """Remove the roots under `parent` that this user's racegate made and whose owner is gone
    (a runner killed by SIGKILL); a kept root (--keep) stays. Returns the ones removed."""
    removed = []
    try:
        entries = [e for e in os.scandir(parent) if e.name.startswith(ROOT_PREFIX)]
    except OSError:
        return removed
    for entry in entries:
        path = Path(entry.path)
        owner = _read_owner(path)
        if owner is None or owner.get("kept") or not owner_gone(owner):
            continue
        shutil.rmtree(path, ignore_errors=True)  # never follows a link inside
        removed.append(path)
    return removed


def _inherited() -> Path | None:
    """The root of the process that started this one, while this environment still uses it."""
    text = os.environ.get(ENV_ROOT)
    if not text:
        return None
    root = Path(text)
    if os.environ.get("TMPDIR") != str(root / REDIRECTED["TMPDIR"]) or _read_owner(root) is None:
        return None
    return root


def enter() -> Path:
    """This process's private root, made (and the environment pointed into it) on first call.

    ValueError (one line) when the user's TMPDIR cannot hold it."""
    global _root, _made_by
    if _root is not None:
        return _root
    inherited = _inherited()
    if inherited is not None:
        _root = inherited
        return _root
    parent = Path(tempfile.gettempdir())  # the user's TMPDIR, or /tmp
    sweep(parent)
    try:
        root = Path(tempfile.mkdtemp(prefix=ROOT_PREFIX, dir=parent))  # 0700, unpredictable
    except OSError as exc:
        raise ValueError(
            f"cannot make racegate's private folder under {parent} (TMPDIR): "
            f"{exc.strerror or exc}; point TMPDIR at a writable folder of yours"
        ) from None
    _made_by = os.getpid()
    _write_owner(root)
    atexit.register(_remove)
    _start_janitor(root)
    changed: dict[str, str | None] = {}
    for var, sub in REDIRECTED.items():
        if var in os.environ and var not in TEMP_VARS:
            continue  # the user's own cache dir
        path = root
        for part in sub.split("/"):
            path = cache_state.private_dir(path / part, exist_ok=True)
        changed[var] = os.environ.get(var)
        os.environ[var] = str(path)
    _cache_bytecode(root, changed)
    os.environ[ENV_ROOT] = str(root)
    os.environ[ENV_USER] = json.dumps(changed)
    tempfile.tempdir = None  # gettempdir() cached the user's TMPDIR: read it again
    _root = root
    return root


def _start_janitor(root: Path) -> None:
    """Start the root's janitor (_JANITOR). posix_spawn, not subprocess.Popen: it outlives this
    process by design, and a Popen still running at exit is a ResourceWarning. Where it cannot
    start, the next front door's sweep is left to do its work."""
    global _janitor_pipe
    read_end, write_end = os.pipe()  # both non-inheritable (PEP 446)
    try:
        os.posix_spawn(
            sys.executable,
            [sys.executable, "-I", "-S", "-c", _JANITOR, str(root)],
            {"PATH": os.environ.get("PATH", "/usr/bin:/bin")},
            file_actions=[
                (os.POSIX_SPAWN_DUP2, read_end, 0),  # dup2 clears close-on-exec on the copy
                (os.POSIX_SPAWN_OPEN, 1, os.devnull, os.O_WRONLY, 0),
                (os.POSIX_SPAWN_OPEN, 2, os.devnull, os.O_WRONLY, 0),
            ],
            setsid=True,
        )
    except OSError:
        os.close(write_end)
    else:
        _janitor_pipe = write_end
    finally:
        os.close(read_end)


def _cache_bytecode(root: Path, changed: dict[str, str | None]) -> None:
    """Where the user's environment forbids writing Python bytecode (PYTHONDONTWRITEBYTECODE, as
    container images set), this process from here on, and every process it starts, writes its
    bytecode into `<root>/pycache` (PYTHONPYCACHEPREFIX) instead; `changed` keeps the user's
    values. Only where Python would find none for torch or transformers (_bytecode_missing): an
    image that ships bytecode keeps being read as it is. Elsewhere nothing changes: Python
    writes bytecode beside the sources as it would.

    Every run is a fresh interpreter, and without bytecode each one compiles the sources of
    torch, transformers and what they import again, in the run's child and in inductor's
    compile-worker process beside it: on one H100 host's image (torch 2.11, transformers 5.17,
    PYTHONDONTWRITEBYTECODE=1, no bytecode for torch's 2,141 modules) 894 modules and 3.9 s in
    `from transformers import Qwen3ForCausalLM` alone. This process writes too, so the pytest
    workers and the runs it starts later load what it compiled (the controller imports torch
    and the workload before its workers start). The bytecode stays inside the private root
    (0700, gone at exit), never beside the user's sources; Python writes each file whole (a
    temporary file, then a rename), so processes side by side share it safely."""
    if not os.environ.get(BYTECODE_OFF) or not _bytecode_missing():
        return
    path = cache_state.private_dir(root / BYTECODE_DIR, exist_ok=True)
    for var in BYTECODE_VARS:
        changed[var] = os.environ.get(var)
    os.environ[BYTECODE_OFF] = ""  # Python reads an empty one as unset
    os.environ[BYTECODE_PREFIX] = str(path)
    sys.dont_write_bytecode = False
    sys.pycache_prefix = str(path)


def _bytecode_missing() -> bool:
    """Python would find no bytecode for torch's or transformers' package where it looks now
    (beside the source, or under the user's PYTHONPYCACHEPREFIX); neither is imported."""
    for name in BYTECODE_PACKAGES:
        try:
            spec = importlib.util.find_spec(name)
        except (ImportError, ValueError):
            continue
        if spec is not None and spec.cached and not os.path.exists(spec.cached):
            return True
    return False


def bytecode_env() -> dict[str, str]:
    """The bytecode variables enter() set for this process's root ({} where it set none), so a
    run's record names the user's values they replaced
    (racegate.harness.run.cache_state.overridden)."""
    root = os.environ.get(ENV_ROOT)
    prefix = os.environ.get(BYTECODE_PREFIX, "")
    if not root or not prefix.startswith(root + os.sep):
        return {}
    return {BYTECODE_OFF: os.environ.get(BYTECODE_OFF, ""), BYTECODE_PREFIX: prefix}


def keep() -> None:
    """Leave the root at exit (`--keep`: the runs' work dirs are in it); the sweep leaves it too."""
    global _keep
    _keep = True
    if _root is not None and _made_by == os.getpid():
        _write_owner(_root)


def _remove() -> None:
    if _root is not None and _made_by == os.getpid() and not _keep:
        shutil.rmtree(_root, ignore_errors=True)


def user_environ() -> dict[str, str]:
    """os.environ as the user gave it: each variable enter() set (and nothing changed since)
    back to the user's value, or absent."""
    env = dict(os.environ)
    try:
        changed = json.loads(env.get(ENV_USER, "{}"))
    except ValueError:
        changed = {}
    root = env.get(ENV_ROOT)

    def ours(var: str) -> bool:
        value = env.get(var, "")
        if var == BYTECODE_OFF:  # emptied, beside a PYTHONPYCACHEPREFIX of ours
            return value == "" and ours(BYTECODE_PREFIX)
        return value == root or value.startswith(f"{root}{os.sep}")

    for var, user in changed.items() if isinstance(changed, dict) and root else ():
        if not ours(var):
            continue  # set again since (a test's monkeypatch, say): that value stands
        if user is None:
            env.pop(var, None)
        else:
            env[var] = user
    for var in (ENV_ROOT, ENV_USER):
        env.pop(var, None)
    return env
