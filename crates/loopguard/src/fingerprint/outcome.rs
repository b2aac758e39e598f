//! Outcome fingerprints: the first matching rule of SPEC §2 (1–9) reduces what a call
//! returned, then the reduced value is hashed.

use serde_json::Value;

use super::call::{plan_shape_of_map, Shape};
use super::error_text::{error_text, unknown_tool_in};
use super::{Fingerprint, OutcomeRule};
use crate::canonical::{hash_with, Digest, Filter, PathSet};
use crate::config::EffectiveConfig;
use crate::json::{Json, Member, Object, Raw, Read, Str};
use crate::masking::MaskSet;
use crate::policy::BUILTIN;
use crate::text::is_js_space;

/// What the outcome rules (SPEC §2 rules 2–9) and the failure table
/// ([`super::failure_of`]) read of a result: `content` (of each of its elements, `type`
/// and `text`), `details`, and the failure table's top-level fields (`isError`, `status`,
/// `ok`, `error`; a test in the policy checks the table against this list). Readers of
/// event text leave the rest of a result out of the tape
/// ([`crate::json::Tape::parse_read`]); a property test checks that doing so changes no
/// fingerprint and no failure.
pub const RESULT_READ: Read = Read::Members(&[
    Member::new(
        "content",
        Read::Items(&Read::Members(&[
            Member::new("type", Read::All),
            Member::new("text", Read::All),
        ])),
    ),
    Member::new("details", Read::All),
    Member::new("isError", Read::All),
    Member::new("status", Read::All),
    Member::new("ok", Read::All),
    Member::new("error", Read::All),
]);

/// What a tool call returned, in any [`Json`] view.
#[derive(Clone, Copy, Debug)]
pub enum OutcomeOf<J> {
    /// The tool's result value.
    Result(J),
    /// The error the call failed with (any JSON value, including `null`).
    Error(J),
    /// Neither a result nor an error: nothing to fingerprint, nothing is recorded.
    Nothing,
}

impl<J> OutcomeOf<J> {
    /// The same outcome with its value seen through `view` (another [`Json`] view of it).
    pub fn map<K>(self, view: impl FnOnce(J) -> K) -> OutcomeOf<K> {
        match self {
            Self::Result(v) => OutcomeOf::Result(view(v)),
            Self::Error(v) => OutcomeOf::Error(view(v)),
            Self::Nothing => OutcomeOf::Nothing,
        }
    }
}

/// What a tool call returned, as `serde_json` values.
pub type Outcome<'a> = OutcomeOf<&'a Value>;

/// What a tool call returned, as raw JSON text ([`crate::json::Raw`]).
pub type RawOutcome<'a> = OutcomeOf<Raw<'a>>;

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
    pub fn new<'a, J: Json<'a>>(rule: OutcomeRule, outcome: OutcomeOf<J>) -> Self {
        Self::filtered(rule, outcome, OutcomeFilter::default())
    }

    /// Reduces and hashes an outcome under a config: its `loopguard` block may mask
    /// volatile tokens and leave result paths out.
    pub fn for_config<'a, J: Json<'a>>(
        rule: OutcomeRule,
        outcome: OutcomeOf<J>,
        cfg: &EffectiveConfig,
    ) -> Self {
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

    fn filtered<'a, J: Json<'a>>(
        rule: OutcomeRule,
        outcome: OutcomeOf<J>,
        filter: OutcomeFilter<'_>,
    ) -> Self {
        match outcome {
            OutcomeOf::Nothing => Self::Nothing,
            OutcomeOf::Error(error) => {
                let text = error_text(error);
                let text = text.as_string();
                let fingerprint = Fingerprint(hash_with(|d| {
                    d.write(b"E");
                    d.str_value(text, filter.mask);
                }));
                Self::Hashed {
                    fingerprint,
                    unknown_tool: unknown_tool_in(text),
                }
            }
            OutcomeOf::Result(result) => match result_fingerprint(rule, result, filter) {
                Some(fingerprint) => Self::Hashed {
                    fingerprint,
                    unknown_tool: None,
                },
                None => Self::Veto,
            },
        }
    }
}

