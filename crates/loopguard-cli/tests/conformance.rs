//! The public conformance vectors (SPEC §7), run through the real `loopguard replay`.

mod common;

use std::fs;
use std::path::Path;

use serde_json::Value;

/// Fields compared line by line (message wording is free).
const FIELDS: &[&str] = &[
    "seq",
    "type",
    "session",
    "run",
    "verdict",
    "level",
    "detector",
    "count",
    "notify",
    "terminal",
    "paired_tool",
    "recorded",
    "armed",
];

fn check_case(dir: &Path) -> Result<(), String> {
    let events = dir.join("events.jsonl");
    let config = dir.join("config.json5");
    let mut args = vec!["replay".to_owned()];
    if config.exists() {
        args.push("--config".into());
        args.push(config.display().to_string());
    }
    args.push(events.display().to_string());
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    let out = common::run(&args, b"");
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

    let got = common::json_lines(&out.stdout);
    let want = common::json_lines(&fs::read(dir.join("expected.jsonl")).unwrap());
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
        compare_line(g, w, tool.as_deref())
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

fn compare_line(got: &Value, want: &Value, tool: Option<&str>) -> Result<(), String> {
    for f in FIELDS {
        if got.get(f) != want.get(f) {
            return Err(format!(
                "field {f}: got {:?}, want {:?}",
                got.get(f),
                want.get(f)
            ));
        }
    }
    if got.get("error").is_some() != want.get("error").is_some() {
        return Err("error presence differs".into());
    }
    match (got.get("abort"), want.get("abort")) {
        (None, None) => {}
        (Some(Value::Null), Some(Value::Null)) => {}
        (Some(g), Some(w)) if g.is_object() && w.is_object() => {
            for f in ["detector", "tool", "count"] {
                if g.get(f) != w.get(f) {
                    return Err(format!(
                        "abort.{f}: got {:?}, want {:?}",
                        g.get(f),
                        w.get(f)
                    ));
                }
            }
            message_names(g, w, w["tool"].as_str().unwrap_or_default())?;
        }
        (g, w) => return Err(format!("abort: got {g:?}, want {w:?}")),
    }
    if let (Some(verdict), Some(tool)) = (want.get("verdict").and_then(Value::as_str), tool) {
        if verdict != "allow" {
            message_names(got, want, tool)?;
        }
    }
    Ok(())
}

/// Every warn/block/abort message names the tool and contains the decimal count.
fn message_names(got: &Value, want: &Value, tool: &str) -> Result<(), String> {
    let message = got["message"].as_str().ok_or("missing message")?;
    let count = want["count"].to_string();
    if !message.contains(&count) {
        return Err(format!("message {message:?} lacks the count {count}"));
    }
    if !message.contains(tool) {
        return Err(format!("message {message:?} does not name the tool {tool}"));
    }
    Ok(())
}

#[test]
fn conformance_vectors() {
    let dir = common::conformance_dir();
    let mut cases: Vec<_> = fs::read_dir(&dir)
        .unwrap()
        .filter_map(Result::ok)
        .map(|e| e.path())
        .filter(|p| p.is_dir())
        .collect();
    cases.sort();
    assert!(
        cases.len() >= 70,
        "expected the whole conformance set in {}",
        dir.display()
    );
    let failures: Vec<String> = cases
        .iter()
        .filter_map(|case| {
            check_case(case)
                .err()
                .map(|e| format!("{}: {e}", case.file_name().unwrap().to_string_lossy()))
        })
        .collect();
    assert!(
        failures.is_empty(),
        "{} of {} cases failed:\n{}",
        failures.len(),
        cases.len(),
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
