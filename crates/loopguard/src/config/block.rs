//! The config blocks as written, each key declared once.
//!
//! Every block that holds plain settings is one entry of the [`blocks!`] table below, one
//! line per key: the key as written, the Rust field, its type and what it accepts. From
//! that line come the struct field (serialized under the same key), the per-agent overlay
//! (an agent's key wins, nested blocks merge key by key), the parser arm with its
//! validation, the block's known keys (the "did you mean" candidates and
//! [`known_keys`]), and the [`Field`] description that the OpenClaw
//! plugin's JSON schema is checked against. Adding a key is adding a line; what the key
//! does is then up to the code that compiles the block ([`EffectiveConfig`] for
//! `tools.loopDetection`, [`Extensions`] for the `loopguard` detectors), and a test fails
//! until it does something.
//!
//! The `loopguard` block itself, its `policy` and its tool rules hold enumerations, globs
//! and lists with rules of their own: `document.rs` parses them by hand, and their keys
//! are described once here ([`EXTENSIONS`]); `known_keys_are_the_parsers_keys` checks
//! those hand-written arms against the description. What a key may hold ([`Kind`]) and
//! the readers of each kind of value are `value.rs`'s, below the table.
//!
//! [`EffectiveConfig`]: super::EffectiveConfig
//! [`Extensions`]: super::extensions::Extensions

use std::sync::OnceLock;

use serde::Serialize;

use super::locate::Segment;
use super::value::{
    self, Checker, Decimal, Node, UtcOffset, MAX_BUDGET_COST, MAX_BUDGET_TOKENS, MAX_CYCLE_LENGTH,
    MAX_PRICE, MAX_PRICES, MAX_STORM_MINUTES, MAX_THRESHOLD, MAX_WALL_SECONDS, MAX_WINDOW,
};
pub(crate) use super::value::{Block, Field, Kind};

/// How a field is laid over: a value set by the agent wins, a block merges key by key.
trait Merge {
    fn merge(&self, top: &Self) -> Self;
}

impl<T: Clone> Merge for Option<T> {
    fn merge(&self, top: &Self) -> Self {
        top.clone().or_else(|| self.clone())
    }
}

/// The parser of one kind of value (the `what` column of the table).
macro_rules! read {
    (switch, $v:ident, $p:ident, $c:ident) => {
        value::boolean($v, $p, $c)
    };
    (count($max:expr), $v:ident, $p:ident, $c:ident) => {
        value::count($v, $p, $max, $c)
    };
    (gap($max:expr), $v:ident, $p:ident, $c:ident) => {
        value::gap($v, $p, $max, $c)
    };
    (period($min:expr, $max:expr), $v:ident, $p:ident, $c:ident) => {
        value::period($v, $p, $min, $max, $c)
    };
    (mask_rules, $v:ident, $p:ident, $c:ident) => {
        Some(value::mask_rules($v, $p, $c))
    };
    (block, $v:ident, $p:ident, $c:ident) => {
        value::parse_block($v, $p, $c)
    };
    (tokens($max:expr), $v:ident, $p:ident, $c:ident) => {
        value::big_count($v, $p, $max, $c)
    };
    (amount($max:expr), $v:ident, $p:ident, $c:ident) => {
        value::decimal($v, $p, true, $max, $c)
    };
    (rate($max:expr), $v:ident, $p:ident, $c:ident) => {
        value::decimal($v, $p, false, $max, $c)
    };
    (utc_offset, $v:ident, $p:ident, $c:ident) => {
        value::utc_offset($v, $p, $c)
    };
}

/// The description of one kind of value.
macro_rules! kind {
    (switch, $ty:ty) => {
        Kind::Switch
    };
    (count($max:expr), $ty:ty) => {
        Kind::Count { min: 1, max: $max }
    };
    // 0 is meaningful: failures strictly in a row.
    (gap($max:expr), $ty:ty) => {
        Kind::Count { min: 0, max: $max }
    };
    (period($min:expr, $max:expr), $ty:ty) => {
        Kind::Count {
            min: $min as u64,
            max: $max as u64,
        }
    };
    (mask_rules, $ty:ty) => {
        Kind::MaskRules
    };
    (block, $ty:ty) => {
        Kind::Block(<$ty as Block>::FIELDS)
    };
    (tokens($max:expr), $ty:ty) => {
        Kind::Count { min: 1, max: $max }
    };
    (amount($max:expr), $ty:ty) => {
        Kind::Decimal {
            positive: true,
            max: $max,
        }
    };
    (rate($max:expr), $ty:ty) => {
        Kind::Decimal {
            positive: false,
            max: $max,
        }
    };
    (utc_offset, $ty:ty) => {
        Kind::UtcOffset
    };
}

