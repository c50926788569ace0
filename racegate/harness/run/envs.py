"""Candidate environments beside the current one: a venv that changes torch or transformers only.

`candidate({"transformers": "5.8.1"}, base=current(), where=...)` makes a venv under `where`
(racegate's state: `.racegate/envs/<key>`, private 0700, marked `.racegate-made`), whose
site-packages come first and are followed, through a `.pth` file, by every package folder of the
base environment. `pip install transformers==5.8.1` then puts into the candidate only what the
change needs (transformers, and e.g. the older tokenizers 5.6/5.8 pin, which shadows the base's
newer one because the candidate's own folder comes first); the base's torch satisfies the
requirement when torch does not change (no second download), and pip never uninstalls what lies
outside the venv. Nothing is ever installed into the base environment. The same key (the base's
versions and interpreter + the changes) reuses the folder it made before.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import subprocess
import sys
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from racegate.harness.run import lifeline, state
from racegate.harness.run.files import write_whole
from racegate.harness.scenario.settings import shown

MADE_MARKER = ".racegate-made"  # the mark bootstrap.py also puts in the venvs it makes
ENVS = "envs"  # under the state folder: .racegate/envs/<key>
PACKAGES = ("torch", "transformers")  # what a change may name
BASE_PTH = "racegate-base.pth"
DONE = "racegate-env.json"  # written last: a folder without it is half made and is redone
MAX_VERSION = 64  # characters: a version past it is no release (and no 100 KB error line)
CHANGE_FORM = "PACKAGE==VERSION with PACKAGE one of torch, transformers (e.g. transformers==5.8.1)"

# Run by the environment's own python: its versions, and the folders its packages load from.
_PROBE = """
import json, platform, site, sys, sysconfig
from importlib import metadata
def v(name):
    try:
        return metadata.version(name)
    except metadata.PackageNotFoundError:
        return "absent"
std = {sysconfig.get_paths()[k] for k in ("stdlib", "platstdlib")}
folders = [p for p in sys.path if p and p != "." and not p.endswith(".zip")
           and p not in std and not p.endswith("lib-dynload")]
print(json.dumps({"python": platform.python_version(), "torch": v("torch"),
                  "transformers": v("transformers"), "tokenizers": v("tokenizers"),
                  "prefix": sys.prefix, "purelib": sysconfig.get_paths()["purelib"],
                  "folders": folders}))
"""


# Run by the candidate's own python with its purelib: every distribution installed there, its
# version and the top-level modules it holds (what the candidate must import from itself).
_HOLDS = """
import json, sys
from importlib import metadata
out = {}
for d in metadata.distributions(path=[sys.argv[1]]):
    tops = (d.read_text("top_level.txt") or "").split()
    if not tops:
        tops = sorted({f.parts[0].removesuffix(".py") for f in d.files or ()
                       if f.parts and f.parts[0] not in ("..", "__pycache__", "bin")
                       and not f.parts[0].endswith((".dist-info", ".data", ".pth"))
                       and (len(f.parts) > 1 or f.parts[0].endswith(".py"))})
    out[d.metadata["Name"].lower().replace("_", "-")] = {
        "version": d.version, "modules": [t for t in tops if not t.startswith("_")]}
print(json.dumps(out))
"""
# Run by the candidate's own python: each module imported, where it loaded from, its version.
_IMPORTS = """
import importlib, json, sys
out = {}
for name in json.loads(sys.argv[1]):
    try:
        m = importlib.import_module(name)
        out[name] = {"file": getattr(m, "__file__", None) or "",
                     "version": str(getattr(m, "__version__", ""))}
    except BaseException as e:
        out[name] = {"error": (type(e).__name__ + ": " + str(e)).splitlines()[0][:200]}
