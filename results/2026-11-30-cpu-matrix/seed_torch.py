"""Seed noxfile.py's shared torch folder from an existing venv instead of downloading it again.

    python seed_torch.py <venv>/lib/python3.11/site-packages .nox/_torch/2.10.0

Makes <dest> look like `pip install --target <dest> torch==<v>` would: for torch and every
distribution it requires (recursively, for this platform), each top-level entry its RECORD
lists (package folders, .dist-info, modules, .libs) is symlinked into <dest>. Nothing else of
the source venv (its transformers, pytest, plugins) is visible through <dest>.
"""

from __future__ import annotations

import importlib.metadata as md
import re
import sys
from pathlib import Path

from packaging.requirements import Requirement


def norm(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def main(src: str, dest: str) -> None:
    dists = {norm(d.metadata["Name"]): d for d in md.distributions(path=[src])}
    todo, done = [("torch", "")], set()  # (distribution, extra) pairs, extras included
    while todo:
        name, extra = todo.pop()
        name = norm(name)
        if (name, extra) in done:
            continue
        done.add((name, extra))
        for r in dists[name].requires or []:
            req = Requirement(r)
            if req.marker is None or req.marker.evaluate({"extra": extra}):
                todo += [(req.name, ""), *((req.name, e) for e in req.extras)]
    seen = {name for name, _ in done}
    out = Path(dest)
    out.mkdir(parents=True)
    tops: set[str] = set()
    for name in sorted(seen):
        for f in dists[name].files or []:
            top = Path(f).parts[0]
            if top not in ("..", "__pycache__") and not top.endswith(".pth"):
                tops.add(top)
    for top in sorted(tops):
        if (Path(src) / top).exists():
            (out / top).symlink_to(Path(src, top).resolve())
    print(f"{dest}: {len(seen)} distributions, {len(tops)} entries: {', '.join(sorted(seen))}")


if __name__ == "__main__":
    main(*sys.argv[1:])
