//! The `loopguard` block: loopguard's own extensions beyond OpenClaw's detectors, all
//! opt-in. A document without the block behaves exactly as SPEC says.
//!
//! ```json5
//! {
//!   loopguard: {
//!     preset: "recommended",                 // the tuned set below; keys here override it
//!     mode: "shadow",                        // report what would fire, always allow
//!     masking: { rules: ["uuid", "iso8601"] }, // mask volatile tokens in every outcome
//!     policy: {
//!       tools: [
//!         { match: "session_*", class: "read", ignoreResult: ["details.statusText"] },
//!         { match: "notify_*", class: "send", ignoreArgs: ["title"], mask: true },
//!         { match: "browser_*", mask: ["digits"], target: ["url"] },
//!       ],
//!     },
//!     detectors: {
//!       consecutiveRepeat: { warningThreshold: 6, criticalThreshold: 12 },
//!       cycle: {},                           // present = on, with defaults
//!       errorCascade: { maxGap: 3 },
//!       staleRepeat: {},
//!       targetThrash: {},
//!       escalation: { stopAfter: 3 },
//!       batchDuplicates: {},
//!       repeatedMessage: {},                 // the model's messages (`message` events)
//!       contentChanting: {},
//!       noToolTurns: { criticalThreshold: 5 },
//!       runStorm: { cooldownMinutes: 0 },    // across the runs of a session
//!     },
//!   },
//!   agents: { list: [{ id: "ops", loopguard: { mode: "enforce" } }] },
//! }
//! ```

use std::fmt;
use std::sync::Arc;

use serde::{Serialize, Serializer};

pub use super::block::{
    AgentTreeBlock, BudgetBlock, BudgetsBlock, CascadeBlock, CycleBlock, EscalationBlock,
    LevelsBlock, MaskingBlock, PriceBlock, ProgressBudgetBlock, RunStormBlock, StaleBlock,
    SwitchBlock,
};
use crate::budget::prices::{Price, Rates};
use crate::budget::{BudgetLimits, Budgets, Cost, DEFAULT_NO_PROGRESS_CALLS};
use crate::canonical::PathSet;
use crate::masking::MaskSet;
use crate::policy::{RuleMask, ToolClass, ToolPolicy, ToolRule};
pub use crate::storm::RunStorm;
pub use crate::tree::AgentTree;

pub use super::value::MAX_CYCLE_LENGTH;

/// Default `consecutiveRepeat` thresholds.
pub const DEFAULT_CONSECUTIVE: (u32, u32) = (6, 12);
/// Default `cycle` settings: periods 2 to 16, warning at 3 repetitions, critical at 5.
pub const DEFAULT_CYCLE: (u32, u32, u32, u32) = (2, 16, 3, 5);
/// Default `errorCascade` thresholds and gap (0: failures strictly in a row).
pub const DEFAULT_ERROR_CASCADE: (u32, u32, u32) = (5, 10, 0);
/// Default `errorCascade.repeats`: failures sharing one error a run needs to block.
pub const DEFAULT_CASCADE_REPEATS: u32 = 3;
/// Default `staleRepeat` thresholds: warning, critical, critical when the repeated outcome
/// is a failure.
pub const DEFAULT_STALE_REPEAT: (u32, u32, u32) = (3, 4, 3);
/// Default `targetThrash` thresholds.
pub const DEFAULT_TARGET_THRASH: (u32, u32) = (4, 6);
/// Default `escalation.stopAfter`.
pub const DEFAULT_ESCALATION_STOP: u32 = 3;
/// Default `repeatedMessage` thresholds: copies of one answer in the window, and copies
/// with nothing new in between.
pub const DEFAULT_REPEATED_MESSAGE: (u32, u32) = (3, 4);
/// Default `contentChanting` thresholds: occurrences of one segment in a run of repeats.
pub const DEFAULT_CONTENT_CHANTING: (u32, u32) = (6, 10);
/// Default `noToolTurns` thresholds: the same feedback to answers without a tool call, in
/// a row.
pub const DEFAULT_NO_TOOL_TURNS: (u32, u32) = (3, 8);

