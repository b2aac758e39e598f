//! Which format a file is in, from its first bytes (and, as a hint, its name).
//!
//! Detection reads a prefix (see [`PREFIX_BYTES`]) and looks at the shape of the JSON in it:
//! the first line's keys and values for JSON Lines formats, the keys of the document (or
//! of its first elements) for whole-document formats. It never needs the whole file, and a
//! prefix that cuts a value in two is fine.

use std::fmt;
use std::str::FromStr;

use serde::Serialize;

use crate::error::Error;

/// How many bytes detection looks at.
pub const PREFIX_BYTES: usize = 256 << 10;

/// A transcript format with a reader.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize)]
#[serde(rename_all = "kebab-case")]
#[non_exhaustive]
pub enum Format {
    /// OpenClaw (pi `SessionManager`) session JSONL.
    #[serde(rename = "openclaw")]
    OpenClaw,
    /// Claude Code session JSONL (native session files, subagent files, and the
    /// `--output-format stream-json` stream).
    ClaudeCode,
    /// Codex CLI rollout JSONL (`~/.codex/sessions/**/rollout-*.jsonl`).
    CodexRollout,
    /// `codex exec --json` event stream.
    CodexExec,
    /// Gemini CLI chat session (`~/.gemini/tmp/<project>/chats/session-*.json`, or
    /// `session-*.jsonl` from newer releases).
    GeminiCli,
    /// OpenAI chat-completions message arrays (`tool_calls` and `role: tool`).
    OpenaiChat,
    /// Anthropic Messages arrays (`tool_use` and `tool_result` blocks).
    AnthropicMessages,
    /// loopguard's own replay events (SPEC §7).
    Loopguard,
    /// SWE-agent `.traj` trajectory (0.x and 1.x).
    SweAgent,
    /// mini-swe-agent trajectory (`.traj.json`; tool-calling and text mode).
    MiniSweAgent,
    /// OpenHands events, V0 and V1 (software-agent-sdk), in every container: an event
    /// array, a state wrapper, an evaluation `output.jsonl`, a conversation directory.
    #[serde(rename = "openhands")]
    OpenHands,
    /// Per-call streams pulled out of OpenClaw sessions (`anchor-call-streams.json`).
    #[serde(rename = "openclaw-calls")]
    OpenClawCalls,
    /// aider chat history (`.aider.chat.history.md`, Markdown).
    Aider,
    /// Cline and Roo Code task history (`tasks/<id>/api_conversation_history.json`).
    Cline,
    /// Cline and Roo Code task UI log (`tasks/<id>/ui_messages.json`).
    ClineUi,
    /// Continue session (`~/.continue/sessions/<id>.json`).
    Continue,
    /// Goose session JSONL (`~/.local/share/goose/sessions/<id>.jsonl`).
    Goose,
    /// OpenCode session export (`opencode export <id>`).
    #[serde(rename = "opencode")]
    OpenCode,
}

impl Format {
    /// Every format, in the order `--help` lists them and detection tries them.
    pub const ALL: [Format; 18] = [
        Self::OpenClaw,
        Self::ClaudeCode,
        Self::CodexRollout,
        Self::CodexExec,
        Self::GeminiCli,
        Self::OpenaiChat,
        Self::AnthropicMessages,
        Self::Loopguard,
        Self::SweAgent,
        Self::MiniSweAgent,
        Self::OpenHands,
        Self::OpenClawCalls,
        Self::Aider,
        Self::Cline,
        Self::ClineUi,
        Self::Continue,
        Self::Goose,
        Self::OpenCode,
    ];

    /// The name used on the command line and in reports.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::OpenClaw => "openclaw",
            Self::ClaudeCode => "claude-code",
            Self::CodexRollout => "codex-rollout",
            Self::CodexExec => "codex-exec",
            Self::GeminiCli => "gemini-cli",
            Self::OpenaiChat => "openai-chat",
            Self::AnthropicMessages => "anthropic-messages",
            Self::Loopguard => "loopguard",
            Self::SweAgent => "swe-agent",
            Self::MiniSweAgent => "mini-swe-agent",
            Self::OpenHands => "openhands",
            Self::OpenClawCalls => "openclaw-calls",
            Self::Aider => "aider",
            Self::Cline => "cline",
            Self::ClineUi => "cline-ui",
            Self::Continue => "continue",
            Self::Goose => "goose",
            Self::OpenCode => "opencode",
        }
    }

    /// Every name, comma-separated (for messages).
    pub fn names() -> String {
        Self::ALL.map(Self::as_str).join(", ")
    }
}

