#!/usr/bin/env python3
"""Includes point one way: every `#include "..."` under src, cpu, kernels, io and bench names a
file of its own layer or of a layer below it, in the order docs/ARCHITECTURE.md draws (the
fenced block after the line `<!-- layers -->`, bottom first, one path prefix a line, text
after two spaces a comment).

  include_layers.py SOURCE_DIR            check the tree; exit 1 naming each wrong-way include
  include_layers.py SOURCE_DIR --selftest add one wrong-way include to a copy of the tree and
                                          check that it is caught
"""
import os
import re
import shutil
import sys
import tempfile

CHECKED = ("src", "cpu", "kernels", "io", "bench")
SOURCES = (".h", ".cpp", ".cu", ".cuh")
INCLUDE = re.compile(r'^\s*#\s*include\s+"([^"]+)"', re.M)


def read_layers(root):
    text = open(os.path.join(root, "docs", "ARCHITECTURE.md"), encoding="utf-8").read()
    m = re.search(r"<!-- layers -->\s*```[a-z]*\n(.*?)```", text, re.S)
    if not m:
        sys.exit("docs/ARCHITECTURE.md has no ```-fenced block after <!-- layers -->")
    layers = [line.split("  ")[0].strip() for line in m.group(1).splitlines() if line.strip()]
    return layers


def layer_of(path, layers):
    """The index of the longest layer prefix that names `path` (repository-relative): the
    prefix is a folder above it, or the start of its file name (src/backend/device names
    device.cpp and device_comm.h). None when no layer names it."""
    best = None
    for i, prefix in enumerate(layers):
        rest = path[len(prefix):] if path.startswith(prefix) else None
        if rest is not None and (rest == "" or rest[0] in "/._"):
            if best is None or len(prefix) > len(layers[best]):
                best = i
    return best


def resolve(root, name):
    """An include as the build resolves it: from the repository root, then from src/."""
    for base in ("", "src"):
        candidate = os.path.normpath(os.path.join(base, name))
        if os.path.exists(os.path.join(root, candidate)):
            return candidate
    return None


def check(root):
    layers = read_layers(root)
    wrong, unplaced = [], set()
    for top in CHECKED:
        for dirpath, _, files in os.walk(os.path.join(root, top)):
            for f in sorted(files):
                if not f.endswith(SOURCES):
                    continue
                path = os.path.relpath(os.path.join(dirpath, f), root)
                mine = layer_of(path, layers)
                if mine is None:
                    unplaced.add(os.path.dirname(path))
                    continue
                text = open(os.path.join(root, path), encoding="utf-8", errors="replace").read()
                for lineno, line in enumerate(text.splitlines(), 1):
                    m = INCLUDE.match(line)
                    if not m:
                        continue
                    target = resolve(root, m.group(1))
                    if target is None:
                        continue  # generated or third-party
                    theirs = layer_of(target, layers)
                    if theirs is not None and theirs > mine:
                        wrong.append(f"{path}:{lineno}: includes {target} ({layers[theirs]}, above {layers[mine]})")
    for d in sorted(unplaced):
        print(f"FAIL: {d}/ is in no layer of docs/ARCHITECTURE.md", file=sys.stderr)
    for w in wrong:
        print(f"FAIL: {w}", file=sys.stderr)
    if wrong:
        print("an include may name its own layer or one below it (docs/ARCHITECTURE.md, Layers); move the "
              "shared piece down, or the including code up", file=sys.stderr)
    return 1 if wrong or unplaced else 0


def selftest(root):
    with tempfile.TemporaryDirectory() as tmp:
        for d in CHECKED + ("docs",):
            shutil.copytree(os.path.join(root, d), os.path.join(tmp, d))
        if check(tmp) != 0:
            print("FAIL: the tree itself does not pass", file=sys.stderr)
            return 1
        victim = os.path.join(tmp, "src", "core", "error.cpp")
        with open(victim, "a", encoding="utf-8") as f:
            f.write('\n#include "zero/zero_engine.h"\n')
        print("--- with src/core/error.cpp including zero/zero_engine.h:", file=sys.stderr)
        if check(tmp) == 0:
            print("FAIL: a wrong-way include (core -> zero) was not caught", file=sys.stderr)
            return 1
    print("ok: a wrong-way include is caught")
    return 0


if __name__ == "__main__":
    root = sys.argv[1]
    if len(sys.argv) > 2 and sys.argv[2] == "--selftest":
        sys.exit(selftest(root))
    rc = check(root)
    if rc == 0:
        print("ok: every include points down the layers")
    sys.exit(rc)
