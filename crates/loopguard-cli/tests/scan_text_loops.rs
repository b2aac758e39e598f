//! Loops without tool calls in real public transcripts (`tests/fixtures/text-loops`, each
//! one's source, licence and trimming in `SOURCES.md` there), scanned by the real
//! `loopguard scan` with the `recommended` preset: a model chanting one sentence inside an
//! answer and a model sending the same answer turn after turn are found where they happen,
//! and the healthy sessions beside them (a long answer of many files, format errors the
//! agent recovered from) get no finding at all.

mod common;

use std::path::{Path, PathBuf};

use common::run;
use serde_json::Value;

const PRESET: &str =
    "{ tools: { loopDetection: { enabled: true } }, loopguard: { preset: 'recommended' } }";

/// What a transcript holds, and what the scan must find.
#[derive(Debug)]
enum Label {
    /// One loop of `detector`, first warned at message `warned` (with its count) and
    /// blocked at message `blocked` (with its count), its repeated text starting `text`.
    Loop {
        detector: &'static str,
        warned: Option<(u64, u64)>,
        blocked: Option<(u64, u64)>,
        text: &'static str,
    },
    /// Nothing found: no warning, no block.
    Healthy,
}

struct Case {
    /// Under `tests/fixtures/text-loops`.
    path: &'static str,
    label: Label,
    /// Why the label.
    why: &'static str,
}

const CASES: &[Case] = &[
    Case {
        path: "mini-swe-agent/scikit-learn__scikit-learn-25102.traj.json",
        label: Label::Loop {
            detector: "content_chanting",
            warned: None,
            // The whole answer is read at once: its count is the window's (128 steps of
            // two segments a copy).
            blocked: Some((11, 64)),
            text: "`def set_output(self, *, transform=None)` -> `def set_output(",
        },
        why: "Gemini 3 Pro planning a change writes \"`def set_output(self, *, \
              transform=None)` -> `def set_output(self, *, transform=None)` (no change)\" \
              and \"Wait, I want to add `preserve_dtypes`.\" 1,421 times in one answer \
              (208 kB, trajectory message 20, the reader's message 11) until its output \
              limit; the harness answers \"found 0 actions\"",
    },
    Case {
        path: "aider/lru-cache-granite3.3-8b.aider.chat.history.md",
        label: Label::Loop {
            detector: "repeated_message",
            warned: Some((4, 3)),
            blocked: Some((5, 4)),
            text: "```python\nfrom collections import OrderedDict",
        },
        why: "granite3.3:8b sends the same answer (an LRU cache class) four times, aider \
              replying each time that it did not follow the edit format; nothing changes \
              between them, so the fourth copy stops the run",
    },
    Case {
        path: "aider/bug-fix-phi4-14b.aider.chat.history.md",
        label: Label::Loop {
            detector: "repeated_message",
            warned: Some((5, 3)),
            blocked: None,
            text: "I apologize for the oversight. Here is the corrected `csv_total.py`",
        },
        why: "phi4:14b answers three times with the same apology and file after aider's \
              format errors, then aider stops at its limit of three reflections: warned \
              at the third copy, not blocked",
    },
    Case {
        path: "aider/wifi-stats-qwen3-coder-30b.aider.chat.history.md",
        label: Label::Healthy,
        why: "one long answer writing eight files (a FastAPI backend, a Next.js front end, \
              a README): prose and code blocks with the boilerplate lines code repeats",
    },
    Case {
        path: "mini-swe-agent/django__django-15851.traj.json",
        label: Label::Healthy,
        why: "two format errors in a row, then the agent goes on and submits",
    },
    Case {
        path: "mini-swe-agent/django__django-11299.traj.json",
        label: Label::Healthy,
        why: "eight format errors in a row (\"found 3 actions\", 5, 7, 2, 5, 2, 2, 3: the \
              model keeps sending several commands), then a valid command at trajectory \
              message 78 and the work goes on to a submission; a feedback with another count \
              ends no_tool_turns' row, so no row grows past two",
    },
];

fn fixtures() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/text-loops")
}

