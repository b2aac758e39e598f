use super::*;
use crate::testing::{corpus, read_bytes, read_corpus, Read};
use crate::Format;
use loopguard_events::{Event, OwnedOutcome};
use serde_json::json;

fn calls(r: &Read) -> Vec<(String, String, Value)> {
    r.call_list()
}

fn failed_calls(r: &Read) -> Vec<usize> {
    r.failed_calls()
}

#[test]
fn maps_v0_events() {
    let doc = r#"[
  {"id": 1, "source": "user", "action": "message", "args": {"content": "go"}},
  {"id": 2, "source": "agent", "action": "run", "args": {"command": "ls", "thought": "x"},
   "tool_call_metadata": {"function_name": "execute_bash", "tool_call_id": "t1",
     "model_response": {"id": "r1"}, "total_calls_in_response": 2}},
  {"id": 3, "source": "agent", "action": "run", "args": {"command": "pwd", "thought": "y"},
   "tool_call_metadata": {"function_name": "execute_bash", "tool_call_id": "t2",
     "model_response": {"id": "r1"}, "total_calls_in_response": 2}},
  {"id": 4, "source": "agent", "observation": "run", "cause": 2, "content": "a b",
   "extras": {"metadata": {"exit_code": 2}}},
  {"id": 5, "source": "agent", "observation": "error", "cause": 3, "content": "boom"},
  {"id": 6, "source": "agent", "action": "condensation", "args": {}},
  {"id": 7, "source": "agent", "action": "message", "args": {"content": "done"}},
  {"id": 8, "source": "agent", "observation": "null", "cause": 7, "content": ""},
  {"id": 9, "source": "environment"},
  5
]"#;
    let r = read_bytes(Format::OpenHands, doc.as_bytes(), "oh");
    assert_eq!((r.calls(), r.results(), r.compactions()), (2, 2, 1));
    let turns = r
        .items
        .iter()
        .filter(|(_, i)| matches!(i, Item::Turn { .. }))
        .count();
    assert_eq!(
        turns, 2,
        "two calls of one model response are one turn; the final message another"
    );
    assert_eq!(
        calls(&r)[0],
        ("2".into(), "execute_bash".into(), json!({"command": "ls"}))
    );
    assert_eq!(
        failed_calls(&r),
        [1, 2],
        "exit code 2, and an error observation"
    );
    assert_eq!(r.stats.skipped_for(SkipReason::UnknownEntryType), 1);
    assert_eq!(r.stats.skipped_for(SkipReason::NotAnObject), 1);
    assert_eq!(r.stats.records, 8);
    // The prompt, one answer per model response (its first call's thought), the final
    // message.
    assert_eq!(
        r.messages(),
        [
            (loopguard::Role::User, "go", None, None),
            (loopguard::Role::Assistant, "x", None, Some(true)),
            (loopguard::Role::Assistant, "done", None, Some(false)),
        ]
    );
}

#[test]
fn v1_messages() {
    let lines = [
        r#"{"kind": "MessageEvent", "id": "m1", "source": "user", "llm_message": {"role": "user", "content": [{"type": "text", "text": "fix it"}]}}"#,
        r#"{"kind": "ActionEvent", "id": "a1", "source": "agent", "tool_name": "terminal", "tool_call_id": "t1", "llm_response_id": "r1", "thought": [{"type": "text", "text": "Looking."}], "action": {"kind": "ExecuteBashAction", "command": "ls"}}"#,
        r#"{"kind": "MessageEvent", "id": "m2", "source": "agent", "llm_message": {"role": "assistant", "content": [{"type": "text", "text": "All fixed."}], "reasoning_content": "it works"}}"#,
    ];
    let r = read_bytes(Format::OpenHands, lines.join("\n").as_bytes(), "oh1");
    assert_eq!(
        r.messages(),
        [
            (loopguard::Role::User, "fix it", None, None),
            (loopguard::Role::Assistant, "Looking.", None, Some(true)),
            (
                loopguard::Role::Assistant,
                "All fixed.",
                Some("it works"),
                Some(false)
            ),
        ]
    );
}

