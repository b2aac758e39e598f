//! What the engine answers: verdicts before a call, aborts after one, and the words the
//! model reads.

use std::fmt;

use serde::{Deserialize, Serialize};
use serde_json::{json, Value};

use crate::fingerprint::Signature;

/// Which rule fired.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
#[non_exhaustive]
pub enum Detector {
    /// Same tool, same arguments.
    GenericRepeat,
    /// A known polling call whose state does not change.
    KnownPollNoProgress,
    /// Alternating between two call patterns.
    PingPong,
    /// Retrying a tool that does not exist.
    UnknownToolRepeat,
    /// The no-progress breaker that ends the run.
    GlobalCircuitBreaker,
    /// The loop survived a context compaction; the run is aborted.
    CompactionLoopPersisted,
    /// An unbroken run of one call pattern, whatever the outcomes (extension).
    ConsecutiveRepeat,
    /// The newest calls repeat a period of call patterns (extension).
    Cycle,
    /// A run of failed outcomes across tools (extension).
    ErrorCascade,
    /// A duplicate call inside one batch of parallel calls (extension).
    BatchDuplicates,
    /// The same call keeps returning the same outcome, other calls in between (extension).
    StaleRepeat,
    /// Repeated failures on one target (a file, a URL) with changing arguments (extension).
    TargetThrash,
    /// A call that continues a loop already blocked; ends the run after a few (extension).
    Escalation,
    /// A run's spend budget (`loopguard.budgets.run`).
    RunBudget,
    /// A session's spend budget (`loopguard.budgets.session`).
    SessionBudget,
    /// An agent's spend budget in a session (`loopguard.budgets.agent`).
    AgentBudget,
    /// A session's spend budget for one calendar day (`loopguard.budgets.day`).
    DayBudget,
    /// What a run may spend without progress (`loopguard.budgets.withoutProgress`).
    NoProgressBudget,
    /// The model gives the same answer again and again (extension, messages).
    RepeatedMessage,
    /// One piece of text repeated over and over inside one answer (extension, messages).
    ContentChanting,
    /// The harness keeps sending the same feedback to answers without a tool call
    /// (extension, messages).
    NoToolTurns,
    /// A session's runs end the same way again and again, without progress (extension,
    /// across runs).
    RunStorm,
    /// A sub-agent spawned past a limit of its tree: children of one run, depth, children
    /// at once, a task that failed the same way before (extension, across sessions).
    AgentTree,
}

impl Detector {
    /// Every detector, in the order of this enum: the closed set that metrics, API schemas
    /// and documentation derive from.
    pub const ALL: [Self; 23] = [
        Self::GenericRepeat,
        Self::KnownPollNoProgress,
        Self::PingPong,
        Self::UnknownToolRepeat,
        Self::GlobalCircuitBreaker,
        Self::CompactionLoopPersisted,
        Self::ConsecutiveRepeat,
        Self::Cycle,
        Self::ErrorCascade,
        Self::BatchDuplicates,
        Self::StaleRepeat,
        Self::TargetThrash,
        Self::Escalation,
        Self::RunBudget,
        Self::SessionBudget,
        Self::AgentBudget,
        Self::DayBudget,
        Self::NoProgressBudget,
        Self::RepeatedMessage,
        Self::ContentChanting,
        Self::NoToolTurns,
        Self::RunStorm,
        Self::AgentTree,
    ];

