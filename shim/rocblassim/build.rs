//! Links `librocblas.so` like the real rocBLAS: soname `librocblas.so.4` and a `NEEDED` entry
//! for `libamdhip64.so.6`, so loading it loads the HIP runtime found at run time (hipsim, or a
//! real one) and its `hipMalloc`/`hipFree` references bind by the ordinary lookup: a preloaded
//! library's definitions win, as they do for the real rocBLAS.
//!
//! The runtime is another crate of the workspace that cargo may build after this one, so the
//! link uses a stub made here: an empty shared object whose only content is the soname. The
//! HIP symbols stay undefined at link time (allowed for shared objects) and are resolved when
//! the library is loaded.

use std::env;
use std::path::PathBuf;
use std::process::Command;

fn main() {
    println!("cargo:rerun-if-changed=build.rs");
    if env::var("CARGO_CFG_TARGET_OS").as_deref() != Ok("linux") {
        return;
    }
    println!("cargo:rustc-cdylib-link-arg=-Wl,-soname,librocblas.so.4");
    let dir = PathBuf::from(env::var("OUT_DIR").expect("cargo sets OUT_DIR")).join("hip-stub");
    std::fs::create_dir_all(&dir).expect("OUT_DIR is writable");
    let cc = env::var("CC").unwrap_or_else(|_| "cc".to_string());
    let built = Command::new(&cc)
        .args([
            "-shared",
            "-nostdlib",
            "-x",
            "c",
            "/dev/null",
            "-Wl,-soname,libamdhip64.so.6",
        ])
        .arg("-o")
        .arg(dir.join("libamdhip64.so"))
        .status()
        .map_or(false, |s| s.success());
    if !built {
        println!(
            "cargo:warning=could not build the libamdhip64 link stub with {}: librocblas.so will \
             lack NEEDED libamdhip64.so.6 and only load where the HIP runtime is already loaded",
            cc
        );
        return;
    }
    // By path, not -lamdhip64: a ROCm install's libamdhip64.so (Debian's has soname .so.5)
    // must not be picked up from the system library directories instead of the stub.
    println!(
        "cargo:rustc-cdylib-link-arg=-Wl,--push-state,--no-as-needed,{},--pop-state",
        dir.join("libamdhip64.so").display()
    );
}