print(json.dumps(out))
"""


class EnvError(Exception):
    """An environment that cannot be read or built: one line, exit 2."""


@dataclass(frozen=True)
class Environment:
    python: Path  # the interpreter to run the race selection / A/B with
    versions: dict[str, str]  # torch, transformers, python as installed there (read by running it)
    changes: dict[str, str]  # what differs from the current env, e.g. {"transformers": "5.8.1"}
    root: Path | None  # the folder racegate made (None: the current env)

    def describe(self) -> str:
        return ", ".join(f"{k} {self.versions.get(k, '?')}" for k in ("torch", "transformers"))


def _probe(python: Path) -> dict:
    try:
        done = subprocess.run(
            [str(python), "-I", "-c", _PROBE], capture_output=True, text=True, timeout=120
        )
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise EnvError(f"cannot run the python {python}: {exc}") from None
    if done.returncode != 0:
        last = (done.stderr.strip().splitlines() or ["(no output)"])[-1]
        raise EnvError(f"cannot read the versions of {python}: {last}")
    return json.loads(done.stdout.strip().splitlines()[-1])


def _versions(facts: Mapping[str, object]) -> dict[str, str]:
    return {k: str(facts[k]) for k in ("torch", "transformers", "tokenizers", "python")}


def current(python: Path | None = None) -> Environment:
    """The environment of `python` (default: this process's interpreter), as it is.

    The path is made absolute, never resolved: a venv's python is a link to the base
    interpreter, and resolving it would lose the venv."""
    py = Path(os.path.abspath(python or sys.executable))
    return Environment(python=py, versions=_versions(_probe(py)), changes={}, root=None)


def parse_changes(texts: Sequence[str]) -> dict[str, str]:
    """["transformers==5.8.1", "torch==2.13.0"] -> {"transformers": "5.8.1", "torch": "2.13.0"}.

    ValueError (one line naming the text and the form allowed) for anything else: another
    package, another operator, an empty version, a package named twice, or nothing at all."""
    if not texts:
        raise ValueError(f"no change named: give {CHANGE_FORM}")
    out: dict[str, str] = {}
    for text in texts:
        name, sep, version = text.partition("==")
        name, version = name.strip().lower(), version.strip()
        ok_version = 0 < len(version) <= MAX_VERSION and all(
            c.isalnum() or c in ".+-_" for c in version
        )
        if not sep or name not in PACKAGES or not ok_version:
            raise ValueError(f"the change {shown(text)} is not {CHANGE_FORM}")
        if name in out:
            raise ValueError(f"the change {shown(text)} names {name} a second time; name it once")
        out[name] = version
    return out


def _key(base: Environment, changes: Mapping[str, str]) -> str:
    what = {"base": str(base.python), "versions": base.versions, "changes": dict(changes)}
    return hashlib.sha256(json.dumps(what, sort_keys=True).encode()).hexdigest()[:16]


def envs_dir(root: Path) -> Path:
    """<checkout>/.racegate/envs, made private (0700) if missing."""
    for folder in (root / state.STATE_DIR, root / state.STATE_DIR / ENVS):
        state._private_dir(folder)
    return root / state.STATE_DIR / ENVS


def _matches(versions: Mapping[str, str], changes: Mapping[str, str]) -> bool:
    return all(versions.get(k, "").split("+")[0] == v.split("+")[0] for k, v in changes.items())


def _run_json(python: Path, script: str, *args: str) -> dict:
    try:
        done = subprocess.run(
            [str(python), "-I", "-c", script, *args], capture_output=True, text=True, timeout=600
        )
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise EnvError(f"cannot run the python {python}: {exc}") from None
    if done.returncode != 0:
        last = (done.stderr.strip().splitlines() or ["(no output)"])[-1]
        raise EnvError(f"{python} could not read itself: {last}")
    return json.loads(done.stdout.strip().splitlines()[-1])


def holds(python: Path, purelib: Path) -> dict[str, dict]:
    """What the environment's own site-packages hold: distribution → version and modules."""
    return _run_json(python, _HOLDS, str(purelib))


def not_whole(
    python: Path, purelib: Path, held: Mapping[str, Mapping], changes: Mapping[str, str]
) -> str | None:
    """Why the environment is not what it was made to be (None: it is whole): every module of
    every distribution it holds (`held`, as `holds` read it when it was made) must import
    there, from its own site-packages, and each changed package at the version asked. A
    package folder removed since (the base's copy then loads through the .pth file) is
    caught here, where the metadata alone still names the version asked."""
    missing = [name for name in changes if name not in held]
    if missing:
        return f"it holds no {', '.join(missing)} of its own"
    modules = sorted({m for d in held.values() for m in d.get("modules", ())})
    found = _run_json(python, _IMPORTS, json.dumps(modules))
    own = purelib.resolve()
    for name in modules:
        got = found.get(name, {})
        if "error" in got:
            return f"{name} does not import there ({got['error']})"
        where = Path(got.get("file") or "/").resolve()
        if not where.is_relative_to(own):
            return f"{name} imports from {where.parent}, not from its own {own}"
    for name, version in changes.items():
        got = found.get(name, {}).get("version", "")
        if got.split("+")[0] != version.split("+")[0]:
            return f"{name} imports at version {got or '(none)'}, not the {version} asked"
    return None


def _pip_last_error(output: str) -> str:
    lines = [ln.strip() for ln in output.splitlines() if ln.strip()]
    errors = [ln for ln in lines if ln.startswith("ERROR")]
    return (errors or lines or ["(pip printed nothing)"])[-1]


def candidate(
    changes: Mapping[str, str],
    *,
    base: Environment,
    where: Path,
    find_links: Sequence[Path] = (),
    progress: Callable[[str], None] = print,
) -> Environment:
    """The base environment with `changes` installed, in a venv of its own under `where`.

    `where` is the folder of candidate venvs (envs_dir(checkout)); the venv is `where/<key>`,
    reused when it was made complete before. `find_links`: local wheel folders, used with
    --no-index (an offline host with a carried wheelhouse). EnvError (one line naming the
    requirement and pip's last error line) when the install fails."""
    if not changes:
        raise EnvError("no change asked: the candidate would be the current environment")
    for name in changes:
        if name not in PACKAGES:
            raise EnvError(f"cannot change {name!r}: only {', '.join(PACKAGES)}")
    base_facts = _probe(base.python)
    state.refuse_link(where, "the environments folder")
    where.mkdir(parents=True, exist_ok=True, mode=0o700)
    folder = where / _key(base, changes)
    state.refuse_link(folder, "the candidate environment")
    python = folder / "bin" / "python"
    wanted = {"base": str(base.python), "changes": dict(changes), "find_links": []}
    wanted["find_links"] = [str(p) for p in find_links]
    done = folder / DONE
    if done.is_file() and python.exists():
        try:
            stored = json.loads(done.read_text())
        except ValueError:
            stored = None
        if isinstance(stored, dict) and stored.get("changes") == dict(changes):
            facts = _probe(python)
            env = Environment(python, _versions(facts), dict(changes), folder)
            held = stored.get("holds")
            why = (
                not_whole(python, Path(str(facts["purelib"])), held, changes)
                if isinstance(held, dict)
                else "made by an older racegate, which did not list what it holds"
            )
            if why is None and _matches(env.versions, changes):
                progress(f"candidate environment {folder}: reused ({env.describe()})")
                return env
            progress(f"candidate environment {folder}: not whole ({why}); making it again")
    if folder.exists():
        if not (folder / MADE_MARKER).is_file():
            raise EnvError(f"{folder} exists and was not made by racegate: remove it")
        shutil.rmtree(folder)  # half made or stale: make it again
    progress(f"candidate environment {folder}: making it beside {base.python}")
    os.mkdir(folder, 0o700)
    try:
        return _make(folder, changes, base, base_facts, wanted, find_links, progress)
    except BaseException:
        # A refused requirement, a failed install, an interrupt: no half-made venv is left.
        shutil.rmtree(folder, ignore_errors=True)
        raise


def _run(args: Sequence[str], **kw: object) -> subprocess.CompletedProcess[str]:
    """A child of the environment's making (venv, pip, a probe): it dies with this process."""
    return lifeline.run_dying_with_me(list(args), capture_output=True, text=True, **kw)


def _make(
    folder: Path,
    changes: Mapping[str, str],
    base: Environment,
    base_facts: dict,
    wanted: dict,
    find_links: Sequence[Path],
    progress: Callable[[str], None],
) -> Environment:
    """Make the candidate venv in the new, empty `folder` (see `candidate`)."""
    python = folder / "bin" / "python"
    done = folder / DONE
    requirements = [f"{name}=={version}" for name, version in sorted(changes.items())]
    (folder / MADE_MARKER).write_text(
        "made by racegate (racegate/harness/run/envs.py); it installs only here\n"
    )
    base_has_pip = _run([str(base.python), "-c", "import pip"], timeout=60).returncode == 0
    venv_args = [str(base.python), "-m", "venv", "--clear"]
    if base_has_pip:
        venv_args.append("--without-pip")  # the base's pip is reached through the .pth file
    made = _run([*venv_args, str(folder)])
    if made.returncode != 0:
        raise EnvError(f"cannot make a venv at {folder}: {_pip_last_error(made.stderr)}")
    (folder / MADE_MARKER).write_text(
        "made by racegate (racegate/harness/run/envs.py); it installs only here\n"
    )
    own = _probe(python)
    purelib = Path(str(own["purelib"]))
    shared = [f for f in base_facts["folders"] if Path(f) != purelib]
    # After the candidate's own folder: what pip installs here shadows the base's copy.
    (purelib / BASE_PTH).write_text("".join(f"{f}\n" for f in shared))
    pip = [str(python), "-m", "pip", "install", "--disable-pip-version-check", "--progress-bar"]
    pip.append("off")
    if find_links:
        pip.append("--no-index")
        for link in find_links:
            pip += ["--find-links", str(link)]
    progress(f"installing {' '.join(requirements)} into {folder} (pip resolves the rest)")
    installed = _run([*pip, *requirements])
    if installed.returncode != 0:
        raise EnvError(
            f"cannot install {' '.join(requirements)} into {folder}: "
            f"{_pip_last_error(installed.stdout + installed.stderr)}"
        )
    env = Environment(python, _versions(_probe(python)), dict(changes), folder)
    if not _matches(env.versions, changes):
        raise EnvError(
            f"installed {' '.join(requirements)} into {folder}, but its python reports "
            f"{env.describe()}"
        )
    held = holds(python, purelib)
    if why := not_whole(python, purelib, held, changes):
        raise EnvError(f"installed {' '.join(requirements)} into {folder}, but {why}")
    write_whole(done, json.dumps({**wanted, "versions": env.versions, "holds": held}, indent=1))
    progress(f"candidate environment {folder}: {env.describe()}")
    return env
