"""Loads racegate's pytest plugin (harness/pytest_plugin.py) from this checkout unless racegate is
installed: then its pytest11 entry point loads it (twice is an error), and this file must not
name pytest_plugins at all (pytest refuses that outside the rootdir, where a project's
`pytest -k race` collects harness/cases/ from)."""

import os
from importlib.metadata import entry_points

if not entry_points(group="pytest11", name="racegate") or os.environ.get(
    "PYTEST_DISABLE_PLUGIN_AUTOLOAD"
):
    pytest_plugins = ["harness.pytest_plugin"]