/// Default `runStorm` settings: the run (in a row of runs ending the same way) warned at
/// its first call of the pattern, the run blocked at it, the runs after which the session
/// stops, and the minutes it stays stopped.
pub const DEFAULT_RUN_STORM: (u32, u32, u32, u32) = (2, 3, 3, 60);

/// Default `agentTree` limits: children per parent run, depth, unfinished children at once
/// (0: not counted, since a transcript reports no ends), failures the same way of one task.
pub const DEFAULT_AGENT_TREE: AgentTree = AgentTree {
    max_children: 10,
    max_depth: 3,
    max_concurrent: 0,
    respawn: 2,
};

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

/// A named set of settings under the block's own keys.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Preset {
    /// Every extension on, with thresholds tuned on the project's corpus of real
    /// transcripts (`docs/extensions.md` has the table).
    Recommended,
}

impl Preset {
    /// Every preset, with its name in configs.
    pub const ALL: &'static [(&'static str, Preset)] = &[("recommended", Preset::Recommended)];

    /// The settings the preset stands for, as if written in the block.
    pub fn block(self) -> ExtensionsBlock {
        match self {
            Preset::Recommended => recommended(),
        }
    }
}

/// The `recommended` preset. Each number is justified on the corpus in
/// `docs/extensions.md` ("The recommended preset").
fn recommended() -> ExtensionsBlock {
    let levels = |w, c| LevelsBlock {
        enabled: None,
        warning_threshold: Some(w),
        critical_threshold: Some(c),
    };
    let every_digit = MaskSet::ALL
        .union(MaskSet::from_names(["digits"]).unwrap_or(MaskSet::NONE))
        .rules()
        .map(|r| r.name.to_owned())
        .collect();
    ExtensionsBlock {
        preset: None,
        mode: None,
        masking: Some(MaskingBlock::default()),
        policy: PolicyBlock {
            builtin: None,
            // Browser and page-state tools renumber element indices on every call.
            tools: vec![ToolRuleBlock {
                pattern: "{browser,browser_*,*_browser,*snapshot*,*get_state*,*page_state*}"
                    .to_owned(),
                mask: Some(ToolMask::Rules(every_digit)),
                ..ToolRuleBlock::default()
            }],
        },
        consecutive_repeat: Some(levels(6, 12)),
        cycle: Some(CycleBlock {
            enabled: None,
            min_length: Some(2),
            max_length: Some(20),
            warning_repeats: Some(3),
            critical_repeats: Some(3),
        }),
        error_cascade: Some(CascadeBlock {
            enabled: None,
            warning_threshold: Some(5),
            critical_threshold: Some(8),
            max_gap: Some(3),
            repeats: Some(3),
            permanent_threshold: Some(5),
        }),
        stale_repeat: Some(StaleBlock {
            enabled: None,
            warning_threshold: Some(3),
            critical_threshold: Some(4),
            failure_threshold: Some(3),
        }),
        target_thrash: Some(levels(4, 6)),
        escalation: Some(EscalationBlock {
            enabled: None,
            stop_after: Some(3),
        }),
        batch_duplicates: Some(SwitchBlock::default()),
        budgets: None,
        prices: Vec::new(),
        repeated_message: Some(levels(3, 4)),
        content_chanting: Some(levels(6, 10)),
        no_tool_turns: Some(levels(3, 8)),
        run_storm: Some(RunStormBlock::default()),
        agent_tree: Some(AgentTreeBlock::default()),
    }
}

/// The `budgets` block, compiled: limits in the engine's units, `withoutProgress` on
/// unless it is switched off, its calls at their default when not given (tokens and cost
/// only when given: what a response costs depends on its context, which varies a
/// hundredfold between hosts, while a turn that acts is a call everywhere).
fn compile_budgets(b: &BudgetsBlock) -> Budgets {
    let dollars =
        |d: super::value::Decimal| Cost::from_pico(d.millionths().saturating_mul(1_000_000));
    let limits = |x: &BudgetBlock| BudgetLimits {
        tokens: x.tokens,
        cost: x.cost.map(dollars),
        calls: x.calls.map(u64::from),
        wall_seconds: x.wall_seconds.map(u64::from),
    };
    let p = &b.without_progress;
    let without_progress = match p.enabled != Some(false) {
        true => BudgetLimits {
            tokens: p.tokens,
            cost: p.cost.map(dollars),
            calls: Some(p.calls.map_or(DEFAULT_NO_PROGRESS_CALLS, u64::from)),
            wall_seconds: None,
        },
        false => BudgetLimits::default(),
    };
    Budgets {
        run: limits(&b.run),
        session: limits(&b.session),
        agent: limits(&b.agent),
        day: limits(&b.day),
        without_progress,
        warn_at: b
            .warn_at
            .map_or((crate::budget::DEFAULT_WARN_AT * 1e6) as u32, |d| {
                u32::try_from(d.millionths()).unwrap_or(1_000_000)
            }),
        utc_offset_minutes: b.time_zone.map_or(0, |z| z.minutes()),
    }
}

