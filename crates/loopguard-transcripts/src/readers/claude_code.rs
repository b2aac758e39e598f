//! Claude Code transcripts (FORMATS §5, §14.5): native session files
//! (`~/.claude/projects/<project>/<session>.jsonl`), subagent files
//! (`<session>/subagents/agent-<id>.jsonl`) and the `claude -p --output-format
//! stream-json` stream; one JSON object per line, wrapping Anthropic Messages API
//! messages.
//!
//! | line | item |
//! |---|---|
//! | `user` that is a prompt (not a tool result, not `isMeta`, not `isCompactSummary`) | a new run, and its prompt |
//! | `assistant` | one [`Item::Turn`] per API response (`message.id`; Claude Code writes one content block per line) and a usage event (its `usage` by kind, its `model`, the response id as the event's id), then one call per `tool_use` block; the model's answer (its text and thinking blocks, whether it made calls) once the response's last line was read; none for the lines Claude Code writes for a failed API call (`isApiErrorMessage`) |
//! | `user` with `tool_result` blocks | the results of calls `tool_use_id` (as in [`anthropic_messages`](crate::readers::anthropic_messages)); `is_error` makes an error, a `<tool_use_error>` text without it a failed result |
//! | `system` with `subtype: compact_boundary` | a compaction in the current run |
//! | `summary`, `file-history-snapshot`, `queue-operation`, `progress`, `attachment`, `permission-mode`, `custom-title`, `agent-name`, `last-prompt`, `tag`, `result`, other `system` lines | nothing |
//!
//! The session is the lines' `sessionId` (stream-json: `session_id`), else the file
//! name's. A subagent is a session of its own, `<session>/agent-<agentId>`: the lines of a
//! subagent file and sidechain lines (`isSidechain: true`) name their `agentId`;
//! stream-json names the parent `Task` call instead (`parent_tool_use_id`). `progress`
//! lines mirror a running subagent inside its parent's file and are not counted there.
//!
//! A subagent's events name their parent: `parent_session` is the session that spawned
//! it, `parent_run` the run of that session whose `Task` (or `Agent`) call spawned it.
//! Inside one file (sidechain lines, stream-json) that is the main session's current
//! run; for a subagent file, [`spawns_of`] reads the parent's file (`<session>.jsonl` beside
//! the `<session>/` folder) for the run whose `progress` line (`data.agentId`) or call
//! result (`toolUseResult.agentId`) names the agent. Without the parent's file the
//! parent run is absent.
//! Lines are read in file order; a line of a type this reader does not know is counted
//! and passed over.

use std::borrow::Cow;
use std::collections::HashMap;
use std::io::{self, BufRead, Seek};
use std::path::{Path, PathBuf};
use std::sync::Arc;

use loopguard::Role;
use loopguard_events::{Event, Ids};
use serde::Deserialize;
use serde_json::value::RawValue;
use serde_json::Value;

use crate::detect::Format;
use crate::item::{self, AnswerParts, Item, Sink};
use crate::readers::anthropic_messages::{
    add_blocks, emit_tool_uses, is_prompt, judged_outcome, response_usage, tool_results,
};
use crate::readers::chat::content_text;
use crate::readers::lines::{self, Lines};
use crate::readers::ReadOptions;
use crate::readers::Spawns;
use crate::stats::{ReadStats, SkipReason};

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
    /// An assistant line Claude Code writes for a failed API call (not the model's).
    #[serde(rename = "isApiErrorMessage", default)]
    is_api_error: Option<bool>,
    #[serde(rename = "sessionId", borrow, default)]
    session_id: Option<Cow<'a, str>>,
    /// stream-json's spelling.
    #[serde(rename = "session_id", borrow, default)]
    stream_session_id: Option<Cow<'a, str>>,
    #[serde(rename = "agentId", borrow, default)]
    agent_id: Option<Cow<'a, str>>,
    /// stream-json: the `Task` call a subagent's message belongs to.
    #[serde(borrow, default)]
    parent_tool_use_id: Option<Cow<'a, str>>,
    #[serde(borrow, default)]
    message: Option<&'a RawValue>,
    /// `progress` lines: `{agentId, ...}` of the subagent they mirror.
    #[serde(borrow, default)]
    data: Option<&'a RawValue>,
    /// A call result's structured form (`{agentId, ...}` for a `Task` call).
    #[serde(rename = "toolUseResult", borrow, default)]
    tool_use_result: Option<&'a RawValue>,
}

