//! Command-line options generated from the configuration table, so every key of
//! `rocmguard_core::KEYS` is an option of `rocmguard run` with the key's own help, and a new key
//! needs no CLI change: `--trim-threshold 0.7` is `ROCMGUARD_TRIM_THRESHOLD=0.7`.

use clap::{Arg, ArgAction, ArgMatches, Command};
use rocmguard_core::config::{find_key, Key};
use rocmguard_core::KEYS;

/// The values given through the generated options, as (key name, value).
#[derive(Clone, Debug, Default)]
pub struct KeyArgs {
    pub values: Vec<(&'static str, String)>,
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
    key.check(value)?;
    Ok((key.name, value.to_string()))
}

fn arg_for(key: &'static Key) -> Arg {
    let name = key.name;
    let arg = Arg::new(name)
        .long(key.option_name())
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
            let key = find_key(name)?;
            key.check(v).map(|()| v.to_string()).map_err(|why| {
                format!(
                    "{}; for example --{} {}",
                    why,
                    key.option_name(),
                    key.example
                )
            })
        });
    let arg = if key.name == "vram_limit" {
        arg.visible_alias("vram-limit")
    } else {
        arg
    };
    if key.is_switch() {
        // `=` required, so `--stats python train.py` does not take `python` as the value.
        arg.num_args(0..=1)
            .require_equals(true)
            .default_missing_value("1")
    } else {
        // `--cap -5GiB`: the value, checked as a cap, not an unknown option `-5`.
        arg.allow_hyphen_values(true)
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
    fn set_takes_a_checked_key_value() {
        assert_eq!(
            parse_set("cap=85%").unwrap(),
            ("vram_limit", "85%".to_string())
        );
        assert!(parse_set("retries").unwrap_err().contains("KEY=VALUE"));
        assert!(parse_set("retries=many").is_err());
    }
}
