#!/usr/bin/env bash
# Install nox for a nightly job into $RUNNER_TEMP/nox and put that folder on PYTHONPATH for the
# job's later steps (.github/workflows/nightly-gpu.yml). The runner's own python3 then runs nox:
# the `system` cells find the runner's torch through that interpreter (noxfile.py,
# link_runner_site_packages), which a separate nox venv would hide. With RACEGATE_WHEELHOUSE set
# (an offline runner's folder of wheels) pip installs from there only.
set -euo pipefail
target="$RUNNER_TEMP/nox"
if [ -n "${RACEGATE_WHEELHOUSE:-}" ]; then
  python3 -m pip install -q --no-index --find-links "$RACEGATE_WHEELHOUSE" --target "$target" nox
else
  python3 -m pip install -q --target "$target" "nox>=2024.10.9"
fi
echo "PYTHONPATH=$target" >> "$GITHUB_ENV"