    /// The snake_case name used in outputs.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::GenericRepeat => "generic_repeat",
            Self::KnownPollNoProgress => "known_poll_no_progress",
            Self::PingPong => "ping_pong",
            Self::UnknownToolRepeat => "unknown_tool_repeat",
            Self::GlobalCircuitBreaker => "global_circuit_breaker",
            Self::CompactionLoopPersisted => "compaction_loop_persisted",
            Self::ConsecutiveRepeat => "consecutive_repeat",
            Self::Cycle => "cycle",
            Self::ErrorCascade => "error_cascade",
            Self::BatchDuplicates => "batch_duplicates",
            Self::StaleRepeat => "stale_repeat",
            Self::TargetThrash => "target_thrash",
            Self::Escalation => "escalation",
            Self::RunBudget => "run_budget",
            Self::SessionBudget => "session_budget",
            Self::AgentBudget => "agent_budget",
            Self::DayBudget => "day_budget",
            Self::NoProgressBudget => "no_progress_budget",
            Self::RepeatedMessage => "repeated_message",
            Self::ContentChanting => "content_chanting",
            Self::NoToolTurns => "no_tool_turns",
            Self::RunStorm => "run_storm",
            Self::AgentTree => "agent_tree",
        }
    }

    /// Whether the detector judges messages (what the model said, what it was told)
    /// rather than tool calls.
    pub fn judges_messages(self) -> bool {
        matches!(
            self,
            Self::RepeatedMessage | Self::ContentChanting | Self::NoToolTurns
        )
    }

    /// Whether firing always ends the run (`escalation` ends it only after its last
    /// attempt; its verdict says so). A budget's block is terminal; its warning is not. A
    /// blocked message ends its run: its words cannot be taken back, only the next model
    /// call refused.
    pub fn is_terminal(self) -> bool {
        matches!(
            self,
            Self::GlobalCircuitBreaker | Self::CompactionLoopPersisted
        ) || self.is_budget()
            || self.judges_messages()
    }

    /// Whether this is a spend budget's detector.
    pub fn is_budget(self) -> bool {
        matches!(
            self,
            Self::RunBudget
                | Self::SessionBudget
                | Self::AgentBudget
                | Self::DayBudget
                | Self::NoProgressBudget
        )
    }
}

impl fmt::Display for Detector {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// How serious a detection is.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
#[non_exhaustive]
pub enum Level {
    /// The call runs; the model is told.
    Warning,
    /// The call does not run.
    Critical,
}

impl Level {
    /// Every level, lowest first.
    pub const ALL: [Self; 2] = [Self::Warning, Self::Critical];

    /// `warning` or `critical`.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Warning => "warning",
            Self::Critical => "critical",
        }
    }
}

impl fmt::Display for Level {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// A detector that fired on a call.
///
/// Serialized (in stored run states and wherever a host serializes it) with the fields it
/// always had: the evidence flattened into `paired_tool` and `paired_signature`, so states
/// written before [`Evidence`] read back unchanged.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(try_from = "DetectionFields", into = "DetectionFields")]
#[non_exhaustive]
pub struct Detection {
    /// Warning or critical.
    pub level: Level,
    /// Which rule.
    pub detector: Detector,
    /// The metric that fired (a streak, a repeat count, an alternation length).
    pub count: u32,
    /// The tool of the call.
    pub tool: String,
    /// What the model reads: the level, the tool, the count, the pattern and what to do.
    pub message: String,
    /// The call's signature (tool + args), to group detections into loops.
    pub signature: Signature,
    /// What this detector found beyond the call itself.
    pub evidence: Evidence,
}

impl Detection {
    /// For a detection of messages (`repeated_message`, `content_chanting`,
    /// `no_tool_turns`): the text its message quotes (the repeated answer, the chanted
    /// segment, the harness's feedback), cut to a readable length. `None` for the others,
    /// and for the answer of a run already stopped.
    pub fn excerpt(&self) -> Option<&str> {
        if !self.detector.judges_messages() {
            return None;
        }
        let start = self.message.find("(\"")? + 2;
        let end = self.message.rfind("\")")?;
        self.message.get(start..end)
    }
}

/// What a detector found beyond the call itself: only ping-pong names more today.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
#[non_exhaustive]
pub enum Evidence {
    /// Nothing beyond the call and the count.
    #[default]
    None,
    /// Ping-pong: the other side of the alternation.
    PingPong {
        /// Its tool.
        paired_tool: String,
        /// Its signature (tool + args).
        paired_signature: Signature,
    },
}

impl Evidence {
    /// For ping-pong: the tool on the other side of the alternation.
    pub fn paired_tool(&self) -> Option<&str> {
        match self {
            Self::PingPong { paired_tool, .. } => Some(paired_tool),
            Self::None => None,
        }
    }