impl<'a> LineEntry<'a> {
    /// The line's own session id (native or stream-json spelling).
    fn session(&self) -> Option<&str> {
        self.session_id
            .as_deref()
            .or(self.stream_session_id.as_deref())
            .and_then(loopguard::text::non_blank)
    }

    /// The subagent the line belongs to (`None`: the main session).
    fn agent(&self) -> Option<&str> {
        match (&self.agent_id, &self.parent_tool_use_id) {
            (Some(agent), _) if self.is_sidechain == Some(true) => Some(agent.as_ref()),
            (_, Some(parent)) => Some(parent.as_ref()),
            _ => None,
        }
        .and_then(loopguard::text::non_blank)
    }

    /// Whether a `user` line with `content` starts a run (a prompt, not a tool result,
    /// meta line or compaction summary).
    fn starts_run(&self, content: &Value) -> bool {
        let meta = self.is_meta == Some(true) || self.is_compact_summary == Some(true);
        !meta && is_prompt(content)
    }

    /// The subagent a main-session line names as spawned: a `progress` line's
    /// `data.agentId`, a `Task` result's `toolUseResult.agentId`.
    fn spawned_agent(&self) -> Option<String> {
        #[derive(Deserialize)]
        struct AgentRef {
            #[serde(rename = "agentId", default)]
            agent_id: Option<String>,
        }
        [self.data, self.tool_use_result]
            .into_iter()
            .flatten()
            .filter(|raw| raw.get().contains("agentId"))
            .find_map(|raw| serde_json::from_str::<AgentRef>(raw.get()).ok()?.agent_id)
            .filter(|a| !a.trim().is_empty())
    }
}

/// Reads a parent transcript for the runs that spawned its subagents (by agent id, without
/// its `agent-` prefix): one pass, runs numbered as [`read`] numbers them (lines over the
/// options' limits are passed over).
pub fn read_spawns<R: BufRead + Seek>(input: R, options: &ReadOptions<'_>) -> io::Result<Spawns> {
    let mut stats = ReadStats::default();
    let mut lines = Lines::with_options(input, options)?;
    let mut runs: HashMap<String, u64> = HashMap::new();
    let mut spawns = Spawns::default();
    let mut main: Option<String> = None;
    while let Some(line) = lines.next_line(&mut stats)? {
        let mut scratch = None;
        let Some(entry) = lines::entry::<LineEntry<'_>>(&line, &mut scratch, &mut stats) else {
            continue;
        };
        if let Some(id) = entry.session() {
            if main.as_deref() != Some(id) {
                main = Some(id.to_owned());
            }
        }
        if entry.agent().is_some() {
            continue;
        }
        let base = main.as_deref().unwrap_or(options.session_hint);
        let count = runs.entry(base.to_owned()).or_default();
        if entry.kind.as_deref() == Some("user") {
            let content = entry
                .message
                .and_then(|m| serde_json::from_str::<Value>(m.get()).ok())
                .and_then(|mut m| m.get_mut("content").map(Value::take));
            if content.is_some_and(|c| entry.starts_run(&c)) {
                *count += 1;
            }
        }
        if let Some(agent) = entry.spawned_agent() {
            spawns.insert(agent_key(&agent).to_owned(), format!("turn-{count}"));
        }
    }
    Ok(spawns)
}

/// An agent id as [`Spawns`] keeps it: without its `agent-` prefix.
fn agent_key(agent: &str) -> &str {
    agent.strip_prefix("agent-").unwrap_or(agent)
}

