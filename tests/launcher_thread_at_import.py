"""A workload module whose import starts a thread (as some telemetry or prefetching libraries
do): a fork would lose it, so its runs start fresh and their records say why."""

from __future__ import annotations

import threading
import time

from tests.launcher_workloads import TaintWorkload

_POLLER = threading.Thread(target=time.sleep, args=(3600,), name="started-at-import", daemon=True)
_POLLER.start()


def make_workload(preset: str = "taint") -> TaintWorkload:
    return TaintWorkload()
