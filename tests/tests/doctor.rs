//! `rocmguard doctor` against fake machines (`tests/fixtures/sysroot`): an RX 5600 XT, a Strix
//! Halo APU, a two-GPU box and a box without a GPU; environment findings; the loader search;
//! PyTorch through fake interpreters; the self-test on the simulated runtime.

use std::os::unix::fs::PermissionsExt;
use std::path::Path;
use std::process::Output;

use rocmguard_tests::{
    cli_command, doctor_cmd, output, scratch_dir, shim_lib, sim_lib_dir, sysroot, text,
};
use serde_json::Value;

const GIB: u64 = 1 << 30;

fn json(out: &Output) -> Value {
    serde_json::from_slice(&out.stdout)
        .unwrap_or_else(|e| panic!("not JSON ({}): {}", e, text(out)))
}

fn doctor(tree: &str, vars: &[(&str, &str)]) -> (Output, Value) {
    let out = output(&mut doctor_cmd(tree, vars));
    let report = json(&out);
    (out, report)
}

/// The check with this id: (status, detail, suggestion).
fn check(report: &Value, id: &str) -> (String, String, String) {
    let c = report["checks"]
        .as_array()
        .unwrap()
        .iter()
        .find(|c| c["id"] == id)
        .unwrap_or_else(|| panic!("no check `{}` in {}", id, report));
    let s = |k: &str| c[k].as_str().unwrap_or("").to_string();
    (s("status"), s("detail"), s("suggestion"))
}

fn ids(report: &Value) -> Vec<String> {
    report["checks"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| c["id"].as_str().unwrap().to_string())
        .collect()
}

#[test]
fn rx_5600_xt() {
    let (out, r) = doctor("rx5600xt", &[]);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out));
    let gpus = r["gpus"].as_array().unwrap();
    assert_eq!(gpus.len(), 1);
    assert_eq!(gpus[0]["gfx"], "gfx1010");
    assert_eq!(gpus[0]["integrated"], false);
    assert_eq!(gpus[0]["vram"], 6 * GIB);
    assert_eq!(gpus[0]["uma_ceiling"], Value::Null);

    let (status, detail, _) = check(&r, "gpu0");
    assert_eq!(status, "ok");
    assert!(
        detail.contains("gfx1010, discrete") && detail.contains("0000:03:00.0"),
        "{}",
        detail
    );
    let (status, detail, _) = check(&r, "gpu0-memory");
    assert_eq!(status, "ok");
    assert!(
        detail.contains("VRAM 6.00 GiB") && detail.contains("no resizable BAR"),
        "{}",
        detail
    );
    let (status, detail, fix) = check(&r, "gfx-override");
    assert_eq!(status, "warn");
    assert!(detail.contains("no kernels"), "{}", detail);
    assert!(
        fix.contains("HSA_OVERRIDE_GFX_VERSION=10.3.0") && fix.contains("--profile rdna1"),
        "{}",
        fix
    );
    assert_eq!(check(&r, "amdgpu-params").0, "ok");
    assert_eq!(check(&r, "hip-runtime").0, "ok");
    assert!(check(&r, "hip-runtime").1.contains("via LD_LIBRARY_PATH"));

    // The field's override on RDNA1: same generation, another chip.
    let (_, r) = doctor("rx5600xt", &[("HSA_OVERRIDE_GFX_VERSION", "10.3.0")]);
    let (status, detail, _) = check(&r, "gfx-override");
    assert_eq!(status, "warn");
    assert!(
        detail.contains("runs gfx1030 kernels") && detail.contains("some kernels fault"),
        "{}",
        detail
    );

    // XNACK asked for on RDNA.
    let (_, r) = doctor("rx5600xt", &[("HSA_XNACK", "1")]);
    let (status, detail, _) = check(&r, "xnack");
    assert_eq!(status, "warn");
    assert!(detail.contains("gfx1010"), "{}", detail);
}

