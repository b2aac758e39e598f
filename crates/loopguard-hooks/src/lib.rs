//! # loopguard-hooks
//!
//! Coding agents (Claude Code, Codex CLI, Gemini CLI) run an external command before and
//! after each tool call, at each user prompt, around compactions and at the start and end
//! of a session, with the event as JSON on stdin; the command answers on stdout and with
//! its exit status. This crate speaks those protocols for the loopguard engine, so that
//! one line of configuration puts loop protection into an agent:
//!
//! ```
//! use loopguard::Millis;
//! use loopguard_hooks::{handle, Agent, Options};
//!
//! let dir = tempfile::tempdir()?;
//! let options = Options::new(dir.path().join("loopguard.db"));
//! let input = br#"{"session_id":"s1","hook_event_name":"PreToolUse","tool_name":"Read",
//!                  "tool_input":{"file_path":"/tmp/a"},"tool_use_id":"toolu_1"}"#;
//! let response = handle(Agent::ClaudeCode, input, &options, Millis::new(1_700_000_000_000));
//! assert_eq!(response.exit_code, 0);
//! assert_eq!(response.stdout, ""); // allowed: nothing to say
//! # Ok::<(), std::io::Error>(())
//! ```
//!
//! Every invocation is a separate, short process: the state of each (session, run) lives
//! in the SQLite file that `loopguard serve` uses ([`store`]), read and written in one
//! transaction. The shared [`mapping`] turns every agent's events into the same engine
//! operations; [`claude_code`], [`codex`] and [`gemini`] read each agent's payloads and
//! write its answers; [`outcome`] reshapes tool responses into results the engine can
//! fingerprint.
//!
//! Failures fail open: input that is not a payload, a config that cannot be read, a
//! database that cannot be opened all exit with status 1 and one line on stderr, which
//! every one of these agents treats as a non-blocking hook error (the call goes ahead).
//! Status 2, which the agents read as "block" (with stderr as the reason), is used only
//! when a decision to block a call cannot be written on stdout ([`Response::deliver`]):
//! a deny is never lost.

#![forbid(unsafe_code)]
#![warn(missing_docs)]

pub mod claude_code;
pub mod codex;
pub mod gemini;
pub mod install;
pub mod mapping;
pub mod outcome;
pub mod payload;
pub mod store;
pub mod transcript;

use std::io::Write;
use std::path::PathBuf;

use loopguard::fingerprint::bytes_stand_in;
use loopguard::Millis;
use loopguard_config::Defaults;
use loopguard_events::{is_readable_part, MAX_COST_PER_BODY_BYTE, MAX_PART_COST};

use serde_json::Value;

use crate::mapping::{apply, HookEvent, NoteDelivery, Origin};
use crate::payload::PayloadError;
use crate::store::{DbOptions, HookDb};

/// Exit status of a hook that did its job (whatever it decided).
pub const EXIT_OK: u8 = 0;
/// Exit status of a hook that failed (a non-blocking error for every agent: fail open).
pub const EXIT_FAILED: u8 = 1;
/// Exit status that blocks the call with stderr as the reason, for every agent: used only
/// when a deny cannot be written on stdout.
pub const EXIT_BLOCK: u8 = 2;

/// Largest payload read from stdin (64 MiB); a larger one is refused (fail open).
pub const MAX_INPUT_BYTES: u64 = 64 << 20;

/// An agent whose hook protocol this crate speaks.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum Agent {
    /// Anthropic's Claude Code.
    ClaudeCode,
    /// OpenAI's Codex CLI.
    Codex,
    /// Google's Gemini CLI.
    Gemini,
}

impl Agent {
    /// Every agent.
    pub const ALL: [Agent; 3] = [Agent::ClaudeCode, Agent::Codex, Agent::Gemini];

