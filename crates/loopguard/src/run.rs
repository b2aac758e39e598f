//! The state of one (session, run) scope and the chain that updates it:
//! fingerprints → metrics → detectors → verdict → enforcement → record.
//!
//! A [`RunState`] is a plain value: the in-memory [`Guard`](crate::Guard) keeps them in a
//! map, and durable stores load one, apply an event, and save it back atomically.

use serde::{Deserialize, Serialize};

use crate::answers::{Answers, CallIdUse, OutcomeKey, Retried};
use crate::budget::{
    self, Counted, Judgement, Reading, RunLedger, SessionState, Spend, Usage, UsageError,
};
use crate::clock::Millis;
use crate::compaction::CompactionGuard;
use crate::config::EffectiveConfig;
use crate::detectors::cascade::FailureTrack;
use crate::detectors::escalation::{Escalation, Members};
use crate::detectors::extensions::Context;
use crate::detectors::period::PeriodTrack;
use crate::detectors::thrash::{target_key, Targets};
use crate::detectors::turns::Turns;
use crate::detectors::{self, Finding, Thresholds};
use crate::enforcement::{NotifyBuckets, WarningKey};
use crate::fingerprint::{failure_of, CallPrint, OutcomeOf, OutcomePrint, OutcomeRule, Signature};
use crate::history::{call_id_hash, History, NewRecord, RecordState};
use crate::json::Json;
use crate::observe;
use crate::scope::Scope;
use crate::storm::StormCall;
use crate::ticket::{Call, CallRef, Keys, Standing, Ticket};
use crate::tree::TreeCall;
use crate::verdict::{messages, Abort, Detection, Detector, Evidence, Level, Recorded, Verdict};

mod said;

/// The warning threshold whose multiples surface a warning of `detector`.
fn warning_threshold(cfg: &EffectiveConfig, t: Thresholds, detector: Detector) -> u32 {
    let ext = cfg.extensions.as_deref();
    match detector {
        Detector::ConsecutiveRepeat => ext.and_then(|x| x.consecutive_repeat).map(|l| l.warning),
        Detector::Cycle => ext.and_then(|x| x.cycle).map(|c| c.warning_repeats),
        Detector::ErrorCascade => ext.and_then(|x| x.error_cascade).map(|c| c.levels.warning),
        Detector::StaleRepeat => ext.and_then(|x| x.stale_repeat).map(|l| l.levels.warning),
        Detector::TargetThrash => ext.and_then(|x| x.target_thrash).map(|l| l.warning),
        _ => None,
    }
    .unwrap_or(t.warning)
}

/// What a ticket for the call `print` (with call id hash `id`) records its outcome by.
fn keys(print: &CallPrint<'_>, id: Option<u64>) -> Keys {
    Keys {
        signature: print.signature,
        rule: print.rule,
        target: print.target.map(|t| target_key(print.tool, t)),
        call_id: id,
    }
}

/// The key `run_storm` knows the run of `scope` by.
fn run_key(scope: &Scope<'_>) -> u64 {
    xxhash_rust::xxh3::xxh3_64(scope.run().unwrap_or("").as_bytes())
}

/// Why a run stopped: every later call of the run is blocked with this.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[non_exhaustive]
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
/// covers the fingerprint version, since states hold fingerprints). Version 3 appends the
/// fields of `Added3` to version 2's encoding, version 4 those of `Added4` after them;
/// version 5 may mark an answered call with the times it was sent again (a variant added
/// last, so that older states read unchanged); version 6 appends those of `Added6` after
/// `Added4`'s, version 7 those of `Added7` after `Added6`'s. Version 2, 3, 4, 5 and 6
/// states still read.
pub const STATE_FORMAT_VERSION: u8 = 7;

/// The older format versions whose states [`RunState::from_bytes`] still reads.
const STATE_FORMAT_V2: u8 = 2;
const STATE_FORMAT_V3: u8 = 3;
const STATE_FORMAT_V4: u8 = 4;
const STATE_FORMAT_V5: u8 = 5;
const STATE_FORMAT_V6: u8 = 6;

/// Everything the engine remembers about one (session, run).
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct RunState {
    history: History,
    notify: NotifyBuckets,
    guard: CompactionGuard,
    stop: Option<Stop>,
    last_active: Millis,
    /// The current batch of parallel calls (tracked for `batch_duplicates`).
    batch: Option<Batch>,
    /// Encoded after the fields above (see [`STATE_FORMAT_VERSION`]).
    #[serde(skip)]
    added: Added3,
    /// Encoded after `added`.
    #[serde(skip)]
    added4: Added4,
    /// Encoded after `added4`.
    #[serde(skip)]
    added6: Added6,
    /// Encoded after `added6`.
    #[serde(skip)]
    added7: Added7,
}

/// The fields state format version 4 added, encoded after those of version 3.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
struct Added4 {
    /// What `error_cascade` keeps per record: what each call worked on, how it failed.
    failures: FailureTrack,
}

/// The fields state format version 6 added, encoded after those of version 4.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
struct Added6 {
    /// The run's spend, warnings and budget stop.
    budget: RunLedger,
}

/// The fields state format version 7 added, encoded after those of version 6.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
struct Added7 {
    /// The run's messages, for the detectors of loops without tool calls.
    turns: Turns,
}

/// The fields state format version 3 added, encoded after version 2's so that version 2
/// states read as states with these at their defaults.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
struct Added3 {
    /// Blocked call ids and recent answers, beyond the history window.
    answers: Answers,
    /// What the extension detectors keep beyond the history.
    ext: ExtState,
}

/// What the extension detectors keep: the period track of `cycle`, the targets of
/// `target_thrash` and the blocked loops of `escalation`.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
struct ExtState {
    period: PeriodTrack,
    targets: Targets,
    escalation: Escalation,
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
    pub fn last_active(&self) -> Millis {
        self.last_active
    }

    /// Whether the run holds nothing but its activity time: no call, message, usage or
    /// stop was ever applied to it. A store's record without a run is blank when only the
    /// session's own state went through it ([`SessionState`](crate::SessionState): an
    /// agent tree's steps), and views leave such a record out.
    pub fn is_blank(&self) -> bool {
        *self
            == Self {
                last_active: self.last_active,
                ..Self::default()
            }
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
        if let Ok(bytes) = postcard::to_extend(&self.added, std::mem::take(out)) {
            *out = bytes;
        }
        if let Ok(bytes) = postcard::to_extend(&self.added4, std::mem::take(out)) {
            *out = bytes;
        }
        if let Ok(bytes) = postcard::to_extend(&self.added6, std::mem::take(out)) {
            *out = bytes;
        }
        if let Ok(bytes) = postcard::to_extend(&self.added7, std::mem::take(out)) {
            *out = bytes;
        }
    }

