"""Reading run records for the gate: files, records checked field by field, their roles.

A bad record is a GateInputError (racegate.harness.run.checked): one line, exit 2. Every reader of
records (the report, `run --records-from`, pytest's --records-from, `baseline --update`,
`expectations`) reads them here: `read_runs`, each record checked field by field by
RunRecord.from_json and each run counted once (a file named twice, a copy, a line repeated:
racegate.harness.run.record.unique_runs), and the roles they ran under (`roles_of`), which every
decision over them judges by.
"""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path

from racegate.harness.run import record as run_records
from racegate.harness.run.checked import GateInputError
from racegate.harness.scenario.workload_api import BUILTIN_ROLES


def record_files(paths: Iterable[Path]) -> list[Path]:
    """The JSON Lines files given, and every `*.jsonl` under the folders given, each once (one
    file under two names, `a.jsonl` and `./a.jsonl` or a hard link, is one file)."""
    files: dict[tuple[int, int], Path] = {}
    for path in map(Path, paths):
        if path.is_dir():
            found = sorted(p for p in path.rglob("*.jsonl") if p.is_file())
        elif path.is_file():
            found = [path]
        else:
            raise FileNotFoundError(f"no such records file or folder: {path}")
        for f in found:
            st = f.stat()
            files.setdefault((st.st_dev, st.st_ino), f)
    return list(files.values())


def read_record_file(path: Path) -> list[run_records.RunRecord]:
    """Every record in one JSON Lines file, each checked; a malformed record, a torn line or a
    file that is not JSON Lines is a GateInputError naming `file:line` and what is wrong."""
    return run_records.read_jsonl(path)


def dropped_note(dropped: int) -> str:
    """The line a reader prints for the duplicates it left out ('' for none)."""
    if not dropped:
        return ""
    s = "s" * (dropped != 1)
    return (
        f"dropped {dropped} duplicate record{s} (a run given again: the same file, a copy or "
        "a repeated line); each run counts once"
    )


def read_runs(
    paths: Iterable[Path], seen: Iterable[run_records.RunRecord] = ()
) -> tuple[list[run_records.RunRecord], int]:
    """Records from JSON Lines files, or from every `*.jsonl` under the folders given, each
    checked (read_record_file) and each run once (those in `seen` left out); and how many
    duplicates were dropped."""
    records = [r for f in record_files(paths) for r in read_record_file(f)]
    return run_records.unique_runs(records, seen)


def read_records(paths: Iterable[Path]) -> list[run_records.RunRecord]:
    """Records from JSON Lines files, or from every `*.jsonl` under the folders given, each
    checked and each run once (read_runs); none at all is an error too."""
    paths = list(paths)
    records, _ = read_runs(paths)
    if not records:
        raise GateInputError(
            f"no run records in {', '.join(map(str, paths))}; "
            "give JSON Lines files (pytest --racegate-results / racegate run --out) or folders "
            "of them"
        )
    return records


def check_records_from(paths: Iterable[Path]) -> None:
    """--records-from: every path given exists (checked at start, before any run); a ValueError
    names the first that does not."""
    for path in paths:
        if not Path(path).exists():
            raise ValueError(f"--records-from {path}: no such file or folder")


def records_from(
    paths: Iterable[Path], own: Iterable[run_records.RunRecord] = ()
) -> tuple[list[run_records.RunRecord], list[str]]:
    """--records-from: the records of each path (a JSON Lines file or a folder of them), each
    checked, each run once and none of this invocation's `own` again (`--results X
    --records-from X`); one line per path saying how many it merged, and one for the
    duplicates dropped: an invocation judges its own runs unless told, and says so when told."""
    records: list[run_records.RunRecord] = []
    seen = list(own)
    notes, dropped = [], 0
    for path in paths:
        found, again = read_runs([path], seen)
        records += found
        seen += found
        dropped += again
        notes.append(f"merged {len(found)} records from {path}")
    if dropped:
        notes.append(dropped_note(dropped))
    return records, notes


def unnamed_roles() -> tuple[str, str]:
    """(production, control) of records that name no roles (written before runs named them):
    the project's production strategy (env RACEGATE_PRODUCTION_STRATEGY, [tool.racegate],
    else the built-in drafter's warmup_locked) and the built-in control, per_device. The same
    at every exit, so old records decide alike in pytest, `harness run` and the report."""
    # settings reads pyproject.toml; only where records lack roles
    from racegate.harness.scenario import settings

    return str(settings.production_strategy()), BUILTIN_ROLES.control


def record_roles(record: run_records.RunRecord, unnamed: tuple[str, str]) -> tuple[str, str]:
    """(production, control) a run was judged under, as its scenario says; `unnamed` where
    it says none (a schema-2 record written before runs named them)."""
    scenario = record.scenario
    return (
        scenario.production or unnamed[0],
        scenario.control or unnamed[1],
    )


def roles_of(
    records: Iterable[run_records.RunRecord],
    *,
    unnamed: tuple[str, str] | None = None,
    empty: tuple[str, str] | None = None,
) -> tuple[str, str]:
    """The one (production, control) these records ran under (`record_roles`, with `unnamed`
    or else `unnamed_roles()` for records that name none; `empty` where there is no record):
    every exit judges a set of records by its own roles, so pytest's block, `harness run` and
    the report of the same records decide alike. Records that ran under different roles are a
    GateInputError: no one decision judges them together."""
    records = list(records)
    if not records and empty is not None:
        return empty
    unnamed = unnamed or unnamed_roles()
    found = sorted({record_roles(r, unnamed) for r in records})
    if len(found) > 1:
        shown_roles = "; ".join(f"production {p}, control {c}" for p, c in found)
        raise GateInputError(
            f"the records ran under {len(found)} sets of roles ({shown_roles}); judge each "
            "set on its own (give their files separately)"
        )
    return found[0] if found else unnamed
