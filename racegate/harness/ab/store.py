"""The A/B's files: ab.json read back with its calls made again, where such files lie, run pools.

`compare --out` writes an ABResult's JSON (ab.json, SCHEMA_VERSION); the report reads it back
here, remaking every call from the stored runs, and finds the folders of a comparison cut
before its ab.json. `compare --records` keeps each side's runs as a pool of records, which
`power` reads back as samples.
"""

from __future__ import annotations

import json
import math
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from racegate.harness.ab.result import SCHEMA_VERSION, ABResult
from racegate.harness.ab.stats import SIDES, RunSample, compare_samples, gpu_mismatch, sample_of
from racegate.harness.run import checked
from racegate.harness.run.files import PUBLISHED, write_whole
from racegate.harness.run.record import read_jsonl

AB_FILE_NAMES = ("ab.json", "ab-*.json")  # gpu_ab's and benchmarks/ab_power_gpu.sh's
AB_RECORDS = "ab-records"  # where gpu_ab (noxfile) keeps the runs of its ab.json
AB_POOLS = ("reference.jsonl", "candidate.jsonl")  # compare --records: the runs of each side


def write_ab(path: Path, result: ABResult) -> None:
    """`result` as ab.json, in the form read_ab reads back; its folder is made where missing."""
    path.parent.mkdir(parents=True, exist_ok=True)
    write_whole(path, json.dumps(result.to_json(), indent=2, sort_keys=True) + "\n", mode=PUBLISHED)


def is_ab_file(path: Path) -> bool:
    return any(path.match(name) for name in AB_FILE_NAMES)


def ab_files(paths: Sequence[Path]) -> list[Path]:
    """The A/B results among `paths`: files named as `compare --out` writes them, and every
    such file under the folders given, each once, in order."""
    files: dict[Path, None] = {}
    for path in map(Path, paths):
        if path.is_dir():
            found = {p for name in AB_FILE_NAMES for p in path.rglob(name) if p.is_file()}
            files.update(dict.fromkeys(sorted(found)))
        elif path.is_file() and is_ab_file(path):
            files[path] = None
    return list(files)


def cut_ab_dirs(paths: Sequence[Path]) -> list[Path]:
    """gpu_ab's `ab-records/` folders under `paths` with no ab.json beside them."""
    found = {p for path in map(Path, paths) if path.is_dir() for p in path.rglob(AB_RECORDS)}
    return sorted(p for p in found if p.is_dir() and not (p.parent / "ab.json").is_file())


def _sample_from(data: object, where: str) -> RunSample:
    row = checked.table(data, where)
    mem, side, gpus = row.get("peak_mem_bytes"), row.get("side"), row.get("gpus", [])
    if not isinstance(gpus, list):
        raise checked.GateInputError(f"{where}.gpus is {gpus!r:.60}; expected a list of UUIDs")
    if side not in SIDES:
        raise checked.GateInputError(f"{where}.side is {side!r}; choose from: {', '.join(SIDES)}")
    return RunSample(
        side=str(side),
        index=checked.integer(row.get("index"), f"{where}.index"),
        tokens_per_s=checked.positive_number(row.get("tokens_per_s"), f"{where}.tokens_per_s"),
        peak_mem_bytes=None if mem is None else checked.integer(mem, f"{where}.peak_mem_bytes"),
        versions=checked.table(row.get("versions", {}), f"{where}.versions"),
        wall_s=checked.positive_number(row.get("wall_s"), f"{where}.wall_s"),
        gpus=tuple(checked.text(g, f"{where}.gpus[{i}]") for i, g in enumerate(gpus)),
        peak_by_device={d: checked.integer(v, f"{where}.peak_by_device.{d}") for d, v in
                        checked.table(row.get("peak_by_device", {}), f"{where}.peak_by_device")
                        .items()},
        growth_by_device={d: _finite(v, f"{where}.growth_by_device.{d}") for d, v in
                          checked.table(row.get("growth_by_device", {}),
                                       f"{where}.growth_by_device").items()},
    )  # fmt: skip


def _finite(value: object, where: str) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value):
        raise checked.GateInputError(f"{where} is {value!r:.60}; expected a finite number")
    return float(value)


def _sides_from(data: object, where: str) -> dict[str, dict[str, Any]]:
    sides = checked.table(data, where)
    if set(sides) != set(SIDES):
        raise checked.GateInputError(
            f"{where} has {sorted(sides)}; expected exactly: {', '.join(SIDES)}"
        )
    out = {}
    for name in SIDES:
        side = checked.table(sides[name], f"{where}.{name}")
        out[name] = {
            "python": checked.text(side.get("python"), f"{where}.{name}.python"),
            "env": checked.table(side.get("env", {}), f"{where}.{name}.env"),
            "versions": checked.table(side.get("versions", {}), f"{where}.{name}.versions"),
        }
    return out


def _stored_change(data: dict[str, Any], name: str, path: Path) -> str | None:
    kept = data.get(name)
    if kept is None:
        return None
    return str(checked.table(kept, f"{path}: {name}").get("change"))