impl fmt::Display for Format {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl FromStr for Format {
    type Err = Error;

    fn from_str(s: &str) -> Result<Self, Error> {
        Self::ALL
            .into_iter()
            .find(|f| f.as_str() == s)
            .ok_or_else(|| Error::UnknownFormat {
                name: s.to_owned(),
                known: Self::names(),
            })
    }
}

/// A file that belongs to a transcript without being one.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize)]
#[serde(rename_all = "kebab-case")]
#[non_exhaustive]
pub enum Companion {
    /// OpenClaw runtime trajectory sidecar (`<session>.trajectory.jsonl`): read for its run
    /// ids when its transcript is scanned.
    OpenClawTrajectory,
    /// OpenClaw pointer to a trajectory sidecar (`<session>.trajectory-path.json`).
    OpenClawTrajectoryPointer,
    /// OpenClaw session store (`sessions.json`).
    OpenClawSessionStore,
    /// Gemini CLI prompt log (`~/.gemini/tmp/<project>/logs.json`): the user's prompts
    /// only, no tool calls; the chats beside it are the transcripts.
    GeminiCliLogs,
    /// Cline or Roo Code UI log (`ui_messages.json`) beside its task's
    /// `api_conversation_history.json`, which is the transcript scanned.
    ClineUiMessages,
    /// Continue's index of its sessions (`~/.continue/sessions/sessions.json`).
    ContinueSessionIndex,
    /// Cline or Roo Code task metadata (`task_metadata.json`: files in context, models).
    ClineTaskMetadata,
    /// Cline or Roo Code context history (`context_history.json`: how the context window
    /// was trimmed).
    ClineContextHistory,
    /// aider's prompt history (`.aider.input.history`): the user's inputs only.
    AiderInputHistory,
}

impl Companion {
    /// The name used in reports.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::OpenClawTrajectory => "openclaw-trajectory",
            Self::OpenClawTrajectoryPointer => "openclaw-trajectory-pointer",
            Self::OpenClawSessionStore => "openclaw-session-store",
            Self::GeminiCliLogs => "gemini-cli-logs",
            Self::ClineUiMessages => "cline-ui-messages",
            Self::ContinueSessionIndex => "continue-session-index",
            Self::ClineTaskMetadata => "cline-task-metadata",
            Self::ClineContextHistory => "cline-context-history",
            Self::AiderInputHistory => "aider-input-history",
        }
    }
}

/// What a file is.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Detection {
    /// A transcript this crate reads.
    Transcript(Format),
    /// A file that accompanies transcripts.
    Companion(Companion),
    /// Nothing known; why.
    Unknown(String),
}

/// Lines of a JSON Lines prefix looked at: the first one whose shape is known decides.
const PROBE_LINES: usize = 64;

/// Detects the format of a file from its first bytes and its name.
///
/// JSON Lines are recognised by the first line, among the first 64, whose
/// shape is known: lines of record types detection does not know (a `permission-mode`
/// line, a type added by a newer version) are passed over rather than decide. Whole
/// documents are recognised by the keys near their root.
pub fn detect(prefix: &[u8], file_name: Option<&str>) -> Detection {
    let prefix = &prefix[..prefix.len().min(PREFIX_BYTES)];
    let text = skip_bom(prefix);
    let Some(start) = text.iter().position(|b| !b.is_ascii_whitespace()) else {
        return unknown("empty file");
    };
    let text = &text[start..];
    if text.contains(&0) {
        return unknown("binary data");
    }
    if is_aider_history(text) {
        return Detection::Transcript(Format::Aider);
    }
    if !matches!(text[0], b'{' | b'[') {
        return unknown("not JSON or JSON Lines");
    }
    let first_line = text.split(|&b| b == b'\n').next().unwrap_or(text);
    let trimmed = first_line.trim_ascii();
    if trimmed != b"{" && trimmed != b"[" {
        let lines = text
            .split(|&b| b == b'\n')
            .filter(|l| !l.trim_ascii().is_empty())
            .take(PROBE_LINES);
        for line in lines {
            if let Some(found) = by_shape(&Shape::of(line), text) {
                return found;
            }
        }
    }
    let shape = Shape::of(text);
    if let Some(found) = by_shape(&shape, text) {
        return found;
    }
    let name = file_name.unwrap_or("");
    if name.ends_with(".traj") {
        return Detection::Transcript(Format::SweAgent);
    }
    let keys: Vec<&str> = shape
        .keys
        .iter()
        .filter(|k| k.depth <= 2)
        .map(|k| k.name.as_str())
        .take(8)
        .collect();
    if keys.is_empty() {
        unknown("JSON of no known transcript shape")
    } else {
        unknown(&format!(
            "JSON of no known transcript shape (keys: {})",
            keys.join(", ")
        ))
    }
}

