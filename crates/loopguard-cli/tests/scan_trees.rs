//! Agent trees in `loopguard scan`, on labelled real transcripts read in place (the shared
//! corpora; prints SKIPPED when they are absent) and on the fixture of
//! `tests/fixtures/trees` (its source and licence in `SOURCES.md` there). Each label says
//! what the transcript is and why; the test checks that the scan links every sub-agent to
//! the session and run that spawned it, reports the tree, and raises no critical finding
//! on a transcript labelled healthy.

mod common;

use std::path::{Path, PathBuf};

use common::{run, shared_dir};
use serde_json::Value;

/// What a labelled transcript is.
#[derive(Clone, Copy, Debug, PartialEq)]
enum Label {
    /// Sub-agents that fail or repeat: the tree must show each under its parent.
    FanOutWithFailingChild,
    /// A planned sub-agent (or a few) that did its task: a tree, no critical finding.
    HealthyPlannedFanOut,
    /// A heartbeat or cron session: many runs, each doing its small job; no tree, no run
    /// storm, no critical finding.
    HealthyCron,
}

struct Case {
    /// The path scanned: under the shared folder (`corpus/...`) or the fixtures.
    path: &'static str,
    label: Label,
    /// The root session and its children with the run that spawned each (the run of the
    /// root's `Task`/`Agent` call, as the reader numbers runs: one per prompt), when a
    /// tree is expected.
    tree: Option<(&'static str, &'static [(&'static str, &'static str)])>,
    /// Why the label.
    why: &'static str,
}

const CASES: &[Case] = &[
    Case {
        path: "corpus/claude-code/44ef5cbf-9cc3-4f7b-ac40-337a4d39713b.jsonl",
        label: Label::FanOutWithFailingChild,
        tree: Some((
            "44ef5cbf-9cc3-4f7b-ac40-337a4d39713b",
            &[(
                "44ef5cbf-9cc3-4f7b-ac40-337a4d39713b/agent-a71969c1296961234",
                "turn-6",
            )],
        )),
        why: "call 6 of the main session (`Agent`, 'Find Teams launch command') spawns an \
              Explore sub-agent (labels.json: loop, error-run) whose parallel batch fails \
              (1 error, 4 cancelled), re-runs the searches, then gets four different Bash \
              commands refused with the same permission text; the parent's `progress` lines \
              name it (data.agentId), its file is subagents/agent-a71969c1296961234.jsonl",
    },
    Case {
        path: "fixtures:trees/claude-code/ae4a77f8-aedd-4bc1-888f-c94edc91af04.jsonl",
        label: Label::HealthyPlannedFanOut,
        tree: Some((
            "ae4a77f8-aedd-4bc1-888f-c94edc91af04",
            &[("ae4a77f8-aedd-4bc1-888f-c94edc91af04/agent-aac57f5", "turn-1")],
        )),
        why: "working on a task, the session sends one general-purpose sub-agent to look up \
              package versions on hex.pm (`Task` 'Check OTEL hex package versions'); it makes \
              12 different searches and fetches and reports back (toolUseResult.agentId \
              aac57f5, status completed), and the session goes on with its answer",
    },
    Case {
        path: "corpus/openclaw/0ff7b343-fcdb-4bc2-8504-ccc296c7e85b.checkpoint.016e7403-3ec8-4366-a5f3-f7fed9fa357c.jsonl",
        label: Label::HealthyCron,
        tree: None,
        why: "a heartbeat every 30 minutes reads HEARTBEAT.md: 319 runs of one or two calls, \
              573 identical reads across runs, each run succeeding (SOURCES.md: expected no \
              warning); nothing is spawned",
    },
];

fn path_of(case: &Case) -> Option<PathBuf> {
    match case.path.strip_prefix("fixtures:") {
        Some(rel) => Some(
            Path::new(env!("CARGO_MANIFEST_DIR"))
                .join("tests/fixtures")
                .join(rel),
        ),
        None => Some(shared_dir()?.join(case.path)),
    }
}

/// Scans the transcript and, for a Claude Code main session, the folder of its
/// sub-agents (as a scan of the project folder would).
fn scan(path: &Path) -> Value {
    let mut args = vec![
        "scan".to_owned(),
        "--json".to_owned(),
        path.display().to_string(),
    ];
    let subagents = path.with_extension("").join("subagents");
    if subagents.is_dir() {
        args.push(subagents.display().to_string());
    }
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    let out = run(&args, b"");
    serde_json::from_slice(&out.stdout).unwrap_or_else(|e| {
        panic!(
            "not JSON ({e}); stderr: {}",
            String::from_utf8_lossy(&out.stderr)
        )
    })
}