    /// For ping-pong: the other side's signature.
    pub fn paired_signature(&self) -> Option<Signature> {
        match self {
            Self::PingPong {
                paired_signature, ..
            } => Some(*paired_signature),
            Self::None => None,
        }
    }
}

/// [`Detection`]'s serialized form: its fields before the evidence was an enum, in their
/// order (postcard states are positional).
#[derive(Serialize, Deserialize)]
struct DetectionFields {
    level: Level,
    detector: Detector,
    count: u32,
    tool: String,
    paired_tool: Option<String>,
    message: String,
    signature: Signature,
    paired_signature: Option<Signature>,
}

impl From<Detection> for DetectionFields {
    fn from(d: Detection) -> Self {
        let (paired_tool, paired_signature) = match d.evidence {
            Evidence::PingPong {
                paired_tool,
                paired_signature,
            } => (Some(paired_tool), Some(paired_signature)),
            Evidence::None => (None, None),
        };
        Self {
            level: d.level,
            detector: d.detector,
            count: d.count,
            tool: d.tool,
            paired_tool,
            message: d.message,
            signature: d.signature,
            paired_signature,
        }
    }
}

impl TryFrom<DetectionFields> for Detection {
    type Error = &'static str;

    /// A paired tool without its signature, or the reverse, is refused rather than
    /// dropped (the engine writes both or neither).
    fn try_from(f: DetectionFields) -> Result<Self, Self::Error> {
        Ok(Self {
            level: f.level,
            detector: f.detector,
            count: f.count,
            tool: f.tool,
            message: f.message,
            signature: f.signature,
            evidence: match (f.paired_tool, f.paired_signature) {
                (Some(paired_tool), Some(paired_signature)) => Evidence::PingPong {
                    paired_tool,
                    paired_signature,
                },
                (None, None) => Evidence::None,
                _ => return Err("paired_tool and paired_signature go together"),
            },
        })
    }
}

/// The engine's answer to a call, before it executes.
#[derive(Clone, Debug, PartialEq, Eq)]
#[must_use = "a blocked call must not be executed"]
#[non_exhaustive]
pub enum Verdict {
    /// Run the call.
    Allow,
    /// Run the call, and tell the model when `notify` says so.
    Warn {
        /// What fired.
        detection: Detection,
        /// Whether this warning should be surfaced now (warnings are surfaced once per
        /// multiple of the warning threshold, per pattern).
        notify: bool,
    },
    /// Do not run the call; hand the model [`Verdict::blocked_result`] instead.
    Block {
        /// What fired.
        detection: Detection,
        /// Whether the run is over: every later call of the run is blocked too.
        terminal: bool,
    },
    /// Shadow mode (`loopguard.mode: "shadow"`): run the call; this is what would have
    /// fired (a warning, or a block when `detection.level` is critical).
    Shadow {
        /// What would have fired.
        detection: Detection,
        /// Whether the block would have ended the run.
        terminal: bool,
    },
}

impl Verdict {
    /// Whether the call must not run.
    pub fn is_blocked(&self) -> bool {
        matches!(self, Self::Block { .. })
    }

    /// The detection behind a warn, a block or a shadow verdict.
    pub fn detection(&self) -> Option<&Detection> {
        match self {
            Self::Allow => None,
            Self::Warn { detection, .. }
            | Self::Block { detection, .. }
            | Self::Shadow { detection, .. } => Some(detection),
        }
    }

    /// For a block: the tool result to hand the model in place of executing the call
    /// (SPEC §5). Recording it as the call's outcome is harmless: it is a loop veto.
    pub fn blocked_result(&self) -> Option<Value> {
        match self {
            Self::Block { detection, .. } => Some(json!({
                "content": [{ "type": "text", "text": detection.message }],
                "details": {
                    "status": "blocked",
                    "deniedReason": "tool-loop",
                    "detector": detection.detector,
                    "count": detection.count,
                },
            })),
            _ => None,
        }
    }