fn scan(path: &Path) -> Value {
    let config = std::env::temp_dir().join(format!("lg-text-loops-{}.json5", std::process::id()));
    std::fs::write(&config, PRESET).unwrap();
    let out = run(
        &[
            "scan",
            "--json",
            "--config",
            config.to_str().unwrap(),
            path.to_str().unwrap(),
        ],
        b"",
    );
    let _ = std::fs::remove_file(&config);
    assert_eq!(
        out.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_slice(&out.stdout).unwrap()
}

/// A finding's message index and count.
fn at(finding: &Value) -> Option<(u64, u64)> {
    (!finding.is_null()).then(|| {
        (
            finding["message_index"].as_u64().unwrap(),
            finding["count"].as_u64().unwrap(),
        )
    })
}

#[test]
fn text_loops_in_public_transcripts() {
    for case in CASES {
        let doc = scan(&fixtures().join(case.path));
        let what = format!("{} ({})", case.path, case.why);
        let sessions = doc["sessions"].as_array().unwrap();
        assert_eq!(sessions.len(), 1, "{what}");
        let session = &sessions[0];
        assert!(session["messages"].as_u64().unwrap() > 0, "{what}");
        let loops = session["loops"].as_array().unwrap();
        match &case.label {
            Label::Loop {
                detector,
                warned,
                blocked,
                text,
            } => {
                assert_eq!(loops.len(), 1, "{what}: {loops:#?}");
                let found = &loops[0];
                assert_eq!(found["detectors"], serde_json::json!([detector]), "{what}");
                assert_eq!(at(&found["first_warning"]), *warned, "{what}");
                assert_eq!(at(&found["first_block"]), *blocked, "{what}");
                let excerpt = found["text"].as_str().unwrap();
                assert!(excerpt.starts_with(text), "{what}: {excerpt:?}");
            }
            Label::Healthy => {
                assert!(loops.is_empty(), "{what}: {loops:#?}");
                assert_eq!(session["findings"], serde_json::json!([]), "{what}");
            }
        }
        eprintln!("ok: {} ({:?})", case.path, case.label);
    }
}

/// The chanting answer of the first case streamed as a host streams it (64-byte pieces
/// through `loopguard replay`): warned at its sixth copy and stopped at its tenth, about 2
/// kB into its 208 kB.
#[test]
fn a_real_chant_streamed_is_stopped_early() {
    let path = fixtures().join("mini-swe-agent/scikit-learn__scikit-learn-25102.traj.json");
    let trajectory: Value = serde_json::from_slice(&std::fs::read(path).unwrap()).unwrap();
    let answer = trajectory["messages"][20]["content"].as_str().unwrap();
    assert_eq!(answer.len(), 208_089);
    let mut events = String::new();
    let mut rest = answer;
    let mut index = 0;
    while !rest.is_empty() {
        let mut cut = rest.len().min(64);
        while !rest.is_char_boundary(cut) {
            cut += 1;
        }
        let (piece, tail) = rest.split_at(cut);
        let event = serde_json::json!({"type": "message", "session": "s", "run": "r",
            "role": "assistant", "text": piece, "delta": true, "index": index, "id": "m20"});
        events.push_str(&format!("{event}\n"));
        rest = tail;
        index += 1;
    }
    let config = std::env::temp_dir().join(format!("lg-chant-{}.json5", std::process::id()));
    std::fs::write(&config, PRESET).unwrap();
    let out = run(
        &["replay", "--config", config.to_str().unwrap()],
        events.as_bytes(),
    );
    let _ = std::fs::remove_file(&config);
    let answers = common::json_lines(&out.stdout);
    assert_eq!(answers.len(), index);
    let first = |verdict: &str| {
        answers
            .iter()
            .position(|a| a["verdict"] == verdict)
            .unwrap_or_else(|| panic!("no {verdict}"))
    };
    let (warned, blocked) = (first("warn"), first("block"));
    assert_eq!(answers[warned]["detector"], "content_chanting");
    assert_eq!(answers[warned]["count"], 6);
    assert_eq!(answers[blocked]["detector"], "content_chanting");
    assert_eq!(answers[blocked]["count"], 10);
    assert_eq!((warned, blocked), (22, 32), "pieces of 64 bytes");
}
