"""Running the checked programs for the driver: each as its own process group, with the
environment its row says (with or without LD_PRELOAD=librocmguard.so, PyTorch's cache on or
off), within the part's time, its output logged and read back."""

import os
import signal
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

from shim_output import parse_tables, results, shim_line, tail

HERE = Path(__file__).resolve().parent
GIB = 1 << 30
CAP = 8 * GIB
CAP_TEXT = "8GiB"
# Seconds a part's runs get in all (the device tool allows 600 a call; the rest is the start).
PART_BUDGET = 540

# Variables that change how PyTorch allocates or that preload something: never inherited.
SCRUBBED = ("LD_PRELOAD", "PYTORCH_NO_CUDA_MEMORY_CACHING", "PYTORCH_CUDA_ALLOC_CONF", "PYTORCH_ALLOC_CONF")
FIXED_ENV = {
    "CUBLAS_WORKSPACE_CONFIG": ":4096:8",  # deterministic cuBLAS
    "PYTHONUNBUFFERED": "1",
    "TOKENIZERS_PARALLELISM": "false",
    "HF_HUB_OFFLINE": "1",  # no network there; nothing is downloaded
    "TRANSFORMERS_OFFLINE": "1",
    "TRANSFORMERS_VERBOSITY": "error",
    # The device machines' rule: NVLink multicast stays off, also in programs we start.
    "NCCL_NVLS_ENABLE": "0",
    "TORCH_SYMM_MEM_DISABLE_MULTICAST": "1",
    "NVSHMEM_DISABLE_NVLS": "1",
}


@dataclass
class Run:
    """One process (or one torchrun) that prints a GPUCHECK-RESULT line, and what came out."""

    label: str
    shim: bool
    caching: bool
    command: list = field(default_factory=list)
    env: dict = field(default_factory=dict)
    rc: int = None
    timed_out: bool = False
    out_of_time: str = None  # why it did not finish when the part's time ran out
    wall_s: float = 0.0
    result: dict = None
    shim_line: str = None
    tables: list = field(default_factory=list)
    stderr_tail: str = ""
    preload_error: str = None  # the dynamic loader's complaint, when it could not preload the shim
    ranks: dict = field(default_factory=dict)  # torchrun: local rank -> {result, shim_line, tables}

    @property
    def ok(self):
        """Ran to the end, printed its result, and (for a shim run) the shim was on."""
        return self.failure() is None

    def failure(self):
        if self.out_of_time:
            return f"{self.label}: not finished ({self.out_of_time})"
        if self.timed_out:
            return f"{self.label}: killed after {self.wall_s:.0f} s (its own time limit: it hung or crawled)"
        if self.rc != 0:
            last = self.stderr_tail.strip().splitlines()
            return f"{self.label}: exit {self.rc}" + (f": {last[-1][:200]}" if last else "")
        if self.result is None:
            return f"{self.label}: printed no result"
        if "error" in self.result:
            return f"{self.label}: {self.result['error'][:200]}"
        if self.shim and self.preload_error:
            return f"{self.label}: the shim could not be preloaded: {self.preload_error}"
        if self.shim and not self.ranks and self.shim_line is None:
            return f"{self.label}: the shim was not active (no `rocmguard ... guarding CUDA` line on stderr)"
        if not self.shim and self.shim_line is not None:
            return f"{self.label}: the shim was active in a run meant to be without it"
        return None

    def cuda_table(self):
        """The last CUDA exit table: {device: row}."""
        return self.tables[-1] if self.tables else {}

    def summary(self):
        failure = self.failure()
        return {
            "label": self.label,
            "shim": self.shim,
            "caching": self.caching,
            "command": self.command,
            "env": self.env,
            "rc": self.rc,
            "timed_out": self.timed_out,
            "out_of_time": self.out_of_time,
            "wall_s": round(self.wall_s, 2),
            "shim_line": self.shim_line,
            "preload_error": self.preload_error,
            "stats_tables": self.tables,
            "result": self.result,
            "ranks": self.ranks,
            "failure": failure,
            "stderr_tail": self.stderr_tail if failure else "",
        }


@dataclass
class Script:
    """One run of a program that judges itself (check 7's programs print CHECK lines,
    overhead.py prints BOUND-RESULT or INPROCESS-RESULT): its exit status and output."""

    label: str
    rc: int = None
    out: str = ""
    err: str = ""
    wall_s: float = 0.0
    timed_out: bool = False
    out_of_time: str = None  # why it did not finish when the part's time ran out

    def summary(self):
        return {
            "label": self.label,
            "script": True,
            "rc": self.rc,
            "wall_s": round(self.wall_s, 2),
            "timed_out": self.timed_out,
            "out_of_time": self.out_of_time,
            "stdout_tail": tail(self.out, 12),
            "stderr_tail": tail(self.err, 12),
        }


