//! The tool tables of SPEC §2, kept as data: which calls are known polls, which are
//! outbound sends, and which result keys are per-delivery noise.
//!
//! The engine asks these tables questions ("is this call a known poll?") instead of
//! spreading tool names through `if`s, so a table can be read, printed by
//! `loopguard config explain`, and extended in one place.

use std::collections::HashMap;
use std::sync::OnceLock;

use crate::json::{Json, Object};

use crate::config::extensions::ToolMask;

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

/// The built-in policy tables.
#[derive(Debug)]
pub struct Policy {
    /// Known polling calls (`known_poll_no_progress` applies, `generic_repeat` does not).
    pub polls: &'static [PollRule],
    /// Outbound sends, whose results are hashed without volatile ids.
    pub sends: &'static [SendRule],
    /// Result keys removed at any depth before a send's outcome is hashed.
    pub volatile_send_keys: &'static [&'static str],
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
    by_tool: OnceLock::new(),
};

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
        self.is_volatile_send_key_bytes(key.as_bytes())
    }

    /// [`Policy::is_volatile_send_key`] for a key given as bytes.
    pub fn is_volatile_send_key_bytes(&self, key: &[u8]) -> bool {
        self.volatile_send_keys.iter().any(|k| k.as_bytes() == key)
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

enum NameMatch {
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
}

impl std::fmt::Debug for NameMatch {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
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

/// One tool rule of a [`ToolPolicy`], compiled.
#[derive(Debug)]
pub struct ToolRule {
    source: crate::config::extensions::ToolRuleBlock,
    matcher: NameMatch,
    /// Argument keys or paths left out of the args fingerprint.
    pub ignore_args: crate::canonical::PathSet,
    /// Result keys or paths left out of the outcome fingerprint.
    pub ignore_result: crate::canonical::PathSet,
    /// The rules of a `mask` list.
    mask_rules: crate::masking::MaskSet,
}

impl ToolRule {
    /// Compiles a validated rule (`None` if its glob, paths or mask rules do not compile).
    pub fn compile(block: &crate::config::extensions::ToolRuleBlock) -> Option<Self> {
        let mask_rules = match &block.mask {
            Some(ToolMask::Rules(names)) => {
                crate::masking::MaskSet::from_names(names.iter().map(String::as_str)).ok()?
            }
            _ => crate::masking::MaskSet::NONE,
        };
        Some(Self {
            mask_rules,
            matcher: NameMatch::new(&block.pattern)?,
            ignore_args: crate::canonical::PathSet::parse(
                block.ignore_args.iter().map(String::as_str),
            )
            .ok()?,
            ignore_result: crate::canonical::PathSet::parse(
                block.ignore_result.iter().map(String::as_str),
            )
            .ok()?,
            source: block.clone(),
        })
    }

    /// The rule as written.
    pub fn source(&self) -> &crate::config::extensions::ToolRuleBlock {
        &self.source
    }

    /// The masking this tool's outcomes get, given the global set.
    pub fn mask(&self, global: crate::masking::MaskSet) -> crate::masking::MaskSet {
        use crate::masking::MaskSet;
        match &self.source.mask {
            None => global,
            Some(ToolMask::On) if global.is_empty() => MaskSet::ALL,
            Some(ToolMask::On) => global,
            Some(ToolMask::Off) => MaskSet::NONE,
            Some(ToolMask::Rules(_)) => self.mask_rules,
        }
    }
}

impl Clone for ToolRule {
    fn clone(&self) -> Self {
        Self::compile(&self.source).expect("a compiled rule compiles again")
    }
}

impl PartialEq for ToolRule {
    fn eq(&self, other: &Self) -> bool {
        self.source == other.source
    }
}

impl Eq for ToolRule {}

impl serde::Serialize for ToolRule {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        self.source.serialize(s)
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
        let tool_class = rule.and_then(|i| self.rules[i].source.class);
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
            .and_then(|r| r.source.target.as_deref());
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

/// Whether an object looks like a delivered message, whose own `id` is volatile: a string
/// `id`, a string `text`, and one of string `direction`, `senderId`, `accountId` or an
/// object `conversation`.
pub(crate) fn is_delivered_message<'a, O: Object<'a>>(map: O) -> bool {
    let is_str = |k: &str| map.get(k).and_then(Json::as_string).is_some();
    is_str("id")
        && is_str("text")
        && (is_str("direction")
            || is_str("senderId")
            || is_str("accountId")
            || map.get("conversation").and_then(Json::as_object).is_some())
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

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
        for v in yes {
            assert!(is_delivered_message(v.as_object().unwrap()), "{v}");
            let text = v.to_string();
            let mut tape = crate::json::Tape::new();
            let doc = tape.parse(&text).unwrap();
            assert!(is_delivered_message(doc.as_object().unwrap()), "{v}");
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
        let rule = |pattern: &str, target: Option<Vec<&str>>| {
            ToolRule::compile(&crate::config::extensions::ToolRuleBlock {
                pattern: pattern.into(),
                target: target.map(|t| t.into_iter().map(str::to_owned).collect()),
                ..Default::default()
            })
            .unwrap()
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
