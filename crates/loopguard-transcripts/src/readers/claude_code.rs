//! Claude Code session transcripts (`~/.claude/projects/<project>/<session>.jsonl`,
//! FORMATS §5): one JSON object per line, wrapping Anthropic Messages API messages.
//!
//! | line | item |
//! |---|---|
//! | `user` that is a prompt (not a tool result, not `isMeta`, not `isCompactSummary`) | a new run |
//! | `assistant` | one [`Item::Turn`] per API response (`message.id`; Claude Code writes one content block per line), with its `usage`, then one call per `tool_use` block |
//! | `user` with `tool_result` blocks | the results of calls `tool_use_id` (as in [`anthropic_messages`](crate::readers::anthropic_messages)) |
//! | `system` with `subtype: compact_boundary` | a compaction in the current run |
//! | `isSidechain: true` lines | runs of their own, per `agentId` (subagents never share history with the main chain) |
//! | `summary`, `file-history-snapshot`, `queue-operation`, `progress`, `attachment`, other `system` lines | nothing |
//!
//! The session id is the lines' `sessionId` (else the file name's). Lines are read in file
//! order.

use std::borrow::Cow;
use std::collections::HashMap;
use std::io::{self, BufRead, Seek};

use loopguard_events::Ids;
use serde::Deserialize;
use serde_json::value::RawValue;
use serde_json::Value;

use crate::item::{self, Item, Sink};
use crate::readers::anthropic_messages::{emit_tool_uses, is_prompt, tool_results, usage};
use crate::readers::lines::{self, Lines};
use crate::stats::{ReadStats, SkipReason};
use crate::ReadOptions;

#[derive(Deserialize)]
struct LineEntry<'a> {
    #[serde(rename = "type", borrow, default)]
    kind: Option<Cow<'a, str>>,
    #[serde(borrow, default)]
    subtype: Option<Cow<'a, str>>,
    #[serde(rename = "isSidechain", default)]
    is_sidechain: Option<bool>,
    #[serde(rename = "isMeta", default)]
    is_meta: Option<bool>,
    #[serde(rename = "isCompactSummary", default)]
    is_compact_summary: Option<bool>,
    #[serde(rename = "sessionId", borrow, default)]
    session_id: Option<Cow<'a, str>>,
    #[serde(rename = "agentId", borrow, default)]
    agent_id: Option<Cow<'a, str>>,
    #[serde(borrow, default)]
    message: Option<&'a RawValue>,
}

/// A chain of runs: the main conversation, or one subagent's sidechain.
#[derive(Default)]
struct Chain {
    runs: u64,
    last_response: Option<String>,
}

