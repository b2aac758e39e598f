use super::*;
use crate::detect::Format;
use crate::item;
use crate::scan::Mark;
use crate::scan::{scan_bytes, session_hint, FileStatus, ScanOptions};
use loopguard::Role;
use loopguard_events::OwnedOutcome;
use serde_json::json;

/// Feeds a scanner by hand: calls, results, turns, compactions, in one session.
struct Feed {
    scanner: Scanner,
    line: u64,
}

impl Feed {
    fn new() -> Self {
        Self {
            scanner: Scanner::new(ConfigSet::enabled_defaults(), None),
            line: 0,
        }
    }

    fn push(&mut self, item: Item) {
        self.line += 1;
        self.scanner.push(Pos::new(self.line, 0), item);
    }

    fn turn(&mut self, run: &str, tokens: u64) {
        self.push(Item::Turn {
            ids: item::ids("s", Some(run)),
            usage: Some(Usage {
                tokens,
                cost: Some(0.5),
            }),
        });
    }

    fn call(&mut self, run: &str, id: &str, tool: &str, args: serde_json::Value) {
        let call = item::call(&item::ids("s", Some(run)), Some(id), tool, args).unwrap();
        self.push(call);
    }

    fn error(&mut self, run: &str, id: &str, text: &str) {
        let ids = item::ids("s", Some(run));
        self.push(item::result(&ids, id, OwnedOutcome::Error(json!(text))));
    }

    fn ok(&mut self, run: &str, id: &str, text: &str) {
        let ids = item::ids("s", Some(run));
        self.push(item::result(
            &ids,
            id,
            OwnedOutcome::Result(item::text_result(text, None)),
        ));
    }

    fn finish(self) -> SessionReport {
        let mut sessions = self.scanner.finish();
        assert_eq!(sessions.len(), 1);
        sessions.remove(0)
    }
}

/// The same failing call 25 times in one run, each its own model response.
fn failing_reads(feed: &mut Feed, run: &str, n: usize) {
    for i in 1..=n {
        feed.turn(run, 100);
        let id = format!("{run}-c{i}");
        feed.call(run, &id, "read", json!({"path": "/missing"}));
        feed.error(run, &id, "ENOENT: no such file");
    }
}

#[test]
fn a_loop_with_its_first_warning_first_block_repeats_and_savings() {
    let mut feed = Feed::new();
    failing_reads(&mut feed, "r1", 25);
    let s = feed.finish();
    assert_eq!((s.calls, s.outcomes, s.runs), (25, 25, 1));
    assert_eq!(s.loops.len(), 1);
    let l = &s.loops[0];
    let warning = l.first_warning.as_ref().unwrap();
    assert_eq!(
        (
            warning.detector,
            warning.call_index,
            warning.count,
            warning.line
        ),
        (Detector::GenericRepeat, 11, 10, 32)
    );
    let block = l.first_block.as_ref().unwrap();
    assert_eq!(
        (block.detector, block.call_index, block.count),
        (Detector::GenericRepeat, 21, 20)
    );
    assert_eq!(
        l.repeats_after_block, 4,
        "calls 22 to 25 repeat the blocked call"
    );
    assert!(!l.stopped_run);
    assert_eq!((s.warned_calls, s.blocked_calls), (10, 5));
    // Responses 22..25 only reacted to blocked calls.
    assert_eq!(
        s.saved,
        Savings {
            calls: 5,
            tokens: Some(400),
            cost: Some(2.0)
        }
    );
    assert_eq!(l.saved, s.saved);
    assert_eq!(s.usage.unwrap().tokens, 2500);
    let findings: Vec<(Level, u64)> = s.findings.iter().map(|f| (f.level, f.call_index)).collect();
    assert_eq!(findings, [(Level::Warning, 11), (Level::Critical, 21)]);
    assert_eq!(s.findings[0].run.as_deref(), Some("r1"));
    assert_eq!(
        s.timeline
            .marks
            .iter()
            .filter(|&&m| m == Timeline::BLOCK)
            .count(),
        5
    );
}

