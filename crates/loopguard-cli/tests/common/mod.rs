//! Helpers shared by the integration tests: paths, and running the real binary.
#![allow(dead_code)]

pub mod vectors;

use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};

/// The repository root.
pub fn repo_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../..")
        .canonicalize()
        .unwrap()
}

/// The shared folder next to the repository (SPEC, corpus, benchmark generator), when
/// present: `LOOPGUARD_SHARED_DIR`, else `../shared` beside the repository root.
pub fn shared_dir() -> Option<PathBuf> {
    let dir = std::env::var_os("LOOPGUARD_SHARED_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| repo_root().join("../shared"));
    dir.is_dir().then_some(dir)
}

/// The conformance vectors kept in the repository.
pub fn conformance_dir() -> PathBuf {
    repo_root().join("spec/conformance")
}

/// The `loopguard` binary built for these tests.
pub fn bin() -> Command {
    Command::new(env!("CARGO_BIN_EXE_loopguard"))
}

/// Runs `loopguard ARGS` with `stdin`.
pub fn run(args: &[&str], stdin: &[u8]) -> Output {
    let mut cmd = bin();
    cmd.args(args);
    run_command(cmd, stdin)
}

/// Runs `cmd` with `stdin` (written from another thread, so that a child that answers
/// before reading everything cannot deadlock the test).
pub fn run_command(mut cmd: Command, stdin: &[u8]) -> Output {
    use std::io::Write;
    let mut child = cmd
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn loopguard");
    let mut input = child.stdin.take().unwrap();
    let data = stdin.to_vec();
    let writer = std::thread::spawn(move || {
        let _ = input.write_all(&data);
    });
    let out = child.wait_with_output().expect("wait loopguard");
    writer.join().unwrap();
    out
}

/// Parses JSON Lines output.
pub fn json_lines(bytes: &[u8]) -> Vec<serde_json::Value> {
    String::from_utf8_lossy(bytes)
        .lines()
        .filter(|l| !l.trim().is_empty())
        .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("bad output line {l:?}: {e}")))
        .collect()
}

/// Runs `loopguard ARGS`, watching its peak resident memory (`VmHWM`, Linux) until it
/// exits. Returns the exit code and the highest peak seen, in bytes (0 without `/proc`).
pub fn peak_memory(args: &[&str]) -> (i32, u64) {
    let (code, peak, _) = peak_memory_and_output(args);
    (code, peak)
}

/// [`peak_memory`], and what the command wrote on stdout.
pub fn peak_memory_and_output(args: &[&str]) -> (i32, u64, Vec<u8>) {
    let mut cmd = bin();
    cmd.args(args);
    peak_memory_of(cmd, b"")
}

/// Runs `cmd` with `stdin` (written from another thread), watching its peak resident
/// memory (`VmHWM`, Linux) until it exits: its exit code, the highest peak seen in bytes
/// (0 without `/proc`), and what it wrote on stdout.
pub fn peak_memory_of(mut cmd: Command, stdin: &[u8]) -> (i32, u64, Vec<u8>) {
    use std::io::{Read, Write};
    let mut child = cmd
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let mut input = child.stdin.take().unwrap();
    let data = stdin.to_vec();
    let writer = std::thread::spawn(move || {
        let _ = input.write_all(&data);
    });
    let mut stdout = child.stdout.take().unwrap();
    let reader = std::thread::spawn(move || {
        let mut out = Vec::new();
        let _ = stdout.read_to_end(&mut out);
        out
    });
    let mut peak = 0;
    loop {
        peak = peak.max(peak_resident(child.id()));
        if let Some(exit) = child.try_wait().unwrap() {
            writer.join().unwrap();
            return (exit.code().unwrap_or(-1), peak, reader.join().unwrap());
        }
        std::thread::sleep(std::time::Duration::from_millis(5));
    }
}

/// The peak resident memory of process `pid` so far (`VmHWM`, Linux), in bytes; 0 when it
/// cannot be read.
pub fn peak_resident(pid: u32) -> u64 {
    std::fs::read_to_string(format!("/proc/{pid}/status"))
        .ok()
        .and_then(|text| {
            text.lines()
                .find_map(|l| l.strip_prefix("VmHWM:"))
                .and_then(|v| v.trim().trim_end_matches("kB").trim().parse::<u64>().ok())
        })
        .unwrap_or(0)
        * 1024
}
