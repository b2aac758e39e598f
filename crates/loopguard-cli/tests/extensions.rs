//! The extension vectors (`spec/extensions/`): every detector, rule and mode of the
//! `loopguard` block, with boundary counts and the cases that must not fire, run through
//! the real `loopguard replay`.

mod common;

#[test]
fn extension_vectors() {
    let dir = common::repo_root().join("spec/extensions");
    let (count, failures) = common::vectors::failures(&dir);
    assert!(
        count >= 42,
        "expected the extension vectors in {}",
        dir.display()
    );
    assert!(
        failures.is_empty(),
        "{} of {count} cases failed:\n{}",
        failures.len(),
        failures.join("\n")
    );
}
