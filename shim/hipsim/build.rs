//! Links `libamdhip64.so` like the real runtime: soname `libamdhip64.so.6` and the version nodes
//! that `src/api/` binds its exports to (`.symver` in `hip_export!`). Names and order follow
//! ROCm's `hipamd/src/hip_hcc.map.in`; a node may be empty here because the `.symver` directive,
//! not this script, assigns each symbol.

use std::env;
use std::fs;
use std::path::PathBuf;

/// ROCm's version nodes up to the newest one an export uses, each inheriting from the one
/// before, as in ROCm.
const NODES: &[&str] = &[
    "hip_4.2", "hip_4.3", "hip_4.4", "hip_4.5", "hip_5.0", "hip_5.1", "hip_5.2", "hip_5.3",
    "hip_5.5", "hip_5.6", "hip_6.0", "hip_6.1",
];

fn main() {
    println!("cargo:rerun-if-changed=build.rs");
    if env::var("CARGO_CFG_TARGET_OS").as_deref() != Ok("linux") {
        return;
    }
    let mut script = String::new();
    for (i, node) in NODES.iter().enumerate() {
        match i {
            0 => script.push_str(&format!("{} {{ }};\n", node)),
            _ => script.push_str(&format!("{} {{ }} {};\n", node, NODES[i - 1])),
        }
    }
    let path = PathBuf::from(env::var("OUT_DIR").expect("cargo sets OUT_DIR")).join("hip.map");
    fs::write(&path, script).expect("OUT_DIR is writable");
    println!(
        "cargo:rustc-cdylib-link-arg=-Wl,--version-script={}",
        path.display()
    );
    println!("cargo:rustc-cdylib-link-arg=-Wl,-soname,libamdhip64.so.6");
}