#[test]
fn the_breaker_stops_the_run_and_later_calls_count_for_that_loop() {
    let mut feed = Feed::new();
    failing_reads(&mut feed, "r1", 35);
    feed.turn("r1", 100);
    feed.call("r1", "other", "write", json!({"path": "/x"}));
    let s = feed.finish();
    let l = &s.loops[0];
    assert!(l.stopped_run);
    let kinds: Vec<(Detector, u64, u32)> = s
        .findings
        .iter()
        .map(|f| (f.detector, f.call_index, f.count))
        .collect();
    assert_eq!(
        kinds,
        [
            (Detector::GenericRepeat, 11, 10),
            (Detector::GenericRepeat, 21, 20),
            (Detector::GlobalCircuitBreaker, 31, 30)
        ]
    );
    assert_eq!(s.blocked_calls, 16);
    assert_eq!(
        l.saved.calls, 16,
        "the write after the stop counts for the loop that stopped the run"
    );
    assert_eq!(*s.timeline.marks.last().unwrap(), Timeline::STOPPED);
    assert_eq!(s.unpaired_calls, 1);
    // One loop, with every detector that saw it and each step of its escalation.
    assert_eq!(s.loops.len(), 1);
    assert_eq!(
        l.detectors,
        [Detector::GenericRepeat, Detector::GlobalCircuitBreaker]
    );
    let at = |m: &Option<Mark>| m.as_ref().map(|m| (m.detector, m.call_index));
    assert_eq!(at(&l.first_warning), Some((Detector::GenericRepeat, 11)));
    assert_eq!(at(&l.first_block), Some((Detector::GenericRepeat, 21)));
    assert_eq!(at(&l.escalation), Some((Detector::GenericRepeat, 22)));
    assert_eq!(at(&l.stop), Some((Detector::GlobalCircuitBreaker, 31)));
    assert_eq!(
        l.calls,
        [11, 36],
        "the write after the stop goes on with the loop"
    );
    assert_eq!((l.warned_calls, l.blocked_calls), (10, 11));
    assert_eq!(l.tools, ["read"]);
}

#[test]
fn a_ping_pong_and_the_repeats_of_its_sides_are_one_loop() {
    let mut feed = Feed::new();
    for i in 0..40 {
        let (tool, path) = if i % 2 == 0 {
            ("read", "/a")
        } else {
            ("edit", "/b")
        };
        let id = format!("c{i}");
        feed.turn("r1", 10);
        feed.call("r1", &id, tool, json!({"path": path}));
        feed.ok("r1", &id, "same");
    }
    let s = feed.finish();
    assert!(!s.findings.is_empty());
    assert_eq!(s.loops.len(), 1, "{:#?}", s.loops);
    let l = &s.loops[0];
    assert!(
        l.detectors.contains(&Detector::PingPong),
        "{:?}",
        l.detectors
    );
    assert_eq!(l.tools.len(), 2);
}

#[test]
fn a_saved_token_count_is_zero_not_unknown_where_usage_is_recorded() {
    let mut feed = Feed::new();
    // 21 identical failing reads, the last blocked; no response after it.
    for i in 1..=21 {
        feed.turn("r1", 100);
        let id = format!("c{i}");
        feed.call("r1", &id, "read", json!({"path": "/missing"}));
        feed.error("r1", &id, "ENOENT");
    }
    let s = feed.finish();
    assert_eq!(s.blocked_calls, 1);
    assert_eq!(s.saved.tokens, Some(0));
    assert_eq!(s.loops[0].saved.tokens, Some(0));
}

#[test]
fn failed_outcomes_are_counted_as_the_engine_reads_them() {
    let mut feed = Feed::new();
    feed.call("r1", "a", "read", json!({}));
    feed.error("r1", "a", "ENOENT");
    feed.call("r1", "b", "exec", json!({"command": "false"}));
    feed.push(item::result(
        &item::ids("s", Some("r1")),
        "b",
        OwnedOutcome::Result(json!({"content": [], "details": {"exitCode": 1}})),
    ));
    feed.call("r1", "c", "bash", json!({}));
    feed.push(item::result(
        &item::ids("s", Some("r1")),
        "c",
        OwnedOutcome::Result(json!({"content": [], "isError": true})),
    ));
    feed.call("r1", "d", "bash", json!({}));
    feed.ok("r1", "d", "fine");
    assert_eq!(feed.finish().failed_outcomes, 3);
}

