//! Fingerprints of calls and outcomes (SPEC §2).
//!
//! A [`Fingerprint`] is XXH3-128 over the [`canonical`](crate::canonical) `lg1` encoding of
//! a JSON value. Calls get a [`Signature`] (tool name + args fingerprint); outcomes are
//! reduced by the first matching rule of SPEC §2 before they are hashed, so that volatile
//! fields (durations, pids, message ids) never look like progress.

use std::borrow::Cow;
use std::fmt;
use std::sync::LazyLock;

use regex::Regex;
use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};

use crate::canonical::{hash_with, json_text, number_text, Digest, Filter, PathSet};
use crate::config::EffectiveConfig;
use crate::masking::MaskSet;
use crate::policy::{self, CallClass, BUILTIN};
use crate::text::{is_js_space, non_blank, trim};

/// Version of the canonical encoding and of the outcome rules. Persisted fingerprints
/// from another version must not be compared with these.
pub const FINGERPRINT_VERSION: &str = "lg1";

/// A 128-bit digest of a canonically encoded JSON value, shown as 32 lowercase hex digits.
/// Serialized as that hex string in human-readable formats, as 16 raw bytes otherwise.
#[derive(Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Fingerprint(u128);

impl Fingerprint {
    /// Wraps a raw digest.
    pub const fn from_u128(raw: u128) -> Self {
        Self(raw)
    }

    /// The raw digest.
    pub const fn as_u128(self) -> u128 {
        self.0
    }

    /// The fingerprint of any JSON value.
    pub fn of(value: &Value) -> Self {
        Self(crate::canonical::digest(value))
    }
}

impl fmt::Display for Fingerprint {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{:032x}", self.0)
    }
}

impl fmt::Debug for Fingerprint {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Fingerprint({self})")
    }
}

/// What identifies a call pattern: the tool name and the args fingerprint, hashed together.
/// Two calls have the same signature iff they have the same tool and args fingerprint.
/// Serialized like a [`Fingerprint`].
#[derive(Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Signature(u128);

/// Serde for 128-bit digests: hex in human-readable formats, 16 little-endian bytes in
/// binary ones (states are stored per event; variable-length integers would only cost time).
macro_rules! digest_serde {
    ($t:ident) => {
        impl Serialize for $t {
            fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
                if s.is_human_readable() {
                    s.collect_str(self)
                } else {
                    s.serialize_bytes(&self.0.to_le_bytes())
                }
            }
        }

        impl<'de> Deserialize<'de> for $t {
            fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
                struct V;
                impl<'de> serde::de::Visitor<'de> for V {
                    type Value = u128;
                    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                        f.write_str("16 bytes or 32 hex digits")
                    }
                    fn visit_bytes<E: serde::de::Error>(self, b: &[u8]) -> Result<u128, E> {
                        let raw: [u8; 16] = b
                            .try_into()
                            .map_err(|_| E::invalid_length(b.len(), &self))?;
                        Ok(u128::from_le_bytes(raw))
                    }
                    fn visit_str<E: serde::de::Error>(self, s: &str) -> Result<u128, E> {
                        u128::from_str_radix(s, 16).map_err(E::custom)
                    }
                }
                let raw = if d.is_human_readable() {
                    d.deserialize_str(V)?
                } else {
                    d.deserialize_bytes(V)?
                };
                Ok(Self(raw))
            }
        }
    };
}

digest_serde!(Fingerprint);
digest_serde!(Signature);

impl Signature {
    /// The signature of `tool` (already trimmed) called with arguments of fingerprint `args`.
    pub fn new(tool: &str, args: Fingerprint) -> Self {
        // The lg1 string of the tool, then the args digest; short names skip the digest
        // machinery (same bytes, same hash).
        let name = tool.as_bytes();
        if name.len() <= 64 {
            let mut buf = [0u8; 9 + 64 + 16];
            buf[0] = b's';
            buf[1..9].copy_from_slice(&(name.len() as u64).to_le_bytes());
            buf[9..9 + name.len()].copy_from_slice(name);
            buf[9 + name.len()..25 + name.len()].copy_from_slice(&args.as_u128().to_le_bytes());
            return Self(xxhash_rust::xxh3::xxh3_128(&buf[..25 + name.len()]));
        }
        Self(hash_with(|d| {
            d.str(tool);
            d.write(&args.as_u128().to_le_bytes());
        }))
    }

    /// The raw digest.
    pub const fn as_u128(self) -> u128 {
        self.0
    }
}

impl fmt::Display for Signature {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{:032x}", self.0)
    }
}

impl fmt::Debug for Signature {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Signature({self})")
    }
}

