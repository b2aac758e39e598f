//! The labelled sessions of both shared corpora (`corpus/labels.json`,
//! `corpus2/labels.json`), scanned in place by the real `loopguard scan` with the
//! `recommended` preset: every confident loop is blocked inside its call range (or its run
//! was already stopped before it), no confident-healthy session gets a critical, and no
//! labelled file is read as nothing. Prints one line per label.
//!
//! The two files label alike with different keys: the first corpus marks its uncertain
//! labels in the note ("Low confidence"), the second with `"assert": false` and selects
//! sessions with `match` rules (its README).
//!
//! Loops without tool calls: the second corpus leaves its two format-error loops (L12,
//! L13: mini-swe-agent answering in text 18 to 25 times in a row, the harness replying "No
//! tool calls found" each time) unasserted, since no detector of tool calls can see them.
//! The detectors of messages can, and here they must: each is checked like a loop, on the
//! findings of those detectors only. The healthy labels of the same files (H5, H6) say
//! "healthy at the tool level" (the waste is in L12, L13), so they are judged on the
//! findings of the detectors of calls only.

mod common;

use std::collections::BTreeSet;
use std::path::Path;

use common::{run, shared_dir};
use serde_json::Value;

const PRESET: &str =
    "{ tools: { loopDetection: { enabled: true } }, loopguard: { preset: 'recommended' } }";

/// The labels of loops without tool calls (second corpus), asserted here (see the module
/// docs).
const TEXT_LOOPS: &[&str] = &["L12", "L13"];

/// Which findings a label is judged on.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Level {
    /// Every detector's.
    All,
    /// The detectors of messages only: a loop without tool calls.
    Messages,
    /// The detectors of calls only: a session healthy at the tool level whose waste is a
    /// loop without tool calls, labelled apart.
    Calls,
}

/// A label of either corpus, read into one shape.
struct Label {
    name: String,
    file: String,
    /// Which sessions of the file.
    select: Select,
    loop_: bool,
    calls: Option<(u64, u64)>,
    /// Checked (a confident label), or only reported.
    confident: bool,
    /// Which findings count.
    level: Level,
}

enum Select {
    /// The first corpus: the file's only session, or the one the label names.
    Session(Option<String>),
    /// The second corpus: `*`, `id:`, `contains:`, `nth:` rules, OR-ed.
    Match(Vec<String>),
}

fn first_corpus_labels(corpus: &Path) -> Vec<Label> {
    let text = std::fs::read_to_string(corpus.join("labels.json")).unwrap();
    let doc: Value = serde_json::from_str(&text).unwrap();
    doc.as_array()
        .unwrap()
        .iter()
        .map(|l| Label {
            name: l["file"].as_str().unwrap().to_owned(),
            file: l["file"].as_str().unwrap().to_owned(),
            select: Select::Session(l["session"].as_str().map(str::to_owned)),
            loop_: l["label"] == "loop",
            calls: range(&l["calls"]),
            confident: !l["note"]
                .as_str()
                .unwrap_or_default()
                .contains("Low confidence"),
            level: Level::All,
        })
        .collect()
}

fn second_corpus_labels(corpus: &Path) -> Vec<Label> {
    let text = std::fs::read_to_string(corpus.join("labels.json")).unwrap();
    let doc: Value = serde_json::from_str(&text).unwrap();
    let labels = doc["labels"].as_array().unwrap();
    let text_loop = |l: &Value| TEXT_LOOPS.contains(&l["id"].as_str().unwrap());
    let text_loop_files: Vec<&str> = labels
        .iter()
        .filter(|l| text_loop(l))
        .map(|l| l["file"].as_str().unwrap())
        .collect();
    labels
        .iter()
        .map(|l| Label {
            name: format!(
                "{} {}",
                l["id"].as_str().unwrap(),
                l["file"].as_str().unwrap()
            ),
            file: l["file"].as_str().unwrap().to_owned(),
            select: Select::Match(
                l["match"]
                    .as_array()
                    .unwrap()
                    .iter()
                    .map(|m| m.as_str().unwrap().to_owned())
                    .collect(),
            ),
            loop_: l["kind"] == "loop",
            calls: range(&l["calls"]),
            confident: l["assert"] == true || text_loop(l),
            level: if text_loop(l) {
                Level::Messages
            } else if l["kind"] == "healthy"
                && text_loop_files.contains(&l["file"].as_str().unwrap())
            {
                Level::Calls
            } else {
                Level::All
            },
        })
        .collect()
}

