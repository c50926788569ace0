"""The fault workload, from a module that starts a non-daemon thread that never ends as it is
imported (a library's background worker): a racegate process that has printed its verdict must
still exit."""

import threading

from tests.fault_workloads import make_workload

threading.Thread(target=threading.Event().wait, name="never-ends", daemon=False).start()

__all__ = ["make_workload"]