#[test]
fn strix_halo_apu() {
    let (out, r) = doctor("strix-halo", &[]);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out));
    let gpu = &r["gpus"][0];
    assert_eq!(gpu["gfx"], "gfx1151");
    assert_eq!(gpu["integrated"], true);
    assert_eq!(gpu["vram"], 512u64 << 20);
    assert_eq!(gpu["gtt"], 108 * GIB);
    // TTM's 27,648,000 pages are below the GTT and below RAM less 10%.
    assert_eq!(gpu["uma_ceiling"], 27_648_000u64 * 4096);

    let (status, detail, _) = check(&r, "gpu0");
    assert_eq!(status, "ok");
    assert!(detail.contains("integrated (APU)"), "{}", detail);
    let (status, detail, _) = check(&r, "gpu0-memory");
    assert_eq!(status, "ok");
    assert!(
        detail.contains("carve-out 512.0 MiB")
            && detail.contains("can use 105.47 GiB")
            && detail.contains("bound: ttm.pages_limit"),
        "{}",
        detail
    );
    // gttsize raised past TTM's limit: the field's classic half-done tuning.
    let (status, _, fix) = check(&r, "amdgpu-params");
    assert_eq!(status, "warn");
    assert!(fix.contains("ttm.pages_limit=28311552"), "{}", fix);
    assert_eq!(check(&r, "gfx-override").0, "ok");

    // The host reserve moves the ceiling: 125 GiB of RAM less 24 GiB.
    let (_, r) = doctor("strix-halo", &[("ROCMGUARD_HOST_RESERVE", "24GiB")]);
    assert_eq!(
        r["gpus"][0]["uma_ceiling"],
        131_072_000u64 * 1024 - 24 * GIB
    );
    assert!(check(&r, "gpu0-memory")
        .1
        .contains("bound: RAM less the host reserve"));

    // Turning the unified view off shows only the carve-out, and a cap above it never binds.
    let (_, r) = doctor(
        "strix-halo",
        &[("ROCMGUARD_UMA", "0"), ("ROCMGUARD_VRAM_LIMIT", "20GiB")],
    );
    let (status, _, fix) = check(&r, "gpu0-memory");
    assert_eq!(status, "warn");
    assert!(fix.contains("ROCMGUARD_UMA=0"), "{}", fix);
    let (status, detail, _) = check(&r, "caps");
    assert_eq!(status, "warn");
    assert!(detail.contains("above GPU 0's 512.0 MiB"), "{}", detail);
}

#[test]
fn two_gpus() {
    let (out, r) = doctor("two-gpus", &[]);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out));
    let names: Vec<&str> = r["gpus"]
        .as_array()
        .unwrap()
        .iter()
        .map(|g| g["gfx"].as_str().unwrap())
        .collect();
    assert_eq!(names, ["gfx1100", "gfx1031"]);
    for id in ["gpu0", "gpu0-memory", "gpu1", "gpu1-memory"] {
        assert_eq!(check(&r, id).0, "ok", "{}", id);
    }
    assert!(check(&r, "gpu1").1.contains("card1"));
    let (status, detail, fix) = check(&r, "gfx-override");
    assert_eq!(status, "warn");
    assert!(
        detail.contains("GPU 0 gfx1100: native") && detail.contains("GPU 1 gfx1031"),
        "{}",
        detail
    );
    assert!(fix.contains("--profile rdna2"), "{}", fix);

    // The override the 6700 XT wants breaks the 7900 XTX: it applies to every GPU.
    let (out, r) = doctor("two-gpus", &[("HSA_OVERRIDE_GFX_VERSION", "10.3.0")]);
    assert_eq!(
        out.status.code(),
        Some(1),
        "a failed line fails the run: {}",
        text(&out)
    );
    let (status, detail, fix) = check(&r, "gfx-override");
    assert_eq!(status, "fail");
    assert!(
        detail.contains("GPU 0 gfx1100 is told it is gfx1030"),
        "{}",
        detail
    );
    assert!(
        detail.contains("GPU 1 gfx1031 runs gfx1030 kernels"),
        "{}",
        detail
    );
    assert!(fix.contains("HIP_VISIBLE_DEVICES"), "{}", fix);

    let (_, r) = doctor("two-gpus", &[("ROCMGUARD_VRAM_LIMIT", "20GiB")]);
    let (status, detail, _) = check(&r, "caps");
    assert_eq!(status, "warn");
    assert!(
        detail.contains("above GPU 1's 12.00 GiB") && !detail.contains("GPU 0"),
        "{}",
        detail
    );
}

#[test]
fn no_gpu() {
    let (out, r) = doctor("no-gpu", &[]);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out));
    assert!(r["gpus"].as_array().unwrap().is_empty());
    assert!(
        !ids(&r).iter().any(|id| id.starts_with("gpu")),
        "{:?}",
        ids(&r)
    );
    for id in ["driver", "amdgpu-params", "gfx-override"] {
        assert_eq!(check(&r, id).0, "skip", "{}", id);
    }
    assert!(check(&r, "driver").1.contains("no AMD GPU"));
    assert_eq!(check(&r, "ram").1, "16.00 GiB, 12.00 GiB available");

    // Without a runtime on a machine without a GPU that is worth a warning, not a failure.
    let mut cmd = doctor_cmd("no-gpu", &[]);
    cmd.env("LD_LIBRARY_PATH", "/nonexistent");
    let r = json(&output(&mut cmd));
    let (status, _, _) = check(&r, "hip-runtime");
    assert!(status == "warn" || status == "ok", "{}", status);
}

