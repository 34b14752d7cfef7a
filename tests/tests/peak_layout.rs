//! `rocmguard replay --peak-layout`: at the peak of each policy's reserved memory, which units
//! hold bytes no live block uses and which blocks keep them, on a trace whose answer is known
//! and on a real one.

use std::path::Path;
use std::process::Command;

use rocmguard_core::trace::{self, Action, Event};
use rocmguard_tests::{cli, output, root, text};
use serde_json::Value;

const MIB: u64 = 1 << 20;

fn layouts(args: &[&str], file: &Path) -> Value {
    let out = output(
        Command::new(cli())
            .args(["replay", "--json", "--peak-layout"])
            .args(args)
            .arg(file),
    );
    assert!(out.status.success(), "{}", text(&out));
    serde_json::from_slice(&out.stdout).unwrap_or_else(|e| panic!("{}: {}", e, text(&out)))
}

fn policy<'a>(report: &'a Value, name: &str) -> &'a Value {
    report["traces"][0]["policies"]
        .as_array()
        .unwrap()
        .iter()
        .find(|p| p["policy"] == name)
        .unwrap_or_else(|| panic!("no policy {} in {}", name, report))
}

fn u(v: &Value) -> u64 {
    v.as_u64().unwrap_or_else(|| panic!("{} is not a count", v))
}

/// 2 GiB of weights (w, never freed: pieces may then be of the default size, 1/128 of the peak
/// live; a slack of 1/256 over it, 8 MiB, keeps no idle piece of its own at the peak); 64 MiB (a) and 64 MiB (b); a freed; 40 MiB (x) and 4 MiB (pin, never freed) in turn
/// where a was; x freed; 64 MiB (c); then b and c freed. The pool's piece under the pin stays
/// mapped (one of the default size), so c needs pieces of its own; PyTorch's whole segment of a
/// stays.
const WEIGHTS: u64 = 2048 * MIB;

fn pinning_trace(dir: &Path) -> std::path::PathBuf {
    let rows = [
        (Action::Allocate, 0x1_0000_0000, WEIGHTS),
        (Action::Allocate, 0xa000_0000, 64 * MIB),
        (Action::Allocate, 0xb000_0000, 64 * MIB),
        (Action::Free, 0xa000_0000, 64 * MIB),
        (Action::Allocate, 0xe000_0000, 40 * MIB),
        (Action::Allocate, 0xc000_0000, 4 * MIB),
        (Action::Free, 0xe000_0000, 40 * MIB),
        (Action::Allocate, 0xd000_0000, 64 * MIB),
        (Action::Free, 0xb000_0000, 64 * MIB),
        (Action::Free, 0xd000_0000, 64 * MIB),
    ];
    let mut csv = String::new();
    trace::write_header(&mut csv);
    for (i, &(action, ptr, size)) in rows.iter().enumerate() {
        let e = Event {
            time_us: i as u64 * 10,
            ..Event::new(action, ptr, size)
        };
        trace::write_event(&e, &mut csv);
    }
    let path = dir.join("pinning.csv");
    std::fs::write(&path, csv).unwrap();
    path
}

#[test]
fn the_block_that_pins_a_piece_is_named_with_its_lifetime() {
    let dir = tempfile::tempdir().unwrap();
    let file = pinning_trace(dir.path());
    let pool_policy = "rocmguard:peak_slack=1/256";
    let report = layouts(&["--policy", pool_policy, "--policy", "pytorch"], &file);

    let piece = rocmguard_core::Config::default().piece_size;
    let pool = policy(&report, pool_policy);
    let at = &pool["peak_layout"];
    assert_eq!(u(&at["reserved"]), u(&pool["peak_reserved"]), "{}", at);
    assert_eq!(u(&at["event"]), 8, "the peak is c's allocation: {}", at);
    assert_eq!(u(&at["events"]), 10);
    assert_eq!(u(&at["live"]), WEIGHTS + 132 * MIB);
    assert_eq!(
        u(&at["reserved"]),
        WEIGHTS + 128 * MIB + piece,
        "w, b, c and the pin's piece: {}",
        at
    );
    // The weights were mapped while the peak live was nothing yet: in pages.
    assert_eq!(u(&at["units"]), WEIGHTS / (2 * MIB) + 128 * MIB / piece + 1);
    assert_eq!(u(&at["units_with_idle"]), 1);
    assert_eq!(u(&at["idle"]), piece - 4 * MIB);
    let top = &at["top"][0];
    assert_eq!(top["kind"], "piece");
    assert_eq!(u(&top["size"]), piece);
    assert_eq!(u(&top["idle"]), piece - 4 * MIB);
    assert_eq!((u(&top["blocks"]), u(&top["never_freed"])), (1, 1));
    let pin = &top["largest"];
    assert_eq!(u(&pin["size"]), 4 * MIB);
    assert_eq!(u(&pin["age"]), 2, "allocated two events before the peak");
    assert!(pin["freed_after"].is_null(), "never freed: {}", pin);

    // PyTorch's cache puts x and the pin in a's segment, which the pin keeps whole.
    let torch = policy(&report, "pytorch");
    let at = &torch["peak_layout"];
    assert_eq!(u(&at["reserved"]), u(&torch["peak_reserved"]), "{}", at);
    assert_eq!(
        (u(&at["event"]), u(&at["reserved"])),
        (8, WEIGHTS + 192 * MIB),
        "{}",
        at
    );
    let top = at["top"].as_array().unwrap();
    let row = |t: &Value| {
        (
            t["kind"].as_str().unwrap().to_string(),
            u(&t["size"]),
            u(&t["idle"]),
            u(&t["blocks"]),
            u(&t["never_freed"]),
            t["largest"]["freed_after"].as_u64(),
        )
    };
    assert_eq!(
        top.iter().map(row).collect::<Vec<_>>(),
        vec![("segment".to_string(), 64 * MIB, 60 * MIB, 1, 1, None)],
        "{}",
        at
    );
}

#[test]
fn a_block_freed_later_says_when_and_the_table_shows_the_layout() {
    let file = root().join("data/traces/lora.csv.gz");
    let report = layouts(&["--policy", "rocmguard"], &file);
    let pool = policy(&report, "rocmguard");
    let at = &pool["peak_layout"];
    let (reserved, live, idle) = (u(&at["reserved"]), u(&at["live"]), u(&at["idle"]));
    assert_eq!(reserved, u(&pool["peak_reserved"]));
    // What no block covers is the excess over live bytes, less what blocks round up.
    assert!(idle <= reserved - live && idle > 0, "{}", at);
    let top = at["top"].as_array().unwrap();
    assert!(!top.is_empty() && top.len() <= 8);
    let idles: Vec<u64> = top.iter().map(|t| u(&t["idle"])).collect();
    assert!(
        idles.windows(2).all(|w| w[0] >= w[1]),
        "most idle first: {:?}",
        idles
    );
    assert!(
        top.iter()
            .any(|t| t["largest"]["freed_after"].as_u64().unwrap_or(0) > 0),
        "some unit's largest block is freed after the peak: {}",
        at
    );

    let out = output(
        Command::new(cli())
            .args(["replay", "--peak-layout", "--policy", "rocmguard"])
            .arg(&file),
    );
    let table = text(&out);
    assert!(out.status.success(), "{}", table);
    assert!(
        table.contains("rocmguard at its peak:")
            && table.contains("largest block there")
            && table.contains("events later"),
        "{}",
        table
    );
}
