//! The tool tables of SPEC §2, kept as data: which calls are known polls, which are
//! outbound sends, and which result keys are per-delivery noise.
//!
//! The engine asks these tables questions ("is this call a known poll?") instead of
//! spreading tool names through `if`s, so a table can be read, printed by
//! `loopguard config explain`, and extended in one place.
//!
//! Dependencies run one way: the config compiles its `policy.tools` blocks into
//! [`ToolRule`]s (this module never reads a config block), and the canonical encoder gets
//! the send tables through its filter (it never reads this module).

use std::collections::HashMap;
use std::sync::OnceLock;

use std::fmt;

use crate::canonical::{MessageShape, PathSet, SendNoise};
use crate::json::{Json, Object as _};
use crate::masking::{MaskSet, MASK_RULES};

/// A known polling call: the tool, and the `action` argument values that make it a poll
/// (`None`: every call of the tool polls).
#[derive(Clone, Copy, Debug)]
pub struct PollRule {
    /// Tool name.
    pub tool: &'static str,
    /// Accepted values of `args.action`, or `None` for any arguments.
    pub actions: Option<&'static [&'static str]>,
}

/// When a call of `tool` is an outbound send.
#[derive(Clone, Copy, Debug)]
pub enum SendMatch {
    /// Every call of the tool sends.
    Always,
    /// Calls whose string `args.action` is one of these.
    ActionIn(&'static [&'static str]),
    /// Calls whose argument of this name is a non-blank string (a channel's `to`).
    NonBlankArg(&'static str),
}

/// An outbound-send rule.
#[derive(Clone, Copy, Debug)]
pub struct SendRule {
    /// Tool name.
    pub tool: &'static str,
    /// Which of its calls send.
    pub matches: SendMatch,
}

/// Which tools a [`FailureRule`] is for.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ToolNames {
    /// Every tool.
    Any,
    /// The tool of this name.
    Exact(&'static str),
    /// Tools whose name starts with this (`sessions_`).
    Prefix(&'static str),
}

impl ToolNames {
    fn matches(self, tool: &str) -> bool {
        match self {
            Self::Any => true,
            Self::Exact(name) => tool == name,
            Self::Prefix(prefix) => tool.starts_with(prefix),
        }
    }
}

/// Where a [`FailureRule`] looks in a result object.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ResultKey {
    /// A key of the result object itself.
    Top(&'static str),
    /// A key of its `details` object (the structured result OpenClaw tools return).
    Details(&'static str),
}

/// What the value at a [`ResultKey`] must be for a [`FailureRule`] to hold.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum FailureTest {
    /// `true`.
    True,
    /// `false`.
    False,
    /// One of these strings.
    OneOf(&'static [&'static str]),
    /// A number other than 0.
    NonZero,
    /// A number at least this large (an HTTP status).
    AtLeast(i64),
    /// A string with something besides whitespace.
    NonBlank,
}

/// How a tool's result says that the call failed, when the result is not an error: a key
/// of the result (or of its `details`) and the values that mean failure.
#[derive(Clone, Copy, Debug)]
pub struct FailureRule {
    /// The tools it is for.
    pub tools: ToolNames,
    /// Where it looks.
    pub key: ResultKey,
    /// What the value must be.
    pub test: FailureTest,
    /// A failure that may go away by itself when retried (a timeout), as opposed to one
    /// that a retry with the same arguments meets again (a missing file, a refusal).
    pub retryable: bool,
    /// Result texts starting with one of these are successes whatever the key says (a
    /// tool that labelled a successful action `failed`).
    pub unless_text: &'static [&'static str],
}

impl FailureTest {
    fn holds<'a, J: Json<'a>>(self, value: J) -> bool {
        match self {
            Self::True => value.as_bool() == Some(true),
            Self::False => value.as_bool() == Some(false),
            Self::OneOf(values) => value.as_str().is_some_and(|v| values.contains(&v)),
            Self::NonZero => value
                .as_number()
                .is_some_and(|n| n.canonical() != crate::json::Canonical::Int(0)),
            Self::AtLeast(min) => value
                .as_number()
                .and_then(|n| n.as_f64())
                .is_some_and(|n| n >= min as f64),
            Self::NonBlank => value.as_string().is_some_and(|s| s.non_blank().is_some()),
        }
    }
}