#[test]
fn text_output_is_a_checklist() {
    for tree in ["rx5600xt", "strix-halo", "two-gpus", "no-gpu"] {
        let out = output(
            cli_command()
                .args(["doctor", "--no-python", "--no-self-test", "--sysroot"])
                .arg(sysroot(tree))
                .env("LD_LIBRARY_PATH", sim_lib_dir()),
        );
        let shown = String::from_utf8_lossy(&out.stdout);
        assert!(shown.starts_with("rocmguard doctor "), "{}", shown);
        assert!(shown.contains("(machine read from "), "{}", shown);
        assert!(
            shown.contains(" ok, ") && shown.contains(" skip\n"),
            "{}",
            shown
        );
        for line in shown.lines().skip(2).take_while(|l| !l.is_empty()) {
            let status = line.split_whitespace().next().unwrap();
            assert!(
                ["ok", "warn", "FAIL", "skip", "->"].contains(&status),
                "{}",
                line
            );
        }
    }
}

#[test]
fn environment_findings() {
    let bad_conf = [(
        "PYTORCH_HIP_ALLOC_CONF",
        "garbage_collection_threshold:0.8,max_split_size_mb:16",
    )];
    let (out, r) = doctor("rx5600xt", &bad_conf);
    assert_eq!(out.status.code(), Some(1));
    let (status, detail, _) = check(&r, "alloc-conf");
    assert_eq!(status, "fail");
    assert!(
        detail.contains("max_split_size_mb:16") && detail.contains("at least 20"),
        "{}",
        detail
    );

    let good = [(
        "PYTORCH_HIP_ALLOC_CONF",
        "garbage_collection_threshold:0.8,max_split_size_mb:64",
    )];
    assert_eq!(check(&doctor("rx5600xt", &good).1, "alloc-conf").0, "ok");
    let shadowed = [
        ("PYTORCH_CUDA_ALLOC_CONF", "expandable_segments:True"),
        ("PYTORCH_HIP_ALLOC_CONF", "max_split_size_mb:64"),
    ];
    let (status, detail, _) = check(&doctor("rx5600xt", &shadowed).1, "alloc-conf");
    assert_eq!(status, "warn");
    assert!(
        detail.contains("ignores PYTORCH_HIP_ALLOC_CONF"),
        "{}",
        detail
    );

    let no_cache = [("PYTORCH_NO_HIP_MEMORY_CACHING", "1")];
    let (status, _, fix) = check(&doctor("rx5600xt", &no_cache).1, "no-caching");
    assert_eq!(status, "warn");
    assert!(fix.contains("rocmguard run"), "{}", fix);
    let shim = shim_lib().display().to_string();
    let guarded = [
        ("PYTORCH_NO_HIP_MEMORY_CACHING", "1"),
        ("LD_PRELOAD", shim.as_str()),
    ];
    assert_eq!(check(&doctor("rx5600xt", &guarded).1, "no-caching").0, "ok");

    let (status, detail, _) = check(
        &doctor("rx5600xt", &[("ROCMGUARD_TRIM_THRESHOLD", "2")]).1,
        "rocmguard-env",
    );
    assert_eq!(status, "warn");
    assert!(
        detail.contains("ROCMGUARD_TRIM_THRESHOLD") && detail.contains("at most 1"),
        "{}",
        detail
    );
    let (status, detail, _) = check(
        &doctor("rx5600xt", &[("ROCMGUARD_VRAM_LIMIT", "4GiB")]).1,
        "rocmguard-env",
    );
    assert_eq!(
        (status.as_str(), detail.as_str()),
        ("ok", "ROCMGUARD_VRAM_LIMIT valid")
    );

    let both = [
        ("ROCMGUARD_VRAM_LIMIT", "5GiB"),
        ("PYTORCH_HIP_ALLOC_CONF", "per_process_memory_fraction:0.8"),
    ];
    let (status, detail, _) = check(&doctor("rx5600xt", &both).1, "caps");
    assert_eq!(status, "warn");
    assert!(detail.contains("two caps multiply"), "{}", detail);

    let (out, r) = doctor("rx5600xt", &[("HSA_OVERRIDE_GFX_VERSION", "gfx1030")]);
    assert_eq!(out.status.code(), Some(1));
    let (status, detail, _) = check(&r, "gfx-override");
    assert_eq!(status, "fail");
    assert!(detail.contains("major.minor.stepping"), "{}", detail);
}

