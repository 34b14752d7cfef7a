//! `rocmguard run [options] -- CMD ARGS...`: sets the guard's configuration, prepends
//! `librocmguard.so` to `LD_PRELOAD` and replaces itself with the command (`exec`), so the exit
//! code and signals are the command's own and every child (torchrun ranks, DataLoader workers,
//! shell scripts) inherits the guard through the environment.

pub mod keys;
pub mod profiles;
pub mod sim;

use std::ffi::{OsStr, OsString};
use std::io::{self, Write};
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::Command;

use anyhow::{bail, Result};
use rocmguard_core::config::find_key;
use rocmguard_core::Config;

use profiles::Catalog;

/// The library's file name, looked for beside the binary and in `../lib`.
pub const LIB_NAME: &str = "librocmguard.so";

#[derive(clap::Args)]
#[command(
    override_usage = "rocmguard run [OPTIONS] [--] COMMAND [ARGS]...\n       rocmguard run --list-profiles",
    after_help = "Examples:\n  rocmguard run --cap 20GiB -- python train.py\n  rocmguard run --sim --cap 4GiB -- python try.py   # on hipsim, the simulated HIP runtime (no GPU)\n  rocmguard run --profile strix-halo --stats -- python generate.py\n  rocmguard run --profile rdna2 --set trim_threshold=0.7 -- torchrun --nproc-per-node 2 train.py\n\nProfiles: built-in ones (--list-profiles) and yours in $XDG_CONFIG_HOME/rocmguard/profiles.toml (or --profile-file); later ones win, and options win over profiles."
)]
pub struct Args {
    #[command(flatten)]
    keys: keys::KeyArgs,

    /// Set any guard key: --set trim_threshold=0.7 (repeatable; names as in ROCMGUARD_<KEY>)
    #[arg(long = "set", value_name = "KEY=VALUE", value_parser = keys::parse_set)]
    set: Vec<(&'static str, String)>,

    /// Apply a named bundle of settings, printing what it sets and why (repeatable)
    #[arg(long, short = 'p', value_name = "NAME")]
    profile: Vec<String>,

    /// Read your profiles from this TOML file instead of $XDG_CONFIG_HOME/rocmguard/profiles.toml
    #[arg(long, value_name = "FILE")]
    profile_file: Option<PathBuf>,

    /// Print every profile with what it sets and why, then exit
    #[arg(long)]
    list_profiles: bool,

    /// The librocmguard.so to preload [default: $ROCMGUARD_LIB, else beside this binary or in ../lib]
    #[arg(long, value_name = "PATH")]
    lib: Option<PathBuf>,

    /// Run on hipsim, rocmguard's simulated HIP runtime (no GPU used; HIPSIM_VRAM sets its memory, 16GiB by default)
    #[arg(long)]
    sim: bool,

    /// Print the environment and command instead of running it
    #[arg(long)]
    dry_run: bool,

    /// Do not print the profiles' settings before the command starts
    #[arg(long, short)]
    quiet: bool,

    /// The command and its arguments (after `--` if it has options of its own)
    #[arg(
        value_name = "COMMAND",
        required_unless_present = "list_profiles",
        trailing_var_arg = true
    )]
    command: Vec<OsString>,
}

/// One variable the launcher sets, and what set it (a profile's name or an option).
#[derive(Clone, Debug, PartialEq, Eq)]
struct Assignment {
    var: String,
    value: String,
    origin: String,
}