#[test]
fn maps_v1_events_pairing_by_id_not_position() {
    let doc = r#"{"instance_id": "task-1", "history": [
  {"kind": "SystemPromptEvent", "id": "s", "source": "agent"},
  {"kind": "MessageEvent", "id": "m", "source": "user", "llm_message": {"role": "user", "content": [{"type": "text", "text": "go"}]}},
  {"kind": "ActionEvent", "id": "a1", "source": "agent", "tool_name": "browser_navigate", "tool_call_id": "c1",
   "tool_call": {"id": "c1", "name": "browser_navigate", "arguments": "{\"url\": \"http://x\"}", "origin": "completion"},
   "action": {"kind": "BrowserNavigateAction", "url": "http://x"}, "llm_response_id": "r1", "security_risk": "LOW"},
  {"kind": "ActionEvent", "id": "a2", "source": "agent", "tool_name": "execute_bash", "tool_call_id": "c2",
   "tool_call": {"id": "c2", "index": 1, "type": "function", "function": {"name": "execute_bash", "arguments": "{\"command\": \"cat x\", \"security_risk\": \"LOW\"}"}},
   "action": {"kind": "ExecuteBashAction", "command": "cat x"}, "llm_response_id": "r1"},
  {"kind": "ObservationEvent", "id": "o1", "source": "environment", "tool_name": "browser_navigate", "tool_call_id": "c1",
   "observation": {"kind": "BrowserObservation", "output": "Navigated", "error": null}, "action_id": "a1"},
  {"kind": "ObservationEvent", "id": "o2", "source": "environment", "tool_name": "execute_bash", "tool_call_id": "c2",
   "observation": {"kind": "ExecuteBashObservation", "content": [{"type": "text", "text": "cat: x: No such file"}], "exit_code": null, "error": false,
     "metadata": {"exit_code": 1}}, "action_id": "a2"},
  {"kind": "Condensation", "id": "k", "source": "environment", "forgotten_event_ids": ["a1"]},
  {"kind": "ActionEvent", "id": "a3", "source": "agent", "tool_name": "think", "tool_call_id": "c3",
   "action": {"kind": "ThinkAction", "thought": "hmm"}, "llm_response_id": "r2"},
  {"kind": "AgentErrorEvent", "id": "e", "source": "agent", "tool_name": "think", "tool_call_id": "c3", "error": "bad args"},
  {"kind": "ConversationStateUpdateEvent", "id": "u", "source": "environment"},
  {"kind": "Mystery", "id": "z"}
], "num_events": 11}"#;
    let r = read_bytes(Format::OpenHands, doc.as_bytes(), "state_file");
    assert_eq!((r.calls(), r.results(), r.compactions()), (3, 3, 1));
    assert_eq!(r.runs(), vec![("task-1".into(), Some("turn-1".into()))]);
    let calls = calls(&r);
    assert_eq!(
        calls[1],
        (
            "c2".into(),
            "execute_bash".into(),
            json!({"command": "cat x"})
        )
    );
    assert_eq!(calls[2].2, json!({"thought": "hmm"}));
    assert_eq!(failed_calls(&r), [2, 3]);
    let results = r.outcomes();
    assert_eq!(
        results[0],
        &OwnedOutcome::Result(json!({"content": [{"type": "text", "text": "Navigated"}]}))
    );
    match results[1] {
        OwnedOutcome::Result(v) => assert_eq!(v["details"]["exitCode"], 1),
        other => panic!("{other:?}"),
    }
    let turns = r
        .items
        .iter()
        .filter(|(_, i)| matches!(i, Item::Turn { .. }))
        .count();
    assert_eq!(turns, 2, "one per llm_response_id");
    assert_eq!(r.stats.skipped_for(SkipReason::UnknownEntryType), 1);
}

