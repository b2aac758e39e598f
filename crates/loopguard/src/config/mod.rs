//! Configuration (SPEC §1): OpenClaw-style JSON5 documents, per-agent overlays, clamping
//! and the tri-state `enabled`.
//!
//! A document is read once into a [`ConfigSet`]: the global `tools.loopDetection` block and
//! each agent's block, already merged and clamped into [`EffectiveConfig`]s. Reading is
//! all-or-nothing: a document with any problem yields a [`ConfigError`] listing every
//! problem, each with its path, line and column.
//!
//! ```
//! use loopguard::config::{ConfigSet, Enabled};
//!
//! let set = ConfigSet::parse(r#"{
//!   tools: { loopDetection: { enabled: true, warningThreshold: 5 } },
//!   agents: { list: [{ id: "worker", tools: { loopDetection: { criticalThreshold: 4 } } }] },
//! }"#)?;
//! let worker = set.for_agent(Some("worker"));
//! assert_eq!(worker.enabled(), Enabled::On);
//! assert_eq!(worker.warning_threshold(), 5);
//! assert_eq!(worker.critical_threshold(), 6); // clamped above the warning threshold
//! assert_eq!(worker.clamps().len(), 1);
//! # Ok::<(), loopguard::config::ConfigError>(())
//! ```

mod block;
mod document;
pub mod extensions;
pub mod locate;
mod value;

use std::collections::BTreeMap;
use std::fmt;
use std::sync::Arc;

use serde::Serialize;

pub use block::{
    known_keys, schema, DetectorsBlock, GuardBlock, LoopDetectionBlock, UTC_OFFSET_PATTERN,
};
use extensions::{Extensions, ExtensionsBlock};
pub use locate::Position;
pub use value::{Field, Kind as FieldKind};

/// Default `historySize`.
pub const DEFAULT_HISTORY_SIZE: u32 = 30;
/// Default `warningThreshold`.
pub const DEFAULT_WARNING_THRESHOLD: u32 = 10;
/// Default `criticalThreshold`.
pub const DEFAULT_CRITICAL_THRESHOLD: u32 = 20;
/// Default `unknownToolThreshold`.
pub const DEFAULT_UNKNOWN_TOOL_THRESHOLD: u32 = 10;
/// Default `globalCircuitBreakerThreshold`.
pub const DEFAULT_GLOBAL_CIRCUIT_BREAKER_THRESHOLD: u32 = 30;
/// Default `postCompactionGuard.windowSize`.
pub const DEFAULT_POST_COMPACTION_WINDOW: u32 = 3;

/// The tri-state master switch.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Enabled {
    /// Not set: rolling detectors off, post-compaction guard on.
    #[default]
    Unset,
    /// `true`: detectors and guard on.
    On,
    /// Explicit `false`: detectors and guard off.
    Off,
}

impl From<Option<bool>> for Enabled {
    fn from(v: Option<bool>) -> Self {
        match v {
            None => Self::Unset,
            Some(true) => Self::On,
            Some(false) => Self::Off,
        }
    }
}

/// Which rolling detectors are switched on.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Detectors {
    /// Same tool + same args.
    pub generic_repeat: bool,
    /// Polling tools whose state does not change.
    pub known_poll_no_progress: bool,
    /// Alternating between two call patterns.
    pub ping_pong: bool,
}

/// A threshold raised at load time so that the levels stay ordered.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct Clamp {
    /// The field that was raised (its config name).
    pub field: &'static str,
    /// The merged value before clamping.
    pub configured: u32,
    /// The value in force.
    pub effective: u32,
    /// Why, in a sentence.
    pub reason: String,
}

/// A threshold that can never be reached with this `historySize`.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct Unreachable {
    /// The threshold's config name.
    pub field: &'static str,
    /// Its effective value.
    pub value: u32,
    /// Why it can never fire, in a sentence.
    pub reason: String,
}

/// The settings in force for one agent (or globally): merged, defaulted and clamped.
///
/// Read-only: a host gets one from a [`ConfigSet`] (or [`EffectiveConfig::from_block`]),
/// which clamps, and reads it through its accessors; it cannot write a field and so bypass
/// the clamps.
///
/// ```compile_fail,E0616
/// let mut config = loopguard::EffectiveConfig::default();
/// config.critical_threshold = 1; // below the warning threshold
/// ```
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct EffectiveConfig {
    /// The tri-state master switch.
    pub(crate) enabled: Enabled,
    /// Records kept per run.
    pub(crate) history_size: u32,
    /// W.
    pub(crate) warning_threshold: u32,
    /// C (after clamping).
    pub(crate) critical_threshold: u32,
    /// U.
    pub(crate) unknown_tool_threshold: u32,
    /// G (after clamping).
    pub(crate) global_circuit_breaker_threshold: u32,
    /// Detector switches.
    pub(crate) detectors: Detectors,
    /// Post-compaction guard window.
    pub(crate) post_compaction_window: u32,
    /// Every clamp applied, in order.
    pub(crate) clamps: Vec<Clamp>,
    /// Thresholds that can never fire with this `historySize` (warnings, not errors).
    pub(crate) unreachable: Vec<Unreachable>,
    /// loopguard's own extensions (the `loopguard` block); `None`: SPEC behaviour alone.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) extensions: Option<Arc<Extensions>>,
}

