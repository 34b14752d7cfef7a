#!/usr/bin/env python3
"""The tree's own rules, checked by scripts/test.sh before anything builds:

- no source reaches for the workplace's shared folder beside the checkout (a clone alone must
  pass; the folder's path is spelled below in parts, so this file does not name it whole);
- no `#[path]` or `include!` in shim/ or windows/: crates share crates, not text;
- no Rust source file of shim/ or windows/, and no script or program of scripts/ (.py, .sh, .c,
  .cu), over 700 lines (one concern per file);
- every `unsafe { ... }` block in shim/, windows/ and tests/ has a `// SAFETY:` comment on one
  of the four lines above it (or on its own line).

Prints each breach as `path:line: why` and exits 1 if there is any.
"""
import os
import re
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
# The workplace's folder beside the checkout, which a clone alone does not have.
SHARED = os.path.join("..", "shared")
MAX_LINES = 700


def sources(top, exts):
    for dirpath, dirnames, files in os.walk(os.path.join(ROOT, top)):
        dirnames[:] = [d for d in dirnames if d != "target" and not d.startswith(".")]
        for f in files:
            if f.endswith(exts):
                yield os.path.join(dirpath, f)


def main():
    breaches = []
    rel = lambda p: os.path.relpath(p, ROOT)
    for top in ["shim", "tests", "scripts", "examples", "windows"]:
        for path in sources(top, (".rs", ".sh", ".py", ".c")):
            for n, line in enumerate(open(path, errors="replace"), 1):
                if SHARED in line:
                    breaches.append(f"{rel(path)}:{n}: reaches outside the checkout for {SHARED}")
    for path in sources("scripts", (".py", ".sh", ".c", ".cu")):
        count = sum(1 for _ in open(path, errors="replace"))
        if count > MAX_LINES:
            breaches.append(f"{rel(path)}:1: {count} lines (at most {MAX_LINES})")
    for top in ["shim", "windows", "tests"]:
        for path in sources(top, (".rs",)):
            lines = open(path, errors="replace").read().split("\n")
            if top != "tests":
                if len(lines) - 1 > MAX_LINES:
                    breaches.append(f"{rel(path)}:1: {len(lines) - 1} lines (at most {MAX_LINES})")
                for n, line in enumerate(lines, 1):
                    code = line.split("//", 1)[0]
                    if re.search(r"#\[path\s*=", code) or re.search(r"\binclude!\s*\(", code):
                        breaches.append(f"{rel(path)}:{n}: shares another file as text (#[path] / include!)")
            for n, line in enumerate(lines, 1):
                code = line.split("//", 1)[0]
                if re.search(r"\bunsafe\s*\{", code):
                    above = lines[max(0, n - 5):n]
                    if not any("SAFETY" in l for l in above):
                        breaches.append(f"{rel(path)}:{n}: unsafe block without a // SAFETY: line above it")
    for b in breaches:
        print(b, flush=True)
    if breaches:
        print(f"source rules: {len(breaches)} breach(es)", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