/// Reads a Claude Code transcript.
pub fn read<R: BufRead + Seek>(
    input: R,
    options: &ReadOptions<'_>,
    sink: &mut dyn Sink,
) -> io::Result<ReadStats> {
    let mut stats = ReadStats::default();
    let mut lines = Lines::new(input, options.max_line);
    let mut session: Option<String> = None;
    let mut chains: HashMap<String, Chain> = HashMap::new();
    while let Some(line) = lines.next_line(&mut stats)? {
        let mut scratch = None;
        let entry = match lines::parse::<LineEntry<'_>>(line.bytes, &mut scratch) {
            Ok((entry, repaired)) => {
                stats.repaired += u64::from(repaired);
                entry
            }
            Err(e) if e.is_data() && line.bytes.starts_with(b"{") => {
                stats.skip(SkipReason::MalformedEntry, line.pos.line, || e.to_string());
                continue;
            }
            Err(e) => {
                lines::skip_unparsable(&mut stats, &line, &e, true);
                continue;
            }
        };
        let pos = line.pos;
        if session.is_none() {
            session = entry.session_id.as_deref().map(str::to_owned);
        }
        let session_id = session.as_deref().unwrap_or(options.session_hint);
        let chain_key = if entry.is_sidechain == Some(true) {
            format!("sidechain-{}", entry.agent_id.as_deref().unwrap_or("task"))
        } else {
            "turn".to_owned()
        };
        if chains.len() > 4096 && !chains.contains_key(&chain_key) {
            chains.clear();
        }
        let chain = chains.entry(chain_key.clone()).or_default();
        let run = |chain: &Chain| Some(format!("{chain_key}-{}", chain.runs));
        let message: Option<Value> = entry
            .message
            .and_then(|m| serde_json::from_str(m.get()).ok());
        match entry.kind.as_deref().unwrap_or("") {
            "user" => {
                let Some(message) = message else {
                    stats.skip(SkipReason::MalformedEntry, pos.line, || {
                        "user line without message".into()
                    });
                    continue;
                };
                let content = message.get("content").unwrap_or(&Value::Null);
                let meta = entry.is_meta == Some(true) || entry.is_compact_summary == Some(true);
                if !meta && is_prompt(content) {
                    chain.runs += 1;
                    chain.last_response = None;
                }
                let ids = item::ids(session_id, run(chain).as_deref());
                for (id, outcome) in tool_results(content) {
                    match id.and_then(loopguard::text::non_blank) {
                        Some(id) => sink.push(pos, item::result(&ids, id, outcome)),
                        None => stats.skip(SkipReason::MalformedEntry, pos.line, || {
                            "tool_result without tool_use_id".into()
                        }),
                    }
                }
            }
            "assistant" => {
                let Some(message) = message else {
                    stats.skip(SkipReason::MalformedEntry, pos.line, || {
                        "assistant line without message".into()
                    });
                    continue;
                };
                let ids: Ids = item::ids(session_id, run(chain).as_deref());
                let response = message.get("id").and_then(Value::as_str).map(str::to_owned);
                if response.is_none() || response != chain.last_response {
                    chain.last_response = response.clone();
                    let usage = message.get("usage").and_then(usage);
                    sink.push(
                        pos,
                        Item::Turn {
                            ids: ids.clone(),
                            usage,
                        },
                    );
                }
                let content = message.get("content").unwrap_or(&Value::Null);
                // One API response (message.id) spans several lines: one batch.
                emit_tool_uses(&ids, pos, content, response.as_deref(), &mut stats, sink);
            }
            "system" => {
                if entry.subtype.as_deref() == Some("compact_boundary") {
                    let ids = item::ids(session_id, run(chain).as_deref());
                    sink.push(pos, item::compaction(&ids));
                }
            }
            "summary"
            | "file-history-snapshot"
            | "queue-operation"
            | "progress"
            | "attachment"
            | "custom-title"
            | "tag" => {}
            other => {
                let other = other.to_owned();
                stats.skip(SkipReason::UnknownEntryType, pos.line, || other);
            }
        }
    }
    Ok(stats)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testing::read_bytes;
    use crate::Format;
    use loopguard_events::Event;

    /// A synthetic session: a prompt, a response spread over two lines (two tool_use
    /// blocks), their results, a subagent sidechain, a compaction, a prompt after it.
    const SESSION: &str = concat!(
        r#"{"type":"summary","summary":"s","leafUuid":"u0"}"#,
        "\n",
        r#"{"type":"user","sessionId":"cc1","uuid":"u1","isSidechain":false,"message":{"role":"user","content":"list files"}}"#,
        "\n",
        r#"{"type":"assistant","sessionId":"cc1","uuid":"a1","message":{"id":"msg_1","role":"assistant","content":[{"type":"tool_use","id":"toolu_1","name":"Bash","input":{"command":"ls"}}],"usage":{"input_tokens":10,"output_tokens":2}}}"#,
        "\n",
        r#"{"type":"assistant","sessionId":"cc1","uuid":"a2","message":{"id":"msg_1","role":"assistant","content":[{"type":"tool_use","id":"toolu_2","name":"Bash","input":{"command":"pwd"}}],"usage":{"input_tokens":10,"output_tokens":2}}}"#,
        "\n",
        r#"{"type":"user","sessionId":"cc1","uuid":"u2","message":{"role":"user","content":[{"type":"tool_result","tool_use_id":"toolu_1","content":"a b"}]},"toolUseResult":{"stdout":"a b"}}"#,
        "\n",
        r#"{"type":"user","sessionId":"cc1","uuid":"u3","message":{"role":"user","content":[{"type":"tool_result","tool_use_id":"toolu_2","content":"/","is_error":false}]}}"#,
        "\n",
        r#"{"type":"user","sessionId":"cc1","uuid":"s1","isSidechain":true,"agentId":"ag1","message":{"role":"user","content":"subtask"}}"#,
        "\n",
        r#"{"type":"assistant","sessionId":"cc1","uuid":"s2","isSidechain":true,"agentId":"ag1","message":{"id":"msg_2","role":"assistant","content":[{"type":"tool_use","id":"toolu_3","name":"Read","input":{"file_path":"/x"}}]}}"#,
        "\n",
        r#"{"type":"user","sessionId":"cc1","uuid":"s3","isSidechain":true,"agentId":"ag1","message":{"role":"user","content":[{"type":"tool_result","tool_use_id":"toolu_3","content":"x","is_error":true}]}}"#,
        "\n",
        r#"{"type":"system","subtype":"compact_boundary","content":"Conversation compacted","compactMetadata":{"trigger":"auto","preTokens":1000},"sessionId":"cc1"}"#,
        "\n",
        r#"{"type":"user","sessionId":"cc1","isCompactSummary":true,"message":{"role":"user","content":"This session is being continued"}}"#,
        "\n",
        r#"{"type":"user","sessionId":"cc1","isMeta":true,"message":{"role":"user","content":"<command>"}}"#,
        "\n",
        r#"{"type":"file-history-snapshot","messageId":"m","snapshot":{}}"#,
        "\n",
        r#"{"type":"mystery"}"#,
        "\n",
        r#"{"type":"user","sessionId":"cc1","message":{"role":"user","content":[{"type":"text","text":"next"}]}}"#,
        "\n",
        r#"{"type":"assistant","sessionId":"cc1","message":{"id":"msg_3","role":"assi"#,
    );

    #[test]
    fn maps_a_session() {
        let r = read_bytes(Format::ClaudeCode, SESSION.as_bytes(), "hint");
        assert_eq!((r.calls(), r.results(), r.compactions()), (3, 3, 1));
        assert_eq!(
            r.runs(),
            vec![
                ("cc1".into(), Some("turn-1".into())),
                ("cc1".into(), Some("sidechain-ag1-1".into())),
            ]
        );
        let turns = r
            .items
            .iter()
            .filter(|(_, i)| matches!(i, Item::Turn { .. }))
            .count();
        assert_eq!(turns, 2, "one turn per API response, not per line");
        let compaction_run = r.items.iter().find_map(|(_, i)| match i {
            Item::Event(Event::Compaction { ids }) => ids.run.clone(),
            _ => None,
        });
        assert_eq!(compaction_run.as_deref(), Some("turn-1"));
        assert_eq!(r.stats.skipped_for(SkipReason::UnknownEntryType), 1);
        assert_eq!(r.stats.skipped_for(SkipReason::TruncatedLastLine), 1);
        assert_eq!(r.stats.lines, 16);
    }
}