/// The fields the failure table reads, at the top of a result or in its `details`.
const FAILURE_FIELDS: &[&str] = &[
    "details", "isError", "status", "ok", "error", "exitCode", "timedOut",
];

/// The bit of a field of [`FAILURE_FIELDS`] (0 for any other key: a rule on such a field
/// is looked up whatever the bits say).
fn field_bit(key: &[u8]) -> u16 {
    FAILURE_FIELDS
        .iter()
        .position(|f| f.as_bytes() == key)
        .map_or(0, |i| 1 << i)
}

/// Whether the result's first text block starts with one of `prefixes`.
fn starts_with_any<'a, O: crate::json::Object<'a>>(result: O, prefixes: &[&str]) -> bool {
    let first = result
        .get("content")
        .and_then(Json::as_array)
        .and_then(|mut items| items.next())
        .and_then(|item| item.get("text"))
        .and_then(Json::as_string);
    first.is_some_and(|text| {
        let text = text.trim().as_bytes();
        prefixes.iter().any(|p| text.starts_with(p.as_bytes()))
    })
}

/// What the built-in tables say about a result: failed or not, and whether a retry may
/// help.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum FailureClass {
    /// The same call would fail the same way again.
    Permanent,
    /// A transient failure: a timeout, a rate limit, an overloaded or unreachable service,
    /// a call cancelled because a sibling failed.
    Retryable,
}

/// The built-in policy tables.
#[derive(Debug)]
pub struct Policy {
    /// Known polling calls (`known_poll_no_progress` applies, `generic_repeat` does not).
    pub polls: &'static [PollRule],
    /// Outbound sends, whose results are hashed without volatile ids.
    pub sends: &'static [SendRule],
    /// Result keys removed at any depth before a send's outcome is hashed.
    pub volatile_send_keys: &'static [&'static str],
    /// An object of this shape in a send's outcome is a delivered message, whose own `id`
    /// is removed too: a string `id`, a string `text`, and one of string `direction`,
    /// `senderId`, `accountId` or an object `conversation`.
    delivered_message: MessageShape,
    /// How results say they failed, beyond errors (first matching rule wins).
    pub failures: &'static [FailureRule],
    /// Phrases (ASCII, matched ignoring case) that make a failure retryable when its
    /// salient error line contains one.
    pub retryable_text: &'static [&'static str],
    /// The rules above grouped by tool name, built on first use: one lookup per call.
    by_tool: OnceLock<HashMap<&'static str, ToolRules, foldhash::fast::FixedState>>,
}

/// The rules of the tables that name one tool.
#[derive(Clone, Copy, Debug, Default)]
struct ToolRules {
    poll: Option<PollRule>,
    send: Option<SendMatch>,
}

/// What the tables say about one call.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct CallClass {
    /// A known polling call.
    pub known_poll: bool,
    /// An outbound send.
    pub send: bool,
}

const MESSAGE_SEND_ACTIONS: &[&str] = &[
    "send",
    "broadcast",
    "reply",
    "thread-reply",
    "sendWithEffect",
    "sendAttachment",
    "upload-file",
    "sticker",
    "poll",
];

const TO: SendMatch = SendMatch::NonBlankArg("to");

const fn channel(tool: &'static str) -> SendRule {
    SendRule { tool, matches: TO }
}