#[test]
fn labelled_trees_and_healthy_sessions() {
    let mut checked = 0;
    for case in CASES {
        let Some(path) = path_of(case).filter(|p| p.exists()) else {
            eprintln!("SKIPPED: {} (no shared corpus)", case.path);
            continue;
        };
        let doc = scan(&path);
        let what = format!("{} ({:?}: {})", case.path, case.label, case.why);
        let trees = doc["trees"].as_array().unwrap();
        let critical = doc["sessions"]
            .as_array()
            .unwrap()
            .iter()
            .flat_map(|s| s["findings"].as_array().unwrap())
            .filter(|f| f["level"] == "critical")
            .count();
        match case.tree {
            Some((root, children)) => {
                assert_eq!(trees.len(), 1, "{what}: {trees:?}");
                let t = &trees[0];
                assert_eq!(t["root"], root, "{what}");
                assert_eq!(t["children"], children.len(), "{what}");
                let nodes = t["nodes"].as_array().unwrap();
                // Each child under the root, naming the run whose call spawned it.
                let found: Vec<_> = nodes[1..]
                    .iter()
                    .map(|n| {
                        assert_eq!(n["parent"], root, "{what}");
                        (
                            n["session"].as_str().unwrap(),
                            n["parent_run"].as_str().unwrap_or("none"),
                        )
                    })
                    .collect();
                assert_eq!(found, children, "{what}");
                if case.label == Label::FanOutWithFailingChild {
                    assert!(
                        nodes[1..].iter().any(|n| n["failed"].as_u64() > Some(0)),
                        "{what}"
                    );
                }
            }
            None => assert!(trees.is_empty(), "{what}: {trees:?}"),
        }
        if case.label != Label::FanOutWithFailingChild {
            assert_eq!(critical, 0, "{what}");
            assert_eq!(doc["summary"]["run_storms"], 0, "{what}");
        }
        checked += 1;
    }
    eprintln!("{checked} of {} labelled transcripts checked", CASES.len());
}

/// A folder of the shared corpus (`None`, said on stderr, without it).
fn corpus_folder(name: &str) -> Option<PathBuf> {
    let folder = shared_dir().map(|d| d.join("corpus").join(name));
    if folder.is_none() {
        eprintln!("SKIPPED: no shared corpus");
    }
    folder
}

/// A temporary OpenClaw sessions folder: the corpus transcripts of `sessions`, with the
/// session store `store`.
fn sessions_folder(corpus: &Path, sessions: &[&str], store: &Value) -> tempfile::TempDir {
    let dir = tempfile::tempdir().unwrap();
    for id in sessions {
        let name = format!("{id}.jsonl");
        std::fs::copy(corpus.join(&name), dir.path().join(&name)).unwrap();
    }
    std::fs::write(dir.path().join("sessions.json"), store.to_string()).unwrap();
    dir
}

/// OpenClaw records a spawned session in its session store (`sessions.json`, beside the
/// transcripts): `spawnedBy` names the parent's key. Two real transcripts of the corpus,
/// copied into a temporary sessions folder with a store that makes one the other's child,
/// scan as one tree (the parent made no spawn call that names the child: no parent run).
#[test]
fn an_openclaw_session_store_links_a_spawned_session() {
    let Some(corpus) = corpus_folder("openclaw") else {
        return;
    };
    let parent = "44de2062-6cdd-4d8c-917e-41a2bb188a7a";
    let child = "f8c3e7a8-7dc1-43cc-8ce0-a9d268c29be1";
    let store = serde_json::json!({
        "agent:main:main": {"sessionId": parent},
        "agent:main:subagent:6f3e": {"sessionId": child, "spawnedBy": "agent:main:main", "spawnDepth": 1},
    });
    let dir = sessions_folder(&corpus, &[parent, child], &store);
    let doc = scan(dir.path());
    let trees = doc["trees"].as_array().unwrap();
    assert_eq!(trees.len(), 1, "{trees:?}");
    assert_eq!(trees[0]["root"], parent);
    let nodes = trees[0]["nodes"].as_array().unwrap();
    assert_eq!(nodes.len(), 2);
    assert_eq!(
        (&nodes[1]["session"], &nodes[1]["parent"]),
        (&child.into(), &parent.into())
    );
    assert_eq!(nodes[1]["parent_run"], Value::Null);
}

/// A sub-agent file scanned without its parent's file (named alone, the parent elsewhere):
/// it still shows under its parent, a root not scanned. Beside its parent, it names the
/// parent's run.
#[test]
fn a_subagent_scanned_alone_shows_under_its_unscanned_parent() {
    let Some(corpus) = corpus_folder("claude-code") else {
        return;
    };
    let parent = "44ef5cbf-9cc3-4f7b-ac40-337a4d39713b";
    let name = "agent-a71969c1296961234.jsonl";
    let dir = tempfile::tempdir().unwrap();
    let alone = dir.path().join(name);
    std::fs::copy(corpus.join(parent).join("subagents").join(name), &alone).unwrap();
    let doc = scan(&alone);
    let t = &doc["trees"].as_array().unwrap()[0];
    assert_eq!((&t["root"], &t["file"]), (&parent.into(), &Value::Null));
    assert_eq!(t["nodes"][1]["parent_run"], Value::Null);
    let beside = scan(&corpus.join(parent).join("subagents").join(name));
    assert_eq!(beside["trees"][0]["nodes"][1]["parent_run"], "turn-6");
}

