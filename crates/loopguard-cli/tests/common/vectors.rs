//! Runs a directory of replay vectors (`events.jsonl`, optional `config.json5`,
//! `expected.jsonl`, optional `expected-exit`) through the real binary and compares the
//! answers field by field. Message wording is free: a message must name the tool and hold
//! the count. Error texts are free: only their presence is compared.
#![allow(dead_code)]

use std::fs;
use std::path::{Path, PathBuf};

use serde_json::Value;

/// The case directories under `dir`, sorted.
pub fn cases(dir: &Path) -> Vec<PathBuf> {
    let mut cases: Vec<_> = fs::read_dir(dir)
        .unwrap()
        .filter_map(Result::ok)
        .map(|e| e.path())
        .filter(|p| p.is_dir())
        .collect();
    cases.sort();
    cases
}

/// The whole public conformance set kept in the repository, sorted.
pub fn conformance_cases() -> Vec<PathBuf> {
    let cases = cases(&super::conformance_dir());
    assert!(cases.len() >= 70, "the whole conformance set is expected");
    cases
}

/// This project's own vectors in the conformance layout (`spec/vectors`: late results of
/// blocked calls, retried events), sorted.
pub fn own_cases() -> Vec<PathBuf> {
    let cases = cases(&super::repo_root().join("spec/vectors"));
    assert!(cases.len() >= 4, "the vectors of spec/vectors are expected");
    cases
}

/// Every vector of the replay format's core (no extension block): the public set and this
/// project's own, for the front ends that must answer each exactly as `replay` does.
pub fn spec_cases() -> Vec<PathBuf> {
    let mut cases = conformance_cases();
    cases.extend(own_cases());
    cases
}

/// The vectors of the `loopguard` block whose state is the session's as well as the run's:
/// the spend budgets (`spec/extensions/budget-*`: usage events and budgets) and the run
/// storms (`run-storm-*`) and the agent trees (`agent-tree-*`: sessions linked to their
/// parents), for the front ends that must answer them exactly as `replay`.
pub fn budget_cases() -> Vec<PathBuf> {
    let cases: Vec<_> = cases(&super::repo_root().join("spec/extensions"))
        .into_iter()
        .filter(|c| {
            ["budget-", "run-storm-", "agent-tree-"]
                .iter()
                .any(|p| name(c).starts_with(p))
        })
        .collect();
    assert!(cases.len() >= 10, "the budget vectors are expected");
    cases
}