#[test]
fn runs_never_share_history() {
    let mut feed = Feed::new();
    for run in 0..30 {
        failing_reads(&mut feed, &format!("heartbeat-{run}"), 2);
    }
    let s = feed.finish();
    assert_eq!((s.calls, s.runs), (60, 30));
    assert!(s.findings.is_empty());
    assert_eq!(s.timeline.run_starts.len(), 30);
}

#[test]
fn a_loop_that_survives_a_compaction_aborts_the_run() {
    let mut feed = Feed::new();
    failing_reads(&mut feed, "r1", 3);
    feed.push(item::compaction(&item::ids("s", Some("r1"))));
    failing_reads(&mut feed, "r1", 3);
    let s = feed.finish();
    assert_eq!(s.compactions, 1);
    assert_eq!(s.timeline.compactions, [3]);
    let abort = s
        .findings
        .iter()
        .find(|f| f.detector == Detector::CompactionLoopPersisted)
        .expect("compaction abort");
    assert_eq!(
        (abort.level, abort.call_index, abort.count),
        (Level::Critical, 6, 3)
    );
    assert_eq!(
        abort.line,
        3 * 3 + 1 + 3 * 3,
        "the line of the result that aborted"
    );
    assert_eq!(s.timeline.aborts, [6]);
    assert!(s.loops[abort.loop_index].stopped_run);
    assert!(s.has_blocks());
}

#[test]
fn unpaired_calls_orphan_results_and_labels() {
    let mut feed = Feed::new();
    feed.call("turn-1", "a", "read", json!({}));
    feed.ok("turn-1", "nobody", "x");
    feed.call("turn-1", "b", "read", json!({}));
    feed.ok("turn-1", "b", "x");
    feed.call("turn-1", "b", "read", json!({}));
    feed.call("turn-1", "b", "read", json!({}));
    feed.push(Item::RunLabel {
        ids: item::ids("s", Some("turn-1")),
        label: "real-run".into(),
    });
    let s = feed.finish();
    assert_eq!(s.orphan_results, 1);
    assert_eq!(s.outcomes, 1);
    assert_eq!(
        s.unpaired_calls, 3,
        "a, the first re-use of b, and the last b"
    );
}

#[test]
fn labels_reach_findings_already_made() {
    let mut feed = Feed::new();
    failing_reads(&mut feed, "turn-1", 12);
    feed.push(Item::RunLabel {
        ids: item::ids("s", Some("turn-1")),
        label: "run-xyz".into(),
    });
    let s = feed.finish();
    assert_eq!(s.loops[0].run.as_deref(), Some("run-xyz"));
    assert_eq!(s.findings[0].run.as_deref(), Some("run-xyz"));
}

#[test]
fn scan_bytes_detects_and_reports() {
    let mut jsonl = String::new();
    for i in 0..12 {
        jsonl.push_str(&format!(
            "{{\"type\":\"call\",\"session\":\"s\",\"run\":\"r\",\"call_id\":\"c{i}\",\"tool\":\"read\",\"args\":{{\"p\":1}}}}\n\
             {{\"type\":\"result\",\"session\":\"s\",\"run\":\"r\",\"call_id\":\"c{i}\",\"error\":\"nope\"}}\n"
        ));
    }
    let scan = scan_bytes(
        jsonl.as_bytes(),
        None,
        "events.jsonl",
        &ScanOptions::default(),
    )
    .unwrap();
    assert_eq!(scan.format, Some(Format::Loopguard));
    assert_eq!(scan.sessions[0].findings[0].call_index, 11);
    assert_eq!(scan.sessions[0].findings[0].line, 21);
    let unknown = scan_bytes(b"hello", None, "x.txt", &ScanOptions::default()).unwrap();
    assert!(matches!(unknown.status, FileStatus::UnknownFormat { .. }));
    // With the defaults of a config that does not enable detection, nothing fires.
    let quiet = ScanOptions {
        config: ConfigSet::default(),
        ..ScanOptions::default()
    };
    let scan = scan_bytes(jsonl.as_bytes(), None, "events.jsonl", &quiet).unwrap();
    assert!(scan.sessions[0].findings.is_empty());
}