/// The parent transcript of a subagent file `<dir>/<session>/subagents/agent-<id>.jsonl`:
/// `<dir>/<session>.jsonl`, when it exists.
pub fn parent_of(subagent: &Path) -> Option<PathBuf> {
    let name = subagent.file_name()?.to_str()?;
    if !name.starts_with("agent-") {
        return None;
    }
    let folder = subagent.parent()?;
    if folder.file_name()? != "subagents" {
        return None;
    }
    let session = folder.parent()?;
    let mut parent = session.as_os_str().to_owned();
    parent.push(".jsonl");
    let parent = PathBuf::from(parent);
    parent.is_file().then_some(parent)
}

/// The [`Spawns`] of the parent of the subagent file `subagent` (`None`: it is not a
/// subagent file, its parent's file is missing or cannot be read). A parent is read once
/// while it is unchanged, however many subagent files name it.
pub fn spawns_of(subagent: &Path, options: &ReadOptions<'_>) -> Option<Arc<Spawns>> {
    let parent = parent_of(subagent)?;
    crate::readers::linked::cached(&parent, |input| read_spawns(input, options))
}

/// Line types that hold nothing for the guard.
const NOTHING: &[&str] = &[
    "summary",
    "file-history-snapshot",
    "queue-operation",
    "progress",
    "attachment",
    "permission-mode",
    "custom-title",
    "agent-name",
    "last-prompt",
    "tag",
    "result",
];

/// Sessions (the main one and its subagents) tracked at once.
const MAX_CHAINS: usize = 4096;

/// The state of one session: its runs and the API response being read.
#[derive(Default)]
struct Chain {
    /// A subagent's parent session and the run that spawned it.
    parent: Option<(String, Option<String>)>,
    runs: u64,
    last_response: Option<String>,
    /// The answer of the response being read.
    answer: Option<AnswerParts>,
}

impl Chain {
    /// The response being read is over: its answer goes out.
    fn end_response(&mut self, sink: &mut dyn Sink) {
        if let Some(answer) = self.answer.take() {
            answer.emit(sink);
        }
    }
}

/// Every answer still being read goes out, in the order the responses began.
fn end_responses(chains: &mut HashMap<String, Chain>, sink: &mut dyn Sink) {
    let mut open: Vec<&mut Chain> = chains.values_mut().filter(|c| c.answer.is_some()).collect();
    open.sort_by_key(|c| c.answer.as_ref().map(|a| a.pos.offset));
    for chain in open {
        chain.end_response(sink);
    }
}

