"""racegate's sessions: the harness's tests, the race suite, the torch × transformers matrices
and the report. `nox -l` lists them; `nox -s gpu_matrix` is the nightly job. What the sessions
do lives in nox_support/py/
"""

from __future__ import annotations

import logging
import os
import shutil
import sys
from pathlib import Path

import nox

# nox loads this file by path: the checkout's harness package is importable from here on.
sys.path.insert(0, str(Path(__file__).resolve().parent))
import nox_support as support

MATRIX = support.MATRIX  # the versions, from racegate/harness/expectations/versions.toml

nox.needs_version = ">=2024.10.9"
# virtualenv, named: "uv|virtualenv" would try uv first. nox (2026.10) still probes for uv
# whenever it makes a venv, whatever the backend, and logs "uv binary not found." on every
# machine without uv; nox has no option to stop the probe, so that one line is filtered out.
nox.options.default_venv_backend = "virtualenv"


class _NoUvProbeLine(logging.Filter):
    def filter(self, record: logging.LogRecord) -> bool:
        return record.getMessage() != "uv binary not found."


logging.getLogger("nox").addFilter(_NoUvProbeLine())
nox.options.sessions = ["tests"]
nox.options.reuse_venv = "yes"  # matrix cells re-run fast; every install below is pinned anyway


@nox.session(**support.SYSTEM_SITE)
def tests(session: nox.Session) -> None:
    """The harness's own unit tests (pytest tests), reusing an installed torch if any."""
    support.install(session, *support.requirements())
    # Tests racegate itself: pytest's own exit status, never the race gate's decision.
    session.run("python", "-m", "pytest", "tests", "--no-racegate-gate", *session.posargs)


@nox.session(venv_backend="none")
def race(session: nox.Session) -> None:
    """The race suite (pytest -k race) on the current environment, before an upgrade: a gate,
    so only SAFE (0) passes it."""
    support.fresh_records(session)
    support.run_suite(session, "-k", "race")


# Read when the noxfile loads: on a host without a GPU the cells make no venv (backend none), so
# the first cell's first line stops nox before anything is made or installed.
GPU_CELL_VENV = {"venv_backend": "none"} if support.gpu_absent() else support.SYSTEM_SITE


@nox.session(**GPU_CELL_VENV, tags=[f"gpus_{support.CELL_GPUS}"])
@nox.parametrize("transformers", support.cell_params("transformers", MATRIX.gpu_transformers))
@nox.parametrize("torch", support.cell_params("torch", MATRIX.gpu_torch))
def gpu_matrix(session: nox.Session, torch: str, transformers: str) -> None:
    """One torch × transformers cell of the GPU suite (race, cache-state, throughput cases)."""
    knobs = support.CellKnobs.from_env()  # a bad value: exit 2 before a skip or an install
    if (why := support.gpu_absent()) is not None:
        support.stop_without_gpu(why)
    support.install_cell(session, torch, transformers)
    support.fresh_records(session)
    probe = session.run("python", "-c", support.GPU_PROBE, silent=True)
    gpus, gpu_bytes = map(int, probe.split()[-2:]) if probe else (0, 0)
    if probe is not None and gpus == 0:  # a failed cell, not a skipped one: it tested nothing
        session.error(f"torch {torch} in this session sees no GPU (driver or CUDA build mismatch)")
    if (workers := support.race_workers(session, gpus, gpu_bytes, knobs)) == 1:
        # One case at a time, no pytest-xdist: every timing counts.
        support.run_suite(session, "racegate/cases", ok_codes=support.CELL_OK_CODES)
    else:
        support.run_gpu_cell(session, workers, knobs)


@nox.session
@nox.parametrize("transformers", support.cell_params("transformers", MATRIX.cpu_transformers))
@nox.parametrize("torch", support.cell_params("torch", MATRIX.cpu_torch))
def cpu_matrix(session: nox.Session, torch: str, transformers: str) -> None:
    """One torch × transformers cell of the probes and CPU race cases (no GPU needed)."""
    support.install_cpu_cell(session, torch, transformers)
    support.fresh_records(session)
    support.run_suite(
        session,
        "racegate/cases",
        "-k",
        "race",
        "--racegate-devices",
        "cpu",
        ok_codes=support.CELL_OK_CODES,
    )


@nox.session(**support.SYSTEM_SITE)
def report(session: nox.Session) -> None:
    """Merge the results into matrix.md/.html, throughput.png and gate.json (python -m racegate)."""
    args = session.posargs or [
        str(support.RESULTS_DIR),
        "--out-dir",
        str(support.RESULTS_DIR / "report"),
    ]
    if not session.posargs and not support.RESULTS_DIR.is_dir():
        session.skip(
            f"no results in {support.RESULTS_DIR}; run a matrix first or pass paths after --"
        )
    # The report path imports no torch (tests/test_noxfile.py checks): a torch install here
    # would cost minutes and gigabytes for nothing.
    reporting = ("matplotlib", "rich")
    support.install(
        session, *(r for r in support.requirements() if support.requirement_name(r) in reporting)
    )
    session.run("python", "-m", "racegate", "report", *args)


@nox.session(**support.SYSTEM_SITE)
@nox.parametrize("transformers", support.ab_params("transformers", MATRIX.gpu_transformers))
@nox.parametrize("torch", support.ab_params("torch", MATRIX.gpu_torch))
def gpu_ab(session: nox.Session, torch: str, transformers: str) -> None:
    """A candidate cell against the reference versions, interleaved on one GPU
    (racegate.harness.ab)."""
    if shutil.which("nvidia-smi") is None:
        session.skip(
            "no NVIDIA GPU here (nvidia-smi not found); python -m racegate.harness.ab runs on CPU"
        )
    if session.venv_backend == "none":
        session.error("gpu_ab builds a reference venv beside the cell's: run it without --no-venv")
    try:
        reference = support.ab_reference(os.environ.get("RACEGATE_AB_REFERENCE"))
    except ValueError as exc:
        session.error(str(exc))
    runs = support.env_int("RACEGATE_AB_RUNS", support.AB_RUNS, minimum=2, what="runs per side")
    support.install_cell(session, torch, transformers)
    ref_python = support.reference_venv(session, *reference)
    out = support.results_dir(session)
    result = out / "ab.json"
    result.unlink(missing_ok=True)  # the call below is read from this run's file, never an old one
    session.run(
        "python", "-m", "racegate.harness.ab", "compare", "--reference", ref_python,
        "--candidate", str(Path(session.bin) / "python"), "--runs", str(runs),
        "--records", str(out / "ab-records"), "--out", str(result),
        "--", *(session.posargs or support.AB_RUN_ARGS), success_codes=support.AB_READ_EXITS,
        interrupt_timeout=support.AB_INTERRUPT_S,
    )  # fmt: skip
    support.ab_call(session, result)