    /// The name used on the command line (`claude-code`, `codex`, `gemini`).
    pub fn name(self) -> &'static str {
        match self {
            Self::ClaudeCode => "claude-code",
            Self::Codex => "codex",
            Self::Gemini => "gemini",
        }
    }

    /// The agent named `name` on the command line.
    pub fn from_name(name: &str) -> Option<Self> {
        Self::ALL.into_iter().find(|a| a.name() == name)
    }

    /// The settings file the snippet of [`Agent::settings_snippet`] goes into.
    pub fn settings_file(self) -> &'static str {
        match self {
            Self::ClaudeCode => claude_code::SETTINGS_FILE,
            Self::Codex => codex::SETTINGS_FILE,
            Self::Gemini => gemini::SETTINGS_FILE,
        }
    }

    /// The hook events the snippet registers.
    pub fn events(self) -> &'static [&'static str] {
        match self {
            Self::ClaudeCode => claude_code::EVENTS,
            Self::Codex => codex::EVENTS,
            Self::Gemini => gemini::EVENTS,
        }
    }

    /// The JSON to merge into the agent's settings file so that it runs `command` (a shell
    /// command line) for every event loopguard handles.
    pub fn settings_snippet(self, command: &str) -> String {
        match self {
            Self::ClaudeCode => claude_code::settings(command),
            Self::Codex => codex::settings(command),
            Self::Gemini => gemini::settings(command),
        }
    }

    /// The fields of loopguard's hook entry besides `type` and `command`.
    pub(crate) fn handler(self) -> &'static [(&'static str, HandlerField)] {
        match self {
            Self::ClaudeCode => claude_code::HANDLER,
            Self::Codex => codex::HANDLER,
            Self::Gemini => gemini::HANDLER,
        }
    }

    fn parse(self, payload: &Value) -> Result<(Origin, HookEvent), PayloadError> {
        match self {
            Self::ClaudeCode => claude_code::parse(payload),
            Self::Codex => codex::parse(payload),
            Self::Gemini => gemini::parse(payload),
        }
    }

    fn delivery(self) -> NoteDelivery {
        match self {
            Self::ClaudeCode => claude_code::DELIVERY,
            Self::Codex => codex::DELIVERY,
            Self::Gemini => gemini::DELIVERY,
        }
    }

    fn render(self, payload: &Value, event: &HookEvent, reaction: &mapping::Reaction) -> String {
        match self {
            Self::ClaudeCode => {
                let name = payload
                    .get("hook_event_name")
                    .and_then(Value::as_str)
                    .unwrap_or_default();
                claude_code::render(name, event, reaction)
            }
            Self::Codex => codex::render(event, reaction),
            Self::Gemini => gemini::render(event, reaction),
        }
    }

    /// What the agent reads on stdout when the hook has nothing to say.
    fn nothing(self) -> &'static str {
        match self {
            Self::Gemini => "{}",
            Self::ClaudeCode | Self::Codex => "",
        }
    }
}

/// Where a hook keeps its state and which config applies.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Options {
    /// The SQLite database file.
    pub db: PathBuf,
    /// A config document (JSON5, OpenClaw style), read at every event that reaches the
    /// engine; `None`: [`Defaults::Live`], detection on with the default thresholds
    /// (whoever installs the hook wants protection).
    pub config: Option<PathBuf>,
    /// The agent id whose config applies when the payload names none.
    pub agent: Option<String>,
    /// How the database file is used.
    pub db_options: DbOptions,
}

impl Options {
    /// State in `db`, the default config.
    pub fn new(db: PathBuf) -> Self {
        Self {
            db,
            config: None,
            agent: None,
            db_options: DbOptions::default(),
        }
    }
}

/// What the hook process prints and how it exits.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Response {
    /// For stdout (the decision, in the agent's protocol; empty or `{}` for none).
    pub stdout: String,
    /// For stderr (diagnostics; agents show it to the user at most).
    pub stderr: String,
    /// The exit status.
    pub exit_code: u8,
    /// When the decision blocks the call: the reason the model reads. If stdout cannot
    /// take the decision, the hook blocks with exit status 2 and this on stderr instead.
    pub deny_reason: Option<String>,
}

impl Response {
    /// Writes the response and returns the exit status. A decision stdout cannot take is
    /// not lost: a deny becomes exit status 2 with its reason on stderr (which blocks the
    /// call for every agent), anything else exit status 1.
    pub fn deliver(&self, mut stdout: impl Write, mut stderr: impl Write) -> u8 {
        let written = stdout
            .write_all(self.stdout.as_bytes())
            .and_then(|()| stdout.flush());
        let (extra, code) = match (written, &self.deny_reason) {
            (Ok(()), _) => (String::new(), self.exit_code),
            (Err(e), Some(reason)) => (
                format!("{reason}\n(loopguard could not write its decision on stdout: {e}; blocked by exit status)\n"),
                EXIT_BLOCK,
            ),
            (Err(e), None) => (
                format!("loopguard hook: cannot write the decision on stdout: {e}\n"),
                EXIT_FAILED,
            ),
        };
        let _ = stderr
            .write_all(self.stderr.as_bytes())
            .and_then(|()| stderr.write_all(extra.as_bytes()))
            .and_then(|()| stderr.flush());
        code
    }

