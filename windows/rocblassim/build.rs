//! Links `rocblas.dll` like the real rocBLAS for Windows: it imports `hipMalloc` and `hipFree`
//! from `amdhip64_6.dll`, so loading it loads the HIP runtime found at run time (the simulated
//! one here) and its calls go through its import table, where rocmguard.dll patches them.
//!
//! The runtime is another crate that cargo may build after this one, so the link uses an import
//! library made here from a two-line module definition (the Windows counterpart of the Linux
//! build's soname stub): `dlltool` for the gnu target, `lib.exe` for msvc.

use std::env;
use std::fs;
use std::path::PathBuf;
use std::process::Command;

const DEF: &str = "LIBRARY amdhip64_6.dll\nEXPORTS\n    hipMalloc\n    hipFree\n";

fn main() {
    println!("cargo:rerun-if-changed=build.rs");
    if env::var("CARGO_CFG_TARGET_OS").as_deref() != Ok("windows") {
        return;
    }
    let dir = PathBuf::from(env::var("OUT_DIR").expect("cargo sets OUT_DIR")).join("hip-import");
    fs::create_dir_all(&dir).expect("OUT_DIR is writable");
    let def = dir.join("amdhip64_6.def");
    fs::write(&def, DEF).expect("OUT_DIR is writable");
    let msvc = env::var("CARGO_CFG_TARGET_ENV").as_deref() == Ok("msvc");
    let (tool, status) = if msvc {
        let lib = dir.join("amdhip64_6.lib");
        let status = Command::new("lib.exe")
            .arg("/nologo")
            .arg("/machine:x64")
            .arg(format!("/def:{}", def.display()))
            .arg(format!("/out:{}", lib.display()))
            .status();
        (
            "lib.exe (from a Visual Studio developer prompt)".to_string(),
            status,
        )
    } else {
        let tool = env::var("DLLTOOL").unwrap_or_else(|_| "x86_64-w64-mingw32-dlltool".to_string());
        let status = Command::new(&tool)
            .arg("-d")
            .arg(&def)
            .arg("-l")
            .arg(dir.join("libamdhip64_6.dll.a"))
            .status();
        (tool, status)
    };
    if !status.map_or(false, |s| s.success()) {
        panic!(
            "could not make the amdhip64_6 import library with {}; rocblas.dll (a test \
             simulator) cannot link without it",
            tool
        );
    }
    println!("cargo:rustc-link-search=native={}", dir.display());
    println!("cargo:rustc-link-lib=dylib=amdhip64_6");
}
