"""`python -m racegate ...`: see racegate.harness.doors.cli."""

import sys

from racegate.harness.doors.cli import main

sys.exit(main(sys.argv[1:]))
