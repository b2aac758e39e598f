//! The state of one (session, run) scope and the chain that updates it:
//! fingerprints → metrics → detectors → verdict → enforcement → record.
//!
//! A [`RunState`] is a plain value: the in-memory [`Guard`](crate::Guard) keeps them in a
//! map, and durable stores load one, apply an event, and save it back atomically.

use serde::{Deserialize, Serialize};

use crate::compaction::CompactionGuard;
use crate::config::EffectiveConfig;
use crate::detectors::{self, Finding, Thresholds};
use crate::enforcement::{NotifyBuckets, WarningKey};
use crate::fingerprint::{CallPrint, Outcome, OutcomePrint, OutcomeRule, Signature};
use crate::history::{call_id_hash, History, NewRecord, RecordState};
use crate::observe;
use crate::scope::Scope;
use crate::verdict::{messages, Abort, Detection, Detector, Level, Recorded, Verdict};

/// The warning threshold whose multiples surface a warning of `detector`.
fn warning_threshold(cfg: &EffectiveConfig, t: Thresholds, detector: Detector) -> u32 {
    let ext = cfg.extensions.as_deref();
    match detector {
        Detector::ConsecutiveRepeat => ext.and_then(|x| x.consecutive_repeat).map(|l| l.warning),
        Detector::Cycle => ext.and_then(|x| x.cycle).map(|c| c.repeats.warning),
        Detector::ErrorCascade => ext.and_then(|x| x.error_cascade).map(|l| l.warning),
        _ => None,
    }
    .unwrap_or(t.warning)
}

/// Why a run stopped: every later call of the run is blocked with this.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Stop {
    /// `global_circuit_breaker` or `compaction_loop_persisted`.
    pub detector: Detector,
    /// The count that stopped it.
    pub count: u32,
    /// The tool whose loop stopped it.
    pub tool: String,
}

/// A result that names its call only by id, and names none that can take it.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum ResultError {
    /// No call with this id in the scope's history.
    #[error("no pending call with this call_id in this session and run (give tool and args, or the call_id of a pending call)")]
    UnknownCall,
    /// The call already has its outcome.
    #[error("this call_id already has a result")]
    AlreadyRecorded,
}

/// A stored run state that cannot be read back.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum StateDecodeError {
    /// Written by another version of the state format.
    #[error("run state format version {found} is not supported (this build reads version {STATE_FORMAT_VERSION})")]
    Version {
        /// The version found.
        found: u8,
    },
    /// Corrupt bytes.
    #[error("run state is corrupt: {0}")]
    Corrupt(String),
}

/// Version of [`RunState::to_bytes`]'s format; bumped on any incompatible change (it also
/// covers the fingerprint version, since states hold fingerprints).
pub const STATE_FORMAT_VERSION: u8 = 2;

/// Everything the engine remembers about one (session, run).
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct RunState {
    history: History,
    notify: NotifyBuckets,
    guard: CompactionGuard,
    stop: Option<Stop>,
    last_active: u64,
    /// The current batch of parallel calls (tracked for `batch_duplicates`).
    batch: Option<Batch>,
}

/// The calls of the current batch: signature, copies seen, and how to name the first.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
struct Batch {
    id: u64,
    calls: Vec<(Signature, u32, Box<str>)>,
}

impl RunState {
    /// The rolling history.
    pub fn history(&self) -> &History {
        &self.history
    }

    /// Why the run stopped, if it did.
    pub fn stop(&self) -> Option<&Stop> {
        self.stop.as_ref()
    }

    /// The post-compaction guard.
    pub fn compaction_guard(&self) -> &CompactionGuard {
        &self.guard
    }

    /// Warning keys surfaced so far.
    pub fn notify_keys(&self) -> usize {
        self.notify.len()
    }

    /// When the run last saw an event (clock milliseconds).
    pub fn last_active(&self) -> u64 {
        self.last_active
    }

