"""What racegate's nox sessions do (noxfile.py): the version matrix, each cell's install, the
suite's runs and their reading, the A/B cells' reference venv and call. Standard library and nox
only: nox's own interpreter imports it, which has neither torch nor pytest.
"""

from __future__ import annotations

import argparse
import datetime
import hashlib
import importlib.metadata
import importlib.util
import json
import os
import re
import shutil
import socket
import sys
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import NoReturn
from xml.etree import ElementTree

import nox

from racegate.harness.ab.defaults import ONE_TIMED_RUN
from racegate.harness.doors.sizing import (
    host_race_workers,  # the one sizing rule, bootstrap.py's too
)
from racegate.harness.scenario import matrix_plan

# ---- The version matrix: racegate/harness/expectations/versions.toml, the only place versions are
# written. ----
SYSTEM = matrix_plan.SYSTEM


def load_matrix() -> matrix_plan.Matrix:
    """racegate/harness/expectations/versions.toml; a file nox cannot use stops nox: one line, exit
    2."""
    try:
        return matrix_plan.load()
    except (OSError, ValueError) as exc:  # tomllib.TOMLDecodeError is a ValueError
        print(f"nox: error: {exc}", file=sys.stderr)
        raise SystemExit(2) from None


MATRIX = load_matrix()

ROOT = Path(__file__).resolve().parent
PYPROJECT = nox.project.load_toml(ROOT / "pyproject.toml")
# Runs write under the git-ignored state folder .racegate/; results/ only receives what someone
# commits on purpose (point RACEGATE_RESULTS_DIR there to do so).
STATE_DIR = ROOT / ".racegate"
RESULTS_DIR = Path(
    os.environ.get("RACEGATE_RESULTS_DIR")
    or STATE_DIR
    / "results"
    / f"{datetime.date.today():%Y-%m-%d}-{socket.gethostname().split('.')[0]}"
)
# GPUs a gpu_matrix cell needs: the both-GPU topologies (multi_gpu cases) skip on fewer. Listed
# as the tag gpus_<n>, which the nightly's plan turns into the runner label gpus-<n>.
CELL_GPUS = 2
# Sessions that reuse the image's packages through --system-site-packages run on pip
# (virtualenv): uv does not count system site packages as installed (astral-sh/uv#2101) and
# would fetch them again, which an offline runner cannot do.
SYSTEM_SITE = {"venv_backend": "virtualenv", "venv_params": ["--system-site-packages"]}
# cpu_matrix installs each torch release once, here (`pip install --target`), and every
# transformers cell of that release reads it through a .pth file: one install per release, not
# one per cell.
# A pip constraint capping torch (this CPU image: /etc/xdg/pip/constraints.txt, torch<=2.14.1)
# stops torch 2.15.0 here; lift it for the run with PIP_CONSTRAINT=/dev/null.
TORCH_DIR = Path(os.environ.get("RACEGATE_TORCH_DIR") or ROOT / ".nox" / "_torch")


def requirement_name(requirement: str) -> str:
    """A requirement's distribution name, normalised (`Foo_Bar>=1` → `foo-bar`)."""
    return re.split(r"[\s<>=!~;\[]", requirement, maxsplit=1)[0].lower().replace("_", "-")


def env_int(name: str, default: int | None, *, minimum: int, what: str) -> int | None:
    """$name as an integer ≥ `minimum` (unset or blank: `default`), the one reader of the
    noxfile's integer settings. A bad value is a usage error of the whole run (every cell reads
    the same value): one line naming the variable, its value and what is allowed; exit 2."""
    text = os.environ.get(name, "").strip()
    if not text:
        return default
    if not re.fullmatch(r"[0-9]+", text) or int(text) < minimum:
        print(f"nox: error: {name}={text!r}: expected {what}, an integer ≥ {minimum}",
              file=sys.stderr)  # fmt: skip
        raise SystemExit(2)
    return int(text)


def requirements(*, without: tuple[str, ...] = ()) -> list[str]:
    """pyproject's [project].dependencies, less the named packages (the matrix pins those)."""
    return [r for r in PYPROJECT["project"]["dependencies"] if requirement_name(r) not in without]


