//! Libraries opened with `dlopen(..., RTLD_DEEPBIND)` (issue 14): their own dependencies, the
//! runtime among them, come before the preloaded shim in their lookups, so the shim patches
//! their references to its hooks when `dlopen` returns. And the `dlopen` export must leave the
//! caller glibc sees unchanged: a `DT_RUNPATH` of `$ORIGIN/sub` still finds a bare name.

use std::path::{Path, PathBuf};
use std::sync::Mutex;

use rocmguard_tests::{
    compile_c, guarded_command, output, release_dir, scratch_dir, sim_command, text, Seen,
};

const GIB: i64 = 1 << 30;
const MIB: i64 = 1 << 20;

/// Each program compiled once: tests run in parallel and must not rewrite a running binary.
fn built(name: &str, make: impl FnOnce() -> PathBuf) -> PathBuf {
    static BUILT: Mutex<Vec<(String, PathBuf)>> = Mutex::new(Vec::new());
    let mut built = BUILT.lock().unwrap_or_else(|e| e.into_inner());
    if let Some((_, p)) = built.iter().find(|(n, _)| n == name) {
        return p.clone();
    }
    let p = make();
    built.push((name.to_string(), p.clone()));
    p
}

/// The program: no HIP link; exported symbols (`-rdynamic`) so the module's probe can tell
/// RTLD_DEEPBIND's order from the global one.
fn program() -> PathBuf {
    built("guard_deepbind", || {
        compile_c(
            "guard_deepbind",
            &["guard_deepbind.c"],
            &["-ldl", "-rdynamic"],
        )
    })
}

/// The module, lazily bound with partial RELRO (the toolchain's default), or with full RELRO
/// and BIND_NOW (`-z relro -z now`: its GOT is read-only once loaded).
fn module(now: bool) -> PathBuf {
    let name = if now {
        "guard_deepbind_now.so"
    } else {
        "guard_deepbind_module.so"
    };
    built(name, || {
        let mut args = vec!["-shared", "-fPIC", "-lamdhip64", "-ldl"];
        if now {
            args.push("-Wl,-z,relro,-z,now");
        }
        compile_c(name, &["guard_deepbind_module.c"], &args)
    })
}

fn run(guarded: bool, module: &Path, mode: &str) -> Seen {
    let mut cmd = if guarded {
        guarded_command(&program())
    } else {
        sim_command(&program())
    };
    cmd.arg(module)
        .arg(mode)
        .env("ROCMGUARD_VRAM_LIMIT", "1GiB")
        .env("ROCMGUARD_LOG", "info");
    let s = Seen::new(output(&mut cmd));
    s.succeeded();
    s
}

/// What a guarded run must show, whatever way the module was opened and linked.
fn assert_guarded(s: &Seen) {
    assert_eq!(s.num("total"), GIB, "the capped view\n{}", text(&s.out));
    assert_eq!(s.num("free"), GIB);
    assert_eq!(s.num("first"), 0);
    assert_eq!(
        s.num("free_after_600MiB"),
        GIB - 600 * MIB,
        "the module's allocation is counted\n{}",
        text(&s.out)
    );
    assert_eq!(s.num("second"), 2, "hipErrorOutOfMemory from the cap");
    assert_eq!(
        s.num("dlsym_600MiB"),
        2,
        "dlsym on the runtime's handle, called from the module, answers the hook"
    );
    assert_eq!(
        s.num("default_600MiB"),
        2,
        "dlsym(RTLD_DEFAULT) from the module answers the hook"
    );
    assert_eq!(s.num("free_first"), 0);
    assert_eq!(
        s.num("relro_writable"),
        0,
        "RELRO pages are read-only again after patching"
    );
}

/// `dlsym(RTLD_NEXT)` stays relative to the module: the patched `dlsym` of a RTLD_DEEPBIND
/// module, and the exported one (`dl.rs`) of a module opened plainly, both reach glibc with the
/// module's return address.
fn assert_next_is_the_modules(s: &Seen) {
    assert_eq!(
        s.num("next_found"),
        1,
        "dlsym(RTLD_NEXT) from the module still searches after the module"
    );
}

#[test]
fn a_deepbind_module_allocates_under_the_cap() {
    let m = module(false);
    let s = run(true, &m, "deep");
    assert_eq!(
        s.num("probe"),
        1,
        "RTLD_DEEPBIND still puts the module's own symbols first"
    );
    assert_guarded(&s);
    assert_next_is_the_modules(&s);
    assert!(
        s.stderr().contains("RTLD_DEEPBIND:") && s.stderr().contains("routed to the hooks"),
        "{}",
        s.stderr()
    );

    // Lazily bound: the GOT still points into the module's PLT when it is patched.
    let lazy = run(true, &m, "lazy");
    assert_eq!(lazy.num("probe"), 1);
    assert_guarded(&lazy);
    assert_next_is_the_modules(&lazy);

    // The same module opened without RTLD_DEEPBIND: ordinary binding reaches the shim.
    let plain = run(true, &m, "plain");
    assert_eq!(plain.num("probe"), 0);
    assert_guarded(&plain);
    assert_next_is_the_modules(&plain);

    // Without the shim the runtime's own 16 GiB, and no cap.
    let bare = run(false, &m, "deep");
    assert_eq!(bare.num("total"), 16 * GIB);
    assert_eq!(bare.num("second"), 0);
}

#[test]
fn a_deepbind_module_with_full_relro_is_patched_and_protected_again() {
    let m = module(true);
    let s = run(true, &m, "deep");
    assert_eq!(s.num("probe"), 1);
    assert_guarded(&s);
    assert_next_is_the_modules(&s);
    let bare = run(false, &m, "deep");
    assert_eq!(bare.num("relro_writable"), 0);
    assert_eq!(bare.num("second"), 0);
}

