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
        "README.md's configuration table differs from KEYS in shim/core/src/config.rs; \
         it should read:\n\n{}",
        table
    );
}