    /// A compact, versioned binary form, for durable stores: a version byte, then the
    /// state (postcard; fingerprints as raw 16-byte strings, since variable-length integers
    /// would only cost time on random values).
    pub fn to_bytes(&self) -> Vec<u8> {
        let mut out = Vec::with_capacity(64 * self.history.len() + 256);
        self.encode_into(&mut out);
        out
    }

    /// [`RunState::to_bytes`], appended to `out` (reuse one buffer across writes).
    pub fn encode_into(&self, out: &mut Vec<u8>) {
        out.push(STATE_FORMAT_VERSION);
        // Encoding plain data into a Vec cannot fail.
        if let Ok(bytes) = postcard::to_extend(self, std::mem::take(out)) {
            *out = bytes;
        }
    }

    /// Reads back [`RunState::to_bytes`].
    pub fn from_bytes(bytes: &[u8]) -> Result<Self, StateDecodeError> {
        match bytes.split_first() {
            Some((&STATE_FORMAT_VERSION, rest)) => {
                let (mut state, left): (Self, &[u8]) = postcard::take_from_bytes(rest)
                    .map_err(|e| StateDecodeError::Corrupt(e.to_string()))?;
                if !left.is_empty() {
                    return Err(StateDecodeError::Corrupt(format!(
                        "{} bytes after the state",
                        left.len()
                    )));
                }
                state.history.restore_index();
                Ok(state)
            }
            Some((&found, _)) => Err(StateDecodeError::Version { found }),
            None => Err(StateDecodeError::Corrupt("empty".into())),
        }
    }

    /// Approximate bytes held by this state, heap included.
    pub fn approx_bytes(&self) -> usize {
        std::mem::size_of::<Self>()
            + self.history.heap_bytes()
            + self.notify.heap_bytes()
            + self.stop.as_ref().map_or(0, |s| s.tool.len())
    }

    /// The verdict on a call about to run, and its record.
    pub fn before_call(
        &mut self,
        cfg: &EffectiveConfig,
        scope: &Scope<'_>,
        call: &CallPrint<'_>,
        call_id: Option<&str>,
        batch: Option<&str>,
        now: u64,
    ) -> Verdict {
        let verdict = self.verdict(cfg, call, call_id, batch, now);
        observe::verdict(scope, call.tool, &verdict);
        verdict
    }

    fn verdict(
        &mut self,
        cfg: &EffectiveConfig,
        call: &CallPrint<'_>,
        call_id: Option<&str>,
        batch: Option<&str>,
        now: u64,
    ) -> Verdict {
        self.last_active = now;
        let id = call_id.map(call_id_hash);
        if let Some(stop) = &self.stop {
            let detection = Detection {
                level: Level::Critical,
                detector: stop.detector,
                count: stop.count,
                tool: call.tool.to_owned(),
                paired_tool: None,
                message: messages::stopped_run(stop.detector, &stop.tool, stop.count, call.tool),
                signature: call.signature,
                paired_signature: None,
            };
            self.push(cfg, call, id, RecordState::Veto, now, None);
            return Verdict::Block {
                detection,
                terminal: true,
            };
        }
        let newest = self.history.newest_of(call.signature);
        let thresholds = Thresholds::for_call(cfg, call);
        let mut finding = detectors::detect(cfg, thresholds, &self.history, call, newest);
        let mut batch_first = None;
        if let Some(ext) = cfg.extensions.as_deref() {
            let repeat = match batch.filter(|_| ext.batch_duplicates) {
                Some(batch) => self.batch_repeat(batch, call, call_id),
                None => None,
            };
            let copies = repeat.as_ref().map(|(n, _)| *n);
            batch_first = repeat.map(|(_, first)| first);
            let extended = detectors::extensions::detect(ext, &self.history, call, copies);
            finding = detectors::decide(finding, extended);
        }
        let Some(finding) = finding else {
            self.push(cfg, call, id, RecordState::Pending, now, Some(newest));
            return Verdict::Allow;
        };
        let detection = self.describe(&finding, call, batch_first.as_deref());
        let shadow = cfg.is_shadow();
        let terminal = finding.level == Level::Critical && finding.detector.is_terminal();
        if finding.level == Level::Warning || shadow {
            let notify = finding.level == Level::Warning && {
                let key = match (finding.detector, finding.paired) {
                    (Detector::KnownPollNoProgress, _) => {
                        WarningKey::Poll(call.signature, finding.latest)
                    }
                    (Detector::PingPong, Some((paired, _))) => {
                        WarningKey::ping_pong(call.signature, paired)
                    }
                    (Detector::GenericRepeat, _) => WarningKey::Generic(call.signature),
                    (Detector::Cycle, _) => {
                        WarningKey::Cycle(self.cycle_key(call, finding.cycle_len))
                    }
                    // One cascade per run, whichever call continues it.
                    (Detector::ErrorCascade, _) => WarningKey::Cascade(finding.cascade_start),
                    (other, _) => WarningKey::Other(other, call.signature),
                };
                let w = warning_threshold(cfg, thresholds, finding.detector);
                self.notify.surface(key, finding.count, w)
            };
            self.push(cfg, call, id, RecordState::Pending, now, Some(newest));
            return if shadow {
                Verdict::Shadow {
                    detection,
                    terminal,
                }
            } else {
                Verdict::Warn { detection, notify }
            };
        }
        if terminal {
            self.stop = Some(Stop {
                detector: finding.detector,
                count: finding.count,
                tool: call.tool.to_owned(),
            });
        }
        self.push(cfg, call, id, RecordState::Veto, now, Some(newest));
        Verdict::Block {
            detection,
            terminal,
        }
    }