    fn ignored(agent: Agent, event: &str) -> Self {
        Self {
            stdout: agent.nothing().to_owned(),
            stderr: format!(
                "loopguard hook {}: ignoring event {event:?}, which loopguard does not use\n",
                agent.name()
            ),
            exit_code: EXIT_OK,
            deny_reason: None,
        }
    }

    /// A failure: every line of `message` (a config has one problem per line) on a line
    /// of its own, each naming the hook.
    fn failed(agent: Agent, message: &str) -> Self {
        Self {
            stdout: String::new(),
            stderr: message
                .lines()
                .map(|line| format!("loopguard hook {}: {line}\n", agent.name()))
                .collect(),
            exit_code: EXIT_FAILED,
            deny_reason: None,
        }
    }
}

/// Handles one hook invocation: `input` is what the agent wrote on stdin, `now` the clock
/// time in Unix milliseconds.
pub fn handle(agent: Agent, input: &[u8], options: &Options, now: Millis) -> Response {
    let (payload, raw_parts) = match read_payload(input) {
        Ok(read) => read,
        Err(e) => {
            return Response::failed(agent, &format!("stdin is not a JSON hook payload: {e}"))
        }
    };
    let (origin, mut event) = match agent.parse(&payload) {
        Ok(parsed) => parsed,
        Err(PayloadError::Unsupported(name)) => return Response::ignored(agent, &name),
        Err(PayloadError::Invalid(message)) => return Response::failed(agent, &message),
    };
    raw_parts.patch(&mut event);
    // The config is read only for events that reach the engine. An event that needs it
    // only to read the transcript goes on without (its run boundary is not lost).
    let reads_tail = origin.transcript.is_some() && event.reads_tail();
    let mut early_warnings = String::new();
    let config = if event.needs_config() || reads_tail {
        match loopguard_config::load(options.config.as_deref(), Defaults::Live) {
            Ok(config) => Some(config),
            Err(e) if event.needs_config() => return Response::failed(agent, &e.to_string()),
            Err(e) => {
                early_warnings = Response::failed(agent, &e.to_string()).stderr;
                None
            }
        }
    } else {
        None
    };
    let result = HookDb::open_with(&options.db, options.db_options).and_then(|mut db| {
        let mut tx = db.begin(now)?;
        let reaction = apply(
            &mut tx,
            config.as_ref(),
            options.agent.as_deref(),
            &origin,
            &event,
            agent.delivery(),
        )?;
        let warnings: String = early_warnings
            + &tx
                .warnings()
                .iter()
                .map(|w| format!("loopguard hook {}: {w}\n", agent.name()))
                .collect::<String>();
        tx.commit()?;
        // Best effort: a WAL left large is folded by a later hook.
        let _ = db.fold_wal();
        Ok((reaction, warnings))
    });
    match result {
        Ok((reaction, warnings)) => {
            let mut stdout = agent.render(&payload, &event, &reaction);
            if stdout.is_empty() {
                stdout = agent.nothing().to_owned();
            }
            let deny_reason = match &reaction {
                mapping::Reaction::Block { message, .. } => Some(message.clone()),
                _ => None,
            };
            Response {
                stdout,
                stderr: warnings,
                exit_code: EXIT_OK,
                deny_reason,
            }
        }
        Err(e) => Response::failed(agent, &e.to_string()),
    }
}

/// Payloads up to this size are read whole into values: the most that can cost is
/// [`MAX_PART_COST`] (a payload is the call's parts and a few ids).
const READ_WHOLE_BELOW: usize = MAX_PART_COST / MAX_COST_PER_BODY_BYTE;