/// The tables SPEC §2 prescribes.
pub static BUILTIN: Policy = Policy {
    polls: &[
        PollRule {
            tool: "command_status",
            actions: None,
        },
        PollRule {
            tool: "process",
            actions: Some(&["poll", "log"]),
        },
    ],
    sends: &[
        SendRule {
            tool: "sessions_send",
            matches: SendMatch::Always,
        },
        SendRule {
            tool: "message",
            matches: SendMatch::ActionIn(MESSAGE_SEND_ACTIONS),
        },
        // Tools named after a messaging channel send when they carry a recipient.
        channel("telegram"),
        channel("discord"),
        channel("slack"),
        channel("whatsapp"),
        channel("signal"),
        channel("feishu"),
        channel("imessage"),
        channel("bluebubbles"),
        channel("googlechat"),
        channel("msteams"),
        channel("matrix"),
        channel("mattermost"),
        channel("line"),
        channel("zalo"),
        channel("nostr"),
        channel("irc"),
        channel("twitch"),
    ],
    volatile_send_keys: &[
        "messageId",
        "message_id",
        "messageIds",
        "platformMessageId",
        "platformMessageIds",
        "fileId",
        "file_id",
        "fileKey",
        "pollId",
        "poll_id",
        "receipt",
        "runId",
        "idempotencyKey",
        "ts",
        "timestamp",
        "sentAt",
        "deliveredAt",
        "createdAt",
    ],
    delivered_message: MessageShape {
        id: "id",
        strings: &["id", "text"],
        any_string: &["direction", "senderId", "accountId"],
        any_object: &["conversation"],
    },
    failures: FAILURES,
    retryable_text: &[
        "timed out",
        "timeout",
        "429",
        "rate limit",
        "rate-limit",
        "too many requests",
        "temporarily",
        "try again",
        "econnreset",
        "econnrefused",
        "etimedout",
        "eai_again",
        "502",
        "503",
        "504",
        "bad gateway",
        "service unavailable",
        "gateway timeout",
        "overloaded",
        "connection reset",
        "connection refused",
        "resource busy",
        "cancelled: parallel tool call",
    ],
    by_tool: OnceLock::new(),
};

const fn failure(tools: ToolNames, key: ResultKey, test: FailureTest) -> FailureRule {
    FailureRule {
        tools,
        key,
        test,
        retryable: false,
        unless_text: &[],
    }
}

const fn retryable(rule: FailureRule) -> FailureRule {
    FailureRule {
        retryable: true,
        ..rule
    }
}

/// OpenClaw's `process` answers a successful `kill` or `remove` with these texts; builds
/// before 2026.4 labelled them `status: "failed"` (`src/agents/bash-tools.process.ts`).
const PROCESS_DONE: &[&str] = &[
    "Killed session ",
    "Termination requested for session ",
    "Removed session ",
];

/// The failure table (docs/extensions.md, "Failures"). Errors are failures before any of
/// these is read. OpenClaw's sources, under `src/agents/`:
///
/// - every tool whose `execute` throws: `pi-tool-definition-adapter.ts` returns
///   `{status: "error", tool, error}` as the result (`isError` stays false);
/// - `tools/common.ts` `failedTextResult`: `details.status: "failed"` (`exec`,
///   `process`, many plugin tools);
/// - `bash-tools.exec.ts`: `details.exitCode`, `details.timedOut`;
/// - `bash-tools.process.ts`: `details.status: "failed"` for a poll of an unknown or
///   failed session, `exitCode` of a finished one;
/// - `tools/web-fetch.ts`: errors thrown (above); `details.status` is the HTTP status
///   of the page fetched (Firecrawl passes a 404 through);
/// - `tools/browser-tool.ts`: the browser server's `{ok: false, error}`;
/// - `tools/sessions-send-tool.ts` and the other `sessions_*` tools:
///   `details.status` `error`, `forbidden` or `timeout`, with `error`;
/// - `web_search` without a key: `{error: "missing_brave_api_key", message}`.
const FAILURES: &[FailureRule] = &[
    // Tool-specific rules first: the first rule that holds decides the class.
    retryable(failure(
        ToolNames::Exact("exec"),
        ResultKey::Details("timedOut"),
        FailureTest::True,
    )),
    failure(
        ToolNames::Exact("exec"),
        ResultKey::Details("exitCode"),
        FailureTest::NonZero,
    ),
    failure(
        ToolNames::Exact("process"),
        ResultKey::Details("exitCode"),
        FailureTest::NonZero,
    ),
    failure(
        ToolNames::Exact("web_fetch"),
        ResultKey::Details("status"),
        FailureTest::AtLeast(400),
    ),
    retryable(failure(
        ToolNames::Prefix("sessions_"),
        ResultKey::Details("status"),
        FailureTest::OneOf(&["timeout"]),
    )),
    failure(
        ToolNames::Prefix("sessions_"),
        ResultKey::Details("status"),
        FailureTest::OneOf(&["forbidden"]),
    ),
    failure(ToolNames::Any, ResultKey::Top("isError"), FailureTest::True),
    failure(
        ToolNames::Any,
        ResultKey::Top("status"),
        FailureTest::OneOf(&["error"]),
    ),
    FailureRule {
        unless_text: PROCESS_DONE,
        ..failure(
            ToolNames::Any,
            ResultKey::Details("status"),
            FailureTest::OneOf(&["error", "failed"]),
        )
    },
    failure(ToolNames::Any, ResultKey::Top("ok"), FailureTest::False),
    failure(ToolNames::Any, ResultKey::Details("ok"), FailureTest::False),
    failure(
        ToolNames::Any,
        ResultKey::Top("error"),
        FailureTest::NonBlank,
    ),
    failure(
        ToolNames::Any,
        ResultKey::Details("error"),
        FailureTest::NonBlank,
    ),
];