    /// Tracks a call of batch `batch`; when an identical call came earlier in the batch,
    /// returns this call's copy number and how to name the first one.
    fn batch_repeat(
        &mut self,
        batch: &str,
        call: &CallPrint<'_>,
        call_id: Option<&str>,
    ) -> Option<(u32, String)> {
        let id = call_id_hash(batch);
        let state = match &mut self.batch {
            Some(b) if b.id == id => b,
            slot => slot.insert(Batch {
                id,
                calls: Vec::new(),
            }),
        };
        if let Some((_, copies, first)) = state
            .calls
            .iter_mut()
            .find(|(s, _, _)| *s == call.signature)
        {
            *copies += 1;
            return Some((*copies, first.to_string()));
        }
        let position = state.calls.len() + 1;
        let first = call_id.map_or_else(|| format!("#{position}"), str::to_owned);
        state.calls.push((call.signature, 1, first.into()));
        None
    }

    /// Records the outcome of a call given by tool and arguments.
    pub fn after_call(
        &mut self,
        cfg: &EffectiveConfig,
        scope: &Scope<'_>,
        call: &CallPrint<'_>,
        call_id: Option<&str>,
        outcome: Outcome<'_>,
        now: u64,
    ) -> Recorded {
        self.last_active = now;
        let id = call_id.map(call_id_hash);
        let recorded = self.settle(cfg, call.tool, call.signature, call.rule, id, outcome, now);
        observe::recorded(scope, &recorded);
        recorded
    }

    /// Records the outcome of the call with id `call_id`, which must be in the history.
    pub fn after_call_by_id(
        &mut self,
        cfg: &EffectiveConfig,
        scope: &Scope<'_>,
        call_id: &str,
        outcome: Outcome<'_>,
        now: u64,
    ) -> Result<Recorded, ResultError> {
        self.last_active = now;
        let id = call_id_hash(call_id);
        let index = self
            .history
            .by_call_id(id)
            .ok_or(ResultError::UnknownCall)?;
        let record = &self.history.records()[index];
        match record.state() {
            RecordState::Veto => Ok(Recorded::default()),
            RecordState::Done(_) => Err(ResultError::AlreadyRecorded),
            RecordState::Pending => {
                let tool = self.history.names().get(record.tool()).to_owned();
                let (signature, rule) = (record.signature(), record.rule());
                let recorded = self.settle(cfg, &tool, signature, rule, Some(id), outcome, now);
                observe::recorded(scope, &recorded);
                Ok(recorded)
            }
        }
    }