impl Default for EffectiveConfig {
    fn default() -> Self {
        Self::from_block(&LoopDetectionBlock::default())
    }
}

impl EffectiveConfig {
    /// Defaults applied to a (merged) block, then clamped.
    pub fn from_block(block: &LoopDetectionBlock) -> Self {
        let warning = block.warning_threshold.unwrap_or(DEFAULT_WARNING_THRESHOLD);
        let mut critical = block
            .critical_threshold
            .unwrap_or(DEFAULT_CRITICAL_THRESHOLD);
        let mut global = block
            .global_circuit_breaker_threshold
            .unwrap_or(DEFAULT_GLOBAL_CIRCUIT_BREAKER_THRESHOLD);
        let mut clamps = Vec::new();
        if critical <= warning {
            let raised = warning.saturating_add(1);
            clamps.push(Clamp {
                field: "criticalThreshold",
                configured: critical,
                effective: raised,
                reason: format!(
                    "criticalThreshold {critical} is not above warningThreshold {warning}, so it was raised to {raised}: a pattern must warn before it blocks"
                ),
            });
            critical = raised;
        }
        if global <= critical {
            let raised = critical.saturating_add(1);
            clamps.push(Clamp {
                field: "globalCircuitBreakerThreshold",
                configured: global,
                effective: raised,
                reason: format!(
                    "globalCircuitBreakerThreshold {global} is not above criticalThreshold {critical}, so it was raised to {raised}: the breaker is the last resort, after the detectors"
                ),
            });
            global = raised;
        }
        let mut config = Self {
            enabled: block.enabled.into(),
            history_size: block.history_size.unwrap_or(DEFAULT_HISTORY_SIZE),
            warning_threshold: warning,
            critical_threshold: critical,
            unknown_tool_threshold: block
                .unknown_tool_threshold
                .unwrap_or(DEFAULT_UNKNOWN_TOOL_THRESHOLD),
            global_circuit_breaker_threshold: global,
            detectors: Detectors {
                generic_repeat: block.detectors.generic_repeat.unwrap_or(true),
                known_poll_no_progress: block.detectors.known_poll_no_progress.unwrap_or(true),
                ping_pong: block.detectors.ping_pong.unwrap_or(true),
            },
            post_compaction_window: block
                .post_compaction_guard
                .window_size
                .unwrap_or(DEFAULT_POST_COMPACTION_WINDOW),
            clamps,
            unreachable: Vec::new(),
            extensions: None,
        };
        config.unreachable = config.find_unreachable();
        config
    }

    /// The tri-state master switch (`enabled`).
    pub fn enabled(&self) -> Enabled {
        self.enabled
    }

    /// Records kept per run (`historySize`).
    pub fn history_size(&self) -> u32 {
        self.history_size
    }

    /// Count at which a pattern warns (`warningThreshold`).
    pub fn warning_threshold(&self) -> u32 {
        self.warning_threshold
    }

    /// Count at which a no-progress pattern blocks (`criticalThreshold`), above the
    /// warning threshold.
    pub fn critical_threshold(&self) -> u32 {
        self.critical_threshold
    }

    /// Calls of one unavailable tool before blocking (`unknownToolThreshold`).
    pub fn unknown_tool_threshold(&self) -> u32 {
        self.unknown_tool_threshold
    }

    /// No-progress count that stops the run (`globalCircuitBreakerThreshold`), above the
    /// critical threshold.
    pub fn global_circuit_breaker_threshold(&self) -> u32 {
        self.global_circuit_breaker_threshold
    }

    /// Which rolling detectors are switched on (`detectors`).
    pub fn detectors(&self) -> Detectors {
        self.detectors
    }

    /// Attempts the post-compaction guard stays armed (`postCompactionGuard.windowSize`).
    pub fn post_compaction_window(&self) -> u32 {
        self.post_compaction_window
    }

    /// Every clamp applied, in order.
    pub fn clamps(&self) -> &[Clamp] {
        &self.clamps
    }

    /// Thresholds that can never fire with this `historySize` (warnings, not errors).
    pub fn unreachable(&self) -> &[Unreachable] {
        &self.unreachable
    }

    /// loopguard's own extensions (the `loopguard` block); `None`: SPEC behaviour alone.
    pub fn extensions(&self) -> Option<&Extensions> {
        self.extensions.as_deref()
    }

    /// [`EffectiveConfig::from_block`], with the extensions of a (merged) `loopguard` block.
    pub fn with_extensions(
        block: &LoopDetectionBlock,
        extensions: Option<&ExtensionsBlock>,
    ) -> Self {
        let mut config = Self::from_block(block);
        config.extensions = extensions.map(Extensions::from_block);
        config
    }

    /// The spend budgets in force (`loopguard.budgets`), when a limit is set.
    pub fn budgets(&self) -> Option<&crate::budget::Budgets> {
        // A block without limits is left out when the config is compiled.
        self.extensions.as_deref().and_then(|x| x.budgets.as_ref())
    }

    /// The limits of a tree of agents in force (`loopguard.detectors.agentTree`), when on.
    pub fn agent_tree(&self) -> Option<crate::tree::AgentTree> {
        self.extensions.as_deref().and_then(|x| x.agent_tree)
    }

