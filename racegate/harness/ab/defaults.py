"""The `harness run` options of an A/B's timed runs where the caller gives none.

Standard library only: the noxfile (nox_support) imports it.
"""

from __future__ import annotations

# One thread (two would time the race's serialisation, not the step), at the step count
# benchmarks/ab_power_gpu.sh measures with; the workload's preset and the production strategy
# are harness run's defaults (a caller with roles of its own adds --strategy), and a GPU host's
# caller adds its GPU (--devices 0: one GPU's step, whatever the host has). Without these
# `harness run` makes one run per thread count (1 and 2), and an A/B takes one record per
# process: on one H100 `racegate upgrade` stopped at the reference's first run ("exited 7 with
# 2 record(s)").
ONE_TIMED_RUN = ("--threads-per-device", "1", "--steps", "60", "--warmup-steps", "3")