#[test]
fn a_refused_mprotect_leaves_the_module_unpatched_and_the_program_running() {
    // A seccomp filter in the program refuses mprotect(PROT_READ|PROT_WRITE) before the
    // dlopen: the read-only GOT of the full-RELRO module cannot be written.
    let s = run(true, &module(true), "refuse");
    assert_eq!(s.num("probe"), 1, "the dlopen succeeded");
    assert_eq!(
        s.num("total"),
        16 * GIB,
        "unpatched: the runtime's own figures"
    );
    assert_eq!(s.num("relro_writable"), 0);
    assert!(
        s.stderr().contains("left unpatched (mprotect refused")
            && s.stderr().matches("RTLD_DEEPBIND library").count() == 1,
        "one warning naming the library:\n{}",
        s.stderr()
    );
}

/// `-Wl,-rpath,$ORIGIN/sub` as `DT_RUNPATH` (`new_dtags`) or `DT_RPATH`.
fn rpath_args(new_dtags: bool) -> [&'static str; 2] {
    let dtags = if new_dtags {
        "-Wl,--enable-new-dtags"
    } else {
        "-Wl,--disable-new-dtags"
    };
    [dtags, "-Wl,-rpath,$ORIGIN/sub"]
}

fn tag(new_dtags: bool) -> &'static str {
    if new_dtags {
        "runpath"
    } else {
        "rpath"
    }
}

fn dep() -> PathBuf {
    built("libguard_runpath_dep.so", || {
        compile_c(
            "libguard_runpath_dep.so",
            &["guard_runpath_dep.c"],
            &["-shared", "-fPIC"],
        )
    })
}

fn has_tag(object: &Path, new_dtags: bool) {
    let dynamic = output(std::process::Command::new("readelf").arg("-d").arg(object));
    let wanted = if new_dtags { "(RUNPATH)" } else { "(RPATH)" };
    assert!(
        String::from_utf8_lossy(&dynamic.stdout).contains(wanted),
        "{}",
        text(&dynamic)
    );
}

/// `guard_runpath` in a fresh folder with its library in `sub/`, found only through the
/// executable's `$ORIGIN/sub`.
fn executable_layout(new_dtags: bool) -> PathBuf {
    let name = format!("guard_runpath_{}", tag(new_dtags));
    let exe = built(&name, || {
        let mut args = vec!["-ldl"];
        args.extend(rpath_args(new_dtags));
        compile_c(&name, &["guard_runpath.c"], &args)
    });
    has_tag(&exe, new_dtags);
    let dir = scratch_dir(&format!("deepbind-exe-{}", tag(new_dtags)));
    std::fs::create_dir_all(dir.join("sub")).unwrap();
    std::fs::copy(&exe, dir.join("guard_runpath")).unwrap();
    std::fs::copy(dep(), dir.join("sub/libguard_runpath_dep.so")).unwrap();
    dir.join("guard_runpath")
}

/// An executable with no search path of its own and, in `lib/`, a library that makes the call
/// and finds `lib/sub/` through its `$ORIGIN/sub`. Returns both.
fn library_layout(new_dtags: bool) -> (PathBuf, PathBuf) {
    let exe = built("guard_runpath_none", || {
        compile_c("guard_runpath_none", &["guard_runpath.c"], &["-ldl"])
    });
    let name = format!("libguard_runpath_{}.so", tag(new_dtags));
    let lib = built(&name, || {
        let mut args = vec!["-shared", "-fPIC", "-DRUNPATH_LIBRARY", "-ldl"];
        args.extend(rpath_args(new_dtags));
        compile_c(&name, &["guard_runpath.c"], &args)
    });
    has_tag(&lib, new_dtags);
    let dir = scratch_dir(&format!("deepbind-lib-{}", tag(new_dtags)));
    std::fs::create_dir_all(dir.join("lib/sub")).unwrap();
    std::fs::copy(&exe, dir.join("guard_runpath")).unwrap();
    std::fs::copy(&lib, dir.join("lib/libguard_runpath.so")).unwrap();
    std::fs::copy(dep(), dir.join("lib/sub/libguard_runpath_dep.so")).unwrap();
    (
        dir.join("guard_runpath"),
        dir.join("lib/libguard_runpath.so"),
    )
}

fn assert_loads(exe: &Path, library: Option<&Path>) {
    // Not on LD_LIBRARY_PATH, not in the cache: only $ORIGIN/sub has it.
    assert!(!release_dir()
        .join("hipsim-lib/libguard_runpath_dep.so")
        .exists());
    for mode in ["plain", "deep"] {
        let mut cmd = guarded_command(exe);
        cmd.arg(mode).args(library);
        let s = Seen::new(output(&mut cmd));
        s.succeeded();
        assert_eq!(s.num("loaded"), 1, "{}: {}", mode, text(&s.out));
        assert_eq!(s.num("value"), 42);
    }
}

#[test]
fn the_executables_runpath_still_finds_a_bare_name() {
    assert_loads(&executable_layout(true), None);
}

#[test]
fn the_executables_rpath_still_finds_a_bare_name() {
    assert_loads(&executable_layout(false), None);
}

#[test]
fn a_librarys_runpath_still_finds_a_bare_name() {
    let (exe, lib) = library_layout(true);
    assert_loads(&exe, Some(&lib));
}

#[test]
fn a_librarys_rpath_still_finds_a_bare_name() {
    let (exe, lib) = library_layout(false);
    assert_loads(&exe, Some(&lib));
}
