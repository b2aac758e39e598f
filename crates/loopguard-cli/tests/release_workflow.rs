//! The release workflow (`.github/workflows/release.yml`): actionlint accepts it, its Node
//! builds are the platforms `packages/node/package.json` declares, and every step it runs
//! is a subcommand scripts/release-build has.

mod common;

use std::process::Command;

use common::repo_root;

fn workflow() -> String {
    std::fs::read_to_string(repo_root().join(".github/workflows/release.yml")).unwrap()
}

/// The `target:` values of the matrix of job `job` (`jobs.JOB.strategy.matrix.include`).
fn targets_of(workflow: &str, job: &str) -> Vec<String> {
    let mut in_job = false;
    let mut targets = Vec::new();
    for line in workflow.lines() {
        // Jobs are the keys two spaces in under `jobs:`.
        if let Some(name) = line.strip_prefix("  ").filter(|l| !l.starts_with(' ')) {
            in_job = name.trim_end() == format!("{job}:");
            continue;
        }
        if !in_job {
            continue;
        }
        if let Some(rest) = line.trim_start().strip_prefix("- { target: ") {
            let target = rest.split([',', ' ', '}']).next().unwrap_or_default();
            targets.push(target.to_owned());
        }
    }
    targets
}

#[test]
fn actionlint_accepts_the_workflows() {
    let Some(actionlint) = std::env::var_os("LOOPGUARD_ACTIONLINT") else {
        assert!(
            std::env::var_os("CI").is_none(),
            "actionlint is missing (scripts/setup/actionlint.sh installs it)"
        );
        eprintln!("skipped: actionlint missing (scripts/setup/actionlint.sh installs it)");
        return;
    };
    let out = Command::new(actionlint)
        .arg("-no-color")
        .current_dir(repo_root())
        .output()
        .expect("run actionlint");
    assert!(
        out.status.success(),
        "actionlint:\n{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
}

#[test]
fn the_node_builds_are_the_declared_platforms() {
    let package: serde_json::Value = serde_json::from_str(
        &std::fs::read_to_string(repo_root().join("packages/node/package.json")).unwrap(),
    )
    .unwrap();
    let mut declared: Vec<String> = package["napi"]["targets"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| t.as_str().unwrap().to_owned())
        .collect();
    declared.sort();
    let workflow = workflow();
    let mut node = targets_of(&workflow, "node");
    node.sort();
    assert_eq!(
        node, declared,
        "the node job builds what package.json declares"
    );
    // Every declared platform has its npm package, and the CLI is built for each of them.
    let mut cli = targets_of(&workflow, "cli");
    cli.sort();
    assert_eq!(cli, declared, "the CLI is released for the same platforms");
    let optional = package["optionalDependencies"].as_object().unwrap();
    assert_eq!(optional.len(), declared.len());
    for name in optional.keys() {
        let platform = name.strip_prefix("@loopguard/node-").unwrap();
        assert!(
            repo_root()
                .join("packages/node/npm")
                .join(platform)
                .join("package.json")
                .is_file(),
            "{platform}"
        );
    }
    // Wheels: every platform but musl (a musllinux wheel is not published).
    let wheels = targets_of(&workflow, "wheel");
    assert!(!wheels.is_empty());
    for target in &wheels {
        assert!(declared.contains(target), "{target}");
    }
}

#[test]
fn every_step_is_a_release_build_subcommand() {
    let script = std::fs::read_to_string(repo_root().join("scripts/release-build")).unwrap();
    let workflow = workflow();
    let used: Vec<&str> = workflow
        .lines()
        .filter_map(|l| l.trim().strip_prefix("run: scripts/release-build "))
        .map(|rest| rest.split_whitespace().next().unwrap_or_default())
        .collect();
    assert!(used.len() >= 5, "{used:?}");
    for sub in used {
        assert!(
            script.contains(&format!("\n{sub})")),
            "scripts/release-build has no `{sub}`"
        );
    }
}
