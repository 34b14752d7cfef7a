"""The machine a part ran on (its header) and the part's table and JSON."""

import datetime
import hashlib
import json
import subprocess
import sys
from pathlib import Path

from runner import HERE

# What each status means, printed under a table that has it.
MEANING = {
    "INFO": "a figure, no verdict: step time between separate processes, beside the native runs' own spread",
    "UNRESOLVED": "the in-process interval straddles the target after the part's pairs: neither a pass nor a fail",
    "SKIP": "cannot be judged on this machine or with this program; the figures say why",
    "INCOMPLETE": "the part's time ran out before this figure was made: not a verdict on rocmguard; "
    "the part does not fit its budget here (report it)",
}

PROBE = r"""
import json, torch
info = {"torch": torch.__version__, "cuda": torch.version.cuda, "available": torch.cuda.is_available()}
try:
    info["cudnn"] = torch.backends.cudnn.version()
except Exception:
    pass
if info["available"]:
    torch.cuda.init()
    torch.zeros(1, device="cuda")
    info["device_count"] = torch.cuda.device_count()
    info["name"] = torch.cuda.get_device_name(0)
    info["total_memory"] = torch.cuda.get_device_properties(0).total_memory
    with open("/proc/self/maps") as maps:
        info["libcudart"] = sorted({l.split()[-1] for l in maps if "libcudart.so" in l})
for mod in ("transformers", "torchvision"):
    try:
        info[mod] = __import__(mod).__version__
    except Exception as e:
        info[mod] = None
print(json.dumps(info))
"""


def sh(command):
    try:
        return subprocess.run(command, capture_output=True, text=True, timeout=60).stdout.strip()
    except (OSError, subprocess.SubprocessError):
        return ""


def machine(ctx):
    """What the report's header says, each from a command run here."""
    meta = {
        "date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
        "lib": ctx.lib,
        "python": sys.version.split()[0],
    }
    lib = Path(ctx.lib)
    if lib.exists():
        meta["lib_bytes"] = lib.stat().st_size
        meta["lib_sha256"] = hashlib.sha256(lib.read_bytes()).hexdigest()
    meta["git_commit"] = sh(["git", "-C", str(HERE), "rev-parse", "--short", "HEAD"]) or None
    meta["nvidia_smi"] = sh(["nvidia-smi", "--query-gpu=name,memory.total,driver_version", "--format=csv,noheader"])
    listing = sh(["nvidia-smi", "-L"])
    meta["gpus"] = len([l for l in listing.splitlines() if l.startswith("GPU ")])
    try:
        out = subprocess.run(
            [ctx.python, "-c", PROBE], capture_output=True, text=True, timeout=180, env=ctx.env_for(False, True)
        )
        meta["probe"] = json.loads(out.stdout.strip().splitlines()[-1])
    except (OSError, subprocess.SubprocessError, json.JSONDecodeError, IndexError) as e:
        meta["probe"] = {"error": f"{type(e).__name__}: {e}"}
    return meta


def overall(rows):
    """A part's verdict: FAIL if a row failed; else INCOMPLETE if a figure is missing for time;
    else UNRESOLVED if a row could not resolve its target; else PASS. INFO and SKIP rows never
    decide it."""
    for status in ("FAIL", "INCOMPLETE", "UNRESOLVED"):
        if any(r["status"] == status for r in rows):
            return status
    return "PASS"


def table(ctx, title):
    m, p = ctx.meta, ctx.meta.get("probe", {})
    version = next((run.shim_line.split(":")[0] for run in ctx.runs.values() if getattr(run, "shim_line", None)), None)
    lines = [
        f"rocmguard GPU check, {title}; {m.get('date')}",
        f"GPU: {m.get('nvidia_smi') or p.get('name')} | GPUs: {m.get('gpus')} | torch {p.get('torch')} | "
        f"CUDA {p.get('cuda')} | cuDNN {p.get('cudnn')} | transformers {p.get('transformers')} | "
        f"torchvision {p.get('torchvision')} | Python {m.get('python')}",
        f"libcudart: {', '.join(p.get('libcudart') or ['?'])}",
        f"shim: {m.get('lib')} ({version or 'no run printed its first-use line'}; sha256 "
        f"{(m.get('lib_sha256') or '?')[:16]}; repo {m.get('git_commit')})",
        "",
    ]
    rows = sorted(ctx.rows, key=lambda r: r["check"])
    width = max([len(r["name"]) for r in rows] + [5])
    lines.append(f"{'#':<2} {'check':<{width}} {'result':<10} figures")
    lines.append("-" * (width + 24))
    for r in rows:
        lines.append(f"{r['check']:<2} {r['name']:<{width}} {r['status']:<10} {r['figures']}")
    lines.append("-" * (width + 24))
    seen = [s for s in ("PASS", "FAIL", "UNRESOLVED", "INFO", "SKIP", "INCOMPLETE") if any(r["status"] == s for r in rows)]
    for status in seen:
        if status in MEANING:
            lines.append(f"{status}: {MEANING[status]}")
    counts = ", ".join(f"{sum(1 for r in rows if r['status'] == s)} {s.lower()}" for s in seen)
    lines.append(f"verdict of {title.split(':')[0]}: {overall(rows)} ({counts or 'no rows'}) in {ctx.elapsed():.0f} s")
    return "\n".join(lines)


def save(ctx, path, title):
    data = {
        "part": title,
        "status": overall(ctx.rows),
        "elapsed_s": round(ctx.elapsed(), 1),
        "meta": ctx.meta,
        "rows": sorted(ctx.rows, key=lambda r: r["check"]),
        "runs": {label: run.summary() for label, run in ctx.runs.items()},
    }
    tmp = Path(str(path) + ".tmp")
    tmp.write_text(json.dumps(data, indent=2, default=str))
    tmp.replace(path)