/// The payload as a `Value`, and the call's JSON that a `Value` cannot or should not hold.
/// A small payload is parsed whole. A larger one is read member by member, each member's
/// text borrowed from the input: a part of the call (`tool_input`, `tool_response`,
/// `error`) whose reading could take more than [`MAX_PART_COST`] is known by its bytes
/// ([`loopguard::fingerprint::bytes_stand_in`]), so that a 50 MB tool response costs
/// about its own size, not a value tree of a hundred times that.
fn read_payload(input: &[u8]) -> Result<(Value, RawParts), serde_json::Error> {
    if input.len() >= READ_WHOLE_BELOW {
        if let Some(read) = RawParts::read_members(input) {
            return Ok(read);
        }
    }
    match serde_json::from_slice::<Value>(input) {
        Ok(v) => Ok((v, RawParts::default())),
        Err(e) => RawParts::read(input).ok_or(e),
    }
}

/// A field of loopguard's hook entry in an agent's settings, besides `type` and `command`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum HandlerField {
    /// A number (a timeout).
    Number(u64),
    /// A string (a name).
    Text(&'static str),
}

impl HandlerField {
    fn to_json(self) -> Value {
        match self {
            Self::Number(n) => n.into(),
            Self::Text(s) => s.into(),
        }
    }
}

/// The call's JSON in a payload that a `Value` cannot hold in full (a number beyond the
/// double range, a lone surrogate escape, nesting past 128 levels: valid JSON an agent
/// may send): `tool_input`, `tool_response` and `error` as canonical text, so that such
/// calls are fingerprinted like any other instead of failing the hook (which would let
/// them run unchecked). A response read this way is hashed as it is, without the agent's
/// reshaping ([`outcome`]).
#[derive(Debug, Default)]
struct RawParts {
    tool_input: Option<String>,
    tool_response: Option<String>,
    error: Option<String>,
    has_error: bool,
}

impl RawParts {
    /// The payload as a `Value` with placeholders where the call's JSON does not fit one,
    /// and that JSON; `None` when the input is not JSON or other fields do not fit.
    fn read(input: &[u8]) -> Option<(Value, Self)> {
        use loopguard::json::{Json, Tape};
        let mut tape = Tape::new();
        let root = tape.parse(std::str::from_utf8(input).ok()?).ok()?;
        let mut map = serde_json::Map::new();
        let mut parts = Self::default();
        for (key, value) in root.as_object()?.members() {
            let key = key.as_str()?;
            parts.has_error |= key == "error";
            let slot = match key {
                "tool_input" => &mut parts.tool_input,
                "tool_response" => &mut parts.tool_response,
                "error" => &mut parts.error,
                "llm_request" => {
                    // As in `read_members`: only the model of the conversation.
                    let model = value
                        .as_object()
                        .and_then(|o| o.members().find(|(k, _)| k.as_str() == Some("model")))
                        .and_then(|(_, m)| m.to_value());
                    map.insert(key.to_owned(), serde_json::json!({ "model": model }));
                    continue;
                }
                _ => {
                    map.insert(key.to_owned(), value.to_value()?);
                    continue;
                }
            };
            match value.to_value() {
                Some(v) => {
                    *slot = None;
                    map.insert(key.to_owned(), v);
                }
                None => {
                    *slot = Some(loopguard::canonical::json_text(value));
                    let placeholder = match key {
                        "tool_input" => Value::Object(serde_json::Map::new()),
                        _ => Value::Null,
                    };
                    map.insert(key.to_owned(), placeholder);
                }
            }
        }
        Some((Value::Object(map), parts))
    }

