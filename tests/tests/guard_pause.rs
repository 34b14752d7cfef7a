//! `rocmguard_pause`: `tests/c/guard_pause.c` under `LD_PRELOAD` on hipsim (the simulated HIP
//! runtime). While paused a new allocation is the runtime's (the simulator counts it; no pool
//! holds it) and counted against the cap; a pooled block freed while paused goes back to the
//! pool; a runtime allocation freed after resuming goes to the runtime; after a trim nothing is
//! lost. This is what lets `scripts/gpu/overhead.py --in-process` time PyTorch with its memory
//! in and out of the pool in one process.

use std::path::PathBuf;
use std::sync::OnceLock;

use rocmguard_tests::{compile_c, guarded_command, output, Seen};

const MIB: i64 = 1 << 20;
const OUT_OF_MEMORY: i64 = 2;

fn program() -> PathBuf {
    static BUILT: OnceLock<PathBuf> = OnceLock::new();
    BUILT
        .get_or_init(|| compile_c("guard_pause", &["guard_pause.c"], &["-lamdhip64"]))
        .clone()
}

fn guarded(args: &[&str], env: &[(&str, &str)]) -> Seen {
    let s = Seen::new(output(
        guarded_command(&program())
            .args(args)
            .envs(env.iter().copied()),
    ));
    s.succeeded();
    s
}

#[test]
fn paused_allocations_are_the_runtimes_and_nothing_is_lost() {
    for vmm in ["1", "0"] {
        let s = guarded(&[], &[("ROCMGUARD_VMM", vmm)]);
        let (na, nb) = (4 * MIB + 512, 3 * MIB + 100);
        let checks = [
            ("a_pooled", 1),
            ("a_block_is_a", 1),
            ("pause_was", 0),
            ("pause_again_was", 1),
            // B: one runtime allocation of exactly its size, in no pool, counted in the view.
            ("b_pooled", 0),
            ("b_runtime_allocs", 1),
            ("b_runtime_bytes", nb),
            ("b_counted", 1),
            // A freed while paused: to the pool; the runtime frees nothing.
            ("a_intact", 1),
            ("free_a_runtime_frees", 0),
            ("a_pooled_after_free", 0),
            // Resumed: pooled again; B freed by the runtime, no error.
            ("resume_was", 1),
            ("c_pooled", 1),
            ("b_intact", 1),
            ("free_b", 0),
            ("last_error", 0),
            ("free_b_runtime_frees", 1),
            ("free_b_runtime_bytes", nb),
            // Nothing lost.
            ("device_live_end", s.num("device_live_start")),
            ("free_view_back", 1),
        ];
        for (key, expected) in checks {
            assert_eq!(
                (key, s.num(key)),
                (key, expected),
                "ROCMGUARD_VMM={} (A {} B, B {} B)\n{}",
                vmm,
                na,
                nb,
                rocmguard_tests::text(&s.out)
            );
        }
    }
}

/// A demanding user's cap still holds while paused: the runtime's allocations are counted
/// against it like the runtime's others, and one past it is refused before reaching the runtime.
#[test]
fn the_cap_holds_while_paused() {
    let s = guarded(&["cap"], &[("ROCMGUARD_VRAM_LIMIT", "64MiB")]);
    assert_eq!(s.num("paused_past_cap"), OUT_OF_MEMORY, "{}", s.stderr());
    assert_eq!(s.num("paused_past_cap_last_error"), OUT_OF_MEMORY);
    assert_eq!(s.num("paused_past_cap_reached_runtime"), 0);
    assert_eq!(s.num("paused_within_cap_pooled"), 0);
    // 64 MiB less A (40) and the paused C (20).
    assert_eq!(s.num("free_view_with_both"), 4 * MIB);
}

/// Off is off: with the guard disabled the switch says so and changes nothing.
#[test]
fn pausing_a_disabled_guard_says_minus_one() {
    let s = guarded(&["state"], &[("ROCMGUARD_DISABLE", "1")]);
    assert_eq!(s.num("pause_returns"), -1);
    let s = guarded(&["state"], &[]);
    assert_eq!(s.num("pause_returns"), 0);
}
