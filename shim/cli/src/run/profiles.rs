//! Named bundles of settings: the environment variables that the field's guides paste, each with
//! the reason it is set, so `rocmguard run --profile NAME` says what it does before the program
//! starts. Built-in profiles below; users add their own in a TOML file:
//!
//! ```toml
//! [my-7900]
//! about = "7900 XTX with the desktop on it"
//! extends = "24gb"                  # or a list: ["24gb", "debug"]
//! cap = "21GiB"                     # any rocmguard key, by name or option name
//! env.HSA_ENABLE_SDMA = { value = "0", why = "copies hung on this board" }
//! env.MIOPEN_FIND_MODE = "FAST"
//! ```

use std::path::{Path, PathBuf};

use anyhow::{anyhow, bail, Context, Result};
use rocmguard_core::topology::GfxVersion;

use crate::doctor::alloc_conf;
use rocmguard_core::config::find_key;

/// One variable a profile sets, and why.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Setting {
    pub var: String,
    pub value: String,
    pub why: String,
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Profile {
    pub name: String,
    pub about: String,
    /// Profiles applied first, in order.
    pub extends: Vec<String>,
    pub settings: Vec<Setting>,
    /// `None` for built-ins, else the file it came from.
    pub file: Option<PathBuf>,
}

/// (variable, value, why) rows of a built-in profile.
type Rows = &'static [(&'static str, &'static str, &'static str)];

const BUILTIN: &[(&str, &str, Rows)] = &[
    (
        "strix-halo",
        "Ryzen AI Max (Strix Halo, gfx1151) and other APUs: the GPU's memory is system RAM",
        &[
            (
                "ROCMGUARD_UMA",
                "1",
                "report and cap unified memory (GTT, TTM's page limit and RAM less a host reserve) instead of the small BIOS carve-out that hipMemGetInfo shows, so PyTorch sizes itself to what the GPU can use",
            ),
            (
                "HSA_ENABLE_SDMA",
                "0",
                "copy with shader kernels instead of the SDMA engines: the field's workaround for stalled and corrupted host/device copies on gfx11 APUs",
            ),
            (
                "TORCH_ROCM_AOTRITON_ENABLE_EXPERIMENTAL",
                "1",
                "let PyTorch use AOTriton's flash and memory-efficient attention on consumer gfx11 parts, where it is still marked experimental: long sequences need far less memory",
            ),
        ],
    ),
    (
        "rdna2",
        "Radeon RX 6000 (RDNA2: gfx1030, gfx1031, gfx1032, gfx1034, gfx1035, gfx1036)",
        &[
            (
                "HSA_OVERRIDE_GFX_VERSION",
                "10.3.0",
                "the official ROCm and PyTorch builds carry gfx1030 kernels only; the other RDNA2 chips run them (same instruction set). No effect on gfx1030",
            ),
            (
                "HSA_XNACK",
                "0",
                "RDNA has no XNACK (retry of GPU page faults): ask for code objects built without it",
            ),
            (
                "HSA_USE_SVM",
                "0",
                "allocate through ROCr's classic path instead of shared virtual memory (HMM): the field's workaround for 'Memory access fault by GPU' on consumer RDNA cards",
            ),
        ],
    ),
    (
        "rdna1",
        "Radeon RX 5000 (RDNA1: gfx1010, gfx1012), no official ROCm support",
        &[
            (
                "HSA_OVERRIDE_GFX_VERSION",
                "10.3.0",
                "the official builds carry no gfx101x kernels; the gfx1030 ones run most PyTorch operations on RDNA1, some fault (a build for gfx1010 is the real fix)",
            ),
            (
                "HSA_XNACK",
                "0",
                "RDNA has no XNACK (retry of GPU page faults): ask for code objects built without it",
            ),
            (
                "HSA_USE_SVM",
                "0",
                "allocate through ROCr's classic path instead of shared virtual memory (HMM): the field's workaround for 'Memory access fault by GPU' on RDNA1",
            ),
            (
                "HSA_ENABLE_SDMA",
                "0",
                "copy with shader kernels instead of the SDMA engines: the field's workaround for hangs in host/device copies on RDNA1",
            ),
        ],
    ),
    (
        "24gb",
        "RX 7900 XTX class (24 GiB) cards that also drive a desktop",
        &[
            (
                "ROCMGUARD_VRAM_LIMIT",
                "20GiB",
                "leave 4 GiB of the 24 to the desktop, the HIP runtime and the rocBLAS/MIOpen workspaces that live outside the pool",
            ),
            (
                "ROCMGUARD_HEADROOM",
                "1GiB",
                "keep 1 GiB free on the device whenever the pool grows, so library handles and workspaces created later still fit",
            ),
        ],
    ),
    (
        "debug",
        "find the failing kernel: every launch and copy waits, so an error surfaces at the call that caused it (slow)",
        &[
            (
                "AMD_SERIALIZE_KERNEL",
                "3",
                "wait for the device before and after every kernel launch",
            ),
            (
                "AMD_SERIALIZE_COPY",
                "3",
                "wait for the device before and after every copy",
            ),
            (
                "HIP_LAUNCH_BLOCKING",
                "1",
                "launches return once the kernel finished, so an error names its own launch (CUDA_LAUNCH_BLOCKING's HIP twin)",
            ),
            (
                "PYTORCH_USE_CUDA_DSA",
                "1",
                "turn on PyTorch's device-side assertions (read by PyTorch builds compiled with TORCH_USE_HIP_DSA; others ignore it)",
            ),
            (
                "ROCMGUARD_LOG",
                "debug",
                "rocmguard logs every pool growth, trim, retry and out-of-memory",
            ),
        ],
    ),
];

