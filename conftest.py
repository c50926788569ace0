"""Loads racegate's pytest plugin, harness/pytest_plugin.py."""

pytest_plugins = ["harness.pytest_plugin"]
