//! What a scan reports, per session: loops, findings, savings and the timeline.

use loopguard::{Detector, Level};
use serde::Serialize;

use crate::item::Usage;

/// Tokens, money and calls.
#[derive(Clone, Copy, Debug, Default, PartialEq, Serialize)]
pub struct Savings {
    /// Calls the guard would have blocked.
    pub calls: u64,
    /// Tokens of the responses that only reacted to blocked calls (`None` when the
    /// transcript records no usage).
    pub tokens: Option<u64>,
    /// Their cost, where the transcript records one.
    pub cost: Option<f64>,
}

/// `a + b`, rounded to a billionth so that sums of prices print as people expect.
pub(crate) fn add_cost(a: f64, b: f64) -> f64 {
    ((a + b) * 1e9).round() / 1e9
}

/// Adds `usage` to `total` (which becomes known).
pub(crate) fn add_spend(total: &mut Option<Usage>, usage: Usage) {
    let sum = total.get_or_insert(Usage {
        tokens: 0,
        cost: None,
    });
    sum.tokens += usage.tokens;
    if let Some(cost) = usage.cost {
        let c = sum.cost.get_or_insert(0.0);
        *c = add_cost(*c, cost);
    }
}

/// Whether `detector` is a spend budget of a run, an agent, a session or a day: it stops
/// what spent too much, not a loop (`no_progress_budget`, which stops a run circling
/// without progress, is a loop's).
pub fn is_spend_budget(detector: Detector) -> bool {
    detector.is_budget() && detector != Detector::NoProgressBudget
}

/// Where a budget (`loopguard.budgets`, `withoutProgress` among them) would have stopped a
/// session first, and what its stops would have saved.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct BudgetStop {
    /// The budget's detector (`run_budget`, `no_progress_budget`, …).
    pub detector: Detector,
    /// The call blocked; for a message, the calls before it.
    pub call_index: u64,
    /// For a message: its 1-based position among the session's messages.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub message_index: Option<u64>,
    /// Line in the source file.
    pub line: u64,
    /// Stops by a budget in the session (one per run stopped, or per run of a stopped
    /// session).
    pub stops: u64,
    /// What the budgets' stops would have saved: the calls blocked after them and the
    /// spend of every later response of the runs stopped.
    pub saved: Savings,
}

impl BudgetStop {
    /// The first budget stop of `loops` and what all of theirs saved, if a budget stopped
    /// a run.
    pub(crate) fn of(loops: &[LoopReport]) -> Option<Self> {
        let mut first: Option<Self> = None;
        let mut saved = Savings::default();
        let mut stops = 0;
        for l in loops {
            let Some(stop) = l.stop.as_ref().filter(|m| m.detector.is_budget()) else {
                continue;
            };
            stops += 1;
            saved.add(&l.saved);
            if first
                .as_ref()
                .is_none_or(|f| (stop.call_index, stop.line) < (f.call_index, f.line))
            {
                first = Some(Self {
                    detector: stop.detector,
                    call_index: stop.call_index,
                    message_index: stop.message_index,
                    line: stop.line,
                    stops: 0,
                    saved: Savings::default(),
                });
            }
        }
        first.map(|f| Self { stops, saved, ..f })
    }
}

impl Savings {
    pub(crate) fn add_usage(&mut self, usage: Usage) {
        *self.tokens.get_or_insert(0) += usage.tokens;
        if let Some(cost) = usage.cost {
            let total = self.cost.get_or_insert(0.0);
            *total = add_cost(*total, cost);
        }
    }

    /// Adds `other` to this.
    pub fn add(&mut self, other: &Savings) {
        self.calls += other.calls;
        if let Some(t) = other.tokens {
            *self.tokens.get_or_insert(0) += t;
        }
        if let Some(c) = other.cost {
            let total = self.cost.get_or_insert(0.0);
            *total = add_cost(*total, c);
        }
    }
}

/// One verdict worth reporting: the first warning or block of a loop for each detector,
/// or a compaction abort.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct Finding {
    /// The detector that fired.
    pub detector: Detector,
    /// `warning` (the call would have run, with a note) or `critical` (blocked).
    pub level: Level,
    /// The tool called.
    pub tool: String,
    /// Ping-pong: the other tool.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub paired_tool: Option<String>,
    /// The metric that fired.
    pub count: u32,
    /// 1-based position of the call in its session; for a message, the calls before it.
    pub call_index: u64,
    /// For a message: its 1-based position among the session's messages.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub message_index: Option<u64>,
    /// Line of the source file: the call's (the message's), or for a compaction abort the
    /// result's.
    pub line: u64,
    /// The run (its real id when the transcript has one).
    pub run: Option<String>,
    /// Index of the loop in the session's `loops`.
    #[serde(rename = "loop")]
    pub loop_index: usize,
    /// What the model would have read.
    pub message: String,
}