/// An aider chat history: Markdown with a line that starts a session
/// (`# aider chat started at …`) near the top.
fn is_aider_history(text: &[u8]) -> bool {
    let header = crate::readers::aider::SESSION_HEADER.as_bytes();
    text.split(|&b| b == b'\n')
        .take(PROBE_LINES * 4)
        .any(|line| line.starts_with(header))
}

/// An unknown file: why, and which readers detection tried.
fn unknown(why: &str) -> Detection {
    Detection::Unknown(format!(
        "{why}; tried every reader ({}); force one with --format NAME",
        Format::names()
    ))
}

fn skip_bom(bytes: &[u8]) -> &[u8] {
    bytes.strip_prefix(b"\xEF\xBB\xBF").unwrap_or(bytes)
}

/// The format of a value (a line of JSON Lines, or a whole document) from its shape;
/// `text` is the whole prefix (for the chat dialect, decided by markers anywhere in it).
fn by_shape(shape: &Shape, text: &[u8]) -> Option<Detection> {
    use Detection::{Companion as C, Transcript as T};
    if let Some(schema) = shape.value(1, "traceSchema") {
        return match schema {
            "openclaw-trajectory" => Some(C(Companion::OpenClawTrajectory)),
            "openclaw-trajectory-pointer" => Some(C(Companion::OpenClawTrajectoryPointer)),
            _ => None,
        };
    }
    match shape.root? {
        b'{' => by_object(shape, text),
        _ => {
            if shape.has(2, "sessionId") && shape.has(2, "messageId") && !shape.has(2, "role") {
                Some(C(Companion::GeminiCliLogs))
            } else if shape.has(2, "sessionId") && shape.has(2, "dateCreated") {
                Some(C(Companion::ContinueSessionIndex))
            } else if shape.has(2, "ts") && (shape.has(2, "say") || shape.has(2, "ask")) {
                Some(T(Format::ClineUi))
            } else if shape.has(2, "role") && cline_history(text) {
                Some(T(Format::Cline))
            } else if shape.has(2, "kind") && shape.has(2, "source")
                || shape.has(2, "source") && (shape.has(2, "observation") || shape.has(2, "action"))
            {
                Some(T(Format::OpenHands))
            } else if shape.has(2, "role") && mini_text_mode(text) {
                Some(T(Format::MiniSweAgent))
            } else if shape.has(2, "role")
                || shape.has(2, "traj")
                || shape.has(2, "messages")
                || shape.has(3, "role")
            {
                Some(T(chat_dialect(&Shape::of(text))))
            } else {
                None
            }
        }
    }
}

