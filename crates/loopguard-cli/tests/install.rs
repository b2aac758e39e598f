//! The install story: `cargo install` gives a `loopguard` on the PATH that works as an
//! installed binary (outside any build directory), and the minimum Rust the README and
//! Cargo.toml state is the one the locked dependencies need.

mod common;

use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use common::repo_root;
use serde_json::Value;

/// `major.minor[.patch]` as three numbers, for comparing (`1.88` is `1.88.0`).
fn version(v: &str) -> [u64; 3] {
    let mut parts = v.split('.').map(|p| p.parse().unwrap_or(0));
    [(); 3].map(|()| parts.next().unwrap_or(0))
}

/// The declared rust-version equals the highest `rust-version` among the locked
/// dependencies: lower would promise a build that fails, higher would refuse toolchains
/// that work. (Clippy's `incompatible_msrv` lint checks our own code against it.)
#[test]
fn the_minimum_rust_is_what_the_locked_dependencies_need() {
    let out = Command::new(env!("CARGO"))
        .args(["metadata", "--format-version", "1", "--locked"])
        .current_dir(repo_root())
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let meta: Value = serde_json::from_slice(&out.stdout).unwrap();
    let members: Vec<&str> = meta["workspace_members"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(Value::as_str)
        .collect();
    let resolved: Vec<&str> = meta["resolve"]["nodes"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|n| n["id"].as_str())
        .collect();
    let mut declared = None;
    let mut needed: ([u64; 3], String) = ([0; 3], String::new());
    for p in meta["packages"].as_array().unwrap() {
        let id = p["id"].as_str().unwrap();
        let Some(rv) = p["rust_version"].as_str() else {
            continue;
        };
        if members.contains(&id) {
            assert!(
                declared.is_none_or(|d| d == rv),
                "one rust-version for the workspace"
            );
            declared = Some(rv);
        } else if resolved.contains(&id) && version(rv) > needed.0 {
            needed = (
                version(rv),
                format!(
                    "{} {} needs {rv}",
                    p["name"].as_str().unwrap(),
                    p["version"].as_str().unwrap()
                ),
            );
        }
    }
    let declared = declared.expect("the workspace declares a rust-version");
    assert_eq!(
        version(declared),
        needed.0,
        "Cargo.toml says {declared}; {}",
        needed.1
    );
    let readme = std::fs::read_to_string(repo_root().join("README.md")).unwrap();
    assert!(
        readme.contains(&format!("Rust {declared} or newer")),
        "README states the minimum Rust {declared}"
    );
}

/// `cargo install --locked --path crates/loopguard-cli` into a temporary root, from an
/// offline copy of what the workspace already fetched. It builds the dev profile into a
/// target directory of its own (kept between runs) so that CI stays within its time; the
/// `dist` profile users install is the same package with other code generation. Slow (a
/// build of the whole binary): it runs in CI (`CI` set) or with LOOPGUARD_TEST_INSTALL=1.
#[test]
fn cargo_install_puts_a_working_loopguard_on_the_path() {
    if std::env::var_os("CI").is_none() && std::env::var_os("LOOPGUARD_TEST_INSTALL").is_none() {
        eprintln!("skipped: set LOOPGUARD_TEST_INSTALL=1 (CI runs it)");
        return;
    }
    let root = tempfile::tempdir().unwrap();
    let target = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../target/install-test");
    let mut child = Command::new(env!("CARGO"))
        .args([
            "install",
            "--locked",
            "--offline",
            "--debug",
            "--path",
            "crates/loopguard-cli",
            "--root",
        ])
        .arg(root.path())
        .arg("--target-dir")
        .arg(&target)
        .current_dir(repo_root())
        .env_remove("CARGO_TARGET_DIR")
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let stderr = child.stderr.take().unwrap();
    let log = std::thread::spawn(move || std::io::read_to_string(stderr).unwrap_or_default());
    let limit = Duration::from_secs(45 * 60);
    let start = Instant::now();
    let status = loop {
        if let Some(status) = child.try_wait().unwrap() {
            break status;
        }
        if start.elapsed() > limit {
            let _ = child.kill();
            let _ = child.wait();
            panic!("cargo install took longer than {limit:?}");
        }
        std::thread::sleep(Duration::from_millis(500));
    };
    let log = log.join().unwrap();
    assert!(status.success(), "cargo install failed:\n{log}");
    eprintln!("cargo install took {:?}", start.elapsed());

    let bin = root.path().join("bin/loopguard");
    assert!(bin.is_file(), "{log}");
    // On the PATH, by name: the shell finds it there first.
    let mut dirs = vec![root.path().join("bin")];
    dirs.extend(std::env::split_paths(
        &std::env::var_os("PATH").unwrap_or_default(),
    ));
    let out = Command::new("/bin/sh")
        .args(["-c", "command -v loopguard && loopguard --version"])
        .env("PATH", std::env::join_paths(dirs).unwrap())
        .output()
        .unwrap();
    assert_eq!(
        String::from_utf8_lossy(&out.stdout),
        format!(
            "{}\nloopguard {}\n",
            bin.display(),
            env!("CARGO_PKG_VERSION")
        )
    );
    // The hook's own binary is installed beside it.
    let hook_bin = root.path().join("bin/loopguard-hook");
    let out = Command::new(&hook_bin).arg("--version").output().unwrap();
    assert_eq!(
        String::from_utf8_lossy(&out.stdout),
        format!("loopguard-hook {}\n", env!("CARGO_PKG_VERSION"))
    );
    // And it counts as installed: `hook install` writes its path (the hook's own binary).
    let settings = root.path().join("settings.json");
    let out = Command::new(&bin)
        .args(["hook", "install", "claude-code", "--settings"])
        .arg(&settings)
        .env_remove("LOOPGUARD_CONFIG")
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let text = std::fs::read_to_string(&settings).unwrap();
    assert!(
        text.contains(&format!(
            "{} claude-code",
            hook_bin.canonicalize().unwrap().display()
        )),
        "{text}"
    );
}