/// Longest preview of a loop's arguments and outcome, in characters.
pub(crate) const PREVIEW_CHARS: usize = 160;

/// `text` cut to [`PREVIEW_CHARS`] characters, ending in `…` when it was cut.
pub(crate) fn cut(text: &str) -> String {
    match text.char_indices().nth(PREVIEW_CHARS - 1) {
        Some((at, _)) if text.len() > at + 1 => format!("{}…", &text[..at]),
        _ => text.to_owned(),
    }
}

/// Where something happened.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct Mark {
    /// The detector that fired.
    pub detector: Detector,
    /// Its count.
    pub count: u32,
    /// 1-based position of the call in its session; for a message, the calls before it.
    pub call_index: u64,
    /// For a message: its 1-based position among the session's messages.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub message_index: Option<u64>,
    /// Line in the source file.
    pub line: u64,
}

/// One loop: a stretch of one run the guard stepped in on, reported once with every
/// detector that saw it.
///
/// Verdicts are grouped from what they carry, whatever the detector: a verdict joins the
/// loop of its run that holds its call pattern (the call's signature, the paired side of
/// a ping-pong), or else, when the call right before it in the run was flagged too, that
/// call's loop (an error cascade or a cycle moves from pattern to pattern); otherwise it
/// starts a loop. A compaction abort joins the loop of the call it repeats.
///
/// A loop without tool calls (the model repeating an answer, chanting, answering in text
/// while its harness asks for a call) is found on messages: its verdicts join the loop of
/// their run that holds their text (the repeated answer, the chanted segment, the
/// feedback), or else the run's text loop still open (no tool call made progress since),
/// never a loop of calls. It reports the messages it spans and the text repeated.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct LoopReport {
    /// The run (its real id when the transcript has one).
    pub run: Option<String>,
    /// The tool of the first flagged call.
    pub tool: String,
    /// Ping-pong: the other tool.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub paired_tool: Option<String>,
    /// Every tool of the loop's calls, in the order they were first flagged.
    pub tools: Vec<String>,
    /// The arguments of the first flagged call, as canonical JSON cut to 160 characters
    /// (`…` where it was cut); `None` for a loop that a compaction abort began.
    pub args: Option<String>,
    /// What the first flagged call returned, as the transcript has it (its text, or an
    /// error's, or the JSON of anything else), cut the same way; `None` when the
    /// transcript has no result for it.
    pub outcome: Option<String>,
    /// Every detector that fired on the loop, in the order they first did.
    pub detectors: Vec<Detector>,
    /// The first and the last flagged call (1-based positions in the session; after a
    /// stop, every later call of the run counts).
    pub calls: [u64; 2],
    /// Calls of the loop the guard would have warned about.
    pub warned_calls: u64,
    /// Calls of the loop a detector would have blocked (the calls blocked only because
    /// the run was stopped are in `saved.calls`).
    pub blocked_calls: u64,
    /// The first warning.
    pub first_warning: Option<Mark>,
    /// The first block.
    pub first_block: Option<Mark>,
    /// Escalation: the first block of a later call that went on with the loop after its
    /// first block.
    pub escalation: Option<Mark>,
    /// What stopped the run: the first terminal block (global circuit breaker, or a
    /// detector the config makes terminal) or a compaction abort.
    pub stop: Option<Mark>,
    /// Calls with the blocked call's tool and arguments that the agent made after the
    /// first block (each of them a repeat the block tried to prevent).
    pub repeats_after_block: u64,
    /// Whether the guard would have stopped the run; every later call of the run counts
    /// as blocked by this loop.
    pub stopped_run: bool,
    /// What blocking would have saved.
    pub saved: Savings,
    /// A loop without tool calls: the first and the last flagged message (1-based
    /// positions among the session's messages).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub messages: Option<[u64; 2]>,
    /// A loop without tool calls: the text repeated (the answer, the chanted segment, the
    /// harness's feedback), cut to a readable length.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub text: Option<String>,
    /// A loop without tool calls: tokens of the model responses made while it was open
    /// (from a flagged message until the model's next tool call, or the end of the run),
    /// where the transcript records usage.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub tokens: Option<u64>,
    /// `tokens` as a share of the session's tokens (0 to 1).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub token_share: Option<f64>,
}