/// The args fingerprint of a call (`update_plan` args reduced to their plan shape first).
pub fn args_fingerprint(tool: &str, args: &Value) -> Fingerprint {
    Fingerprint(hash_with(|d| {
        if tool == "update_plan" {
            plan_shape(d, args);
        } else {
            d.value(args);
        }
    }))
}

/// How a call's outcome will be reduced before hashing (SPEC §2 rules 5–9). It depends only
/// on the call (tool and arguments), so it is fixed when the call is made and kept with the
/// record: a result that names its call only by id is hashed the same way.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct OutcomeRule {
    shape: Shape,
    send: bool,
    /// Index of the policy rule that matched the tool ([`NO_RULE`]: none).
    tool_rule: u8,
}

/// [`OutcomeRule`]'s "no policy rule".
const NO_RULE: u8 = u8::MAX;

#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
enum Shape {
    Default,
    Exec,
    ProcessPoll,
    ProcessLog,
    UpdatePlan,
}

impl OutcomeRule {
    /// The rule for a call of `tool` (trimmed) with `args`.
    pub fn for_call(tool: &str, args: &Value) -> Self {
        Self::with_class(tool, args, BUILTIN.classify(tool, args))
    }

    fn with_class(tool: &str, args: &Value, class: CallClass) -> Self {
        let shape = match tool {
            "exec" => Shape::Exec,
            "process" => match policy::action(args) {
                Some("poll") => Shape::ProcessPoll,
                Some("log") => Shape::ProcessLog,
                _ => Shape::Default,
            },
            "update_plan" => Shape::UpdatePlan,
            _ => Shape::Default,
        };
        Self {
            shape,
            send: class.send,
            tool_rule: NO_RULE,
        }
    }

    /// Whether outcomes are hashed as an outbound send's (volatile ids stripped).
    pub fn is_send(self) -> bool {
        self.send
    }

    /// The index of the policy rule that matched the call's tool.
    pub fn tool_rule(self) -> Option<u8> {
        (self.tool_rule != NO_RULE).then_some(self.tool_rule)
    }

    /// Whether the call is an `exec` (whose non-zero exit codes are failures).
    pub(crate) fn is_exec(self) -> bool {
        self.shape == Shape::Exec
    }
}

/// A call reduced to what the engine needs: computed once, used by the verdict and by the
/// outcome that follows.
#[derive(Clone, Copy, Debug)]
pub struct CallPrint<'a> {
    /// The tool name, trimmed.
    pub tool: &'a str,
    /// Fingerprint of the (normalized) arguments.
    pub args: Fingerprint,
    /// Tool + args.
    pub signature: Signature,
    /// How the outcome will be hashed.
    pub rule: OutcomeRule,
    /// Whether this is a known polling call.
    pub known_poll: bool,
    /// What the call works on (a path, a URL), when the `loopguard` block's
    /// `targetThrash` is on and an argument names one.
    pub target: Option<&'a str>,
}

impl<'a> CallPrint<'a> {
    /// Fingerprints a call with SPEC's built-in tables. `tool` is trimmed here.
    pub fn new(tool: &'a str, args: &Value) -> Self {
        let tool = trim(tool);
        let args_fp = args_fingerprint(tool, args);
        let class = BUILTIN.classify(tool, args);
        Self {
            tool,
            args: args_fp,
            signature: Signature::new(tool, args_fp),
            rule: OutcomeRule::with_class(tool, args, class),
            known_poll: class.known_poll,
            target: None,
        }
    }

    /// Fingerprints a call under a config: its `loopguard` tool policy, when there is one,
    /// classifies the tool and leaves ignored argument keys out.
    pub fn for_config(tool: &'a str, args: &'a Value, cfg: &EffectiveConfig) -> Self {
        let Some(ext) = cfg.extensions.as_deref() else {
            return Self::new(tool, args);
        };
        let tool = trim(tool);
        let classified = ext.policy.classify(tool, args);
        let ignore = classified
            .rule
            .and_then(|i| ext.policy.rule(i))
            .map(|r| &r.ignore_args)
            .filter(|p| !p.is_empty());
        let args_fp = match ignore {
            Some(paths) if tool != "update_plan" => Fingerprint(hash_with(|d| {
                d.value_filtered(
                    args,
                    Filter {
                        ignore: Some(paths),
                        ..Filter::KEEP
                    },
                )
            })),
            _ => args_fingerprint(tool, args),
        };
        let mut rule = OutcomeRule::with_class(tool, args, classified.class);
        rule.tool_rule = classified.rule.unwrap_or(NO_RULE);
        let target = ext
            .target_thrash
            .and_then(|_| ext.policy.target(classified.rule, args));
        Self {
            tool,
            args: args_fp,
            signature: Signature::new(tool, args_fp),
            rule,
            known_poll: classified.class.known_poll,
            target,
        }
    }
}

