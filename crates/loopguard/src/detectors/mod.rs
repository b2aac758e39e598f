//! The detectors of SPEC §4 in their order of precedence (the first that fires decides),
//! then loopguard's own detectors ([`extensions`]) when the `loopguard` block turns them
//! on. A critical finding beats a warning; between two of the same level, SPEC's wins.

pub(crate) mod cascade;
pub(crate) mod chanting;
pub(crate) mod escalation;
pub(crate) mod extensions;
pub(crate) mod period;
pub(crate) mod thrash;
pub(crate) mod turns;

use crate::config::EffectiveConfig;
use crate::fingerprint::{CallPrint, Fingerprint, Signature};
use crate::history::{History, NameId};
use crate::metrics;
use crate::verdict::{Detector, Level};

/// A detector that fired, before it is put into words.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Finding {
    pub level: Level,
    pub detector: Detector,
    pub count: u32,
    /// Ping-pong: the other side's signature and tool.
    pub paired: Option<(Signature, NameId)>,
    /// Unknown tool: the missing tool.
    pub missing: Option<NameId>,
    /// Poll: the outcome the streak repeats (part of the warning key).
    pub latest: Option<Fingerprint>,
    /// Cycle: its length (the newest records hold one repetition).
    pub cycle_len: u32,
    /// Error cascade: sequence number of its first failure.
    pub cascade_start: u64,
    /// Error cascade: the outcomes its failures are spread over, when successes came in
    /// between.
    pub spread: Option<u32>,
    /// Error cascade: the failures that share its most frequent error, when several do.
    pub repeated: Option<u32>,
    /// Stale repeat: the repeated outcome is a failure.
    pub failed: bool,
}

impl Finding {
    pub(crate) fn new(level: Level, detector: Detector, count: u32) -> Self {
        Self {
            level,
            detector,
            count,
            paired: None,
            missing: None,
            latest: None,
            cycle_len: 0,
            cascade_start: 0,
            spread: None,
            repeated: None,
            failed: false,
        }
    }
}

/// The thresholds of one call: the config's, or a tool rule's where it sets them, clamped
/// like the config's (C above W, G above C).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Thresholds {
    pub warning: u32,
    pub critical: u32,
    pub global: u32,
    pub unknown_tool: u32,
}

impl Thresholds {
    pub(crate) fn for_call(cfg: &EffectiveConfig, call: &CallPrint<'_>) -> Self {
        let mut t = Self {
            warning: cfg.warning_threshold,
            critical: cfg.critical_threshold,
            global: cfg.global_circuit_breaker_threshold,
            unknown_tool: cfg.unknown_tool_threshold,
        };
        let rule = cfg
            .extensions
            .as_deref()
            .zip(call.rule.tool_rule())
            .and_then(|(ext, i)| ext.policy.rule(i));
        if let Some(rule) = rule {
            t.warning = rule.warning_threshold.unwrap_or(t.warning);
            t.critical = rule.critical_threshold.unwrap_or(t.critical);
            t.critical = t.critical.max(t.warning.saturating_add(1));
            t.global = t.global.max(t.critical.saturating_add(1));
        }
        t
    }
}

/// The finding that decides: critical before warning, `first` before `second` at one level.
pub(crate) fn decide(first: Option<Finding>, second: Option<Finding>) -> Option<Finding> {
    match (first, second) {
        (Some(a), Some(b)) if a.level == Level::Warning && b.level == Level::Critical => Some(b),
        (a, b) => a.or(b),
    }
}

/// Runs the detectors for `call` over `history`, whose newest record of the call's
/// signature is `newest`. Only when `enabled` is `true`.
pub(crate) fn detect(
    cfg: &EffectiveConfig,
    t: Thresholds,
    history: &History,
    call: &CallPrint<'_>,
    newest: Option<usize>,
) -> Option<Finding> {
    if !cfg.detectors_enabled() {
        return None;
    }
    use Level::{Critical, Warning};

    let unknown = metrics::unknown_tool_streak(history, history.names().find(call.tool));
    if unknown.count >= t.unknown_tool {
        let mut f = Finding::new(Critical, Detector::UnknownToolRepeat, unknown.count);
        f.missing = unknown.missing;
        return Some(f);
    }

    let streak = metrics::streak_from(history, newest);
    if streak.count >= t.global {
        return Some(Finding::new(
            Critical,
            Detector::GlobalCircuitBreaker,
            streak.count,
        ));
    }

    if call.known_poll && cfg.detectors.known_poll_no_progress {
        let level = if streak.count >= t.critical {
            Some(Critical)
        } else if streak.count >= t.warning {
            Some(Warning)
        } else {
            None
        };
        if let Some(level) = level {
            let mut f = Finding::new(level, Detector::KnownPollNoProgress, streak.count);
            f.latest = streak.latest;
            return Some(f);
        }
    }

    if cfg.detectors.ping_pong {
        let pp = metrics::ping_pong(history, call.signature);
        let level = if pp.count >= t.critical && pp.no_progress {
            Some(Critical)
        } else if pp.count >= t.warning {
            Some(Warning)
        } else {
            None
        };
        if let Some(level) = level {
            let mut f = Finding::new(level, Detector::PingPong, pp.count);
            f.paired = pp.paired;
            return Some(f);
        }
    }

    if !call.known_poll && cfg.detectors.generic_repeat {
        if streak.count >= t.critical {
            return Some(Finding::new(
                Critical,
                Detector::GenericRepeat,
                streak.count,
            ));
        }
        let repeats = history.count_from(call.signature, newest);
        if repeats >= t.warning {
            return Some(Finding::new(Warning, Detector::GenericRepeat, repeats));
        }
    }
    None
}
