//! `rocmguard doctor`: the field's verification checklists, run for the user. Each line is a
//! finding with a status (ok, warn, fail, skip) and, where something can be done, a suggestion;
//! `--json` prints the same for machines. Exit status 1 when a line fails.
//!
//! Everything read from `/sys` and `/proc` goes through `--sysroot` (default `/`), so the tests
//! run it against fake trees. Libraries, the environment, Python and the self-test are the real
//! machine's.

pub mod alloc_conf;
mod checks;
pub mod libs;
pub mod probe;

use std::collections::BTreeMap;
use std::ffi::OsString;
use std::io::Read;
use std::path::PathBuf;
use std::process::{Command, ExitStatus, Stdio};
use std::time::{Duration, Instant};

use rocmguard_core::topology::Machine;

use crate::run::print_stdout;
use serde::Serialize;

#[derive(clap::Args)]
#[command(
    after_help = "Statuses: ok, warn (works, but not as you probably want), fail (will not work), skip (could not be checked here, and why).\nExit status: 1 if any line fails, else 0."
)]
pub struct Args {
    /// Print the findings as JSON
    #[arg(long)]
    json: bool,

    /// Read /sys and /proc under this directory instead of / [default: $ROCMGUARD_SYSROOT or /]
    #[arg(long, value_name = "DIR")]
    sysroot: Option<PathBuf>,

    /// The Python interpreter to ask about PyTorch (your virtual environment's)
    #[arg(long, value_name = "PATH", default_value = "python3")]
    python: OsString,

    /// Do not ask Python about PyTorch
    #[arg(long)]
    no_python: bool,

    /// Do not run the self-test (a 2 MiB hipMalloc/hipFree under the shim)
    #[arg(long)]
    no_self_test: bool,

    /// The librocmguard.so to check [default: as `rocmguard run` finds it]
    #[arg(long, value_name = "PATH")]
    lib: Option<PathBuf>,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Status {
    Ok,
    Skip,
    Warn,
    Fail,
}

impl Status {
    /// As printed; failures in capitals so they stand out in a long list.
    fn label(self) -> &'static str {
        match self {
            Status::Ok => "ok",
            Status::Warn => "warn",
            Status::Fail => "FAIL",
            Status::Skip => "skip",
        }
    }

    fn name(self) -> &'static str {
        match self {
            Status::Ok => "ok",
            Status::Warn => "warn",
            Status::Fail => "fail",
            Status::Skip => "skip",
        }
    }
}

/// One line of the checklist.
#[derive(Clone, Debug, Serialize)]
pub struct Check {
    pub id: String,
    pub status: Status,
    pub title: String,
    pub detail: String,
    pub suggestion: Option<String>,
}

impl Check {
    pub fn new(id: &str, title: &str, status: Status, detail: impl Into<String>) -> Check {
        Check {
            id: id.to_string(),
            status,
            title: title.to_string(),
            detail: detail.into(),
            suggestion: None,
        }
    }

    pub fn fix(mut self, suggestion: impl Into<String>) -> Check {
        self.suggestion = Some(suggestion.into());
        self
    }
}

/// The facts about one GPU, for `--json`.
#[derive(Serialize)]
struct GpuJson {
    node: u32,
    gfx: String,
    integrated: bool,
    pci: String,
    card: Option<String>,
    device_id: String,
    vram: Option<u64>,
    vis_vram: Option<u64>,
    gtt: Option<u64>,
    uma_ceiling: Option<u64>,
}

#[derive(Serialize)]
struct Report<'a> {
    rocmguard: &'static str,
    sysroot: String,
    gpus: Vec<GpuJson>,
    checks: &'a [Check],
    summary: BTreeMap<&'static str, usize>,
}

/// What the checks look at.
pub struct Context {
    pub machine: Machine,
    pub env: BTreeMap<String, String>,
    pub search: libs::SearchPath,
    pub lib: Result<PathBuf, String>,
}

impl Context {
    pub fn var(&self, name: &str) -> Option<&str> {
        self.env.get(name).map(String::as_str)
    }
}