def install(session: nox.Session, *packages: str, index_args: tuple[str, ...] = ()) -> None:
    """Install; RACEGATE_WHEELHOUSE=/path makes it offline (`--no-index --find-links /path`)."""
    if session.venv_backend == "none":  # `--no-venv`: the current environment as it is
        session.log(f"no virtualenv: not installing {' '.join(packages)}")
        return
    wheelhouse = os.environ.get("RACEGATE_WHEELHOUSE")
    if wheelhouse:
        if not Path(wheelhouse).is_dir():
            session.error(f"RACEGATE_WHEELHOUSE={wheelhouse!r} is not a folder of wheels")
        session.install("--no-index", "--find-links", wheelhouse, *packages)
    else:
        session.install(*index_args, *packages)


def session_purelib(session: nox.Session) -> Path | None:
    """The session venv's site-packages (None when nothing ran, e.g. `nox --install-only`)."""
    out = session.run(
        "python", "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])", silent=True
    )
    return Path(out.strip().splitlines()[-1]) if out else None


def link_runner_site_packages(session: nox.Session) -> None:
    """torch='system': put the site-packages holding the runner's torch on the session's path.

    --system-site-packages only reaches the *base* interpreter's packages; on an image whose
    torch lives in a venv (the GPU runner: /opt/torch/.venv) that misses it, so a .pth file
    appends that folder after the session's own packages (which still win, e.g. transformers).
    """
    spec = importlib.util.find_spec("torch")
    if spec is None or spec.origin is None or session.venv_backend == "none":
        return
    site_dir = Path(spec.origin).parent.parent
    purelib = session_purelib(session)
    if purelib:
        (purelib / "racegate-runner-site.pth").write_text(f"{site_dir}\n")


def check_versions(session: nox.Session, torch: str, transformers: str) -> None:
    """Fail the cell unless its Python imports the asked torch (any local tag) and transformers."""
    # racegate/harness/scenario/versions.py, run by the cell's own Python (it imports torch there,
    # not here)
    got = session.run(
        "python", "-m", "racegate.harness.scenario.versions", "--import-torch", silent=True
    )
    if got is None:
        return
    found = json.loads(got.strip().splitlines()[-1])
    torch_got, tf_got = found["torch"], found["transformers"]
    if tf_got != transformers or (torch != SYSTEM and torch_got.split("+")[0] != torch):
        session.error(f"asked torch {torch}, transformers {transformers}; got {torch_got} {tf_got}")


def install_cell(session: nox.Session, torch: str, transformers: str) -> None:
    """One matrix cell's environment: torch (or the image's), transformers, the suite's deps."""
    if torch == SYSTEM:
        link_runner_site_packages(session)
        found = session.run(
            "python",
            "-c",
            "import importlib.util as u; print(bool(u.find_spec('torch')))",
            silent=True,
        )
        if found is not None and "True" not in found:  # None: `nox --install-only` ran nothing
            session.skip("torch='system' but this runner's Python has no torch installed")
    else:
        index = os.environ.get("RACEGATE_TORCH_INDEX_URL")  # e.g. a CPU-only wheel index
        install(session, f"torch=={torch}", index_args=("--index-url", index) if index else ())
    install(
        session, *MATRIX.cell_pins(transformers), *requirements(without=("torch", "transformers"))
    )
    check_versions(session, torch, transformers)


def torch_release_in(folder: Path) -> str | None:
    """The torch release installed in `folder` (local tag such as +cpu dropped), else None."""
    if not folder.is_dir():
        return None
    for dist in importlib.metadata.distributions(path=[str(folder)]):
        if requirement_name(dist.metadata["Name"] or "") == "torch":
            return dist.version.split("+")[0]
    return None


def shared_torch_folder(torch: str, index: str | None) -> Path:
    """TORCH_DIR/<torch>, or TORCH_DIR/<torch>-<index hash> for another index: a CPU-index
    build and the default index's CUDA build of one release never share a folder."""
    if not index:
        return TORCH_DIR / torch
    return TORCH_DIR / f"{torch}-{hashlib.sha256(index.encode()).hexdigest()[:8]}"


