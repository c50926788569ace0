"""`python -m racegate.harness.ab ...`: see racegate.harness.ab.cli."""

import sys

from racegate.harness.ab.cli import main

sys.exit(main())