/// What a tool call returned.
#[derive(Clone, Copy, Debug)]
pub enum Outcome<'a> {
    /// The tool's result value.
    Result(&'a Value),
    /// The error the call failed with (any JSON value, including `null`).
    Error(&'a Value),
    /// Neither a result nor an error: nothing to fingerprint, nothing is recorded.
    Nothing,
}

/// An outcome reduced by SPEC §2.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum OutcomePrint {
    /// No fingerprint: nothing is recorded.
    Nothing,
    /// The engine's own loop veto (`details.status == "blocked"`,
    /// `details.deniedReason == "tool-loop"`): recorded as a veto, never as progress.
    Veto,
    /// A fingerprinted outcome.
    Hashed {
        /// The outcome fingerprint.
        fingerprint: Fingerprint,
        /// For errors: the unavailable tool named by the error text, lower-cased.
        unknown_tool: Option<String>,
    },
}

/// How a config changes outcome hashing: paths to leave out and tokens to mask.
#[derive(Clone, Copy, Debug, Default)]
struct OutcomeFilter<'p> {
    ignore: Option<&'p PathSet>,
    mask: MaskSet,
}

impl OutcomePrint {
    /// Reduces and hashes an outcome of a call with rule `rule` (SPEC §2 alone).
    pub fn new(rule: OutcomeRule, outcome: Outcome<'_>) -> Self {
        Self::filtered(rule, outcome, OutcomeFilter::default())
    }

    /// Reduces and hashes an outcome under a config: its `loopguard` block may mask
    /// volatile tokens and leave result paths out.
    pub fn for_config(rule: OutcomeRule, outcome: Outcome<'_>, cfg: &EffectiveConfig) -> Self {
        let Some(ext) = cfg.extensions.as_deref() else {
            return Self::new(rule, outcome);
        };
        let tool_rule = rule.tool_rule().and_then(|i| ext.policy.rule(i));
        let mask = tool_rule.map_or(ext.masking, |r| r.mask(ext.masking));
        let ignore = tool_rule
            .map(|r| &r.ignore_result)
            .filter(|p| !p.is_empty());
        Self::filtered(rule, outcome, OutcomeFilter { ignore, mask })
    }

    fn filtered(rule: OutcomeRule, outcome: Outcome<'_>, filter: OutcomeFilter<'_>) -> Self {
        match outcome {
            Outcome::Nothing => Self::Nothing,
            Outcome::Error(error) => {
                let text = error_text(error);
                let fingerprint = Fingerprint(hash_with(|d| {
                    d.write(b"E");
                    d.str_value(&text, filter.mask);
                }));
                Self::Hashed {
                    fingerprint,
                    unknown_tool: unknown_tool_name(&text),
                }
            }
            Outcome::Result(result) => match result_fingerprint(rule, result, filter) {
                Some(fingerprint) => Self::Hashed {
                    fingerprint,
                    unknown_tool: None,
                },
                None => Self::Veto,
            },
        }
    }
}

/// Whether an outcome is a failure, for `error_cascade`: an error; a result with
/// `isError: true`; an `exec` with a non-zero numeric `exitCode`; `status: "error"` at the
/// top of the result or in its details.
pub fn is_failure(rule: OutcomeRule, outcome: Outcome<'_>) -> bool {
    let result = match outcome {
        Outcome::Error(_) => return true,
        Outcome::Nothing => return false,
        Outcome::Result(Value::Object(result)) => result,
        Outcome::Result(_) => return false,
    };
    let details = result.get("details").and_then(Value::as_object);
    let status_error = |m: Option<&Map<String, Value>>| {
        m.and_then(|m| m.get("status")).and_then(Value::as_str) == Some("error")
    };
    result.get("isError") == Some(&Value::Bool(true))
        || status_error(Some(result))
        || status_error(details)
        || (rule.is_exec()
            && details
                .and_then(|d| d.get("exitCode"))
                .and_then(Value::as_f64)
                .is_some_and(|code| code != 0.0))
}

