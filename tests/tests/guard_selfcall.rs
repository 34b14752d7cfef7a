//! The shim on a runtime that calls its own exports through the dynamic linker, as a
//! `libamdhip64` linked without `-Bsymbolic` does (hipsim's `HIPSIM_SELF_CALLS=1`: managed and
//! pitched allocations over `hipMalloc`, `hipFree`'s synchronize over `hipDeviceSynchronize`,
//! host<->device copies staged through `hipMalloc`/`hipFree`). HAMi left `LD_PRELOAD` for
//! `LD_AUDIT` over this on ROCm 7 (Project-HAMi/HAMi#1707). `tests/c/guard_selfcall.c` under
//! `LD_PRELOAD=librocmguard.so` must see the same with the setting as without it: nothing counted
//! twice, the cap and the capped view right, no recursion into a pool the outer call holds (a
//! trim with plain segments used to hang there), every call ending.

use std::path::PathBuf;
use std::process::Stdio;
use std::sync::OnceLock;
use std::time::{Duration, Instant};

use rocmguard_tests::{compile_c, guarded_command, text, Seen};

const MIB: i64 = 1 << 20;
const OUT_OF_MEMORY: i64 = 2;

fn program() -> PathBuf {
    static BUILT: OnceLock<PathBuf> = OnceLock::new();
    BUILT
        .get_or_init(|| compile_c("guard_selfcall", &["guard_selfcall.c"], &["-lamdhip64"]))
        .clone()
}

/// One run under a 256 MiB cap on a 1 GiB device; a run still going after a minute is killed
/// and fails the test (a recursion into a held lock hangs rather than crashes).
fn guarded(self_calls: &str, vmm: &str) -> Seen {
    let mut child = guarded_command(&program())
        .envs([
            ("HIPSIM_SELF_CALLS", self_calls),
            ("HIPSIM_VRAM", "1GiB"),
            ("ROCMGUARD_VRAM_LIMIT", "256MiB"),
            ("ROCMGUARD_VMM", vmm),
        ])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("the test program starts");
    let start = Instant::now();
    while child.try_wait().expect("wait").is_none() {
        if start.elapsed() > Duration::from_secs(60) {
            let _ = child.kill();
            let out = child.wait_with_output().expect("output");
            panic!(
                "HIPSIM_SELF_CALLS={} ROCMGUARD_VMM={}: still running after 60 s\n{}",
                self_calls,
                vmm,
                text(&out)
            );
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    let s = Seen::new(child.wait_with_output().expect("output"));
    s.succeeded();
    s
}

#[test]
fn a_runtime_calling_itself_is_counted_once_and_never_recurses() {
    let expected = [
        ("free_start", 256 * MIB),
        ("managed_counted", 64 * MIB),
        ("managed_round_trip", 1),
        ("managed_freed_view_back", 1),
        ("pitch", 1024),
        ("pitch_counted", 1024 * 1000),
        ("pitch_freed_view_back", 1),
        ("copy_round_trip", 1),
        ("copies_left_counted", 0),
        ("dropped_fills", 0),
        ("managed_past_cap", OUT_OF_MEMORY),
        ("managed_within_cap", 0),
        ("copy_near_cap", 1),
        ("view_back_at_end", 1),
        ("last_error", 0),
        ("runtime_live_after_trim", 0),
    ];
    for vmm in ["1", "0"] {
        for self_calls in ["0", "1"] {
            let s = guarded(self_calls, vmm);
            for (key, want) in expected {
                assert_eq!(
                    (key, s.num(key)),
                    (key, want),
                    "HIPSIM_SELF_CALLS={} ROCMGUARD_VMM={}\n{}",
                    self_calls,
                    vmm,
                    text(&s.out)
                );
            }
        }
    }
}