pub fn exec(args: Args) -> Result<u8> {
    let catalog = Catalog::load(args.profile_file.as_deref())?;
    if args.list_profiles {
        print_stdout(&list_profiles(&catalog))?;
        return Ok(0);
    }

    let mut assignments: Vec<Assignment> = Vec::new();
    let mut set = |var: String, value: String, origin: String| {
        assignments.retain(|a| a.var != var);
        assignments.push(Assignment { var, value, origin });
    };
    let mut applied = Vec::new();
    for name in &args.profile {
        for (from, s) in catalog.resolve(name)? {
            set(s.var.clone(), s.value.clone(), from.clone());
            applied.push((from, s));
        }
    }
    for (name, value) in &args.keys.values {
        let key = find_key(name).map_err(anyhow::Error::msg)?;
        set(key.var(), value.clone(), format!("--{}", key.option_name()));
    }
    for (name, value) in &args.set {
        let key = find_key(name).map_err(anyhow::Error::msg)?;
        set(key.var(), value.clone(), "--set".to_string());
    }
    if !args.profile.is_empty() {
        set(
            "ROCMGUARD_PROFILE".to_string(),
            args.profile.join(","),
            "--profile".to_string(),
        );
    }

    check_cap(&assignments)?;
    let lib = find_library(args.lib.as_deref())?;
    let mut inherited = std::env::var_os("LD_PRELOAD").unwrap_or_default();
    let mut sim_vars = Vec::new();
    if args.sim {
        let root = sim::root(&std::env::current_exe()?)?;
        let mut with_sim = sim::runtime(&root).into_os_string();
        with_sim.push(":");
        with_sim.push(&inherited);
        inherited = with_sim;
        sim_vars = sim::variables(&root, std::env::var_os("LD_LIBRARY_PATH"));
        if !args.quiet {
            eprintln!(
                "rocmguard: --sim: on hipsim, the SIMULATED HIP runtime in {} (no GPU is used; \
                 HIPSIM_VRAM sets its memory, 16GiB by default)",
                root.join("lib").display()
            );
        }
    }
    let preload = preload_value(&lib, Some(&inherited));

    if !args.quiet && !applied.is_empty() {
        eprint!(
            "{}",
            explain(&catalog, &args.profile, &applied, &assignments)
        );
    }
    if args.dry_run {
        let mut text = format!("LD_PRELOAD={}\n", shell_quote(&preload.to_string_lossy()));
        for (var, value) in &sim_vars {
            text.push_str(&format!(
                "{}={}\n",
                var,
                shell_quote(&value.to_string_lossy())
            ));
        }
        for a in &assignments {
            text.push_str(&format!("{}={}\n", a.var, shell_quote(&a.value)));
        }
        let words: Vec<String> = args
            .command
            .iter()
            .map(|w| shell_quote(&w.to_string_lossy()))
            .collect();
        text.push_str(&format!("exec {}\n", words.join(" ")));
        print_stdout(&text)?;
        return Ok(0);
    }

    let (program, rest) = match args.command.split_first() {
        Some(split) => split,
        None => bail!("no command to run: rocmguard run [options] -- COMMAND ARGS..."),
    };
    let mut cmd = Command::new(program);
    cmd.args(rest).env("LD_PRELOAD", &preload).envs(sim_vars);
    for a in &assignments {
        cmd.env(&a.var, &a.value);
    }
    // Only returns on failure; the shell's codes: 127 not found, 126 not executable.
    let err = cmd.exec();
    let name = program.to_string_lossy();
    Ok(match err.kind() {
        io::ErrorKind::NotFound => {
            eprintln!(
                "rocmguard: cannot run `{}`: not found (is it on PATH, or spelled right?)",
                name
            );
            127
        }
        io::ErrorKind::PermissionDenied => {
            eprintln!(
                "rocmguard: cannot run `{}`: permission denied (not executable?)",
                name
            );
            126
        }
        _ => {
            eprintln!("rocmguard: cannot run `{}`: {}", name, err);
            126
        }
    })
}

/// Stops before the program starts when the cap it would read (inherited `ROCMGUARD_*`
/// variables with ours on top) is invalid: under the library alone it would get no memory.
fn check_cap(assignments: &[Assignment]) -> Result<()> {
    let inherited = std::env::vars_os()
        .filter_map(|(k, v)| Some((k.into_string().ok()?, v.into_string().ok()?)))
        .filter(|(k, _)| !assignments.iter().any(|a| a.var == *k));
    let ours = assignments.iter().map(|a| (a.var.clone(), a.value.clone()));
    let (config, _) = Config::from_vars(inherited.chain(ours));
    match config.invalid_cap {
        Some(e) => bail!(
            "error: {}; the program was not started",
            e.split(". Until").next().unwrap_or(&e)
        ),
        None => Ok(()),
    }
}