/// Rules 2–9 for a result value; `None` for a loop veto.
fn result_fingerprint(
    rule: OutcomeRule,
    result: &Value,
    filter: OutcomeFilter<'_>,
) -> Option<Fingerprint> {
    let Value::Object(result) = result else {
        return Some(Fingerprint(hash_with(|d| {
            d.value_filtered(
                result,
                Filter {
                    mask: filter.mask,
                    ..Filter::KEEP
                },
            )
        })));
    };
    // One pass over the (small) result object instead of a lookup per key.
    let (mut details, mut content) = (None, None);
    for (k, v) in result {
        match k.as_str() {
            "details" => details = v.as_object(),
            "content" => content = Some(v),
            _ => {}
        }
    }
    let text = ContentText::new(content);
    let status = details
        .and_then(|d| d.get("status"))
        .and_then(Value::as_str);
    let field = |k: &str| details.and_then(|d| d.get(k));
    if status == Some("blocked")
        && field("deniedReason").and_then(Value::as_str) == Some("tool-loop")
    {
        return None;
    }
    let exec_done = rule.shape == Shape::Exec
        && matches!(
            status,
            Some("running" | "completed" | "failed" | "approval-pending" | "approval-unavailable")
        );
    let mask = filter.mask;
    let values = Filter {
        ignore: filter.ignore,
        mask,
        ..Filter::KEEP
    };
    let drop_text = filter
        .ignore
        .is_some_and(|p| p.drops_root("text") || p.drops_root("content"));
    Some(Fingerprint(hash_with(|d| {
        if exec_done {
            exec_outcome(d, status.unwrap_or_default(), details, &text, mask);
        } else if rule.shape == Shape::ProcessPoll || rule.shape == Shape::ProcessLog {
            process_outcome(d, rule.shape, details, &text, mask);
        } else if rule.send {
            match details {
                Some(map) => d.value_map(
                    map,
                    Filter {
                        send_ids: true,
                        ..values
                    },
                    &["details"],
                ),
                None => d.object(0),
            }
        } else {
            // {details, text}; update_plan keeps only the plan shape and ignores ack text.
            d.object(2);
            d.key("details");
            if rule.shape == Shape::UpdatePlan {
                plan_shape_of_map(d, details);
            } else {
                match details {
                    Some(map) => d.value_map(map, values, &["details"]),
                    None => d.object(0),
                }
            }
            d.key("text");
            if rule.shape == Shape::UpdatePlan || drop_text {
                d.str("");
            } else {
                text.encode(d, mask);
            }
        }
    })))
}

fn exec_outcome(
    d: &mut Digest,
    status: &str,
    details: Option<&Map<String, Value>>,
    text: &ContentText<'_>,
    mask: MaskSet,
) {
    let get = |k: &str| details.and_then(|m| m.get(k));
    let str_or = |k: &str| get(k).and_then(Value::as_str);
    match status {
        "running" => {
            d.object(2);
            d.key("status");
            d.str(status);
            d.key("tail");
            d.str_value(str_or("tail").unwrap_or(""), mask);
        }
        "completed" | "failed" => {
            d.object(4);
            d.key("exitCode");
            match get("exitCode") {
                Some(Value::Number(n)) => d.number(n),
                _ => d.null(),
            }
            d.key("output");
            match str_or("aggregated").and_then(non_blank) {
                Some(aggregated) => d.str_value(aggregated, mask),
                None => text.encode(d, mask),
            }
            d.key("status");
            d.str(status);
            d.key("timedOut");
            d.bool(get("timedOut") == Some(&Value::Bool(true)));
        }
        _ => {
            // approval-pending / approval-unavailable
            d.object(5);
            d.key("command");
            d.str(str_or("command").unwrap_or(""));
            d.key("host");
            opt_str(d, str_or("host"));
            d.key("reason");
            opt_str(d, str_or("reason"));
            d.key("status");
            d.str(status);
            d.key("warningText");
            d.str_value(str_or("warningText").unwrap_or(""), mask);
        }
    }
}

fn process_outcome(
    d: &mut Digest,
    shape: Shape,
    details: Option<&Map<String, Value>>,
    text: &ContentText<'_>,
    mask: MaskSet,
) {
    let values = Filter {
        mask,
        ..Filter::KEEP
    };
    let field = |d: &mut Digest, k: &str| match details.and_then(|m| m.get(k)) {
        Some(v) => d.value_filtered(v, values),
        None => d.null(),
    };
    if shape == Shape::ProcessPoll {
        // {action, status, exitCode, exitSignal, aggregated, text}, keys in byte order.
        d.object(6);
        d.key("action");
        d.str("poll");
        d.key("aggregated");
        field(d, "aggregated");
        d.key("exitCode");
        field(d, "exitCode");
        d.key("exitSignal");
        field(d, "exitSignal");
        d.key("status");
        field(d, "status");
        d.key("text");
        text.encode(d, mask);
    } else {
        // {action, status, totalLines, totalChars, truncated, exitCode, exitSignal, text}
        d.object(8);
        d.key("action");
        d.str("log");
        d.key("exitCode");
        field(d, "exitCode");
        d.key("exitSignal");
        field(d, "exitSignal");
        d.key("status");
        field(d, "status");
        d.key("text");
        text.encode(d, mask);
        d.key("totalChars");
        field(d, "totalChars");
        d.key("totalLines");
        field(d, "totalLines");
        d.key("truncated");
        field(d, "truncated");
    }
}

fn opt_str(d: &mut Digest, s: Option<&str>) {
    match s {
        Some(s) => d.str(s),
        None => d.null(),
    }
}

