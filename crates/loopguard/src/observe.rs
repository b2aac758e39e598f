//! Structured events for every warning, block, arming and abort: the one place the engine
//! talks to `tracing` (target `loopguard`, fields `session`, `run`, `tool`, `detector`,
//! `count`).
//!
//! The run logs what it answers, where it answers it: [`RunState::begin`] the verdict,
//! [`RunState::finish`] an abort, [`RunState::compaction`] the arming, [`RunState::usage`]
//! a spent budget. Every front end
//! goes through those, so every answer is logged once, the same way.
//!
//! [`RunState::begin`]: crate::RunState::begin
//! [`RunState::finish`]: crate::RunState::finish
//! [`RunState::compaction`]: crate::RunState::compaction
//! [`RunState::usage`]: crate::RunState::usage

use crate::scope::Scope;
use crate::verdict::{Abort, Recorded, Verdict};

/// Logs the verdict on a call of `tool` (nothing for an allowed call).
pub fn verdict(scope: &Scope<'_>, tool: &str, verdict: &Verdict) {
    match verdict {
        Verdict::Allow => {}
        Verdict::Warn { detection, notify } => tracing::warn!(
            target: "loopguard",
            session = scope.session(),
            run = scope.run(),
            tool,
            detector = detection.detector.as_str(),
            count = detection.count,
            notify,
            "loop warning"
        ),
        Verdict::Shadow {
            detection,
            terminal,
        } => tracing::info!(
            target: "loopguard",
            session = scope.session(),
            run = scope.run(),
            tool,
            detector = detection.detector.as_str(),
            level = detection.level.as_str(),
            count = detection.count,
            terminal,
            "shadow: would have fired"
        ),
        Verdict::Block {
            detection,
            terminal,
        } => tracing::error!(
            target: "loopguard",
            session = scope.session(),
            run = scope.run(),
            tool,
            detector = detection.detector.as_str(),
            count = detection.count,
            terminal,
            "tool call blocked"
        ),
    }
}

/// Logs a call judged as new although its id, tool and arguments came `sent` times
/// without a result ([`CallIdUse::Reused`](crate::CallIdUse::Reused)).
pub fn reused_id(scope: &Scope<'_>, tool: &str, sent: u8) {
    tracing::warn!(
        target: "loopguard",
        session = scope.session(),
        run = scope.run(),
        tool,
        sent,
        "call_id reused without results: counted as a new call"
    );
}

/// Logs the verdict on a message of `role` (nothing for an allowed one).
pub fn message(scope: &Scope<'_>, role: &str, verdict: &Verdict) {
    let Some(detection) = verdict.detection() else {
        return;
    };
    let (shadow, stopped) = match verdict {
        Verdict::Shadow { terminal, .. } => (true, *terminal),
        Verdict::Block { .. } => (false, true),
        _ => (false, false),
    };
    tracing::warn!(
        target: "loopguard",
        session = scope.session(),
        run = scope.run(),
        role,
        detector = detection.detector.as_str(),
        level = detection.level.as_str(),
        count = detection.count,
        shadow,
        stopped,
        "loop in the model's messages"
    );
}

/// Logs that a compaction armed the post-compaction guard for `attempts` calls (nothing
/// when it is disabled: 0).
pub fn armed(scope: &Scope<'_>, attempts: u32) {
    if attempts > 0 {
        tracing::info!(
            target: "loopguard",
            session = scope.session(),
            run = scope.run(),
            attempts,
            "post-compaction guard armed for {attempts} attempts"
        );
    }
}

/// Logs what recording an outcome did (an abort, if any).
pub fn recorded(scope: &Scope<'_>, recorded: &Recorded) {
    if let Some(abort) = &recorded.abort {
        self::abort(scope, abort);
    }
}

fn abort(scope: &Scope<'_>, abort: &Abort) {
    tracing::error!(
        target: "loopguard",
        session = scope.session(),
        run = scope.run(),
        tool = abort.tool.as_str(),
        detector = abort.detector().as_str(),
        count = abort.count,
        "run aborted: compaction_loop_persisted"
    );
}

/// Logs a model response's usage (debug), a response that a cost limit cannot count
/// (`unpriced`: warn, once per run), and the budget it used up (error), or the one it
/// would have in shadow mode (info).
pub fn usage(
    scope: &Scope<'_>,
    usage: &crate::budget::Usage<'_>,
    counted: &crate::budget::Counted,
    unpriced: bool,
) {
    if unpriced {
        tracing::warn!(
            target: "loopguard",
            session = scope.session(),
            run = scope.run(),
            model = usage.model,
            "a response without a cost (no host figure, no price for its model): the cost budgets do not count it; price the model in loopguard.prices"
        );
    }
    tracing::debug!(
        target: "loopguard",
        session = scope.session(),
        run = scope.run(),
        model = usage.model,
        tokens = usage.tokens(),
        cost_usd = counted.cost.map(crate::budget::Cost::usd),
        "usage counted"
    );
    let Some(r) = &counted.stop else {
        return;
    };
    let detector = r.scope.detector().as_str();
    let count = r.percent();
    if counted.shadow {
        tracing::info!(
            target: "loopguard",
            session = scope.session(),
            run = scope.run(),
            detector,
            count,
            "shadow: a budget is used up"
        );
    } else {
        tracing::error!(
            target: "loopguard",
            session = scope.session(),
            run = scope.run(),
            detector,
            count,
            "budget used up: the run stops at its next call"
        );
    }
}