/// The message for an unknown option of `rocmguard run` (before the command), naming the
/// closest real option when one is a typo away; `None` for other errors.
pub fn unknown_option(cli: &clap::Command, error: &clap::Error) -> Option<String> {
    use clap::error::{ContextKind, ContextValue, ErrorKind};
    if error.kind() != ErrorKind::UnknownArgument {
        return None;
    }
    let given = match error.get(ContextKind::InvalidArg) {
        Some(ContextValue::String(s)) => s.split('=').next().unwrap_or(s).to_string(),
        _ => return None,
    };
    let run = cli.find_subcommand("run")?;
    let names = run.get_arguments().flat_map(|a| {
        a.get_long_and_visible_aliases()
            .unwrap_or_default()
            .into_iter()
            .map(|l| format!("--{}", l))
    });
    let closest = names
        .map(|n| (edit_distance(&given, &n), n))
        .filter(|(d, n)| *d <= 2 && *d < n.len() / 2)
        .min();
    let hint = match closest {
        Some((_, name)) => format!(" (did you mean `{}`?)", name),
        None => " (see `rocmguard run --help`)".to_string(),
    };
    Some(format!(
        "rocmguard run: unknown option `{}`{}; nothing was run. If it is the program's own \
         option, put the command after `--`: rocmguard run [OPTIONS] -- COMMAND [ARGS]...",
        given, hint
    ))
}

/// Levenshtein distance, with a swap of two neighbours counting as one edit (`--cpa`, `--cap`).
fn edit_distance(a: &str, b: &str) -> usize {
    let (a, b): (Vec<char>, Vec<char>) = (a.chars().collect(), b.chars().collect());
    let mut d = vec![vec![0usize; b.len() + 1]; a.len() + 1];
    for (i, row) in d.iter_mut().enumerate() {
        row[0] = i;
    }
    for (j, cell) in d[0].iter_mut().enumerate() {
        *cell = j;
    }
    for i in 1..=a.len() {
        for j in 1..=b.len() {
            let cost = usize::from(a[i - 1] != b[j - 1]);
            let mut best = (d[i - 1][j] + 1)
                .min(d[i][j - 1] + 1)
                .min(d[i - 1][j - 1] + cost);
            if i > 1 && j > 1 && a[i - 1] == b[j - 2] && a[i - 2] == b[j - 1] {
                best = best.min(d[i - 2][j - 2] + 1);
            }
            d[i][j] = best;
        }
    }
    d[a.len()][b.len()]
}

/// Writes `text` to stdout. A reader that went away (`rocmguard doctor | head`) is not an error:
/// `print!` would panic there.
pub(crate) fn print_stdout(text: &str) -> io::Result<()> {
    let mut out = io::stdout().lock();
    match out.write_all(text.as_bytes()).and_then(|()| out.flush()) {
        Err(e) if e.kind() == io::ErrorKind::BrokenPipe => Ok(()),
        other => other,
    }
}

/// `text` as a shell word: unchanged when it is plain, else in single quotes.
fn shell_quote(text: &str) -> String {
    let plain = !text.is_empty()
        && text
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || "-_./:=,%+@".contains(c));
    if plain {
        text.to_string()
    } else {
        format!("'{}'", text.replace('\'', "'\\''"))
    }
}

/// What the profiles set and why, for stderr before the command starts. Settings that a later
/// profile or an option replaced say so; so do values that replace the user's environment.
fn explain(
    catalog: &Catalog,
    names: &[String],
    applied: &[(String, profiles::Setting)],
    finals: &[Assignment],
) -> String {
    let mut out = String::new();
    let width = applied
        .iter()
        .map(|(_, s)| s.var.len() + s.value.len() + 1)
        .max()
        .unwrap_or(0);
    let mut shown: Vec<&str> = Vec::new();
    let mut printed: Vec<(&str, &str)> = Vec::new();
    for (from, s) in applied {
        // A profile reached twice (named and extended) is explained once.
        if printed.contains(&(from.as_str(), s.var.as_str())) {
            continue;
        }
        printed.push((from, &s.var));
        if !shown.contains(&from.as_str()) {
            shown.push(from);
            let about = catalog.get(from).map(|p| p.about.as_str()).unwrap_or("");
            let via = if names.iter().any(|n| n == from) {
                String::new()
            } else {
                " (extended)".to_string()
            };
            out.push_str(&format!("rocmguard: profile {}{}: {}\n", from, via, about));
        }
        let mut line = format!(
            "  {:<width$}  {}",
            format!("{}={}", s.var, s.value),
            s.why,
            width = width
        );
        match finals.iter().find(|a| a.var == s.var) {
            Some(last) if last.origin != *from || last.value != s.value => {
                line.push_str(&format!(" [replaced: {} sets {}]", last.origin, last.value));
            }
            _ => {
                if let Ok(old) = std::env::var(&s.var) {
                    if old != s.value {
                        line.push_str(&format!(" [was {} in your environment]", old));
                    }
                }
            }
        }
        out.push_str(&line);
        out.push('\n');
    }
    out
}