def shared_torch(session: nox.Session, torch: str) -> Path:
    """TORCH_DIR/<torch>: torch installed there once (`pip install --target`), then reused.

    Installs into <torch>.partial and renames it when the install is complete, so an
    interrupted install is redone rather than taken for a finished one. RACEGATE_TORCH_INDEX_URL
    picks the index (e.g. https://download.pytorch.org/whl/cpu: no CUDA libraries), and
    RACEGATE_WHEELHOUSE makes it offline, as for every install.
    """
    index = os.environ.get("RACEGATE_TORCH_INDEX_URL")
    folder = shared_torch_folder(torch, index)
    found = torch_release_in(folder)
    if found == torch:
        session.log(f"torch {torch}: reusing {folder}")
        return folder
    if folder.exists() or folder.is_symlink():
        session.error(f"{folder} holds torch {found or 'nothing'}, not {torch}: remove it")
    partial = folder.with_name(f"{folder.name}.partial")
    if partial.is_symlink() or partial.is_file():
        partial.unlink()
    elif partial.exists():
        shutil.rmtree(partial)
    partial.parent.mkdir(parents=True, exist_ok=True)
    try:
        install(
            session,
            "--target",
            str(partial),
            f"torch=={torch}",
            index_args=("--index-url", index) if index else (),
        )
    except nox.command.CommandFailed:
        session.error(
            f"pip could not install torch=={torch} into {partial}. If it printed "
            "ResolutionImpossible with a '(constraint)' line, a pip constraint caps torch "
            "(pip config list; PIP_CONSTRAINT): rerun with PIP_CONSTRAINT=/dev/null"
        )
    found = torch_release_in(partial)
    if found != torch:  # e.g. `nox --no-install` on a reused venv installed nothing
        session.error(f"installing torch=={torch} into {partial} left torch {found or 'nothing'}")
    partial.rename(folder)
    return folder


def install_cpu_cell(session: nox.Session, torch: str, transformers: str) -> None:
    """A cpu_matrix cell: transformers + the suite's deps in the cell's venv, torch shared.

    The venv gets a .pth file appending TORCH_DIR/<torch> after its own packages (which win,
    e.g. transformers and tokenizers), and a stamp of what it was given: a rerun whose stamp
    matches installs nothing.
    """
    if session.venv_backend == "none":  # `--no-venv`: the current environment as it is
        check_versions(session, torch, transformers)
        return
    folder = shared_torch(session, torch).absolute()
    packages = [*MATRIX.cell_pins(transformers), *requirements(without=("torch", "transformers"))]
    want = {
        "torch_dir": str(folder),
        "packages": packages,
        "wheelhouse": os.environ.get("RACEGATE_WHEELHOUSE") or None,
    }
    purelib = session_purelib(session)
    stamp = purelib / "racegate-cell.json" if purelib else None
    pth = purelib / "racegate-torch.pth" if purelib else None
    if stamp and pth and stamp.is_file() and pth.is_file():
        try:
            done = json.loads(stamp.read_text())
        except ValueError:
            done = None
        if done == want and pth.read_text().strip() == str(folder):
            session.log(f"cell environment unchanged ({stamp}): nothing to install")
            check_versions(session, torch, transformers)
            return
    install(session, *packages)
    if stamp and pth:  # after the installs: pip resolves the cell's packages on their own
        pth.write_text(f"{folder}\n")
        stamp.write_text(json.dumps(want, indent=1) + "\n")
    check_versions(session, torch, transformers)


def results_dir(session: nox.Session) -> Path:
    """.racegate/results/<date>-<host>/<cell id>/ (the root from RACEGATE_RESULTS_DIR when set)."""
    cell = re.sub(r"[^A-Za-z0-9._-]+", "-", session.name).strip("-")
    path = RESULTS_DIR / cell
    path.mkdir(parents=True, exist_ok=True)
    return path


# pytest's exit for a race selection whose decision is UNDECIDED (racegate/harness/judge/gate.py's
# EXIT_UNDECIDED; tests/test_noxfile.py checks they agree: this module imports the standard
# library and nox only, as nox's interpreter has nothing else, and the judge may import more).
# A matrix cell collects evidence for the report, which decides: UNDECIDED (a CPU torch that
# masks the race, say) passes a cell, UNSAFE (1) fails it; the `race` session gates, so 7
# fails it.
UNDECIDED_EXIT = 7
CELL_OK_CODES = (0, UNDECIDED_EXIT)


def fresh_records(session: nox.Session) -> Path:
    """The cell's records file, empty: a cell judges and reports its own invocation's runs.
    An earlier invocation's file is kept beside it as records-<time>.jsonl.prev (read by
    neither report nor verdict unless named: `--records-from`, `harness report PATH`)."""
    records = results_dir(session) / "records.jsonl"
    if records.is_file():
        stamp = datetime.datetime.fromtimestamp(records.stat().st_mtime)
        kept = records.with_name(f"records-{stamp:%Y%m%dT%H%M%S}.jsonl.prev")
        records.rename(kept)
        session.log(f"an earlier run's records kept as {kept}: not judged or reported here")
    return records


