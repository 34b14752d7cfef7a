//! The shim in front of the real HIP runtime: Debian's libamdhip64 (ROCm 5.2) and its headers,
//! installed by scripts/test.sh. On a machine without a GPU every call fails, and each must fail
//! with exactly the code the real library returns without us.

use std::path::{Path, PathBuf};
use std::process::Command;

use rocmguard_tests::{output, release_dir, root, shim_lib, text};

const HEADER: &str = "/usr/include/hip/hip_runtime_api.h";

/// Compiles a program from tests/c against the real ROCm header and library.
fn compile_real(name: &str, with_header: bool) -> PathBuf {
    assert!(
        !with_header || Path::new(HEADER).exists(),
        "{} is missing: install libamdhip64-dev and libamdhip64-5 (scripts/test.sh does)",
        HEADER
    );
    let exe = release_dir().join("c-tests").join(name);
    std::fs::create_dir_all(exe.parent().unwrap()).unwrap();
    let mut cc = Command::new("cc");
    cc.args(["-O1", "-Wall", "-Werror", "-D__HIP_PLATFORM_AMD__", "-o"])
        .arg(&exe)
        .arg("-I")
        .arg(root().join("tests/c"))
        .arg(root().join("tests/c").join(format!("{}.c", name)));
    if with_header {
        cc.arg("-lamdhip64");
    }
    let out = output(&mut cc);
    assert!(out.status.success(), "{}", text(&out));
    exe
}

fn run(exe: &Path, preload: bool) -> String {
    let mut cmd = Command::new(exe);
    cmd.env_remove("LD_LIBRARY_PATH");
    if preload {
        cmd.env("LD_PRELOAD", shim_lib());
    }
    let out = output(&mut cmd);
    assert!(out.status.success(), "{}", text(&out));
    String::from_utf8(out.stdout).unwrap()
}

#[test]
fn our_constants_and_offsets_match_the_real_headers() {
    let real = run(&compile_real("abi_real", true), false);
    let ours = run(&compile_real("abi_ours", false), false);
    assert_eq!(real, ours);
}

#[test]
fn every_hooked_call_returns_what_the_real_runtime_returns() {
    let exe = compile_real("real_calls", true);
    let without = run(&exe, false);
    let with = run(&exe, true);
    assert!(without.lines().count() >= 20, "{}", without);
    assert_eq!(
        with, without,
        "the shim changed a code the real runtime returned"
    );
}