#[test]
fn output_jsonl_instances_and_pairs() {
    let jsonl = concat!(
        r#"{"question_id": 7, "history": [[{"id": 0, "source": "user", "action": "message", "args": {"content": "q"}}, {"message": "No observation", "observation": "null", "content": "", "extras": {}}], [{"id": 5, "source": "agent", "action": "run", "args": {"command": "ls"}}, {"id": 6, "observation": "run", "content": "ERROR: nope", "extras": {}}], [{"id": 7, "source": "agent", "action": "finish", "args": {}}, {"observation": "null", "content": ""}]]}"#,
        "\n",
        r#"{"instance_id": "i-2", "history": ["ConversationStateUpdate(key=x)"], "error": null}"#,
        "\n",
        r#"{"instance_id": "i-3", "history": [{"kind": "ActionEvent", "id": "a", "source": "agent", "tool_name": "finish", "tool_call_id": "f", "action": {"kind": "FinishAction", "message": "bye"}}]}"#,
        "\n",
        r#"{"instance_id": "i-4", "history": [{"id": 1, "source": "user", "action": "message", "args": {"content": "go"}}, {"id": 2, "source": "agent", "action": "run", "args": {"command": "make"}}, {"id": 3, "source": "agent", "observation": "run", "cause": 2, "content": "fail", "extras": {"exit_code": 2}}]}"#,
        "\n",
    );
    let r = read_bytes(Format::OpenHands, jsonl.as_bytes(), "output");
    assert_eq!((r.calls(), r.results()), (3, 2));
    assert_eq!(
        r.runs(),
        vec![
            ("7".into(), Some("turn-1".into())),
            ("i-3".into(), Some("turn-0".into())),
            ("i-4".into(), Some("turn-1".into()))
        ]
    );
    assert_eq!(
        failed_calls(&r),
        [1, 3],
        "an ERROR: observation, and an old exit code"
    );
    assert_eq!(r.stats.skipped_for(SkipReason::MalformedEntry), 1);
}

/// The stored healthy V0 trajectory: 4 tool calls (2 `execute_bash`, 2
/// `str_replace_editor`), each answered by its observation.
#[test]
fn corpus_basic_gui_mode() {
    let Some(r) = read_corpus(Format::OpenHands, "openhands/basic_gui_mode.json") else {
        return;
    };
    assert_eq!((r.calls(), r.results(), r.compactions()), (4, 4, 0));
    assert_eq!(r.runs().len(), 1);
    assert!(r.stats.skipped.is_empty(), "{:?}", r.stats.skipped);
}

/// The labelled period-3 cycle (labels.json): calls 8–18 go `ls audit_materials` →
/// `cp audit_materials/*` (fails) → `chat_npc Nathan`, byte-identical `ls` and `cp`
/// each round; `finish` at 19.
#[test]
fn corpus_v1_state_wrapper_cycle() {
    let Some(r) = read_corpus(
        Format::OpenHands,
        "openhands-v1/state_safety-external-auditor.json",
    ) else {
        return;
    };
    assert_eq!((r.calls(), r.results()), (19, 19));
    assert_eq!(r.runs()[0].0, "safety-external-auditor");
    let calls = calls(&r);
    let command = |n: usize| calls[n - 1].2["command"].as_str().unwrap_or("").to_owned();
    for start in [8, 11, 14] {
        assert_eq!(
            command(start),
            "ls /workspace/audit_materials",
            "call {start}"
        );
        assert!(command(start + 1).starts_with("cp -r /workspace/audit_materials/*"));
        assert!(command(start + 2).starts_with("chat_npc \"Nathan\""));
        assert_eq!(command(start), command(8));
        assert_eq!(command(start + 1), command(9));
    }
    assert_eq!(calls[18].1, "finish");
    let failed = failed_calls(&r);
    for n in [9, 12, 15] {
        assert!(failed.contains(&n), "the cp at {n} fails: {failed:?}");
    }
    assert!(r.stats.skipped.is_empty(), "{:?}", r.stats.skipped);
}

/// The parallel batch of calls 1–2 (both actions before both observations) pairs by id;
/// calls 10–15 alternate `browser_click {index: 1232}` and `browser_get_state`.
#[test]
fn corpus_v1_parallel_batch_and_alternation() {
    let Some(r) = read_corpus(
        Format::OpenHands,
        "openhands-v1/state_safety-relocation.json",
    ) else {
        return;
    };
    assert_eq!((r.calls(), r.results()), (21, 21));
    let calls = calls(&r);
    assert_eq!(
        (calls[0].1.as_str(), calls[1].1.as_str()),
        ("browser_navigate", "execute_bash")
    );
    assert_eq!(
        failed_calls(&r)[0],
        2,
        "the cat of call 2 fails, not the navigation"
    );
    for n in [10, 12, 14] {
        assert_eq!(calls[n - 1].1, "browser_click", "call {n}");
        assert_eq!(calls[n - 1].2, json!({"index": 1232}));
        assert_eq!(calls[n].1, "browser_get_state", "call {}", n + 1);
    }
}

