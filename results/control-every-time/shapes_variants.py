"""The built-in drafter with more sequence buckets: more new shapes, so more compile turns a run.

Under the `recompile` schedule each thread compiles the extra buckets in turns (thread 0's
first, thread 1's first, thread 0's second, ...), one at a time, while the other thread runs
compiled steps: each turn is a window for the cross-thread tracing race. `buckets2` is the
small preset as it is (one window a run with 2 threads: both threads switch to 1024);
`buckets3` gives two windows, `buckets5` four. Used as `--workload shapes_variants:buckets5`
with this folder on PYTHONPATH.
"""

from __future__ import annotations

from racegate.model.workload import DFlashWorkload, make_workload


def buckets2(preset: str = "small") -> DFlashWorkload:
    return make_workload(preset)


def buckets3(preset: str = "small") -> DFlashWorkload:
    return make_workload(preset, seq_buckets=(2048, 1024, 1536))


def buckets5(preset: str = "small") -> DFlashWorkload:
    return make_workload(preset, seq_buckets=(2048, 1024, 1536, 1792, 1280))