/// The `prices` block, compiled: names normalized, the first of a model kept, cache rates
/// defaulting to the input rate.
fn compile_prices(prices: &[(String, PriceBlock)]) -> Vec<(String, Price)> {
    let mut out: Vec<(String, Price)> = Vec::with_capacity(prices.len());
    for (model, p) in prices {
        let name = crate::budget::prices::normalize(model).into_owned();
        if out.iter().any(|(m, _)| *m == name) {
            continue;
        }
        let rate = |d: Option<super::value::Decimal>| d.map(|d| d.millionths());
        let input = rate(p.input).unwrap_or(0);
        out.push((
            name,
            Price::flat(Rates {
                input,
                output: rate(p.output).unwrap_or(0),
                cache_read: rate(p.cache_read).unwrap_or(input),
                cache_write: rate(p.cache_write).unwrap_or(input),
            }),
        ));
    }
    out
}

/// A tool rule's `mask`, as written.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum ToolMask {
    /// `true`: the global rule list (every rule when masking is off globally).
    On,
    /// `false`: no masking for this tool.
    Off,
    /// A list: exactly these rules (the way to turn on the opt-in `digits`).
    Rules(Vec<String>),
}

impl Serialize for ToolMask {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        match self {
            ToolMask::On => s.serialize_bool(true),
            ToolMask::Off => s.serialize_bool(false),
            ToolMask::Rules(names) => names.serialize(s),
        }
    }
}

impl fmt::Display for ToolMask {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ToolMask::On => f.write_str("true"),
            ToolMask::Off => f.write_str("false"),
            ToolMask::Rules(names) => write!(f, "[{}]", names.join(", ")),
        }
    }
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
    pub mask: Option<ToolMask>,
    /// Arguments that name the call's target, first present wins (`targetThrash`);
    /// absent: [`crate::policy::DEFAULT_TARGET_ARGS`]; empty: the tool has no target.
    pub target: Option<Vec<String>>,
    /// Warning threshold for this tool's calls.
    pub warning_threshold: Option<u32>,
    /// Critical threshold for this tool's calls.
    pub critical_threshold: Option<u32>,
}

