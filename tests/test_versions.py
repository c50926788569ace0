"""racegate/harness/scenario/versions.py: one reader, one marker for what is missing."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from importlib import metadata

import pytest

from racegate.harness.scenario import versions


def test_missing_package_reads_absent(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(versions.DISTRIBUTIONS, "triton", ("racegate-no-such-dist",))
    monkeypatch.delitem(sys.modules, "triton", raising=False)
    assert versions.software()["triton"] == versions.ABSENT


def test_a_loaded_module_reports_what_ran() -> None:
    import torch

    found = versions.software()
    assert found["torch"] == torch.__version__  # with its build tag
    assert found["transformers"] == metadata.version("transformers")
    expected_cuda = str(torch.version.cuda) if torch.version.cuda else versions.ABSENT
    assert found["cuda"] == expected_cuda


def test_hardware_names_cpu_without_gpus() -> None:
    import torch

    info = versions.hardware(("cpu",))
    assert info["cpu_count"] >= 1
    assert info["cuda_device_count"] == torch.cuda.device_count()
    if not torch.cuda.is_available():
        assert info["device_name"] == "cpu"
        assert "device_uuids" not in info


@pytest.mark.process  # runs nvidia-smi where there is a GPU
def test_hardware_names_each_gpu_by_its_uuid() -> None:
    """The UUID nvidia-smi -L prints, one per GPU asked for: racegate.harness.ab's same-GPU
    check."""
    import torch

    if not torch.cuda.is_available():
        pytest.skip("needs a CUDA GPU: the UUID is the driver's")
    smi = subprocess.run(["nvidia-smi", "-L"], capture_output=True, text=True, check=True)
    info = versions.hardware(("cuda:0",))
    (uuid,) = info["device_uuids"]
    assert re.fullmatch(r"GPU-[0-9a-f]{8}(-[0-9a-f]{4}){3}-[0-9a-f]{12}", uuid), uuid
    assert uuid in smi.stdout


@pytest.mark.process
def test_module_prints_json_for_the_nox_cell_check() -> None:
    out = subprocess.run(
        [sys.executable, "-m", "racegate.harness.scenario.versions", "--import-torch"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    found = json.loads(out)
    assert set(found) == {"python", "torch", "transformers", "triton", "cuda"}
    assert found["torch"] != versions.ABSENT
