//! The `loopguard` block: loopguard's own extensions beyond OpenClaw's detectors, all
//! opt-in. A document without the block behaves exactly as SPEC says.
//!
//! ```json5
//! {
//!   loopguard: {
//!     mode: "shadow",                        // report what would fire, always allow
//!     masking: { rules: ["uuid", "iso8601"] }, // mask volatile tokens in every outcome
//!     policy: {
//!       tools: [
//!         { match: "session_*", class: "read", ignoreResult: ["details.statusText"] },
//!         { match: "notify_*", class: "send", ignoreArgs: ["title"], mask: true },
//!       ],
//!     },
//!     detectors: {
//!       consecutiveRepeat: { warningThreshold: 6, criticalThreshold: 12 },
//!       cycle: {},                           // present = on, with defaults
//!       errorCascade: { enabled: false },
//!       batchDuplicates: {},
//!     },
//!   },
//!   agents: { list: [{ id: "ops", loopguard: { mode: "enforce" } }] },
//! }
//! ```

use std::sync::Arc;

use serde::{Serialize, Serializer};

use crate::masking::MaskSet;
use crate::policy::{ToolClass, ToolPolicy, ToolRule};

/// Default `consecutiveRepeat` thresholds.
pub const DEFAULT_CONSECUTIVE: (u32, u32) = (6, 12);
/// Default `cycle` settings: lengths 2 to 6, warning at 3 repetitions, critical at 5.
pub const DEFAULT_CYCLE: (u32, u32, u32, u32) = (2, 6, 3, 5);
/// Default `errorCascade` thresholds.
pub const DEFAULT_ERROR_CASCADE: (u32, u32) = (5, 10);

/// Enforce or only observe.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Mode {
    /// Verdicts are enforced (the default).
    #[default]
    Enforce,
    /// Everything is evaluated and reported; every call is allowed.
    Shadow,
}

/// A detector block with two thresholds, as written.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct LevelsBlock {
    /// On unless `false` (the block's presence turns the detector on).
    pub enabled: Option<bool>,
    /// Count at which it warns.
    pub warning_threshold: Option<u32>,
    /// Count at which it blocks.
    pub critical_threshold: Option<u32>,
}

/// The `cycle` block, as written.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct CycleBlock {
    /// On unless `false`.
    pub enabled: Option<bool>,
    /// Shortest cycle (distinct call patterns per repetition), at least 2.
    pub min_length: Option<u32>,
    /// Longest cycle, at most 6.
    pub max_length: Option<u32>,
    /// Repetitions at which it warns.
    pub warning_repeats: Option<u32>,
    /// Repetitions (with stable outcomes) at which it blocks.
    pub critical_repeats: Option<u32>,
}

/// A switch-only block, as written.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize)]
pub struct SwitchBlock {
    /// On unless `false`.
    pub enabled: Option<bool>,
}

/// The `masking` block, as written.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize)]
pub struct MaskingBlock {
    /// On unless `false`.
    pub enabled: Option<bool>,
    /// Rule names (all when absent).
    pub rules: Option<Vec<String>>,
}

/// One `policy.tools` entry, as written.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct ToolRuleBlock {
    /// Tool name or glob (`*`, `?`, `[abc]`).
    #[serde(rename = "match")]
    pub pattern: String,
    /// The tool's class.
    pub class: Option<ToolClass>,
    /// Argument keys or paths left out of the args fingerprint.
    pub ignore_args: Vec<String>,
    /// Result keys or paths left out of the outcome fingerprint.
    pub ignore_result: Vec<String>,
    /// Mask volatile tokens in this tool's outcomes (overrides the global switch).
    pub mask: Option<bool>,
    /// Warning threshold for this tool's calls.
    pub warning_threshold: Option<u32>,
    /// Critical threshold for this tool's calls.
    pub critical_threshold: Option<u32>,
}

/// The `policy` block, as written.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize)]
pub struct PolicyBlock {
    /// Keep SPEC's built-in tables under the rules (default `true`).
    pub builtin: Option<bool>,
    /// Tool rules, first match wins.
    pub tools: Vec<ToolRuleBlock>,
}

/// The `loopguard` block as written (global or one agent's).
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct ExtensionsBlock {
    /// Enforce or shadow.
    pub mode: Option<Mode>,
    /// Volatile-token masking.
    pub masking: Option<MaskingBlock>,
    /// Tool policy.
    pub policy: PolicyBlock,
    /// `detectors.consecutiveRepeat`.
    pub consecutive_repeat: Option<LevelsBlock>,
    /// `detectors.cycle`.
    pub cycle: Option<CycleBlock>,
    /// `detectors.errorCascade`.
    pub error_cascade: Option<LevelsBlock>,
    /// `detectors.batchDuplicates`.
    pub batch_duplicates: Option<SwitchBlock>,
}

fn overlay_opt<T: Clone>(
    base: &Option<T>,
    top: &Option<T>,
    merge: impl Fn(&T, &T) -> T,
) -> Option<T> {
    match (base, top) {
        (Some(b), Some(t)) => Some(merge(b, t)),
        (None, t) => t.clone(),
        (b, None) => b.clone(),
    }
}