    /// Reads back [`RunState::to_bytes`].
    pub fn from_bytes(bytes: &[u8]) -> Result<Self, StateDecodeError> {
        let corrupt = |e: postcard::Error| StateDecodeError::Corrupt(e.to_string());
        match bytes.split_first() {
            Some((
                &version @ (STATE_FORMAT_V2 | STATE_FORMAT_V3 | STATE_FORMAT_V4 | STATE_FORMAT_V5
                | STATE_FORMAT_V6 | STATE_FORMAT_VERSION),
                rest,
            )) => {
                let (mut state, mut left): (Self, &[u8]) =
                    postcard::take_from_bytes(rest).map_err(corrupt)?;
                if version >= STATE_FORMAT_V3 {
                    (state.added, left) = postcard::take_from_bytes(left).map_err(corrupt)?;
                }
                if version >= STATE_FORMAT_V4 {
                    (state.added4, left) = postcard::take_from_bytes(left).map_err(corrupt)?;
                }
                if version >= STATE_FORMAT_V6 {
                    (state.added6, left) = postcard::take_from_bytes(left).map_err(corrupt)?;
                }
                if version >= STATE_FORMAT_VERSION {
                    (state.added7, left) = postcard::take_from_bytes(left).map_err(corrupt)?;
                }
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
            + self.added.answers.heap_bytes()
            + self.added.ext.period.heap_bytes()
            + self.added.ext.targets.heap_bytes()
            + self.added.ext.escalation.heap_bytes()
            + self.added4.failures.heap_bytes()
            + self.added6.budget.heap_bytes()
            + self.added7.turns.heap_bytes()
    }

    /// What the run spent (tokens, money, responses and the calls counted while a budget
    /// was set).
    pub fn spend(&self) -> &Spend {
        self.added6.budget.spent()
    }

    /// What the run spent since its last progress (tracked while `withoutProgress` is set).
    pub fn spend_without_progress(&self) -> &Spend {
        self.added6.budget.since_progress()
    }

    /// The budget limit that stopped the run, when one did.
    pub fn budget_stop(&self) -> Option<&Reading> {
        self.added6.budget.stop()
    }

    /// Judges a call about to run and records it: the [`Ticket`] carries the verdict, and
    /// the call's record stays pending in the history until the ticket is finished. (Given
    /// the id of the newest call of the run, with the same tool and arguments and no
    /// outcome yet, this is a retry: the same verdict again, nothing changed.) The verdict
    /// is logged (`tracing`, target `loopguard`).
    ///
    /// `session` is the state of the run's session: the budgets of the session, its agents
    /// and its day are judged (and its calls counted) there.
    pub fn begin<'a, J: Json<'a>>(
        &mut self,
        session: &mut SessionState,
        cfg: &EffectiveConfig,
        scope: &Scope<'_>,
        call: &Call<'a, J>,
        now: Millis,
    ) -> Ticket {
        let print = CallPrint::for_config(call.tool, call.args, cfg);
        self.last_active = now;
        let id = call.call_id.map(call_id_hash);
        let retried = match id {
            Some(id) => self.added.answers.retried_call(id, print.signature),
            None => Retried::New,
        };
        let (verdict, id_use) = match retried {
            Retried::Again(verdict) => (verdict, CallIdUse::Retry),
            Retried::New | Retried::Reused(_) => {
                // A tool call ends an answer being streamed and a row of answers without
                // one.
                if !self.added7.turns.is_empty() {
                    self.end_stream(cfg, true);
                    self.added7.turns.called();
                }
                let verdict = self.verdict(
                    cfg,
                    session,
                    scope,
                    &print,
                    id,
                    call.batch,
                    call.call_id,
                    now,
                );
                let (resent, id_use) = match retried {
                    Retried::Reused(n) => (
                        n,
                        CallIdUse::Reused {
                            sent: n.saturating_add(1),
                        },
                    ),
                    _ => (0, CallIdUse::New),
                };
                if let Some(id) = id {
                    self.added
                        .answers
                        .called(id, print.signature, print.rule, &verdict, resent);
                }
                (verdict, id_use)
            }
        };
        observe::verdict(scope, print.tool, &verdict);
        if let CallIdUse::Reused { sent } = id_use {
            observe::reused_id(scope, print.tool, sent);
        }
        let standing = match verdict.is_blocked() {
            true => Standing::Blocked,
            false => Standing::Open,
        };
        Ticket::new(scope, print.tool, keys(&print, id), verdict, standing).with_id_use(id_use)
    }

    /// The verdict on a new call: a sub-agent spawned past a limit of its tree
    /// (`agent_tree`) is blocked, every call; else [`RunState::storm_verdict`]'s, warned
    /// at the first call of a sub-agent spawned at a limit where it is quiet.
    #[allow(clippy::too_many_arguments)]
    fn verdict(
        &mut self,
        cfg: &EffectiveConfig,
        session: &mut SessionState,
        scope: &Scope<'_>,
        call: &CallPrint<'_>,
        id: Option<u64>,
        batch: Option<&str>,
        call_id: Option<&str>,
        now: Millis,
    ) -> Verdict {
        let tree = match session.tree().link() {
            None => TreeCall::Quiet,
            Some(_) => session.tree_call(now),
        };
        let (level, limit, count) = match tree {
            TreeCall::Quiet => {
                return self.storm_verdict(cfg, session, scope, call, id, batch, call_id, now)
            }
            TreeCall::Block(limit, count) => (Level::Critical, limit, count),
            TreeCall::Warn(limit, count) => {
                let verdict =
                    self.storm_verdict(cfg, session, scope, call, id, batch, call_id, now);
                if !matches!(verdict, Verdict::Allow) {
                    return verdict;
                }
                (Level::Warning, limit, count)
            }
        };
        let detection = Detection {
            level,
            detector: Detector::AgentTree,
            count,
            tool: call.tool.to_owned(),
            message: messages::agent_tree(level, limit, count, call.tool),
            signature: call.signature,
            evidence: Evidence::None,
        };
        // A warned call was recorded by the run's own verdict; a blocked one is here.
        let blocked = level == Level::Critical;
        if blocked {
            let state = match cfg.is_shadow() {
                true => RecordState::Pending,
                false => RecordState::Veto,
            };
            self.push(cfg, call, id, None, state, now, None);
        }
        match (cfg.is_shadow(), blocked) {
            (true, terminal) => Verdict::Shadow {
                detection,
                terminal,
            },
            (false, false) => Verdict::Warn {
                detection,
                notify: true,
            },
            (false, true) => Verdict::Block {
                detection,
                terminal: true,
            },
        }
    }

    /// The verdict on a new call but for the agent tree's: a session stopped by
    /// `run_storm`, or a call of the pattern that ended its last runs, first; else the
    /// run's own verdict, warned by `run_storm` where it is quiet. A call some detector
    /// warns or blocks joins the run's loop signature.
    #[allow(clippy::too_many_arguments)]
    fn storm_verdict(
        &mut self,
        cfg: &EffectiveConfig,
        session: &mut SessionState,
        scope: &Scope<'_>,
        call: &CallPrint<'_>,
        id: Option<u64>,
        batch: Option<&str>,
        call_id: Option<&str>,
        now: Millis,
    ) -> Verdict {
        let Some(storm) = cfg.extensions.as_deref().and_then(|x| x.run_storm) else {
            return self.run_verdict(cfg, session, scope, call, id, batch, call_id, now);
        };
        let print = call.signature.as_u128();
        let run = run_key(scope);
        let said = session.with_storm(now, |st, ch| match st.enter(&storm, run, now, ch) {
            true => st.judge(&storm, print, now, ch),
            false => StormCall::Quiet,
        });
        let blocked = match said {
            StormCall::Stopped(runs, left) => Some((
                runs,
                true,
                messages::run_storm_stopped(call.tool, runs, left),
            )),
            StormCall::Block(runs) => {
                Some((runs, false, messages::run_storm_critical(call.tool, runs)))
            }
            _ => None,
        };
        if let Some((runs, terminal, message)) = blocked {
            let detection = Detection {
                level: Level::Critical,
                detector: Detector::RunStorm,
                count: runs,
                tool: call.tool.to_owned(),
                message,
                signature: call.signature,
                evidence: Evidence::None,
            };
            if !terminal {
                session.with_storm(now, |st, ch| st.found(print, ch));
            }
            if cfg.is_shadow() {
                self.push(cfg, call, id, None, RecordState::Pending, now, None);
                return Verdict::Shadow {
                    detection,
                    terminal,
                };
            }
            self.push(cfg, call, id, None, RecordState::Veto, now, None);
            return Verdict::Block {
                detection,
                terminal,
            };
        }
        let verdict = self.run_verdict(cfg, session, scope, call, id, batch, call_id, now);
        if let Some(d) = verdict.detection().filter(|d| !d.detector.is_budget()) {
            if d.detector != Detector::RunStorm && self.stop.is_none() {
                session.with_storm(now, |st, ch| st.found(print, ch));
            }
        }
        match (said, &verdict) {
            (StormCall::Warn(runs), Verdict::Allow) => {
                let detection = Detection {
                    level: Level::Warning,
                    detector: Detector::RunStorm,
                    count: runs,
                    tool: call.tool.to_owned(),
                    message: messages::run_storm_warning(call.tool, runs),
                    signature: call.signature,
                    evidence: Evidence::None,
                };
                match cfg.is_shadow() {
                    true => Verdict::Shadow {
                        detection,
                        terminal: false,
                    },
                    false => Verdict::Warn {
                        detection,
                        notify: self.notify.surface(
                            WarningKey::Other(Detector::RunStorm, call.signature),
                            1,
                            1,
                        ),
                    },
                }
            }
            _ => verdict,
        }
    }

    /// The run's own verdict on a new call: a stopped run's block, else the budgets' and
    /// the detectors' (a budget's block first; its warning only where the detectors are
    /// quiet). A call that may run is counted against the budgets.
    #[allow(clippy::too_many_arguments)]
    fn run_verdict(
        &mut self,
        cfg: &EffectiveConfig,
        session: &mut SessionState,
        scope: &Scope<'_>,
        call: &CallPrint<'_>,
        id: Option<u64>,
        batch: Option<&str>,
        call_id: Option<&str>,
        now: Millis,
    ) -> Verdict {
        if let Some(stop) = &self.stop {
            let message = match (stop.detector.is_budget(), self.added6.budget.stop()) {
                (true, Some(r)) => messages::budget_stopped(call.tool, r),
                _ => messages::stopped_run(stop.detector, &stop.tool, stop.count, call.tool),
            };
            let detection = Detection {
                level: Level::Critical,
                detector: stop.detector,
                count: stop.count,
                tool: call.tool.to_owned(),
                message,
                signature: call.signature,
                evidence: Evidence::None,
            };
            self.push(cfg, call, id, None, RecordState::Veto, now, None);
            return Verdict::Block {
                detection,
                terminal: true,
            };
        }
        let Some(budgets) = cfg.budgets() else {
            return self.loop_verdict(cfg, call, id, batch, call_id, now);
        };
        let agent = scope.agent().unwrap_or("");
        self.added6.budget.start(now);
        let judged = self.added6.budget.judge(budgets, session, agent, now);
        let detection = |level, r: &Reading, message: String| Detection {
            level,
            detector: r.scope.detector(),
            count: r.percent(),
            tool: call.tool.to_owned(),
            message,
            signature: call.signature,
            evidence: Evidence::None,
        };
        let whose = |r: &Reading| budget::whose(r.scope, scope.agent(), budgets.utc_offset_minutes);
        let shadow = cfg.is_shadow();
        if let Judgement::Block(r) = &judged {
            let message = messages::budget_block(call.tool, &whose(r), r);
            let detection = detection(Level::Critical, r, message);
            if shadow {
                self.added6.budget.count_call(budgets, session, agent, now);
                self.push(cfg, call, id, None, RecordState::Pending, now, None);
                return Verdict::Shadow {
                    detection,
                    terminal: true,
                };
            }
            if r.scope.is_run() {
                self.stop = Some(Stop {
                    detector: r.scope.detector(),
                    count: r.percent(),
                    tool: call.tool.to_owned(),
                });
                self.added6.budget.stopped(r.clone());
            }
            self.push(cfg, call, id, None, RecordState::Veto, now, None);
            return Verdict::Block {
                detection,
                terminal: true,
            };
        }
        let verdict = self.loop_verdict(cfg, call, id, batch, call_id, now);
        if !verdict.is_blocked() {
            self.added6.budget.count_call(budgets, session, agent, now);
        }
        match (judged, &verdict) {
            (Judgement::Warn(r), Verdict::Allow) => {
                self.added6.budget.warned(&r);
                let message = messages::budget_warning(call.tool, &whose(&r), &r);
                let detection = detection(Level::Warning, &r, message);
                match shadow {
                    true => Verdict::Shadow {
                        detection,
                        terminal: false,
                    },
                    false => Verdict::Warn {
                        detection,
                        notify: true,
                    },
                }
            }
            _ => verdict,
        }
    }

    /// The detectors' verdict on a new call, recorded in the history.
    fn loop_verdict(
        &mut self,
        cfg: &EffectiveConfig,
        call: &CallPrint<'_>,
        id: Option<u64>,
        batch: Option<&str>,
        call_id: Option<&str>,
        now: Millis,
    ) -> Verdict {
        let target = call.target.map(|t| target_key(call.tool, t));
        if let Some(verdict) = self.escalate(cfg, call, id, target, now) {
            return verdict;
        }
        let newest = self.history.newest_of(call.signature);
        let thresholds = Thresholds::for_call(cfg, call);
        let mut finding = detectors::detect(cfg, thresholds, &self.history, call, newest);
        let mut batch_first = None;
        let mut max_period = 0;
        if let Some(ext) = cfg.extensions.as_deref() {
            let repeat = match batch.filter(|_| ext.batch_duplicates) {
                Some(batch) => self.batch_repeat(batch, call, call_id),
                None => None,
            };
            let copies = repeat.as_ref().map(|(n, _)| *n);
            batch_first = repeat.map(|(_, first)| first);
            if let Some(cycle) = ext.cycle {
                max_period = cycle.max_length.min(cfg.history_size);
                self.added.ext.period.sync(&self.history, max_period);
            }
            let cx = Context {
                history: &self.history,
                call,
                newest,
                batch_repeat: copies,
                period: &self.added.ext.period,
                max_period,
                targets: &self.added.ext.targets,
                target,
                failures: &self.added4.failures,
            };
            let extended = detectors::extensions::detect(ext, &cx);
            finding = detectors::decide(finding, extended);
        }
        let Some(finding) = finding else {
            self.push(
                cfg,
                call,
                id,
                target,
                RecordState::Pending,
                now,
                Some(newest),
            );
            return Verdict::Allow;
        };
        let detection = self.describe(&finding, call, batch_first.as_deref());
        let shadow = cfg.is_shadow();
        let terminal = finding.level == Level::Critical && finding.detector.is_terminal();
        if finding.level == Level::Critical && !terminal {
            self.remember_blocked(cfg, &finding, call, target);
        }
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
                    (Detector::TargetThrash, _) => WarningKey::Target(target.unwrap_or(0)),
                    (other, _) => WarningKey::Other(other, call.signature),
                };
                let w = warning_threshold(cfg, thresholds, finding.detector);
                self.notify.surface(key, finding.count, w)
            };
            self.push(
                cfg,
                call,
                id,
                target,
                RecordState::Pending,
                now,
                Some(newest),
            );
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
        self.push(cfg, call, id, target, RecordState::Veto, now, Some(newest));
        Verdict::Block {
            detection,
            terminal,
        }
    }