impl ToolRuleBlock {
    /// The compiled rule (`None` if its glob, paths or mask rules do not compile; a
    /// validated document has none of those).
    pub fn compile(&self) -> Option<ToolRule> {
        let paths = |list: &[String]| PathSet::parse(list.iter().map(String::as_str)).ok();
        Some(ToolRule {
            class: self.class,
            ignore_args: paths(&self.ignore_args)?,
            ignore_result: paths(&self.ignore_result)?,
            mask: match &self.mask {
                None => RuleMask::Global,
                Some(ToolMask::On) => RuleMask::On,
                Some(ToolMask::Off) => RuleMask::Off,
                Some(ToolMask::Rules(names)) => RuleMask::rules(names.iter().map(String::as_str))?,
            },
            target: self.target.clone(),
            warning_threshold: self.warning_threshold,
            critical_threshold: self.critical_threshold,
            ..ToolRule::new(&self.pattern)?
        })
    }
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
    /// Settings this block starts from (its own keys override them).
    pub preset: Option<Preset>,
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
    pub error_cascade: Option<CascadeBlock>,
    /// `detectors.staleRepeat`.
    pub stale_repeat: Option<StaleBlock>,
    /// `detectors.targetThrash`.
    pub target_thrash: Option<LevelsBlock>,
    /// `detectors.escalation`.
    pub escalation: Option<EscalationBlock>,
    /// `detectors.batchDuplicates`.
    pub batch_duplicates: Option<SwitchBlock>,
    /// `budgets`.
    pub budgets: Option<BudgetsBlock>,
    /// `prices`: model name (as written) and price.
    pub prices: Vec<(String, PriceBlock)>,
    /// `detectors.repeatedMessage`.
    pub repeated_message: Option<LevelsBlock>,
    /// `detectors.contentChanting`.
    pub content_chanting: Option<LevelsBlock>,
    /// `detectors.noToolTurns`.
    pub no_tool_turns: Option<LevelsBlock>,
    /// `detectors.runStorm`.
    pub run_storm: Option<RunStormBlock>,
    /// `detectors.agentTree`.
    pub agent_tree: Option<AgentTreeBlock>,
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
        Self {
            preset: agent.preset.or(self.preset),
            mode: agent.mode.or(self.mode),
            masking: overlay_opt(&self.masking, &agent.masking, MaskingBlock::overlay),
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
                LevelsBlock::overlay,
            ),
            cycle: overlay_opt(&self.cycle, &agent.cycle, CycleBlock::overlay),
            error_cascade: overlay_opt(
                &self.error_cascade,
                &agent.error_cascade,
                CascadeBlock::overlay,
            ),
            stale_repeat: overlay_opt(&self.stale_repeat, &agent.stale_repeat, StaleBlock::overlay),
            target_thrash: overlay_opt(
                &self.target_thrash,
                &agent.target_thrash,
                LevelsBlock::overlay,
            ),
            escalation: overlay_opt(
                &self.escalation,
                &agent.escalation,
                EscalationBlock::overlay,
            ),
            batch_duplicates: overlay_opt(
                &self.batch_duplicates,
                &agent.batch_duplicates,
                SwitchBlock::overlay,
            ),
            budgets: overlay_opt(&self.budgets, &agent.budgets, BudgetsBlock::overlay),
            // The agent's prices first: the first of a model wins.
            prices: agent.prices.iter().chain(&self.prices).cloned().collect(),
            repeated_message: overlay_opt(
                &self.repeated_message,
                &agent.repeated_message,
                LevelsBlock::overlay,
            ),
            content_chanting: overlay_opt(
                &self.content_chanting,
                &agent.content_chanting,
                LevelsBlock::overlay,
            ),
            no_tool_turns: overlay_opt(
                &self.no_tool_turns,
                &agent.no_tool_turns,
                LevelsBlock::overlay,
            ),
            run_storm: overlay_opt(&self.run_storm, &agent.run_storm, RunStormBlock::overlay),
            agent_tree: overlay_opt(&self.agent_tree, &agent.agent_tree, AgentTreeBlock::overlay),
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
    /// Shortest period.
    pub min_length: u32,
    /// Longest period (capped at `historySize` when the call is judged).
    pub max_length: u32,
    /// Repetitions at which a cycle warns.
    pub warning_repeats: u32,
    /// Repetitions at which a cycle whose every position kept its outcome blocks (at
    /// least `warning_repeats`: the outcome evidence is what tells the two apart).
    pub critical_repeats: u32,
}

/// Effective `errorCascade` settings.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Cascade {
    /// Failures at which it warns and blocks.
    pub levels: Levels,
    /// Successful calls allowed between two failures of one run.
    pub max_gap: u32,
    /// Failures with one error (one failure signature) a run needs before it blocks; 0:
    /// the count alone blocks.
    pub repeats: u32,
    /// Failures at which a run blocks when the error it repeats is a permanent one (at
    /// most the critical threshold).
    pub permanent_threshold: u32,
}

/// Effective `staleRepeat` settings.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct StaleLevels {
    /// Earlier identical outcomes at which it warns and blocks.
    pub levels: Levels,
    /// Earlier identical failures at which it blocks.
    pub failure_critical: u32,
}

