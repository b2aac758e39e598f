use super::*;
use crate::testing::{corpus, read_bytes, read_corpus, Read};
use crate::Format;
use loopguard_events::{Event, OwnedOutcome};
use serde_json::json;

/// Builds a synthetic OpenClaw transcript, one entry per call.
#[derive(Default)]
struct Transcript {
    lines: Vec<String>,
    last: Option<String>,
    n: usize,
}

impl Transcript {
    fn new(session: &str) -> Self {
        let mut t = Self::default();
        t.lines.push(
            json!({"type": "session", "version": 3, "id": session, "timestamp": "2026-04-02T05:00:00.000Z"})
                .to_string(),
        );
        t
    }

    /// Appends an entry whose parent is the previous one (or `parent`); returns its id.
    fn entry(&mut self, mut fields: serde_json::Value, parent: Option<&str>) -> String {
        self.n += 1;
        let id = format!("e{:07}", self.n);
        let parent = parent.map(str::to_owned).or_else(|| self.last.clone());
        let mut line = json!({"type": "message", "id": id, "parentId": parent,
            "timestamp": format!("2026-04-02T05:{:02}:00.000Z", self.n.min(59))});
        line.as_object_mut()
            .unwrap()
            .append(fields.as_object_mut().unwrap());
        self.lines.push(line.to_string());
        self.last = Some(id.clone());
        id
    }

    fn user(&mut self, text: &str) -> String {
        self.entry(
            json!({"message": {"role": "user", "content": [{"type": "text", "text": text}]}}),
            None,
        )
    }

    fn call(&mut self, id: &str, name: &str, args: serde_json::Value) -> String {
        self.entry(
            json!({"message": {"role": "assistant", "stopReason": "toolUse",
                "content": [{"type": "thinking", "thinking": "…", "thinkingSignature": "AAAA"},
                            {"type": "toolCall", "id": id, "name": name, "arguments": args}],
                "usage": {"input": 100, "output": 10, "cacheRead": 0, "cacheWrite": 0, "totalTokens": 110,
                          "cost": {"total": 0.01}}}}),
            None,
        )
    }

    fn result(&mut self, id: &str, text: &str, is_error: bool) -> String {
        self.entry(
            json!({"message": {"role": "toolResult", "toolCallId": id, "toolName": "x",
                "content": [{"type": "text", "text": text}],
                "details": {"status": if is_error { "error" } else { "ok" }},
                "isError": is_error}}),
            None,
        )
    }

    fn raw(&mut self, line: &str) {
        self.lines.push(line.to_owned());
    }

    fn bytes(&self) -> Vec<u8> {
        (self.lines.join("\n") + "\n").into_bytes()
    }
}

/// The calls, results and compactions read.
fn events(r: &Read) -> Vec<&Event> {
    r.items
        .iter()
        .filter_map(|(_, i)| match i {
            Item::Event(Event::Message { .. }) => None,
            Item::Event(e) => Some(e),
            _ => None,
        })
        .collect()
}