def run_suite(
    session: nox.Session,
    *args: str,
    junit: str = "junit.xml",
    ok_codes: tuple[int, ...] = (0,),
    posargs: list[str] | None = None,
) -> None:
    """pytest with this cell's records (JSON Lines) and JUnit XML written to its results dir."""
    out = results_dir(session)
    env = {k: v for k in ("RACEGATE_WORKLOAD",) if (v := os.environ.get(k))}
    # A runner image's pytest-benchmark warns once per xdist worker: not loaded.
    env["PYTEST_ADDOPTS"] = " ".join(
        filter(None, [os.environ.get("PYTEST_ADDOPTS"), "-p no:benchmark"])
    )
    session.run(
        "python", "-m", "pytest", *args,
        f"--racegate-results={out / 'records.jsonl'}", f"--junitxml={out / junit}",
        *(session.posargs if posargs is None else posargs), env=env, success_codes=list(ok_codes),
    )  # fmt: skip


def split_marker(posargs: list[str]) -> tuple[str | None, list[str]]:
    """The `-m` expression in posargs and the posargs without it, read by argparse as pytest
    reads them (`-m EXPR`, `-mEXPR`, `-m=EXPR`; the last one wins)."""
    parser = argparse.ArgumentParser(add_help=False, allow_abbrev=False)
    parser.add_argument("-m", dest="marker")
    known, rest = parser.parse_known_args(posargs)
    return known.marker, rest


def race_workers(session: nox.Session, gpus: int, gpu_bytes: int, knobs: CellKnobs) -> int:
    """RACEGATE_RACE_WORKERS when set, else host_race_workers for this host's cores and GPUs."""
    workers = knobs.race_workers
    if workers is None:
        workers = host_race_workers(len(os.sched_getaffinity(0)), gpus, gpu_bytes)
        session.log(f"race workers: {workers} (from this host; RACEGATE_RACE_WORKERS overrides)")
    return workers


def junit_failures(path: Path) -> int | None:
    """Failed + errored test cases in a JUnit XML file; None when there is no readable file
    (pytest died before writing it, e.g. pytest-timeout's os._exit on a hung case)."""
    try:
        root = ElementTree.parse(path).getroot()
    except (OSError, ElementTree.ParseError):
        return None
    suites = [root] if root.tag == "testsuite" else list(root)
    return sum(int(s.get("failures", 0)) + int(s.get("errors", 0)) for s in suites)


@dataclass(frozen=True)
class CellKnobs:
    """A GPU cell's RACEGATE_* integers, read before anything is installed or run: a bad value
    must cost nothing (every cell reads the same environment)."""

    race_workers: int | None  # None: sized to the host (host_race_workers)
    case_jobs: int
    control_repeat: int | None  # None: the plugin's default

    @classmethod
    def from_env(cls) -> CellKnobs:
        return cls(
            race_workers=env_int(
                "RACEGATE_RACE_WORKERS", None, minimum=1, what="race cases at once"
            ),
            case_jobs=env_int("RACEGATE_CASE_JOBS", 8, minimum=1, what="runs of one case at once"),
            # The control's runs per cell. 8 at 8 case jobs put ~30 runs at once on one
            # 16-core H200 host: every priming run timed out (overload), so the plugin's
            # default stays (results/h200-cell-stall-watch).
            control_repeat=env_int(
                "RACEGATE_CONTROL_REPEAT", None, minimum=1, what="the control's runs per case"
            ),
        )


