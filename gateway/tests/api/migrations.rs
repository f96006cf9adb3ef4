//! The SQLite and PostgreSQL migration trees stay in step.

use std::{collections::BTreeSet, path::Path};

use hiregate_store::Store;

fn file_names(dialect: &str) -> BTreeSet<String> {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../migrations")
        .join(dialect);
    std::fs::read_dir(&dir)
        .unwrap_or_else(|e| panic!("{}: {e}", dir.display()))
        .map(|entry| entry.unwrap().file_name().to_string_lossy().into_owned())
        .collect()
}

#[test]
fn both_dialects_have_the_same_migration_files() {
    let sqlite = file_names("sqlite");
    let postgres = file_names("postgres");
    assert!(!sqlite.is_empty());
    assert_eq!(
        sqlite, postgres,
        "migrations/sqlite and migrations/postgres differ"
    );
    for name in &sqlite {
        let (number, rest) = name
            .split_once('_')
            .unwrap_or_else(|| panic!("{name}: NNNN_name.sql"));
        assert!(
            number.len() == 4 && number.bytes().all(|b| b.is_ascii_digit()),
            "{name}"
        );
        assert!(rest.ends_with(".sql"), "{name}");
    }
}

#[test]
fn the_embedded_migrations_match() {
    let (sqlite, postgres) = Store::embedded_migrations();
    assert!(!sqlite.is_empty());
    assert_eq!(sqlite, postgres);
}