#[test]
fn prompts_and_answers_are_messages() {
    let mut t = Transcript::new("s1");
    t.user("go");
    t.call("c1", "read", json!({"path": "/a"}));
    t.result("c1", "A", false);
    t.raw(r#"{"type":"message","message":{"role":"assistant","content":[{"type":"thinking","thinking":"it is A"},{"type":"text","text":"The file says A."}]}}"#);
    let r = read_bytes(Format::OpenClaw, &t.bytes(), "hint");
    let said = r.messages();
    assert_eq!(said[0], (loopguard::Role::User, "go", None, None));
    assert_eq!(said[1].0, loopguard::Role::Assistant);
    assert_eq!(said[1].3, Some(true));
    assert_eq!(
        said[2],
        (
            loopguard::Role::Assistant,
            "The file says A.",
            Some("it is A"),
            Some(false)
        )
    );
}

#[test]
fn follows_the_branch_that_ends_at_the_leaf() {
    let mut t = Transcript::new("s1");
    let prompt = t.user("go");
    t.call("c1", "read", json!({"path": "/a"}));
    let kept = t.result("c1", "A", false);
    // An abandoned branch from the prompt: a call and its result.
    t.entry(
        json!({"message": {"role": "assistant", "content": [{"type": "toolCall", "id": "c2", "name": "read", "arguments": {"path": "/b"}}]}}),
        Some(&prompt),
    );
    t.result("c2", "B", false);
    // The conversation goes on from the first branch.
    t.entry(
        json!({"message": {"role": "assistant", "content": [{"type": "toolCall", "id": "c3", "name": "exec", "arguments": {"command": "ls"}}]}}),
        Some(&kept),
    );
    let r = read_bytes(Format::OpenClaw, &t.bytes(), "hint");
    let tools: Vec<&str> = events(&r)
        .iter()
        .filter_map(|e| match e {
            Event::Call { tool, call_id, .. } => Some((tool.as_str(), call_id.as_deref())),
            _ => None,
        })
        .map(|(t, _)| t)
        .collect();
    assert_eq!(tools, ["read", "exec"]);
    assert_eq!(r.results(), 1);
    assert_eq!(r.stats.skipped_for(SkipReason::OffBranch), 2);
    assert_eq!(r.runs(), vec![("s1".into(), Some("turn-1".into()))]);
}

#[test]
fn runs_start_at_user_messages_and_take_real_ids() {
    let mut t = Transcript::new("s1");
    t.user("first");
    t.call("c1", "read", json!({}));
    t.result("c1", "x", false);
    t.entry(
        json!({"type": "custom", "customType": "openclaw:bootstrap-context:full",
               "data": {"timestamp": 1, "runId": "run-A", "sessionId": "s1"}}),
        None,
    );
    t.call("c2", "read", json!({}));
    t.result("c2", "x", false);
    // A side entry naming another run inside the same turn starts that run.
    t.entry(
        json!({"type": "custom", "customType": "openclaw:prompt-error",
               "data": {"timestamp": 2, "runId": "run-B", "error": "timeout"}}),
        None,
    );
    t.call("c3", "read", json!({}));
    t.result("c3", "x", false);
    t.user("second");
    t.call("c4", "read", json!({}));
    let r = read_bytes(Format::OpenClaw, &t.bytes(), "hint");
    let runs: Vec<Option<String>> = r.runs().into_iter().map(|(_, run)| run).collect();
    assert_eq!(
        runs,
        [
            Some("turn-1".into()),
            Some("turn-2".into()),
            Some("turn-3".into())
        ]
    );
    let labels: Vec<(Option<String>, String)> = r
        .items
        .iter()
        .filter_map(|(_, i)| match i {
            Item::RunLabel { ids, label } => Some((ids.run.clone(), label.clone())),
            _ => None,
        })
        .collect();
    assert_eq!(
        labels,
        [
            (Some("turn-1".into()), "run-A".into()),
            (Some("turn-2".into()), "run-B".into())
        ]
    );
}

#[test]
fn results_errors_usage_and_compactions() {
    let mut t = Transcript::new("s1");
    t.user("go");
    t.call("c1", "edit", json!({"path": "/a"}));
    t.result(
        "c1",
        r#"{"status":"error","error":"Missing required parameter"}"#,
        false,
    );
    t.call("c2", "read", json!({"path": "/b"}));
    t.result("c2", "ENOENT", true);
    t.call("c3", "read", json!({"path": "/c"}));
    t.result(
        "c3",
        "head\n⚠️ [... middle content omitted — showing head and tail ...]\ntail",
        false,
    );
    t.entry(
        json!({"type": "compaction", "summary": "…", "firstKeptEntryId": "e0000001", "tokensBefore": 1000}),
        None,
    );
    let r = read_bytes(Format::OpenClaw, &t.bytes(), "hint");
    let outcomes: Vec<&OwnedOutcome> = events(&r)
        .into_iter()
        .filter_map(|e| match e {
            Event::Result { outcome, .. } => Some(outcome),
            _ => None,
        })
        .collect();
    assert_eq!(
        outcomes[0],
        &OwnedOutcome::Result(json!({
            "content": [{"type": "text", "text": r#"{"status":"error","error":"Missing required parameter"}"#}],
            "details": {"status": "ok"}
        })),
        "isError false stays a result, as the runtime hashed it"
    );
    assert_eq!(outcomes[1], &OwnedOutcome::Error(json!("ENOENT")));
    assert_eq!(r.stats.truncated_results, 1);
    assert_eq!(r.compactions(), 1);
    let usage: Vec<Usage> = r
        .items
        .iter()
        .filter_map(|(_, i)| match i {
            Item::Turn { usage, .. } => *usage,
            _ => None,
        })
        .collect();
    assert_eq!(
        usage[0],
        Usage {
            tokens: 110,
            cost: Some(0.01)
        }
    );
}

#[test]
fn bad_lines_are_counted_not_fatal() {
    let mut t = Transcript::new("s1");
    t.user("go");
    t.call("c1", "read", json!({"path": "/a"}));
    t.raw("{\"type\":\"message\",\"id\":\"zz\",\"parentId\":");
    t.raw("this is not json");
    t.raw(r#"{"type":"hologram"}"#);
    t.raw(r#"{"type":"message","message":{"role":"toolResult","content":[]}}"#);
    t.raw(r#"{"type":"message","message":{"role":"assistant","content":[{"type":"toolCall","id":"c9","name":" ","arguments":{}}]}}"#);
    t.raw(
        r#"{"type":"message","message":{"role":"toolResult","toolCallId":"c1","isError":"yes"}}"#,
    );
    // Invalid UTF-8 and a lone surrogate inside a result: repaired, used.
    let mut bytes = t.bytes();
    bytes.extend(b"{\"type\":\"message\",\"message\":{\"role\":\"toolResult\",\"toolCallId\":\"c1\",\"content\":[{\"type\":\"text\",\"text\":\"\xff\\ud83d\"}]}}\n");
    bytes.extend(b"{\"type\":\"message\",\"id\":\"cut\",\"parentId\":\"e0000002\",\"message\":{\"role\":\"assis");
    let r = read_bytes(Format::OpenClaw, &bytes, "hint");
    assert_eq!((r.calls(), r.results()), (1, 1));
    let s = &r.stats;
    assert_eq!(s.repaired, 1);
    assert_eq!(s.skipped_for(SkipReason::InvalidJson), 2);
    assert_eq!(s.skipped_for(SkipReason::UnknownEntryType), 1);
    assert_eq!(s.skipped_for(SkipReason::MalformedEntry), 3);
    assert_eq!(s.skipped_for(SkipReason::TruncatedLastLine), 1);
    assert_eq!(s.lines, 11);
    match events(&r)[1] {
        Event::Result {
            outcome: OwnedOutcome::Result(v),
            ..
        } => assert_eq!(v["content"][0]["text"], "\u{FFFD}\u{FFFD}"),
        other => panic!("{other:?}"),
    }
}

#[test]
fn sidecar_windows_name_runs() {
    let mut t = Transcript::new("s1");
    t.user("go"); // 05:01
    t.call("c1", "read", json!({})); // 05:02
    let sidecar = concat!(
        r#"{"traceSchema":"openclaw-trajectory","type":"session.started","ts":"2026-04-02T05:01:30.000Z","runId":"rt-1"}"#,
        "\n",
        r#"{"traceSchema":"openclaw-trajectory","type":"session.ended","ts":"2026-04-02T05:03:00.000Z","runId":"rt-1"}"#,
        "\n"
    );
    let (windows, _) = RunWindows::read(std::io::Cursor::new(sidecar.as_bytes())).unwrap();
    let mut options = ReadOptions::new("hint");
    options.run_windows = Some(&windows);
    let mut items: Vec<(Pos, Item)> = Vec::new();
    read(std::io::Cursor::new(t.bytes()), &options, &mut items).unwrap();
    assert!(items.iter().any(|(_, i)| matches!(i,
        Item::RunLabel { ids, label } if label == "rt-1" && ids.run.as_deref() == Some("turn-1"))));
}

#[test]
fn tree_ids_fast_and_slow_paths_agree() {
    let lines: [&[u8]; 4] = [
        br#"{"type":"message","id":"ab12","parentId":"cd34","message":{}}"#,
        br#"{"type":"custom","customType":"x","data":{"id":"no"},"id":"ab12","parentId":"cd34"}"#,
        br#"{ "type" : "message" , "id" : "ab12" , "parentId" : "cd34" }"#,
        br#"{"type":"message","id":"ab\u0031\u0032","parentId":"cd34"}"#,
    ];
    for line in lines {
        assert_eq!(
            tree_ids(line),
            Some((hash(b"ab12"), Some(hash(b"cd34")))),
            "{}",
            String::from_utf8_lossy(line)
        );
    }
    assert_eq!(
        tree_ids(br#"{"type":"message","id":"a","parentId":null}"#),
        Some((hash(b"a"), None))
    );
    assert_eq!(
        tree_ids(br#"{"type":"session","version":3,"id":"s"}"#),
        None
    );
    assert_eq!(tree_ids(br#"{"type":"message"}"#), None);
    assert_eq!(tree_ids(b"garbage"), None);
}

#[test]
fn parent_cycles_end_the_walk() {
    let input = concat!(
        r#"{"type":"message","id":"a","parentId":"b","message":{"role":"user","content":"x"}}"#,
        "\n",
        r#"{"type":"message","id":"b","parentId":"a","message":{"role":"user","content":"y"}}"#,
        "\n"
    );
    let r = read_bytes(Format::OpenClaw, input.as_bytes(), "hint");
    assert_eq!(r.stats.skipped_for(SkipReason::OffBranch), 0);
}

/// Counts on the active branch of every stored OpenClaw transcript (computed independently
/// by following `parentId` from the leaf).
#[test]
fn corpus_openclaw_counts() {
    let cases: [(&str, usize, usize, usize, u64); 7] = [
        ("openclaw/08237d46-d6c7-42a2-ab47-87ff3939da71.jsonl", 240, 240, 1, 0),
        (
            "openclaw/0ff7b343-fcdb-4bc2-8504-ccc296c7e85b.checkpoint.016e7403-3ec8-4366-a5f3-f7fed9fa357c.jsonl",
            300,
            385,
            1,
            3078,
        ),
        ("openclaw/21596f48-a8a0-43df-8e8d-387a0f1709a8.jsonl", 389, 389, 0, 1),
        ("openclaw/44de2062-6cdd-4d8c-917e-41a2bb188a7a.jsonl", 32, 32, 0, 0),
        (
            "openclaw/634fd029-a15c-4d93-80f7-33e1758c26eb.jsonl.reset.2026-04-09T22-52-03.638Z",
            54,
            54,
            0,
            0,
        ),
        ("openclaw/de164575-fc39-43d3-b0f9-7781fe07e46d.jsonl", 13, 12, 0, 0),
        ("openclaw/f8c3e7a8-7dc1-43cc-8ce0-a9d268c29be1.jsonl", 11, 11, 2, 0),
    ];
    for (file, calls, results, compactions, off_branch) in cases {
        let Some(r) = read_corpus(Format::OpenClaw, file) else {
            return;
        };
        assert_eq!(
            (r.calls(), r.results(), r.compactions()),
            (calls, results, compactions),
            "{file}"
        );
        assert_eq!(
            r.stats.skipped_for(SkipReason::OffBranch),
            off_branch,
            "{file}"
        );
        assert_eq!(
            r.stats.skipped_lines(),
            off_branch,
            "{file}: {:?}",
            r.stats.skipped
        );
    }
}

/// The transcript with its sidecar: 3 exec calls, 1 compaction, and the sidecar's 4 run
/// ids on the runs that made calls.
#[test]
fn corpus_transcript_with_sidecar() {
    let (Some(transcript), Some(sidecar)) = (
        corpus("openclaw-trajectory/5e9096eb-a13b-48ae-990d-ca9d6f231b05.jsonl"),
        corpus("openclaw-trajectory/5e9096eb-a13b-48ae-990d-ca9d6f231b05.trajectory.jsonl"),
    ) else {
        return;
    };
    assert_eq!(sidecar_of(&transcript).as_deref(), Some(sidecar.as_path()));
    let (windows, _) = RunWindows::read(std::io::BufReader::new(
        std::fs::File::open(&sidecar).unwrap(),
    ))
    .unwrap();
    assert_eq!(windows.len(), 4);
    let mut options = ReadOptions::new("hint");
    options.run_windows = Some(&windows);
    let mut items: Vec<(Pos, Item)> = Vec::new();
    let file = std::io::BufReader::new(std::fs::File::open(&transcript).unwrap());
    let stats = read(file, &options, &mut items).unwrap();
    let r = Read { items, stats };
    assert_eq!((r.calls(), r.results(), r.compactions()), (3, 3, 1));
    let labels: std::collections::BTreeSet<String> = r
        .items
        .iter()
        .filter_map(|(_, i)| match i {
            Item::RunLabel { label, .. } => Some(label.clone()),
            _ => None,
        })
        .collect();
    assert_eq!(labels.len(), 4);
    assert!(r.stats.skipped.is_empty());
}
