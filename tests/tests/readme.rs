//! The README's configuration table is the one config table (`rocmguard_core::KEYS`), written
//! out: a key added, renamed or given a new default without the README following fails here,
//! and the message holds the table to paste.
use rocmguard_tests::root;

fn expected_table() -> String {
    let mut table = String::from("| variable | default | meaning |\n| --- | --- | --- |\n");
    for key in rocmguard_core::KEYS {
        table.push_str(&format!(
            "| `{}` | {} | {} |\n",
            key.var(),
            key.default,
            key.help.replace('|', "\\|")
        ));
    }
    table
}

#[test]
fn readme_configuration_table_is_the_config_table() {
    let readme = std::fs::read_to_string(root().join("README.md")).unwrap();
    let table = expected_table();
    assert!(
        readme.contains(&table),
        "README.md's configuration table differs from KEYS in shim/core/src/config/mod.rs; \
         it should read:\n\n{}",
        table
    );
}

/// The text under `heading` up to the next second-level heading.
fn section<'a>(text: &'a str, heading: &str) -> &'a str {
    text.split(heading)
        .nth(1)
        .and_then(|s| s.split("\n## ").next())
        .unwrap_or_else(|| panic!("no section {:?}", heading.trim()))
}

/// Every relative link of the README and of the pages it sends readers to leads to a file.
#[test]
fn readme_links_lead_somewhere() {
    let mut dead = Vec::new();
    for page in ["README.md", "docs/works-with.md"] {
        let text = std::fs::read_to_string(root().join(page)).unwrap();
        let dir = root().join(page).parent().unwrap().to_path_buf();
        for target in text.split("](").skip(1).filter_map(|t| t.split(')').next()) {
            let path = target.split('#').next().unwrap_or("");
            if path.is_empty() || path.contains("://") {
                continue;
            }
            if !dir.join(path).exists() {
                dead.push(format!("{}: {}", page, target));
            }
        }
    }
    assert!(dead.is_empty(), "links to nothing: {:?}", dead);
}

/// The README's "Works with" is one screen: a line per path, a word for what rocmguard does,
/// the details in docs/works-with.md.
#[test]
fn works_with_fits_one_screen() {
    let readme = std::fs::read_to_string(root().join("README.md")).unwrap();
    let section = section(&readme, "\n## Works with\n");
    let lines: Vec<&str> = section.trim().lines().collect();
    assert!(lines.len() <= 24, "{} lines:\n{}", lines.len(), section);
    for row in lines.iter().filter(|l| l.starts_with("| ")) {
        assert!(row.len() <= 140, "a row is one line of a screen: {}", row);
        assert!(
            row.contains("**") || row.contains("---") || row.contains("rocmguard |"),
            "{}",
            row
        );
    }
    assert!(section.contains("(docs/works-with.md)"), "{}", section);
}

/// The README's corpus table, as the replay gives it now: each trace of `data/traces/` through
/// the default pool, through plain segments (`vmm=0`) and through the model of PyTorch's cache,
/// with the modelled driver time of the pool and of PyTorch; then each half's median, max and
/// count over the targets, and the traces whose driver time is above PyTorch's, by how much.
fn expected_corpus_table() -> String {
    use rocmguard_cli::replay::{load, policy::Policy};
    let policies = ["rocmguard", "rocmguard:vmm=0", "pytorch"].map(|p| Policy::parse(p).unwrap());
    let dir = root().join("data/traces");
    let mut table = String::from(
        "| trace | half | rocmguard | plain segments | PyTorch's cache | driver ms, rocmguard / PyTorch |\n\
         | --- | --- | ---: | ---: | ---: | ---: |\n",
    );
    // (half, ratio with virtual segments, with plain ones), and the driver time lines.
    let (mut halves, mut slower) = (Vec::new(), Vec::new());
    for (name, half) in rocmguard_tests::corpus_in(&dir) {
        let trace = &load::load_path(&dir.join(format!("{}.csv.gz", name))).unwrap()[0];
        let [pool, plain, torch] = policies.each_ref().map(|p| {
            let o = rocmguard_cli::replay::policy::replay(trace, p, u64::MAX, false, None);
            (
                o.peak_reserved as f64 / o.peak_live as f64,
                o.driver_us / 1e3,
            )
        });
        table.push_str(&format!(
            "| {} | {} | {:.3} | {:.3} | {:.3} | {:.1} / {:.1} |\n",
            name, half, pool.0, plain.0, torch.0, pool.1, torch.1
        ));
        if format!("{:.1}", pool.1) != format!("{:.1}", torch.1) && pool.1 > torch.1 {
            slower.push(format!(
                "{} {:.1} ms against {:.1} ({:.2}x)",
                name,
                pool.1,
                torch.1,
                pool.1 / torch.1
            ));
        }
        halves.push((half, pool.0, plain.0));
    }
    for half in ["tune", "report"] {
        let pick = |plain: bool| -> Vec<f64> {
            let mut r: Vec<f64> = halves
                .iter()
                .filter(|h| h.0 == half)
                .map(|h| if plain { h.2 } else { h.1 })
                .collect();
            r.sort_by(f64::total_cmp);
            r
        };
        let (pool, plain) = (pick(false), pick(true));
        table.push_str(&format!(
            "\n{} ({} traces): rocmguard median {:.3}, max {:.3}, {} over 1.05; plain segments \
             median {:.3}, max {:.3}, {} over 1.10.\n",
            half.to_uppercase(),
            pool.len(),
            rocmguard_tests::median(&pool),
            pool[pool.len() - 1],
            pool.iter().filter(|&&r| r > 1.05).count(),
            rocmguard_tests::median(&plain),
            plain[plain.len() - 1],
            plain.iter().filter(|&&r| r > 1.10).count(),
        ));
    }
    table.push_str(&format!(
        "\nModelled driver time above PyTorch's: {}.\n",
        slower.join(", ")
    ));
    table
}