#[test]
fn session_names_come_from_file_names() {
    assert_eq!(session_hint("abc.jsonl.reset.2026"), "abc");
    assert_eq!(session_hint("run.traj"), "run");
    assert_eq!(session_hint(".hidden"), ".hidden");
}

#[test]
fn many_runs_stay_bounded_and_sessions_are_closed_by_bytes_not_count() {
    let budget = 2 << 20;
    let mut scanner = Scanner::with_budget(ConfigSet::enabled_defaults(), None, budget);
    let mut line = 0;
    let mut push = |scanner: &mut Scanner, item: Item| {
        line += 1;
        scanner.push(Pos::new(line, 0), item);
        assert!(scanner.live_bytes <= budget, "{}", scanner.live_bytes);
    };
    // 200 runs of one session, each with a call left unanswered, then 2000 sessions.
    for run in 0..200 {
        let ids = item::ids("big", Some(&format!("r{run}")));
        push(
            &mut scanner,
            item::call(&ids, Some("c"), "read", json!({})).unwrap(),
        );
    }
    for session in 0..2000 {
        let ids = item::ids(&format!("s{session}"), Some("r"));
        for i in 0..3 {
            let id = format!("c{i}");
            push(
                &mut scanner,
                item::call(&ids, Some(&id), "read", json!({"p": 1})).unwrap(),
            );
            push(
                &mut scanner,
                item::result(&ids, &id, OwnedOutcome::Error(json!("ENOENT"))),
            );
        }
    }
    assert!(scanner.sessions.iter().all(|s| s.runs.len() <= MAX_RUNS));
    let live = scanner.live.len();
    assert!(
        live > 100 && live < 2001,
        "a 2 MiB budget holds some sessions: {live}"
    );
    let reports = scanner.finish();
    assert_eq!(reports.len(), 2001);
    assert_eq!(reports[0].runs, 200);
    assert_eq!(reports[0].unpaired_calls, 200);
    assert!(reports[0].closed_early, "the big session was the oldest");
    assert_eq!(
        reports.iter().filter(|r| r.closed_early).count(),
        2001 - live
    );
    assert!(reports[1..]
        .iter()
        .all(|r| r.calls == 3 && r.outcomes == 3 && r.findings.is_empty()));
}

#[test]
fn interleaved_sessions_keep_their_history_within_the_default_budget() {
    // A loop of 25 identical failing reads, with 1000 other sessions between each call.
    let mut scanner = Scanner::new(ConfigSet::enabled_defaults(), None);
    let mut line = 0;
    let mut other = 0;
    for i in 1..=25 {
        let ids = item::ids("looping", Some("r"));
        let id = format!("c{i}");
        line += 1;
        scanner.push(
            Pos::new(line, 0),
            item::call(&ids, Some(&id), "read", json!({"path": "/x"})).unwrap(),
        );
        line += 1;
        scanner.push(
            Pos::new(line, 0),
            item::result(&ids, &id, OwnedOutcome::Error(json!("ENOENT"))),
        );
        for _ in 0..1000 {
            other += 1;
            let ids = item::ids(&format!("other-{other}"), Some("r"));
            line += 1;
            scanner.push(
                Pos::new(line, 0),
                item::call(&ids, Some("x"), "ls", json!({})).unwrap(),
            );
        }
    }
    let reports = scanner.finish();
    let looping = &reports[0];
    assert!(!looping.closed_early);
    assert_eq!((looping.warned_calls, looping.blocked_calls), (10, 5));
    assert!(reports.iter().all(|r| !r.closed_early));
}