#[test]
fn libraries_on_the_loader_path() {
    let dir = scratch_dir("doctor-libs");
    std::fs::write(dir.join("libamdhip64.so.6.2.60200"), b"").unwrap();
    std::os::unix::fs::symlink("libamdhip64.so.6.2.60200", dir.join("libamdhip64.so.6")).unwrap();
    std::fs::write(dir.join("libMIOpen.so.1"), b"").unwrap();
    let mut cmd = doctor_cmd("rx5600xt", &[]);
    cmd.env("LD_LIBRARY_PATH", &dir);
    let r = json(&output(&mut cmd));
    let (status, detail, _) = check(&r, "hip-runtime");
    assert_eq!(status, "ok");
    assert!(
        detail.contains("libamdhip64.so.6 -> ")
            && detail.contains("(version 6.2.60200), via LD_LIBRARY_PATH"),
        "{}",
        detail
    );
    let (status, detail, _) = check(&r, "miopen");
    assert_eq!(status, "ok", "{}", detail);
    std::fs::remove_dir_all(&dir).unwrap();
}

/// A stand-in for `python3` that prints what PyTorch would, or fails like a missing module.
fn fake_python(dir: &Path, name: &str, body: &str) -> std::path::PathBuf {
    let path = dir.join(name);
    std::fs::write(&path, format!("#!/bin/sh\n{}\n", body)).unwrap();
    std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o755)).unwrap();
    path
}

fn pytorch_check(tree: &str, python: &Path) -> (String, String, String) {
    let out = output(
        cli_command()
            .args(["doctor", "--json", "--no-self-test", "--python"])
            .arg(python)
            .arg("--sysroot")
            .arg(sysroot(tree)),
    );
    check(&json(&out), "pytorch")
}

#[test]
fn pytorch_builds() {
    let dir = scratch_dir("doctor-python");
    std::fs::create_dir_all(dir.join("torch/lib")).unwrap();
    std::fs::write(dir.join("torch/lib/libamdhip64.so"), b"").unwrap();
    let rocm = fake_python(
        &dir,
        "rocm-python",
        &format!(
            "echo 2.5.1+rocm6.2; echo 6.2.41133-dd7f95766; echo {}/torch/lib",
            dir.display()
        ),
    );
    let (status, detail, _) = pytorch_check("rx5600xt", &rocm);
    assert_eq!(status, "ok");
    assert!(
        detail.contains("2.5.1+rocm6.2 (HIP 6.2.41133-dd7f95766)"),
        "{}",
        detail
    );
    assert!(detail.contains("loads its own HIP runtime"), "{}", detail);

    let cuda = fake_python(
        &dir,
        "cuda-python",
        "echo 2.5.1+cu124; echo None; echo /x/torch/lib",
    );
    let (status, detail, fix) = pytorch_check("rx5600xt", &cuda);
    assert_eq!(status, "fail");
    assert!(detail.contains("a CUDA build"), "{}", detail);
    assert!(fix.contains("download.pytorch.org/whl/rocm"), "{}", fix);
    assert_eq!(pytorch_check("no-gpu", &cuda).0, "warn");

    let missing = fake_python(
        &dir,
        "bare-python",
        "echo \"ModuleNotFoundError: No module named 'torch'\" >&2; exit 1",
    );
    let (status, _, fix) = pytorch_check("rx5600xt", &missing);
    assert_eq!(status, "skip");
    assert!(fix.contains("--python"), "{}", fix);

    let (status, detail, _) = pytorch_check("rx5600xt", &dir.join("no-such-python"));
    assert_eq!(status, "skip");
    assert!(detail.contains("cannot run"), "{}", detail);
    std::fs::remove_dir_all(&dir).unwrap();
}

/// The self-test on the simulated runtime (`HIPSIM_*` knobs shape what it finds).
fn self_test(tree: &str, vars: &[(&str, &str)], library_path: &Path) -> (String, String, String) {
    let mut cmd = cli_command();
    cmd.args(["doctor", "--json", "--no-python", "--sysroot"])
        .arg(sysroot(tree))
        .env("LD_LIBRARY_PATH", library_path);
    for (k, v) in vars {
        cmd.env(k, v);
    }
    check(&json(&output(&mut cmd)), "self-test")
}