    /// What the budgets in force cannot enforce, each with why (empty without budgets).
    pub fn budget_caveats(&self) -> Vec<String> {
        self.budgets()
            .map(|b| b.caveats(self.prices().len()))
            .unwrap_or_default()
    }

    /// The config's own prices (`loopguard.prices`), which come before the built-in table.
    pub fn prices(&self) -> &[(String, crate::budget::prices::Price)] {
        self.extensions.as_deref().map_or(&[], |x| &x.prices)
    }

    /// Whether verdicts are only reported (`loopguard.mode: "shadow"`).
    pub fn is_shadow(&self) -> bool {
        self.extensions
            .as_deref()
            .is_some_and(Extensions::is_shadow)
    }

    /// Whether the rolling detectors (and the global breaker) run: only when `enabled` is
    /// `true`.
    pub fn detectors_enabled(&self) -> bool {
        self.enabled == Enabled::On
    }

    /// Whether the post-compaction guard runs: unless `enabled` is explicitly `false`.
    pub fn guard_enabled(&self) -> bool {
        self.enabled != Enabled::Off
    }

    /// Counts are bounded by the window: a streak or repeat count can reach at most
    /// `historySize`, a ping-pong count `historySize + 1` (the call itself completes it).
    fn find_unreachable(&self) -> Vec<Unreachable> {
        let h = self.history_size;
        let mut out = Vec::new();
        let mut check = |field: &'static str, value: u32, what: &str, limit: u32| {
            if value > limit {
                out.push(Unreachable {
                    field,
                    value,
                    reason: format!(
                        "{field} {value} can never be reached with historySize {h}: {what} can count at most {limit}"
                    ),
                });
            }
        };
        check(
            "warningThreshold",
            self.warning_threshold,
            "generic_repeat and known_poll_no_progress",
            h,
        );
        check(
            "criticalThreshold",
            self.critical_threshold,
            "generic_repeat and known_poll_no_progress",
            h,
        );
        check(
            "warningThreshold",
            self.warning_threshold,
            "ping_pong",
            h.saturating_add(1),
        );
        check(
            "criticalThreshold",
            self.critical_threshold,
            "ping_pong",
            h.saturating_add(1),
        );
        check(
            "unknownToolThreshold",
            self.unknown_tool_threshold,
            "unknown_tool_repeat",
            h,
        );
        check(
            "globalCircuitBreakerThreshold",
            self.global_circuit_breaker_threshold,
            "the no-progress streak",
            h,
        );
        out
    }
}

/// The blocks of one scope (the document or one agent): OpenClaw's and loopguard's own.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ScopeBlocks {
    /// `tools.loopDetection`.
    pub detection: LoopDetectionBlock,
    /// `loopguard`, when present.
    pub extensions: Option<ExtensionsBlock>,
}

#[derive(Clone, Debug, Default, PartialEq, Eq)]
struct Scoped {
    blocks: ScopeBlocks,
    effective: EffectiveConfig,
}

/// Every effective config a document defines: the global one and one per agent block.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ConfigSet {
    global: Scoped,
    agents: BTreeMap<String, Scoped>,
    warnings: Vec<ConfigIssue>,
}

impl ConfigSet {
    /// Reads a JSON5 document.
    pub fn parse(text: &str) -> Result<Self, ConfigError> {
        Self::parse_named(text, None)
    }

    /// Reads a JSON5 document; `origin` (a file name) prefixes every error.
    pub fn parse_named(text: &str, origin: Option<&str>) -> Result<Self, ConfigError> {
        let blocks = document::read(text, origin)?;
        let mut set = Self::from_scopes(blocks.global, blocks.agents);
        set.warnings = blocks.warnings;
        Ok(set)
    }

    /// Builds a set from `tools.loopDetection` blocks already in hand.
    pub fn from_blocks(
        global: LoopDetectionBlock,
        agents: impl IntoIterator<Item = (String, LoopDetectionBlock)>,
    ) -> Self {
        let scope = |detection| ScopeBlocks {
            detection,
            extensions: None,
        };
        Self::from_scopes(
            scope(global),
            agents.into_iter().map(|(id, b)| (id, scope(b))),
        )
    }

    /// Builds a set from both kinds of blocks, global and per agent.
    pub fn from_scopes(
        global: ScopeBlocks,
        agents: impl IntoIterator<Item = (String, ScopeBlocks)>,
    ) -> Self {
        let agents = agents
            .into_iter()
            .map(|(id, blocks)| {
                let detection = global.detection.overlay(&blocks.detection);
                let extensions = match (&global.extensions, &blocks.extensions) {
                    (Some(g), Some(a)) => Some(g.overlay(a)),
                    (g, a) => a.clone().or_else(|| g.clone()),
                };
                let effective = EffectiveConfig::with_extensions(&detection, extensions.as_ref());
                (id, Scoped { blocks, effective })
            })
            .collect();
        Self {
            global: Scoped {
                effective: EffectiveConfig::with_extensions(
                    &global.detection,
                    global.extensions.as_ref(),
                ),
                blocks: global,
            },
            agents,
            warnings: Vec::new(),
        }
    }

