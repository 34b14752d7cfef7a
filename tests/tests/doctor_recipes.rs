//! `rocmguard doctor` names the memory variables from recipes that PyTorch never reads, with
//! the setting that does what they meant (issue 23), on a fake machine.

use rocmguard_tests::{doctor_cmd, output, text};
use serde_json::Value;

/// The `recipe-vars` check of `doctor --json` with these variables: (status, detail, fix).
fn recipe_check(vars: &[(&str, &str)]) -> (String, String, String) {
    let out = output(&mut doctor_cmd("rx5600xt", vars));
    let report: Value = serde_json::from_slice(&out.stdout)
        .unwrap_or_else(|e| panic!("not JSON ({}): {}", e, text(&out)));
    let c = report["checks"]
        .as_array()
        .unwrap()
        .iter()
        .find(|c| c["id"] == "recipe-vars")
        .unwrap_or_else(|| panic!("no recipe-vars check in {}", report))
        .clone();
    let s = |k: &str| c[k].as_str().unwrap_or("").to_string();
    (s("status"), s("detail"), s("suggestion"))
}

#[test]
fn variables_pytorch_never_reads_are_named_with_what_to_set() {
    let (status, detail, fix) = recipe_check(&[("PYTORCH_MAX_SPLIT_SIZE_MB", "512")]);
    assert_eq!(status, "warn");
    assert!(
        detail.contains("PyTorch never reads PYTORCH_MAX_SPLIT_SIZE_MB"),
        "{}",
        detail
    );
    assert!(
        fix.contains("PYTORCH_HIP_ALLOC_CONF=max_split_size_mb:512"),
        "{}",
        fix
    );
    let (status, detail, fix) =
        recipe_check(&[("PYTORCH_HIP_ALLOC_CONF", "garbage_collection_threshold:0.6")]);
    assert_eq!(status, "warn");
    assert!(detail.contains("never collects"), "{}", detail);
    assert!(fix.contains("per_process_memory_fraction"), "{}", fix);
    let (status, _, _) = recipe_check(&[
        ("PYTORCH_HIP_ALLOC_CONF", "expandable_segments:True"),
        ("PYTORCH_NO_HIP_MEMORY_CACHING", "1"),
    ]);
    assert_eq!(status, "ok", "variables PyTorch reads are not reported");
}