#[test]
fn readme_corpus_table_is_the_replay() {
    let readme = std::fs::read_to_string(root().join("README.md")).unwrap();
    let table = expected_corpus_table();
    assert!(
        readme.contains(&table),
        "README.md's corpus table differs from what the pool replays now (a pool change moved \
         a figure); it should read:\n\n{}",
        table
    );
}

/// docs/benchmarks.md's "Step time of every corpus workload" has one row per trace of
/// `data/traces/corpus.tsv`, in its order and with its half, and the README's count of passes
/// and the line under the table are the table's: a trace added, or a verdict changed, without
/// the others following fails here.
#[test]
fn step_time_table_has_a_row_per_trace() {
    let doc = std::fs::read_to_string(root().join("docs/benchmarks.md")).unwrap();
    let rows = step_time_rows(&doc);
    let named: Vec<(String, String)> = rows
        .iter()
        .map(|r| (r[1].to_string(), r[2].to_string()))
        .collect();
    let corpus = rocmguard_tests::corpus_in(&root().join("data/traces"));
    assert_eq!(
        named, corpus,
        "the table's (workload, half) rows against corpus.tsv"
    );
    let passes = rows.iter().filter(|r| r[3] == "PASS").count();
    let claim = format!("**PASS: {} of the {}**", passes, corpus.len());
    let readme = std::fs::read_to_string(root().join("README.md")).unwrap();
    assert!(readme.contains(&claim), "the README should say {}", claim);
    let tally = format!("\n{} PASS in one process", passes);
    assert!(
        section(&doc, STEP_TIME).contains(&tally),
        "the line under docs/benchmarks.md's step-time table should begin{}",
        tally
    );
}

/// docs/benchmarks.md's standing table of step times, one row per corpus workload.
const STEP_TIME: &str = "\n## Step time of every corpus workload";

/// The cells of each row of docs/benchmarks.md's "Step time of every corpus workload":
/// workload, half, verdict, ratio [interval], pairs, card, library, session (from index 1).
fn step_time_rows(doc: &str) -> Vec<Vec<&str>> {
    section(doc, STEP_TIME)
        .lines()
        .filter(|l| l.starts_with("| ") && !l.starts_with("| workload") && !l.starts_with("| ---"))
        .map(|l| l.split('|').map(str::trim).collect())
        .collect()
}

/// From session 35 on, a row's figure is the committed calls' pairs: every
/// `data/step_time/<workload>.*.<card>.json` (an `overhead.py --in-process --json`) pooled
/// gives the row's pair count and median ratio, and names the row's card. A figure typed in
/// by hand, or a call's file left out, fails here.
#[test]
fn step_time_rows_are_the_committed_pairs() {
    let doc = std::fs::read_to_string(root().join("docs/benchmarks.md")).unwrap();
    let dir = root().join("data/step_time");
    let files: Vec<String> = std::fs::read_dir(&dir)
        .unwrap()
        .map(|e| e.unwrap().file_name().into_string().unwrap())
        .filter(|n| n.ends_with(".json"))
        .collect();
    let mut checked = 0;
    for row in step_time_rows(&doc) {
        let (workload, figure, pairs, card) = (row[1], row[4], row[5], row[6]);
        let session: u32 = row[8].parse().unwrap_or(0);
        let Some(ratio) = figure
            .split(' ')
            .next()
            .filter(|r| r.parse::<f64>().is_ok())
        else {
            continue;
        };
        if session < 35 {
            continue;
        }
        let suffix = format!(".{}.json", card.to_lowercase());
        let mut ratios = Vec::new();
        for name in files
            .iter()
            .filter(|n| n.starts_with(&format!("{}.", workload)) && n.ends_with(&suffix))
        {
            let text = std::fs::read_to_string(dir.join(name)).unwrap();
            let call: serde_json::Value = serde_json::from_str(&text).unwrap();
            let entries = call["workloads"]
                .as_object()
                .expect("a --json of --in-process");
            for entry in entries.values() {
                let device = entry["device"].as_str().unwrap_or("");
                assert!(
                    device.contains(card),
                    "{}: device {:?}, row {:?}",
                    name,
                    device,
                    card
                );
                for pair in entry["pairs"].as_array().unwrap() {
                    let ms = |block: &str| pair[block]["median_ms"].as_f64().unwrap();
                    ratios.push(ms("shim") / ms("paused"));
                }
            }
        }
        assert!(
            !ratios.is_empty(),
            "{}: no data/step_time/{}.*{}",
            workload,
            workload,
            suffix
        );
        ratios.sort_by(f64::total_cmp);
        let n = ratios.len();
        let median = (ratios[(n - 1) / 2] + ratios[n / 2]) / 2.0;
        assert_eq!(
            pairs.split(' ').next(),
            Some(n.to_string().as_str()),
            "{}: pairs in the committed calls",
            workload
        );
        assert_eq!(
            ratio,
            format!("{:.4}", median),
            "{}: median of the committed pairs",
            workload
        );
        checked += 1;
    }
    assert!(
        checked >= 3,
        "rows checked against data/step_time: {}",
        checked
    );
}
