//! OpenHands event trajectories (FORMATS §8): one JSON array of events, read as a stream
//! (one event in memory at a time).
//!
//! | event | item |
//! |---|---|
//! | `source: user`, `action: message` | a new run |
//! | an agent action that runs something (`run`, `run_ipython`, `read`, `edit`, `write`, `browse`, `browse_interactive`, `call_tool_mcp`, `delegate`, or any action with `tool_call_metadata`) | a call with id = the event `id`; the tool is `tool_call_metadata.function_name` (else the action); args are `args` without the fields that describe the agent rather than the call (`thought`, `confirmation_state`, `security_risk`, `is_confirmed`, `hidden`, `impl_source`, `translated_ipython_code`). A new model response (`model_response.id`) is a [`Item::Turn`] |
//! | `condensation` action | a compaction in the current run |
//! | an observation whose `cause` is a call | its result: `{content: [content], details: {exitCode}}`, or an error for `observation: error` |
//! | everything else (messages, state changes, `finish`, `think`, observations of other actions) | nothing |
//!
//! The session is named after the file. OpenHands records no usage per response here.

use std::collections::HashSet;
use std::io::{self, BufRead, Seek};

use loopguard_events::{Ids, OwnedOutcome};
use serde_json::{json, Value};

use crate::item::{self, Item, Pos, Sink};
use crate::readers::walk::{self, Seg, Walker, Want};
use crate::stats::{ReadStats, SkipReason};
use crate::ReadOptions;

/// Actions that run something.
const CALL_ACTIONS: &[&str] = &[
    "run",
    "run_ipython",
    "read",
    "edit",
    "write",
    "browse",
    "browse_interactive",
    "call_tool_mcp",
    "delegate",
];

/// Action fields that describe the agent's state, not the call.
const NOT_ARGS: &[&str] = &[
    "thought",
    "confirmation_state",
    "security_risk",
    "is_confirmed",
    "hidden",
    "impl_source",
    "translated_ipython_code",
];

/// Reads an OpenHands trajectory.
pub fn read<R: BufRead + Seek>(
    input: R,
    options: &ReadOptions<'_>,
    sink: &mut dyn Sink,
) -> io::Result<ReadStats> {
    let mut walker = Events {
        ids: item::ids(options.session_hint, Some("turn-0")),
        runs: 0,
        calls: HashSet::new(),
        response: None,
        stats: ReadStats::default(),
        sink,
    };
    let mut stats = ReadStats::default();
    walk::walk(input, &mut walker, &mut stats)?;
    stats.absorb_skips(walker.stats);
    Ok(stats)
}

struct Events<'a> {
    ids: Ids,
    runs: u64,
    /// Ids of the calls made so far (results name them by `cause`).
    calls: HashSet<String>,
    response: Option<String>,
    stats: ReadStats,
    sink: &'a mut dyn Sink,
}

impl Walker for Events<'_> {
    fn want(&mut self, path: &[Seg]) -> Want {
        match path {
            [] => Want::Descend,
            [Seg::Index(_)] => Want::Whole,
            _ => Want::Skip,
        }
    }

    fn whole(&mut self, _path: &[Seg], pos: Pos, event: Value) {
        if !event.is_object() {
            self.stats.skip(SkipReason::NotAnObject, pos.line, || {
                "event that is not an object".into()
            });
            return;
        }
        let text = |k: &str| event.get(k).and_then(Value::as_str);
        if let Some(action) = text("action") {
            self.action(pos, action, &event);
        } else if let Some(observation) = text("observation") {
            self.observation(pos, observation, &event);
        } else {
            self.stats.skip(SkipReason::UnknownEntryType, pos.line, || {
                "event without action or observation".into()
            });
        }
    }
}