pub fn exec(args: Args) -> anyhow::Result<u8> {
    let sysroot = args
        .sysroot
        .clone()
        .or_else(|| std::env::var_os("ROCMGUARD_SYSROOT").map(PathBuf::from))
        .unwrap_or_else(|| PathBuf::from("/"));
    let env: BTreeMap<String, String> = std::env::vars().collect();
    let ctx = Context {
        machine: Machine::read(&sysroot),
        search: libs::SearchPath::current(env.get("LD_LIBRARY_PATH").map(String::as_str)),
        lib: crate::run::find_library(args.lib.as_deref()).map_err(|e| format!("{:#}", e)),
        env,
    };
    let mut found = checks::all(&ctx);
    found.push(if args.no_python {
        Check::new(
            "pytorch",
            "PyTorch",
            Status::Skip,
            "not asked (--no-python)",
        )
    } else {
        checks::pytorch(&ctx, &args.python)
    });
    found.push(if args.no_self_test {
        Check::new(
            "self-test",
            "Self-test",
            Status::Skip,
            "not run (--no-self-test)",
        )
    } else {
        checks::self_test(&ctx)
    });

    let mut summary = BTreeMap::new();
    for status in ["ok", "warn", "fail", "skip"] {
        summary.insert(status, 0);
    }
    for c in &found {
        *summary.entry(c.status.name()).or_insert(0) += 1;
    }
    if args.json {
        let host_reserve = checks::config(&ctx).host_reserve;
        let report = Report {
            rocmguard: env!("CARGO_PKG_VERSION"),
            sysroot: sysroot.display().to_string(),
            gpus: ctx
                .machine
                .gpus
                .iter()
                .map(|g| GpuJson {
                    node: g.node,
                    gfx: g.gfx().name(),
                    integrated: g.integrated(),
                    pci: g.pci_address(),
                    card: g.drm.as_ref().map(|d| d.card.clone()),
                    device_id: format!("0x{:04x}", g.device_id),
                    vram: g.vram(),
                    vis_vram: g.drm.as_ref().and_then(|d| d.vis_vram_total),
                    gtt: g.gtt(),
                    uma_ceiling: if g.integrated() {
                        ctx.machine.uma_ceiling(g, host_reserve).ok()
                    } else {
                        None
                    },
                })
                .collect(),
            checks: &found,
            summary,
        };
        print_stdout(&format!("{}\n", serde_json::to_string_pretty(&report)?))?;
    } else {
        print_stdout(&render(&sysroot, &found, &summary))?;
    }
    Ok(u8::from(found.iter().any(|c| c.status == Status::Fail)))
}

fn render(sysroot: &std::path::Path, checks: &[Check], summary: &BTreeMap<&str, usize>) -> String {
    let mut out = format!(
        "rocmguard doctor {}{}\n\n",
        env!("CARGO_PKG_VERSION"),
        if sysroot == std::path::Path::new("/") {
            String::new()
        } else {
            format!(" (machine read from {})", sysroot.display())
        }
    );
    let width = checks.iter().map(|c| c.title.len()).max().unwrap_or(0);
    for c in checks {
        out.push_str(&format!(
            "{:<4}  {:<width$}  {}\n",
            c.status.label(),
            c.title,
            c.detail,
            width = width
        ));
        if let Some(s) = &c.suggestion {
            out.push_str(&format!(
                "{:<4}  {:<width$}  -> {}\n",
                "",
                "",
                s,
                width = width
            ));
        }
    }
    out.push_str(&format!(
        "\n{} ok, {} warn, {} fail, {} skip\n",
        summary["ok"], summary["warn"], summary["fail"], summary["skip"]
    ));
    out
}

/// What a child process did within its time.
pub struct Outcome {
    /// `None` when it ran out of time and was killed.
    pub status: Option<ExitStatus>,
    pub stdout: String,
    pub stderr: String,
}

/// Runs `cmd` with its output captured, killing it after `limit`.
pub fn run_with_timeout(cmd: &mut Command, limit: Duration) -> std::io::Result<Outcome> {
    let mut child = cmd
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()?;
    // Read both pipes on threads, so a child that fills one cannot block.
    let mut pipes = [
        child
            .stdout
            .take()
            .map(|p| Box::new(p) as Box<dyn Read + Send>),
        child
            .stderr
            .take()
            .map(|p| Box::new(p) as Box<dyn Read + Send>),
    ];
    let readers: Vec<_> = pipes
        .iter_mut()
        .map(|p| {
            let pipe = p.take();
            std::thread::spawn(move || {
                let mut text = String::new();
                if let Some(mut pipe) = pipe {
                    let mut bytes = Vec::new();
                    let _ = pipe.read_to_end(&mut bytes);
                    text = String::from_utf8_lossy(&bytes).into_owned();
                }
                text
            })
        })
        .collect();
    let deadline = Instant::now() + limit;
    let status = loop {
        if let Some(status) = child.try_wait()? {
            break Some(status);
        }
        if Instant::now() >= deadline {
            let _ = child.kill();
            let _ = child.wait();
            break None;
        }
        std::thread::sleep(Duration::from_millis(20));
    };
    let mut texts = readers.into_iter().map(|r| r.join().unwrap_or_default());
    Ok(Outcome {
        status,
        stdout: texts.next().unwrap_or_default(),
        stderr: texts.next().unwrap_or_default(),
    })
}