impl Policy {
    fn by_tool(&self) -> &HashMap<&'static str, ToolRules, foldhash::fast::FixedState> {
        self.by_tool.get_or_init(|| {
            let mut map: HashMap<_, ToolRules, _> = HashMap::default();
            for rule in self.polls {
                map.entry(rule.tool).or_default().poll = Some(*rule);
            }
            for rule in self.sends {
                map.entry(rule.tool).or_default().send = Some(rule.matches);
            }
            map
        })
    }

    /// What the tables say about a call of `tool` with `args`.
    pub fn classify<'a, J: Json<'a>>(&self, tool: &str, args: J) -> CallClass {
        let Some(rules) = self.by_tool().get(tool) else {
            return CallClass::default();
        };
        let known_poll = rules.poll.is_some_and(|rule| match rule.actions {
            None => true,
            Some(actions) => action(args).is_some_and(|a| actions.contains(&a)),
        });
        let send = rules.send.is_some_and(|matches| match matches {
            SendMatch::Always => true,
            SendMatch::ActionIn(actions) => action(args).is_some_and(|a| actions.contains(&a)),
            SendMatch::NonBlankArg(name) => args
                .get(name)
                .and_then(Json::as_string)
                .is_some_and(|s| s.non_blank().is_some()),
        });
        CallClass { known_poll, send }
    }

    /// Whether a call is a known poll.
    pub fn is_known_poll<'a, J: Json<'a>>(&self, tool: &str, args: J) -> bool {
        self.classify(tool, args).known_poll
    }

    /// Whether a call is an outbound send.
    pub fn is_send<'a, J: Json<'a>>(&self, tool: &str, args: J) -> bool {
        self.classify(tool, args).send
    }

    /// Whether a result key is a volatile per-delivery id of a send.
    pub fn is_volatile_send_key(&self, key: &str) -> bool {
        self.volatile_send_keys.contains(&key)
    }

    /// The first failure rule of `tool` that holds for `result`, if any.
    pub fn failed_result<'a, J: Json<'a>>(&self, tool: &str, result: J) -> Option<&FailureRule> {
        let object = result.as_object()?;
        // One pass over the keys of the result (and of its details) says which of the
        // fields the rules read are there: most results have none of them, and a rule
        // whose field is absent is passed over without a lookup.
        let mut top = 0u16;
        object.each_key(|k| top |= field_bit(k));
        if top == 0 {
            return None;
        }
        let details = (top & field_bit(b"details") != 0)
            .then(|| object.get("details").and_then(Json::as_object))
            .flatten();
        let mut inner = 0u16;
        if let Some(d) = details {
            d.each_key(|k| inner |= field_bit(k));
        }
        self.failures.iter().find(|rule| {
            if !rule.tools.matches(tool) {
                return false;
            }
            let (present, key) = match rule.key {
                ResultKey::Top(key) => (top, key),
                ResultKey::Details(key) => (inner, key),
            };
            let bit = field_bit(key.as_bytes());
            if bit != 0 && present & bit == 0 {
                return false;
            }
            let value = match rule.key {
                ResultKey::Top(key) => object.get(key),
                ResultKey::Details(key) => details.and_then(|d| d.get(key)),
            };
            value.is_some_and(|v| rule.test.holds(v))
                && (rule.unless_text.is_empty() || !starts_with_any(object, rule.unless_text))
        })
    }

    /// Whether a failure whose salient error line is `line` is retryable by its words
    /// (ignoring case; a status code such as `503` only as a whole number, not inside
    /// `15034`).
    pub fn retryable_line(&self, line: &str) -> bool {
        // The phrases are lower case.
        let lower = line.to_ascii_lowercase();
        let bytes = lower.as_bytes();
        self.retryable_text.iter().any(|phrase| {
            if !phrase.bytes().all(|b| b.is_ascii_digit()) {
                return lower.contains(phrase);
            }
            lower.match_indices(phrase).any(|(at, _)| {
                let before = at.checked_sub(1).map(|i| bytes[i]);
                let after = bytes.get(at + phrase.len()).copied();
                !before.is_some_and(|b| b.is_ascii_digit())
                    && !after.is_some_and(|b| b.is_ascii_digit())
            })
        })
    }

    /// What a send's outcome leaves out, for the canonical encoder's filter.
    pub(crate) fn send_noise(&self) -> SendNoise<'_> {
        SendNoise {
            keys: self.volatile_send_keys,
            message: &self.delivered_message,
        }
    }
}

