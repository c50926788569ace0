#!/usr/bin/env bash
# Re-judge every committed record under results/ with main's code (4c61540) and this branch's,
# and write the table of what changed. Run from the repository root: bash results/rejudged-not-concurrent/command.sh
set -euo pipefail
here=results/rejudged-not-concurrent
py=${PYTHON:-.venv/bin/python}
old=$(mktemp -d)
trap '[ -n "${KEEP:-}" ] && cp "$old"/old.json "$old"/new.json "$here"/; rm -rf "$old"' EXIT
git archive "${OLD:-4c61540}" racegate | tar -x -C "$old"
git ls-tree -r --name-only "${OLD:-4c61540}" results/ > "$old/files.txt"  # the records main had
PYTHONPATH="$old" "$py" scripts/rejudge.py judge results "$old/files.txt" > "$old/old.json"
PYTHONPATH="$PWD" "$py" scripts/rejudge.py judge results "$old/files.txt" > "$old/new.json"
"$py" scripts/rejudge.py table "$old/old.json" "$old/new.json" > "$here/table.md"
cat "$here/table.md"
