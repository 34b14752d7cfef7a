"""Reading what the checked programs and the shim print: the programs' result lines, the shim's
first-use line and its `rocmguard: CUDA memory at exit` table (ROCMGUARD_STATS=1); and the
`--set KEY=VALUE` settings the GPU scripts pass to it."""

import json
import re

RESULT_TAG = "GPUCHECK-RESULT"
MIB = 1 << 20
GIB = 1 << 30

SIZE_UNITS = {"B": 1, "KiB": 1 << 10, "MiB": 1 << 20, "GiB": 1 << 30, "TiB": 1 << 40}
TABLE_SIZES = ("live", "peak_live", "reserved", "peak_reserved", "cap")
TABLE_COUNTS = ("allocs", "hits", "dev_allocs", "dev_frees", "trims", "retries", "ooms", "syncs", "dev_ms",
                "sync_ms")
WAITED = re.compile(r"dev(\d+): allocations waited (\d+) ms for (\d+) of those synchronizes")


def fmt_bytes(n):
    """Sizes the way the shim prints them: 8.00 GiB, 64.0 MiB."""
    if n is None:
        return "?"
    if n >= GIB:
        return f"{n / GIB:.2f} GiB"
    if n >= MIB:
        return f"{n / MIB:.1f} MiB"
    return f"{n} B"


def settings_env(items):
    """`--set KEY=VALUE` items as the shim's environment: `vmm=0` -> ROCMGUARD_VMM=0. Raises
    ValueError on an item that is not KEY=VALUE."""
    env = {}
    for item in items:
        key, sep, value = item.partition("=")
        if not sep or not key:
            raise ValueError(f"--set {item}: write KEY=VALUE")
        env["ROCMGUARD_" + key.upper().removeprefix("ROCMGUARD_")] = value
    return env


def ratio_text(value, base):
    """`+1.30%`: value against base, signed."""
    return f"{(value / base - 1) * 100:+.2f}%"


def parse_size(number, unit):
    """`19.20`, `GiB` (two words of the shim's table) -> bytes (to the printed precision)."""
    return round(float(number) * SIZE_UNITS[unit])


def parse_row(line):
    """One row of rocmguard_core::Stats::table: `dev0  55.0 MiB ... 1.127x  10 6 4 0 0 0 0 0 0 0`."""
    words = line.split()
    if len(words) != 1 + 2 * len(TABLE_SIZES) + 1 + len(TABLE_COUNTS) or not words[0].startswith("dev"):
        return None
    try:
        row = {"device": int(words[0][3:])}
        for k, name in enumerate(TABLE_SIZES):
            row[name] = parse_size(words[1 + 2 * k], words[2 + 2 * k])
        row["peak_reserved_per_live"] = float(words[11].rstrip("x"))
        for k, name in enumerate(TABLE_COUNTS):
            row[name] = int(words[12 + k])
    except (ValueError, KeyError):
        return None
    return row


def parse_tables(text, face="CUDA"):
    """Every `rocmguard: CUDA memory at exit` table in text, each as {device: row}. A row's
    `waits` and `wait_ms` come from the lines below the table (`dev0: allocations waited 105
    ms for 9 of those synchronizes`); 0 where its device has none."""
    tables = []
    lines = text.splitlines()
    for i, line in enumerate(lines):
        if line.strip() != f"rocmguard: {face} memory at exit":
            continue
        rows = {}
        below = lines[i + 2 :] if i + 1 < len(lines) and lines[i + 1].startswith("device") else []
        while below and (row := parse_row(below[0])) is not None:
            rows[row["device"]] = dict(row, waits=0, wait_ms=0)
            below.pop(0)
        while below and (waited := WAITED.fullmatch(below.pop(0).strip())) and int(waited[1]) in rows:
            rows[int(waited[1])].update(wait_ms=int(waited[2]), waits=int(waited[3]))
        tables.append(rows)
    return tables


def shim_line(text):
    """The shim's first-use line (`rocmguard 0.1.0: guarding CUDA device memory | ...`)."""
    for line in text.splitlines():
        if line.startswith("rocmguard ") and "guarding CUDA" in line:
            return line.strip()
    return None


def results(text):
    """The programs' result lines (one per process)."""
    found = []
    for line in text.splitlines():
        if line.startswith(RESULT_TAG + " "):
            try:
                found.append(json.loads(line[len(RESULT_TAG) + 1 :]))
            except json.JSONDecodeError:
                pass
    return found


def tagged(text, tag):
    """The JSON after `TAG ` on the last line that starts with it (INPROCESS-RESULT,
    BOUND-RESULT), or None."""
    line = next((l for l in reversed(text.splitlines()) if l.startswith(tag + " ")), None)
    if line is None:
        return None
    try:
        return json.loads(line[len(tag) + 1 :])
    except json.JSONDecodeError:
        return None


def check_lines(text):
    """check 7's programs' `CHECK <name> <words...>` lines, each as [name, rest]."""
    return [line.split(" ", 2)[1:] for line in text.splitlines() if line.startswith("CHECK ")]


def tail(text, lines=6):
    return "\n".join(text.strip().splitlines()[-lines:])