/// What a tool is, for the policy: `poll` and `send` change how calls are judged and
/// outcomes hashed; `read` and `mutate` are labels for reports.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum ToolClass {
    /// A polling call: `known_poll_no_progress` applies, repeat detectors do not.
    Poll,
    /// An outbound send: outcomes are hashed without volatile delivery ids.
    Send,
    /// Reads state.
    Read,
    /// Changes state.
    Mutate,
}

impl ToolClass {
    /// The class as configs spell it.
    pub(crate) fn name(self) -> &'static str {
        match self {
            Self::Poll => "poll",
            Self::Send => "send",
            Self::Read => "read",
            Self::Mutate => "mutate",
        }
    }
}

/// A tool name or glob, compiled.
#[derive(Clone)]
pub(crate) enum NameMatch {
    Exact(String),
    Glob(globset::GlobMatcher),
}

impl NameMatch {
    fn new(pattern: &str) -> Option<Self> {
        if pattern.contains(['*', '?', '[', '{']) {
            let glob = globset::GlobBuilder::new(pattern)
                .literal_separator(false)
                .build()
                .ok()?;
            Some(Self::Glob(glob.compile_matcher()))
        } else {
            Some(Self::Exact(pattern.to_owned()))
        }
    }

    fn is_match(&self, tool: &str) -> bool {
        match self {
            Self::Exact(name) => name == tool,
            Self::Glob(glob) => glob.is_match(tool),
        }
    }

    /// The name or glob as written.
    fn pattern(&self) -> &str {
        match self {
            Self::Exact(name) => name,
            Self::Glob(glob) => glob.glob().glob(),
        }
    }
}

impl PartialEq for NameMatch {
    fn eq(&self, other: &Self) -> bool {
        self.pattern() == other.pattern()
    }
}

impl Eq for NameMatch {}

impl serde::Serialize for NameMatch {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(self.pattern())
    }
}

impl fmt::Debug for NameMatch {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Exact(name) => write!(f, "Exact({name:?})"),
            Self::Glob(glob) => write!(f, "Glob({:?})", glob.glob().glob()),
        }
    }
}

/// Whether a glob is valid (for config validation).
pub fn valid_glob(pattern: &str) -> bool {
    NameMatch::new(pattern).is_some()
}

/// Arguments that name what a call works on (a file, a URL), first present wins: the
/// target of `target_thrash`, for tools no rule gives a `target` list.
pub const DEFAULT_TARGET_ARGS: &[&str] = &[
    "path",
    "file_path",
    "filePath",
    "file",
    "filename",
    "absolute_path",
    "notebook_path",
    "target_file",
    "url",
    "uri",
];

/// One tool rule of a [`ToolPolicy`], compiled: what the `policy.tools` entry of a config
/// becomes (the config compiles it; the policy never reads the config's blocks).
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "camelCase")]
pub struct ToolRule {
    /// The tool name or glob.
    #[serde(rename = "match")]
    pub(crate) matcher: NameMatch,
    /// The tool's class.
    pub(crate) class: Option<ToolClass>,
    /// Argument keys or paths left out of the args fingerprint.
    #[serde(serialize_with = "written_paths")]
    pub(crate) ignore_args: PathSet,
    /// Result keys or paths left out of the outcome fingerprint.
    #[serde(serialize_with = "written_paths")]
    pub(crate) ignore_result: PathSet,
    /// How this tool's outcomes are masked.
    pub(crate) mask: RuleMask,
    /// Arguments that name the call's target, first present wins; `None`:
    /// [`DEFAULT_TARGET_ARGS`].
    pub(crate) target: Option<Vec<String>>,
    /// Warning threshold for this tool's calls.
    pub(crate) warning_threshold: Option<u32>,
    /// Critical threshold for this tool's calls.
    pub(crate) critical_threshold: Option<u32>,
}