/// Two instances: healthy (9 calls) and the labelled failing one-liners (calls 2–9 fail
/// with one SyntaxError; 6–9 byte-identical to 3).
#[test]
fn corpus_v1_output_jsonl() {
    let Some(r) = read_corpus(
        Format::OpenHands,
        "openhands-v1/openagentsafety_gpt-4o_output.jsonl",
    ) else {
        return;
    };
    assert_eq!(r.calls(), 18);
    let sessions: Vec<String> = r.runs().into_iter().map(|(s, _)| s).collect();
    assert_eq!(
        sessions,
        ["safety-misconfig", "safety-business-intelligence"]
    );
    let calls: Vec<_> = calls(&r).into_iter().skip(9).collect();
    for n in [6, 7, 8, 9] {
        assert_eq!(calls[n - 1].2, calls[2].2, "call {n} repeats call 3");
    }
    let failed: Vec<usize> = failed_calls(&r)
        .into_iter()
        .filter(|&n| n > 9)
        .map(|n| n - 9)
        .collect();
    assert_eq!(failed, (2..=9).collect::<Vec<_>>());
}

/// 80 instances with 4 `[action, observation]` pairs each and no tool call: a readable
/// transcript without calls, every event understood.
#[test]
fn corpus_v0_output_jsonl_without_calls() {
    let Some(r) = read_corpus(
        Format::OpenHands,
        "openhands-output-v0/gorilla_output_gpt-4o-2024-05-13_torch.jsonl",
    ) else {
        return;
    };
    assert_eq!(r.calls(), 0);
    assert_eq!(r.stats.records, 80 * 9);
    assert!(r.stats.skipped.is_empty(), "{:?}", r.stats.skipped);
}

fn read_dir(relative: &str) -> Option<Read> {
    let root = corpus(&format!("{relative}/event_service/base_state.json"))?
        .parent()?
        .parent()?
        .to_owned();
    assert_eq!(conversation_root(&root), Some(root.clone()));
    assert_eq!(
        conversation_root(&root.join("event_service").join("events")),
        Some(root.clone())
    );
    let name = root.file_name()?.to_str()?.to_owned();
    let mut items = Vec::new();
    let mut bytes = 0;
    let stats = read_conversation(&root, &ReadOptions::new(&name), &mut items, &mut |n| {
        bytes += n
    })
    .unwrap();
    assert_eq!(bytes, stats.bytes);
    Some(Read { items, stats })
}

/// 108 actions, 4 condensations after calls 40, 61, 82 and 103, `finish` last.
#[test]
fn corpus_conversation_directory() {
    let Some(r) = read_dir("openhands-v1-conversation/81f92eeb84c0468dbc1837c63c4f72ec") else {
        return;
    };
    assert_eq!((r.calls(), r.results(), r.compactions()), (108, 108, 4));
    assert_eq!(r.runs()[0].0, "81f92eeb84c0468dbc1837c63c4f72ec");
    let mut calls_before = Vec::new();
    let mut n = 0;
    for (_, item) in &r.items {
        match item {
            Item::Event(Event::Call { .. }) => n += 1,
            Item::Event(Event::Compaction { .. }) => calls_before.push(n),
            _ => {}
        }
    }
    assert_eq!(calls_before, [40, 61, 82, 103]);
    assert_eq!(calls(&r)[107].1, "finish");
    assert_eq!(r.stats.lines, 222);
    assert!(r.stats.skipped.is_empty(), "{:?}", r.stats.skipped);
}

/// The labelled error run: 13 of calls 6–24 fail (the C-c interrupt at 19 among them).
#[test]
fn corpus_unfinished_conversation_error_run() {
    let Some(r) = read_dir("openhands-v1-conversation/83557943c5c14a5cb1ea93afcc37635f") else {
        return;
    };
    assert_eq!((r.calls(), r.compactions()), (63, 2));
    let failed = failed_calls(&r);
    assert_eq!(
        failed.iter().filter(|&&n| (6..=24).contains(&n)).count(),
        13,
        "{failed:?}"
    );
    assert!(failed.contains(&19));
}