/// Reads a Claude Code transcript.
pub fn read<R: BufRead + Seek>(
    input: R,
    options: &ReadOptions<'_>,
    sink: &mut dyn Sink,
) -> io::Result<ReadStats> {
    let mut stats = ReadStats::default();
    let mut lines = Lines::with_options(input, options)?;
    let mut main: Option<String> = None;
    let mut chains: HashMap<String, Chain> = HashMap::new();
    while let Some(line) = lines.next_line(&mut stats)? {
        let mut scratch = None;
        let Some(entry) = lines::entry::<LineEntry<'_>>(&line, &mut scratch, &mut stats) else {
            continue;
        };
        let pos = line.pos;
        if let Some(id) = entry.session() {
            if main.as_deref() != Some(id) {
                main = Some(id.to_owned());
            }
        }
        let kind = entry.kind.as_deref().unwrap_or("");
        if NOTHING.contains(&kind) {
            stats.record();
            continue;
        }
        let base = main.as_deref().unwrap_or(options.session_hint);
        let agent = entry.agent();
        let session = match agent {
            Some(agent) => item::subagent_session(base, agent),
            None => base.to_owned(),
        };
        if chains.len() >= MAX_CHAINS && !chains.contains_key(&session) {
            end_responses(&mut chains, sink);
            chains.clear();
        }
        if !chains.contains_key(&session) {
            // A subagent's parent: the run that spawned it as its parent's file says,
            // else (sidechains, stream-json) the main session's current run.
            let parent = agent.map(|agent| {
                let spawned = options.spawns.and_then(|s| s.run_of(agent_key(agent)));
                let current = chains.get(base).map(|c| format!("turn-{}", c.runs));
                (base.to_owned(), spawned.map(str::to_owned).or(current))
            });
            chains.insert(
                session.clone(),
                Chain {
                    parent,
                    ..Chain::default()
                },
            );
        }
        let Some(chain) = chains.get_mut(&session) else {
            continue;
        };
        let run = |chain: &Chain| {
            let mut ids = item::ids(&session, Some(&format!("turn-{}", chain.runs)));
            if let Some((parent, run)) = &chain.parent {
                ids.parent_session = Some(parent.clone());
                ids.parent_run.clone_from(run);
            }
            ids
        };
        let message: Option<Value> = entry
            .message
            .and_then(|m| serde_json::from_str(m.get()).ok());
        match kind {
            "user" => {
                let Some(message) = message else {
                    stats.skip(SkipReason::MalformedEntry, pos.line, || {
                        "user line without message".into()
                    });
                    continue;
                };
                stats.record();
                chain.end_response(sink);
                let content = message.get("content").unwrap_or(&Value::Null);
                let prompt = entry.starts_run(content);
                if prompt {
                    chain.runs += 1;
                    chain.last_response = None;
                }
                let ids = run(chain);
                if prompt {
                    sink.push(pos, item::said(&ids, Role::User, content_text(content)));
                }
                for (id, block) in tool_results(content) {
                    let outcome =
                        judged_outcome(block, Format::ClaudeCode, options.failures, &mut stats);
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
                stats.record();
                let ids: Ids = run(chain);
                let response = message.get("id").and_then(Value::as_str).map(str::to_owned);
                if response.is_none() || response != chain.last_response {
                    chain.end_response(sink);
                    chain.last_response = response.clone();
                    sink.push(
                        pos,
                        Item::Turn {
                            ids: ids.clone(),
                            usage: None,
                        },
                    );
                    // What the response used, by kind, with its model and id: a usage
                    // event the budgets price and a re-read counts once.
                    if let Some(usage) = response_usage(&message) {
                        sink.push(
                            pos,
                            Item::Event(Event::Usage {
                                ids: ids.clone(),
                                usage,
                            }),
                        );
                    }
                }
                let content = message.get("content").unwrap_or(&Value::Null);
                if entry.is_api_error != Some(true) {
                    let answer = chain
                        .answer
                        .get_or_insert_with(|| AnswerParts::new(pos, &ids));
                    add_blocks(answer, content);
                }
                // One API response (message.id) spans several lines: one batch.
                emit_tool_uses(&ids, pos, content, response.as_deref(), &mut stats, sink);
            }
            "system" => {
                stats.record();
                if entry.subtype.as_deref() == Some("compact_boundary") {
                    chain.end_response(sink);
                    let ids = run(chain);
                    sink.push(pos, item::compaction(&ids));
                }
            }
            other => {
                let other = other.to_owned();
                stats.skip(SkipReason::UnknownEntryType, pos.line, || other);
            }
        }
    }
    end_responses(&mut chains, sink);
    Ok(stats)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testing::{read_bytes, read_corpus};
    use loopguard_events::{Event, OwnedOutcome};

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
                ("cc1/agent-ag1".into(), Some("turn-1".into())),
            ]
        );
        let turns = r
            .items
            .iter()
            .filter(|(_, i)| matches!(i, Item::Turn { .. }))
            .count();
        assert_eq!(turns, 2, "one turn per API response, not per line");
        // One usage event per API response, by kind, under the response's id.
        let usage: Vec<_> = r
            .items
            .iter()
            .filter_map(|(_, i)| match i {
                Item::Event(Event::Usage { usage, .. }) => Some(usage),
                _ => None,
            })
            .collect();
        assert_eq!(usage.len(), 1, "msg_2 records no usage");
        assert_eq!(usage[0].id.as_deref(), Some("msg_1"));
        assert_eq!((usage[0].input_tokens, usage[0].output_tokens), (10, 2));
        let compaction_run = r.items.iter().find_map(|(_, i)| match i {
            Item::Event(Event::Compaction { ids }) => ids.run.clone(),
            _ => None,
        });
        assert_eq!(compaction_run.as_deref(), Some("turn-1"));
        assert_eq!(r.stats.skipped_for(SkipReason::UnknownEntryType), 1);
        assert_eq!(r.stats.skipped_for(SkipReason::TruncatedLastLine), 1);
        assert_eq!(r.stats.lines, 16);
        // The sidechain names the main session and its run at the time.
        let parents: std::collections::BTreeSet<_> = r
            .items
            .iter()
            .filter_map(|(_, i)| match i {
                Item::Event(e) => Some(e.ids()),
                _ => None,
            })
            .map(|ids| {
                (
                    ids.session.as_str(),
                    ids.parent_session.as_deref(),
                    ids.parent_run.as_deref(),
                )
            })
            .collect();
        assert_eq!(
            parents.into_iter().collect::<Vec<_>>(),
            [
                ("cc1", None, None),
                ("cc1/agent-ag1", Some("cc1"), Some("turn-1")),
            ]
        );
        // The prompts, and one answer per API response (its two lines, one answer), each
        // out once the response is over.
        let said: Vec<_> = r
            .items
            .iter()
            .filter_map(|(_, i)| match i {
                Item::Event(Event::Message { ids, message }) => Some((
                    ids.session.as_str(),
                    message.role,
                    message.text.as_str(),
                    message.has_tool_calls,
                )),
                _ => None,
            })
            .collect();
        assert_eq!(
            said,
            [
                ("cc1", Role::User, "list files", None),
                ("cc1", Role::Assistant, "", Some(true)),
                ("cc1/agent-ag1", Role::User, "subtask", None),
                ("cc1/agent-ag1", Role::Assistant, "", Some(true)),
                ("cc1", Role::User, "next", None),
            ]
        );
    }

    /// A response written over several lines (thinking, text, a call) is one answer that
    /// made a call; a text-only response is an answer without one.
    #[test]
    fn one_answer_per_response() {
        let lines = [
            r#"{"type":"user","sessionId":"c","message":{"role":"user","content":"go"}}"#,
            r#"{"type":"assistant","sessionId":"c","message":{"id":"m1","role":"assistant","content":[{"type":"thinking","thinking":"plan"}]}}"#,
            r#"{"type":"assistant","sessionId":"c","message":{"id":"m1","role":"assistant","content":[{"type":"text","text":"Let me look."}]}}"#,
            r#"{"type":"assistant","sessionId":"c","message":{"id":"m1","role":"assistant","content":[{"type":"tool_use","id":"t1","name":"Read","input":{}}]}}"#,
            r#"{"type":"user","sessionId":"c","message":{"role":"user","content":[{"type":"tool_result","tool_use_id":"t1","content":"x"}]}}"#,
            r#"{"type":"assistant","sessionId":"c","message":{"id":"m2","role":"assistant","content":[{"type":"text","text":"Done."}]}}"#,
        ];
        let r = read_bytes(Format::ClaudeCode, lines.join("\n").as_bytes(), "c");
        assert_eq!(
            r.messages(),
            [
                (Role::User, "go", None, None),
                (Role::Assistant, "Let me look.", Some("plan"), Some(true)),
                (Role::Assistant, "Done.", None, Some(false)),
            ]
        );
    }

    /// `claude -p --output-format stream-json`: the session is `session_id` (not the file
    /// name), a subagent's messages (`parent_tool_use_id`) are a session of their own.
    #[test]
    fn stream_json() {
        let stream = concat!(
            r#"{"type":"system","subtype":"init","cwd":"/w","session_id":"s-9","tools":["Bash"],"model":"m"}"#,
            "\n",
            r#"{"type":"assistant","message":{"id":"msg_1","role":"assistant","content":[{"type":"tool_use","id":"t1","name":"Task","input":{"prompt":"look"}}]},"parent_tool_use_id":null,"session_id":"s-9"}"#,
            "\n",
            r#"{"type":"assistant","message":{"id":"msg_2","role":"assistant","content":[{"type":"tool_use","id":"t2","name":"Bash","input":{"command":"ls"}}]},"parent_tool_use_id":"t1","session_id":"s-9"}"#,
            "\n",
            r#"{"type":"user","message":{"role":"user","content":[{"type":"tool_result","tool_use_id":"t2","content":"<tool_use_error>Error: No such tool available: Bash</tool_use_error>"}]},"parent_tool_use_id":"t1","session_id":"s-9"}"#,
            "\n",
            r#"{"type":"user","message":{"role":"user","content":[{"type":"tool_result","tool_use_id":"t1","content":"done"}]},"parent_tool_use_id":null,"session_id":"s-9"}"#,
            "\n",
            r#"{"type":"result","subtype":"success","is_error":false,"session_id":"s-9","total_cost_usd":0.1}"#,
            "\n",
        );
        let r = read_bytes(Format::ClaudeCode, stream.as_bytes(), "stdout");
        assert_eq!((r.calls(), r.results()), (2, 2));
        assert_eq!(
            r.runs(),
            vec![
                ("s-9".into(), Some("turn-0".into())),
                ("s-9/agent-t1".into(), Some("turn-0".into()))
            ]
        );
        assert_eq!(r.stats.failed_results(), 1, "the <tool_use_error> text");
        let child = r.items.iter().find_map(|(_, i)| match i {
            Item::Event(e) if e.ids().session == "s-9/agent-t1" => Some(e.ids().clone()),
            _ => None,
        });
        let child = child.unwrap();
        assert_eq!(
            (child.parent_session.as_deref(), child.parent_run.as_deref()),
            (Some("s-9"), Some("turn-0"))
        );
        assert!(r.stats.skipped.is_empty(), "{:?}", r.stats.skipped);
    }

    /// A native session whose first line is a `permission-mode` record: 41 calls, the
    /// labelled search streak in calls 6–24 of one turn, every line understood.
    #[test]
    fn corpus_session_starting_with_permission_mode() {
        let Some(r) = read_corpus(
            Format::ClaudeCode,
            "claude-code/7ef4b236-d946-48a6-a856-e45b02af7be7.jsonl",
        ) else {
            return;
        };
        assert_eq!(r.calls(), 41);
        assert_eq!(r.runs()[0].0, "7ef4b236-d946-48a6-a856-e45b02af7be7");
        let runs_of_streak: std::collections::BTreeSet<_> = r
            .items
            .iter()
            .filter_map(|(_, i)| match i {
                Item::Event(Event::Call { ids, .. }) => Some(ids.run.clone()),
                _ => None,
            })
            .skip(5)
            .take(19)
            .collect();
        assert_eq!(runs_of_streak.len(), 1, "calls 6-24 are one turn");
        assert!(r.stats.skipped.is_empty(), "{:?}", r.stats.skipped);
    }

    /// The parent file mirrors its subagent in `progress` lines: 13 calls of its own.
    #[test]
    fn corpus_parent_with_progress_lines() {
        let Some(r) = read_corpus(
            Format::ClaudeCode,
            "claude-code/44ef5cbf-9cc3-4f7b-ac40-337a4d39713b.jsonl",
        ) else {
            return;
        };
        assert_eq!(r.calls(), 13);
        let sessions: std::collections::BTreeSet<_> =
            r.runs().into_iter().map(|(s, _)| s).collect();
        assert_eq!(
            sessions.into_iter().collect::<Vec<_>>(),
            ["44ef5cbf-9cc3-4f7b-ac40-337a4d39713b"]
        );
        assert!(r.stats.skipped.is_empty(), "{:?}", r.stats.skipped);
    }

    /// The subagent file beside its parent: its events name the parent session and the
    /// run whose `Agent` call spawned it (the parent's `progress` lines name the agent).
    #[test]
    fn corpus_subagent_names_its_parent_run() {
        let parent = "44ef5cbf-9cc3-4f7b-ac40-337a4d39713b";
        let Some(path) = crate::testing::corpus(&format!(
            "claude-code/{parent}/subagents/agent-a71969c1296961234.jsonl"
        )) else {
            return;
        };
        let options = ReadOptions::new("agent-a71969c1296961234");
        let spawns = spawns_of(&path, &options).expect("the parent file is beside it");
        assert_eq!(spawns.len(), 1);
        // The Agent call is in the parent's third prompt's run, as its own read numbers it.
        let whole = read_corpus(Format::ClaudeCode, &format!("claude-code/{parent}.jsonl"));
        let spawning_run = whole.and_then(|r| {
            r.items.iter().find_map(|(_, i)| match i {
                Item::Event(Event::Call { ids, tool, .. }) if tool == "Agent" => ids.run.clone(),
                _ => None,
            })
        });
        assert_eq!(spawns.run_of("a71969c1296961234"), spawning_run.as_deref());
        let mut items = Vec::new();
        let options = ReadOptions {
            spawns: Some(&spawns),
            ..options
        };
        let file = std::fs::File::open(&path).unwrap();
        read(io::BufReader::new(file), &options, &mut items).unwrap();
        let events: Vec<_> = items
            .iter()
            .filter_map(|(_, i)| match i {
                Item::Event(e) => Some(e.ids()),
                _ => None,
            })
            .collect();
        assert!(!events.is_empty());
        for ids in events {
            assert_eq!(ids.parent_session.as_deref(), Some(parent));
            assert_eq!(ids.parent_run.as_deref(), spawning_run.as_deref());
        }
        // Read alone (no parent file), the parent session is still named, its run is not.
        let alone = read_corpus(
            Format::ClaudeCode,
            &format!("claude-code/{parent}/subagents/agent-a71969c1296961234.jsonl"),
        )
        .unwrap();
        let ids = alone.items.iter().find_map(|(_, i)| match i {
            Item::Event(e) => Some(e.ids().clone()),
            _ => None,
        });
        let ids = ids.unwrap();
        assert_eq!(
            (ids.parent_session.as_deref(), ids.parent_run),
            (Some(parent), None)
        );
    }

    /// A path that is not a subagent file beside its parent has no parent file.
    #[test]
    fn parent_file_of_a_subagent_file() {
        let dir = tempfile::tempdir().unwrap();
        let sub = dir.path().join("s1").join("subagents");
        std::fs::create_dir_all(&sub).unwrap();
        let child = sub.join("agent-x.jsonl");
        assert_eq!(parent_of(&child), None, "no s1.jsonl yet");
        std::fs::write(dir.path().join("s1.jsonl"), "").unwrap();
        assert_eq!(parent_of(&child), Some(dir.path().join("s1.jsonl")));
        assert_eq!(parent_of(&sub.join("other.jsonl")), None);
        assert_eq!(
            parent_of(&dir.path().join("s1").join("agent-x.jsonl")),
            None
        );
    }

    /// The subagent file (labels.json): a session of its own; call 1 fails, 2–5 are
    /// cancelled siblings, 10–13 are refused with the same permission text.
    #[test]
    fn corpus_subagent_file() {
        let Some(r) = read_corpus(
            Format::ClaudeCode,
            "claude-code/44ef5cbf-9cc3-4f7b-ac40-337a4d39713b/subagents/agent-a71969c1296961234.jsonl",
        ) else {
            return;
        };
        assert_eq!((r.calls(), r.results()), (13, 13));
        assert_eq!(
            r.runs(),
            vec![(
                "44ef5cbf-9cc3-4f7b-ac40-337a4d39713b/agent-a71969c1296961234".into(),
                Some("turn-1".into())
            )]
        );
        let outcomes = r.outcomes();
        let error = |n: usize| match outcomes[n - 1] {
            OwnedOutcome::Error(e) => e.as_str().unwrap_or("").to_owned(),
            other => panic!("call {n}: {other:?}"),
        };
        for n in 2..=5 {
            assert!(error(n).contains("Cancelled: parallel tool call"), "{n}");
        }
        for n in 10..=13 {
            assert!(
                error(n).starts_with("Permission for this tool use was denied"),
                "{n}"
            );
            assert_eq!(error(n), error(10));
        }
    }
}