/// An object: a line of a JSON Lines format, or a document.
fn by_object(shape: &Shape, text: &[u8]) -> Option<Detection> {
    use Detection::{Companion as C, Transcript as T};
    let kind = shape.value(1, "type");
    let has = |k: &str| shape.has(1, k);
    match kind {
        Some("session") if has("id") => return Some(T(Format::OpenClaw)),
        Some("call" | "result" | "compaction") => return Some(T(Format::Loopguard)),
        Some(k)
            if ["thread.", "turn.", "item."]
                .iter()
                .any(|p| k.starts_with(p)) =>
        {
            return Some(T(Format::CodexExec))
        }
        Some("session_meta" | "response_item" | "event_msg" | "turn_context" | "compacted")
            if has("payload") =>
        {
            return Some(T(Format::CodexRollout))
        }
        // Claude Code: every record type (known or not) carries `sessionId` or the
        // message tree's `uuid`; stream-json records carry `session_id`.
        Some(_)
            if ["sessionId", "uuid", "leafUuid", "operation"]
                .iter()
                .any(|k| has(k))
                || (has("messageId") && has("snapshot"))
                || (has("session_id")
                    && matches!(kind, Some("system" | "user" | "assistant" | "result"))) =>
        {
            return Some(T(Format::ClaudeCode))
        }
        _ => {}
    }
    if has("trajectory") {
        return Some(T(Format::SweAgent));
    }
    if goose_line(shape) {
        return Some(T(Format::Goose));
    }
    if has("info") && has("messages") && (shape.has(3, "parts") || shape.has(2, "projectID")) {
        return Some(T(Format::OpenCode));
    }
    if has("sessionID") && (has("messageID") || has("role")) {
        return Some(Detection::Unknown(
            "one message or part of an OpenCode session from its storage directory, not a \
             transcript by itself; `opencode export <session id>` writes the whole session \
             as one file this reads (format opencode)"
                .into(),
        ));
    }
    if has("sessionId") && has("history") && (has("workspaceDirectory") || has("title")) {
        return Some(T(Format::Continue));
    }
    if has("files_in_context") || (has("model_usage") && has("environment_history")) {
        return Some(C(Companion::ClineTaskMetadata));
    }
    let mini = shape
        .value(1, "trajectory_format")
        .is_some_and(|f| f.starts_with("mini-swe-agent"))
        || shape.has(2, "mini_version");
    if mini {
        return Some(T(Format::MiniSweAgent));
    }
    // The document, or the first line of the JSON Lines form (no messages in it).
    let gemini = has("sessionId")
        && (has("projectHash") || has("messages") && (has("startTime") || has("lastUpdated")))
        || shape.value(3, "type") == Some("gemini");
    if gemini {
        return Some(T(Format::GeminiCli));
    }
    let openhands_instance = has("history")
        && [
            "instance_id",
            "question_id",
            "instruction",
            "num_events",
            "test_result",
        ]
        .iter()
        .any(|k| has(k));
    let openhands_event = (has("kind") && (has("source") || has("id")))
        || (has("source") && (has("action") || has("observation")));
    if openhands_instance || openhands_event {
        return Some(T(Format::OpenHands));
    }
    if has("role") || has("messages") || has("traj") {
        return Some(T(chat_dialect(&Shape::of(text))));
    }
    if shape.has(2, "calls") && (shape.has(2, "runId") || shape.has(2, "session_id")) {
        Some(T(Format::OpenClawCalls))
    } else if shape.has(2, "sessionId") && shape.has(2, "updatedAt") {
        Some(C(Companion::OpenClawSessionStore))
    } else {
        None
    }
}

/// A line of a goose session: its first line (the session's metadata: `working_dir`,
/// `message_count`, …) or a message (`role`, `created`, and content blocks of goose's own
/// types or goose's `userVisible` metadata).
fn goose_line(shape: &Shape) -> bool {
    let metadata = shape.has(1, "working_dir")
        && (shape.has(1, "message_count") || shape.has(1, "description"));
    let message = shape.has(1, "role")
        && shape.has(1, "created")
        && (shape.keys.iter().any(|k| {
            k.depth == 3
                && k.name == "type"
                && matches!(
                    k.value.as_deref(),
                    Some("toolRequest" | "toolResponse" | "toolConfirmationRequest")
                )
        }) || shape.has(2, "userVisible"));
    metadata || message
}

/// Cline and Roo Code messages: their user messages carry the editor's state in an
/// `<environment_details>` block, and tool results as `[tool for '…'] Result:` text.
fn cline_history(text: &[u8]) -> bool {
    let has = |needle: &[u8]| memchr::memmem::find(text, needle).is_some();
    has(b"<environment_details>") || (has(b"<task>") && has(b"] Result:"))
}

/// A bare message list of mini-swe-agent's text mode: its answers carry the command in a
/// ```` ```mswea_bash_command ```` block and the observations start with a
/// `<returncode>` tag, and no message has tool calls.
fn mini_text_mode(text: &[u8]) -> bool {
    let has = |needle: &[u8]| memchr::memmem::find(text, needle).is_some();
    has(b"```mswea_bash_command") && has(b"<returncode>") && !has(b"\"tool_calls\"")
}