    /// For a warning to surface: the note the host appends to the tool's result.
    pub fn warning_note(&self) -> Option<String> {
        match self {
            Self::Warn {
                detection,
                notify: true,
            } => Some(format!("[loopguard] {}", detection.message)),
            _ => None,
        }
    }
}

/// A run aborted by the post-compaction guard (`compaction_loop_persisted`).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[non_exhaustive]
pub struct Abort {
    /// The tool whose identical calls persisted.
    pub tool: String,
    /// Their signature (tool + args).
    pub signature: Signature,
    /// How many identical (tool, args, result) triples were seen.
    pub count: u32,
    /// The error the run ends with.
    pub message: String,
}

impl Abort {
    /// Always [`Detector::CompactionLoopPersisted`].
    pub fn detector(&self) -> Detector {
        Detector::CompactionLoopPersisted
    }
}

/// What became of an outcome.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct Recorded {
    /// Whether the history changed (false for outcomes without a fingerprint and for the
    /// results of blocked calls).
    pub recorded: bool,
    /// Set when this outcome made the post-compaction guard abort the run.
    pub abort: Option<Abort>,
    /// Shadow mode: the abort that would have happened (the run goes on).
    pub would_abort: Option<Abort>,
}

impl Recorded {
    /// An answer built outside the engine (a host relaying a sidecar's answer).
    pub fn new(recorded: bool, abort: Option<Abort>, would_abort: Option<Abort>) -> Self {
        Self {
            recorded,
            abort,
            would_abort,
        }
    }

    /// When this outcome ended the run (the post-compaction guard aborted it): the
    /// message the run ends with. The host stops the run; every later call of it would
    /// be blocked anyway.
    pub fn ends_run(&self) -> Option<&str> {
        self.abort.as_ref().map(|a| a.message.as_str())
    }
}

/// The words of every message, in one place.
pub(crate) mod messages {
    use super::{Detector, Level};
    use crate::budget::{BudgetScope, Measure, Reading};

    pub fn generic_warning(tool: &str, n: u32) -> String {
        format!(
            "WARNING: you have called {tool} {n} times with identical arguments. If this is not making progress, stop retrying and report the task as failed."
        )
    }

    pub fn generic_critical(tool: &str, n: u32) -> String {
        format!(
            "CRITICAL: {tool} was called {n} times with identical arguments and identical results. This call was blocked to stop a runaway loop; do not retry it, change approach or report the task as failed."
        )
    }

    pub fn poll_warning(tool: &str, n: u32) -> String {
        format!(
            "WARNING: you have polled {tool} {n} times with identical arguments and its state has not changed. Wait longer between checks, or report the task as failed if the process is stuck."
        )
    }

    pub fn poll_critical(tool: &str, n: u32) -> String {
        format!(
            "CRITICAL: {tool} was polled {n} times with identical arguments and no progress. This call was blocked: the polling loop is stuck; report the task as failed."
        )
    }

    pub fn ping_pong_warning(tool: &str, paired: &str, n: u32) -> String {
        format!(
            "WARNING: you are alternating between {tool} and {paired} ({n} consecutive calls, {n} times). This looks like a ping-pong loop; stop retrying and report the task as failed."
        )
    }

    pub fn ping_pong_critical(tool: &str, paired: &str, n: u32) -> String {
        format!(
            "CRITICAL: you are alternating between {tool} and {paired} ({n} consecutive calls, {n} times) with no progress. This call was blocked: the ping-pong loop is stuck."
        )
    }

    pub fn unknown_tool(missing: &str, tool: &str, n: u32) -> String {
        format!(
            "CRITICAL: attempted unavailable tool {missing} {n} times (called as {tool}). It does not exist here: stop retrying it and answer without it."
        )
    }

    pub fn global_breaker(tool: &str, n: u32) -> String {
        format!(
            "CRITICAL: {tool} has repeated identical no-progress outcomes {n} times. The global circuit breaker stopped this run to prevent a runaway loop."
        )
    }

    pub fn stopped_run(detector: Detector, stop_tool: &str, n: u32, tool: &str) -> String {
        if detector.judges_messages() {
            return format!(
                "CRITICAL: this run was stopped by {detector} (the {stop_tool} repeated itself {n} times); {tool} was not executed."
            );
        }
        format!(
            "CRITICAL: this run was stopped by {detector} ({stop_tool} repeated {n} times); {tool} was not executed."
        )
    }