/// The table: `"key" => field: Type = what,` per line, where `what` is `switch`,
/// `count(max)` (1 to max), `tokens(max)` (the same, beyond 32 bits), `gap(max)` (0 to
/// max), `period(min, max)`, `amount(max)` (a decimal above 0), `rate(max)` (a decimal
/// from 0), `utc_offset`, `mask_rules`, or `block` (a nested block of the table, merged
/// key by key).
macro_rules! blocks {
    ($(
        $(#[doc = $doc:literal])*
        $name:ident {
            $(
                $(#[doc = $field_doc:literal])*
                $key:literal => $field:ident: $ty:ty = $what:ident $(($($arg:tt)*))?,
            )*
        }
    )*) => {$(
        $(#[doc = $doc])*
        #[derive(Clone, Debug, Default, PartialEq, Eq, Serialize)]
        pub struct $name {
            $(
                $(#[doc = $field_doc])*
                #[serde(rename = $key)]
                pub $field: $ty,
            )*
        }

        impl $name {
            /// `agent` laid over `self` field by field; nested blocks merge key by key.
            pub fn overlay(&self, agent: &Self) -> Self {
                Self { $($field: Merge::merge(&self.$field, &agent.$field),)* }
            }
        }

        impl Merge for $name {
            fn merge(&self, top: &Self) -> Self {
                self.overlay(top)
            }
        }

        impl Block for $name {
            const FIELDS: &'static [Field] =
                &[$(Field { key: $key, kind: kind!($what $(($($arg)*))?, $ty) },)*];

            fn read(
                &mut self,
                key: &str,
                value: &Node,
                path: &[Segment],
                checker: &mut Checker<'_>,
            ) -> bool {
                match key {
                    $($key => self.$field = read!($what $(($($arg)*))?, value, path, checker),)*
                    _ => return false,
                }
                true
            }
        }
    )*};
}

blocks! {
    /// One `tools.loopDetection` block as written: every field optional.
    LoopDetectionBlock {
        /// Master switch (tri-state: unset is not false).
        "enabled" => enabled: Option<bool> = switch,
        /// Calls kept per run.
        "historySize" => history_size: Option<u32> = count(MAX_WINDOW),
        /// Count at which a pattern warns.
        "warningThreshold" => warning_threshold: Option<u32> = count(MAX_THRESHOLD),
        /// Count at which a no-progress pattern blocks.
        "criticalThreshold" => critical_threshold: Option<u32> = count(MAX_THRESHOLD),
        /// Repeated calls to one unavailable tool before blocking.
        "unknownToolThreshold" => unknown_tool_threshold: Option<u32> = count(MAX_THRESHOLD),
        /// No-progress count that stops the run whatever `detectors` say.
        "globalCircuitBreakerThreshold" =>
            global_circuit_breaker_threshold: Option<u32> = count(MAX_THRESHOLD),
        /// Per-detector switches.
        "detectors" => detectors: DetectorsBlock = block,
        /// Post-compaction guard settings.
        "postCompactionGuard" => post_compaction_guard: GuardBlock = block,
    }

    /// `tools.loopDetection.detectors` as written.
    DetectorsBlock {
        /// `generic_repeat` switch.
        "genericRepeat" => generic_repeat: Option<bool> = switch,
        /// `known_poll_no_progress` switch.
        "knownPollNoProgress" => known_poll_no_progress: Option<bool> = switch,
        /// `ping_pong` switch.
        "pingPong" => ping_pong: Option<bool> = switch,
    }

    /// `tools.loopDetection.postCompactionGuard` as written.
    GuardBlock {
        /// Attempts the guard stays armed, and identical triples that abort.
        "windowSize" => window_size: Option<u32> = count(MAX_WINDOW),
    }

    /// `loopguard.masking` as written.
    MaskingBlock {
        /// On unless `false`.
        "enabled" => enabled: Option<bool> = switch,
        /// Rule names (all when absent).
        "rules" => rules: Option<Vec<String>> = mask_rules,
    }

    /// A `loopguard` detector block with two thresholds (`consecutiveRepeat`,
    /// `targetThrash`, `repeatedMessage`, `contentChanting`, `noToolTurns`), as written.
    LevelsBlock {
        /// On unless `false` (the block's presence turns the detector on).
        "enabled" => enabled: Option<bool> = switch,
        /// Count at which it warns.
        "warningThreshold" => warning_threshold: Option<u32> = count(MAX_THRESHOLD),
        /// Count at which it blocks.
        "criticalThreshold" => critical_threshold: Option<u32> = count(MAX_THRESHOLD),
    }

    /// The `cycle` block, as written.
    CycleBlock {
        /// On unless `false`.
        "enabled" => enabled: Option<bool> = switch,
        /// Shortest period (calls per repetition), at least 2.
        "minLength" => min_length: Option<u32> = period(2, MAX_CYCLE_LENGTH),
        /// Longest period, at most [`MAX_CYCLE_LENGTH`] (and at run time `historySize`).
        "maxLength" => max_length: Option<u32> = period(2, MAX_CYCLE_LENGTH),
        /// Repetitions at which it warns.
        "warningRepeats" => warning_repeats: Option<u32> = count(MAX_THRESHOLD),
        /// Repetitions (with stable outcomes) at which it blocks; may equal
        /// `warningRepeats`.
        "criticalRepeats" => critical_repeats: Option<u32> = count(MAX_THRESHOLD),
    }

    /// The `errorCascade` block, as written.
    CascadeBlock {
        /// On unless `false`.
        "enabled" => enabled: Option<bool> = switch,
        /// Failures at which it warns.
        "warningThreshold" => warning_threshold: Option<u32> = count(MAX_THRESHOLD),
        /// Failures at which it blocks.
        "criticalThreshold" => critical_threshold: Option<u32> = count(MAX_THRESHOLD),
        /// Successful calls allowed between two failures of one run (0: strictly in a row).
        "maxGap" => max_gap: Option<u32> = gap(MAX_WINDOW),
        /// Failures with one error a run needs before it blocks (0: the count alone).
        "repeats" => repeats: Option<u32> = gap(MAX_THRESHOLD),
        /// Failures at which a run blocks when the error it repeats is permanent.
        "permanentThreshold" => permanent_threshold: Option<u32> = count(MAX_THRESHOLD),
    }

    /// The `staleRepeat` block, as written.
    StaleBlock {
        /// On unless `false`.
        "enabled" => enabled: Option<bool> = switch,
        /// Earlier identical outcomes at which it warns.
        "warningThreshold" => warning_threshold: Option<u32> = count(MAX_THRESHOLD),
        /// Earlier identical outcomes at which it blocks.
        "criticalThreshold" => critical_threshold: Option<u32> = count(MAX_THRESHOLD),
        /// Earlier identical failures at which it blocks.
        "failureThreshold" => failure_threshold: Option<u32> = count(MAX_THRESHOLD),
    }

    /// The `escalation` block, as written.
    EscalationBlock {
        /// On unless `false`.
        "enabled" => enabled: Option<bool> = switch,
        /// Attempts to continue a blocked loop after which the run is stopped.
        "stopAfter" => stop_after: Option<u32> = count(MAX_THRESHOLD),
    }

    /// The `runStorm` block, as written: the runs of a session that end the same way.
    RunStormBlock {
        /// On unless `false`.
        "enabled" => enabled: Option<bool> = switch,
        /// The run, counted in a row of runs ending the same way, warned at its first call
        /// of the pattern.
        "warningThreshold" => warning_threshold: Option<u32> = count(MAX_THRESHOLD),
        /// The run, counted the same way, whose calls of the pattern are blocked at once.
        "criticalThreshold" => critical_threshold: Option<u32> = count(MAX_THRESHOLD),
        /// Runs ending the same way after which every run of the session is stopped.
        "stopAfter" => stop_after: Option<u32> = count(MAX_THRESHOLD),
        /// Count the runs ending the same way within this many minutes, others between
        /// them or not (absent: only runs in a row count).
        "windowMinutes" => window_minutes: Option<u32> = count(MAX_STORM_MINUTES),
        /// Minutes a stopped session stays stopped (0: until it is reset).
        "cooldownMinutes" => cooldown_minutes: Option<u32> = gap(MAX_STORM_MINUTES),
    }

    /// The `agentTree` block, as written: the limits on a tree of sub-agents.
    AgentTreeBlock {
        /// On unless `false`.
        "enabled" => enabled: Option<bool> = switch,
        /// Children one parent run may spawn (warned at the limit, blocked past it).
        "maxChildren" => max_children: Option<u32> = count(MAX_THRESHOLD),
        /// Depth of a sub-agent below the root session (the root is 0).
        "maxDepth" => max_depth: Option<u32> = count(MAX_THRESHOLD),
        /// Unfinished children of one parent run at once (0: not counted; a child
        /// finishes when its run ends or it is stopped).
        "maxConcurrent" => max_concurrent: Option<u32> = gap(MAX_THRESHOLD),
        /// Failures the same way of one task after which spawning it again is blocked
        /// (0: not counted).
        "respawn" => respawn: Option<u32> = gap(MAX_THRESHOLD),
    }

    /// A switch-only block (`batchDuplicates`), as written.
    SwitchBlock {
        /// On unless `false`.
        "enabled" => enabled: Option<bool> = switch,
    }

    /// The limits of one scope of `loopguard.budgets` (`run`, `session`, `agent`, `day`),
    /// as written.
    BudgetBlock {
        /// Tokens (input, output and cache, as the provider counts them).
        "tokens" => tokens: Option<u64> = tokens(MAX_BUDGET_TOKENS),
        /// US dollars.
        "cost" => cost: Option<Decimal> = amount(MAX_BUDGET_COST),
        /// Tool calls allowed to run.
        "calls" => calls: Option<u32> = count(MAX_THRESHOLD),
        /// Seconds since the scope's first event.
        "wallSeconds" => wall_seconds: Option<u32> = count(MAX_WALL_SECONDS),
    }

    /// `loopguard.budgets.withoutProgress`, as written: what a run may spend since its
    /// last progress.
    ProgressBudgetBlock {
        /// On unless `false` (a `budgets` block turns it on); `calls` defaults to 20.
        "enabled" => enabled: Option<bool> = switch,
        /// Tokens since the last progress.
        "tokens" => tokens: Option<u64> = tokens(MAX_BUDGET_TOKENS),
        /// US dollars since the last progress.
        "cost" => cost: Option<Decimal> = amount(MAX_BUDGET_COST),
        /// Tool calls since the last progress.
        "calls" => calls: Option<u32> = count(MAX_THRESHOLD),
    }

    /// `loopguard.budgets`, as written.
    BudgetsBlock {
        /// What one run may spend.
        "run" => run: BudgetBlock = block,
        /// What one session may spend, all its runs and agents together.
        "session" => session: BudgetBlock = block,
        /// What one agent may spend in a session.
        "agent" => agent: BudgetBlock = block,
        /// What one session may spend per calendar day.
        "day" => day: BudgetBlock = block,
        /// What a run may spend since its last progress.
        "withoutProgress" => without_progress: ProgressBudgetBlock = block,
        /// The share of a limit at which the model is warned (default 0.8).
        "warnAt" => warn_at: Option<Decimal> = amount(1),
        /// Where calendar days begin, as a UTC offset (default `"UTC"`).
        "timeZone" => time_zone: Option<UtcOffset> = utc_offset,
    }

    /// One model's price in `loopguard.prices`, in US dollars per million tokens, as
    /// written.
    PriceBlock {
        /// Uncached input tokens (required).
        "input" => input: Option<Decimal> = rate(MAX_PRICE),
        /// Output tokens (required).
        "output" => output: Option<Decimal> = rate(MAX_PRICE),
        /// Input tokens read from the prompt cache (default: `input`).
        "cacheRead" => cache_read: Option<Decimal> = rate(MAX_PRICE),
        /// Input tokens written to the prompt cache (default: `input`).
        "cacheWrite" => cache_write: Option<Decimal> = rate(MAX_PRICE),
    }
}

/// What a JSON schema accepts as a UTC offset (`budgets.timeZone`), as
/// `UtcOffset::parse` reads it.
pub const UTC_OFFSET_PATTERN: &str = "^(UTC|Z|(UTC)?[+-]((0[0-9]|1[0-3]):[0-5][0-9]|14:00))$";

/// `loopguard.mode`'s values.
pub(crate) const MODES: &[&str] = &["enforce", "shadow"];
/// A tool rule's `class` values.
pub(crate) const CLASSES: &[&str] = &["poll", "send", "read", "mutate"];

const fn field(key: &'static str, kind: Kind) -> Field {
    Field { key, kind }
}

const fn block<B: Block>() -> Kind {
    Kind::Block(B::FIELDS)
}

/// The `loopguard` block (parsed by hand: `document::parse_extensions`).
pub(crate) const EXTENSIONS: &[Field] = &[
    field("preset", Kind::Preset),
    field("mode", Kind::OneOf(MODES)),
    field("masking", block::<MaskingBlock>()),
    field("policy", Kind::Block(POLICY)),
    field("detectors", Kind::Block(EXT_DETECTORS)),
    field("budgets", block::<BudgetsBlock>()),
    field("prices", Kind::Map(PriceBlock::FIELDS, MAX_PRICES)),
];

/// `loopguard.policy`.
pub(crate) const POLICY: &[Field] = &[
    field("builtin", Kind::Switch),
    field(
        "tools",
        Kind::List(TOOL_RULE, crate::policy::MAX_TOOL_RULES),
    ),
];

/// One `loopguard.policy.tools` entry.
pub(crate) const TOOL_RULE: &[Field] = &[
    field("match", Kind::Pattern),
    field("class", Kind::OneOf(CLASSES)),
    field("ignoreArgs", Kind::Strings),
    field("ignoreResult", Kind::Strings),
    field("mask", Kind::Mask),
    field("target", Kind::Strings),
    field(
        "warningThreshold",
        Kind::Count {
            min: 1,
            max: MAX_THRESHOLD,
        },
    ),
    field(
        "criticalThreshold",
        Kind::Count {
            min: 1,
            max: MAX_THRESHOLD,
        },
    ),
];

/// `loopguard.detectors`: each detector's block of the table.
pub(crate) const EXT_DETECTORS: &[Field] = &[
    field("consecutiveRepeat", block::<LevelsBlock>()),
    field("cycle", block::<CycleBlock>()),
    field("errorCascade", block::<CascadeBlock>()),
    field("staleRepeat", block::<StaleBlock>()),
    field("targetThrash", block::<LevelsBlock>()),
    field("escalation", block::<EscalationBlock>()),
    field("batchDuplicates", block::<SwitchBlock>()),
    field("repeatedMessage", block::<LevelsBlock>()),
    field("contentChanting", block::<LevelsBlock>()),
    field("noToolTurns", block::<LevelsBlock>()),
    field("runStorm", block::<RunStormBlock>()),
    field("agentTree", block::<AgentTreeBlock>()),
];

/// The blocks of a scope (the document root or one agent), by path.
pub(crate) const SCOPE_BLOCKS: &[(&str, &[Field])] = &[
    ("tools.loopDetection", LoopDetectionBlock::FIELDS),
    ("loopguard", EXTENSIONS),
];

/// The blocks of a scope (the document root or one agent) by path, each key with what it
/// accepts: the table that config schemas and types written in other languages (the
/// OpenClaw plugin's manifest, the bindings' type declarations) are generated from or
/// checked against.
pub fn schema() -> &'static [(&'static str, &'static [Field])] {
    SCOPE_BLOCKS
}

/// Every key each block accepts, by the block's path inside a scope (the document root or
/// one agent; `[]` stands for any element of an array): for config schemas written in other
/// languages (the OpenClaw plugin's manifest), whose tests check them against this.
pub fn known_keys() -> Vec<(&'static str, &'static [&'static str])> {
    static KNOWN: OnceLock<Vec<(String, Vec<&'static str>)>> = OnceLock::new();
    KNOWN
        .get_or_init(every_block)
        .iter()
        .map(|(path, keys)| (path.as_str(), keys.as_slice()))
        .collect()
}

/// The blocks reachable from [`SCOPE_BLOCKS`], depth first, with their keys.
fn every_block() -> Vec<(String, Vec<&'static str>)> {
    let mut out = Vec::new();
    let mut stack: Vec<(String, &[Field])> = SCOPE_BLOCKS
        .iter()
        .rev()
        .map(|(path, fields)| ((*path).to_owned(), *fields))
        .collect();
    while let Some((path, fields)) = stack.pop() {
        for f in fields.iter().rev() {
            match f.kind {
                Kind::Block(inner) => stack.push((format!("{path}.{}", f.key), inner)),
                Kind::List(inner, _) => stack.push((format!("{path}.{}[]", f.key), inner)),
                Kind::Map(inner, _) => stack.push((format!("{path}.{}.*", f.key), inner)),
                _ => {}
            }
        }
        out.push((path, fields.iter().map(|f| f.key).collect()));
    }
    out
}

#[cfg(test)]
mod tests {
    use serde_json::{json, Value};

    use super::*;
    use crate::config::extensions::Preset;
    use crate::config::ConfigSet;

    /// The OpenClaw plugin's manifest, whose JSON schema is written by hand for OpenClaw.
    const MANIFEST: &str =
        include_str!("../../../../packages/openclaw-plugin/openclaw.plugin.json");

    /// Every difference between the schema of a block and the table's description of it.
    fn schema_problems(schema: &Value, fields: &[Field], path: &str, out: &mut Vec<String>) {
        let mut problem = |what: String| out.push(format!("{path}: {what}"));
        if schema["type"] != "object" || schema["additionalProperties"] != false {
            problem("not an object refusing unknown keys".into());
        }
        let mut schema_keys: Vec<&str> = schema["properties"]
            .as_object()
            .map(|p| p.keys().map(String::as_str).collect())
            .unwrap_or_default();
        let mut keys: Vec<&str> = fields.iter().map(|f| f.key).collect();
        schema_keys.sort_unstable();
        keys.sort_unstable();
        if schema_keys != keys {
            problem(format!("keys {schema_keys:?}, the engine reads {keys:?}"));
        }
        let rule_names: Vec<&str> = crate::masking::MASK_RULES.iter().map(|r| r.name).collect();
        for f in fields {
            let s = &schema["properties"][f.key];
            let at = format!("{path}.{}", f.key);
            let expected = match f.kind {
                Kind::Switch => json!({ "type": "boolean" }),
                Kind::Count { min, max } => {
                    json!({ "type": "integer", "minimum": min, "maximum": max })
                }
                Kind::OneOf(names) => json!({ "type": "string", "enum": names }),
                Kind::Preset => {
                    let names: Vec<&str> = Preset::ALL.iter().map(|(n, _)| *n).collect();
                    json!({ "type": "string", "enum": names })
                }
                Kind::Pattern => json!({ "type": "string", "minLength": 1 }),
                Kind::Strings => json!({ "type": "array", "items": { "type": "string" } }),
                Kind::MaskRules => json!({
                    "type": "array",
                    "items": { "type": "string", "enum": rule_names },
                }),
                // The schema offers the boolean form; the rule list is for hand-written
                // configs.
                Kind::Mask => json!({ "type": "boolean" }),
                Kind::Decimal {
                    positive: true,
                    max,
                } => json!({ "type": "number", "exclusiveMinimum": 0, "maximum": max }),
                Kind::Decimal {
                    positive: false,
                    max,
                } => json!({ "type": "number", "minimum": 0, "maximum": max }),
                Kind::UtcOffset => json!({ "type": "string", "pattern": UTC_OFFSET_PATTERN }),
                Kind::Map(inner, max) => {
                    if s["type"] != "object" || s["maxProperties"] != max {
                        out.push(format!("{at}: not an object of at most {max} entries"));
                    }
                    schema_problems(&s["additionalProperties"], inner, &format!("{at}.*"), out);
                    continue;
                }
                Kind::Block(inner) => {
                    schema_problems(s, inner, &at, out);
                    continue;
                }
                Kind::List(inner, max) => {
                    if s["type"] != "array" || s["maxItems"] != max {
                        out.push(format!("{at}: not an array of at most {max}"));
                    }
                    schema_problems(&s["items"], inner, &format!("{at}[]"), out);
                    continue;
                }
            };
            let mut found = s.clone();
            if let Some(o) = found.as_object_mut() {
                o.remove("description");
            }
            if found != expected {
                out.push(format!(
                    "{at}: the schema says {found}, the engine reads {expected}"
                ));
            }
        }
    }

    /// The plugin's schema for both blocks is the table's: the same keys, types, bounds
    /// and values, so a key added to the table fails here until the schema has it.
    /// What the schema's pattern accepts as a time zone, the parser reads, and the other
    /// way round for the canonical forms (the parser also takes lower-case `utc`).
    #[test]
    fn the_time_zone_pattern_agrees_with_the_parser() {
        let pattern = regex::Regex::new(UTC_OFFSET_PATTERN).unwrap();
        for text in [
            "UTC",
            "Z",
            "+02:00",
            "-05:30",
            "UTC+14:00",
            "UTC-14:00",
            "+14:30",
            "+15:00",
            "02:00",
            "+2:00",
            "+02:60",
            "UTC+",
            "",
        ] {
            assert_eq!(
                pattern.is_match(text),
                value::UtcOffset::parse(text).is_some(),
                "{text:?}"
            );
        }
    }

    #[test]
    fn the_plugin_schema_is_the_table() {
        let manifest: Value = serde_json::from_str(MANIFEST).unwrap();
        let schema = &manifest["configSchema"]["properties"];
        let mut problems = Vec::new();
        for (path, fields) in SCOPE_BLOCKS {
            let name = path.trim_start_matches("tools.");
            schema_problems(&schema[name], fields, name, &mut problems);
        }
        assert!(problems.is_empty(), "{problems:#?}");
    }

    /// A value of `kind` other than what an absent key means, for the kinds that have one.
    fn set_value(kind: Kind) -> Option<Value> {
        match kind {
            Kind::Switch => Some(json!(false)),
            Kind::Count { .. } => Some(json!(7)),
            Kind::MaskRules => Some(json!(["uuid"])),
            Kind::OneOf(names) => names.last().map(|n| json!(n)),
            Kind::Preset => Preset::ALL.first().map(|(n, _)| json!(n)),
            Kind::Decimal { .. } => Some(json!(0.5)),
            Kind::UtcOffset => Some(json!("+02:00")),
            _ => None,
        }
    }

    /// Every key of the table reaches the compiled config: setting it changes what the
    /// engine runs with. A key added to the table (so parsed and merged), but forgotten by
    /// `EffectiveConfig::from_block` or `Extensions`, fails here.
    #[test]
    fn every_key_of_the_table_is_used() {
        let mut stack: Vec<(Vec<&str>, &[Field])> = SCOPE_BLOCKS
            .iter()
            .map(|(path, fields)| (path.split('.').collect(), *fields))
            .collect();
        let mut checked = 0;
        while let Some((parents, fields)) = stack.pop() {
            for f in fields {
                if let Kind::Block(inner) = f.kind {
                    stack.push(([&parents[..], &[f.key]].concat(), inner));
                    continue;
                }
                let Some(value) = set_value(f.kind) else {
                    continue;
                };
                let document = |value: Option<&Value>| {
                    let mut node = json!({});
                    if let Some(v) = value {
                        node[f.key] = v.clone();
                    }
                    for key in parents.iter().rev() {
                        node = json!({ *key: node });
                    }
                    ConfigSet::parse(&node.to_string()).unwrap()
                };
                assert_ne!(
                    document(Some(&value)).global(),
                    document(None).global(),
                    "{}.{} = {value} changes nothing",
                    parents.join("."),
                    f.key
                );
                checked += 1;
            }
        }
        assert!(checked >= 35, "{checked}");
    }
}
