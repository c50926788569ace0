"""Loads racegate's pytest plugin (racegate/cases/plugin.py) from this checkout unless it is
loaded already: by racegate's pytest11 entry point when installed (twice is an error), or by a
project's own conftest when this file is reached as a conftest below that project's rootdir
(collecting racegate/cases/ for its `pytest -k race`), where pytest refuses pytest_plugins."""

import os
import sys
from importlib.metadata import entry_points

if "racegate.cases.plugin" not in sys.modules and (
    not entry_points(group="pytest11", name="racegate")
    or os.environ.get("PYTEST_DISABLE_PLUGIN_AUTOLOAD")
):
    pytest_plugins = ["racegate.cases.plugin"]
