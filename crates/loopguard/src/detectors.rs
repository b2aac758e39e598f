//! The detectors of SPEC §4 in their order of precedence: the first that fires decides.

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
}

impl Finding {
    fn new(level: Level, detector: Detector, count: u32) -> Self {
        Self {
            level,
            detector,
            count,
            paired: None,
            missing: None,
            latest: None,
        }
    }
}

/// Runs the detectors for `call` over `history`, whose newest record of the call's
/// signature is `newest`. Only when `enabled` is `true`.
pub(crate) fn detect(
    cfg: &EffectiveConfig,
    history: &History,
    call: &CallPrint<'_>,
    newest: Option<usize>,
) -> Option<Finding> {
    if !cfg.detectors_enabled() {
        return None;
    }
    use Level::{Critical, Warning};

    let unknown = metrics::unknown_tool_streak(history, history.names().find(call.tool));
    if unknown.count >= cfg.unknown_tool_threshold {
        let mut f = Finding::new(Critical, Detector::UnknownToolRepeat, unknown.count);
        f.missing = unknown.missing;
        return Some(f);
    }

    let streak = metrics::streak_from(history, newest);
    if streak.count >= cfg.global_circuit_breaker_threshold {
        return Some(Finding::new(
            Critical,
            Detector::GlobalCircuitBreaker,
            streak.count,
        ));
    }

    if call.known_poll && cfg.detectors.known_poll_no_progress {
        let level = if streak.count >= cfg.critical_threshold {
            Some(Critical)
        } else if streak.count >= cfg.warning_threshold {
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
        let level = if pp.count >= cfg.critical_threshold && pp.no_progress {
            Some(Critical)
        } else if pp.count >= cfg.warning_threshold {
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
        if streak.count >= cfg.critical_threshold {
            return Some(Finding::new(
                Critical,
                Detector::GenericRepeat,
                streak.count,
            ));
        }
        let repeats = history.count_from(call.signature, newest);
        if repeats >= cfg.warning_threshold {
            return Some(Finding::new(Warning, Detector::GenericRepeat, repeats));
        }
    }
    None
}