/// Encodes the plan shape of a value (SPEC §2): non-objects as themselves.
fn plan_shape(d: &mut Digest, value: &Value) {
    match value {
        Value::Object(map) => plan_shape_of_map(d, Some(map)),
        other => d.value(other),
    }
}

/// `{planLength, statuses, stepPresence, hasExplanation}` of an object (`None` = `{}`).
fn plan_shape_of_map(d: &mut Digest, map: Option<&Map<String, Value>>) {
    let plan: &[Value] = map
        .and_then(|m| m.get("plan"))
        .and_then(Value::as_array)
        .map_or(&[], Vec::as_slice);
    let explanation = map
        .and_then(|m| m.get("explanation"))
        .and_then(Value::as_str)
        .and_then(non_blank)
        .is_some();
    d.object(4);
    d.key("hasExplanation");
    d.bool(explanation);
    d.key("planLength");
    d.int(plan.len() as i128);
    d.key("statuses");
    d.array(plan.len());
    for entry in plan {
        opt_str(
            d,
            entry
                .as_object()
                .and_then(|e| e.get("status"))
                .and_then(Value::as_str),
        );
    }
    d.key("stepPresence");
    d.array(plan.len());
    for entry in plan {
        let has_step = entry
            .as_object()
            .and_then(|e| e.get("step"))
            .and_then(Value::as_str)
            .and_then(non_blank)
            .is_some();
        d.bool(has_step);
    }
}

/// The `text` of a result: every `content` element with string `type` and `text`, joined
/// by `\n` and trimmed, read in place without building the joined string.
struct ContentText<'a> {
    items: &'a [Value],
}

impl<'a> ContentText<'a> {
    fn new(content: Option<&'a Value>) -> Self {
        let items = content
            .and_then(Value::as_array)
            .map_or(&[][..], Vec::as_slice);
        Self { items }
    }

    fn texts(&self) -> impl DoubleEndedIterator<Item = &'a str> + Clone + 'a {
        self.items.iter().filter_map(|item| {
            let item = item.as_object()?;
            item.get("type")?.as_str()?;
            item.get("text")?.as_str()
        })
    }

    /// The joined text as pieces. A separator before the first text is harmless: it is
    /// whitespace, and the result is always trimmed.
    fn pieces(&self) -> impl DoubleEndedIterator<Item = &'a str> + Clone + 'a {
        self.texts().flat_map(|t| ["\n", t])
    }

    /// Encodes the trimmed joined text as an `lg1` string, masked when asked.
    fn encode(&self, d: &mut Digest, mask: MaskSet) {
        let mut texts = self.texts();
        match (texts.next(), texts.next()) {
            (None, _) => d.str(""),
            // The common case: one text block, nothing to join.
            (Some(only), None) => d.str_value(trim(only), mask),
            _ if mask.is_empty() => d.str_pieces(self.trimmed()),
            _ => {
                let joined: String = self.trimmed().collect();
                d.str_value(&joined, mask);
            }
        }
    }

    /// The trimmed joined text, as slices of the original strings.
    fn trimmed(&self) -> impl Iterator<Item = &'a str> + Clone + 'a {
        let mut start = None;
        let mut count = 0;
        for (i, p) in self.pieces().enumerate() {
            count += 1;
            if start.is_none() {
                let rest = p.trim_start_matches(is_js_space);
                if !rest.is_empty() {
                    start = Some((i, p.len() - rest.len()));
                }
            }
        }
        let mut end = None;
        if start.is_some() {
            for (j, p) in self.pieces().rev().enumerate() {
                let kept = p.trim_end_matches(is_js_space);
                if !kept.is_empty() {
                    end = Some((count - 1 - j, kept.len()));
                    break;
                }
            }
        }
        let ((si, sb), (ei, eb)) = match (start, end) {
            (Some(s), Some(e)) => (s, e),
            _ => ((0, 0), (0, 0)),
        };
        let take = if start.is_some() { ei + 1 - si } else { 0 };
        self.pieces()
            .enumerate()
            .skip(si)
            .take(take)
            .map(move |(i, p)| {
                let lo = if i == si { sb } else { 0 };
                let hi = if i == ei { eb } else { p.len() };
                &p[lo..hi]
            })
    }
}

/// The text an error is hashed by (SPEC §2 rule 1).
pub fn error_text(error: &Value) -> Cow<'_, str> {
    match error {
        Value::String(s) => Cow::Borrowed(s),
        Value::Object(map) => {
            let message = map
                .get("message")
                .and_then(Value::as_str)
                .filter(|s| !s.is_empty());
            match message.or_else(|| map.get("name").and_then(Value::as_str)) {
                Some(s) => Cow::Borrowed(s),
                None => Cow::Owned(json_text(error)),
            }
        }
        Value::Number(n) => Cow::Owned(number_text(n)),
        Value::Bool(b) => Cow::Borrowed(if *b { "true" } else { "false" }),
        Value::Null | Value::Array(_) => Cow::Owned(json_text(error)),
    }
}