/// The extensions in force for one agent (or globally), compiled.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Extensions {
    /// The preset the block started from.
    pub preset: Option<Preset>,
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
    pub error_cascade: Option<Cascade>,
    /// `stale_repeat`, when on.
    pub stale_repeat: Option<StaleLevels>,
    /// `target_thrash`, when on.
    pub target_thrash: Option<Levels>,
    /// `escalation`, when on: attempts after which the run stops.
    pub escalation: Option<u32>,
    /// `batch_duplicates`.
    pub batch_duplicates: bool,
    /// The spend budgets, when the block has a `budgets` block.
    pub budgets: Option<Budgets>,
    /// The block's own prices (model names normalized), before the built-in table.
    pub prices: Vec<(String, Price)>,
    /// `repeated_message`, when on.
    pub repeated_message: Option<Levels>,
    /// `content_chanting`, when on.
    pub content_chanting: Option<Levels>,
    /// `no_tool_turns`, when on.
    pub no_tool_turns: Option<Levels>,
    /// `run_storm`, when on.
    pub run_storm: Option<RunStorm>,
    /// `agent_tree`, when on.
    pub agent_tree: Option<AgentTree>,
}

fn mask_names<S: Serializer>(set: &MaskSet, s: S) -> Result<S::Ok, S::Error> {
    s.collect_seq(set.rules().map(|r| r.name))
}

impl Extensions {
    /// Compiles a (merged, validated) block, laid over its preset when it names one.
    pub fn from_block(block: &ExtensionsBlock) -> Arc<Self> {
        match block.preset {
            Some(preset) => Self::compile(&preset.block().overlay(block)),
            None => Self::compile(block),
        }
    }

    fn compile(block: &ExtensionsBlock) -> Arc<Self> {
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
            let min_length = b.min_length.unwrap_or(min).clamp(2, MAX_CYCLE_LENGTH);
            let warning_repeats = b.warning_repeats.unwrap_or(w);
            CycleLevels {
                min_length,
                max_length: b
                    .max_length
                    .unwrap_or(max)
                    .clamp(min_length, MAX_CYCLE_LENGTH),
                warning_repeats,
                critical_repeats: b.critical_repeats.unwrap_or(c).max(warning_repeats),
            }
        });
        let error_cascade = block
            .error_cascade
            .as_ref()
            .filter(|b| on(b.enabled))
            .map(|b| {
                let (w, c, gap) = DEFAULT_ERROR_CASCADE;
                let levels = Levels::new(
                    b.warning_threshold.unwrap_or(w),
                    b.critical_threshold.unwrap_or(c),
                );
                Cascade {
                    levels,
                    max_gap: b.max_gap.unwrap_or(gap),
                    repeats: b.repeats.unwrap_or(DEFAULT_CASCADE_REPEATS),
                    permanent_threshold: b
                        .permanent_threshold
                        .unwrap_or(levels.critical)
                        .min(levels.critical),
                }
            });
        let stale_repeat = block
            .stale_repeat
            .as_ref()
            .filter(|b| on(b.enabled))
            .map(|b| {
                let (w, c, f) = DEFAULT_STALE_REPEAT;
                StaleLevels {
                    levels: Levels::new(
                        b.warning_threshold.unwrap_or(w),
                        b.critical_threshold.unwrap_or(c),
                    ),
                    failure_critical: b.failure_threshold.unwrap_or(f).max(1),
                }
            });
        let rules = block
            .policy
            .tools
            .iter()
            .filter_map(ToolRuleBlock::compile)
            .collect();
        Arc::new(Self {
            preset: block.preset,
            mode: block.mode.unwrap_or_default(),
            masking,
            policy: ToolPolicy::new(block.policy.builtin != Some(false), rules),
            consecutive_repeat: levels(&block.consecutive_repeat, DEFAULT_CONSECUTIVE),
            cycle,
            error_cascade,
            stale_repeat,
            target_thrash: levels(&block.target_thrash, DEFAULT_TARGET_THRASH),
            escalation: block
                .escalation
                .as_ref()
                .filter(|b| on(b.enabled))
                .map(|b| b.stop_after.unwrap_or(DEFAULT_ESCALATION_STOP).max(1)),
            batch_duplicates: block
                .batch_duplicates
                .as_ref()
                .is_some_and(|b| on(b.enabled)),
            budgets: block
                .budgets
                .as_ref()
                .map(compile_budgets)
                .filter(Budgets::any),
            prices: compile_prices(&block.prices),
            repeated_message: levels(&block.repeated_message, DEFAULT_REPEATED_MESSAGE),
            content_chanting: levels(&block.content_chanting, DEFAULT_CONTENT_CHANTING),
            no_tool_turns: levels(&block.no_tool_turns, DEFAULT_NO_TOOL_TURNS),
            run_storm: block.run_storm.as_ref().filter(|b| on(b.enabled)).map(|b| {
                let (w, c, stop, cool) = DEFAULT_RUN_STORM;
                let levels = Levels::new(
                    b.warning_threshold.unwrap_or(w),
                    b.critical_threshold.unwrap_or(c),
                );
                let minutes = |m: u32| u64::from(m) * 60_000;
                RunStorm {
                    warning: levels.warning,
                    critical: levels.critical,
                    stop_after: b.stop_after.unwrap_or(stop),
                    window_ms: b.window_minutes.map(minutes),
                    cooldown_ms: Some(b.cooldown_minutes.unwrap_or(cool))
                        .filter(|m| *m > 0)
                        .map(minutes),
                }
            }),
            agent_tree: block
                .agent_tree
                .as_ref()
                .filter(|b| on(b.enabled))
                .map(|b| {
                    let d = DEFAULT_AGENT_TREE;
                    AgentTree {
                        max_children: b.max_children.unwrap_or(d.max_children),
                        max_depth: b.max_depth.unwrap_or(d.max_depth),
                        max_concurrent: b.max_concurrent.unwrap_or(d.max_concurrent),
                        respawn: b.respawn.unwrap_or(d.respawn),
                    }
                }),
        })
    }

    /// Whether verdicts are only reported.
    pub fn is_shadow(&self) -> bool {
        self.mode == Mode::Shadow
    }

    /// Whether a detector of messages is on (`message` events are judged).
    pub fn judges_messages(&self) -> bool {
        self.repeated_message.is_some()
            || self.content_chanting.is_some()
            || self.no_tool_turns.is_some()
    }
}