impl ExtensionsBlock {
    /// `agent` laid over `self`: fields override, blocks merge key by key, and the agent's
    /// tool rules come first (first match wins).
    pub fn overlay(&self, agent: &Self) -> Self {
        let levels = |b: &LevelsBlock, t: &LevelsBlock| LevelsBlock {
            enabled: t.enabled.or(b.enabled),
            warning_threshold: t.warning_threshold.or(b.warning_threshold),
            critical_threshold: t.critical_threshold.or(b.critical_threshold),
        };
        Self {
            mode: agent.mode.or(self.mode),
            masking: overlay_opt(&self.masking, &agent.masking, |b, t| MaskingBlock {
                enabled: t.enabled.or(b.enabled),
                rules: t.rules.clone().or_else(|| b.rules.clone()),
            }),
            policy: PolicyBlock {
                builtin: agent.policy.builtin.or(self.policy.builtin),
                tools: agent
                    .policy
                    .tools
                    .iter()
                    .chain(&self.policy.tools)
                    .cloned()
                    .collect(),
            },
            consecutive_repeat: overlay_opt(
                &self.consecutive_repeat,
                &agent.consecutive_repeat,
                levels,
            ),
            cycle: overlay_opt(&self.cycle, &agent.cycle, |b, t| CycleBlock {
                enabled: t.enabled.or(b.enabled),
                min_length: t.min_length.or(b.min_length),
                max_length: t.max_length.or(b.max_length),
                warning_repeats: t.warning_repeats.or(b.warning_repeats),
                critical_repeats: t.critical_repeats.or(b.critical_repeats),
            }),
            error_cascade: overlay_opt(&self.error_cascade, &agent.error_cascade, levels),
            batch_duplicates: overlay_opt(
                &self.batch_duplicates,
                &agent.batch_duplicates,
                |b, t| SwitchBlock {
                    enabled: t.enabled.or(b.enabled),
                },
            ),
        }
    }
}

/// A warning and a critical level, critical above warning.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize)]
pub struct Levels {
    /// Count at which the detector warns.
    pub warning: u32,
    /// Count at which it blocks (always above `warning`).
    pub critical: u32,
}

impl Levels {
    fn new(warning: u32, critical: u32) -> Self {
        Self {
            warning,
            critical: critical.max(warning.saturating_add(1)),
        }
    }
}

/// Effective `cycle` settings.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct CycleLevels {
    /// Shortest cycle length.
    pub min_length: u32,
    /// Longest cycle length.
    pub max_length: u32,
    /// Repetitions.
    pub repeats: Levels,
}

/// The extensions in force for one agent (or globally), compiled.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Extensions {
    /// Enforce or shadow.
    pub mode: Mode,
    /// Masking applied to every outcome (empty: off), unless a tool rule says otherwise.
    #[serde(serialize_with = "mask_names")]
    pub masking: MaskSet,
    /// The tool policy.
    pub policy: ToolPolicy,
    /// `consecutive_repeat`, when on.
    pub consecutive_repeat: Option<Levels>,
    /// `cycle`, when on.
    pub cycle: Option<CycleLevels>,
    /// `error_cascade`, when on.
    pub error_cascade: Option<Levels>,
    /// `batch_duplicates`.
    pub batch_duplicates: bool,
}

fn mask_names<S: Serializer>(set: &MaskSet, s: S) -> Result<S::Ok, S::Error> {
    s.collect_seq(set.rules().map(|r| r.name))
}

impl Extensions {
    /// Compiles a (merged, validated) block.
    pub fn from_block(block: &ExtensionsBlock) -> Arc<Self> {
        let on = |enabled: Option<bool>| enabled != Some(false);
        let masking = match &block.masking {
            Some(m) if on(m.enabled) => match &m.rules {
                None => MaskSet::ALL,
                Some(names) => {
                    MaskSet::from_names(names.iter().map(String::as_str)).unwrap_or(MaskSet::ALL)
                }
            },
            _ => MaskSet::NONE,
        };
        let levels = |b: &Option<LevelsBlock>, (w, c): (u32, u32)| {
            b.as_ref().filter(|b| on(b.enabled)).map(|b| {
                Levels::new(
                    b.warning_threshold.unwrap_or(w),
                    b.critical_threshold.unwrap_or(c),
                )
            })
        };
        let cycle = block.cycle.as_ref().filter(|b| on(b.enabled)).map(|b| {
            let (min, max, w, c) = DEFAULT_CYCLE;
            let min_length = b.min_length.unwrap_or(min).clamp(2, 6);
            CycleLevels {
                min_length,
                max_length: b.max_length.unwrap_or(max).clamp(min_length, 6),
                repeats: Levels::new(
                    b.warning_repeats.unwrap_or(w),
                    b.critical_repeats.unwrap_or(c),
                ),
            }
        });
        let rules = block
            .policy
            .tools
            .iter()
            .filter_map(ToolRule::compile)
            .collect();
        Arc::new(Self {
            mode: block.mode.unwrap_or_default(),
            masking,
            policy: ToolPolicy::new(block.policy.builtin != Some(false), rules),
            consecutive_repeat: levels(&block.consecutive_repeat, DEFAULT_CONSECUTIVE),
            cycle,
            error_cascade: levels(&block.error_cascade, DEFAULT_ERROR_CASCADE),
            batch_duplicates: block
                .batch_duplicates
                .as_ref()
                .is_some_and(|b| on(b.enabled)),
        })
    }

    /// Whether verdicts are only reported.
    pub fn is_shadow(&self) -> bool {
        self.mode == Mode::Shadow
    }
}