/// The parent run of an OpenClaw sub-agent: the store names the parent, the parent's
/// transcript the run whose `sessions_spawn` call was answered with the child's key. The
/// corpus parent `08237d46…` spawned sub-agents (its answers name their keys); two other
/// corpus transcripts stand for two of them.
#[test]
fn an_openclaw_subagent_names_the_run_that_spawned_it() {
    let Some(corpus) = corpus_folder("openclaw") else {
        return;
    };
    let parent = "08237d46-d6c7-42a2-ab47-87ff3939da71";
    let first = "44de2062-6cdd-4d8c-917e-41a2bb188a7a";
    let third = "f8c3e7a8-7dc1-43cc-8ce0-a9d268c29be1";
    let parent_key = "agent:main:tui-58c5b93f-289c-49cc-b36f-a77dee41578e";
    let store = serde_json::json!({
        parent_key: {"sessionId": parent},
        "agent:main:subagent:6f3e96b4-e285-40e2-ae08-0f5b1b22a130": {"sessionId": first, "spawnedBy": parent_key},
        "agent:main:subagent:dee538d2-fdd7-4f95-b877-56f8425a050b": {"sessionId": third, "spawnedBy": parent_key},
    });
    let dir = sessions_folder(&corpus, &[parent, first, third], &store);
    let doc = scan(dir.path());
    let trees = doc["trees"].as_array().unwrap();
    assert_eq!(trees.len(), 1, "{trees:?}");
    let nodes = trees[0]["nodes"].as_array().unwrap();
    let run_of = |child: &str| {
        nodes
            .iter()
            .find(|n| n["session"] == child)
            .map(|n| n["parent_run"].clone())
    };
    // The parent's runs as a scan of it numbers them: its first spawn (line 46) is in
    // its fifth run, its third (line 274) in its sixteenth; the second child's key names
    // no transcript here.
    assert_eq!(run_of(first), Some(Value::from("turn-5")));
    assert_eq!(run_of(third), Some(Value::from("turn-16")));
}

/// Gemini CLI (0.61 and later) writes a sub-agent's conversation into a folder named after
/// its parent session, `chats/<parent session id>/<id>.jsonl`, with `kind: "subagent"`:
/// scan puts it under its parent.
#[test]
fn a_gemini_cli_subagent_shows_under_its_parent() {
    let dir = tempfile::tempdir().unwrap();
    let parent = "7fdc30e1-64ef-4464-a6fb-009c1c853335";
    let chats = dir.path().join("project/chats");
    std::fs::create_dir_all(chats.join(parent)).unwrap();
    let main = format!(
        concat!(
            r#"{{"sessionId":"{p}","projectHash":"h","startTime":"t","lastUpdated":"t","kind":"main"}}"#,
            "\n",
            r#"{{"id":"u1","type":"user","content":[{{"text":"Where is the config read?"}}]}}"#,
            "\n",
            r#"{{"id":"g1","type":"gemini","content":"I will ask the investigator.","toolCalls":[{{"id":"c1","name":"codebase_investigator","args":{{"objective":"find the config reader"}},"result":[{{"functionResponse":{{"id":"c1","name":"codebase_investigator","response":{{"output":"src/config.rs"}}}}}}],"status":"success"}}]}}"#,
            "\n"
        ),
        p = parent
    );
    std::fs::write(chats.join("session-2026-12-03T23-24-7fdc30e1.jsonl"), main).unwrap();
    let child = concat!(
        r#"{"sessionId":"investigator-1","projectHash":"h","startTime":"t","lastUpdated":"t","kind":"subagent"}"#,
        "\n",
        r#"{"id":"s1","type":"user","content":[{"text":"find the config reader"}]}"#,
        "\n",
        r#"{"id":"s2","type":"gemini","content":"","toolCalls":[{"id":"c2","name":"grep_search","args":{"pattern":"fn load"},"result":[{"functionResponse":{"id":"c2","name":"grep_search","response":{"output":"src/config.rs:12"}}}],"status":"success"}]}"#,
        "\n"
    );
    std::fs::write(chats.join(parent).join("investigator-1.jsonl"), child).unwrap();
    let doc = scan(dir.path());
    let trees = doc["trees"].as_array().unwrap();
    assert_eq!(trees.len(), 1, "{doc}");
    assert_eq!(trees[0]["root"], parent);
    let nodes = trees[0]["nodes"].as_array().unwrap();
    assert_eq!(nodes.len(), 2, "{trees:?}");
    assert_eq!(
        (&nodes[1]["session"], &nodes[1]["parent"]),
        (&"investigator-1".into(), &parent.into())
    );
}