#[cfg(test)]
mod tests {
    use crate::config::{ConfigIssue, ConfigSet, IssueKind};
    use crate::masking::MaskSet;

    fn ext(text: &str, agent: Option<&str>) -> std::sync::Arc<super::Extensions> {
        let set = ConfigSet::parse(text).unwrap();
        set.for_agent(agent).extensions.clone().unwrap()
    }

    fn issues(text: &str) -> Vec<ConfigIssue> {
        ConfigSet::parse(text).unwrap_err().issues
    }

    /// A compiled rule reads as it was written: in `config explain`'s JSON (its
    /// serialization) and in its one-line form.
    #[test]
    fn compiled_rules_report_what_was_written() {
        use super::{ToolMask, ToolRuleBlock};
        use crate::policy::ToolClass;
        let blocks = [
            ToolRuleBlock {
                pattern: "session_*".into(),
                class: Some(ToolClass::Read),
                ignore_args: vec!["$.a".into(), "b[*].c".into()],
                ignore_result: vec!["details.statusText".into()],
                mask: Some(ToolMask::Rules(vec!["digits".into(), "uuid".into()])),
                target: Some(vec!["url".into()]),
                warning_threshold: Some(3),
                critical_threshold: Some(5),
            },
            ToolRuleBlock {
                pattern: "notify".into(),
                mask: Some(ToolMask::On),
                target: Some(vec![]),
                ..Default::default()
            },
            ToolRuleBlock {
                pattern: "x?".into(),
                mask: Some(ToolMask::Off),
                ..Default::default()
            },
            ToolRuleBlock {
                pattern: "plain".into(),
                ..Default::default()
            },
        ];
        let lines = [
            "match session_*; class read; ignoreArgs $.a, b[*].c; ignoreResult details.statusText; \
             mask [digits, uuid]; target url; warningThreshold 3; criticalThreshold 5",
            "match notify; mask true; target ",
            "match x?; mask false",
            "match plain",
        ];
        for (block, line) in blocks.iter().zip(lines) {
            let rule = block.compile().unwrap();
            assert_eq!(
                serde_json::to_value(&rule).unwrap(),
                serde_json::to_value(block).unwrap()
            );
            assert_eq!(rule.to_string(), line);
        }
    }