def read_ab(path: Path) -> ABResult:
    """An A/B result as `compare --out` wrote it, with its calls made again from its samples.

    The stored ratio, interval and call are not trusted: compare_samples, the one place a
    call is made, recomputes them from the runs at the stored tolerance and confidence, and a
    stored call that disagrees (or one stored where the runs give none, or none where they
    give one) fails closed: GateInputError, one line naming the file and field (the report's
    and the CLI's usage error, exit 2)."""
    try:
        data = json.loads(Path(path).read_text())
    except (OSError, UnicodeDecodeError, ValueError) as exc:
        raise checked.GateInputError(f"{path}: not an A/B result: {exc}") from None
    data = checked.table(data, str(path))
    if data.get("schema_version") != SCHEMA_VERSION:
        raise checked.GateInputError(
            f"{path}: schema_version is {data.get('schema_version')!r}; this racegate reads "
            f"A/B results of version {SCHEMA_VERSION}"
        )
    raw, run_args = data.get("samples"), data.get("run_args")
    if not isinstance(raw, list):
        raise checked.GateInputError(f"{path}: samples is {raw!r:.60}; expected a list of runs")
    if not isinstance(run_args, list):
        raise checked.GateInputError(f"{path}: run_args is {run_args!r:.60}; expected a list")
    failure, note = data.get("failure"), data.get("memory_note")
    result = ABResult(
        run_args=[checked.text(a, f"{path}: run_args[{i}]", empty=True)
                  for i, a in enumerate(run_args)],
        sides=_sides_from(data.get("sides"), f"{path}: sides"),
        samples=[_sample_from(row, f"{path}: samples[{i}]") for i, row in enumerate(raw)],
        memory_note=None if note is None else checked.text(note, f"{path}: memory_note"),
        failure=None if failure is None else checked.text(failure, f"{path}: failure"),
        # an ab.json from before it was kept has none: it read as a failed comparison then
        interrupted=checked.boolean(data.get("interrupted", False), f"{path}: interrupted"),
    )  # fmt: skip
    if result.interrupted and result.failure is None:
        raise checked.GateInputError(
            f"{path}: interrupted is true but no failure says after how many runs"
        )
    # Runs on different GPUs make no A/B, whatever call the file stores (fail closed).
    result.failure = result.failure or gpu_mismatch(result.samples)
    stored = data.get("throughput")
    if stored is None:  # a run failed, or an interrupt left a side under two runs
        if result.failure is None:
            raise checked.GateInputError(f"{path}: throughput is null and no failure says why")
        if data.get("memory") is not None:
            raise checked.GateInputError(f"{path}: memory is compared but throughput is not")
        return result
    stored = checked.table(stored, f"{path}: throughput")
    tol, conf = stored.get("tolerance"), stored.get("confidence")
    for name, value in (("tolerance", tol), ("confidence", conf)):
        if not isinstance(value, float) or not math.isfinite(value):
            raise checked.GateInputError(
                f"{path}: throughput.{name} is {value!r}; expected a fraction"
            )
    try:
        made = compare_samples(result.samples, tol, conf)  # type: ignore[arg-type]
    except ValueError as exc:
        raise checked.GateInputError(f"{path}: samples: {exc}") from None
    result.throughput, result.memory, made_note = made
    result.memory_note = result.memory_note or made_note
    for name, comparison in (("throughput", result.throughput), ("memory", result.memory)):
        kept = _stored_change(data, name, path)
        given = None if comparison is None else str(comparison.change)
        if kept != given:
            raise checked.GateInputError(
                f"{path}: {name}.change is {kept!r}, but its samples give {given!r}"
            )
    stored_devices = data.get("device_memory")
    if stored_devices is not None:  # an ab.json from before it was kept has none
        if not isinstance(stored_devices, list):
            raise checked.GateInputError(f"{path}: device_memory is {stored_devices!r:.60}")
        kept_calls = {
            str(checked.table(d, f"{path}: device_memory[{i}]").get("device")): d.get("regressed")
            for i, d in enumerate(stored_devices)
        }
        given_calls = {d.device: d.regressed for d in result.device_memory}
        if kept_calls != given_calls:
            raise checked.GateInputError(
                f"{path}: device_memory calls are {kept_calls}, but its samples give {given_calls}"
            )
    return result


def cut_ab() -> ABResult:
    """An A/B whose `ab-records/` exist but whose ab.json does not: it was cut before it wrote
    its result (killed, or a traceback). Fail closed: a failed comparison, not race runs."""
    unknown = {"python": "?", "env": {}, "versions": {}}
    return ABResult(
        run_args=[],
        sides={s: dict(unknown) for s in SIDES},
        failure="runs in ab-records/ but no ab.json beside them: the comparison was cut before "
        "it wrote its result",
    )


def pooled_samples(path: Path, side: str) -> list[RunSample]:
    """Every record of a pool file as a sample (in file order); ValueError names a bad one."""
    out = []
    for n, record in enumerate(read_jsonl(path)):
        try:
            out.append(sample_of(record, side, n))
        except ValueError as exc:
            raise ValueError(f"{path} record {n + 1}: {exc}") from None
    return out