def run_gpu_cell(session: nox.Session, workers: int, knobs: CellKnobs) -> None:
    """Throughput cases first, alone on the machine; then the rest, `workers` cases at a time
    on every GPU (pytest-xdist, --racegate-share-gpus: outcomes stay valid, timings would not). On
    2xH200 the both-GPU race selection of one cell took 6.5-7.3 min at 16 workers (four cells,
    results/h200x2-warmup-locked-production and h200x2-transformers-matrix), against hours one
    case at a time."""
    case_jobs, control_repeat = knobs.case_jobs, knobs.control_repeat
    marker, rest = split_marker(session.posargs)  # a user's -m narrows both halves
    both = f"({marker}) and " if marker else ""
    out = results_dir(session)
    # Exit 1 (cases failed) or 5 (none selected) must not stop the race part from running.
    # pytest itself decides whether the user's -m leaves any throughput case (exit 5 when not):
    # its -m grammar is private API, and nox's interpreter need not have pytest. An -m that
    # excludes them (not the nightly's) costs one pytest start, ~10 s of a cell on CPU.
    tp_junit = "junit-throughput.xml"
    (out / tp_junit).unlink(missing_ok=True)  # a rerun's verdict must not be an old file's
    run_suite(
        session, "racegate/cases", "-m", f"{both}throughput", junit=tp_junit, ok_codes=(0, 1, 5),
        posargs=rest,
    )  # fmt: skip
    # The race cases in one pytest: the production strategy's case runs beside the rest, one run at
    # a time until the control's runs in its cell have landed, then as many as the control's rate
    # asks for (racegate/cases/test_race.py). A second wave after the rest left the host idle: on
    # one H200 it began ~283 s into the cell, and for the ~130 s before, 0-5 race runs were in
    # flight on 16 cores (results/h200-cell-control-detection). In one pytest the cell took 328 s
    # through nox (results/h200-cell-one-pytest). The race session judges the records it writes
    # itself (not the throughput part's).
    race_junit = out / "junit-race.xml"
    race_junit.unlink(missing_ok=True)
    run_suite(
        session, "racegate/cases", "-m", f"{both}not throughput", "-n", str(workers),
        "--racegate-share-gpus", f"--racegate-case-jobs={case_jobs}",
        *([f"--racegate-control-repeat={control_repeat}"] if control_repeat is not None else []),
        junit=race_junit.name, posargs=rest, ok_codes=(0, 1, 5, UNDECIDED_EXIT),
    )  # fmt: skip
    if (failed := junit_failures(race_junit)) is None:
        session.error(f"the race run wrote no readable {race_junit}: it died (a hang?)")
    elif failed:
        session.error(f"{failed} race case(s) failed: see {race_junit}")
    failed = junit_failures(out / tp_junit)
    if failed is None:
        session.error(f"the throughput run wrote no readable {out / tp_junit}: it died (a hang?)")
    if failed:
        session.error(f"{failed} throughput case(s) failed: see {out / tp_junit}")


def cell_params(name: str, values: Sequence[str], tag_prefix: str | None = None) -> list[nox.param]:
    """Cells named `name='<v>'`, tagged `<tag_prefix>_<v with _ for .>` (the prefix is `name`
    unless given): a version is no Python identifier, so `nox -k "torch_system and
    transformers_5_8_1"` picks a cell by its tags."""
    prefix = name if tag_prefix is None else tag_prefix
    return [nox.param(v, id=f"{name}={v!r}", tags=[matrix_plan.tag(prefix, v)]) for v in values]


# The session's torch: how many GPUs it sees, and the smallest one's memory in bytes.
GPU_PROBE = (
    "import torch; n = torch.cuda.device_count(); "
    "print(n, min((torch.cuda.get_device_properties(i).total_memory for i in range(n)), default=0))"
)


def gpu_absent() -> str | None:
    """Why this host cannot run a gpu_matrix cell (no nvidia-smi), or None."""
    return "nvidia-smi not found" if shutil.which("nvidia-smi") is None else None


def stop_without_gpu(why: str) -> NoReturn:
    """The whole nox run stops, exit 2 and one line: a matrix of skipped cells passed (exit 0)
    and left a venv per cell. SystemExit, not session.error: nox would go on to the next cell."""
    print(
        f"racegate: error: nox -s gpu_matrix needs an NVIDIA GPU and this host has none ({why}); "
        "run cpu_matrix or race instead",
        file=sys.stderr,
    )
    raise SystemExit(2)


# ---- A/B: a candidate cell against the reference versions, on one GPU, runs interleaved ----
# The reference is the versions the production trainer pins: the runner image's torch (2.11 on
# the GPU image) and transformers 5.6.0, where the incident's team went back to ("is 5.8 slower
# than what I run now, on my hardware?"). RACEGATE_AB_REFERENCE="<torch>,<transformers>" (torch
# 'system' or a release) names another set.
AB_REFERENCE = (SYSTEM, MATRIX.incident_transformers[0])
AB_RUNS = 5  # runs per side unless RACEGATE_AB_RUNS says otherwise (racegate.harness.ab's default)
# `harness run` options unless posargs give others: the built-in drafter's `small` on GPU 0, one
# timed run per process (racegate.harness.ab.defaults).
AB_RUN_ARGS = ("--preset", "small", "--devices", "0", *ONE_TIMED_RUN)