#[test]
fn self_test_on_the_simulator() {
    let sim = sim_lib_dir();
    let (status, detail, _) = self_test("rx5600xt", &[], &sim);
    assert_eq!(status, "ok", "{}", detail);
    assert!(
        detail.contains("rocmguard ") && detail.contains(" active over "),
        "{}",
        detail
    );
    assert!(
        detail.contains("libamdhip64.so") && detail.contains("hipMalloc/hipFree of 2.0 MiB passed"),
        "{}",
        detail
    );
    assert!(detail.contains("; virtual segments"), "{}", detail);
    let (status, detail, _) = self_test("rx5600xt", &[("HIPSIM_VMM", "0")], &sim);
    assert_eq!(status, "ok", "{}", detail);
    assert!(
        detail.contains("plain segments (the device offers no virtual memory)"),
        "{}",
        detail
    );
    let (_, detail, _) = self_test("rx5600xt", &[("ROCMGUARD_VMM", "0")], &sim);
    assert!(
        detail.contains("plain segments (ROCMGUARD_VMM=0)"),
        "{}",
        detail
    );

    let (status, detail, fix) = self_test("rx5600xt", &[("ROCMGUARD_DISABLE", "1")], &sim);
    assert_eq!(status, "warn", "{}", detail);
    assert!(
        detail.contains("passes every call through") && fix.contains("ROCMGUARD_DISABLE"),
        "{}",
        detail
    );

    // No device in the runtime: nothing to test on a machine without GPUs, a failure where
    // sysfs lists one.
    let (status, detail, _) = self_test("no-gpu", &[("HIPSIM_DEVICES", "0")], &sim);
    assert_eq!(status, "skip", "{}", detail);
    assert!(detail.contains("the runtime sees no GPU"), "{}", detail);
    let (status, _, fix) = self_test("rx5600xt", &[("HIPSIM_DEVICES", "0")], &sim);
    assert_eq!(status, "fail");
    assert!(fix.contains("/dev/kfd"), "{}", fix);

    // Every allocation fails in the runtime: a failure, blamed on the runtime, not the guard.
    let (status, detail, _) = self_test("rx5600xt", &[("HIPSIM_FAIL_ABOVE", "4096")], &sim);
    assert_eq!(status, "fail", "{}", detail);
    assert!(
        detail.contains("hipMalloc(2.0 MiB): error 2 (hipErrorOutOfMemory)"),
        "{}",
        detail
    );
    assert!(detail.contains("fails without rocmguard too"), "{}", detail);
}

/// Pointed at the simulator, the doctor says so: on the runtime line and in the self-test.
#[test]
fn the_simulator_is_named_as_such() {
    let (_, report) = doctor("rx5600xt", &[]);
    let (status, detail, _) = check(&report, "hip-runtime");
    assert_eq!(status, "ok", "{}", detail);
    assert!(
        detail.contains("hipsim, rocmguard's simulator"),
        "{}",
        detail
    );
    let (status, detail, _) = self_test("rx5600xt", &[], &sim_lib_dir());
    assert_eq!(status, "ok", "{}", detail);
    assert!(
        detail.contains("hipsim, rocmguard's simulator: no GPU was tested"),
        "{}",
        detail
    );
}

/// An invalid cap is a failure the doctor names, not a "valid" setting.
#[test]
fn an_invalid_cap_fails_the_settings_check() {
    let (_, report) = doctor("rx5600xt", &[("ROCMGUARD_VRAM_LIMIT", "banana")]);
    let (status, detail, _) = check(&report, "rocmguard-env");
    assert_eq!(status, "fail", "{}", detail);
    assert!(
        detail.contains("ROCMGUARD_VRAM_LIMIT=banana is not a cap"),
        "{}",
        detail
    );
    // The caps line above it does not report the stand-in cap of 0 B as a fine cap.
    for bad in ["banana", ""] {
        let (_, report) = doctor("rx5600xt", &[("ROCMGUARD_VRAM_LIMIT", bad)]);
        let (status, detail, _) = check(&report, "caps");
        assert_ne!(status, "ok", "{:?}: {}", bad, detail);
        assert!(!detail.contains("0 B"), "{:?}: {}", bad, detail);
        assert_eq!(check(&report, "rocmguard-env").0, "fail", "{:?}", bad);
    }
    // A cap of 0 is valid but refuses everything: a warning that says how to have no cap.
    let (_, report) = doctor("rx5600xt", &[("ROCMGUARD_VRAM_LIMIT", "0")]);
    let (status, detail, _) = check(&report, "caps");
    assert_eq!(status, "warn", "{}", detail);
    assert!(detail.contains("none = no cap"), "{}", detail);
}