/// Per-call picture of a session, for timelines.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Timeline {
    /// One mark per call: [`Timeline::ALLOW`], [`Timeline::WARN`], [`Timeline::BLOCK`] or
    /// [`Timeline::STOPPED`].
    pub marks: Vec<u8>,
    /// Calls made before each compaction.
    pub compactions: Vec<u64>,
    /// Call indexes whose result aborted the run (post-compaction guard).
    pub aborts: Vec<u64>,
    /// Call indexes that start a new run.
    pub run_starts: Vec<u64>,
}

impl Timeline {
    /// The call was allowed.
    pub const ALLOW: u8 = 0;
    /// The call was warned about.
    pub const WARN: u8 = 1;
    /// The call was blocked by a detector.
    pub const BLOCK: u8 = 2;
    /// The call was blocked because its run had been stopped.
    pub const STOPPED: u8 = 3;
}

/// Characters of a session's first prompt kept as its task.
pub const TASK_CHARS: usize = 200;

/// What a shadow scan found in one session.
#[derive(Clone, Debug, Default, PartialEq, Serialize)]
pub struct SessionReport {
    /// The session id.
    pub session: String,
    /// The session that spawned this one (a sub-agent's parent), as the transcript links
    /// them.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub parent_session: Option<String>,
    /// The run of the parent session that spawned this one, when the transcript says.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub parent_run: Option<String>,
    /// The session's first prompt (its task), shortened to 200 characters.
    #[serde(skip)]
    pub task: Option<String>,
    /// Runs seen (with at least one event).
    pub runs: u64,
    /// Tool calls.
    pub calls: u64,
    /// Messages: the model's answers, prompts, the harness's feedback (where the
    /// transcript records them).
    pub messages: u64,
    /// Messages the guard would have warned about.
    pub warned_messages: u64,
    /// Messages the guard would have blocked (each stops its run).
    pub blocked_messages: u64,
    /// Results matched to a call.
    pub outcomes: u64,
    /// Compactions.
    pub compactions: u64,
    /// Calls the guard would have warned about.
    pub warned_calls: u64,
    /// Calls the guard would have blocked.
    pub blocked_calls: u64,
    /// First warnings and blocks of each loop, and compaction aborts, in call order.
    pub findings: Vec<Finding>,
    /// The loops.
    pub loops: Vec<LoopReport>,
    /// Results that count as failed (an error, `isError`, `status: "error"`, an `exec`
    /// exit code: what the engine's failure-aware detectors read).
    pub failed_outcomes: u64,
    /// Calls that never got a result (cut-off or aborted turns).
    pub unpaired_calls: u64,
    /// Results whose call is not in the transcript.
    pub orphan_results: u64,
    /// Results the engine refused (a second result for one call, …).
    pub rejected_results: u64,
    /// Tokens and cost of all responses, where the transcript records usage.
    pub usage: Option<Usage>,
    /// Tokens and cost of the responses spent inside loops, where the transcript records
    /// usage: each response that made a flagged call (or message) of a loop, the responses
    /// between two flagged calls of a run when the later one goes on with a loop flagged
    /// before, and after a loop stopped its run, every later response of the run. Spend
    /// budgets (`run_budget`, `session_budget`, `agent_budget`, `day_budget`) find no loop.
    pub loop_spend: Option<Usage>,
    /// Where a budget would have stopped the session first, and what its stops would have
    /// saved (`None`: no budget stops it, or none is configured).
    pub budget_stop: Option<BudgetStop>,
    /// Whether the session was closed before its end to keep the scan within its live
    /// memory budget (its runs' history was forgotten; see `ScanOptions::live_memory`).
    pub closed_early: bool,
    /// What blocking would have saved.
    pub saved: Savings,
    /// The per-call picture.
    #[serde(skip)]
    pub timeline: Timeline,
}

impl SessionReport {
    /// Whether the guard would have blocked anything here.
    pub fn has_blocks(&self) -> bool {
        self.blocked_calls > 0 || self.blocked_messages > 0 || !self.timeline.aborts.is_empty()
    }
}
