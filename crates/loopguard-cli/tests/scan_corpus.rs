//! `loopguard scan` over both shared corpora, read in place: no file with entries is read
//! as nothing, and every labelled session of the first corpus's `labels.json` is where the
//! label says, with at least the calls its range names (prints SKIPPED when the corpus is
//! absent).

mod common;

use std::collections::BTreeMap;
use std::path::Path;

use common::{run, shared_dir};
use serde_json::Value;

/// Files of the corpus that are its own metadata, not transcripts.
const NOT_TRANSCRIPTS: &[&str] = &["labels.json", "openclaw-derived/replay-results.json"];

/// Transcripts that hold no tool call by nature (labels.json says so).
const WITHOUT_CALLS: &[&str] = &[
    "openhands-output-v0/gorilla_output_gpt-4o-2024-05-13_torch.jsonl",
    "gemini-cli/session-2026-01-24T19-04-260e1681.json",
];

fn scan_corpus(corpus: &Path) -> Value {
    let out = run(&["scan", "--json", &corpus.display().to_string()], b"");
    serde_json::from_slice(&out.stdout).unwrap_or_else(|e| {
        panic!(
            "not JSON ({e}); stderr: {}",
            String::from_utf8_lossy(&out.stderr)
        )
    })
}

/// The file's path inside the corpus.
/// The scan of the shared corpus `name`, its root as the report writes it, and the calls
/// of each file (by its path under the root); `None` without the shared folder.
fn scan_with_calls(name: &str) -> Option<(Value, String, BTreeMap<String, u64>)> {
    let corpus = shared_dir()?.join(name);
    let doc = scan_corpus(&corpus);
    let root = corpus.display().to_string();
    let mut calls: BTreeMap<String, u64> = BTreeMap::new();
    for s in doc["sessions"].as_array().unwrap() {
        let file = relative(s["file"].as_str().unwrap(), &root).to_owned();
        *calls.entry(file).or_default() += s["calls"].as_u64().unwrap();
    }
    Some((doc, root, calls))
}

fn relative<'a>(file: &'a str, corpus: &str) -> &'a str {
    file.strip_prefix(corpus)
        .unwrap_or(file)
        .trim_start_matches('/')
}

#[test]
fn no_corpus_file_with_entries_is_read_as_nothing() {
    let Some((doc, root, calls)) = scan_with_calls("corpus") else {
        eprintln!("SKIPPED: no shared corpus");
        return;
    };
    let mut transcripts = 0;
    for f in doc["files"].as_array().unwrap() {
        let file = relative(f["file"].as_str().unwrap(), &root);
        let status = f["status"].as_str().unwrap();
        if file.ends_with(".md") {
            continue;
        }
        if NOT_TRANSCRIPTS.contains(&file) {
            assert_eq!(status, "unknown_format", "{file}");
            continue;
        }
        if status == "companion" {
            continue;
        }
        transcripts += 1;
        assert_eq!(status, "scanned", "{file}: {f}");
        assert!(f["read"]["records"].as_u64().unwrap() > 0, "{file}");
        let n = calls.get(file).copied().unwrap_or(0);
        if WITHOUT_CALLS.contains(&file) {
            assert_eq!(n, 0, "{file}");
            assert!(
                f["read"]["skipped"].as_array().unwrap().is_empty(),
                "{file}"
            );
        } else {
            assert!(n > 0, "{file} is read as nothing: {f}");
        }
    }
    // 14 transcripts of the first corpus and the 25 added on 2026-12-01.
    assert_eq!(transcripts, 14 + 25);
    assert_eq!(doc["summary"]["unread_files"], 0);
}

/// The session a label names: `"<session> / agent <id>"` is the subagent session
/// `<session>/agent-<id>`; no session means the file's only one.
fn labelled_session<'a>(doc: &'a Value, root: &str, label: &Value) -> Option<&'a Value> {
    let file = label["file"].as_str().unwrap();
    let wanted = label["session"]
        .as_str()
        .map(|s| s.replace(" / agent ", "/agent-"));
    let mut found = doc["sessions"].as_array().unwrap().iter().filter(|s| {
        let f = relative(s["file"].as_str().unwrap(), root);
        (f == file || f == file.trim_end_matches('/'))
            && wanted.as_deref().is_none_or(|w| s["session"] == w)
    });
    let first = found.next();
    if wanted.is_none() {
        assert!(found.next().is_none(), "{file}: one session expected");
    }
    first
}

#[test]
fn every_label_lands_on_a_session_with_its_calls() {
    let Some(shared) = shared_dir() else {
        eprintln!("SKIPPED: no shared corpus");
        return;
    };
    let corpus = shared.join("corpus");
    let labels: Vec<Value> =
        serde_json::from_slice(&std::fs::read(corpus.join("labels.json")).unwrap()).unwrap();
    let doc = scan_corpus(&corpus);
    let root = corpus.display().to_string();
    for label in &labels {
        let file = label["file"].as_str().unwrap();
        let Some(range) = label["calls"].as_array() else {
            // No calls by nature: every session of the file is empty.
            assert!(
                doc["sessions"]
                    .as_array()
                    .unwrap()
                    .iter()
                    .filter(|s| relative(s["file"].as_str().unwrap(), &root) == file)
                    .all(|s| s["calls"] == 0),
                "{file}"
            );
            continue;
        };
        let session = labelled_session(&doc, &root, label)
            .unwrap_or_else(|| panic!("no session for label {label}"));
        let last = range[1].as_u64().unwrap();
        let calls = session["calls"].as_u64().unwrap();
        assert!(calls >= last, "{file}: {calls} calls, label ends at {last}");
        if label["label"] == "healthy" && range[0] == 1 {
            assert_eq!(calls, last, "{file}: a healthy label covers every call");
        }
    }
}

/// The second corpus (`corpus2/`): every one of its 23 transcripts is scanned and yields
/// calls (the text-mode mini-swe-agent list included); only its metadata is not read.
#[test]
fn every_second_corpus_file_is_read() {
    let Some((doc, root, calls)) = scan_with_calls("corpus2") else {
        eprintln!("SKIPPED: no shared corpus");
        return;
    };
    let mut transcripts = 0;
    for f in doc["files"].as_array().unwrap() {
        let file = relative(f["file"].as_str().unwrap(), &root);
        let status = f["status"].as_str().unwrap();
        if file == "labels.json" {
            assert_eq!(status, "unknown_format", "{file}");
            continue;
        }
        transcripts += 1;
        assert_eq!(status, "scanned", "{file}: {f}");
        let n = calls.get(file).copied().unwrap_or(0);
        assert!(n > 0, "{file} is read as nothing: {f}");
    }
    assert_eq!(transcripts, 23);
    assert_eq!(doc["summary"]["unread_files"], 0);
    // The three Markdown files (README, SOURCES, LABELS) are the only ones left aside.
    assert_eq!(doc["summary"]["ignored_files"], 3);
}