def ab_reference(text: str | None) -> tuple[str, str]:
    """(torch, transformers) from RACEGATE_AB_REFERENCE (unset or empty: AB_REFERENCE);
    ValueError names the value and the form it must take."""
    if not text or not text.strip():
        return AB_REFERENCE
    parts = [p.strip() for p in text.split(",")]
    if len(parts) != 2 or not all(re.fullmatch(r"[0-9A-Za-z.+_-]+", p) for p in parts):
        raise ValueError(
            f"RACEGATE_AB_REFERENCE={text!r}: expected '<torch>,<transformers>', e.g. "
            f"'{SYSTEM},{AB_REFERENCE[1]}' (torch '{SYSTEM}' is the runner image's own)"
        )
    return parts[0], parts[1]


class _VenvSession:
    """The session pointed at another venv, so install_cell builds that venv as it builds the
    session's own: its installs go through that venv's pip, its `python` is that venv's."""

    venv_backend = "virtualenv"

    def __init__(self, session: nox.Session, venv: Path) -> None:
        self._session, self.python = session, str(venv / "bin" / "python")

    def install(self, *args: str) -> None:
        self._session.run(self.python, "-m", "pip", "install", *args, external=True)

    def run(self, *args: str, **kwargs: object) -> str | None:
        if args[:1] == ("python",):
            args = (self.python, *args[1:])
        return self._session.run(*args, external=True, **kwargs)

    def __getattr__(self, name: str) -> object:  # log, skip, error, posargs: the session's own
        return getattr(self._session, name)


def reference_venv(session: nox.Session, torch: str, transformers: str) -> str:
    """The reference versions' venv, next to the session's (made once, kept like any reused
    venv); returns its python."""
    envdir = Path(session.bin).parent.parent
    slug = re.sub(r"[^A-Za-z0-9._-]+", "-", f"gpu_ab-reference-{torch}-{transformers}")
    venv = envdir / slug
    if not (venv / "bin" / "python").exists():
        # Made as nox makes the cells' venvs (virtualenv, the image's packages visible).
        session.run(
            sys.executable, "-m", "virtualenv", "--system-site-packages", str(venv),
            external=True, silent=True,
        )  # fmt: skip
    ref = _VenvSession(session, venv)
    install_cell(ref, torch, transformers)  # type: ignore[arg-type]
    return ref.python


def ab_params(name: str, values: Sequence[str]) -> list[nox.param]:
    """cell_params for gpu_ab, tagged `ab_<v with _ for .>` (`nox -k "ab_system and ab_5_8_1"`):
    nox's -k matches any substring of a tag, so a gpu_matrix keyword such as torch_system must
    not be part of these tags, or it would run the A/B cells too."""
    return cell_params(name, values, tag_prefix="ab")


# On Ctrl-C nox passes SIGINT on and sends SIGTERM 0.3 s later (its default): too soon for
# racegate.harness.ab to stop the run in flight, compare the runs it made and write ab.json.
AB_INTERRUPT_S = 60.0
# racegate.harness.ab compare's exits whose reason ab_call reads from ab.json: passed, failed, and
# interrupted before its call: racegate.harness.judge.gate's EXIT_SAFE, EXIT_UNSAFE and
# EXIT_INTERRUPTED, written out since nox's side imports no racegate.harness.judge
# (tests/test_noxfile.py ties them).
AB_READ_EXITS = [0, 1, 130]


def ab_call(session: nox.Session, result: Path) -> None:
    """Fail the cell on a failed run, a slower candidate, or more memory; ab.json says which."""
    try:
        data = json.loads(result.read_text())
    except (OSError, ValueError) as exc:
        session.error(f"racegate.harness.ab wrote no readable {result}: {exc}")
    if data.get("interrupted"):  # no decision either way, as racegate.harness.ab and upgrade say
        session.error(f"A/B interrupted before its call (no decision): {data.get('failure')}")
    if data.get("failure"):
        session.error(f"A/B failed (no call from partial evidence): {data['failure']}")
    for metric in ("throughput", "memory"):
        comp = data.get(metric)
        if metric == "throughput" and not comp:
            session.error(f"{result} holds no throughput comparison")
        if comp and comp["change"] == ("lower" if metric == "throughput" else "higher"):
            word = "slower" if metric == "throughput" else "uses more memory"
            session.error(
                f"candidate {word}: {comp['ratio']:.3f}x [{comp['low']:.3f}, {comp['high']:.3f}] "
                f"of the reference ({result})"
            )
    for device in data.get("device_memory") or []:  # racegate.harness.ab.stats.DeviceMemory.to_json
        if device.get("regressed"):
            session.error(f"candidate: more memory or growth on {device['device']} ({result})")
    session.log(f"A/B: no regression ({result})")
