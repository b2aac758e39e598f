//! The labelled sessions of the shared corpus (`corpus/labels.json`), scanned in place by
//! the real `loopguard scan` with the `recommended` preset: every labelled loop gets at
//! least a warning inside its call range, no healthy session gets a critical, and no
//! labelled file is read as nothing. Prints one line per label and the number of loops
//! blocked; at least 12 of the 14 loops must be (the preset's corpus target).

mod common;

use std::collections::BTreeSet;
use std::path::Path;

use common::{run, shared_dir};
use serde_json::Value;

/// Loops that must be blocked inside their range (or by a run already stopped).
const MIN_BLOCKED: usize = 12;

/// Loops the preset does not even warn about, each with the reason. The test fails when
/// one of them gets caught (take it off the list) or another loop is missed.
const KNOWN_MISSES: &[(&str, &str)] = &[(
    "claude-code/7ef4b236-d946-48a6-a856-e45b02af7be7.jsonl",
    "low-confidence label: 13 searches with different commands that find nothing; the \
     outcomes are successes ('(Bash completed with no output)', 'No files found'), and \
     'the same empty answer from different calls' also fires on healthy edit runs \
     (identical 'Successfully modified file' acknowledgements)",
)];

const PRESET: &str =
    "{ tools: { loopDetection: { enabled: true } }, loopguard: { preset: 'recommended' } }";

struct Label {
    file: String,
    session: Option<String>,
    loop_: bool,
    calls: Option<(u64, u64)>,
    kind: String,
}

fn labels(corpus: &Path) -> Vec<Label> {
    let text = std::fs::read_to_string(corpus.join("labels.json")).unwrap();
    let doc: Value = serde_json::from_str(&text).unwrap();
    doc.as_array()
        .unwrap()
        .iter()
        .map(|l| Label {
            file: l["file"].as_str().unwrap().to_owned(),
            session: l["session"].as_str().map(str::to_owned),
            loop_: l["label"] == "loop",
            calls: l["calls"]
                .as_array()
                .map(|r| (r[0].as_u64().unwrap(), r[1].as_u64().unwrap())),
            kind: l["kind"].as_str().unwrap().to_owned(),
        })
        .collect()
}

/// The sessions of `doc` read from `file` (a file, or a directory given with a trailing
/// slash), narrowed to the label's session when the file holds several.
fn sessions<'a>(doc: &'a Value, corpus: &Path, label: &Label) -> Vec<&'a Value> {
    let path = corpus.join(&label.file);
    let path = path.to_str().unwrap().trim_end_matches('/');
    let of_file: Vec<&Value> = doc["sessions"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|s| s["file"].as_str().unwrap().starts_with(path))
        .collect();
    if of_file.len() <= 1 {
        return of_file;
    }
    match &label.session {
        Some(id) => of_file
            .into_iter()
            .filter(|s| {
                let sid = s["session"].as_str().unwrap();
                sid == id || sid.ends_with(id.as_str()) || id.ends_with(sid)
            })
            .collect(),
        None => of_file,
    }
}

/// Findings of a session: (detector, level, call index).
fn findings(session: &Value) -> Vec<(String, String, u64)> {
    session["findings"]
        .as_array()
        .unwrap()
        .iter()
        .map(|f| {
            (
                f["detector"].as_str().unwrap().to_owned(),
                f["level"].as_str().unwrap().to_owned(),
                f["call_index"].as_u64().unwrap(),
            )
        })
        .collect()
}

#[test]
fn labelled_loops_are_caught_and_healthy_sessions_get_no_critical() {
    let Some(shared) = shared_dir() else {
        println!("SKIPPED: shared folder not found (set LOOPGUARD_SHARED_DIR)");
        return;
    };
    let corpus = shared.join("corpus");
    let labels = labels(&corpus);
    assert_eq!(labels.len(), 27, "labels.json changed: review this test");

    let config = std::env::temp_dir().join(format!("lg-preset-{}.json5", std::process::id()));
    std::fs::write(&config, PRESET).unwrap();
    let files: BTreeSet<String> = labels
        .iter()
        .map(|l| {
            corpus
                .join(&l.file)
                .to_str()
                .unwrap()
                .trim_end_matches('/')
                .to_owned()
        })
        .collect();
    let mut args = vec!["scan", "--json", "--config", config.to_str().unwrap()];
    args.extend(files.iter().map(String::as_str));
    let out = run(&args, b"");
    std::fs::remove_file(&config).unwrap();
    let doc: Value = serde_json::from_slice(&out.stdout).unwrap_or_else(|e| {
        panic!(
            "not JSON ({e}); stderr: {}",
            String::from_utf8_lossy(&out.stderr)
        )
    });

    // No labelled file is read as nothing.
    let mut problems = Vec::new();
    for f in doc["files"].as_array().unwrap() {
        if f["status"] != "scanned" {
            problems.push(format!(
                "{}: status {} ({})",
                f["file"], f["status"], f["reason"]
            ));
        }
    }

    let mut blocked = 0;
    let mut loops = 0;
    for label in &labels {
        let found = sessions(&doc, &corpus, label);
        let name = format!(
            "{} {}",
            label.file,
            label.session.as_deref().unwrap_or_default()
        );
        if found.is_empty() {
            problems.push(format!("{name}: no session read"));
            continue;
        }
        if label.calls.is_some() && found.iter().all(|s| s["calls"] == 0) {
            problems.push(format!("{name}: read as nothing (0 calls)"));
        }
        let all: Vec<(String, String, u64)> = found.iter().flat_map(|s| findings(s)).collect();
        if !label.loop_ {
            let critical: Vec<_> = all.iter().filter(|f| f.1 == "critical").collect();
            println!(
                "healthy {name}: {} findings, {} critical",
                all.len(),
                critical.len()
            );
            if !critical.is_empty() {
                problems.push(format!("{name}: healthy but {critical:?}"));
            }
            continue;
        }
        loops += 1;
        let (lo, hi) = label.calls.unwrap();
        let inside: Vec<_> = all.iter().filter(|f| (lo..=hi).contains(&f.2)).collect();
        // A loop of a run already stopped before its range never happens under the guard:
        // every call of it is blocked.
        let stopped_before = found.iter().any(|s| {
            s["loops"].as_array().unwrap().iter().any(|l| {
                l["stopped_run"] == true
                    && l["first_block"]["call_index"]
                        .as_u64()
                        .is_some_and(|at| at < lo)
            })
        });
        let first_warning = inside.iter().find(|f| f.1 == "warning");
        let first_block = inside.iter().find(|f| f.1 == "critical");
        let is_blocked = first_block.is_some() || stopped_before;
        println!(
            "loop {name} {lo}-{hi} ({}): first warning {:?}, first block {:?}{}",
            label.kind,
            first_warning,
            first_block,
            if stopped_before {
                ", run stopped before the range"
            } else {
                ""
            }
        );
        blocked += usize::from(is_blocked);
        let known_miss = KNOWN_MISSES.iter().any(|(f, _)| *f == label.file);
        let caught = !inside.is_empty() || stopped_before;
        match (caught, known_miss) {
            (false, false) => problems.push(format!("{name}: loop {lo}-{hi} not even warned")),
            (true, true) => problems.push(format!("{name}: now caught, take it off KNOWN_MISSES")),
            _ => {}
        }
    }
    println!("{blocked} of {loops} labelled loops blocked");
    assert!(problems.is_empty(), "{}", problems.join("\n"));
    assert!(
        blocked >= MIN_BLOCKED,
        "{blocked} of {loops} loops blocked, want at least {MIN_BLOCKED}"
    );
}