    #[test]
    fn the_preset_lies_under_the_block() {
        let e = ext(
            "{ loopguard: { preset: 'recommended', detectors: { cycle: { enabled: false }, staleRepeat: { criticalThreshold: 9 } } } }",
            None,
        );
        assert_eq!(e.preset, Some(super::Preset::Recommended));
        assert!(e.cycle.is_none(), "switched off by the block");
        let stale = e.stale_repeat.unwrap();
        assert_eq!(
            (stale.levels.critical, stale.failure_critical),
            (9, 3),
            "the block's key, the preset's other"
        );
        assert_eq!(e.escalation, Some(3));
        assert_eq!(e.error_cascade.unwrap().max_gap, 3);
        assert_eq!(e.masking, MaskSet::ALL);
        // The preset's browser rule masks every digit.
        let rule = e.policy.rule(0).unwrap();
        let digits = MaskSet::from_names(["digits"]).unwrap();
        assert_eq!(rule.mask(e.masking), MaskSet::ALL.union(digits));
        assert_eq!(
            e.policy
                .classify("browser_get_state", &serde_json::json!({}))
                .rule,
            Some(0)
        );
    }

    #[test]
    fn agents_overlay_the_preset_and_keep_their_rules_first() {
        let text = "{ loopguard: { preset: 'recommended' }, agents: { list: [ { id: 'a', loopguard: { detectors: { escalation: { stopAfter: 5 } }, policy: { tools: [ { match: 'browser_click', mask: false } ] } } } ] } }";
        let global = ext(text, None);
        let agent = ext(text, Some("a"));
        assert_eq!(global.escalation, Some(3));
        assert_eq!(agent.escalation, Some(5));
        assert_eq!(agent.cycle, global.cycle, "the rest of the preset");
        let classified = agent
            .policy
            .classify("browser_click", &serde_json::json!({}));
        let rule = agent.policy.rule(classified.rule.unwrap()).unwrap();
        assert_eq!(
            rule.mask(agent.masking),
            MaskSet::NONE,
            "the agent's rule first"
        );
    }

    #[test]
    fn cycle_lengths_go_past_six_and_critical_may_equal_warning() {
        let e = ext(
            "{ loopguard: { detectors: { cycle: { maxLength: 40, warningRepeats: 3, criticalRepeats: 3 } } } }",
            None,
        );
        let c = e.cycle.unwrap();
        assert_eq!(
            (
                c.min_length,
                c.max_length,
                c.warning_repeats,
                c.critical_repeats
            ),
            (2, 40, 3, 3)
        );
        let c = ext("{ loopguard: { detectors: { cycle: {} } } }", None)
            .cycle
            .unwrap();
        assert_eq!(
            (c.max_length, c.warning_repeats, c.critical_repeats),
            (16, 3, 5)
        );
    }

    #[test]
    fn new_keys_are_validated() {
        let found = issues(
            "{ loopguard: { preset: 'fast', detectors: { errorCascade: { maxGap: -1 }, escalation: { stopAfter: 0, stop: 1 }, staleRepeat: { failureThreshold: 'x' }, cycle: { maxLength: 1001 } }, policy: { tools: [ { match: 'a', mask: 'digits', target: 'path' } ] } } }",
        );
        let kinds: Vec<String> = found
            .iter()
            .map(|i| format!("{} {:?}", i.path, i.kind))
            .collect();
        let has = |path: &str| kinds.iter().any(|k| k.starts_with(path));
        for path in [
            "loopguard.preset",
            "loopguard.detectors.errorCascade.maxGap",
            "loopguard.detectors.escalation.stopAfter",
            "loopguard.detectors.escalation.stop",
            "loopguard.detectors.staleRepeat.failureThreshold",
            "loopguard.detectors.cycle.maxLength",
            "loopguard.policy.tools[0].mask",
            "loopguard.policy.tools[0].target",
        ] {
            assert!(has(path), "no issue at {path}: {kinds:#?}");
        }
        assert!(found.iter().any(|i| matches!(
            &i.kind,
            IssueKind::UnknownKey {
                closest: "stopAfter",
                ..
            }
        )));
        // 0 is a valid gap: failures strictly in a row.
        let e = ext(
            "{ loopguard: { detectors: { errorCascade: { maxGap: 0 } } } }",
            None,
        );
        assert_eq!(e.error_cascade.unwrap().max_gap, 0);
    }
}