    /// The payload member by member, each member's text borrowed from `input` (no value
    /// tree of the whole): the call's parts as [`RawParts::read`] keeps them, or by their
    /// bytes when reading them could take more than [`MAX_PART_COST`]. `None` when the
    /// input is not a JSON object `serde_json` reads (non-finite literals, say): the caller
    /// reads it otherwise.
    fn read_members(input: &[u8]) -> Option<(Value, Self)> {
        use std::collections::BTreeMap;

        use serde_json::value::RawValue;
        let members: BTreeMap<String, &RawValue> = serde_json::from_slice(input).ok()?;
        let mut map = serde_json::Map::new();
        let mut parts = Self::default();
        for (key, raw) in members {
            let text = raw.get();
            parts.has_error |= key == "error";
            let slot = match key.as_str() {
                "tool_input" => &mut parts.tool_input,
                "tool_response" => &mut parts.tool_response,
                "error" => &mut parts.error,
                "llm_request" => {
                    // Gemini CLI's whole conversation so far, at every chunk of an answer:
                    // the hook reads only its model, so it is not made a value tree.
                    let request: BTreeMap<String, &RawValue> =
                        serde_json::from_str(text).unwrap_or_default();
                    let model = request
                        .get("model")
                        .and_then(|m| serde_json::from_str::<Value>(m.get()).ok());
                    map.insert(key, serde_json::json!({ "model": model }));
                    continue;
                }
                _ => {
                    map.insert(key, serde_json::from_str(text).ok()?);
                    continue;
                }
            };
            let value = is_readable_part(text.as_bytes())
                .then(|| serde_json::from_str::<Value>(text).ok())
                .flatten();
            match value {
                Some(v) => {
                    map.insert(key, v);
                }
                None => {
                    *slot = Some(if is_readable_part(text.as_bytes()) {
                        // Valid JSON a `Value` cannot hold: its canonical text.
                        let mut tape = loopguard::json::Tape::new();
                        loopguard::canonical::json_text(tape.parse(text).ok()?)
                    } else {
                        Value::String(bytes_stand_in(text.as_bytes())).to_string()
                    });
                    let placeholder = match key.as_str() {
                        "tool_input" => Value::Object(serde_json::Map::new()),
                        _ => Value::Null,
                    };
                    map.insert(key, placeholder);
                }
            }
        }
        Some((Value::Object(map), parts))
    }

    /// Puts the JSON back into the event the agent module read.
    fn patch(self, event: &mut HookEvent) {
        use crate::mapping::{Json, Outcome};
        let (call, outcome) = match event {
            HookEvent::ToolCall(call) => (call, None),
            HookEvent::ToolResult { call, outcome } => (call, Some(outcome)),
            _ => return,
        };
        if let Some(text) = self.tool_input {
            call.args = Json::Text(text);
        }
        match outcome {
            Some(Outcome::Error(json)) => {
                let from_response = self.tool_response.filter(|_| !self.has_error);
                if let Some(text) = self.error.or(from_response) {
                    *json = Json::Text(text);
                }
            }
            Some(Outcome::Result(json)) => {
                if let Some(text) = self.tool_response {
                    *json = Json::Text(text);
                }
            }
            _ => {}
        }
    }
}