    /// Escalation: the verdict on a call that continues a loop already blocked, when it
    /// does (blocked again; the `stopAfter`-th attempt stops the run).
    fn escalate(
        &mut self,
        cfg: &EffectiveConfig,
        call: &CallPrint<'_>,
        id: Option<u64>,
        target: Option<u64>,
        now: Millis,
    ) -> Option<Verdict> {
        let stop_after = cfg.extensions.as_deref()?.escalation?;
        if self.added.ext.escalation.is_empty() {
            return None;
        }
        let seq = self.history.seq_of(self.history.len());
        let blocked =
            self.added
                .ext
                .escalation
                .continued(call.signature, target, seq, cfg.history_size)?;
        let (attempts, loop_detector) = (blocked.attempts, blocked.detector);
        let terminal = attempts >= stop_after;
        let message = if terminal {
            messages::escalation_stop(call.tool, loop_detector, attempts)
        } else {
            messages::escalation(call.tool, loop_detector, attempts, stop_after)
        };
        let detection = Detection {
            level: Level::Critical,
            detector: Detector::Escalation,
            count: attempts,
            tool: call.tool.to_owned(),
            message,
            signature: call.signature,
            evidence: Evidence::None,
        };
        if cfg.is_shadow() {
            self.push(cfg, call, id, target, RecordState::Pending, now, None);
            return Some(Verdict::Shadow {
                detection,
                terminal,
            });
        }
        if terminal {
            self.stop = Some(Stop {
                detector: Detector::Escalation,
                count: attempts,
                tool: call.tool.to_owned(),
            });
        }
        self.push(cfg, call, id, target, RecordState::Veto, now, None);
        Some(Verdict::Block {
            detection,
            terminal,
        })
    }