impl Events<'_> {
    fn action(&mut self, pos: Pos, action: &str, event: &Value) {
        let source = event.get("source").and_then(Value::as_str);
        if source == Some("user") && action == "message" {
            self.runs += 1;
            self.ids.run = Some(format!("turn-{}", self.runs));
            self.response = None;
            return;
        }
        if action == "condensation" {
            self.sink.push(pos, item::compaction(&self.ids));
            return;
        }
        let metadata = event.get("tool_call_metadata").filter(|m| m.is_object());
        if source != Some("agent") || (metadata.is_none() && !CALL_ACTIONS.contains(&action)) {
            return;
        }
        let Some(id) = event.get("id").map(id_text) else {
            self.stats.skip(SkipReason::MalformedEntry, pos.line, || {
                "action without id".into()
            });
            return;
        };
        let tool = metadata
            .and_then(|m| m.get("function_name"))
            .and_then(Value::as_str)
            .unwrap_or(action);
        let response = metadata
            .and_then(|m| m.pointer("/model_response/id"))
            .and_then(Value::as_str)
            .map(str::to_owned);
        if response.is_none() || response != self.response {
            self.response = response;
            self.sink.push(
                pos,
                Item::Turn {
                    ids: self.ids.clone(),
                    usage: None,
                },
            );
        }
        let mut args = event.get("args").cloned().unwrap_or(json!({}));
        if let Value::Object(map) = &mut args {
            map.retain(|k, _| !NOT_ARGS.contains(&k.as_str()));
        }
        match item::call(&self.ids, Some(&id), tool, args) {
            Some(call) => {
                if self.calls.len() >= 1 << 16 {
                    self.calls.clear();
                }
                self.calls.insert(id);
                self.sink.push(pos, call);
            }
            None => self.stats.skip(SkipReason::MalformedEntry, pos.line, || {
                "action without a name".into()
            }),
        }
    }

    fn observation(&mut self, pos: Pos, observation: &str, event: &Value) {
        let Some(cause) = event.get("cause").map(id_text) else {
            return;
        };
        if !self.calls.remove(&cause) {
            return; // it answers a message, a state change or another non-call action
        }
        let content = event.get("content").and_then(Value::as_str).unwrap_or("");
        let outcome = if observation == "error" {
            OwnedOutcome::Error(Value::String(content.to_owned()))
        } else {
            let exit = event.pointer("/extras/metadata/exit_code").cloned();
            let details = exit.map(|code| json!({ "exitCode": code }));
            OwnedOutcome::Result(item::text_result(content, details))
        };
        self.sink
            .push(pos, item::result(&self.ids, &cause, outcome));
    }
}

fn id_text(id: &Value) -> String {
    match id {
        Value::String(s) => s.clone(),
        other => other.to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testing::{read_bytes, read_corpus};
    use crate::Format;

    #[test]
    fn maps_events() {
        let doc = r#"[
  {"id": 1, "source": "user", "action": "message", "args": {"content": "go"}},
  {"id": 2, "source": "agent", "action": "run", "args": {"command": "ls", "thought": "x"},
   "tool_call_metadata": {"function_name": "execute_bash", "tool_call_id": "t1",
     "model_response": {"id": "r1"}, "total_calls_in_response": 2}},
  {"id": 3, "source": "agent", "action": "run", "args": {"command": "pwd", "thought": "y"},
   "tool_call_metadata": {"function_name": "execute_bash", "tool_call_id": "t2",
     "model_response": {"id": "r1"}, "total_calls_in_response": 2}},
  {"id": 4, "source": "agent", "observation": "run", "cause": 2, "content": "a b",
   "extras": {"metadata": {"exit_code": 0}}},
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
        assert_eq!(turns, 1, "two calls of one model response are one turn");
        match &r.items[1].1 {
            Item::Event(loopguard_events::Event::Call {
                tool,
                args,
                call_id,
                ..
            }) => {
                assert_eq!(tool, "execute_bash");
                assert_eq!(args, &json!({"command": "ls"}));
                assert_eq!(call_id.as_deref(), Some("2"));
            }
            other => panic!("{other:?}"),
        }
        assert_eq!(r.stats.skipped_for(SkipReason::UnknownEntryType), 1);
        assert_eq!(r.stats.skipped_for(SkipReason::NotAnObject), 1);
    }

    /// The stored healthy trajectory: 4 tool calls (2 `execute_bash`, 2
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
}