/// OpenAI or Anthropic, by the tool-call markers in the messages seen.
fn chat_dialect(shape: &Shape) -> Format {
    let openai = shape.keys.iter().any(|k| {
        matches!(
            k.name.as_str(),
            "tool_calls" | "tool_call_id" | "function_call"
        ) || (k.name == "role" && matches!(k.value.as_deref(), Some("tool" | "function")))
    });
    let anthropic = shape.keys.iter().any(|k| {
        k.name == "type" && matches!(k.value.as_deref(), Some("tool_use" | "tool_result"))
    });
    if anthropic && !openai {
        Format::AnthropicMessages
    } else {
        Format::OpenaiChat
    }
}

/// The keys (and short string values) of a JSON text, possibly cut off, by depth.
#[derive(Debug, Default)]
struct Shape {
    root: Option<u8>,
    keys: Vec<Key>,
}

#[derive(Debug)]
struct Key {
    depth: usize,
    name: String,
    value: Option<String>,
}

/// Keys kept by [`Shape::of`].
const MAX_KEYS: usize = 4096;
/// Deepest keys kept.
const MAX_DEPTH: usize = 6;

impl Shape {
    fn has(&self, depth: usize, name: &str) -> bool {
        self.keys.iter().any(|k| k.depth == depth && k.name == name)
    }

    fn value(&self, depth: usize, name: &str) -> Option<&str> {
        self.keys
            .iter()
            .find(|k| k.depth == depth && k.name == name)
            .and_then(|k| k.value.as_deref())
    }

    /// Scans `text` token by token (no recursion: a stack of open containers).
    fn of(text: &[u8]) -> Self {
        let mut shape = Shape::default();
        let mut stack: Vec<u8> = Vec::new();
        let mut expect_key = false;
        let mut pending: Option<String> = None;
        let mut i = 0;
        while i < text.len() && shape.keys.len() < MAX_KEYS {
            let b = text[i];
            match b {
                b'"' => {
                    let start = i + 1;
                    let mut j = start;
                    while j < text.len() && text[j] != b'"' {
                        j += if text[j] == b'\\' { 2 } else { 1 };
                    }
                    let end = j.min(text.len());
                    let s = String::from_utf8_lossy(&text[start..end]);
                    if expect_key && stack.last() == Some(&b'{') {
                        pending = Some(s.into_owned());
                        expect_key = false;
                    } else if let Some(name) = pending.take() {
                        let value = s.chars().take(64).collect();
                        shape.push(stack.len(), name, Some(value));
                    }
                    i = j + 1;
                    continue;
                }
                b'{' | b'[' => {
                    if shape.root.is_none() && stack.is_empty() {
                        shape.root = Some(b);
                    }
                    if let Some(name) = pending.take() {
                        shape.push(stack.len(), name, None);
                    }
                    stack.push(b);
                    expect_key = b == b'{';
                }
                b'}' | b']' => {
                    stack.pop();
                    expect_key = false;
                    if stack.is_empty() && shape.root.is_some() {
                        // One complete value: whatever follows is another document or line.
                        break;
                    }
                }
                b',' => expect_key = stack.last() == Some(&b'{'),
                b':' => {}
                _ if b.is_ascii_whitespace() => {}
                _ => {
                    if let Some(name) = pending.take() {
                        shape.push(stack.len(), name, None);
                    }
                    while i < text.len() && !matches!(text[i], b',' | b'}' | b']') {
                        i += 1;
                    }
                    continue;
                }
            }
            i += 1;
        }
        shape
    }