/// The built-in profiles.
pub fn builtin() -> Vec<Profile> {
    BUILTIN
        .iter()
        .map(|(name, about, rows)| Profile {
            name: name.to_string(),
            about: about.to_string(),
            extends: Vec::new(),
            settings: rows
                .iter()
                .map(|(var, value, why)| Setting {
                    var: var.to_string(),
                    value: value.to_string(),
                    why: why.to_string(),
                })
                .collect(),
            file: None,
        })
        .collect()
}

/// `$XDG_CONFIG_HOME/rocmguard/profiles.toml`, else `~/.config/rocmguard/profiles.toml`.
pub fn default_file() -> Option<PathBuf> {
    let config = std::env::var_os("XDG_CONFIG_HOME")
        .filter(|d| !d.is_empty())
        .map(PathBuf::from)
        .or_else(|| std::env::var_os("HOME").map(|h| PathBuf::from(h).join(".config")))?;
    Some(config.join("rocmguard/profiles.toml"))
}

/// Built-in profiles and the user's, by name; a user profile replaces a built-in of its name.
#[derive(Clone, Debug)]
pub struct Catalog {
    pub profiles: Vec<Profile>,
}

impl Catalog {
    /// The built-ins plus `file` (which must exist) or, without one, the default file if any.
    pub fn load(file: Option<&Path>) -> Result<Catalog> {
        let mut profiles = builtin();
        let user = match file {
            Some(f) => Some(f.to_path_buf()),
            None => default_file().filter(|f| f.exists()),
        };
        if let Some(path) = user {
            let text = std::fs::read_to_string(&path)
                .with_context(|| format!("cannot read the profile file {}", path.display()))?;
            for p in parse_file(&text, &path)? {
                profiles.retain(|b| b.name != p.name);
                profiles.push(p);
            }
        }
        Ok(Catalog { profiles })
    }

    pub fn get(&self, name: &str) -> Result<&Profile> {
        self.profiles
            .iter()
            .find(|p| p.name == name)
            .ok_or_else(|| {
                anyhow!(
                    "no profile `{}`; the profiles are: {} (see `rocmguard run --list-profiles`)",
                    name,
                    self.names().join(", ")
                )
            })
    }

    pub fn names(&self) -> Vec<&str> {
        self.profiles.iter().map(|p| p.name.as_str()).collect()
    }

    /// The settings of `name` with those of the profiles it extends first, as
    /// (profile that set it, setting) in the order they apply.
    pub fn resolve(&self, name: &str) -> Result<Vec<(String, Setting)>> {
        let mut out = Vec::new();
        self.resolve_into(name, &mut Vec::new(), &mut out)?;
        Ok(out)
    }