    /// What the document holds that is not wrong but does nothing: a key that looks like a
    /// misspelt block name (`tools.loopdetection`, `tool: { loopDetection: … }`,
    /// `loopGuard`), which neither loopguard nor OpenClaw reads. Front ends print them
    /// wherever they load a config.
    pub fn warnings(&self) -> &[ConfigIssue] {
        &self.warnings
    }

    /// Detection on with default thresholds, as if the document were
    /// `{ tools: { loopDetection: { enabled: true } } }`.
    pub fn enabled_defaults() -> Self {
        Self::from_blocks(
            LoopDetectionBlock {
                enabled: Some(true),
                ..Default::default()
            },
            [],
        )
    }

    /// The config in force for `agent` (the global one for unknown or absent agents).
    pub fn for_agent(&self, agent: Option<&str>) -> &EffectiveConfig {
        agent
            .and_then(|a| self.agents.get(a))
            .map_or(&self.global.effective, |s| &s.effective)
    }

    /// The global config.
    pub fn global(&self) -> &EffectiveConfig {
        &self.global.effective
    }

    /// The global `tools.loopDetection` block as written.
    pub fn global_block(&self) -> &LoopDetectionBlock {
        &self.global.blocks.detection
    }

    /// The global blocks as written.
    pub fn global_blocks(&self) -> &ScopeBlocks {
        &self.global.blocks
    }

    /// This set with `budgets` laid over the `loopguard.budgets` block of every scope, the
    /// global one and each agent's: its keys win wherever they are set, the other keys of
    /// each scope stay as written (a command line's budgets over a config file's).
    pub fn with_budgets(&self, budgets: &extensions::BudgetsBlock) -> Self {
        let over = |blocks: &ScopeBlocks, always: bool| {
            let mut blocks = blocks.clone();
            let has = blocks
                .extensions
                .as_ref()
                .is_some_and(|x| x.budgets.is_some());
            if always || has {
                let x = blocks.extensions.get_or_insert_with(Default::default);
                x.budgets = Some(match &x.budgets {
                    Some(b) => b.overlay(budgets),
                    None => budgets.clone(),
                });
            }
            blocks
        };
        let mut set = Self::from_scopes(
            over(&self.global.blocks, true),
            self.agents
                .iter()
                .map(|(id, s)| (id.clone(), over(&s.blocks, false))),
        );
        set.warnings = self.warnings.clone();
        set
    }

    /// Agents with their own blocks: id, `tools.loopDetection` block as written, effective
    /// config.
    pub fn agents(&self) -> impl Iterator<Item = (&str, &LoopDetectionBlock, &EffectiveConfig)> {
        self.agents
            .iter()
            .map(|(id, s)| (id.as_str(), &s.blocks.detection, &s.effective))
    }
}

/// A document that cannot be used, with every problem found.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub struct ConfigError {
    /// Where the document came from (a file name), when known.
    pub origin: Option<String>,
    /// The problems, in document order of discovery.
    pub issues: Vec<ConfigIssue>,
}

impl fmt::Display for ConfigError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for (i, issue) in self.issues.iter().enumerate() {
            if i > 0 {
                writeln!(f)?;
            }
            write!(f, "{}", issue.located(self.origin.as_deref()))?;
        }
        Ok(())
    }
}

/// One problem in a config document.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct ConfigIssue {
    /// Dotted path of the offending key (`tools.loopDetection.repeatThreshold`); empty for
    /// the whole document.
    pub path: String,
    /// Where the key (or the syntax error) is.
    pub position: Option<Position>,
    /// What is wrong.
    pub kind: IssueKind,
}

impl ConfigIssue {
    /// The issue with where it is: `FILE:LINE:COLUMN: …` (what is known of it).
    pub fn located<'a>(&'a self, origin: Option<&'a str>) -> impl fmt::Display + 'a {
        Located {
            issue: self,
            origin,
        }
    }
}

struct Located<'a> {
    issue: &'a ConfigIssue,
    origin: Option<&'a str>,
}

impl fmt::Display for Located<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if let Some(origin) = self.origin {
            write!(f, "{origin}:")?;
        }
        if let Some(p) = self.issue.position {
            write!(f, "{}:{}: ", p.line, p.column)?;
        } else if self.origin.is_some() {
            write!(f, " ")?;
        }
        write!(f, "{}", self.issue)
    }
}

