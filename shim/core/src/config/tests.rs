//! The configuration table's tests: defaults, variables and the conf line, bad values.

use super::*;

#[test]
fn names_people_write() {
    for name in [
        "trim_threshold",
        "trim-threshold",
        "ROCMGUARD_TRIM_THRESHOLD",
        "Trim_Threshold",
    ] {
        assert_eq!(find_key(name).unwrap().name, "trim_threshold", "{}", name);
    }
    assert_eq!(find_key("cap").unwrap().name, "vram_limit");
    assert_eq!(find_key("vram_limit").unwrap().option_name(), "cap");
    assert_eq!(
        find_key("trim_threshold").unwrap().option_name(),
        "trim-threshold"
    );
    let err = find_key("vram_limt").map(|k| k.name).unwrap_err();
    assert!(
        err.contains("vram_limit") && err.contains("headroom"),
        "{}",
        err
    );
}

#[test]
fn values_are_checked_by_the_table() {
    let key = find_key("vram_limit").unwrap();
    assert!(key.check("20GiB").is_ok());
    let err = key.check("20XB").unwrap_err();
    assert!(err.contains("unknown unit"), "{}", err);
    assert!(!err.contains("using the default"), "{}", err);
}

#[test]
fn switches_are_the_boolean_keys() {
    let switches: Vec<&str> = KEYS
        .iter()
        .filter(|k| k.is_switch())
        .map(|k| k.name)
        .collect();
    assert!(
        switches.contains(&"stats") && switches.contains(&"disable"),
        "{:?}",
        switches
    );
    for valued in ["vram_limit", "headroom", "trace", "retries", "log"] {
        assert!(!switches.contains(&valued), "{}", valued);
    }
}

#[test]
fn defaults_come_from_the_table() {
    let c = Config::default();
    assert_eq!(c.piece_size, 16 << 20);
    assert_eq!(c.vram_limit, None);
    assert_eq!(c.trim_threshold, 1.0);
    assert_eq!(c.retries, 3);
    assert_eq!(c.log, "warn");
    assert!(!c.disable);
}

#[test]
fn variables_and_the_conf_line() {
    let (c, w) = Config::from_vars(vec![
        (
            "ROCMGUARD_CONF",
            "vram_limit:20GiB,trim_threshold:0.7,max_split:64MiB",
        ),
        ("ROCMGUARD_TRIM_THRESHOLD", "0.9"),
        ("HOME", "/root"),
    ]);
    assert!(w.is_empty(), "{:?}", w);
    assert_eq!(c.vram_limit, Some(Limit::Bytes(20 << 30)));
    assert_eq!(
        c.trim_threshold, 0.9,
        "a variable of its own wins over the line"
    );
    assert_eq!(c.max_split, Some(64 << 20));
    let (c, _) = Config::from_vars(vec![("ROCMGUARD_VRAM_LIMIT", "85%")]);
    assert_eq!(c.cap_for(100 << 30), 85 << 30);
    assert_eq!(c.cap_for(1000), 850);
}

#[test]
fn bad_values_warn_once_and_keep_defaults() {
    let (c, w) = Config::from_vars(vec![
        ("ROCMGUARD_TRIM_THRESHOLD", "lots"),
        ("ROCMGUARD_RETRIES", "many"),
        ("ROCMGUARD_VRAM_LIMT", "1G"),
    ]);
    assert_eq!(c, Config::default());
    assert_eq!(w.len(), 3, "{:?}", w);
    assert!(w[0].contains("ROCMGUARD_TRIM_THRESHOLD") || w[1].contains("ROCMGUARD_TRIM_THRESHOLD"));
    assert!(w
        .iter()
        .any(|m| m.contains("lots") && m.contains("default 1")));
    assert!(w
        .iter()
        .any(|m| m.contains("vram_limt") && m.contains("vram_limit")));
}

