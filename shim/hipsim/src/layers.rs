//! hipsim's modules in one import direction, checked over the sources: a module may use only
//! modules of the layers before its own. At the bottom the leaves (codes, cost figures,
//! counters, the platform); then the knobs; the memory table and the streams; the virtual memory
//! table; the locked state over them; the queue of simulated work and IPC over the state; the
//! exported calls (`api/`); last the exports that lean on `api`'s bodies.

/// Bottom first. Every module of the crate is in exactly one layer (`api` stands for `api.rs`
/// and `api/`).
const LAYERS: &[&[&str]] = &[
    &["error", "cost", "counters", "sys"],
    &["config"],
    &["memory", "streams", "selfcall"],
    &["vmm"],
    &["state", "props"],
    &["work", "ipc"],
    &["api"],
    &["peer", "pitch", "share"],
];

mod tests {
    use super::LAYERS;
    use std::collections::BTreeSet;
    use std::fs;
    use std::path::Path;

    fn layer(module: &str) -> Option<usize> {
        LAYERS.iter().position(|l| l.contains(&module))
    }

    /// The crate modules a source names (`crate::name`), outside comments.
    fn uses(source: &str) -> BTreeSet<String> {
        let mut found = BTreeSet::new();
        for line in source.lines() {
            let code = line.split("//").next().unwrap_or("");
            for part in code.split("crate::").skip(1) {
                let name: String = part
                    .chars()
                    .take_while(|c| c.is_ascii_lowercase() || *c == '_')
                    .collect();
                if !name.is_empty() {
                    found.insert(name);
                }
            }
        }
        found
    }

    #[test]
    fn every_module_uses_only_the_layers_below_its_own() {
        let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
        let mut files = Vec::new();
        for dir in [src.clone(), src.join("api")] {
            for entry in fs::read_dir(&dir).unwrap() {
                let path = entry.unwrap().path();
                if path.extension().map_or(false, |e| e == "rs") {
                    files.push(path);
                }
            }
        }
        let mut breaches = Vec::new();
        for path in files {
            let stem = path.file_stem().unwrap().to_str().unwrap().to_string();
            let module = match path.parent() == Some(src.join("api").as_path()) {
                true => "api".to_string(),
                false => stem,
            };
            if module == "lib" || module == "layers" {
                continue;
            }
            let own = layer(&module).unwrap_or_else(|| panic!("{} is in no layer", module));
            for used in uses(&fs::read_to_string(&path).unwrap()) {
                if used == module {
                    continue;
                }
                match layer(&used) {
                    Some(l) if l < own => {}
                    _ => breaches.push(format!("{} uses {}", path.display(), used)),
                }
            }
        }
        assert!(breaches.is_empty(), "{:#?}", breaches);
    }

    #[test]
    fn the_check_sees_an_upward_use() {
        let used =
            uses("use crate::state::{self, Sim}; // crate::work\nlet x = crate::vmm::GRANULARITY;");
        assert_eq!(used.into_iter().collect::<Vec<_>>(), ["state", "vmm"]);
        assert!(layer("memory") < layer("state"));
    }
}