/// A settings snippet: `{"hooks": {EVENT: [{"hooks": [{"type": "command", "command":
/// COMMAND, FIELDS}]}], …}}`, events in the order given.
fn snippet(events: &[&str], command: &str, fields: &[(&str, HandlerField)]) -> String {
    let command = Value::String(command.to_owned()).to_string();
    let extra = fields
        .iter()
        .map(|(k, v)| format!("\"{k}\": {}", v.to_json()))
        .collect::<Vec<_>>()
        .join(", ");
    let entries: Vec<String> = events
        .iter()
        .map(|event| {
            format!(
                "    \"{event}\": [\n      {{ \"hooks\": [{{ \"type\": \"command\", \"command\": {command}, {extra} }}] }}\n    ]"
            )
        })
        .collect();
    format!("{{\n  \"hooks\": {{\n{}\n  }}\n}}\n", entries.join(",\n"))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn options(dir: &tempfile::TempDir) -> Options {
        Options::new(dir.path().join("lg.db"))
    }

    #[test]
    fn garbage_fails_open_without_touching_the_database() {
        let dir = tempfile::tempdir().unwrap();
        for agent in Agent::ALL {
            for input in [
                &b""[..],
                b"not json",
                b"[1,2]",
                b"{\"session_id\":\"s\"}",
                b"\xff\xfe",
            ] {
                let r = handle(agent, input, &options(&dir), Millis::new(1));
                assert_eq!(r.exit_code, EXIT_FAILED, "{agent:?} {input:?}");
                assert_eq!(r.stdout, "");
                assert!(
                    r.stderr
                        .starts_with(&format!("loopguard hook {}:", agent.name())),
                    "{}",
                    r.stderr
                );
            }
        }
        assert!(!dir.path().join("lg.db").exists());
    }

    /// A large payload read member by member is the payload read whole while its parts
    /// are readable; past [`MAX_PART_COST`] a part is its bytes' stand-in, and the rest
    /// of the payload is read as ever.
    #[test]
    fn large_payloads_are_read_by_member() {
        let text = "x".repeat(READ_WHOLE_BELOW);
        let payload = format!(
            r#"{{"session_id":"s","tool_name":"Read","tool_input":{{"p":1}},"tool_response":{{"t":"{text}"}}}}"#
        );
        let (value, parts) = read_payload(payload.as_bytes()).unwrap();
        assert_eq!(value, serde_json::from_str::<Value>(&payload).unwrap());
        assert!(parts.tool_input.is_none() && parts.tool_response.is_none());
        let rows = vec![r#"{"a":0}"#; MAX_PART_COST / 100].join(",");
        let payload = format!(
            r#"{{"session_id":"s","tool_name":"Read","tool_input":{{"p":1}},"tool_response":[{rows}]}}"#
        );
        let (value, parts) = read_payload(payload.as_bytes()).unwrap();
        assert_eq!(value["session_id"], "s");
        assert_eq!(value["tool_input"]["p"], 1);
        assert_eq!(value["tool_response"], Value::Null);
        let stand_in = parts.tool_response.unwrap();
        let raw = &payload[payload.find('[').unwrap()..payload.len() - 1];
        assert_eq!(
            stand_in,
            Value::String(bytes_stand_in(raw.as_bytes())).to_string()
        );
    }

    /// Calls whose JSON a `Value` cannot hold (non-finite literals included) are
    /// fingerprinted, not failed open: eight identical ones are warned, then denied.
    #[test]
    fn calls_beyond_a_value_are_judged() {
        let dir = tempfile::tempdir().unwrap();
        let config = dir.path().join("lg.json5");
        std::fs::write(
            &config,
            "{ tools: { loopDetection: { enabled: true, warningThreshold: 3, criticalThreshold: 5 } } }",
        )
        .unwrap();
        let deep = format!("{}1{}", "[".repeat(300), "]".repeat(300));
        // Non-finite literals, as Python's `json` writes them (and JSON5 too).
        let non_finite = r#"{"x":NaN,"y":[Infinity,-Infinity,+Infinity]}"#;
        for (n, input) in [
            r#"{"n":1e999}"#,
            r#"{"s":"\ud800"}"#,
            deep.as_str(),
            non_finite,
        ]
        .into_iter()
        .enumerate()
        {
            let mut options = options(&dir);
            options.config = Some(config.clone());
            let mut decisions = Vec::new();
            for i in 0..8 {
                let pre = format!(
                    r#"{{"session_id":"s{n}","hook_event_name":"PreToolUse","tool_name":"Read","tool_input":{input},"tool_use_id":"t{i}"}}"#
                );
                let r = handle(
                    Agent::ClaudeCode,
                    pre.as_bytes(),
                    &options,
                    Millis::new(1_000 + i),
                );
                assert_eq!(r.exit_code, EXIT_OK, "{}", r.stderr);
                decisions.push(if r.stdout.contains("\"deny\"") {
                    "deny"
                } else if r.stdout.contains("additionalContext") {
                    "warn"
                } else {
                    "allow"
                });
                let post = format!(
                    r#"{{"session_id":"s{n}","hook_event_name":"PostToolUse","tool_name":"Read","tool_input":{input},"tool_use_id":"t{i}","tool_response":{{"n":-1e999}}}}"#
                );
                let r = handle(
                    Agent::ClaudeCode,
                    post.as_bytes(),
                    &options,
                    Millis::new(1_000 + i),
                );
                assert_eq!(r.exit_code, EXIT_OK, "{}", r.stderr);
            }
            assert!(decisions.contains(&"warn"), "{input}: {decisions:?}");
            assert_eq!(decisions.last(), Some(&"deny"), "{input}: {decisions:?}");
        }
    }

    #[test]
    fn unknown_events_are_ignored() {
        let dir = tempfile::tempdir().unwrap();
        let r = handle(
            Agent::ClaudeCode,
            br#"{"hook_event_name":"Notification","message":"x"}"#,
            &options(&dir),
            Millis::new(1),
        );
        assert_eq!((r.exit_code, r.stdout.as_str()), (0, ""));
        assert!(r.stderr.contains("Notification"));
        let r = handle(
            Agent::Gemini,
            br#"{"hook_event_name":"AfterModel"}"#,
            &options(&dir),
            Millis::new(1),
        );
        assert_eq!((r.exit_code, r.stdout.as_str()), (0, "{}"));
    }

    #[test]
    fn a_bad_config_fails_open() {
        let dir = tempfile::tempdir().unwrap();
        let cfg = dir.path().join("bad.json5");
        std::fs::write(
            &cfg,
            "{ tools: { loopDetection: {\n  warningThreshold: -1,\n  criticalTreshold: 4 } } }",
        )
        .unwrap();
        let options = Options {
            config: Some(cfg.clone()),
            ..options(&dir)
        };
        let r = handle(
            Agent::Codex,
            br#"{"hook_event_name":"PreToolUse","tool_name":"Bash","tool_input":{}}"#,
            &options,
            Millis::new(1),
        );
        assert_eq!(r.exit_code, EXIT_FAILED);
        // One line per problem, each with its position, each naming the hook.
        let lines: Vec<&str> = r.stderr.lines().collect();
        assert_eq!(lines.len(), 2, "{}", r.stderr);
        let name = cfg.display().to_string();
        assert!(
            lines[0].starts_with(&format!("loopguard hook codex: {name}:2:"))
                && lines[0].contains("warningThreshold"),
            "{}",
            r.stderr
        );
        assert!(
            lines[1].starts_with(&format!("loopguard hook codex: {name}:3:"))
                && lines[1].contains("criticalThreshold"),
            "{}",
            r.stderr
        );
        // Events that need no config still work.
        let r = handle(
            Agent::Codex,
            br#"{"hook_event_name":"UserPromptSubmit","prompt":"x"}"#,
            &options,
            Millis::new(1),
        );
        assert_eq!(r.exit_code, EXIT_OK);
    }

    #[test]
    fn an_unusable_database_fails_open() {
        let dir = tempfile::tempdir().unwrap();
        let blocker = dir.path().join("file");
        std::fs::write(&blocker, "x").unwrap();
        let options = Options::new(blocker.join("lg.db"));
        let r = handle(
            Agent::ClaudeCode,
            br#"{"hook_event_name":"PreToolUse","tool_name":"Read","tool_input":{}}"#,
            &options,
            Millis::new(1),
        );
        assert_eq!(r.exit_code, EXIT_FAILED);
        assert!(r.stderr.contains("cannot create"), "{}", r.stderr);
    }

    #[test]
    fn a_deny_that_cannot_be_written_blocks_by_exit_status() {
        struct Full;
        impl Write for Full {
            fn write(&mut self, _: &[u8]) -> std::io::Result<usize> {
                Err(std::io::Error::from(std::io::ErrorKind::StorageFull))
            }
            fn flush(&mut self) -> std::io::Result<()> {
                Ok(())
            }
        }
        let deny = Response {
            stdout: "{\"decision\":\"deny\"}".into(),
            stderr: String::new(),
            exit_code: EXIT_OK,
            deny_reason: Some("CRITICAL: Read was called 20 times".into()),
        };
        let mut err = Vec::new();
        assert_eq!(deny.deliver(Full, &mut err), EXIT_BLOCK);
        assert!(String::from_utf8(err)
            .unwrap()
            .starts_with("CRITICAL: Read was called 20 times\n"));
        let mut out = Vec::new();
        assert_eq!(deny.deliver(&mut out, Vec::new()), EXIT_OK);
        assert_eq!(out, deny.stdout.as_bytes());
        let allow = Response {
            deny_reason: None,
            ..deny
        };
        assert_eq!(allow.deliver(Full, Vec::new()), EXIT_FAILED);
    }

    #[test]
    fn agents_by_name() {
        for agent in Agent::ALL {
            assert_eq!(Agent::from_name(agent.name()), Some(agent));
            assert!(!agent.events().is_empty());
            assert!(
                agent.settings_file().contains("settings.json")
                    || agent.settings_file().contains("hooks.json")
            );
        }
        assert_eq!(Agent::from_name("cursor"), None);
    }

    #[test]
    fn snippets_escape_the_command() {
        let s = Agent::ClaudeCode
            .settings_snippet(r#"'/path with "quotes"/loopguard' hook claude-code"#);
        let v: Value = serde_json::from_str(&s).unwrap();
        assert_eq!(
            v["hooks"]["PreToolUse"][0]["hooks"][0]["command"],
            r#"'/path with "quotes"/loopguard' hook claude-code"#
        );
    }
}