fn written_paths<S: serde::Serializer>(paths: &PathSet, s: S) -> Result<S::Ok, S::Error> {
    s.collect_seq(paths.written())
}

/// How a rule masks its tool's outcomes.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub(crate) enum RuleMask {
    /// As the global switch says.
    #[default]
    Global,
    /// On: the global rules, or every rule when masking is off globally.
    On,
    /// Off for this tool.
    Off,
    /// These rules (`names` as written, for reports).
    Rules {
        set: MaskSet,
        names: Vec<&'static str>,
    },
}

impl RuleMask {
    /// The rules of a `mask` list, by name (`None` if one is unknown).
    pub(crate) fn rules<'n>(names: impl IntoIterator<Item = &'n str>) -> Option<Self> {
        let names = names
            .into_iter()
            .map(|n| MASK_RULES.iter().find(|r| r.name == n).map(|r| r.name))
            .collect::<Option<Vec<_>>>()?;
        let set = MaskSet::from_names(names.iter().copied()).ok()?;
        Some(Self::Rules { set, names })
    }
}

impl serde::Serialize for RuleMask {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        match self {
            Self::Global => s.serialize_none(),
            Self::On => s.serialize_bool(true),
            Self::Off => s.serialize_bool(false),
            Self::Rules { names, .. } => names.serialize(s),
        }
    }
}

impl ToolRule {
    /// A rule for the tools `pattern` names (`None` if the glob does not compile), with no
    /// setting yet.
    pub(crate) fn new(pattern: &str) -> Option<Self> {
        Some(Self {
            matcher: NameMatch::new(pattern)?,
            class: None,
            ignore_args: PathSet::default(),
            ignore_result: PathSet::default(),
            mask: RuleMask::Global,
            target: None,
            warning_threshold: None,
            critical_threshold: None,
        })
    }

    /// The masking this tool's outcomes get, given the global set.
    pub(crate) fn mask(&self, global: MaskSet) -> MaskSet {
        match &self.mask {
            RuleMask::Global => global,
            RuleMask::On if global.is_empty() => MaskSet::ALL,
            RuleMask::On => global,
            RuleMask::Off => MaskSet::NONE,
            RuleMask::Rules { set, .. } => *set,
        }
    }
}

/// The rule in one line, with its config keys (`match read_*; class read; mask true`).
impl fmt::Display for ToolRule {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "match {}", self.matcher.pattern())?;
        if let Some(class) = self.class {
            write!(f, "; class {}", class.name())?;
        }
        let list = |paths: &PathSet| paths.written().collect::<Vec<_>>().join(", ");
        if !self.ignore_args.is_empty() {
            write!(f, "; ignoreArgs {}", list(&self.ignore_args))?;
        }
        if !self.ignore_result.is_empty() {
            write!(f, "; ignoreResult {}", list(&self.ignore_result))?;
        }
        match &self.mask {
            RuleMask::Global => {}
            RuleMask::On => f.write_str("; mask true")?,
            RuleMask::Off => f.write_str("; mask false")?,
            RuleMask::Rules { names, .. } => write!(f, "; mask [{}]", names.join(", "))?,
        }
        if let Some(target) = &self.target {
            write!(f, "; target {}", target.join(", "))?;
        }
        if let Some(w) = self.warning_threshold {
            write!(f, "; warningThreshold {w}")?;
        }
        if let Some(c) = self.critical_threshold {
            write!(f, "; criticalThreshold {c}")?;
        }
        Ok(())
    }
}

/// The tool policy of the `loopguard` block: rules first (first match wins), then SPEC's
/// built-in tables unless `builtin` is off.
#[derive(Clone, Debug, Default, PartialEq, Eq, serde::Serialize)]
pub struct ToolPolicy {
    /// Whether the built-in tables apply to tools no rule classifies.
    pub builtin: bool,
    /// The rules, in order.
    pub rules: Vec<ToolRule>,
}

/// What a [`ToolPolicy`] says about one call.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Classified {
    /// Known poll and send, as the engine uses them.
    pub class: CallClass,
    /// The class a rule gave the tool, if any.
    pub tool_class: Option<ToolClass>,
    /// Index of the matching rule.
    pub rule: Option<u8>,
}

