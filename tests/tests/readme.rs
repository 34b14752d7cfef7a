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
    let section = readme
        .split("\n## Works with\n")
        .nth(1)
        .and_then(|s| s.split("\n## ").next())
        .expect("a Works with section");
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