    /// Remembers what a blocked loop is made of, for `escalation`.
    fn remember_blocked(
        &mut self,
        cfg: &EffectiveConfig,
        finding: &Finding,
        call: &CallPrint<'_>,
        target: Option<u64>,
    ) {
        if cfg
            .extensions
            .as_deref()
            .and_then(|x| x.escalation)
            .is_none()
        {
            return;
        }
        let members = match finding.detector {
            // Copies inside one batch are not a loop.
            Detector::BatchDuplicates | Detector::Escalation => return,
            Detector::ErrorCascade => Members::Any,
            Detector::TargetThrash => match target {
                Some(key) => Members::Target(key),
                None => return,
            },
            Detector::Cycle => {
                let k = finding.cycle_len as usize;
                let mut signatures: Vec<Signature> = self
                    .history
                    .records()
                    .iter()
                    .rev()
                    .take(k.saturating_sub(1))
                    .map(|r| r.signature())
                    .chain([call.signature])
                    .collect();
                signatures.sort_unstable();
                signatures.dedup();
                Members::Calls(signatures)
            }
            _ => {
                let mut signatures = vec![call.signature];
                signatures.extend(finding.paired.map(|(s, _)| s));
                Members::Calls(signatures)
            }
        };
        let seq = self.history.seq_of(self.history.len());
        self.added
            .ext
            .escalation
            .blocked(finding.detector, call.tool, members, seq);
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

    /// The ticket of the call a result belongs to, for [`RunState::finish`]: a result on
    /// the wire names its call by id ([`CallRef::Id`]: the pending call of that id, its
    /// fingerprint taken from its record) or by its own tool and arguments
    /// ([`CallRef::Call`]). Whether an outcome may be recorded against it is decided when
    /// it is finished (a retried result is answered again whatever became of its record).
    pub fn resume<'a, J: Json<'a>>(
        &self,
        cfg: &EffectiveConfig,
        scope: &Scope<'_>,
        call: CallRef<'a, J>,
    ) -> Ticket {
        let call_id = match call {
            CallRef::Call(call) => {
                let print = CallPrint::for_config(call.tool, call.args, cfg);
                let id = call.call_id.map(call_id_hash);
                return Ticket::new(
                    scope,
                    print.tool,
                    keys(&print, id),
                    Verdict::Allow,
                    Standing::Open,
                );
            }
            CallRef::Id(call_id) => call_id,
        };
        let id = call_id_hash(call_id);
        let Some(index) = self.history.by_call_id(id) else {
            // Blocked long ago: its veto has left the window, its id is still known.
            let standing = match self.added.answers.was_blocked(id) {
                true => Standing::Blocked,
                false => Standing::Unknown,
            };
            let keys = Keys {
                signature: Signature::NONE,
                rule: OutcomeRule::NONE,
                target: None,
                call_id: Some(id),
            };
            return Ticket::new(scope, "", keys, Verdict::Allow, standing);
        };
        let record = &self.history.records()[index];
        let standing = match record.state() {
            RecordState::Veto => Standing::Blocked,
            RecordState::Done(_) => Standing::Recorded,
            RecordState::Pending => Standing::Open,
        };
        let keys = Keys {
            signature: record.signature(),
            rule: record.rule(),
            // A pending record: its target was recorded with the call.
            target: None,
            call_id: Some(id),
        };
        let tool = self.history.names().get(record.tool());
        Ticket::new(scope, tool, keys, Verdict::Allow, standing)
    }

    /// Records what the call of `ticket` returned (also for warned calls; the outcome of
    /// a blocked call is ignored), and logs an abort (`tracing`, target `loopguard`). `Err` only for a
    /// ticket resumed by id ([`RunState::resume`]) whose call already has another outcome,
    /// or whose id the run does not know; a ticket from [`RunState::begin`] always
    /// finishes.
    ///
    /// `session` is the state of the run's session: `run_storm` keeps there how the run's
    /// calls end.
    pub fn finish<'o, O: Json<'o>>(
        &mut self,
        session: &mut SessionState,
        cfg: &EffectiveConfig,
        ticket: Ticket,
        outcome: OutcomeOf<O>,
        now: Millis,
    ) -> Result<Recorded, ResultError> {
        self.last_active = now;
        let retried = ticket
            .call_id
            .and_then(|id| self.retried_result(cfg, id, outcome));
        let recorded = match (retried, ticket.standing) {
            (Some(recorded), _) => recorded,
            (None, Standing::Open) => self.settle(session, cfg, &ticket, outcome, now),
            (None, Standing::Blocked) => Recorded::default(),
            (None, Standing::Recorded) => return Err(ResultError::AlreadyRecorded),
            (None, Standing::Unknown) => return Err(ResultError::UnknownCall),
        };
        if recorded.abort.is_some() {
            observe::recorded(&ticket.scope(), &recorded);
        }
        Ok(recorded)
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

    /// What a model response of the run of `scope` used: counted in the run and in its
    /// session (`session`), priced by the host's figure or the price table. When it uses a
    /// limit of the run up, the run stops now (its next call is blocked); a session's,
    /// agent's or day's limit blocks the next call of every run it covers. A usage with an
    /// id already counted gets the same answer and counts nothing. Refused, changing
    /// nothing, when its figures cannot be right or its id was counted with other figures.
    pub fn usage(
        &mut self,
        session: &mut SessionState,
        cfg: &EffectiveConfig,
        scope: &Scope<'_>,
        usage: &Usage<'_>,
        now: Millis,
    ) -> Result<Counted, UsageError> {
        let shadow = cfg.is_shadow();
        let priced_so_far = self.spend().unpriced_tokens == 0;
        let counted = self.added6.budget.count_usage(
            cfg.budgets(),
            cfg.prices(),
            session,
            scope.agent().unwrap_or(""),
            usage,
            now,
            shadow,
        )?;
        self.last_active = now;
        if let Some(r) = counted
            .stop
            .as_ref()
            .filter(|r| r.scope.is_run() && !shadow)
        {
            if self.stop.is_none() {
                self.stop = Some(Stop {
                    detector: r.scope.detector(),
                    count: r.percent(),
                    tool: String::new(),
                });
                self.added6.budget.stopped(r.clone());
            }
        }
        // A cost limit that this response escapes is said once per run.
        let unpriced = counted.cost.is_none()
            && priced_so_far
            && cfg.budgets().is_some_and(|b| {
                budget::BudgetScope::ALL
                    .iter()
                    .any(|s| b.limits(*s).cost.is_some())
            });
        observe::usage(scope, usage, &counted, unpriced);
        Ok(counted)
    }

    /// A compaction retry in the run of `scope`: arms the post-compaction guard. Returns
    /// the window, or 0 when the guard is disabled; the arming is logged (`tracing`, target `loopguard`).
    pub fn compaction(&mut self, cfg: &EffectiveConfig, scope: &Scope<'_>, now: Millis) -> u32 {
        self.last_active = now;
        let window = match cfg.guard_enabled() {
            true => {
                self.guard.arm(cfg.post_compaction_window);
                cfg.post_compaction_window
            }
            false => 0,
        };
        observe::armed(scope, window);
        window
    }

    /// Records the outcome of an open ticket's call.
    fn settle<'o, O: Json<'o>>(
        &mut self,
        session: &mut SessionState,
        cfg: &EffectiveConfig,
        ticket: &Ticket,
        outcome: OutcomeOf<O>,
        now: Millis,
    ) -> Recorded {
        let (signature, rule, id) = (ticket.signature, ticket.rule, ticket.call_id);
        let pending = self.history.pending_match(signature, id);
        if pending.is_none() && id.is_some_and(|id| self.was_blocked(id)) {
            // The result of a blocked call is ignored: the call never ran.
            return Recorded::default();
        }
        let (state, unknown, key) = match OutcomePrint::for_config(rule, outcome, cfg) {
            OutcomePrint::Nothing => return Recorded::default(),
            OutcomePrint::Veto => (RecordState::Veto, None, OutcomeKey::Veto),
            OutcomePrint::Hashed {
                fingerprint,
                unknown_tool,
            } => (
                RecordState::Done(fingerprint),
                unknown_tool,
                OutcomeKey::Hashed(fingerprint),
            ),
        };
        // Failures are tracked for the extension detectors and `withoutProgress` only
        // (both need the `loopguard` block).
        let failure = match cfg.extensions.as_deref() {
            Some(_) => failure_of(ticket.tool(), outcome),
            None => None,
        };
        if let RecordState::Done(fp) = state {
            self.progress(session, cfg, ticket, fp, failure.is_some(), now);
        }
        let class = failure.map(|f| f.class);
        let index = match pending {
            Some(index) => {
                self.history.settle(index, state, unknown.as_deref(), class);
                self.added
                    .ext
                    .period
                    .settle(self.history.seq_of(index), state);
                index
            }
            None => {
                let index = self.history.push(
                    cfg.history_size,
                    NewRecord {
                        tool: ticket.tool(),
                        signature,
                        call_id: id,
                        state,
                        unknown_tool: unknown.as_deref(),
                        rule,
                        now_ms: now,
                        newest: None,
                        failure: class,
                    },
                );
                self.appended(cfg, index, ticket.target);
                index
            }
        };
        if let Some(f) = failure.filter(|f| f.signature != 0) {
            self.added4
                .failures
                .settle(self.history.seq_of(index), f.signature);
        }
        let shadow = cfg.is_shadow();
        let abort = match state {
            RecordState::Done(fp) => self.guard.observe(signature, fp).map(|count| {
                let tool = ticket.tool();
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
        let (abort, would_abort) = if shadow { (None, abort) } else { (abort, None) };
        let recorded = Recorded {
            recorded: true,
            abort,
            would_abort,
        };
        if let Some(id) = id {
            self.added
                .answers
                .recorded(id, signature, rule, key, &recorded);
        }
        recorded
    }

    /// Tracks progress for `withoutProgress` (see [`crate::budget`]): a successful outcome
    /// whose triple is new to the run, or of a tool the policy classes `mutate`; and for
    /// `run_storm`, how the call of `ticket` ended, in the run going on of its session.
    fn progress(
        &mut self,
        session: &mut SessionState,
        cfg: &EffectiveConfig,
        ticket: &Ticket,
        outcome: crate::fingerprint::Fingerprint,
        failed: bool,
        now: Millis,
    ) {
        let budgets = cfg.budgets().is_some_and(budget::Budgets::tracks_progress);
        let storm = cfg
            .extensions
            .as_deref()
            .is_some_and(|x| x.run_storm.is_some())
            && session.storm().is_open(run_key(&ticket.scope()));
        if !budgets && !storm {
            return;
        }
        let print = ticket.signature.as_u128();
        if failed {
            if storm {
                session.with_storm(now, |st, ch| st.outcome(print, None, ch));
            }
            return;
        }
        let mutate = cfg.extensions.as_deref().is_some_and(|x| {
            ticket
                .rule
                .tool_rule()
                .and_then(|i| x.policy.rule(i))
                .is_some_and(|r| r.class == Some(crate::policy::ToolClass::Mutate))
        });
        let mut bytes = [0u8; 32];
        bytes[..16].copy_from_slice(&print.to_le_bytes());
        bytes[16..].copy_from_slice(&outcome.as_u128().to_le_bytes());
        let triple = xxhash_rust::xxh3::xxh3_64(&bytes);
        if budgets {
            self.added6.budget.succeeded(triple, mutate);
        }
        if storm {
            session.with_storm(now, |st, ch| st.outcome(print, Some((triple, mutate)), ch));
        }
    }

    /// Whether the newest call with id `id` was blocked: its veto when the window still
    /// holds a record with that id, else the blocked ids kept beyond the window.
    fn was_blocked(&self, id: u64) -> bool {
        match self.history.by_call_id(id) {
            Some(i) => self.history.records()[i].is_veto(),
            None => self.added.answers.was_blocked(id),
        }
    }

    /// The answer to repeat when this result for call `id` is a retry of one already
    /// recorded with the same outcome.
    fn retried_result<'o, O: Json<'o>>(
        &self,
        cfg: &EffectiveConfig,
        id: u64,
        outcome: OutcomeOf<O>,
    ) -> Option<Recorded> {
        self.added.answers.retried_result(id, |rule| {
            match OutcomePrint::for_config(rule, outcome, cfg) {
                OutcomePrint::Nothing => None,
                OutcomePrint::Veto => Some(OutcomeKey::Veto),
                OutcomePrint::Hashed { fingerprint, .. } => Some(OutcomeKey::Hashed(fingerprint)),
            }
        })
    }

    #[allow(clippy::too_many_arguments)]
    fn push(
        &mut self,
        cfg: &EffectiveConfig,
        call: &CallPrint<'_>,
        id: Option<u64>,
        target: Option<u64>,
        state: RecordState,
        now: Millis,
        newest: Option<Option<usize>>,
    ) {
        let index = self.history.push(
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
                failure: None,
            },
        );
        self.appended(cfg, index, target);
    }

    /// Keeps the extension detectors' per-record data in step with the history after the
    /// record at `index` was appended.
    fn appended(&mut self, cfg: &EffectiveConfig, index: usize, target: Option<u64>) {
        let Some(ext) = cfg.extensions.as_deref() else {
            return;
        };
        let seq = self.history.seq_of(index);
        if ext.target_thrash.is_some() {
            self.added
                .ext
                .targets
                .push(&self.history, seq, target.unwrap_or(0));
        }
        if ext.cycle.is_some() {
            let r = &self.history.records()[index];
            self.added
                .ext
                .period
                .appended(seq, r.signature(), r.state());
        }
        if ext.error_cascade.is_some() {
            // What the call works on: its (tool, target), else the call itself.
            let work = target.unwrap_or_else(|| {
                (self.history.records()[index].signature().as_u128() as u64).max(1)
            });
            self.added4.failures.push(&self.history, seq, work);
        }
    }

    /// Puts a finding into words (before the call's record can evict the names it uses).
    fn describe(&self, f: &Finding, call: &CallPrint<'_>, batch_first: Option<&str>) -> Detection {
        let names = self.history.names();
        let tool = call.tool;
        let evidence = match f.paired {
            Some((paired_signature, t)) => Evidence::PingPong {
                paired_tool: names.get(t).to_owned(),
                paired_signature,
            },
            None => Evidence::None,
        };
        let paired_tool = evidence.paired_tool().unwrap_or("?");
        let n = f.count;
        let message = match (f.detector, f.level) {
            (Detector::UnknownToolRepeat, _) => {
                messages::unknown_tool(f.missing.map_or(tool, |m| names.get(m)), tool, n)
            }
            (Detector::GlobalCircuitBreaker, _) => messages::global_breaker(tool, n),
            (Detector::KnownPollNoProgress, Level::Warning) => messages::poll_warning(tool, n),
            (Detector::KnownPollNoProgress, _) => messages::poll_critical(tool, n),
            (Detector::PingPong, Level::Warning) => {
                messages::ping_pong_warning(tool, paired_tool, n)
            }
            (Detector::PingPong, _) => messages::ping_pong_critical(tool, paired_tool, n),
            (Detector::ConsecutiveRepeat, Level::Warning) => messages::consecutive_warning(tool, n),
            (Detector::ConsecutiveRepeat, _) => messages::consecutive_critical(tool, n),
            (Detector::Cycle, level) => {
                let cycle = self.cycle_text(f.cycle_len as usize);
                if level == Level::Warning {
                    messages::cycle_warning(tool, &cycle, n)
                } else {
                    messages::cycle_critical(tool, &cycle, n)
                }
            }
            (Detector::ErrorCascade, Level::Warning) => {
                messages::error_cascade_warning(tool, n, f.spread)
            }
            (Detector::ErrorCascade, _) => {
                messages::error_cascade_critical(tool, n, f.spread, f.repeated)
            }
            (Detector::StaleRepeat, Level::Warning) => messages::stale_warning(tool, n, f.failed),
            (Detector::StaleRepeat, _) => messages::stale_critical(tool, n, f.failed),
            (Detector::TargetThrash, level) => {
                let target = call.target.unwrap_or("its target");
                if level == Level::Warning {
                    messages::target_thrash_warning(tool, target, n)
                } else {
                    messages::target_thrash_critical(tool, target, n)
                }
            }
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
            message,
            signature: call.signature,
            evidence,
        }
    }

    /// The set of a cycle's signatures (the current call's and the newest `k - 1`
    /// records'), whatever position the cycle is at: one warning key per cycle.
    fn cycle_key(&self, call: &CallPrint<'_>, k: u32) -> u128 {
        self.history
            .records()
            .iter()
            .rev()
            .take((k as usize).saturating_sub(1))
            .map(|r| r.signature().as_u128())
            .fold(call.signature.as_u128(), u128::wrapping_add)
    }

    /// `read → list → grep`: the tools of the cycle's last `k` calls, oldest first, a tool
    /// called several times in a row written once with its count (`view ×5`).
    fn cycle_text(&self, k: usize) -> String {
        let records = self.history.records();
        let names = self.history.names();
        let start = records.len().saturating_sub(k);
        let mut steps: Vec<(&str, usize)> = Vec::new();
        for r in records.iter().skip(start) {
            let tool = names.get(r.tool());
            match steps.last_mut() {
                Some((last, n)) if *last == tool => *n += 1,
                _ => steps.push((tool, 1)),
            }
        }
        let steps: Vec<String> = steps
            .into_iter()
            .map(|(tool, n)| match n {
                1 => tool.to_owned(),
                n => format!("{tool} ×{n}"),
            })
            .collect();
        steps.join(" → ")
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::answers::RETRIES_PER_CALL;
    use crate::config::ConfigSet;
    use crate::Outcome;
    use serde_json::json;

    /// The scope of every test run.
    fn scope() -> Scope<'static> {
        Scope::new("s").with_run(Some("r"))
    }

    /// A call event: the ticket is left with the run (as on the wire), its verdict kept.
    fn call(
        state: &mut RunState,
        cfg: &EffectiveConfig,
        call: &Call<'_>,
        id: Option<&str>,
        now: Millis,
    ) -> Verdict {
        state
            .begin(
                &mut SessionState::default(),
                cfg,
                &scope(),
                &call.with_id(id),
                now,
            )
            .into_verdict()
    }

    /// A result event naming its call by tool and arguments.
    fn result(
        state: &mut RunState,
        cfg: &EffectiveConfig,
        call: &Call<'_>,
        id: Option<&str>,
        outcome: Outcome<'_>,
        now: Millis,
    ) -> Recorded {
        let ticket = state.resume(cfg, &scope(), CallRef::Call(call.with_id(id)));
        state
            .finish(&mut SessionState::default(), cfg, ticket, outcome, now)
            .unwrap()
    }

    /// A result event naming its call by id only.
    fn by_id(
        state: &mut RunState,
        cfg: &EffectiveConfig,
        id: &str,
        outcome: Outcome<'_>,
        now: Millis,
    ) -> Result<Recorded, ResultError> {
        let ticket = state.resume(cfg, &scope(), CallRef::id(id));
        state.finish(&mut SessionState::default(), cfg, ticket, outcome, now)
    }

    #[test]
    fn state_round_trips_through_bytes() {
        let set = ConfigSet::enabled_defaults();
        let cfg = set.global();
        let mut state = RunState::default();
        let args = json!({"path": "/x"});
        let print = Call::new("read", &args);
        for i in 0..12 {
            let id = format!("c{i}");
            let _ = call(&mut state, cfg, &print, Some(&id), Millis::new(i));
            let out = json!("same");
            result(
                &mut state,
                cfg,
                &print,
                Some(&id),
                Outcome::Result(&out),
                Millis::new(i),
            );
        }
        state.compaction(cfg, &scope(), Millis::new(99));
        let bytes = state.to_bytes();
        assert_eq!(bytes[0], STATE_FORMAT_VERSION);
        let back = RunState::from_bytes(&bytes).unwrap();
        assert_eq!(back, state);
        // Version 6 wrote what version 7 does without `Added7`, version 5 what version 6
        // does without `Added6` and, without retries marked, version 4 what version 5 did:
        // those still read, with no messages and (before 6) nothing spent.
        let added7 = postcard::to_allocvec(&state.added7).unwrap().len();
        let mut v6 = bytes[..bytes.len() - added7].to_vec();
        v6[0] = STATE_FORMAT_V6;
        let mut old = state.clone();
        old.added7 = Added7::default();
        assert_eq!(RunState::from_bytes(&v6).unwrap(), old);
        let added6 = postcard::to_allocvec(&state.added6).unwrap().len();
        let mut v5 = v6[..v6.len() - added6].to_vec();
        v5[0] = STATE_FORMAT_V5;
        old.added6 = Added6::default();
        assert_eq!(RunState::from_bytes(&v5).unwrap(), old);
        let mut v4 = v5.clone();
        v4[0] = STATE_FORMAT_V4;
        assert_eq!(RunState::from_bytes(&v4).unwrap(), old);
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

    /// The extension detectors' state (period track, targets, blocked loops) is part of
    /// the persisted state: a run read back from bytes goes on exactly as the original.
    #[test]
    fn extension_state_round_trips_and_the_run_goes_on_the_same() {
        let set = ConfigSet::parse(
            "{ tools: { loopDetection: { enabled: true } }, loopguard: { preset: 'recommended' } }",
        )
        .unwrap();
        let cfg = set.global();
        let mut state = RunState::default();
        let steps: Vec<(String, serde_json::Value)> = (0..9)
            .map(|i| {
                (
                    ["read", "grep", "list"][i % 3].to_owned(),
                    json!({"i": i % 3}),
                )
            })
            .chain((0..3).map(|i| ("edit".to_owned(), json!({"path": "a.py", "old": i}))))
            .collect();
        for (i, (tool, args)) in steps.iter().enumerate() {
            let print = Call::new(tool, args);
            let id = format!("c{i}");
            if call(&mut state, cfg, &print, Some(&id), Millis::new(0)).is_blocked() {
                continue;
            }
            let (failed, same) = (json!("old text not found"), json!("same"));
            let out = match tool.as_str() {
                "edit" => Outcome::Error(&failed),
                _ => Outcome::Result(&same),
            };
            result(&mut state, cfg, &print, Some(&id), out, Millis::new(0));
        }
        assert!(
            !state.added.ext.escalation.is_empty(),
            "the cycle was blocked"
        );
        let mut back = RunState::from_bytes(&state.to_bytes()).unwrap();
        assert_eq!(back, state);
        // Both go on the same way: the cycle's next step is escalated in each.
        let args = json!({"i": 0});
        let print = Call::new("read", &args);
        let a = call(&mut state, cfg, &print, Some("x"), Millis::new(0));
        let b = call(&mut back, cfg, &print, Some("x"), Millis::new(0));
        assert_eq!(a, b);
        assert_eq!(a.detection().unwrap().detector, Detector::Escalation);
    }

    /// A state written by format version 2 (before blocked ids and answers were kept):
    /// four identical reads with identical results at warning 1, critical 2, window 4.
    const V2_STATE: &str = "02041038d01fd05d1299139c9cb73167b8eafd109c38965940cae0f3f10625ff77abcec9ddf6edafece892ac6700ffffffff0f000101010000ff1038d01fd05d1299139c9cb73167b8eafd109c38965940cae0f3f10625ff77abcec982aca5cdece4bfd38e0100ffffffff0f010101010000ff1038d01fd05d1299139c9cb73167b8eafd1000000000000000000000000000000000d585b3cdcdca9bc43000ffffffff0f010101020000ff1038d01fd05d1299139c9cb73167b8eafd1000000000000000000000000000000000bef78cc8d08c8def0400ffffffff0f010101020000ff01047265616404f29bcb8f95d488932c0001ebd8a7dcf981b8bcf8fcc2e0c5c8bad9a3fe030100000000e80700";

    fn small_window(history: u32) -> ConfigSet {
        ConfigSet::parse(&format!(
            "{{tools:{{loopDetection:{{enabled:true,warningThreshold:1,criticalThreshold:2,historySize:{history}}}}}}}"
        ))
        .unwrap()
    }

    #[test]
    fn version_2_states_still_read() {
        let bytes: Vec<u8> = (0..V2_STATE.len())
            .step_by(2)
            .map(|i| u8::from_str_radix(&V2_STATE[i..i + 2], 16).unwrap())
            .collect();
        let mut state = RunState::from_bytes(&bytes).unwrap();
        assert_eq!(state.history().len(), 4);
        assert_eq!(state.added, Added3::default());
        // It goes on as the run it was: the fifth identical read is blocked too, and the
        // late result of the blocked fourth (id c3) is ignored.
        let set = small_window(4);
        let cfg = set.global();
        let args = json!({"p": "a"});
        let print = Call::new("read", &args);
        let v = call(&mut state, cfg, &print, Some("c4"), Millis::new(2000));
        assert!(v.is_blocked(), "{v:?}");
        let out = json!("same");
        let r = result(
            &mut state,
            cfg,
            &print,
            Some("c3"),
            Outcome::Result(&out),
            Millis::new(2000),
        );
        assert!(!r.recorded);
        // Written back in the current version, and read again.
        let again = RunState::from_bytes(&state.to_bytes()).unwrap();
        assert_eq!(again, state);
    }

    /// A state written by version 6 (no messages after the spend) reads as the same state
    /// with no messages; one written by version 5 (nothing after the cascade's notes) with
    /// nothing spent and no messages.
    #[test]
    fn versions_5_and_6_states_read_without_messages() {
        let set = small_window(4);
        let cfg = set.global();
        let mut state = RunState::default();
        let args = json!({"p": "a"});
        let read = Call::new("read", &args);
        let out = json!("same");
        for id in ["c1", "c2", "c3"] {
            let _ = call(&mut state, cfg, &read, Some(id), Millis::new(0));
            let _ = result(
                &mut state,
                cfg,
                &read,
                Some(id),
                Outcome::Result(&out),
                Millis::new(0),
            );
        }
        let mut bytes = state.to_bytes();
        let tail = postcard::to_allocvec(&Added7::default()).unwrap().len();
        bytes.truncate(bytes.len() - tail);
        bytes[0] = STATE_FORMAT_V6;
        assert_eq!(RunState::from_bytes(&bytes).unwrap(), state);
        let spend = postcard::to_allocvec(&state.added6).unwrap().len();
        bytes.truncate(bytes.len() - spend);
        bytes[0] = STATE_FORMAT_V5;
        let mut old = state.clone();
        old.added6 = Added6::default();
        assert_eq!(RunState::from_bytes(&bytes).unwrap(), old);
    }

    /// The reproduction of the issue: a result for a blocked call arrives after its veto
    /// has left a window of two.
    #[test]
    fn a_late_result_of_a_blocked_call_is_ignored_after_its_veto_left_the_window() {
        let set = small_window(2);
        let cfg = set.global();
        let mut state = RunState::default();
        let read = json!({"p": "a"});
        let empty = json!({});
        let same = json!("same");
        let (r, list, grep) = (
            Call::new("read", &read),
            Call::new("list", &empty),
            Call::new("grep", &empty),
        );
        for id in ["c1", "c2"] {
            let _ = call(&mut state, cfg, &r, Some(id), Millis::new(0));
            assert!(
                result(
                    &mut state,
                    cfg,
                    &r,
                    Some(id),
                    Outcome::Result(&same),
                    Millis::new(0)
                )
                .recorded
            );
        }
        assert!(call(&mut state, cfg, &r, Some("c3"), Millis::new(0)).is_blocked());
        assert_eq!(
            call(&mut state, cfg, &list, Some("c4"), Millis::new(0)),
            Verdict::Allow
        );
        assert_eq!(
            call(&mut state, cfg, &grep, Some("c5"), Millis::new(0)),
            Verdict::Allow
        );
        let before = state.history().clone();
        let late = result(
            &mut state,
            cfg,
            &r,
            Some("c3"),
            Outcome::Result(&same),
            Millis::new(0),
        );
        assert_eq!(late, Recorded::default());
        let named = by_id(
            &mut state,
            cfg,
            "c3",
            Outcome::Result(&same),
            Millis::new(0),
        );
        assert_eq!(named, Ok(Recorded::default()));
        assert_eq!(state.history(), &before);
        // An id never seen is still an error.
        assert_eq!(
            by_id(
                &mut state,
                cfg,
                "c9",
                Outcome::Result(&same),
                Millis::new(0)
            ),
            Err(ResultError::UnknownCall)
        );
    }

    #[test]
    fn an_id_reused_by_an_allowed_call_is_no_longer_blocked() {
        let set = small_window(2);
        let cfg = set.global();
        let mut state = RunState::default();
        let (a, b) = (json!({"p": "a"}), json!({"p": "b"}));
        let same = json!("same");
        let (ra, rb) = (Call::new("read", &a), Call::new("read", &b));
        for id in ["c1", "c2"] {
            let _ = call(&mut state, cfg, &ra, Some(id), Millis::new(0));
            result(
                &mut state,
                cfg,
                &ra,
                Some(id),
                Outcome::Result(&same),
                Millis::new(0),
            );
        }
        assert!(call(&mut state, cfg, &ra, Some("x"), Millis::new(0)).is_blocked());
        // The host reuses "x" for another call, which runs; its result counts.
        assert_eq!(
            call(&mut state, cfg, &rb, Some("x"), Millis::new(0)),
            Verdict::Allow
        );
        for filler in ["f1", "f2", "f3"] {
            let e = json!({});
            let _ = call(
                &mut state,
                cfg,
                &Call::new(filler, &e),
                None,
                Millis::new(0),
            );
        }
        let r = result(
            &mut state,
            cfg,
            &rb,
            Some("x"),
            Outcome::Result(&same),
            Millis::new(0),
        );
        assert!(r.recorded);
    }

    #[test]
    fn blocked_ids_are_kept_up_to_their_bound() {
        let set = small_window(2);
        let cfg = set.global();
        let mut state = RunState::default();
        let a = json!({"p": "a"});
        let same = json!("same");
        let ra = Call::new("read", &a);
        for id in ["c1", "c2"] {
            let _ = call(&mut state, cfg, &ra, Some(id), Millis::new(0));
            result(
                &mut state,
                cfg,
                &ra,
                Some(id),
                Outcome::Result(&same),
                Millis::new(0),
            );
        }
        let blocked = crate::BLOCKED_IDS_KEPT + 10;
        for i in 0..blocked {
            let v = call(&mut state, cfg, &ra, Some(&format!("b{i}")), Millis::new(0));
            assert!(v.is_blocked());
        }
        let late = |state: &mut RunState, i: usize| {
            result(
                state,
                cfg,
                &ra,
                Some(&format!("b{i}")),
                Outcome::Result(&same),
                Millis::new(0),
            )
        };
        // The newest BLOCKED_IDS_KEPT are recognised; the oldest ten are forgotten.
        for i in 10..blocked {
            assert!(!late(&mut state, i).recorded, "b{i}");
        }
        assert!(late(&mut state, 0).recorded);
    }

    /// A host that sends every call under one id and never a result: the first
    /// `RETRIES_PER_CALL` repeats are retries, every later one a new call, told so; the
    /// loop is still caught, as with an id per call, behind by the retries. A result for the id ends it: the next call is new, and may be
    /// retried again.
    #[test]
    fn an_id_reused_without_results_stops_being_a_retry() {
        let set = ConfigSet::enabled_defaults();
        let cfg = set.global();
        let mut state = RunState::default();
        let mut session = SessionState::default();
        let args = json!({"q": "same"});
        let same = Call::new("search", &args);
        let uses: Vec<(CallIdUse, Verdict)> = (0..30)
            .map(|_| {
                let ticket = state.begin(
                    &mut session,
                    cfg,
                    &scope(),
                    &same.with_id(Some("x")),
                    Millis::new(0),
                );
                (ticket.id_use(), ticket.into_verdict())
            })
            .collect();
        let retries = RETRIES_PER_CALL as usize;
        assert_eq!(uses[0].0, CallIdUse::New);
        assert!(uses[1..=retries]
            .iter()
            .all(|(u, v)| u.is_retry() && *v == uses[0].1));
        for (i, (id_use, _)) in uses.iter().enumerate().skip(retries + 1) {
            assert_eq!(*id_use, CallIdUse::Reused { sent: i as u8 + 1 }, "call {i}");
            assert!(id_use
                .warning()
                .unwrap()
                .contains("send each call's result"));
        }
        // Counted: all but the retries. The verdicts are those of a host with an id per
        // call, behind by the retries: warned from the threshold on, then blocked.
        assert_eq!(state.history().len(), 30 - retries);
        let mut fresh = RunState::default();
        let unique: Vec<Verdict> = (0..30)
            .map(|i| {
                call(
                    &mut fresh,
                    cfg,
                    &same,
                    Some(&format!("u{i}")),
                    Millis::new(0),
                )
            })
            .collect();
        let behind: Vec<Verdict> = std::iter::repeat_n(unique[0].clone(), retries + 1)
            .chain(unique[1..30 - retries].iter().cloned())
            .collect();
        let verdicts: Vec<Verdict> = uses.iter().map(|(_, v)| v.clone()).collect();
        assert_eq!(verdicts, behind);
        // Calls without results make no progress to judge: the repeat warns (from the
        // 11th counted call), as with an id per call.
        assert!(matches!(verdicts[10 + retries], Verdict::Warn { .. }));
        assert!(matches!(verdicts[10 + retries - 1], Verdict::Allow));
        // A result for the id: the next call under it is new again, and can be retried.
        let out = json!("done");
        result(
            &mut state,
            cfg,
            &same,
            Some("x"),
            Outcome::Result(&out),
            Millis::new(0),
        );
        let next = state.begin(
            &mut session,
            cfg,
            &scope(),
            &same.with_id(Some("x")),
            Millis::new(0),
        );
        assert_eq!(next.id_use(), CallIdUse::New);
        let again = state.begin(
            &mut session,
            cfg,
            &scope(),
            &same.with_id(Some("x")),
            Millis::new(0),
        );
        assert_eq!(again.id_use(), CallIdUse::Retry);
        // The count of retries survives the state's bytes.
        let back = RunState::from_bytes(&state.to_bytes()).unwrap();
        assert_eq!(back, state);
    }

    #[test]
    fn a_retried_call_gets_the_same_verdict_and_changes_nothing() {
        let set = small_window(30);
        let cfg = set.global();
        let mut state = RunState::default();
        let a = json!({"p": "a"});
        let same = json!("same");
        let ra = Call::new("read", &a);
        let first = call(&mut state, cfg, &ra, Some("c1"), Millis::new(0));
        let snapshot = state.clone();
        assert_eq!(
            call(&mut state, cfg, &ra, Some("c1"), Millis::new(0)),
            first
        );
        // Nothing counted: only the retry itself is remembered.
        assert_eq!(state.history(), snapshot.history());
        let recorded = result(
            &mut state,
            cfg,
            &ra,
            Some("c1"),
            Outcome::Result(&same),
            Millis::new(0),
        );
        let snapshot = state.clone();
        // The result again, with its tool and arguments or by id only.
        assert_eq!(
            result(
                &mut state,
                cfg,
                &ra,
                Some("c1"),
                Outcome::Result(&same),
                Millis::new(0)
            ),
            recorded
        );
        assert_eq!(
            by_id(
                &mut state,
                cfg,
                "c1",
                Outcome::Result(&same),
                Millis::new(0)
            ),
            Ok(recorded)
        );
        assert_eq!(state, snapshot);
        // Another outcome for the same id is not a retry.
        let other = json!("other");
        assert_eq!(
            by_id(
                &mut state,
                cfg,
                "c1",
                Outcome::Result(&other),
                Millis::new(0)
            ),
            Err(ResultError::AlreadyRecorded)
        );
        // A warned call, retried, is warned again with the same words; once its result
        // is in, the same id and call again is a new call (hosts reusing ids stay guarded).
        let warned = call(&mut state, cfg, &ra, Some("c2"), Millis::new(0));
        assert!(matches!(warned, Verdict::Warn { .. }), "{warned:?}");
        assert_eq!(
            call(&mut state, cfg, &ra, Some("c2"), Millis::new(0)),
            warned
        );
        result(
            &mut state,
            cfg,
            &ra,
            Some("c2"),
            Outcome::Result(&same),
            Millis::new(0),
        );
        let blocked = call(&mut state, cfg, &ra, Some("c2"), Millis::new(0));
        assert!(blocked.is_blocked(), "{blocked:?}");
        assert_eq!(
            call(&mut state, cfg, &ra, Some("c2"), Millis::new(0)),
            blocked
        );
        assert_eq!(state.history().len(), 3);
    }
}