def launch(command, env, timeout, out_path, err_path):
    """Runs command in its own process group (so a timeout ends torchrun's ranks and
    overhead.py's children too). Returns (exit code, timed out)."""
    with open(out_path, "w") as out, open(err_path, "w") as err:
        proc = subprocess.Popen(
            command, env=env, stdout=out, stderr=err, cwd=str(HERE.parent.parent), start_new_session=True
        )
        try:
            return proc.wait(timeout=timeout), False
        except subprocess.TimeoutExpired:
            try:
                os.killpg(proc.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
            proc.wait()
            return proc.returncode, True


class Context:
    """What one part's checks share: the library, the mode, the part's time, its rows."""

    def __init__(self, lib, quick, logs, budget_s, python=sys.executable, launcher=None, settings=None):
        self.lib = str(Path(lib).resolve())
        # ROCMGUARD_* settings for every run under the shim (--set), e.g. to compare vmm=0.
        self.settings = settings or {}
        self.quick = quick
        self.logs = Path(logs)
        self.logs.mkdir(parents=True, exist_ok=True)
        self.started = time.monotonic()
        self.deadline = self.started + budget_s
        self.python = python
        self.launcher = launcher or launch
        self.run_limit = 120 if quick else 200
        self.runs = {}
        self.rows = []
        self.meta = {}
        self.on_change = lambda: None
        # Where each run's one-line verdict goes (the tests keep their fake runs' lines).
        self.progress = lambda line: print(line, flush=True)

    @property
    def train_steps(self):
        return (3, 8) if self.quick else (5, 30)  # (warm-up, timed)

    def left(self):
        return self.deadline - time.monotonic()

    def env_for(self, shim, caching, extra=None):
        env = {k: v for k, v in os.environ.items() if k not in SCRUBBED and not k.startswith("ROCMGUARD_")}
        env.update(FIXED_ENV)
        if shim:
            env.update({"LD_PRELOAD": self.lib, "ROCMGUARD_STATS": "1", "ROCMGUARD_LOG": "info"})
            env.update(self.settings)
        if not caching:
            env["PYTORCH_NO_CUDA_MEMORY_CACHING"] = "1"
        env.update(extra or {})
        return env

    def _launch(self, label, command, env, limit):
        """(rc, timed out, out_of_time, wall, stdout, stderr) of one process within the part's
        time; out_of_time says why it could not finish (it did not start, or the part ended)."""
        left = self.left()
        if left < 20:
            return None, False, "the part's time was spent before it started", 0.0, "", ""
        out_path, err_path = self.logs / f"{label}.stdout", self.logs / f"{label}.stderr"
        start = time.monotonic()
        cap = min(limit, left - 5)
        rc, timed_out = self.launcher(command, env, cap, out_path, err_path)
        wall = time.monotonic() - start
        stopped = f"stopped at the part's end after {wall:.0f} s" if timed_out and cap < limit else None
        stdout = out_path.read_text(errors="replace") if out_path.exists() else ""
        stderr = err_path.read_text(errors="replace") if err_path.exists() else ""
        return rc, timed_out and not stopped, stopped, wall, stdout, stderr

    def run(self, label, args, *, shim, caching, env=None, rank_logs=None):
        """Runs `python args...` and records it under label. rank_logs: torchrun's --log-dir,
        whose per-rank stdout/stderr files are read instead of the launcher's own."""
        extra = dict(env or {})
        run = Run(label=label, shim=shim, caching=caching, command=[self.python] + list(args))
        env_all = self.env_for(shim, caching, extra)
        # What this run sets beyond the inherited environment, for the JSON.
        run.env = {
            k: v
            for k, v in env_all.items()
            if k in extra or k in ("LD_PRELOAD", "PYTORCH_NO_CUDA_MEMORY_CACHING") or k.startswith("ROCMGUARD_")
        }
        run.rc, run.timed_out, run.out_of_time, run.wall_s, stdout, stderr = self._launch(
            label, run.command, env_all, self.run_limit
        )
        run.stderr_tail = tail(stderr, 12)
        found = results(stdout)
        run.result = found[-1] if found else None
        run.shim_line = shim_line(stderr)
        run.tables = parse_tables(stderr)
        run.preload_error = next((l.strip()[:300] for l in stderr.splitlines() if "cannot be preloaded" in l), None)
        if rank_logs is not None:
            self._read_ranks(run, Path(rank_logs))
        self._record(run, run.failure())
        return run

    def script(self, label, command, env=None, limit=300):
        """Runs a program that judges itself (see Script) and records it under label. env: the
        whole environment (default: the inherited one without the shim's or PyTorch's
        allocation settings)."""
        s = Script(label)
        env = env if env is not None else self.env_for(False, True)
        s.rc, s.timed_out, s.out_of_time, s.wall_s, s.out, s.err = self._launch(label, command, env, limit)
        failure = s.out_of_time or (f"killed after {s.wall_s:.0f} s (its own time limit)" if s.timed_out else None)
        self._record(s, failure and f"{label}: {failure}")
        return s

    def _read_ranks(self, run, log_dir):
        """torchrun --log-dir D --redirects 3 writes D/<run id>/attempt_N/<local rank>/std*.log."""
        for err in sorted(log_dir.rglob("stderr.log")):
            if not err.parent.name.isdigit():
                continue
            rank = int(err.parent.name)
            out = err.with_name("stdout.log")
            stdout = out.read_text(errors="replace") if out.exists() else ""
            stderr = err.read_text(errors="replace")
            found = results(stdout)
            run.ranks[rank] = {
                "result": found[-1] if found else None,
                "shim_line": shim_line(stderr),
                "tables": parse_tables(stderr),
                "stderr_tail": tail(stderr, 8),
            }
        if run.ranks and run.result is None:
            run.result = {"ranks": sorted(run.ranks)}

    def _record(self, run, failure):
        self.runs[run.label] = run
        elapsed = time.monotonic() - self.started
        self.progress(
            f"[{elapsed:5.0f}s] {run.label:<34} {'ok' if failure is None else 'FAILED':<6} {run.wall_s:6.1f}s"
            + ("" if failure is None else f"  {failure}")
        )
        self.on_change()

    def row(self, check, name, status, figures, **details):
        self.rows.append({"check": check, "name": name, "status": status, "figures": figures, "details": details})
        self.on_change()

    def elapsed(self):
        return time.monotonic() - self.started


def broken(*runs):
    """(status, why) for the first run that did not finish: INCOMPLETE when the part's time
    ran out on it (a figure missing, not a verdict), FAIL otherwise."""
    for run in runs:
        if run is not None and not run.ok:
            return ("INCOMPLETE" if run.out_of_time else "FAIL"), run.failure()
    return None