    /// The tool and args of the pending call with id `call_id`, when there is one: lets a
    /// result that omits its arguments attach to its call.
    pub fn pending_call(&self, call_id: &str) -> Option<(&str, Signature)> {
        let index = self.history.by_call_id(call_id_hash(call_id))?;
        let record = &self.history.records()[index];
        record
            .is_pending()
            .then(|| (self.history.names().get(record.tool()), record.signature()))
    }

    /// A compaction retry: arms the guard. Returns the window, or 0 when it is disabled.
    pub fn compaction(&mut self, cfg: &EffectiveConfig, scope: &Scope<'_>, now: u64) -> u32 {
        self.last_active = now;
        if !cfg.guard_enabled() {
            return 0;
        }
        self.guard.arm(cfg.post_compaction_window);
        observe::armed(scope, cfg.post_compaction_window);
        cfg.post_compaction_window
    }

    #[allow(clippy::too_many_arguments)]
    fn settle(
        &mut self,
        cfg: &EffectiveConfig,
        tool: &str,
        signature: Signature,
        rule: OutcomeRule,
        id: Option<u64>,
        outcome: Outcome<'_>,
        now: u64,
    ) -> Recorded {
        let pending = self.history.pending_match(signature, id);
        if let (None, Some(id)) = (pending, id) {
            // The result of a blocked call is ignored: the call never ran.
            let vetoed = self
                .history
                .by_call_id(id)
                .is_some_and(|i| self.history.records()[i].is_veto());
            if vetoed {
                return Recorded::default();
            }
        }
        let (state, unknown) = match OutcomePrint::for_config(rule, outcome, cfg) {
            OutcomePrint::Nothing => return Recorded::default(),
            OutcomePrint::Veto => (RecordState::Veto, None),
            OutcomePrint::Hashed {
                fingerprint,
                unknown_tool,
            } => (RecordState::Done(fingerprint), unknown_tool),
        };
        // Failures are tracked for `error_cascade` only.
        let failed = cfg.extensions.is_some() && crate::fingerprint::is_failure(rule, outcome);
        match pending {
            Some(index) => self
                .history
                .settle(index, state, unknown.as_deref(), failed),
            None => {
                self.history.push(
                    cfg.history_size,
                    NewRecord {
                        tool,
                        signature,
                        call_id: id,
                        state,
                        unknown_tool: unknown.as_deref(),
                        rule,
                        now_ms: now,
                        newest: None,
                        failed,
                    },
                );
            }
        }
        let shadow = cfg.is_shadow();
        let abort = match state {
            RecordState::Done(fp) => self.guard.observe(signature, fp).map(|count| {
                if self.stop.is_none() && !shadow {
                    self.stop = Some(Stop {
                        detector: Detector::CompactionLoopPersisted,
                        count,
                        tool: tool.to_owned(),
                    });
                }
                Abort {
                    tool: tool.to_owned(),
                    signature,
                    count,
                    message: messages::compaction_abort(tool, count, count),
                }
            }),
            _ => None,
        };
        if shadow {
            Recorded {
                recorded: true,
                abort: None,
                would_abort: abort,
            }
        } else {
            Recorded {
                recorded: true,
                abort,
                would_abort: None,
            }
        }
    }

    fn push(
        &mut self,
        cfg: &EffectiveConfig,
        call: &CallPrint<'_>,
        id: Option<u64>,
        state: RecordState,
        now: u64,
        newest: Option<Option<usize>>,
    ) {
        self.history.push(
            cfg.history_size,
            NewRecord {
                tool: call.tool,
                signature: call.signature,
                call_id: id,
                state,
                unknown_tool: None,
                rule: call.rule,
                now_ms: now,
                newest,
                failed: false,
            },
        );
    }