/// Rules beyond this many are ignored (a rule's index is kept in one byte per record).
pub const MAX_TOOL_RULES: usize = 255;

impl ToolPolicy {
    /// A policy from compiled rules.
    pub fn new(builtin: bool, mut rules: Vec<ToolRule>) -> Self {
        rules.truncate(MAX_TOOL_RULES);
        Self { builtin, rules }
    }

    /// Classifies a call of `tool` with `args`.
    pub fn classify<'a, J: Json<'a>>(&self, tool: &str, args: J) -> Classified {
        let rule = self.rules.iter().position(|r| r.matcher.is_match(tool));
        let tool_class = rule.and_then(|i| self.rules[i].class);
        let class = match tool_class {
            Some(ToolClass::Poll) => CallClass {
                known_poll: true,
                send: false,
            },
            Some(ToolClass::Send) => CallClass {
                known_poll: false,
                send: true,
            },
            Some(ToolClass::Read | ToolClass::Mutate) => CallClass::default(),
            None if self.builtin => BUILTIN.classify(tool, args),
            None => CallClass::default(),
        };
        Classified {
            class,
            tool_class,
            rule: rule.map(|i| i as u8),
        }
    }

    /// The rule at `index`.
    pub fn rule(&self, index: u8) -> Option<&ToolRule> {
        self.rules.get(usize::from(index))
    }

    /// What a call works on, for `target_thrash`: the first non-blank string argument
    /// among the matching rule's `target` names, or [`DEFAULT_TARGET_ARGS`]. Trimmed.
    pub fn target<'v, J: Json<'v>>(&self, rule: Option<u8>, args: J) -> Option<&'v str> {
        let args = args.as_object()?;
        let rule_names = rule
            .and_then(|i| self.rule(i))
            .and_then(|r| r.target.as_deref());
        // One pass over the (few) arguments, ranking each by its place among the names:
        // cheaper than a map lookup per name.
        let rank = |key: &[u8]| match rule_names {
            Some(names) => names.iter().position(|n| n.as_bytes() == key),
            None => DEFAULT_TARGET_ARGS.iter().position(|n| n.as_bytes() == key),
        };
        let mut best: Option<(usize, &str)> = None;
        args.each_key(|key| {
            let Some(r) = rank(key) else { return };
            if best.is_some_and(|(b, _)| b <= r) {
                return;
            }
            // The member that counts is the key's last one (a raw object may repeat keys).
            let value = std::str::from_utf8(key).ok().and_then(|k| args.get(k));
            if let Some(text) = value
                .and_then(Json::as_str)
                .and_then(crate::text::non_blank)
            {
                best = Some((r, text));
            }
        });
        best.map(|(_, text)| text)
    }
}