fn range(v: &Value) -> Option<(u64, u64)> {
    v.as_array()
        .map(|r| (r[0].as_u64().unwrap(), r[1].as_u64().unwrap()))
}

/// The sessions of `doc` a label selects.
fn sessions<'a>(doc: &'a Value, corpus: &Path, label: &Label) -> Vec<&'a Value> {
    let path = corpus.join(&label.file);
    let path = path.to_str().unwrap().trim_end_matches('/').to_owned();
    let of_file: Vec<&Value> = doc["sessions"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|s| s["file"].as_str().unwrap().trim_end_matches('/') == path)
        .collect();
    match &label.select {
        Select::Session(_) if of_file.len() <= 1 => of_file,
        Select::Session(None) => of_file,
        Select::Session(Some(id)) => {
            let id = id.replace(" / agent ", "/agent-");
            of_file
                .into_iter()
                .filter(|s| {
                    let sid = s["session"].as_str().unwrap();
                    sid == id || sid.ends_with(id.as_str()) || id.ends_with(sid)
                })
                .collect()
        }
        Select::Match(rules) => {
            let mut found: Vec<&Value> = Vec::new();
            for rule in rules {
                let chosen: Vec<&Value> = if rule == "*" {
                    of_file.clone()
                } else if let Some(id) = rule.strip_prefix("id:") {
                    of_file
                        .iter()
                        .copied()
                        .filter(|s| s["session"] == id)
                        .collect()
                } else if let Some(part) = rule.strip_prefix("contains:") {
                    of_file
                        .iter()
                        .copied()
                        .filter(|s| s["session"].as_str().unwrap().contains(part))
                        .collect()
                } else if let Some(k) = rule.strip_prefix("nth:") {
                    let k: usize = k.parse().unwrap();
                    of_file.get(k - 1).copied().into_iter().collect()
                } else {
                    panic!("unknown match rule {rule}")
                };
                for s in chosen {
                    if !found.iter().any(|f| std::ptr::eq(*f, s)) {
                        found.push(s);
                    }
                }
            }
            found
        }
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

/// Whether the detector named `name` judges messages rather than calls.
fn judges_messages(name: &str) -> bool {
    loopguard::Detector::ALL
        .iter()
        .any(|d| d.as_str() == name && d.judges_messages())
}

/// Scans the labelled files of `corpus` with the preset.
fn scan(corpus: &Path, labels: &[Label]) -> Value {
    let config = std::env::temp_dir().join(format!(
        "lg-preset-{}-{}.json5",
        std::process::id(),
        corpus.file_name().unwrap().to_string_lossy()
    ));
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
    serde_json::from_slice(&out.stdout).unwrap_or_else(|e| {
        panic!(
            "not JSON ({e}); stderr: {}",
            String::from_utf8_lossy(&out.stderr)
        )
    })
}

/// What the labels found: the problems, and (blocked, confident) loop counts.
fn check(corpus: &Path, labels: &[Label]) -> (Vec<String>, usize, usize) {
    let doc = scan(corpus, labels);
    let mut problems = Vec::new();
    for f in doc["files"].as_array().unwrap() {
        if f["status"] != "scanned" {
            problems.push(format!(
                "{}: status {} ({})",
                f["file"], f["status"], f["reason"]
            ));
        }
    }
    let (mut blocked, mut loops) = (0, 0);
    for label in labels {
        let found = sessions(&doc, corpus, label);
        let name = &label.name;
        let tag = match (label.confident, label.level) {
            (false, _) => " [low confidence]",
            (true, Level::Messages) => " [without tool calls]",
            (true, Level::Calls) => " [tool level]",
            (true, Level::All) => "",
        };
        if found.is_empty() {
            problems.push(format!("{name}: no session read"));
            continue;
        }
        if label.calls.is_some() && found.iter().all(|s| s["calls"] == 0) {
            problems.push(format!("{name}: read as nothing (0 calls)"));
        }
        let all: Vec<(String, String, u64)> = found
            .iter()
            .flat_map(|s| findings(s))
            .filter(|f| match label.level {
                Level::All => true,
                Level::Messages => judges_messages(&f.0),
                Level::Calls => !judges_messages(&f.0),
            })
            .collect();
        if !label.loop_ {
            let critical: Vec<_> = all.iter().filter(|f| f.1 == "critical").collect();
            println!(
                "healthy {name}{tag}: {} findings, {} critical",
                all.len(),
                critical.len()
            );
            if label.confident && !critical.is_empty() {
                problems.push(format!("{name}: healthy but {critical:?}"));
            }
            continue;
        }
        let (lo, hi) = label.calls.unwrap();
        let first_block = all
            .iter()
            .find(|f| f.1 == "critical" && (lo..=hi).contains(&f.2));
        let first_warning = all
            .iter()
            .find(|f| f.1 == "warning" && (lo..=hi).contains(&f.2));
        // A loop of a run already stopped before its range never happens under the
        // guard: every call of it is blocked.
        let stopped_before = found.iter().any(|s| {
            s["loops"].as_array().unwrap().iter().any(|l| {
                l["stopped_run"] == true
                    && l["first_block"]["call_index"]
                        .as_u64()
                        .is_some_and(|at| at < lo)
            })
        });
        let is_blocked = first_block.is_some() || stopped_before;
        println!(
            "loop {name}{tag} {lo}-{hi}: first warning {first_warning:?}, first block {first_block:?}{}",
            if stopped_before {
                ", run stopped before the range"
            } else {
                ""
            }
        );
        if label.confident {
            loops += 1;
            blocked += usize::from(is_blocked);
            if !is_blocked {
                problems.push(format!("{name}: loop {lo}-{hi} not blocked"));
            }
        }
    }
    (problems, blocked, loops)
}

#[test]
fn first_corpus_confident_loops_are_blocked_and_healthy_sessions_get_no_critical() {
    let Some(shared) = shared_dir() else {
        println!("SKIPPED: shared folder not found (set LOOPGUARD_SHARED_DIR)");
        return;
    };
    let corpus = shared.join("corpus");
    let labels = first_corpus_labels(&corpus);
    assert_eq!(labels.len(), 27, "labels.json changed: review this test");
    let (problems, blocked, loops) = check(&corpus, &labels);
    println!("{blocked} of {loops} confident loops blocked");
    assert_eq!(loops, 12, "confident loops of the first corpus");
    assert!(problems.is_empty(), "{}", problems.join("\n"));
}

#[test]
fn second_corpus_confident_loops_are_blocked_and_healthy_sessions_get_no_critical() {
    let Some(shared) = shared_dir() else {
        println!("SKIPPED: shared folder not found (set LOOPGUARD_SHARED_DIR)");
        return;
    };
    let corpus = shared.join("corpus2");
    let labels = second_corpus_labels(&corpus);
    assert_eq!(labels.len(), 27, "labels.json changed: review this test");
    let (problems, blocked, loops) = check(&corpus, &labels);
    println!("{blocked} of {loops} confident loops blocked");
    assert_eq!(
        loops, 12,
        "confident loops of the second corpus (its README), and its two loops without tool calls"
    );
    assert!(problems.is_empty(), "{}", problems.join("\n"));
}
