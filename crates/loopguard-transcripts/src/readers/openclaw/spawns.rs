//! Which run of a parent session spawned each of its sub-agents. OpenClaw's session store
//! names a spawned session's parent (`spawnedBy`) but not the run; the parent's transcript
//! does: its spawn call (`sessions_spawn`) is answered with the child's session key
//! (`{"status": "accepted", "childSessionKey": "agent:main:subagent:…", …}`), and the call
//! sits in one of the parent's runs. The parent is read with the same reader, so its runs
//! are numbered as a scan of it numbers them.

use std::collections::HashMap;
use std::io::{self, BufRead, Seek};
use std::path::Path;
use std::sync::Arc;

use loopguard_events::{Event, OwnedOutcome};
use serde_json::Value;

use super::SessionStore;
use crate::item::{Item, Pos, Sink};
use crate::readers::Spawns;
use crate::ReadOptions;

/// The tool OpenClaw spawns a sub-agent with.
const SPAWN_TOOL: &str = "sessions_spawn";

/// Spawn calls waiting for their answer kept at most.
const MAX_PENDING: usize = 1 << 16;

/// Longest spawn answer parsed for the child's key.
const MAX_ANSWER_BYTES: usize = 64 << 10;

/// Reads a parent transcript for the runs of its spawn calls, by child session key.
pub fn read_spawns<R: BufRead + Seek>(input: R, options: &ReadOptions<'_>) -> io::Result<Spawns> {
    let mut sink = SpawnSink::default();
    // The parent's own links do not matter here.
    let options = ReadOptions {
        parent_session: None,
        parent_run: None,
        ..*options
    };
    super::read(input, &options, &mut sink)?;
    Ok(sink.spawns)
}

/// Keeps the run of each spawn call, then the child key of its answer.
#[derive(Default)]
struct SpawnSink {
    /// Spawn calls waiting for their answer: call id to run.
    pending: HashMap<String, String>,
    spawns: Spawns,
}

impl Sink for SpawnSink {
    fn push(&mut self, _: Pos, item: Item) {
        let Item::Event(event) = item else {
            return;
        };
        match event {
            Event::Call {
                ids,
                call_id: Some(id),
                tool,
                ..
            } if tool == SPAWN_TOOL && self.pending.len() < MAX_PENDING => {
                self.pending.insert(id, ids.run.unwrap_or_default());
            }
            Event::Result {
                call_id: Some(id),
                outcome: OwnedOutcome::Result(answer),
                ..
            } => {
                let Some(run) = self.pending.remove(&id) else {
                    return;
                };
                if let Some(key) = child_key(&answer) {
                    self.spawns.insert(key, run);
                }
            }
            _ => {}
        }
    }
}

/// The child's session key in a spawn answer: an object with `childSessionKey`, or the
/// text of one (the transcript keeps the answer as text, alone or in content parts, the
/// reader as `{content, details}`). A fixed depth: no recursion on the input.
fn child_key(answer: &Value) -> Option<String> {
    let of_object = |v: &Value| {
        v.get("childSessionKey")
            .and_then(Value::as_str)
            .filter(|k| !k.trim().is_empty())
            .map(str::to_owned)
    };
    let of_text = |text: &str| {
        (text.len() <= MAX_ANSWER_BYTES && text.contains("childSessionKey"))
            .then(|| serde_json::from_str::<Value>(text).ok())
            .flatten()
            .and_then(|v| of_object(&v))
    };
    let of_parts = |parts: &Value| match parts {
        Value::String(text) => of_text(text),
        Value::Array(parts) => parts.iter().find_map(|part| match part {
            Value::String(text) => of_text(text),
            part => part.get("text").and_then(Value::as_str).and_then(of_text),
        }),
        _ => None,
    };
    match answer {
        Value::Object(_) => of_object(answer)
            .or_else(|| answer.get("details").and_then(of_object))
            .or_else(|| answer.get("content").and_then(of_parts)),
        parts => of_parts(parts),
    }
}

/// The [`Spawns`] of the parent of the OpenClaw transcript `child` of session `session`,
/// as the session store beside it names the parent (`None`: the store names none, or the
/// parent's live transcript is not beside it). A parent is read once while unchanged.
pub fn spawns_of(
    child: &Path,
    session: &str,
    store: &SessionStore,
    options: &ReadOptions<'_>,
) -> Option<Arc<Spawns>> {
    let parent = store.parent_of(session)?;
    let path = child.with_file_name(format!("{parent}.jsonl"));
    if !path.is_file() || path == child {
        return None;
    }
    crate::readers::linked::cached(&path, |input| read_spawns(input, options))
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn the_child_key_is_found_in_every_shape_of_answer() {
        let text = r#"{"status":"accepted","childSessionKey":"agent:main:subagent:1","runId":"r"}"#;
        for answer in [
            json!({"status": "accepted", "childSessionKey": "agent:main:subagent:1"}),
            json!(text),
            json!([{"type": "text", "text": text}]),
            json!({"content": [{"type": "text", "text": text}], "details": {"status": "accepted"}}),
            json!({"content": [], "details": {"childSessionKey": "agent:main:subagent:1"}}),
        ] {
            assert_eq!(
                child_key(&answer).as_deref(),
                Some("agent:main:subagent:1"),
                "{answer}"
            );
        }
        for answer in [
            json!({"status": "error", "error": "no such agent"}),
            json!("childSessionKey is not JSON"),
            json!({"childSessionKey": " "}),
            json!(7),
        ] {
            assert_eq!(child_key(&answer), None, "{answer}");
        }
    }
}
