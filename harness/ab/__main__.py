"""`python -m harness.ab ...`: see harness.ab.cli."""

import sys

from harness.ab.cli import main

sys.exit(main())