/// The string `args.action`, if any.
pub(crate) fn action<'a, J: Json<'a>>(args: J) -> Option<&'a str> {
    args.get("action").and_then(Json::as_str)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    /// `failed_result` skips a result without any of these fields: every rule's field
    /// must be one.
    #[test]
    fn every_failure_rule_reads_a_listed_field() {
        for rule in BUILTIN.failures {
            let (ResultKey::Top(key) | ResultKey::Details(key)) = rule.key;
            assert_ne!(field_bit(key.as_bytes()), 0, "{key}");
        }
    }

    /// Event readers keep only [`RESULT_READ`] of a result: every field a rule reads must
    /// be in it (a field it left out would make a failure read from text pass unseen).
    #[test]
    fn every_failure_rule_reads_a_field_event_readers_keep() {
        let crate::json::Read::Members(kept) = crate::fingerprint::RESULT_READ else {
            panic!("RESULT_READ names members");
        };
        let kept = |name: &str| kept.iter().any(|m| m.name() == name);
        for rule in BUILTIN.failures {
            match rule.key {
                ResultKey::Top(key) => assert!(kept(key), "{key}"),
                ResultKey::Details(_) => assert!(kept("details")),
            }
        }
    }

    #[test]
    fn retryable_phrases_are_lower_case() {
        for phrase in BUILTIN.retryable_text {
            assert_eq!(*phrase, phrase.to_ascii_lowercase());
        }
        assert!(BUILTIN.retryable_line("HTTP 503 Service Unavailable"));
        assert!(BUILTIN.retryable_line("Rate Limit exceeded"));
        assert!(!BUILTIN.retryable_line("expected 15034 rows"));
    }

    #[test]
    fn polls() {
        let p = &BUILTIN;
        assert!(p.is_known_poll("command_status", &json!({})));
        assert!(p.is_known_poll("process", &json!({"action": "poll"})));
        assert!(p.is_known_poll("process", &json!({"action": "log"})));
        assert!(!p.is_known_poll("process", &json!({"action": "kill"})));
        assert!(!p.is_known_poll("process", &json!({})));
        assert!(!p.is_known_poll("exec", &json!({"action": "poll"})));
    }

    #[test]
    fn sends() {
        let p = &BUILTIN;
        assert!(p.is_send("sessions_send", &json!({})));
        for a in MESSAGE_SEND_ACTIONS {
            assert!(p.is_send("message", &json!({ "action": a })), "{a}");
        }
        assert!(!p.is_send("message", &json!({"action": "read"})));
        assert!(!p.is_send("message", &json!({"action": "channel-create"})));
        assert!(!p.is_send("message", &json!({})));
        assert!(p.is_send("telegram", &json!({"to": "@me"})));
        assert!(!p.is_send("telegram", &json!({"to": "  "})));
        assert!(!p.is_send("telegram", &json!({"to": 5})));
        assert!(!p.is_send("telegram", &json!({})));
        assert!(!p.is_send("read", &json!({"to": "x"})));
    }

    #[test]
    fn delivered_message_shape() {
        let yes = [
            json!({"id": "1", "text": "t", "direction": "out"}),
            json!({"id": "1", "text": "t", "senderId": "u"}),
            json!({"id": "1", "text": "t", "accountId": "a"}),
            json!({"id": "1", "text": "t", "conversation": {}}),
        ];
        fn is_delivered_message(map: &serde_json::Map<String, serde_json::Value>) -> bool {
            BUILTIN.delivered_message.matches(map)
        }
        for v in yes {
            assert!(is_delivered_message(v.as_object().unwrap()), "{v}");
            let text = v.to_string();
            let mut tape = crate::json::Tape::new();
            let doc = tape.parse(&text).unwrap();
            assert!(
                BUILTIN.delivered_message.matches(doc.as_object().unwrap()),
                "{v}"
            );
        }
        let no = [
            json!({"id": 1, "text": "t", "direction": "out"}),
            json!({"id": "1", "direction": "out"}),
            json!({"id": "1", "text": "t"}),
            json!({"id": "1", "text": "t", "conversation": "c"}),
        ];
        for v in no {
            assert!(!is_delivered_message(v.as_object().unwrap()), "{v}");
        }
    }

    #[test]
    fn targets_come_from_the_named_arguments() {
        let rule = |pattern: &str, target: Option<Vec<&str>>| ToolRule {
            target: target.map(|t| t.into_iter().map(str::to_owned).collect()),
            ..ToolRule::new(pattern).unwrap()
        };
        let policy = ToolPolicy::new(
            true,
            vec![rule("fetch", Some(vec!["url"])), rule("grep", Some(vec![]))],
        );
        let target = |tool: &str, args: serde_json::Value| {
            let r = policy.classify(tool, &args).rule;
            policy.target(r, &args).map(str::to_owned)
        };
        // Defaults, first present wins; blank and non-string values are skipped.
        assert_eq!(
            target("edit", json!({"file_path": " a.py ", "path": "b.py"})).as_deref(),
            Some("b.py")
        );
        assert_eq!(
            target("edit", json!({"path": "  ", "file": "c.py"})).as_deref(),
            Some("c.py")
        );
        assert_eq!(target("edit", json!({"path": 7})), None);
        assert_eq!(target("edit", json!("not an object")), None);
        // A rule's names replace the defaults; an empty list means no target.
        assert_eq!(
            target("fetch", json!({"url": "https://x", "path": "/p"})).as_deref(),
            Some("https://x")
        );
        assert_eq!(target("fetch", json!({"path": "/p"})), None);
        assert_eq!(target("grep", json!({"path": "/p"})), None);
    }

    #[test]
    fn volatile_keys() {
        assert!(BUILTIN.is_volatile_send_key("messageId"));
        assert!(BUILTIN.is_volatile_send_key("createdAt"));
        assert!(!BUILTIN.is_volatile_send_key("id"));
        assert!(!BUILTIN.is_volatile_send_key("text"));
    }
}