    fn resolve_into(
        &self,
        name: &str,
        path: &mut Vec<String>,
        out: &mut Vec<(String, Setting)>,
    ) -> Result<()> {
        if path.iter().any(|p| p == name) {
            bail!(
                "profile `{}` extends itself: {} -> {}",
                name,
                path.join(" -> "),
                name
            );
        }
        let profile = self.get(name)?;
        path.push(name.to_string());
        for base in &profile.extends {
            self.resolve_into(base, path, out)?;
        }
        path.pop();
        out.extend(
            profile
                .settings
                .iter()
                .map(|s| (profile.name.clone(), s.clone())),
        );
        Ok(())
    }
}

/// Checks one setting where rocmguard knows the variable: its own keys, the PyTorch allocator
/// line and `HSA_OVERRIDE_GFX_VERSION`. Others are passed as they are.
pub fn check_setting(var: &str, value: &str) -> Result<(), String> {
    if var.is_empty() || var.contains('=') || var.contains('\0') {
        return Err(format!("`{}` is not an environment variable name", var));
    }
    if let Some(name) = var.strip_prefix("ROCMGUARD_") {
        return find_key(name)?.check(value);
    }
    if alloc_conf::VARS.contains(&var) {
        return alloc_conf::parse(value).map(|_| ());
    }
    if var == "HSA_OVERRIDE_GFX_VERSION" {
        return GfxVersion::parse_override(value).map(|_| ());
    }
    Ok(())
}

/// Reads a profile file (format in the module docs).
pub fn parse_file(text: &str, path: &Path) -> Result<Vec<Profile>> {
    let table: toml::Table =
        toml::from_str(text).with_context(|| format!("{} is not valid TOML", path.display()))?;
    let mut profiles = Vec::new();
    for (name, body) in table {
        let at = format!("{}: profile `{}`", path.display(), name);
        let body = body
            .as_table()
            .ok_or_else(|| anyhow!("{}: write it as a table, [{}]", at, name))?;
        let mut profile = Profile {
            name: name.clone(),
            about: String::new(),
            extends: Vec::new(),
            settings: Vec::new(),
            file: Some(path.to_path_buf()),
        };
        for (key, value) in body {
            match key.as_str() {
                "about" => {
                    profile.about = value
                        .as_str()
                        .ok_or_else(|| anyhow!("{}: `about` must be a string", at))?
                        .to_string()
                }
                "extends" => {
                    profile.extends = string_list(value).map_err(|e| anyhow!("{}: {}", at, e))?
                }
                "env" => {
                    let vars = value.as_table().ok_or_else(|| {
                        anyhow!("{}: `env` must be a table of VARIABLE = value", at)
                    })?;
                    for (var, v) in vars {
                        profile
                            .settings
                            .push(setting(var, v, path).map_err(|e| anyhow!("{}: {}", at, e))?);
                    }
                }
                other => {
                    let k = find_key(other)
                        .map_err(|e| anyhow!("{}: {} (or about, extends, env)", at, e))?;
                    profile.settings.push(
                        setting(&k.var(), value, path).map_err(|e| anyhow!("{}: {}", at, e))?,
                    );
                }
            }
        }
        profiles.push(profile);
    }
    Ok(profiles)
}

fn string_list(value: &toml::Value) -> Result<Vec<String>, String> {
    match value {
        toml::Value::String(s) => Ok(vec![s.clone()]),
        toml::Value::Array(items) => items
            .iter()
            .map(|i| {
                i.as_str()
                    .map(str::to_string)
                    .ok_or_else(|| "`extends` lists profile names".to_string())
            })
            .collect(),
        _ => Err("`extends` is a profile name or a list of them".to_string()),
    }
}

/// `VAR = "value"`, a number or boolean, or `{ value = ..., why = "..." }`.
fn setting(var: &str, value: &toml::Value, path: &Path) -> Result<Setting, String> {
    let (value, why) = match value {
        toml::Value::Table(t) => {
            let v = t
                .get("value")
                .ok_or_else(|| format!("{} = {{ ... }} needs a `value`", var))?;
            let why = t.get("why").and_then(|w| w.as_str()).map(str::to_string);
            (scalar(var, v)?, why)
        }
        v => (scalar(var, v)?, None),
    };
    check_setting(var, &value).map_err(|e| format!("{}={}: {}", var, value, e))?;
    Ok(Setting {
        var: var.to_string(),
        value,
        why: why.unwrap_or_else(|| format!("set in {}", path.display())),
    })
}