/// ECMAScript's `\s`, spelled out so that the match is the same as the reference's.
const JS_SPACE: &str = r"[\t\n\x0B\x0C\r \x{A0}\x{1680}\x{2000}-\x{200A}\x{2028}\x{2029}\x{202F}\x{205F}\x{3000}\x{FEFF}]";

static UNKNOWN_TOOL: LazyLock<[Regex; 2]> =
    LazyLock::new(|| {
        let name = r#"((?i-u:[a-z0-9_.-])+)"#;
        [
        Regex::new(&format!(r#"(?i-u:unknown tool)(?:[:]|{JS_SPACE})+["']?{name}"#))
            .expect("valid pattern"),
        Regex::new(&format!(
            r#"(?i-u:tool){JS_SPACE}+["']?{name}["']?{JS_SPACE}+(?i-u:not found|is not available)"#
        ))
        .expect("valid pattern"),
    ]
    });

/// The unavailable tool an error text names, lower-cased: `unknown tool: NAME`,
/// `tool NAME not found` or `tool NAME is not available` (case-insensitive).
pub fn unknown_tool_name(text: &str) -> Option<String> {
    let raw = trim(text);
    if raw.is_empty() {
        return None;
    }
    UNKNOWN_TOOL.iter().find_map(|re| {
        let name = re.captures(raw)?.get(1)?.as_str();
        (!name.is_empty()).then(|| name.to_ascii_lowercase())
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn fp(tool: &str, args: Value, outcome: Outcome<'_>) -> OutcomePrint {
        OutcomePrint::new(OutcomeRule::for_call(tool, &args), outcome)
    }

    fn hash(tool: &str, args: Value, result: Value) -> Fingerprint {
        match fp(tool, args, Outcome::Result(&result)) {
            OutcomePrint::Hashed { fingerprint, .. } => fingerprint,
            other => panic!("expected a hash, got {other:?}"),
        }
    }

    fn err(e: Value) -> (Fingerprint, Option<String>) {
        match fp("read", json!({}), Outcome::Error(&e)) {
            OutcomePrint::Hashed {
                fingerprint,
                unknown_tool,
            } => (fingerprint, unknown_tool),
            other => panic!("expected a hash, got {other:?}"),
        }
    }

    #[test]
    fn display_is_32_hex_digits() {
        let f = Fingerprint::of(&json!({"a": 1}));
        let s = f.to_string();
        assert_eq!(s.len(), 32);
        assert!(s
            .chars()
            .all(|c| c.is_ascii_hexdigit() && !c.is_ascii_uppercase()));
    }

    #[test]
    fn signature_fast_path_equals_the_digest() {
        for tool in ["", "read", &"x".repeat(64), &"y".repeat(65)] {
            let fp = Fingerprint::from_u128(0x1234_5678_9abc_def0_1122_3344_5566_7788);
            let slow = crate::canonical::hash_with(|d| {
                d.str(tool);
                d.write(&fp.as_u128().to_le_bytes());
            });
            assert_eq!(Signature::new(tool, fp).as_u128(), slow, "{}", tool.len());
        }
    }

    #[test]
    fn signature_pairs_tool_and_args() {
        let a = CallPrint::new(" read ", &json!({"p": 1}));
        let b = CallPrint::new("read", &json!({"p": 1}));
        let c = CallPrint::new("list", &json!({"p": 1}));
        assert_eq!(a.tool, "read");
        assert_eq!(a.signature, b.signature);
        assert_eq!(a.args, c.args);
        assert_ne!(a.signature, c.signature);
    }

    #[test]
    fn rule1_error_forms_share_text() {
        let (a, _) = err(json!("boom"));
        assert_eq!(a, err(json!({"message": "boom", "name": "E"})).0);
        assert_eq!(a, err(json!({"message": "", "name": "boom"})).0);
        assert_ne!(a, err(json!({"message": "other"})).0);
        assert_eq!(err(json!(42)).0, err(json!("42")).0);
        assert_eq!(err(json!(42.0)).0, err(json!("42")).0);
        assert_eq!(err(json!(true)).0, err(json!("true")).0);
        assert_eq!(err(json!(null)).0, err(json!("null")).0);
        assert_eq!(err(json!({"code": 1})).0, err(json!("{\"code\":1}")).0);
        // Errors never collide with results of the same text.
        assert_ne!(a, hash("read", json!({}), json!("boom")));
    }

    #[test]
    fn rule1_unknown_tool_names() {
        let cases = [
            ("Tool exec not found", Some("exec")),
            ("Unknown tool: foo", Some("foo")),
            ("unknown tool 'Foo.Bar'", Some("foo.bar")),
            ("Unknown tool id: missing_b", Some("id")),
            ("tool \"x-y\" is not available", Some("x-y")),
            ("  UNKNOWN TOOL::: web_fetch2", Some("web_fetch2")),
            ("tool exec failed", None),
            ("no such tool", None),
            ("", None),
        ];
        for (text, want) in cases {
            assert_eq!(unknown_tool_name(text).as_deref(), want, "{text}");
        }
        assert_eq!(
            err(json!({"message": "Unknown tool: zed"})).1.as_deref(),
            Some("zed")
        );
        assert_eq!(
            err(json!({"detail": "Unknown tool: zed"})).1.as_deref(),
            Some("zed")
        );
    }

    #[test]
    fn rule2_non_objects_hash_by_value() {
        assert_eq!(
            hash("read", json!({}), json!("x")),
            Fingerprint::of(&json!("x"))
        );
        assert_eq!(
            hash("read", json!({}), json!([1])),
            Fingerprint::of(&json!([1]))
        );
        assert_ne!(
            hash("read", json!({}), json!(null)),
            hash("read", json!({}), json!("null"))
        );
    }

    #[test]
    fn rule3_text_is_joined_and_trimmed() {
        let a = hash(
            "read",
            json!({}),
            json!({"content": [{"type": "text", "text": "  a"}, {"type": "image"}, {"type": "text", "text": "b \n"}]}),
        );
        let b = hash(
            "read",
            json!({}),
            json!({"content": [{"type": "text", "text": "a\nb"}]}),
        );
        assert_eq!(a, b);
        let explicit = Fingerprint::of(&json!({"details": {}, "text": "a\nb"}));
        assert_eq!(a, explicit);
        // Elements without a string type do not count; blank texts vanish at the edges.
        let c = hash(
            "read",
            json!({}),
            json!({"content": [{"text": "zzz"}, {"type": "text", "text": " "}, {"type": "text", "text": "a\nb"}, {"type": "text", "text": "\n"}]}),
        );
        assert_eq!(c, b);
        let empty = hash("read", json!({}), json!({"content": "not an array"}));
        assert_eq!(empty, Fingerprint::of(&json!({"details": {}, "text": ""})));
    }

    #[test]
    fn rule4_loop_veto_has_no_fingerprint() {
        let veto = json!({"details": {"status": "blocked", "deniedReason": "tool-loop"}});
        assert_eq!(
            fp("read", json!({}), Outcome::Result(&veto)),
            OutcomePrint::Veto
        );
        let plugin = json!({"details": {"status": "blocked", "deniedReason": "plugin"}});
        assert!(matches!(
            fp("read", json!({}), Outcome::Result(&plugin)),
            OutcomePrint::Hashed { .. }
        ));
        assert_eq!(
            fp("read", json!({}), Outcome::Nothing),
            OutcomePrint::Nothing
        );
    }

    #[test]
    fn rule5_exec_ignores_volatile_fields() {
        let r = |details: Value, text: &str| {
            hash(
                "exec",
                json!({"command": "ls"}),
                json!({"details": details, "content": [{"type": "text", "text": text}]}),
            )
        };
        assert_eq!(
            r(
                json!({"status": "running", "tail": "x", "pid": 1, "sessionId": "a"}),
                "t1"
            ),
            r(
                json!({"status": "running", "tail": "x", "pid": 2, "sessionId": "b"}),
                "t2"
            )
        );
        assert_eq!(
            r(json!({"status": "running"}), "a"),
            Fingerprint::of(&json!({"status": "running", "tail": ""}))
        );
        assert_eq!(
            r(
                json!({"status": "completed", "exitCode": 0, "durationMs": 5, "cwd": "/a", "aggregated": " out "}),
                "x"
            ),
            Fingerprint::of(
                &json!({"status": "completed", "exitCode": 0, "timedOut": false, "output": "out"})
            )
        );
        assert_eq!(
            r(
                json!({"status": "failed", "exitCode": "1", "timedOut": "yes", "aggregated": "  "}),
                " text "
            ),
            Fingerprint::of(
                &json!({"status": "failed", "exitCode": null, "timedOut": false, "output": "text"})
            )
        );
        assert_eq!(
            r(
                json!({"status": "approval-pending", "reason": "r", "command": 5}),
                "x"
            ),
            Fingerprint::of(
                &json!({"status": "approval-pending", "reason": "r", "host": null, "command": "", "warningText": ""})
            )
        );
        // Unknown statuses fall through to the default rule.
        assert_eq!(
            r(json!({"status": "weird"}), "x"),
            Fingerprint::of(&json!({"details": {"status": "weird"}, "text": "x"}))
        );
    }

    #[test]
    fn rule6_process_poll_and_log() {
        let poll = hash(
            "process",
            json!({"action": "poll"}),
            json!({"details": {"status": "running", "aggregated": "a", "pid": 9}, "content": [{"type": "text", "text": "t"}]}),
        );
        assert_eq!(
            poll,
            Fingerprint::of(
                &json!({"action": "poll", "status": "running", "exitCode": null, "exitSignal": null, "aggregated": "a", "text": "t"})
            )
        );
        let log = hash(
            "process",
            json!({"action": "log"}),
            json!({"details": {"totalLines": 3}}),
        );
        assert_eq!(
            log,
            Fingerprint::of(
                &json!({"action": "log", "status": null, "totalLines": 3, "totalChars": null, "truncated": null, "exitCode": null, "exitSignal": null, "text": ""})
            )
        );
        // Other process actions hash fully.
        let kill = hash(
            "process",
            json!({"action": "kill"}),
            json!({"details": {"pid": 1}}),
        );
        assert_eq!(
            kill,
            Fingerprint::of(&json!({"details": {"pid": 1}, "text": ""}))
        );
    }

    #[test]
    fn rule7_sends_strip_volatile_ids() {
        let a = hash(
            "message",
            json!({"action": "send", "text": "hi"}),
            json!({"details": {"ok": true, "messageId": "1", "results": [{"receipt": 1, "to": "x"}], "msg": {"id": "m1", "text": "hi", "direction": "out"}, "conversation": {"id": "c1"}}, "content": [{"type": "text", "text": "sent 1"}]}),
        );
        let b = hash(
            "message",
            json!({"action": "send", "text": "hi"}),
            json!({"details": {"ok": true, "messageId": "2", "results": [{"receipt": 2, "to": "x"}], "msg": {"id": "m2", "text": "hi", "direction": "out"}, "conversation": {"id": "c1"}}, "content": [{"type": "text", "text": "sent 2"}]}),
        );
        assert_eq!(a, b);
        assert_eq!(
            a,
            Fingerprint::of(
                &json!({"ok": true, "results": [{"to": "x"}], "msg": {"text": "hi", "direction": "out"}, "conversation": {"id": "c1"}})
            )
        );
        let other_room = hash(
            "message",
            json!({"action": "send", "text": "hi"}),
            json!({"details": {"ok": true, "conversation": {"id": "c2"}}}),
        );
        assert_ne!(a, other_room);
        // A read is not a send: ids are progress.
        let r1 = hash(
            "message",
            json!({"action": "read"}),
            json!({"details": {"messageId": "1"}}),
        );
        let r2 = hash(
            "message",
            json!({"action": "read"}),
            json!({"details": {"messageId": "2"}}),
        );
        assert_ne!(r1, r2);
    }

    #[test]
    fn rule8_update_plan_shape() {
        let a = hash(
            "update_plan",
            json!({}),
            json!({"details": {"plan": [{"step": "a", "status": "done"}, "x"], "explanation": "e"}, "content": [{"type": "text", "text": "ack"}]}),
        );
        let b = hash(
            "update_plan",
            json!({}),
            json!({"details": {"plan": [{"step": "reworded", "status": "done"}, 7], "explanation": "other"}}),
        );
        assert_eq!(a, b);
        assert_eq!(
            a,
            Fingerprint::of(
                &json!({"details": {"planLength": 2, "statuses": ["done", null], "stepPresence": [true, false], "hasExplanation": true}, "text": ""})
            )
        );
        let args1 = args_fingerprint(
            "update_plan",
            &json!({"plan": [{"step": "x", "status": "pending"}]}),
        );
        let args2 = args_fingerprint(
            "update_plan",
            &json!({"plan": [{"step": "y", "status": "pending"}]}),
        );
        let args3 = args_fingerprint(
            "update_plan",
            &json!({"plan": [{"step": "y", "status": "completed"}]}),
        );
        assert_eq!(args1, args2);
        assert_ne!(args2, args3);
        assert_eq!(
            args_fingerprint("update_plan", &json!([1])),
            Fingerprint::of(&json!([1]))
        );
    }

    #[test]
    fn rule9_default() {
        let a = hash(
            "read",
            json!({}),
            json!({"details": {"x": 1}, "content": [{"type": "text", "text": "t"}], "extra": 5}),
        );
        assert_eq!(
            a,
            Fingerprint::of(&json!({"details": {"x": 1}, "text": "t"}))
        );
        let no_details = hash("read", json!({}), json!({"details": [1]}));
        assert_eq!(
            no_details,
            Fingerprint::of(&json!({"details": {}, "text": ""}))
        );
    }
}
