//! The public conformance vectors (SPEC §7), run through the real `loopguard replay`.

mod common;

use std::fs;

#[test]
fn conformance_vectors() {
    let dir = common::conformance_dir();
    let (count, failures) = common::vectors::failures(&dir);
    assert!(
        count >= 70,
        "expected the whole conformance set in {}",
        dir.display()
    );
    assert!(
        failures.is_empty(),
        "{} of {count} cases failed:\n{}",
        failures.len(),
        failures.join("\n")
    );
}

/// This project's own vectors (spec/vectors), through the real `loopguard replay`.
#[test]
fn own_vectors() {
    let dir = common::repo_root().join("spec/vectors");
    let (count, failures) = common::vectors::failures(&dir);
    assert!(count >= 4, "expected the vectors of {}", dir.display());
    assert!(
        failures.is_empty(),
        "{} of {count} cases failed:\n{}",
        failures.len(),
        failures.join("\n")
    );
}

/// The vectors kept in this repository are the published ones, unchanged.
#[test]
fn vendored_vectors_match_the_shared_spec() {
    let Some(shared) = common::shared_dir() else {
        eprintln!("SKIPPED: the shared folder is absent; set LOOPGUARD_SHARED_DIR to compare");
        return;
    };
    let theirs = shared.join("spec/conformance");
    let ours = common::conformance_dir();
    let mut checked = 0;
    for entry in fs::read_dir(&theirs).unwrap().filter_map(Result::ok) {
        let case = entry.path();
        if !case.is_dir() {
            let name = entry.file_name();
            assert_eq!(
                fs::read(&case).unwrap(),
                fs::read(ours.join(&name)).unwrap(),
                "{name:?}"
            );
            continue;
        }
        for file in fs::read_dir(&case).unwrap().filter_map(Result::ok) {
            let rel = file.path().strip_prefix(&theirs).unwrap().to_owned();
            let mine = fs::read(ours.join(&rel))
                .unwrap_or_else(|_| panic!("{} missing here", rel.display()));
            assert_eq!(
                fs::read(file.path()).unwrap(),
                mine,
                "{} differs",
                rel.display()
            );
            checked += 1;
        }
    }
    assert!(checked > 200);
    assert_eq!(
        fs::read(shared.join("spec/SPEC.md")).unwrap(),
        fs::read(common::repo_root().join("spec/SPEC.md")).unwrap(),
        "spec/SPEC.md differs from the shared SPEC"
    );
}
