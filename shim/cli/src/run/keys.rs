//! Command-line options generated from the configuration table, so every key of
//! `rocmguard_core::KEYS` is an option of `rocmguard run` with the key's own help, and a new key
//! needs no CLI change: `--trim-threshold 0.7` is `ROCMGUARD_TRIM_THRESHOLD=0.7`.

use clap::{Arg, ArgAction, ArgMatches, Command};
use rocmguard_core::config::Key;
use rocmguard_core::{Config, KEYS};

/// Options whose name is not the key's: `--cap` is what people say for a VRAM limit.
const ALIASES: &[(&str, &str)] = &[("vram_limit", "cap")];

/// The values given through the generated options, as (key name, value).
#[derive(Clone, Debug, Default)]
pub struct KeyArgs {
    pub values: Vec<(&'static str, String)>,
}

/// `--cap` for `vram_limit`, `--trim-threshold` for `trim_threshold`.
pub fn option_name(key: &Key) -> String {
    ALIASES
        .iter()
        .find(|(name, _)| *name == key.name)
        .map_or_else(
            || key.name.replace('_', "-"),
            |(_, alias)| alias.to_string(),
        )
}

/// Finds a key as people may write it: `trim_threshold`, `trim-threshold`, `TRIM_THRESHOLD`,
/// `ROCMGUARD_TRIM_THRESHOLD`, or an option alias such as `cap`.
pub fn find_key(name: &str) -> Result<&'static Key, String> {
    let lower = name.trim().to_ascii_lowercase().replace('-', "_");
    let bare = lower.strip_prefix("rocmguard_").unwrap_or(&lower);
    let bare = ALIASES
        .iter()
        .find(|(_, alias)| *alias == bare)
        .map_or(bare, |(key, _)| key);
    KEYS.iter().find(|k| k.name == bare).ok_or_else(|| {
        format!(
            "unknown key `{}`; the keys are: {}",
            name,
            KEYS.iter().map(|k| k.name).collect::<Vec<_>>().join(", ")
        )
    })
}

/// Checks `value` for `key` with the same setter the shim uses; the error says why.
pub fn check_value(key: &Key, value: &str) -> Result<(), String> {
    let mut warnings = Vec::new();
    Config::default().apply(key.name, value, &key.var(), &mut warnings);
    match warnings.into_iter().next() {
        None => Ok(()),
        // The shim's warning says where the value came from and ends with what the shim does
        // instead ("; using the default ..."); the launcher refuses to start, so keep the why.
        Some(w) => {
            let marker = format!("{}={}: ", key.name, value);
            let why = w
                .find(&marker)
                .map_or(w.as_str(), |at| &w[at + marker.len()..]);
            Err(why
                .split("; using the default")
                .next()
                .unwrap_or(why)
                .to_string())
        }
    }
}

/// Parses `--set KEY=VALUE`.
pub fn parse_set(text: &str) -> Result<(&'static str, String), String> {
    let (name, value) = text.split_once('=').ok_or_else(|| {
        format!(
            "`{}` is not KEY=VALUE (for example trim_threshold=0.7)",
            text
        )
    })?;
    let key = find_key(name)?;
    check_value(key, value)?;
    Ok((key.name, value.to_string()))
}

/// A key that reads `yes` and `no` as two different settings and refuses other words is a
/// switch: `--stats` alone means `--stats=1`.
fn is_switch(key: &Key) -> bool {
    let setting = |value: &str| {
        let mut config = Config::default();
        let mut warnings = Vec::new();
        config.apply(key.name, value, "", &mut warnings);
        (config, warnings.is_empty())
    };
    let (yes, yes_ok) = setting("yes");
    let (no, no_ok) = setting("no");
    let (_, other_ok) = setting("sometimes");
    yes_ok && no_ok && !other_ok && yes != no
}

fn arg_for(key: &'static Key) -> Arg {
    let name = key.name;
    let arg = Arg::new(name)
        .long(option_name(key))
        .value_name(key.name.to_ascii_uppercase())
        .help(format!(
            "{} [{}; default {}]",
            key.help,
            key.var(),
            key.default
        ))
        .help_heading("Guard settings (each is also a ROCMGUARD_* variable)")
        .action(ArgAction::Set)
        .value_parser(move |v: &str| -> Result<String, String> {
            check_value(find_key(name)?, v).map(|()| v.to_string())
        });
    let arg = if key.name == "vram_limit" {
        arg.visible_alias("vram-limit")
    } else {
        arg
    };
    if is_switch(key) {
        // `=` required, so `--stats python train.py` does not take `python` as the value.
        arg.num_args(0..=1)
            .require_equals(true)
            .default_missing_value("1")
    } else {
        arg
    }
}

impl clap::FromArgMatches for KeyArgs {
    fn from_arg_matches(matches: &ArgMatches) -> Result<Self, clap::Error> {
        let mut args = KeyArgs::default();
        args.update_from_arg_matches(matches)?;
        Ok(args)
    }

    fn update_from_arg_matches(&mut self, matches: &ArgMatches) -> Result<(), clap::Error> {
        for key in KEYS {
            if let Some(v) = matches.get_one::<String>(key.name) {
                self.values.retain(|(name, _)| *name != key.name);
                self.values.push((key.name, v.clone()));
            }
        }
        Ok(())
    }
}

impl clap::Args for KeyArgs {
    fn augment_args(cmd: Command) -> Command {
        KEYS.iter().fold(cmd, |cmd, key| cmd.arg(arg_for(key)))
    }

    fn augment_args_for_update(cmd: Command) -> Command {
        Self::augment_args(cmd)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_people_write() {
        for name in [
            "trim_threshold",
            "trim-threshold",
            "ROCMGUARD_TRIM_THRESHOLD",
            "Trim_Threshold",
        ] {
            assert_eq!(find_key(name).unwrap().name, "trim_threshold", "{}", name);
        }
        assert_eq!(find_key("cap").unwrap().name, "vram_limit");
        let err = find_key("vram_limt").map(|k| k.name).unwrap_err();
        assert!(
            err.contains("vram_limit") && err.contains("headroom"),
            "{}",
            err
        );
    }

    #[test]
    fn values_are_checked_by_the_table() {
        let key = find_key("vram_limit").unwrap();
        assert!(check_value(key, "20GiB").is_ok());
        let err = check_value(key, "20XB").unwrap_err();
        assert!(err.contains("unknown unit"), "{}", err);
        assert!(!err.contains("using the default"), "{}", err);
        assert_eq!(
            parse_set("cap=85%").unwrap(),
            ("vram_limit", "85%".to_string())
        );
        assert!(parse_set("retries").unwrap_err().contains("KEY=VALUE"));
        assert!(parse_set("retries=many").is_err());
    }

    #[test]
    fn switches_are_the_boolean_keys() {
        let switches: Vec<&str> = KEYS
            .iter()
            .filter(|k| is_switch(k))
            .map(|k| k.name)
            .collect();
        assert!(
            switches.contains(&"stats") && switches.contains(&"disable"),
            "{:?}",
            switches
        );
        for valued in ["vram_limit", "headroom", "trace", "retries", "log"] {
            assert!(!switches.contains(&valued), "{}", valued);
        }
    }
}
