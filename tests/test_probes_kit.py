"""The probes' bounded waits and the in-process runner's verdict mapping (imports torch)."""

from __future__ import annotations

import threading

import pytest

pytest.importorskip("torch")

from racegate.harness.probes import cases as probe_cases
from racegate.harness.probes import kit as probe_kit
from racegate.harness.probes import runner as probes
from racegate.harness.probes.kit import Deadline, Hold, ProbeHang, Worker, in_thread


def test_hold_that_nobody_reaches_is_a_hang_not_a_block() -> None:
    hold = Hold(Deadline(0.05), "nowhere")
    with pytest.raises(ProbeHang, match="no thread reached the hold point nowhere"):
        hold.wait_arrived()


def test_parked_thread_that_is_never_released_gives_up() -> None:
    hold = Hold(Deadline(0.05), "here")
    w = in_thread(hold.park, "parker", Deadline(5.0), "park")
    assert isinstance(w.error, ProbeHang) and "never released" in str(w.error)


def test_worker_that_does_not_finish_is_reported_and_left_behind() -> None:
    stop = threading.Event()
    w = Worker(lambda: stop.wait(10), "stuck")
    w.start()
    with pytest.raises(ProbeHang, match=r"thread stuck \(waiting\) still running"):
        w.finish(Deadline(0.05), "waiting")
    assert w.daemon  # cannot keep the process alive
    stop.set()


def test_in_thread_keeps_value_and_error() -> None:
    assert in_thread(lambda: 41 + 1, "v", Deadline(5), "add").value == 42
    err = in_thread(lambda: 1 / 0, "e", Deadline(5), "divide").error
    assert isinstance(err, ZeroDivisionError)


@pytest.mark.process
def test_run_probes_maps_outcomes_to_verdicts(monkeypatch: pytest.MonkeyPatch) -> None:
    def na(d: Deadline) -> tuple[bool, str]:
        raise probe_kit.NotAvailable("no such API")

    def hang(d: Deadline) -> tuple[bool, str]:
        raise ProbeHang("stuck")

    def broken(d: Deadline) -> tuple[bool, str]:
        raise RuntimeError("setup failed\nmore")

    names = ["compiled_call_during_make_fx", "is_compiling_leak", "module_call_patch_leak",
             "flag_stuck_after_overlap", "config_override_thread_scope"]  # fmt: skip
    for name, fn in zip(names, [lambda d: (True, "hit"), lambda d: (False, "ok"), na, broken,
                                hang], strict=True):  # fmt: skip
        monkeypatch.setattr(probe_cases, name, fn)
    run = probes.run_probes(names, timeout_s=1.0)
    assert [r.verdict for r in run] == ["hazard", "safe", "n/a", "error", "hang"]
    assert run[3].detail == "RuntimeError: setup failed"
    assert all(r.torch_version == run.environment["torch"] for r in run)
    stopped = probes.run_probes(names[::-1], timeout_s=1.0, stop_on_hang=True)
    assert [r.verdict for r in stopped] == ["hang"]
