"""`python -m harness.ab ...`: see harness.ab.main."""

import sys

from harness.ab import main

sys.exit(main())