    /// What a message of a stopped run is answered.
    pub fn stopped_run_message(detector: Detector, stop_tool: &str, n: u32) -> String {
        let what = match detector.judges_messages() {
            true => format!("the {stop_tool} repeated itself {n} times"),
            false => format!("{stop_tool} repeated {n} times"),
        };
        format!(
            "CRITICAL: this run was stopped by {detector} ({what}); do not call the model again in this run."
        )
    }

    pub fn repeated_message_warning(n: u32, excerpt: &str) -> String {
        format!(
            "WARNING: the assistant has given the same answer {n} times in this run (\"{excerpt}\"). Saying it again will not move the task on: do something different, or say that you are stuck."
        )
    }

    pub fn repeated_message_critical(n: u32, excerpt: &str) -> String {
        format!(
            "CRITICAL: the assistant has given the same answer {n} times with nothing changing in between (\"{excerpt}\"). The run was stopped (repeated_message): do not call the model again in this run."
        )
    }

    pub fn chanting_warning(role: &str, n: u32, excerpt: &str) -> String {
        format!(
            "WARNING: the {role} repeats the same text over and over, {n} times (\"{excerpt}\"). Stop repeating it: finish the answer or change approach."
        )
    }

    pub fn chanting_critical(role: &str, n: u32, excerpt: &str) -> String {
        format!(
            "CRITICAL: the {role} repeated the same text {n} times within one answer (\"{excerpt}\"). The run was stopped (content_chanting): stop the stream and do not call the model again in this run."
        )
    }

    pub fn no_tool_turns_warning(n: u32, excerpt: &str) -> String {
        format!(
            "WARNING: the assistant answered {n} times in a row without a tool call and got the same feedback each time (\"{excerpt}\"). Follow the required format: call a tool, or say that you cannot."
        )
    }

    pub fn no_tool_turns_critical(n: u32, excerpt: &str) -> String {
        format!(
            "CRITICAL: the assistant answered {n} times in a row without a tool call and got the same feedback each time (\"{excerpt}\"). The run was stopped (no_tool_turns): do not call the model again in this run."
        )
    }

    pub fn consecutive_warning(tool: &str, n: u32) -> String {
        format!(
            "WARNING: you have called {tool} {n} times in a row with identical arguments and nothing in between. If the calls are not making progress, stop and report the task as failed."
        )
    }

    pub fn consecutive_critical(tool: &str, n: u32) -> String {
        format!(
            "CRITICAL: {tool} was called {n} times in a row with identical arguments. This call was blocked: change approach or report the task as failed."
        )
    }

    pub fn cycle_warning(tool: &str, cycle: &str, n: u32) -> String {
        format!(
            "WARNING: your calls repeat the cycle {cycle} {n} times, and {tool} would start it again. If this is not making progress, stop and report the task as failed."
        )
    }

    pub fn cycle_critical(tool: &str, cycle: &str, n: u32) -> String {
        format!(
            "CRITICAL: your calls repeated the cycle {cycle} {n} times with identical results. This {tool} call was blocked: the cycle is stuck."
        )
    }

    /// `spread`: the calls the failures are spread over, when successes came in between.
    pub fn error_cascade_warning(tool: &str, n: u32, spread: Option<u32>) -> String {
        let what = failures(n, spread);
        format!(
            "WARNING: {what}; {tool} is next. Stop and rethink the approach before calling more tools."
        )
    }

    pub fn error_cascade_critical(
        tool: &str,
        n: u32,
        spread: Option<u32>,
        repeated: Option<u32>,
    ) -> String {
        let what = failures(n, spread);
        let same = match repeated {
            Some(r) if r == n => ", all with the same error".to_owned(),
            Some(r) => format!(", {r} of them with the same error"),
            None => String::new(),
        };
        format!(
            "CRITICAL: {what}{same}. This {tool} call was blocked: stop calling tools and report what went wrong."
        )
    }