#[test]
fn a_bad_cap_is_an_error_and_a_cap_of_zero() {
    for bad in ["banana", "-5GiB", "200%"] {
        let (c, w) = Config::from_vars(vec![("ROCMGUARD_VRAM_LIMIT", bad)]);
        assert!(w.is_empty(), "{:?}", w);
        assert_eq!(c.cap_for(16 << 30), 0, "{}", bad);
        let e = c.invalid_cap.unwrap();
        assert!(
            e.contains(bad) && e.contains("ROCMGUARD_VRAM_LIMIT=20GiB"),
            "{}",
            e
        );
    }
    let (c, _) = Config::from_vars(vec![
        ("ROCMGUARD_CONF", "vram_limit:banana"),
        ("ROCMGUARD_VRAM_LIMIT", "8GiB"),
    ]);
    assert_eq!(
        (c.invalid_cap.clone(), c.cap_for(16 << 30)),
        (None, 8 << 30)
    );
    // Valid, and said once at start with the way to have no cap.
    for zero in ["0", "0%", "0GiB"] {
        let (c, w) = Config::from_vars(vec![("ROCMGUARD_VRAM_LIMIT", zero)]);
        assert_eq!(
            (&c.invalid_cap, c.cap_for(16 << 30)),
            (&None, 0),
            "{}",
            zero
        );
        assert_eq!(w.len(), 1, "{}: {:?}", zero, w);
        let said = ["allocation will be refused", "ROCMGUARD_VRAM_LIMIT=none"];
        assert!(said.iter().all(|s| w[0].contains(s)), "{}", w[0]);
    }
    for other in ["0.5%", "1", "none"] {
        let (_, w) = Config::from_vars(vec![("ROCMGUARD_VRAM_LIMIT", other)]);
        assert!(w.is_empty(), "{}: {:?}", other, w);
    }
    let (c, _) = Config::from_vars(vec![("ROCMGUARD_VRAM_LIMIT", "20GiB")]);
    let above = c.cap_above_device(16 << 30).unwrap();
    assert!(
        above.contains("20.00 GiB") && above.contains("16.00 GiB"),
        "{}",
        above
    );
    assert_eq!(c.cap_above_device(32 << 30), None);
}

/// `--cap "$CAP"` with CAP unset reaches the guard as an empty cap: from the variable or
/// from `ROCMGUARD_CONF`, it is refused as any other bad cap, never read as no cap.
#[test]
fn an_empty_cap_is_a_bad_cap() {
    for (var, value) in [
        ("ROCMGUARD_VRAM_LIMIT", ""),
        ("ROCMGUARD_VRAM_LIMIT", "  "),
        ("ROCMGUARD_CONF", "vram_limit:,retries:2"),
        ("ROCMGUARD_CONF", "vram_limit: "),
    ] {
        let (c, _) = Config::from_vars(vec![(var, value)]);
        assert_eq!(c.cap_for(16 << 30), 0, "{}={:?}", var, value);
        let e = c.invalid_cap.expect("an empty cap is not read as a cap");
        assert!(
            e.contains("empty") && e.contains("none for no cap"),
            "{}",
            e
        );
    }
    assert!(find_key("cap").unwrap().check("").is_err());
}

#[test]
fn a_piece_size_is_whole_pages() {
    let (c, w) = Config::from_vars(vec![("ROCMGUARD_CONF", "piece_size:16MiB")]);
    assert!(w.is_empty(), "{:?}", w);
    assert_eq!(c.piece_size, 16 << 20);
    for bad in ["3MiB", "0", "1000"] {
        let (c, w) = Config::from_vars(vec![("ROCMGUARD_PIECE_SIZE", bad)]);
        assert_eq!(c.piece_size, 16 << 20, "{}: the default stays", bad);
        assert!(w.len() == 1 && w[0].contains("2 MiB"), "{}: {:?}", bad, w);
    }
}

#[test]
fn a_peak_slack_is_a_share_of_the_peak() {
    assert_eq!(Config::default().peak_slack, 1.0 / 64.0);
    for (text, share) in [
        ("25%", 0.25),
        ("0.25", 0.25),
        ("1/8", 0.125),
        ("0", 0.0),
        ("400%", 4.0),
    ] {
        let (c, w) = Config::from_vars(vec![("ROCMGUARD_PEAK_SLACK", text)]);
        assert!(w.is_empty(), "{}: {:?}", text, w);
        assert_eq!(c.peak_slack, share, "{}", text);
    }
    for bad in ["-1%", "5", "1/0", "much", ""] {
        let (c, w) = Config::from_vars(vec![("ROCMGUARD_CONF", &*format!("peak_slack:{}", bad))]);
        assert_eq!(c.peak_slack, 1.0 / 64.0, "{}: the default stays", bad);
        assert!(w.len() == 1 && w[0].contains("share"), "{}: {:?}", bad, w);
    }
}
