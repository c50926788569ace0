"""The torch × transformers matrix nox runs, read from racegate/harness/expectations/versions.toml:
the versions each matrix crosses, each cell's pins, and the cells' names and tags, derived from that
one file.

Standard library only: nox's own interpreter imports it (through nox_support.py), and so
do scripts and tests that need the number of cells.
"""

from __future__ import annotations

import re
import tomllib
from dataclasses import dataclass
from pathlib import Path

VERSIONS_FILE = Path(__file__).resolve().parents[1] / "expectations" / "versions.toml"
SYSTEM = "system"  # the runner image's own torch, reused through --system-site-packages
_VERSION = re.compile(r"[0-9]+(\.[0-9]+)+")


@dataclass(frozen=True)
class Matrix:
    """racegate/harness/expectations/versions.toml, checked: each list the matrices cross, in its
    order."""

    torch_releases: tuple[str, ...]
    incident_transformers: tuple[str, ...]
    image_transformers: str
    latest_transformers: str
    incident_tokenizers: str

    @property
    def gpu_torch(self) -> tuple[str, ...]:
        return (SYSTEM, *self.torch_releases)

    @property
    def gpu_transformers(self) -> tuple[str, ...]:
        return (*self.incident_transformers, self.image_transformers, self.latest_transformers)

    @property
    def cpu_torch(self) -> tuple[str, ...]:
        return self.torch_releases

    @property
    def cpu_transformers(self) -> tuple[str, ...]:
        return (*self.incident_transformers, self.latest_transformers)

    @property
    def gpu_cells(self) -> int:
        """gpu_matrix's cells (and gpu_ab's): every GPU torch × every GPU transformers."""
        return len(self.gpu_torch) * len(self.gpu_transformers)

    @property
    def cpu_cells(self) -> int:
        return len(self.cpu_torch) * len(self.cpu_transformers)

    def cell_pins(self, transformers: str) -> list[str]:
        """transformers==<v>, plus the old tokenizers that the incident's transformers need."""
        pins = [f"transformers=={transformers}"]
        if transformers in self.incident_transformers:
            pins.append(self.incident_tokenizers)
        return pins


def tag(prefix: str, version: str) -> str:
    """`<prefix>_<version with _ for every other character>`: a version is no Python
    identifier, so `nox -k "torch_system and transformers_5_8_1"` picks a cell by its tags."""
    return f"{prefix}_{re.sub(r'[^0-9A-Za-z]', '_', version)}"


def _versions(table: dict[str, object], key: str, where: str) -> tuple[str, ...]:
    """table[key], a non-empty list of distinct release numbers."""
    value = table.get(key)
    ok = isinstance(value, list) and value and all(_is_release(v) for v in value)
    if not ok:
        raise ValueError(f"{where}: {key} = {value!r}: expected a list of releases such as '1.2.3'")
    if len(set(value)) != len(value):  # type: ignore[arg-type]
        raise ValueError(f"{where}: {key} = {value!r}: a version is listed twice")
    return tuple(value)  # type: ignore[arg-type]


def _version(table: dict[str, object], key: str, where: str) -> str:
    """table[key], one release number."""
    value = table.get(key)
    if not _is_release(value):
        raise ValueError(f"{where}: {key} = {value!r}: expected one release such as '1.2.3'")
    return value  # type: ignore[return-value]


def _is_release(value: object) -> bool:
    return isinstance(value, str) and _VERSION.fullmatch(value) is not None


def load(path: Path = VERSIONS_FILE) -> Matrix:
    """The matrix in `path`; ValueError names the file, the key and the value it cannot use."""
    try:
        with path.open("rb") as f:
            data = tomllib.load(f)
    except tomllib.TOMLDecodeError as exc:
        raise ValueError(f"{path}: not TOML: {exc}") from None
    torch, tf = data.get("torch", {}), data.get("transformers", {})
    for name, table in (("torch", torch), ("transformers", tf)):
        if not isinstance(table, dict):
            raise ValueError(f"{path}: {name} = {table!r}: expected a table [{name}]")
    image = _version(tf, "image", f"{path} [transformers]")
    latest = _version(tf, "latest", f"{path} [transformers]")
    tokenizers = tf.get("incident_tokenizers")
    if not isinstance(tokenizers, str) or not tokenizers.startswith("tokenizers"):
        raise ValueError(
            f"{path} [transformers]: incident_tokenizers = {tokenizers!r}: expected a pip "
            "requirement on tokenizers, e.g. 'tokenizers>=0.22,<=0.23.0'"
        )
    matrix = Matrix(
        torch_releases=_versions(torch, "releases", f"{path} [torch]"),
        incident_transformers=_versions(tf, "incident", f"{path} [transformers]"),
        image_transformers=image,
        latest_transformers=latest,
        incident_tokenizers=tokenizers,
    )
    for name, values in (("gpu", matrix.gpu_transformers), ("cpu", matrix.cpu_transformers)):
        if len(set(values)) != len(values):
            raise ValueError(f"{path} [transformers]: the {name} list {values} repeats a version")
    return matrix