#[test]
fn unanswered_calls_are_bounded_per_run() {
    let mut feed = Feed::new();
    for i in 0..(MAX_PENDING + 10) {
        feed.call("r", &format!("c{i}"), "read", json!({"i": i}));
    }
    for i in 0..20_000 {
        let id = format!("answered{i}");
        feed.call("r", &id, "read", json!({"j": i}));
        feed.ok("r", &id, "x");
    }
    let run = &feed.scanner.sessions[0].runs[0];
    assert_eq!(run.pending.len(), MAX_PENDING - 1);
    assert!(run.pending_order.len() <= 2 * MAX_PENDING + 1);
    let s = feed.finish();
    assert_eq!(s.unpaired_calls, (MAX_PENDING + 10) as u64);
}

/// A format-error loop: the model answers in text and the harness replies with the same
/// feedback, 10 times in a row after two calls. With the preset, `no_tool_turns` warns at
/// the 3rd feedback and stops the run at the 8th: one loop without tool calls, its
/// messages and text reported, the responses after the stop saved, and its tokens (the
/// responses while it was open) a share of the session's.
#[test]
fn a_loop_without_tool_calls_reports_its_messages_text_and_tokens() {
    let config = ConfigSet::parse(
        "{ tools: { loopDetection: { enabled: true } }, loopguard: { preset: 'recommended' } }",
    )
    .unwrap();
    let mut feed = Feed {
        scanner: Scanner::new(config, None),
        line: 0,
    };
    let ids = item::ids("s", Some("r1"));
    for i in 1..=2 {
        feed.turn("r1", 100);
        feed.push(item::answer(&ids, String::new(), None, true));
        let id = format!("c{i}");
        feed.call("r1", &id, "bash", json!({ "command": format!("step {i}") }));
        feed.ok("r1", &id, &format!("output {i}"));
    }
    let feedback = "No tool calls found in the response. Every response MUST include a tool call.";
    for i in 1..=10 {
        feed.turn("r1", 1000);
        let answer = format!("I think it is done (attempt {i}).");
        feed.push(item::answer(&ids, answer, None, false));
        feed.push(item::said(&ids, Role::ToolFeedback, feedback.into()));
    }
    let s = feed.finish();
    assert_eq!((s.calls, s.messages, s.runs), (2, 22, 1));
    // Warned: the 3rd to 7th feedback and the answers after them; the 8th blocks.
    assert_eq!((s.warned_messages, s.blocked_messages), (10, 1));
    assert_eq!(s.loops.len(), 1);
    let l = &s.loops[0];
    assert_eq!(l.detectors, [Detector::NoToolTurns]);
    assert_eq!((l.warned_calls, l.blocked_calls), (0, 0));
    assert_eq!(l.text.as_deref(), Some(feedback));
    let warning = l.first_warning.as_ref().unwrap();
    assert_eq!(
        (warning.call_index, warning.message_index, warning.count),
        (2, Some(8), 3)
    );
    let block = l.first_block.as_ref().unwrap();
    assert_eq!(
        (block.call_index, block.message_index, block.count),
        (2, Some(18), 8)
    );
    assert!(l.stopped_run);
    // Flagged from the 3rd feedback (message 8) to the stop, and the messages of the
    // stopped run after it.
    assert_eq!(l.messages, Some([8, 22]));
    // The responses after the stop (the 9th and 10th) would not have been made.
    assert_eq!(l.saved.tokens, Some(2000));
    // Open from the 3rd feedback: the 4th to 10th responses.
    assert_eq!(l.tokens, Some(7000));
    let share = l.token_share.unwrap();
    assert!((share - 7000.0 / 10200.0).abs() < 1e-9, "{share}");
    let finding = s
        .findings
        .iter()
        .find(|f| f.level == Level::Critical)
        .unwrap();
    assert_eq!(finding.tool, "tool_feedback");
    assert_eq!(finding.message_index, Some(18));
}