impl fmt::Display for ConfigIssue {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let at = if self.path.is_empty() {
            String::new()
        } else {
            format!("{}: ", self.path)
        };
        match &self.kind {
            IssueKind::Syntax { message } => write!(f, "invalid JSON5: {message}"),
            IssueKind::TooDeep { limit } => {
                write!(f, "the document is nested deeper than {limit} levels")
            }
            IssueKind::NotObject { found } => write!(f, "{at}expected an object, found {found}"),
            IssueKind::UnknownKey { key, closest } => {
                let parent = self.path.rsplit_once('.').map_or("", |(p, _)| p);
                write!(
                    f,
                    "unknown key `{key}` in {parent} (did you mean `{closest}`?)"
                )
            }
            IssueKind::DuplicateKey { key } => write!(f, "{at}key `{key}` is given twice"),
            IssueKind::NotPositiveInteger { found } => {
                write!(f, "{at}expected a positive integer, found {found}")
            }
            IssueKind::NotNumber { found } => {
                write!(f, "{at}expected a finite number, not negative (above 0 for a limit), found {found}")
            }
            IssueKind::TooLarge { max } => write!(f, "{at}must be at most {max}"),
            IssueKind::NotBoolean { found } => {
                write!(f, "{at}expected true or false, found {found}")
            }
            IssueKind::MissingAgentId => write!(
                f,
                "{at}this agent has a tools.loopDetection or loopguard block but no non-blank string `id`"
            ),
            IssueKind::DuplicateAgent { id, first } => write!(
                f,
                "{at}agent `{id}` already has its blocks at {first}"
            ),
            IssueKind::NotString { found } => write!(f, "{at}expected a string, found {found}"),
            IssueKind::NotArray { found } => write!(f, "{at}expected an array, found {found}"),
            IssueKind::UnknownValue { value, expected } => {
                write!(f, "{at}`{value}` is not one of: {expected}")
            }
            IssueKind::InvalidPattern { reason } => write!(f, "{at}{reason}"),
            IssueKind::OutOfRange { value, min, max } => {
                write!(f, "{at}{value} is outside {min}..={max}")
            }
            IssueKind::MissingKey { key } => write!(f, "{at}`{key}` is required"),
            IssueKind::MisspeltBlock { key, meant } => {
                let parent = self
                    .path
                    .rsplit_once('.')
                    .map_or(String::new(), |(p, _)| format!(" in {p}"));
                let what = if *meant == "tools" {
                    "the loopDetection block in it is not read"
                } else {
                    "it is not read"
                };
                write!(
                    f,
                    "unknown key `{key}`{parent} (did you mean `{meant}`?): {what}, so its settings do not apply"
                )
            }
        }
    }
}

/// What is wrong with a config document.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
#[non_exhaustive]
pub enum IssueKind {
    /// Not JSON5.
    Syntax {
        /// The parser's message.
        message: String,
    },
    /// Nested deeper than the parser may go.
    TooDeep {
        /// The limit.
        limit: usize,
    },
    /// A value that must be an object is not.
    NotObject {
        /// What was found.
        found: String,
    },
    /// A key the block does not know.
    UnknownKey {
        /// The key as written.
        key: String,
        /// The known key it most resembles.
        closest: &'static str,
    },
    /// A key given twice in one object.
    DuplicateKey {
        /// The key.
        key: String,
    },
    /// A numeric field that is not a positive integer.
    NotPositiveInteger {
        /// What was found.
        found: String,
    },
    /// A decimal field (a price, an amount, a fraction) that is not a finite number in
    /// its range.
    NotNumber {
        /// What was found.
        found: String,
    },
    /// A numeric field above its documented maximum.
    TooLarge {
        /// The maximum.
        max: u64,
    },
    /// A switch that is not a boolean.
    NotBoolean {
        /// What was found.
        found: String,
    },
    /// An agent block whose agent has no id.
    MissingAgentId,
    /// Two blocks for one agent id.
    DuplicateAgent {
        /// The agent id.
        id: String,
        /// Path of the first block.
        first: String,
    },
    /// A value that must be a string is not.
    NotString {
        /// What was found.
        found: String,
    },
    /// A value that must be an array is not.
    NotArray {
        /// What was found.
        found: String,
    },
    /// A string that is not one of the allowed values.
    UnknownValue {
        /// The value as written.
        value: String,
        /// The allowed values.
        expected: String,
    },
    /// A glob or path that does not compile.
    InvalidPattern {
        /// Why.
        reason: String,
    },
    /// A number outside its range.
    OutOfRange {
        /// The value.
        value: u32,
        /// Smallest allowed.
        min: u32,
        /// Largest allowed.
        max: u32,
    },
    /// A required key is missing.
    MissingKey {
        /// The key.
        key: &'static str,
    },
    /// A key that looks like a misspelt block name (`loopdetection`, `tool`, `loopGuard`):
    /// a warning, since a config document holds many keys loopguard does not read.
    MisspeltBlock {
        /// The key as written.
        key: String,
        /// The block name it resembles.
        meant: &'static str,
    },
}

#[cfg(test)]
mod tests {
    use super::*;

    fn issues(text: &str) -> Vec<ConfigIssue> {
        ConfigSet::parse(text).unwrap_err().issues
    }

    /// A document with `value` at `path` (a `known_keys` path; `[]` is the first element).
    fn document_at(path: &str, value: serde_json::Value) -> String {
        let mut node = value;
        for part in path.rsplit('.') {
            node = match part.strip_suffix("[]") {
                Some(key) => serde_json::json!({ key: [node] }),
                None => serde_json::json!({ part: node }),
            };
        }
        node.to_string()
    }

    /// Whether parsing `doc` reports an unknown key at `path` (array indices as `[]`, a
    /// map's entry named `*` as `.*`).
    fn unknown_at(doc: &str, path: &str) -> bool {
        ConfigSet::parse(doc).err().is_some_and(|e| {
            e.issues.iter().any(|i| {
                matches!(i.kind, IssueKind::UnknownKey { .. })
                    && i.path.replace("[0]", "[]").replace("[\"*\"]", ".*") == path
            })
        })
    }