/// The extension vectors (`spec/extensions`) that hold `message` events, sorted: the loops
/// without tool calls, for the front ends that take messages as well as calls.
pub fn message_cases() -> Vec<PathBuf> {
    let cases: Vec<_> = cases(&super::repo_root().join("spec/extensions"))
        .into_iter()
        .filter(|c| {
            fs::read_to_string(c.join("events.jsonl"))
                .is_ok_and(|t| t.contains(r#""type":"message""#))
        })
        .collect();
    assert!(
        cases.len() >= 14,
        "the message vectors of spec/extensions are expected"
    );
    cases
}

/// A case's config file, if it has one.
pub fn config_of(case: &Path) -> Option<PathBuf> {
    Some(case.join("config.json5")).filter(|p| p.exists())
}

/// The config a server runs a case with: the case's own, else SPEC §7's defaults as a
/// document (`{}`), which the vectors expect; `loopguard serve` without a config turns
/// detection on instead (the defaults of a live guard).
pub fn server_config_of(case: &Path) -> PathBuf {
    config_of(case).unwrap_or_else(|| {
        Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/spec-defaults.json5")
    })
}

/// A case's name.
pub fn name(case: &Path) -> String {
    case.file_name().unwrap().to_string_lossy().into_owned()
}

/// Runs every case; returns one line per failing case.
pub fn failures(dir: &Path) -> (usize, Vec<String>) {
    let cases = cases(dir);
    let failures = cases
        .iter()
        .filter_map(|case| {
            check_case(case)
                .err()
                .map(|e| format!("{}: {e}", name(case)))
        })
        .collect();
    (cases.len(), failures)
}

/// Runs one case.
pub fn check_case(dir: &Path) -> Result<(), String> {
    let events = dir.join("events.jsonl");
    let mut args = vec!["replay".to_owned()];
    if let Some(config) = config_of(dir) {
        args.push("--config".into());
        args.push(config.display().to_string());
    }
    args.push(events.display().to_string());
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    let out = super::run(&args, b"");
    let code = out.status.code().unwrap_or(-1);
    let stderr = String::from_utf8_lossy(&out.stderr);

    if dir.join("expected-exit").exists() {
        let want: i32 = fs::read_to_string(dir.join("expected-exit"))
            .unwrap()
            .trim()
            .parse()
            .unwrap();
        if code != want {
            return Err(format!("exit {code}, want {want}; stderr: {stderr}"));
        }
        if !out.stdout.is_empty() {
            return Err("a fatal error must print nothing on stdout".into());
        }
        if stderr.trim().lines().count() != 1 {
            return Err(format!(
                "a fatal error must print one line on stderr, got {stderr:?}"
            ));
        }
        return Ok(());
    }

    let got = super::json_lines(&out.stdout);
    let want = super::json_lines(&fs::read(dir.join("expected.jsonl")).unwrap());
    if got.len() != want.len() {
        return Err(format!(
            "{} output lines, want {}; stderr: {stderr}",
            got.len(),
            want.len()
        ));
    }
    // The tool of each input line, by seq, to check that messages name it.
    let tools: Vec<Option<String>> = fs::read_to_string(&events)
        .unwrap()
        .lines()
        .map(|l| {
            serde_json::from_str::<Value>(l).ok().and_then(|v| {
                v.get("tool")
                    .and_then(Value::as_str)
                    .map(|t| t.trim().to_owned())
            })
        })
        .collect();
    for (g, w) in got.iter().zip(&want) {
        let seq = w["seq"].as_u64().unwrap_or(0) as usize;
        let tool = tools.get(seq.wrapping_sub(1)).cloned().flatten();
        compare(g, w, tool.as_deref(), "")
            .map_err(|e| format!("seq {}: {e}\n  got  {g}\n  want {w}", w["seq"]))?;
    }
    let want_code = if want.iter().any(|w| w.get("error").is_some()) {
        2
    } else {
        0
    };
    if code != want_code {
        return Err(format!("exit {code}, want {want_code}"));
    }
    Ok(())
}

/// Compares two answers (or nested objects of them) field by field.
fn compare(got: &Value, want: &Value, tool: Option<&str>, at: &str) -> Result<(), String> {
    match (got, want) {
        (Value::Object(g), Value::Object(w)) => {
            let keys: std::collections::BTreeSet<&String> = g.keys().chain(w.keys()).collect();
            for k in keys {
                let path = format!("{at}{k}");
                match (g.get(k), w.get(k), k.as_str()) {
                    (Some(_), Some(_), "error") => {}
                    (Some(gm), Some(_), "message") => {
                        let count = w.get("count").map(Value::to_string).unwrap_or_default();
                        let name = w.get("tool").and_then(Value::as_str).or(tool);
                        message_names(gm, &count, name).map_err(|e| format!("{path}: {e}"))?;
                    }
                    (Some(gv), Some(wv), _) => compare(gv, wv, tool, &format!("{path}."))?,
                    (gv, wv, _) => {
                        return Err(format!("{path}: got {gv:?}, want {wv:?}"));
                    }
                }
            }
            Ok(())
        }
        (g, w) if g == w => Ok(()),
        (g, w) => Err(format!("{at}: got {g}, want {w}")),
    }
}

/// Every warn/block/abort message names the tool and contains the decimal count.
fn message_names(message: &Value, count: &str, tool: Option<&str>) -> Result<(), String> {
    let message = message.as_str().ok_or("message is not a string")?;
    if !message.contains(count) {
        return Err(format!("message {message:?} lacks the count {count}"));
    }
    if let Some(tool) = tool {
        if !message.contains(tool) {
            return Err(format!("message {message:?} does not name the tool {tool}"));
        }
    }
    Ok(())
}