fn scalar(var: &str, value: &toml::Value) -> Result<String, String> {
    match value {
        toml::Value::String(s) => Ok(s.clone()),
        toml::Value::Integer(i) => Ok(i.to_string()),
        toml::Value::Float(f) => Ok(f.to_string()),
        toml::Value::Boolean(b) => Ok(if *b { "1" } else { "0" }.to_string()),
        _ => Err(format!("{} must be a string, number or boolean", var)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn builtins_are_valid() {
        let names: Vec<String> = builtin().into_iter().map(|p| p.name).collect();
        assert_eq!(names, ["strix-halo", "rdna2", "rdna1", "24gb", "debug"]);
        for p in builtin() {
            assert!(!p.settings.is_empty());
            for s in &p.settings {
                assert_eq!(
                    check_setting(&s.var, &s.value),
                    Ok(()),
                    "{} {}",
                    p.name,
                    s.var
                );
            }
        }
    }

    #[test]
    fn user_file() {
        let text = r#"
            [mine]
            about = "mine"
            extends = ["24gb", "debug"]
            cap = "21GiB"
            trim-threshold = 0.7
            stats = true
            env.HSA_ENABLE_SDMA = { value = "0", why = "copies hung" }
            env.MIOPEN_FIND_MODE = "FAST"

            [debug]
            about = "mine replaces the built-in"
            env.AMD_LOG_LEVEL = 4
        "#;
        let path = Path::new("profiles.toml");
        let parsed = parse_file(text, path).unwrap();
        let mine = &parsed[0];
        let vars: Vec<(&str, &str)> = mine
            .settings
            .iter()
            .map(|s| (s.var.as_str(), s.value.as_str()))
            .collect();
        assert_eq!(
            vars,
            [
                ("ROCMGUARD_VRAM_LIMIT", "21GiB"),
                ("ROCMGUARD_TRIM_THRESHOLD", "0.7"),
                ("ROCMGUARD_STATS", "1"),
                ("HSA_ENABLE_SDMA", "0"),
                ("MIOPEN_FIND_MODE", "FAST"),
            ]
        );
        assert_eq!(mine.settings[3].why, "copies hung");
        assert!(mine.settings[4].why.contains("profiles.toml"));

        let catalog = Catalog {
            profiles: {
                let mut all = builtin();
                for p in parsed {
                    all.retain(|b| b.name != p.name);
                    all.push(p);
                }
                all
            },
        };
        let order: Vec<(String, String)> = catalog
            .resolve("mine")
            .unwrap()
            .into_iter()
            .map(|(from, s)| (from, s.var))
            .collect();
        assert_eq!(
            order[0],
            ("24gb".to_string(), "ROCMGUARD_VRAM_LIMIT".to_string())
        );
        assert_eq!(order[2], ("debug".to_string(), "AMD_LOG_LEVEL".to_string()));
        assert_eq!(order.len(), 2 + 1 + 5);
    }

    #[test]
    fn bad_files_say_where() {
        let path = Path::new("p.toml");
        let err = |text: &str| format!("{:#}", parse_file(text, path).unwrap_err());
        assert!(err("[a]\ncapp = \"1G\"").contains("unknown key `capp`"));
        assert!(err("[a]\ncap = \"1XB\"").contains("unknown unit"));
        assert!(
            err("[a]\nenv.PYTORCH_HIP_ALLOC_CONF = \"max_split_size_mb:8\"")
                .contains("max_split_size_mb")
        );
        assert!(
            err("[a]\nenv.HSA_OVERRIDE_GFX_VERSION = \"gfx1030\"").contains("major.minor.stepping")
        );
        assert!(err("a = 1").contains("table"));
        let looped = Catalog {
            profiles: parse_file("[a]\nextends = \"b\"\n[b]\nextends = \"a\"", path).unwrap(),
        };
        assert!(looped
            .resolve("a")
            .unwrap_err()
            .to_string()
            .contains("extends itself"));
        assert!(looped.get("c").unwrap_err().to_string().contains("a, b"));
    }
}