    /// `known_keys` is what the parser reads: every listed block refuses a stray key, every
    /// listed key is accepted, and every key that holds a block of its own is listed (so a
    /// schema checked against `known_keys` cannot miss a block).
    /// Budgets laid over a set win in every scope that has budgets (the global one always,
    /// each agent with its own block); the other keys and the warnings stay.
    #[test]
    fn budgets_laid_over_win_in_every_scope() {
        let set = ConfigSet::parse(
            "{ loopguard: { budgets: { run: { cost: 5, calls: 100 } } }, agents: { list: [
               { id: 'a', loopguard: { budgets: { run: { cost: 9 } } } },
               { id: 'b', loopguard: { preset: 'recommended' } } ] } }",
        )
        .unwrap();
        let top = ConfigSet::parse("{ loopguard: { budgets: { run: { cost: 1 } } } }").unwrap();
        let top = top
            .global_blocks()
            .extensions
            .clone()
            .unwrap()
            .budgets
            .unwrap();
        let over = set.with_budgets(&top);
        for agent in [None, Some("a"), Some("b")] {
            let run = over.for_agent(agent).budgets().unwrap().run;
            assert_eq!(run.cost, crate::budget::Cost::from_usd(1.0), "{agent:?}");
            assert_eq!(run.calls, Some(100), "{agent:?}");
        }
        let bare = ConfigSet::enabled_defaults().with_budgets(&top);
        assert!(bare.global().detectors_enabled());
        assert!(bare.global().budgets().is_some());
    }

    #[test]
    fn known_keys_are_the_parsers_keys() {
        let known = known_keys();
        let paths: Vec<&str> = known.iter().map(|(path, _)| *path).collect();
        for (path, keys) in known {
            let stray = format!("{path}.noSuchKey");
            let doc = document_at(path, serde_json::json!({ "noSuchKey": 1 }));
            assert!(
                unknown_at(&doc, &stray),
                "{path} does not refuse a stray key"
            );
            for key in keys {
                let at = format!("{path}.{key}");
                let doc = document_at(&at, serde_json::json!({ "noSuchKey": 1 }));
                assert!(!unknown_at(&doc, &at), "{at} is listed but refused");
                let holds_block = unknown_at(&doc, &format!("{at}.noSuchKey"))
                    || unknown_at(
                        &document_at(&format!("{at}[]"), serde_json::json!({ "noSuchKey": 1 })),
                        &format!("{at}[].noSuchKey"),
                    );
                let listed =
                    paths.contains(&at.as_str()) || paths.contains(&format!("{at}[]").as_str());
                assert_eq!(
                    holds_block, listed,
                    "{at}: holds a block {holds_block}, listed {listed}"
                );
            }
        }
    }

    #[test]
    fn defaults() {
        let set = ConfigSet::default();
        let g = set.global();
        assert_eq!(g.enabled, Enabled::Unset);
        assert!(!g.detectors_enabled());
        assert!(g.guard_enabled());
        assert_eq!(
            (g.history_size, g.warning_threshold, g.critical_threshold),
            (30, 10, 20)
        );
        assert_eq!(
            (g.unknown_tool_threshold, g.global_circuit_breaker_threshold),
            (10, 30)
        );
        assert_eq!(g.post_compaction_window, 3);
        assert!(g.clamps.is_empty());
        assert!(g.unreachable.is_empty());
        assert_eq!(set, ConfigSet::parse("{}").unwrap());
    }

    #[test]
    fn tri_state() {
        let on = ConfigSet::parse("{tools:{loopDetection:{enabled:true}}}").unwrap();
        assert!(on.global().detectors_enabled() && on.global().guard_enabled());
        let off = ConfigSet::parse("{tools:{loopDetection:{enabled:false}}}").unwrap();
        assert!(!off.global().detectors_enabled() && !off.global().guard_enabled());
        let unset = ConfigSet::parse("{tools:{loopDetection:{}}}").unwrap();
        assert!(!unset.global().detectors_enabled() && unset.global().guard_enabled());
    }

    #[test]
    fn overlay_merges_field_by_field() {
        let set = ConfigSet::parse(
            r#"{
              tools: { loopDetection: { enabled: true, warningThreshold: 8, detectors: { pingPong: false } } },
              agents: { list: [
                { id: "main" },
                { id: "worker", tools: { loopDetection: { criticalThreshold: 16, detectors: { genericRepeat: false } } } },
                { id: "quiet", tools: { loopDetection: { enabled: false } } },
              ], entries: { fast: { tools: { loopDetection: { warningThreshold: 3, criticalThreshold: 5 } } } } },
            }"#,
        )
        .unwrap();
        let worker = set.for_agent(Some("worker"));
        assert_eq!(
            (worker.warning_threshold, worker.critical_threshold),
            (8, 16)
        );
        assert!(!worker.detectors.generic_repeat);
        assert!(!worker.detectors.ping_pong);
        assert!(worker.detectors.known_poll_no_progress);
        let main = set.for_agent(Some("main"));
        assert_eq!(main, set.global());
        assert_eq!(set.for_agent(Some("nobody")), set.global());
        assert_eq!(set.for_agent(Some("quiet")).enabled, Enabled::Off);
        let fast = set.for_agent(Some("fast"));
        assert_eq!((fast.warning_threshold, fast.critical_threshold), (3, 5));
        assert_eq!(fast.enabled, Enabled::On);
        assert_eq!(set.agents().count(), 3);
    }

    #[test]
    fn clamps_after_merge() {
        let set = ConfigSet::parse(
            "{tools:{loopDetection:{warningThreshold:5,criticalThreshold:5,globalCircuitBreakerThreshold:3}}}",
        )
        .unwrap();
        let g = set.global();
        assert_eq!(
            (g.critical_threshold, g.global_circuit_breaker_threshold),
            (6, 7)
        );
        assert_eq!(g.clamps.len(), 2);
        assert_eq!(g.clamps[0].field, "criticalThreshold");
        assert_eq!((g.clamps[0].configured, g.clamps[0].effective), (5, 6));
        assert_eq!(g.clamps[1].field, "globalCircuitBreakerThreshold");
        assert_eq!((g.clamps[1].configured, g.clamps[1].effective), (3, 7));
        // A default critical below a raised warning is clamped too.
        let set = ConfigSet::parse("{tools:{loopDetection:{warningThreshold:25}}}").unwrap();
        assert_eq!(set.global().critical_threshold, 26);
        assert_eq!(set.global().global_circuit_breaker_threshold, 30);
        // The agent's merged values are clamped, not the global ones.
        let set = ConfigSet::parse(
            "{tools:{loopDetection:{criticalThreshold:12}},agents:{list:[{id:'a',tools:{loopDetection:{warningThreshold:12}}}]}}",
        )
        .unwrap();
        assert!(set.global().clamps.is_empty());
        assert_eq!(set.for_agent(Some("a")).critical_threshold, 13);
    }

    #[test]
    fn unreachable_thresholds() {
        let set = ConfigSet::parse("{tools:{loopDetection:{historySize:4}}}").unwrap();
        let fields: Vec<_> = set.global().unreachable.iter().map(|u| u.field).collect();
        assert_eq!(
            fields,
            [
                "warningThreshold",
                "criticalThreshold",
                "warningThreshold",
                "criticalThreshold",
                "unknownToolThreshold",
                "globalCircuitBreakerThreshold"
            ]
        );
        let set = ConfigSet::parse("{tools:{loopDetection:{historySize:20}}}").unwrap();
        let u: Vec<_> = set
            .global()
            .unreachable
            .iter()
            .map(|u| (u.field, u.value))
            .collect();
        assert_eq!(u, [("globalCircuitBreakerThreshold", 30)]);
        assert!(set.global().unreachable[0]
            .reason
            .contains("historySize 20"));
        // Ping-pong counts one more than the window.
        let set = ConfigSet::parse(
            "{tools:{loopDetection:{historySize:9,warningThreshold:10,criticalThreshold:11,unknownToolThreshold:9,globalCircuitBreakerThreshold:12}}}",
        )
        .unwrap();
        let u: Vec<_> = set
            .global()
            .unreachable
            .iter()
            .map(|u| (u.field, u.reason.contains("ping_pong")))
            .collect();
        assert_eq!(
            u,
            [
                ("warningThreshold", false),
                ("criticalThreshold", false),
                ("criticalThreshold", true),
                ("globalCircuitBreakerThreshold", false)
            ]
        );
    }

    #[test]
    fn unknown_key_names_key_path_closest_and_position() {
        let text = "// c\n{\n  tools: {\n    loopDetection: {\"enabled\": true, \"repeatThreshold\": 5},\n  },\n}";
        let err = ConfigSet::parse_named(text, Some("cfg.json5")).unwrap_err();
        assert_eq!(err.issues.len(), 1);
        let issue = &err.issues[0];
        assert_eq!(issue.path, "tools.loopDetection.repeatThreshold");
        assert_eq!(
            issue.kind,
            IssueKind::UnknownKey {
                key: "repeatThreshold".into(),
                closest: "warningThreshold"
            }
        );
        assert_eq!(
            issue.position,
            Some(Position {
                line: 4,
                column: 38
            })
        );
        assert_eq!(
            err.to_string(),
            "cfg.json5:4:38: unknown key `repeatThreshold` in tools.loopDetection (did you mean `warningThreshold`?)"
        );
    }

    #[test]
    fn every_problem_is_listed() {
        let found = issues(
            r#"{
              tools: { loopDetection: { enabled: "yes", historySize: 2.5, warningThreshold: 0,
                criticalThreshold: -1, detectors: { loopy: true, pingPong: 1 },
                postCompactionGuard: { windowSize: 0, size: 3 }, historysize: 3, enabled: true } },
              agents: { list: [ { tools: { loopDetection: {} } }, { id: "a", tools: { loopDetection: { warningThreshold: 1e12 } } } ],
                        entries: { a: { tools: { loopDetection: {} } } } },
            }"#,
        );
        let kinds: Vec<String> = found
            .iter()
            .map(|i| format!("{} {:?}", i.path, i.kind))
            .collect();
        let expect = [
            "tools.loopDetection.enabled DuplicateKey",
            "tools.loopDetection.enabled NotBoolean",
            "tools.loopDetection.historySize NotPositiveInteger",
            "tools.loopDetection.warningThreshold NotPositiveInteger",
            "tools.loopDetection.criticalThreshold NotPositiveInteger",
            "tools.loopDetection.detectors.loopy UnknownKey",
            "tools.loopDetection.detectors.pingPong NotBoolean",
            "tools.loopDetection.postCompactionGuard.windowSize NotPositiveInteger",
            "tools.loopDetection.postCompactionGuard.size UnknownKey",
            "tools.loopDetection.historysize UnknownKey",
            "agents.list[0] MissingAgentId",
            "agents.list[1].tools.loopDetection.warningThreshold TooLarge",
            "agents.entries.a DuplicateAgent",
        ];
        assert_eq!(kinds.len(), expect.len(), "{kinds:#?}");
        for (got, want) in kinds.iter().zip(expect) {
            assert!(got.starts_with(want), "{got} should start with {want}");
        }
        assert!(found.iter().all(|i| i.position.is_some()), "{found:#?}");
        let closest: Vec<_> = found
            .iter()
            .filter_map(|i| match &i.kind {
                IssueKind::UnknownKey { closest, .. } => Some(*closest),
                _ => None,
            })
            .collect();
        assert_eq!(
            closest,
            ["knownPollNoProgress", "windowSize", "historySize"]
        );
    }

    #[test]
    fn syntax_errors_have_positions() {
        let found = issues("{\n  tools: {\n    loopDetection: { enabled: true,\n");
        assert_eq!(found.len(), 1);
        assert!(matches!(found[0].kind, IssueKind::Syntax { .. }));
        assert!(found[0].position.is_some());
        let found = issues("[1, 2]");
        assert!(matches!(found[0].kind, IssueKind::NotObject { .. }));
        let deep = "{a:".repeat(200) + &"}".repeat(200);
        let found = issues(&deep);
        assert!(matches!(found[0].kind, IssueKind::TooDeep { .. }));
        let found = issues("{tools:{loopDetection: 5}}");
        assert!(matches!(found[0].kind, IssueKind::NotObject { .. }));
    }

    #[test]
    fn json5_syntax_and_unrelated_keys() {
        let set = ConfigSet::parse(
            "// comment\n{ /* block */ 'tools': { loopDetection: { warningThreshold: 3, }, other: [1,], }, gateway: { port: 1 }, agents: { list: [ { id: 'x' }, 7 ] } }",
        )
        .unwrap();
        assert_eq!(set.global().warning_threshold, 3);
        assert_eq!(set.agents().count(), 0);
        // Integral floats are integers.
        let set =
            ConfigSet::parse("{tools:{loopDetection:{historySize: 40.0, warningThreshold: 1e1}}}")
                .unwrap();
        assert_eq!(set.global().history_size, 40);
        assert_eq!(set.global().warning_threshold, 10);
        // NaN and Infinity are not positive integers.
        assert!(ConfigSet::parse("{tools:{loopDetection:{historySize: NaN}}}").is_err());
        assert!(ConfigSet::parse("{tools:{loopDetection:{historySize: Infinity}}}").is_err());
    }

    /// A misspelt block name is read as nothing, as OpenClaw reads it; it is not an error
    /// (documents hold many other keys) but a warning that names the key, where it is, and
    /// the name it resembles.
    #[test]
    fn misspelt_block_names_are_warnings() {
        let warned = |text: &str| -> Vec<String> {
            let set = ConfigSet::parse_named(text, Some("c.json5")).unwrap();
            set.warnings()
                .iter()
                .map(|w| w.located(Some("c.json5")).to_string())
                .collect()
        };
        assert_eq!(
            warned("{ tools: {\n  loopdetection: { enabled: true } } }"),
            ["c.json5:2:3: unknown key `loopdetection` in tools (did you mean `loopDetection`?): it is not read, so its settings do not apply"]
        );
        assert_eq!(
            warned("{ tool: { loopDetection: { enabled: true } } }"),
            ["c.json5:1:3: unknown key `tool` (did you mean `tools`?): the loopDetection block in it is not read, so its settings do not apply"]
        );
        for text in [
            "{ tools: { loop_detection: {} } }",
            "{ tools: { loopDetecton: {} } }",
            "{ Tools: { loopDetection: {} } }",
            "{ loopGuard: { preset: 'recommended' } }",
            "{ agents: { list: [ { id: 'a', tools: { LoopDetection: {} } } ] } }",
            "{ agents: { entries: { a: { tool: { loopDetection: {} } } } } }",
        ] {
            assert_eq!(warned(text).len(), 1, "{text}");
        }
        let set = ConfigSet::parse("{ tools: { loopdetection: { enabled: true } } }").unwrap();
        assert!(
            !set.global().detectors_enabled(),
            "the misspelt block is not read"
        );
        // The right names, and other keys of a real config, are quiet.
        for text in [
            "{ tools: { loopDetection: { enabled: true }, exec: {}, web: {} }, loopguard: {} }",
            "{ tool: { exec: {} }, talk: {}, tools2: {}, gateway: { port: 1 } }",
            "{ agents: { list: [ { id: 'a', tools: { profile: 'x' } } ] } }",
        ] {
            assert_eq!(warned(text), Vec::<String>::new(), "{text}");
        }
        // A document with problems reports those, as before.
        assert!(ConfigSet::parse(
            "{ tool: { loopDetection: {} }, tools: { loopDetection: { x: 1 } } }"
        )
        .is_err());
    }
}
