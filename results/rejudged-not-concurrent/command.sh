#!/usr/bin/env bash
# Re-judge every committed record under results/ with main's code (4c61540) and this branch's,
# and write the table of what changed. Run from the repository root: bash results/rejudged-not-concurrent/command.sh
set -euo pipefail
here=results/rejudged-not-concurrent
py=${PYTHON:-.venv/bin/python}
old=$(mktemp -d)
trap 'rm -rf "$old"' EXIT
git archive "${OLD:-4c61540}" racegate | tar -x -C "$old"
git ls-tree -r --name-only "${OLD:-4c61540}" results/ > "$old/files.txt"  # the records main had
PYTHONPATH="$old" "$py" "$here/rejudge.py" judge results "$old/files.txt" > "$here/old.json"
PYTHONPATH="$PWD" "$py" "$here/rejudge.py" judge results "$old/files.txt" > "$here/new.json"
"$py" "$here/rejudge.py" table "$here/old.json" "$here/new.json" > "$here/table.md"
cat "$here/table.md"
