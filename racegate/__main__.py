"""`python -m racegate ...`: see racegate.harness.doors.cli."""

import sys

from racegate.harness.doors.cli import entry

entry(sys.argv[1:])