/// Rules 2–9 for a result value; `None` for a loop veto.
fn result_fingerprint<'a, J: Json<'a>>(
    rule: OutcomeRule,
    result: J,
    filter: OutcomeFilter<'_>,
) -> Option<Fingerprint> {
    let Some(object) = result.as_object() else {
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
    let details = object.get("details").and_then(Json::as_object);
    let text = ContentText::new(object.get("content"));
    let status = details.and_then(|d| d.get("status")).and_then(Json::as_str);
    let field = |k: &str| details.and_then(|d| d.get(k));
    if status == Some("blocked")
        && field("deniedReason").and_then(Json::as_str) == Some("tool-loop")
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
                Some(map) => d.object_filtered(
                    map,
                    Filter {
                        send_noise: Some(BUILTIN.send_noise()),
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
                    Some(map) => d.object_filtered(map, values, &["details"]),
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

fn exec_outcome<'a, O: Object<'a>>(
    d: &mut Digest,
    status: &str,
    details: Option<O>,
    text: &ContentText<'a, O::Value>,
    mask: MaskSet,
) {
    let get = |k: &str| details.and_then(|m| m.get(k));
    let str_or = |k: &str| get(k).and_then(Json::as_string);
    match status {
        "running" => {
            d.object(2);
            d.key("status");
            d.str(status);
            d.key("tail");
            d.str_value(str_or("tail").unwrap_or(Str::Text("")), mask);
        }
        "completed" | "failed" => {
            d.object(4);
            d.key("exitCode");
            match get("exitCode").and_then(Json::as_number) {
                Some(n) => d.num(n),
                None => d.null(),
            }
            d.key("output");
            match str_or("aggregated").and_then(Str::non_blank) {
                Some(aggregated) => d.str_value(aggregated, mask),
                None => text.encode(d, mask),
            }
            d.key("status");
            d.str(status);
            d.key("timedOut");
            d.bool(get("timedOut").and_then(Json::as_bool) == Some(true));
        }
        _ => {
            // approval-pending / approval-unavailable
            d.object(5);
            d.key("command");
            d.string(str_or("command").unwrap_or(Str::Text("")));
            d.key("host");
            opt_str(d, str_or("host"));
            d.key("reason");
            opt_str(d, str_or("reason"));
            d.key("status");
            d.str(status);
            d.key("warningText");
            d.str_value(str_or("warningText").unwrap_or(Str::Text("")), mask);
        }
    }
}

fn process_outcome<'a, O: Object<'a>>(
    d: &mut Digest,
    shape: Shape,
    details: Option<O>,
    text: &ContentText<'a, O::Value>,
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

fn opt_str(d: &mut Digest, s: Option<Str<'_>>) {
    match s {
        Some(s) => d.string(s),
        None => d.null(),
    }
}

/// The `text` of a result: every `content` element with string `type` and `text`, joined
/// by `\n` and trimmed, read in place without building the joined string.
struct ContentText<'a, J: Json<'a>> {
    items: Option<J::Items>,
}

impl<'a, J: Json<'a>> ContentText<'a, J> {
    fn new(content: Option<J>) -> Self {
        Self {
            items: content.and_then(Json::as_array),
        }
    }

    fn texts(&self) -> impl Iterator<Item = Str<'a>> + Clone {
        self.items.clone().into_iter().flatten().filter_map(|item| {
            let item = item.as_object()?;
            item.get("type")?.as_string()?;
            item.get("text")?.as_string()
        })
    }

    /// Encodes the trimmed joined text as an `lg1` string, masked when asked.
    fn encode(&self, d: &mut Digest, mask: MaskSet) {
        let mut texts = self.texts();
        match (texts.next(), texts.next()) {
            (None, _) => d.str(""),
            // The common case: one text block, nothing to join.
            (Some(only), None) => d.str_value(only.trim(), mask),
            _ => match self.unicode() {
                Some(pieces) if mask.is_empty() => d.str_pieces(trimmed(pieces)),
                Some(pieces) => {
                    let joined: String = trimmed(pieces).collect();
                    d.str_value(Str::Text(&joined), mask);
                }
                None => {
                    // Some text holds a lone surrogate (raw JSON only): join as WTF-8.
                    let mut joined = Vec::new();
                    for t in self.texts() {
                        joined.push(b'\n');
                        joined.extend_from_slice(t.as_bytes());
                    }
                    d.str_value(Str::Wtf8(&joined).trim(), mask);
                }
            },
        }
    }

    /// The joined text as pieces, when every text is Unicode. A separator before the
    /// first text is harmless: it is whitespace, and the result is always trimmed.
    fn unicode(&self) -> Option<impl Iterator<Item = &'a str> + Clone> {
        self.texts().all(|t| t.as_str().is_some()).then(|| {
            self.texts()
                .flat_map(|t| ["\n", t.as_str().unwrap_or_default()])
        })
    }
}

/// The trimmed concatenation of `pieces`, as slices of them.
fn trimmed<'a>(
    pieces: impl Iterator<Item = &'a str> + Clone,
) -> impl Iterator<Item = &'a str> + Clone {
    // The first piece with something visible (and where in it that starts), and the last
    // one (and where in it that ends).
    let mut start = None;
    let mut end = (0, 0);
    for (i, p) in pieces.clone().enumerate() {
        let rest = p.trim_start_matches(is_js_space);
        if !rest.is_empty() {
            if start.is_none() {
                start = Some((i, p.len() - rest.len()));
            }
            end = (i, p.trim_end_matches(is_js_space).len());
        }
    }
    let ((si, sb), (ei, eb)) = match start {
        Some(s) => (s, end),
        None => ((0, 0), (0, 0)),
    };
    let take = if start.is_some() { ei + 1 - si } else { 0 };
    pieces.enumerate().skip(si).take(take).map(move |(i, p)| {
        let lo = if i == si { sb } else { 0 };
        let hi = if i == ei { eb } else { p.len() };
        &p[lo..hi]
    })
}
