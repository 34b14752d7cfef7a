//! The options of `rocmguard run`, as on Linux: every key of the core's configuration table is
//! an option (`--trim-threshold 0.7` is `ROCMGUARD_TRIM_THRESHOLD=0.7`, `--cap` is
//! `vram_limit`), `--set KEY=VALUE` sets any key, and values are checked with the setter the
//! guard itself uses, so a bad one stops the launch with the guard's own reason.

use std::ffi::OsString;
use std::fmt::Write as _;
use std::path::PathBuf;

use rocmguard_core::config::{find_key, Key};
use rocmguard_core::KEYS;

#[derive(Debug, Default)]
pub struct Run {
    /// `(ROCMGUARD_ variable, value)` in the order given; a later one for a key wins.
    pub vars: Vec<(String, String)>,
    pub dll: Option<PathBuf>,
    pub dry_run: bool,
    pub command: Vec<OsString>,
}

/// Checks `value` for `key` with the guard's own setter; the error names the option and says why.
fn check_value(key: &Key, value: &str) -> Result<(), String> {
    key.check(value)
        .map_err(|why| format!("--{} {}: {}", key.option_name(), value, why))
}

/// Parses the words after `run`.
pub fn parse(args: Vec<OsString>) -> Result<Run, String> {
    let mut run = Run::default();
    let mut words = args.into_iter();
    while let Some(word) = words.next() {
        let text = match word.to_str() {
            Some(t) if t.starts_with("--") => t.to_string(),
            _ => {
                run.command.push(word);
                break;
            }
        };
        if text == "--" {
            break;
        }
        let (name, inline) = match text[2..].split_once('=') {
            Some((n, v)) => (n.to_string(), Some(v.to_string())),
            None => (text[2..].to_string(), None),
        };
        let mut value = |what: &str| -> Result<String, String> {
            match inline.clone() {
                Some(v) => Ok(v),
                None => words
                    .next()
                    .and_then(|v| v.into_string().ok())
                    .ok_or_else(|| format!("--{} needs {}", name, what)),
            }
        };
        match name.as_str() {
            "dll" => run.dll = Some(PathBuf::from(value("a path")?)),
            "dry-run" => run.dry_run = true,
            "set" => {
                let pair = value("KEY=VALUE")?;
                let (k, v) = pair.split_once('=').ok_or_else(|| {
                    format!(
                        "--set {}: not KEY=VALUE (for example trim_threshold=0.7)",
                        pair
                    )
                })?;
                let key = find_key(k)?;
                check_value(key, v)?;
                set(&mut run.vars, key.var(), v.to_string());
            }
            option => {
                let key = KEYS
                    .iter()
                    .find(|k| {
                        k.option_name() == option
                            || (k.name == "vram_limit" && option == "vram-limit")
                    })
                    .ok_or_else(|| {
                        format!("unknown option --{} (see rocmguard run --help)", option)
                    })?;
                let v = match (&inline, key.is_switch()) {
                    (None, true) => "1".to_string(),
                    _ => value("a value")?,
                };
                check_value(key, &v)?;
                set(&mut run.vars, key.var(), v);
            }
        }
    }
    run.command.extend(words);
    if run.command.is_empty() {
        return Err("no command to run: rocmguard run [options] -- COMMAND ARGS...".to_string());
    }
    Ok(run)
}

fn set(vars: &mut Vec<(String, String)>, var: String, value: String) {
    vars.retain(|(v, _)| *v != var);
    vars.push((var, value));
}

/// The help of `rocmguard run`, its key options generated from the configuration table.
pub fn help() -> String {
    let mut out = String::from(
        "Usage: rocmguard run [OPTIONS] [--] COMMAND [ARGS]...\n\n\
         Starts COMMAND suspended, injects rocmguard.dll, resumes it, waits for it and exits\n\
         with its exit code. If the DLL cannot be injected, COMMAND still runs, unguarded.\n\n\
         Examples:\n  rocmguard run --cap 20GiB -- python train.py\n  \
         rocmguard run --cap 85% --stats -- python generate.py\n\n\
         Options:\n  \
         --set KEY=VALUE   set any guard key (repeatable; names as in ROCMGUARD_<KEY>)\n  \
         --dll PATH        the rocmguard.dll to inject\n                    \
         [default: $ROCMGUARD_LIB, else beside rocmguard.exe]\n  \
         --dry-run         print the environment and command instead of running it\n\n\
         Guard settings (each is also a ROCMGUARD_* variable):\n",
    );
    for key in KEYS {
        let value = if key.is_switch() {
            String::from("[=0|1]")
        } else {
            format!(" {}", key.name.to_ascii_uppercase())
        };
        let _ = writeln!(
            out,
            "  --{}{}\n      {} [{}; default {}]",
            key.option_name(),
            value,
            key.help,
            key.var(),
            key.default
        );
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn words(text: &str) -> Vec<OsString> {
        text.split_whitespace().map(OsString::from).collect()
    }

    #[test]
    fn options_become_variables() {
        let run = parse(words(
            "--cap 1GiB --stats --set trim_threshold=0.7 --headroom=64MiB -- prog.exe --cap x",
        ))
        .unwrap();
        assert_eq!(
            run.vars,
            vec![
                ("ROCMGUARD_VRAM_LIMIT".to_string(), "1GiB".to_string()),
                ("ROCMGUARD_STATS".to_string(), "1".to_string()),
                ("ROCMGUARD_TRIM_THRESHOLD".to_string(), "0.7".to_string()),
                ("ROCMGUARD_HEADROOM".to_string(), "64MiB".to_string()),
            ]
        );
        assert_eq!(run.command, words("prog.exe --cap x"));
    }

    #[test]
    fn bad_values_and_names_stop_the_launch() {
        assert!(parse(words("--trim-threshold 2 -- p"))
            .unwrap_err()
            .contains("at most 1"));
        assert!(parse(words("--set cpa=1 -- p"))
            .unwrap_err()
            .contains("unknown key"));
        assert!(parse(words("--frobnicate -- p"))
            .unwrap_err()
            .contains("unknown option"));
        assert!(parse(words("--cap 1GiB")).is_err());
    }
}