    fn push(&mut self, depth: usize, name: String, value: Option<String>) {
        if depth <= MAX_DEPTH {
            self.keys.push(Key { depth, name, value });
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn t(text: &str) -> Detection {
        detect(text.as_bytes(), None)
    }

    fn format(text: &str) -> Format {
        match t(text) {
            Detection::Transcript(f) => f,
            other => panic!("{text}: {other:?}"),
        }
    }

    #[test]
    fn line_formats() {
        assert_eq!(
            format("{\"type\":\"session\",\"version\":3,\"id\":\"x\"}\n{}"),
            Format::OpenClaw
        );
        assert_eq!(
            format("{\"type\":\"call\",\"tool\":\"read\"}\n"),
            Format::Loopguard
        );
        assert_eq!(
            format("{\"type\":\"thread.started\",\"thread_id\":\"t\"}\n"),
            Format::CodexExec
        );
        assert_eq!(
            format("{\"timestamp\":\"t\",\"type\":\"session_meta\",\"payload\":{\"id\":\"x\"}}\n"),
            Format::CodexRollout
        );
        assert_eq!(
            format("{\"type\":\"summary\",\"summary\":\"s\",\"leafUuid\":\"u\"}\n"),
            Format::ClaudeCode
        );
        assert_eq!(
            format("{\"parentUuid\":null,\"isSidechain\":false,\"type\":\"user\",\"message\":{},\"uuid\":\"u\",\"sessionId\":\"s\"}\n"),
            Format::ClaudeCode
        );
        assert_eq!(
            format("{\"role\":\"user\",\"content\":\"hi\"}\n{\"role\":\"assistant\",\"tool_calls\":[]}\n"),
            Format::OpenaiChat
        );
        assert_eq!(
            format("{\"role\":\"assistant\",\"content\":[{\"type\":\"tool_use\",\"id\":\"t\"}]}\n"),
            Format::AnthropicMessages
        );
        assert_eq!(
            t("{\"traceSchema\":\"openclaw-trajectory\",\"type\":\"session.started\"}\n"),
            Detection::Companion(Companion::OpenClawTrajectory)
        );
    }

    #[test]
    fn json_lines_look_past_record_types_they_do_not_know() {
        // Claude Code: a first line of a type added later, then the usual ones.
        assert_eq!(
            format(concat!(
                "{\"type\":\"permission-mode\",\"permissionMode\":\"default\",\"sessionId\":\"s\"}\n",
                "{\"type\":\"user\",\"uuid\":\"u\",\"message\":{}}\n"
            )),
            Format::ClaudeCode
        );
        // Any line shape detection does not know is passed over.
        assert_eq!(
            format(concat!(
                "{\"note\":\"written by a wrapper\"}\n",
                "{\"timestamp\":\"t\",\"type\":\"session_meta\",\"payload\":{\"id\":\"x\"}}\n"
            )),
            Format::CodexRollout
        );
        // stream-json.
        assert_eq!(
            format(
                "{\"type\":\"system\",\"subtype\":\"init\",\"session_id\":\"s\",\"tools\":[]}\n"
            ),
            Format::ClaudeCode
        );
        // Evaluation output, one instance per line (V1 events, or V0 pairs).
        assert_eq!(
            format("{\"instance_id\":\"i\",\"test_result\":{},\"history\":[{\"kind\":\"ActionEvent\"}]}\n"),
            Format::OpenHands
        );
        assert_eq!(
            format(
                "{\"question_id\":1,\"text\":\"t\",\"history\":[[{\"action\":\"message\"},{}]]}\n"
            ),
            Format::OpenHands
        );
    }

    #[test]
    fn document_formats() {
        assert_eq!(
            format("{\n \"environment\": \"x\",\n \"trajectory\": [\n"),
            Format::SweAgent
        );
        assert_eq!(
            format("[\n {\n  \"id\": 0,\n  \"source\": \"user\",\n  \"action\": \"message\""),
            Format::OpenHands
        );
        assert_eq!(
            format("[\n {\"task_id\": 0, \"traj\": [{\"role\": \"user\"}, {\"role\": \"tool\"}]}]"),
            Format::OpenaiChat
        );
        assert_eq!(
            format(
                "{\n \"P1\": {\n  \"session_id\": \"s\",\n  \"runId\": \"r\",\n  \"calls\": []}}"
            ),
            Format::OpenClawCalls
        );
        assert_eq!(
            format("{\n \"model\": \"m\",\n \"messages\": [{\"role\": \"user\", \"content\": [{\"type\": \"tool_result\"}]}]}"),
            Format::AnthropicMessages
        );
        assert_eq!(
            t("{\n \"agent:main\": {\"sessionId\": \"s\", \"updatedAt\": 1}}"),
            Detection::Companion(Companion::OpenClawSessionStore)
        );
        assert_eq!(
            t("[\n  {\n    \"sessionId\": \"s\",\n    \"messageId\": 0,\n    \"type\": \"user\",\n    \"message\": \"hi\""),
            Detection::Companion(Companion::GeminiCliLogs)
        );
        assert_eq!(
            detect(b"{\n \"x\": 1", Some("a.traj")),
            Detection::Transcript(Format::SweAgent)
        );
        assert_eq!(
            format("{\n \"info\": {\n  \"model_stats\": {},\n  \"mini_version\": \"2.2.7\"},\n \"messages\": [{\"role\": \"system\"}, {\"role\": \"assistant\", \"tool_calls\": []}]"),
            Format::MiniSweAgent
        );
        assert_eq!(
            format("{\"info\": {}, \"messages\": [], \"trajectory_format\": \"mini-swe-agent-1\"}"),
            Format::MiniSweAgent
        );
        assert_eq!(
            format("{\n  \"sessionId\": \"s\",\n  \"projectHash\": \"h\",\n  \"messages\": [\n    {\"id\": \"m\", \"type\": \"user\""),
            Format::GeminiCli
        );
        // Newer releases: JSON Lines, a first line without messages.
        assert_eq!(
            format("{\"sessionId\":\"s\",\"projectHash\":\"h\",\"startTime\":\"t\",\"lastUpdated\":\"t\",\"kind\":\"main\"}\n{\"$set\":{\"lastUpdated\":\"t\"}}\n"),
            Format::GeminiCli
        );
        assert_eq!(
            format("{\"instance_id\": \"x\", \"history\": [{\"kind\": \"ActionEvent\", \"id\": \"a\"}], \"num_events\": 1}"),
            Format::OpenHands
        );
        assert_eq!(
            format("[\n {\"kind\": \"SystemPromptEvent\", \"id\": \"x\", \"source\": \"agent\"}"),
            Format::OpenHands
        );
        assert_eq!(
            format("{\n  \"kind\": \"ObservationEvent\",\n  \"id\": \"x\",\n  \"source\": \"environment\""),
            Format::OpenHands
        );
    }

    #[test]
    fn goose_and_opencode() {
        assert_eq!(
            format("{\"working_dir\":\"/p\",\"description\":\"d\",\"schedule_id\":null,\"message_count\":2}\n{\"role\":\"user\"}\n"),
            Format::Goose
        );
        assert_eq!(
            format("{\"id\":\"m\",\"role\":\"assistant\",\"created\":1,\"content\":[{\"type\":\"toolRequest\",\"id\":\"t\"}]}\n"),
            Format::Goose
        );
        assert_eq!(
            format("{\"role\":\"user\",\"created\":1,\"content\":[{\"type\":\"text\",\"text\":\"hi\"}],\"metadata\":{\"userVisible\":true}}\n"),
            Format::Goose
        );
        assert_eq!(
            format("{\n  \"info\": {\"id\": \"ses_1\", \"projectID\": \"p\"},\n  \"messages\": [{\"info\": {\"role\": \"user\"}, \"parts\": []}]}"),
            Format::OpenCode
        );
        match t(
            "{\"id\":\"prt_1\",\"sessionID\":\"ses_1\",\"messageID\":\"msg_1\",\"type\":\"tool\"}",
        ) {
            Detection::Unknown(why) => assert!(why.contains("opencode export"), "{why}"),
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn unknown_files_say_why() {
        for (text, why) in [
            ("", "empty"),
            ("   \n", "empty"),
            ("hello", "not JSON"),
            ("\0\0{", "binary"),
            (
                "{\n \"P1\": {\"firstWarning\": {}}}",
                "keys: P1, firstWarning",
            ),
        ] {
            match t(text) {
                Detection::Unknown(reason) => {
                    assert!(reason.contains(why), "{text}: {reason}");
                    assert!(
                        reason.contains("tried every reader (openclaw, claude-code,")
                            && reason.contains("--format"),
                        "{reason}"
                    );
                }
                other => panic!("{text}: {other:?}"),
            }
        }
    }

    #[test]
    fn names_round_trip() {
        for f in Format::ALL {
            assert_eq!(f.as_str().parse::<Format>().unwrap(), f);
            assert_eq!(serde_json::to_value(f).unwrap(), f.as_str());
        }
        assert!("nope"
            .parse::<Format>()
            .unwrap_err()
            .to_string()
            .contains("openclaw"));
    }
}