    /// Puts a finding into words (before the call's record can evict the names it uses).
    fn describe(&self, f: &Finding, call: &CallPrint<'_>, batch_first: Option<&str>) -> Detection {
        let names = self.history.names();
        let tool = call.tool;
        let paired_tool = f.paired.map(|(_, t)| names.get(t).to_owned());
        let n = f.count;
        let message = match (f.detector, f.level) {
            (Detector::UnknownToolRepeat, _) => {
                messages::unknown_tool(f.missing.map_or(tool, |m| names.get(m)), tool, n)
            }
            (Detector::GlobalCircuitBreaker, _) => messages::global_breaker(tool, n),
            (Detector::KnownPollNoProgress, Level::Warning) => messages::poll_warning(tool, n),
            (Detector::KnownPollNoProgress, _) => messages::poll_critical(tool, n),
            (Detector::PingPong, Level::Warning) => {
                messages::ping_pong_warning(tool, paired_tool.as_deref().unwrap_or("?"), n)
            }
            (Detector::PingPong, _) => {
                messages::ping_pong_critical(tool, paired_tool.as_deref().unwrap_or("?"), n)
            }
            (Detector::ConsecutiveRepeat, Level::Warning) => messages::consecutive_warning(tool, n),
            (Detector::ConsecutiveRepeat, _) => messages::consecutive_critical(tool, n),
            (Detector::Cycle, level) => {
                let cycle = self.cycle_text(usize::from(f.cycle_len));
                if level == Level::Warning {
                    messages::cycle_warning(tool, &cycle, n)
                } else {
                    messages::cycle_critical(tool, &cycle, n)
                }
            }
            (Detector::ErrorCascade, Level::Warning) => messages::error_cascade_warning(tool, n),
            (Detector::ErrorCascade, _) => messages::error_cascade_critical(tool, n),
            (Detector::BatchDuplicates, _) => {
                messages::batch_duplicate(tool, n, batch_first.unwrap_or("earlier"))
            }
            (_, Level::Warning) => messages::generic_warning(tool, n),
            _ => messages::generic_critical(tool, n),
        };
        Detection {
            level: f.level,
            detector: f.detector,
            count: n,
            tool: tool.to_owned(),
            paired_tool,
            message,
            signature: call.signature,
            paired_signature: f.paired.map(|(s, _)| s),
        }
    }

    /// The set of a cycle's signatures (the current call's and the newest `k - 1`
    /// records'), whatever position the cycle is at: one warning key per cycle.
    fn cycle_key(&self, call: &CallPrint<'_>, k: u8) -> u128 {
        self.history
            .records()
            .iter()
            .rev()
            .take(usize::from(k).saturating_sub(1))
            .map(|r| r.signature().as_u128())
            .fold(call.signature.as_u128(), u128::wrapping_add)
    }

    /// `read → list → grep`: the tools of the cycle's last `k` calls, oldest first.
    fn cycle_text(&self, k: usize) -> String {
        let records = self.history.records();
        let names = self.history.names();
        let start = records.len().saturating_sub(k);
        let tools: Vec<&str> = records
            .iter()
            .skip(start)
            .map(|r| names.get(r.tool()))
            .collect();
        tools.join(" → ")
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::ConfigSet;
    use serde_json::json;

    #[test]
    fn state_round_trips_through_bytes() {
        let set = ConfigSet::enabled_defaults();
        let cfg = set.global();
        let scope = Scope::new("s");
        let mut state = RunState::default();
        let args = json!({"path": "/x"});
        let print = CallPrint::new("read", &args);
        for i in 0..12 {
            let id = format!("c{i}");
            let _ = state.before_call(cfg, &scope, &print, Some(&id), None, i);
            let out = json!("same");
            state.after_call(cfg, &scope, &print, Some(&id), Outcome::Result(&out), i);
        }
        state.compaction(cfg, &scope, 99);
        let bytes = state.to_bytes();
        assert_eq!(bytes[0], STATE_FORMAT_VERSION);
        let back = RunState::from_bytes(&bytes).unwrap();
        assert_eq!(back, state);
        assert!(matches!(
            RunState::from_bytes(&[9, 1, 2]),
            Err(StateDecodeError::Version { found: 9 })
        ));
        assert!(matches!(
            RunState::from_bytes(&[STATE_FORMAT_VERSION, 200]),
            Err(StateDecodeError::Corrupt(_))
        ));
        assert!(RunState::from_bytes(&[]).is_err());
    }
}