    fn failures(n: u32, spread: Option<u32>) -> String {
        match spread {
            Some(calls) => format!("{n} of the last {calls} tool calls failed"),
            None => format!("the last {n} tool calls failed"),
        }
    }

    pub fn batch_duplicate(tool: &str, n: u32, first: &str) -> String {
        format!(
            "CRITICAL: this {tool} call is identical to call {first} of the same batch of parallel calls (copy {n}); it was not executed. Use the result of {first}."
        )
    }

    fn stale_outcome(failed: bool) -> &'static str {
        if failed {
            "failed the same way"
        } else {
            "returned the same result"
        }
    }

    pub fn stale_warning(tool: &str, n: u32, failed: bool) -> String {
        let what = stale_outcome(failed);
        format!(
            "WARNING: {tool} was called with these arguments {n} times before and {what} each time. Calling it again will not change that: use what you have or try something else."
        )
    }

    pub fn stale_critical(tool: &str, n: u32, failed: bool) -> String {
        let what = stale_outcome(failed);
        format!(
            "CRITICAL: {tool} was called with these arguments {n} times before and {what} each time. This call was blocked: do not repeat it, change approach or report the task as failed."
        )
    }

    pub fn target_thrash_warning(tool: &str, target: &str, n: u32) -> String {
        format!(
            "WARNING: {tool} has failed {n} times on {target} with varying arguments. Read the errors and the current state of {target} before trying again."
        )
    }

    pub fn target_thrash_critical(tool: &str, target: &str, n: u32) -> String {
        format!(
            "CRITICAL: {tool} has failed {n} times on {target} with varying arguments. This call was blocked: stop retrying blindly, inspect {target} and change approach, or report the task as failed."
        )
    }

    pub fn escalation(tool: &str, loop_detector: Detector, attempt: u32, limit: u32) -> String {
        format!(
            "CRITICAL: this {tool} call continues the loop that {loop_detector} blocked (attempt {attempt} after the block; the run stops at {limit}). It was blocked again: do something different, or report the task as failed."
        )
    }

    pub fn escalation_stop(tool: &str, loop_detector: Detector, attempt: u32) -> String {
        format!(
            "CRITICAL: {tool} continued the loop that {loop_detector} blocked {attempt} more times. The run was stopped (escalation)."
        )
    }

    /// What a budget's limit is, in words: `cost budget`, `limit without progress`.
    fn budget_what(r: &Reading) -> String {
        let what = match r.measure {
            Measure::Cost => "cost",
            Measure::Tokens => "token",
            Measure::Calls => "call",
            Measure::WallSeconds => "time",
        };
        match r.scope {
            BudgetScope::WithoutProgress => format!("{what} limit without progress"),
            _ => format!("{what} budget"),
        }
    }

    /// How a spent budget ends things.
    fn budget_ending(scope: BudgetScope) -> &'static str {
        match scope {
            BudgetScope::Run => "the run is stopped (run_budget)",
            BudgetScope::WithoutProgress => {
                "the run is stopped: it made no progress (no_progress_budget)"
            }
            BudgetScope::Agent => {
                "this agent's runs are stopped until the session is reset (agent_budget)"
            }
            BudgetScope::Session => {
                "every run of this session is stopped until the session is reset (session_budget)"
            }
            BudgetScope::Day => {
                "every run of this session is stopped until the day turns (day_budget)"
            }
        }
    }

    /// `whose`: `this run`, `this session`, `agent coder in this session`, ….
    pub fn budget_warning(tool: &str, whose: &str, r: &Reading) -> String {
        let (used, limit, left) = (
            r.measure.show(r.used),
            r.measure.show(r.limit),
            r.measure.show(r.left()),
        );
        match r.scope {
            BudgetScope::WithoutProgress => format!(
                "WARNING: this run has spent {used} of its {limit} allowed without progress ({}%; no new successful result since), {left} left before it is stopped. {tool} is next: change approach, or report where you stand.",
                r.percent()
            ),
            _ => format!(
                "WARNING: {whose} has used {}% of its {} ({used} of {limit}; {left} left). {tool} is next: finish the task, or report where you stand before the budget runs out.",
                r.percent(),
                budget_what(r)
            ),
        }
    }

    /// `its token budget (1,050 tokens of 1,000 tokens, 105%)`.
    fn budget_used(r: &Reading) -> String {
        format!(
            "its {} ({} of {}, {}%)",
            budget_what(r),
            r.measure.show(r.used),
            r.measure.show(r.limit),
            r.percent()
        )
    }

    pub fn budget_block(tool: &str, whose: &str, r: &Reading) -> String {
        format!(
            "CRITICAL: {whose} has used up {}. This {tool} call was blocked and {}.",
            budget_used(r),
            budget_ending(r.scope)
        )
    }

    /// For the answer to the usage that used a budget up.
    pub fn budget_spent(whose: &str, r: &Reading) -> String {
        format!(
            "CRITICAL: {whose} has used up {}: the next call will be blocked and {}.",
            budget_used(r),
            budget_ending(r.scope)
        )
    }

    /// A later call of a run a budget stopped.
    pub fn budget_stopped(tool: &str, r: &Reading) -> String {
        format!(
            "CRITICAL: this run was stopped by {}: it used up {}; {tool} was not executed.",
            r.scope.detector(),
            budget_used(r)
        )
    }

    /// What a message of a run a budget stopped is answered.
    pub fn budget_stopped_message(r: &Reading) -> String {
        format!(
            "CRITICAL: this run was stopped by {}: it used up {}; do not call the model again in this run.",
            r.scope.detector(),
            budget_used(r)
        )
    }

    /// A call of the pattern that ended the session's last runs, warned.
    pub fn run_storm_warning(tool: &str, runs: u32) -> String {
        let runs = last_runs(runs);
        format!("WARNING: {runs} of this session ended the same way ({tool} failing or looping) without progress. Do not repeat {tool} as before: try another approach, or report the problem and stop (run_storm).")
    }

    /// A call of the pattern that ended the session's last runs, blocked at once.
    pub fn run_storm_critical(tool: &str, runs: u32) -> String {
        let runs = last_runs(runs);
        format!("CRITICAL: {runs} of this session ended the same way ({tool} failing or looping) without progress. This {tool} call was blocked without waiting for it to fail again: report the problem instead of retrying it (run_storm).")
    }

    /// A call of a sub-agent spawned at (warning) or past (critical) a limit of its tree.
    pub fn agent_tree(
        level: Level,
        limit: crate::tree::TreeLimit,
        count: u32,
        tool: &str,
    ) -> String {
        use crate::tree::TreeLimit;
        let what = match limit {
            TreeLimit::Children => format!("child {count} of the run that spawned it"),
            TreeLimit::Depth => format!("at depth {count} below the root session"),
            TreeLimit::Concurrent => format!("one of {count} children of its parent run at once"),
            TreeLimit::Respawn => {
                format!("spawn {count} of a task that failed the same way each time before")
            }
        };
        match level {
            Level::Warning => format!("WARNING: this {tool} call comes from a sub-agent that is {what}, at the limit of its agent tree. Finish this task and report back; do not spawn further agents for it (agent_tree)."),
            Level::Critical => format!("CRITICAL: this {tool} call comes from a sub-agent that is {what}, past the limit of its agent tree: the sub-agent may not run, and the call was blocked. Report back to the agent that spawned it (agent_tree)."),
        }
    }

    /// "the last 1 run" or "the last N runs" (the count is always written).
    fn last_runs(runs: u32) -> String {
        match runs {
            1 => "the last 1 run".to_owned(),
            n => format!("the last {n} runs"),
        }
    }

    /// A call of a session stopped by `run_storm`.
    pub fn run_storm_stopped(tool: &str, runs: u32, until: Option<u64>) -> String {
        let when = match until {
            Some(minutes) => format!(
                "for {minutes} more minute{}",
                if minutes == 1 { "" } else { "s" }
            ),
            None => "until the session is reset".to_owned(),
        };
        format!("CRITICAL: {runs} runs of this session in a row ended the same way without progress: every run of this session is stopped {when}. This {tool} call was blocked (run_storm).")
    }

    /// The message of a compaction abort.
    pub fn compaction_abort(tool: &str, n: u32, window: u32) -> String {
        format!(
            "CRITICAL: tool {tool} repeated {n} times with identical arguments and identical results within {window} attempts after auto-compaction. The compaction did not break the loop; the run was aborted (compaction_loop_persisted)."
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The layout `Detection` had before its evidence was an enum: stored run states (postcard)
    /// and serialized detections (JSON) keep it byte for byte.
    #[test]
    fn detections_serialize_as_they_did_before_evidence() {
        #[derive(Serialize)]
        struct Before {
            level: Level,
            detector: Detector,
            count: u32,
            tool: String,
            paired_tool: Option<String>,
            message: String,
            signature: Signature,
            paired_signature: Option<Signature>,
        }
        let signature = |n: u128| Signature::new("t", crate::Fingerprint::from_u128(n));
        let detection = |evidence| Detection {
            level: Level::Critical,
            detector: Detector::PingPong,
            count: 6,
            tool: "read".into(),
            message: "m".into(),
            signature: signature(1),
            evidence,
        };
        let pinged_again = || {
            detection(Evidence::PingPong {
                paired_tool: "write".into(),
                paired_signature: signature(2),
            })
        };
        let pinged = pinged_again();
        let before = |paired: Option<(&str, Signature)>| Before {
            level: Level::Critical,
            detector: Detector::PingPong,
            count: 6,
            tool: "read".into(),
            paired_tool: paired.map(|(t, _)| t.into()),
            message: "m".into(),
            signature: signature(1),
            paired_signature: paired.map(|(_, s)| s),
        };
        for (now, then) in [
            (pinged, before(Some(("write", signature(2))))),
            (detection(Evidence::None), before(None)),
        ] {
            let bytes = postcard::to_allocvec(&now).unwrap();
            assert_eq!(bytes, postcard::to_allocvec(&then).unwrap());
            assert_eq!(postcard::from_bytes::<Detection>(&bytes).unwrap(), now);
            let json = serde_json::to_string(&now).unwrap();
            assert_eq!(json, serde_json::to_string(&then).unwrap());
            assert_eq!(serde_json::from_str::<Detection>(&json).unwrap(), now);
        }
        let mut half = serde_json::to_value(pinged_again()).unwrap();
        half["paired_signature"] = serde_json::Value::Null;
        assert!(serde_json::from_value::<Detection>(half).is_err());
    }

    #[test]
    fn all_lists_every_detector_once_under_its_output_name() {
        // An exhaustive match: a new detector does not compile here until it is placed.
        fn position(d: Detector) -> usize {
            match d {
                Detector::GenericRepeat => 0,
                Detector::KnownPollNoProgress => 1,
                Detector::PingPong => 2,
                Detector::UnknownToolRepeat => 3,
                Detector::GlobalCircuitBreaker => 4,
                Detector::CompactionLoopPersisted => 5,
                Detector::ConsecutiveRepeat => 6,
                Detector::Cycle => 7,
                Detector::ErrorCascade => 8,
                Detector::BatchDuplicates => 9,
                Detector::StaleRepeat => 10,
                Detector::TargetThrash => 11,
                Detector::Escalation => 12,
                Detector::RunBudget => 13,
                Detector::SessionBudget => 14,
                Detector::AgentBudget => 15,
                Detector::DayBudget => 16,
                Detector::NoProgressBudget => 17,
                Detector::RepeatedMessage => 18,
                Detector::ContentChanting => 19,
                Detector::NoToolTurns => 20,
                Detector::RunStorm => 21,
                Detector::AgentTree => 22,
            }
        }
        let mut names = std::collections::BTreeSet::new();
        for (i, d) in Detector::ALL.iter().enumerate() {
            assert_eq!(position(*d), i, "{d}");
            assert_eq!(serde_json::to_value(d).unwrap(), d.as_str());
            assert!(names.insert(d.as_str()), "{d} twice");
        }
    }
}