/// Every profile with its settings, for `--list-profiles`.
fn list_profiles(catalog: &Catalog) -> String {
    let mut out = String::new();
    for p in &catalog.profiles {
        let source = match &p.file {
            Some(f) => format!(" (from {})", f.display()),
            None => String::new(),
        };
        out.push_str(&format!("{}{}\n  {}\n", p.name, source, p.about));
        if !p.extends.is_empty() {
            out.push_str(&format!("  extends {}\n", p.extends.join(", ")));
        }
        for s in &p.settings {
            out.push_str(&format!("    {}={}\n        {}\n", s.var, s.value, s.why));
        }
        out.push('\n');
    }
    if let Some(f) = profiles::default_file() {
        out.push_str(&format!(
            "Your own profiles go in {} (or --profile-file); see `rocmguard run --help`.\n",
            f.display()
        ));
    }
    out
}

/// Where `librocmguard.so` is: `explicit` (`--lib`), else `$ROCMGUARD_LIB`, else beside this
/// binary, else in `../lib` or `../lib/rocmguard` relative to it (an installed layout). The
/// path is made absolute, since children may change directory before they load it.
pub fn find_library(explicit: Option<&Path>) -> Result<PathBuf> {
    let given = explicit
        .map(|p| (p.to_path_buf(), "--lib"))
        .or_else(|| std::env::var_os("ROCMGUARD_LIB").map(|p| (PathBuf::from(p), "ROCMGUARD_LIB")));
    if let Some((path, from)) = given {
        return path.canonicalize().map_err(|e| {
            anyhow::anyhow!(
                "{} {}: {} (point it at librocmguard.so)",
                from,
                path.display(),
                e
            )
        });
    }
    let exe = std::env::current_exe()?;
    let dir = exe.parent().unwrap_or_else(|| Path::new("/"));
    let candidates = [
        dir.join(LIB_NAME),
        dir.join("../lib").join(LIB_NAME),
        dir.join("../lib/rocmguard").join(LIB_NAME),
    ];
    for c in &candidates {
        if let Ok(path) = c.canonicalize() {
            return Ok(path);
        }
    }
    bail!(
        "cannot find {}: looked in {}; build it with `cargo build --release`, or set ROCMGUARD_LIB=/path/to/{}",
        LIB_NAME,
        candidates
            .iter()
            .map(|c| c.display().to_string())
            .collect::<Vec<_>>()
            .join(", "),
        LIB_NAME
    )
}

/// `lib` first, then what `LD_PRELOAD` held, without other copies of the library: two guards
/// would each pool the other's allocations.
pub fn preload_value(lib: &Path, existing: Option<&OsStr>) -> OsString {
    let mut value = lib.as_os_str().to_os_string();
    for entry in other_preloads(existing) {
        value.push(":");
        value.push(entry);
    }
    value
}

/// The entries of an `LD_PRELOAD` value (the loader splits on colons and spaces) that are not
/// `librocmguard.so`.
pub fn other_preloads(existing: Option<&OsStr>) -> Vec<String> {
    let existing = existing
        .map(|e| e.to_string_lossy().into_owned())
        .unwrap_or_default();
    existing
        .split([':', ' '])
        .filter(|e| !e.is_empty() && Path::new(e).file_name() != Some(OsStr::new(LIB_NAME)))
        .map(str::to_string)
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn quoting_for_the_dry_run() {
        assert_eq!(shell_quote("20GiB"), "20GiB");
        assert_eq!(shell_quote("a b"), "'a b'");
        assert_eq!(shell_quote("it's"), "'it'\\''s'");
        assert_eq!(shell_quote(""), "''");
    }

    #[test]
    fn preload_goes_first_once() {
        let lib = Path::new("/opt/rg/librocmguard.so");
        assert_eq!(
            preload_value(lib, None),
            OsString::from("/opt/rg/librocmguard.so")
        );
        assert_eq!(
            preload_value(
                lib,
                Some(OsStr::new("libfoo.so /x/libbar.so:/old/librocmguard.so:"))
            ),
            OsString::from("/opt/rg/librocmguard.so:libfoo.so:/x/libbar.so")
        );
    }
}
