"""A workload module that exits as it is imported (sys.exit(0)), as a training script "with
nothing to do" does: racegate must call it a failure to run, never a clean exit."""

import sys

sys.exit(0)
