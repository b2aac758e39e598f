//! Shadow-mode scans: a transcript's items applied to a guard, as if it had been watching
//! the agent, and a report per session of what it would have done.
//!
//! The guard sees the transcript as the agent lived it: every call, including the ones it
//! would have blocked (a blocked call's result is then ignored, as SPEC §7 says). For each
//! session the report gives the calls, the loops found (each a pattern in one run: its
//! detector, tool, first warning, first block, how often the agent repeated the blocked
//! call afterwards, whether the run would have been stopped), the compaction aborts, and
//! what blocking would have saved:
//!
//! - **calls**: the calls the guard would have blocked;
//! - **tokens** and **cost**, where the transcript records usage: the model responses
//!   that only reacted to blocked calls, i.e. every response whose previous batch of calls
//!   (in the same run) was blocked entirely. A response's tokens include its whole input
//!   (the context it re-read), which is what a loop burns.

use std::collections::HashMap;
use std::fs::File;
use std::io::{self, BufRead, BufReader, Cursor, Read, Seek, SeekFrom};
use std::path::Path;
use std::sync::Arc;

use loopguard::fingerprint::args_fingerprint;
use loopguard::{ConfigSet, Detection, Detector, Level, Signature, Verdict};
use loopguard_events::{Answer, Event, Ids, Replayer};
use serde::Serialize;

use crate::detect::{detect, Companion, Detection as Detected, Format, PREFIX_BYTES};
use crate::item::{Item, Pos, Sink, Usage};
use crate::openclaw::{self, RunWindows};
use crate::stats::ReadStats;
use crate::{read, ReadOptions, DEFAULT_MAX_LINE};

/// Runs tracked per session at once; beyond it the least recently active run is closed
/// (its unanswered calls are counted then, and the guard forgets it). At most the
/// engine's default limit, so the guard never has to choose a run to forget itself.
const MAX_RUNS: usize = 64;
/// Sessions tracked at once; beyond it the one that became active first is closed. Files
/// hold their sessions one after the other (only replay events interleave them), so this
/// bounds memory for files with millions of conversations.
const MAX_LIVE_SESSIONS: usize = 1024;
/// Unanswered calls tracked per run.
const MAX_PENDING: usize = 4096;

/// How to scan.
#[derive(Clone)]
pub struct ScanOptions {
    /// The guard's config (default: detection on with default thresholds,
    /// [`ConfigSet::enabled_defaults`]).
    pub config: ConfigSet,
    /// The agent whose config applies (events that name an agent use theirs).
    pub agent: Option<String>,
    /// Read every file as this format instead of detecting it.
    pub format: Option<Format>,
    /// Longest line read.
    pub max_line: usize,
    /// Called with the number of bytes read, every megabyte or so (progress bars).
    pub progress: Option<Arc<dyn Fn(u64) + Send + Sync>>,
}

impl Default for ScanOptions {
    fn default() -> Self {
        Self {
            config: ConfigSet::enabled_defaults(),
            agent: None,
            format: None,
            max_line: DEFAULT_MAX_LINE,
            progress: None,
        }
    }
}

impl std::fmt::Debug for ScanOptions {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ScanOptions")
            .field("agent", &self.agent)
            .field("format", &self.format)
            .field("max_line", &self.max_line)
            .finish_non_exhaustive()
    }
}

/// What became of one file.
#[derive(Clone, Debug, PartialEq, Serialize)]
#[serde(tag = "status", rename_all = "snake_case")]
#[non_exhaustive]
pub enum FileStatus {
    /// Read as a transcript.
    Scanned,
    /// A file that accompanies transcripts (sidecars, pointers, session stores): not
    /// scanned on its own.
    Companion {
        /// Which kind.
        kind: Companion,
    },
    /// Not a format this tool reads.
    UnknownFormat {
        /// Why not.
        reason: String,
    },
    /// Could not be read.
    Unreadable {
        /// The I/O error.
        error: String,
    },
    /// Deliberately not scanned (an archived copy that overlaps another file).
    Skipped {
        /// Why.
        reason: String,
    },
}

/// The scan of one file.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct FileScan {
    /// The file, as given.
    pub file: String,
    /// Its format, when known.
    pub format: Option<Format>,
    /// What became of it.
    #[serde(flatten)]
    pub status: FileStatus,
    /// Its size in bytes, when known.
    pub size: u64,
    /// The account of reading it.
    pub read: ReadStats,
    /// OpenClaw: runs found in the trajectory sidecar.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub sidecar_runs: Option<usize>,
    /// Its sessions.
    #[serde(skip)]
    pub sessions: Vec<SessionReport>,
}

impl FileScan {
    /// A file that was not scanned.
    pub fn not_scanned(file: impl Into<String>, status: FileStatus, size: u64) -> Self {
        Self {
            file: file.into(),
            format: None,
            status,
            size,
            read: ReadStats::default(),
            sidecar_runs: None,
            sessions: Vec::new(),
        }
    }
}

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

impl Savings {
    fn add_usage(&mut self, usage: Usage) {
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
    /// 1-based position of the call in its session.
    pub call_index: u64,
    /// Line of the source file: the call's, or for a compaction abort the result's.
    pub line: u64,
    /// The run (its real id when the transcript has one).
    pub run: Option<String>,
    /// Index of the loop in the session's `loops`.
    #[serde(rename = "loop")]
    pub loop_index: usize,
    /// What the model would have read.
    pub message: String,
}

/// Where something happened.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct Mark {
    /// The detector that fired.
    pub detector: Detector,
    /// Its count.
    pub count: u32,
    /// 1-based position of the call in its session.
    pub call_index: u64,
    /// Line in the source file.
    pub line: u64,
}

/// One loop: a call pattern (or a ping-pong pair) in one run that the guard stepped in on.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct LoopReport {
    /// The run (its real id when the transcript has one).
    pub run: Option<String>,
    /// The tool.
    pub tool: String,
    /// Ping-pong: the other tool.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub paired_tool: Option<String>,
    /// The first warning.
    pub first_warning: Option<Mark>,
    /// The first block.
    pub first_block: Option<Mark>,
    /// Calls with the blocked call's tool and arguments that the agent made after the
    /// first block (each of them a repeat the block tried to prevent).
    pub repeats_after_block: u64,
    /// Whether the guard would have stopped the run (global circuit breaker or
    /// compaction abort); every later call of the run counts as blocked by this loop.
    pub stopped_run: bool,
    /// What blocking would have saved.
    pub saved: Savings,
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

/// What a shadow scan found in one session.
#[derive(Clone, Debug, Default, PartialEq, Serialize)]
pub struct SessionReport {
    /// The session id.
    pub session: String,
    /// Runs seen (with at least one event).
    pub runs: u64,
    /// Tool calls.
    pub calls: u64,
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
    /// Calls that never got a result (cut-off or aborted turns).
    pub unpaired_calls: u64,
    /// Results whose call is not in the transcript.
    pub orphan_results: u64,
    /// Results the engine refused (a second result for one call, …).
    pub rejected_results: u64,
    /// Tokens and cost of all responses, where the transcript records usage.
    pub usage: Option<Usage>,
    /// What blocking would have saved.
    pub saved: Savings,
    /// The per-call picture.
    #[serde(skip)]
    pub timeline: Timeline,
}

impl SessionReport {
    /// Whether the guard would have blocked anything here.
    pub fn has_blocks(&self) -> bool {
        self.blocked_calls > 0 || !self.timeline.aborts.is_empty()
    }
}

#[derive(Clone, Debug, PartialEq, Eq)]
enum LoopKey {
    Signature(Signature),
    Pair(String, String),
    Abort(String),
}

#[derive(Default)]
struct RunTrack {
    key: Option<String>,
    label: Option<String>,
    pending: HashMap<String, u64>,
    pending_order: std::collections::VecDeque<String>,
    batch_calls: u32,
    batch_blocked: u32,
    batch_loop: Option<usize>,
    turn_saved: Option<usize>,
    stopped_by: Option<usize>,
    loops: Vec<(LoopKey, usize)>,
    blocked: Vec<(Signature, usize)>,
    last_used: u64,
    seen_event: bool,
}

impl RunTrack {
    fn display(&self) -> Option<String> {
        self.label.clone().or_else(|| self.key.clone())
    }
}

#[derive(Default)]
struct SessionState {
    report: SessionReport,
    runs: Vec<RunTrack>,
    last_call_run: Option<Option<String>>,
    clock: u64,
}

impl SessionState {
    /// The run track for `key`, created when new. Returns its index and the key of the
    /// run closed to make room, if one was.
    fn run(&mut self, key: &Option<String>) -> (usize, Option<Option<String>>) {
        self.clock += 1;
        if let Some(i) = self.runs.iter().position(|r| &r.key == key) {
            self.runs[i].last_used = self.clock;
            return (i, None);
        }
        let mut closed = None;
        if self.runs.len() >= MAX_RUNS {
            let oldest = (0..self.runs.len())
                .min_by_key(|&i| self.runs[i].last_used)
                .unwrap_or(0);
            let gone = self.runs.swap_remove(oldest);
            self.report.unpaired_calls += gone.pending.len() as u64;
            closed = Some(gone.key);
        }
        self.runs.push(RunTrack {
            key: key.clone(),
            last_used: self.clock,
            ..RunTrack::default()
        });
        (self.runs.len() - 1, closed)
    }

    /// Closes every run: unanswered calls are counted as unpaired.
    fn close(&mut self) {
        let pending: usize = self.runs.iter().map(|r| r.pending.len()).sum();
        self.report.unpaired_calls += pending as u64;
        self.runs.clear();
        self.last_call_run = None;
    }
}

/// Applies items to a guard and builds the session reports.
pub struct Scanner {
    replayer: Replayer,
    sessions: Vec<SessionState>,
    index: HashMap<String, usize>,
    /// Sessions with open runs, in the order they became active.
    live: std::collections::VecDeque<usize>,
}

impl std::fmt::Debug for Scanner {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Scanner")
            .field("sessions", &self.sessions.len())
            .finish_non_exhaustive()
    }
}

impl Scanner {
    /// A scanner over a fresh guard with `config`; `agent` applies to events that name
    /// none.
    pub fn new(config: ConfigSet, agent: Option<String>) -> Self {
        Self {
            replayer: Replayer::new(config, agent),
            sessions: Vec::new(),
            index: HashMap::new(),
            live: std::collections::VecDeque::new(),
        }
    }

    /// The reports, sessions in order of appearance.
    pub fn finish(self) -> Vec<SessionReport> {
        self.sessions
            .into_iter()
            .map(|mut s| {
                s.close();
                s.report
            })
            .collect()
    }

    /// The session and run of `ids`, opened when needed.
    fn enter(&mut self, ids: &Ids) -> (usize, usize) {
        let s = self.session(ids);
        if self.sessions[s].runs.is_empty() {
            self.live.push_back(s);
            if self.live.len() > MAX_LIVE_SESSIONS {
                if let Some(old) = self.live.pop_front() {
                    self.sessions[old].close();
                    let name = self.sessions[old].report.session.clone();
                    self.replayer.guard_mut().end_session(&name);
                }
            }
        }
        let (r, closed) = self.sessions[s].run(&ids.run);
        if let Some(run) = closed {
            let scope = loopguard::Scope::new(&ids.session).with_run(run.as_deref());
            self.replayer.guard_mut().end_run(&scope);
        }
        (s, r)
    }

    fn session(&mut self, ids: &Ids) -> usize {
        if let Some(&i) = self.index.get(&ids.session) {
            return i;
        }
        self.sessions.push(SessionState {
            report: SessionReport {
                session: ids.session.clone(),
                ..SessionReport::default()
            },
            ..SessionState::default()
        });
        self.index
            .insert(ids.session.clone(), self.sessions.len() - 1);
        self.sessions.len() - 1
    }

    fn call(&mut self, s: usize, r: usize, pos: Pos, event: &Event) {
        let Event::Call {
            ids,
            call_id,
            tool,
            args,
            ..
        } = event
        else {
            return;
        };
        let answer = self.replayer.apply(pos.line, event);
        let state = &mut self.sessions[s];
        let report = &mut state.report;
        report.calls += 1;
        let index = report.calls;
        if state.last_call_run.as_ref() != Some(&ids.run) {
            report.timeline.run_starts.push(index);
            state.last_call_run = Some(ids.run.clone());
        }
        let run = &mut state.runs[r];
        if let Some(id) = call_id {
            if run.pending.insert(id.clone(), index).is_some() {
                report.unpaired_calls += 1;
            } else {
                run.pending_order.push_back(id.clone());
                if run.pending_order.len() > 2 * MAX_PENDING {
                    // Answered calls stay in the queue until here: drop them.
                    let pending = &run.pending;
                    run.pending_order.retain(|id| pending.contains_key(id));
                }
            }
            if run.pending.len() > MAX_PENDING {
                while let Some(old) = run.pending_order.pop_front() {
                    if run.pending.remove(&old).is_some() {
                        report.unpaired_calls += 1;
                        break;
                    }
                }
            }
        }
        if !run.blocked.is_empty() {
            let signature = Signature::new(tool, args_fingerprint(tool, args));
            for &(blocked, l) in &run.blocked {
                if blocked == signature {
                    report.loops[l].repeats_after_block += 1;
                }
            }
        }
        run.batch_calls += 1;
        let verdict = match answer {
            // A scan reports what would have fired, in shadow mode or not.
            Answer::Call {
                verdict:
                    Verdict::Shadow {
                        detection,
                        terminal,
                    },
                ..
            } => match detection.level {
                loopguard::Level::Critical => Verdict::Block {
                    detection,
                    terminal,
                },
                _ => Verdict::Warn {
                    detection,
                    notify: false,
                },
            },
            Answer::Call { verdict, .. } => verdict,
            _ => Verdict::Allow,
        };
        let mark = match &verdict {
            Verdict::Allow | Verdict::Shadow { .. } => Timeline::ALLOW,
            Verdict::Warn { detection, .. } => {
                report.warned_calls += 1;
                let l = loop_for(report, run, detection, tool, args);
                record_finding(report, run, l, detection, index, pos.line, false);
                Timeline::WARN
            }
            Verdict::Block {
                detection,
                terminal,
            } => {
                report.blocked_calls += 1;
                report.saved.calls += 1;
                run.batch_blocked += 1;
                if let Some(l) = run.stopped_by {
                    report.loops[l].saved.calls += 1;
                    run.batch_loop = Some(l);
                    Timeline::STOPPED
                } else {
                    let l = loop_for(report, run, detection, tool, args);
                    report.loops[l].saved.calls += 1;
                    run.batch_loop = Some(l);
                    if record_finding(report, run, l, detection, index, pos.line, true) {
                        let signature = Signature::new(tool, args_fingerprint(tool, args));
                        run.blocked.push((signature, l));
                    }
                    if *terminal {
                        run.stopped_by = Some(l);
                        report.loops[l].stopped_run = true;
                    }
                    Timeline::BLOCK
                }
            }
        };
        report.timeline.marks.push(mark);
    }

    fn result(&mut self, s: usize, r: usize, pos: Pos, event: &Event) {
        let Event::Result { call_id, tool, .. } = event else {
            return;
        };
        let state = &mut self.sessions[s];
        let run = &mut state.runs[r];
        let call_index = call_id.as_ref().and_then(|id| run.pending.remove(id));
        if call_index.is_none() && tool.is_none() {
            state.report.orphan_results += 1;
            return;
        }
        let answer = self.replayer.apply(pos.line, event);
        let state = &mut self.sessions[s];
        let report = &mut state.report;
        let run = &mut state.runs[r];
        match answer {
            Answer::Result { recorded, .. } => {
                report.outcomes += 1;
                // Shadow mode reports the abort it would have made.
                if let Some(abort) = recorded.abort.or(recorded.would_abort) {
                    let index = call_index.unwrap_or(report.calls);
                    let key = LoopKey::Abort(abort.tool.clone());
                    let l = find_or_add_loop(report, run, key, &abort.tool, None);
                    let detection = Detection {
                        level: Level::Critical,
                        detector: abort.detector(),
                        count: abort.count,
                        tool: abort.tool.clone(),
                        paired_tool: None,
                        message: abort.message.clone(),
                        signature: abort.signature,
                        paired_signature: None,
                    };
                    record_finding(report, run, l, &detection, index, pos.line, true);
                    report.loops[l].stopped_run = true;
                    if run.stopped_by.is_none() {
                        run.stopped_by = Some(l);
                    }
                    report.timeline.aborts.push(index);
                }
            }
            _ => report.rejected_results += 1,
        }
    }

    fn turn(&mut self, s: usize, r: usize, usage: Option<Usage>) {
        let run = &mut self.sessions[s].runs[r];
        run.turn_saved = if run.batch_calls > 0 && run.batch_blocked == run.batch_calls {
            run.batch_loop
        } else {
            None
        };
        run.batch_calls = 0;
        run.batch_blocked = 0;
        run.batch_loop = None;
        if let Some(usage) = usage {
            self.usage(s, r, usage);
        }
    }

    fn usage(&mut self, s: usize, r: usize, usage: Usage) {
        let state = &mut self.sessions[s];
        let total = state.report.usage.get_or_insert(Usage {
            tokens: 0,
            cost: None,
        });
        total.tokens += usage.tokens;
        if let Some(cost) = usage.cost {
            let sum = total.cost.get_or_insert(0.0);
            *sum = add_cost(*sum, cost);
        }
        if let Some(l) = state.runs[r].turn_saved {
            state.report.saved.add_usage(usage);
            state.report.loops[l].saved.add_usage(usage);
        }
    }
}

impl Sink for Scanner {
    fn push(&mut self, pos: Pos, item: Item) {
        let (s, r) = self.enter(item.ids());
        match item {
            Item::Event(event) => {
                let state = &mut self.sessions[s];
                if !std::mem::replace(&mut state.runs[r].seen_event, true) {
                    state.report.runs += 1;
                }
                match &event {
                    Event::Call { .. } => self.call(s, r, pos, &event),
                    Event::Result { .. } => self.result(s, r, pos, &event),
                    Event::Compaction { .. } => {
                        self.replayer.apply(pos.line, &event);
                        let report = &mut self.sessions[s].report;
                        report.compactions += 1;
                        report.timeline.compactions.push(report.calls);
                    }
                }
            }
            Item::Turn { usage, .. } => self.turn(s, r, usage),
            Item::Usage { usage, .. } => self.usage(s, r, usage),
            Item::RunLabel { label, .. } => {
                let state = &mut self.sessions[s];
                let run = &mut state.runs[r];
                run.label = Some(label.clone());
                for &(_, l) in &run.loops {
                    state.report.loops[l].run = Some(label.clone());
                    for f in state
                        .report
                        .findings
                        .iter_mut()
                        .filter(|f| f.loop_index == l)
                    {
                        f.run = Some(label.clone());
                    }
                }
            }
        }
    }
}

/// The loop a detection belongs to, created when new.
fn loop_for(
    report: &mut SessionReport,
    run: &mut RunTrack,
    detection: &Detection,
    tool: &str,
    args: &serde_json::Value,
) -> usize {
    let key = match (&detection.detector, &detection.paired_tool) {
        (Detector::PingPong, Some(paired)) => {
            let (a, b) = if tool <= paired.as_str() {
                (tool, paired.as_str())
            } else {
                (paired.as_str(), tool)
            };
            LoopKey::Pair(a.to_owned(), b.to_owned())
        }
        _ => LoopKey::Signature(Signature::new(tool, args_fingerprint(tool, args))),
    };
    find_or_add_loop(report, run, key, tool, detection.paired_tool.clone())
}

fn find_or_add_loop(
    report: &mut SessionReport,
    run: &mut RunTrack,
    key: LoopKey,
    tool: &str,
    paired_tool: Option<String>,
) -> usize {
    if let Some(&(_, l)) = run.loops.iter().find(|(k, _)| *k == key) {
        return l;
    }
    report.loops.push(LoopReport {
        run: run.display(),
        tool: tool.to_owned(),
        paired_tool,
        first_warning: None,
        first_block: None,
        repeats_after_block: 0,
        stopped_run: false,
        saved: Savings::default(),
    });
    let l = report.loops.len() - 1;
    run.loops.push((key, l));
    l
}

/// Records a finding when it is the loop's first for this detector and level; sets the
/// loop's first warning or first block. Returns whether this was the loop's first block.
fn record_finding(
    report: &mut SessionReport,
    run: &RunTrack,
    l: usize,
    detection: &Detection,
    call_index: u64,
    line: u64,
    block: bool,
) -> bool {
    let mark = Mark {
        detector: detection.detector,
        count: detection.count,
        call_index,
        line,
    };
    let the_loop = &mut report.loops[l];
    let first_block = block && the_loop.first_block.is_none();
    if block {
        the_loop.first_block.get_or_insert(mark);
    } else {
        the_loop.first_warning.get_or_insert(mark);
    }
    let seen = report.findings.iter().any(|f| {
        f.loop_index == l && f.detector == detection.detector && f.level == detection.level
    });
    if !seen {
        report.findings.push(Finding {
            detector: detection.detector,
            level: detection.level,
            tool: detection.tool.clone(),
            paired_tool: detection.paired_tool.clone(),
            count: detection.count,
            call_index,
            line,
            run: run.display(),
            loop_index: l,
            message: detection.message.clone(),
        });
    }
    first_block
}

/// Scans a transcript in `format` from `input`.
pub fn scan_reader<R: BufRead + Seek>(
    format: Format,
    input: R,
    read_options: &ReadOptions<'_>,
    options: &ScanOptions,
) -> io::Result<(ReadStats, Vec<SessionReport>)> {
    let mut scanner = Scanner::new(options.config.clone(), options.agent.clone());
    let stats = read(format, input, read_options, &mut scanner)?;
    Ok((stats, scanner.finish()))
}

/// Scans a transcript held in memory (detecting its format unless `format` is given);
/// `name` names the session when the transcript does not.
pub fn scan_bytes(
    bytes: &[u8],
    format: Option<Format>,
    name: &str,
    options: &ScanOptions,
) -> io::Result<FileScan> {
    let format = match format.or(options.format) {
        Some(f) => f,
        None => match detect(bytes, Some(name)) {
            Detected::Transcript(f) => f,
            Detected::Companion(kind) => {
                return Ok(FileScan::not_scanned(
                    name,
                    FileStatus::Companion { kind },
                    bytes.len() as u64,
                ))
            }
            Detected::Unknown(reason) => {
                return Ok(FileScan::not_scanned(
                    name,
                    FileStatus::UnknownFormat { reason },
                    bytes.len() as u64,
                ))
            }
        },
    };
    let mut read_options = ReadOptions::new(session_hint(name));
    read_options.max_line = options.max_line;
    let (stats, sessions) = scan_reader(format, Cursor::new(bytes), &read_options, options)?;
    Ok(FileScan {
        file: name.to_owned(),
        format: Some(format),
        status: FileStatus::Scanned,
        size: bytes.len() as u64,
        read: stats,
        sidecar_runs: None,
        sessions,
    })
}

/// Scans a file. Never fails: a file that cannot be read, or is of no known format, is
/// reported as such.
pub fn scan_path(path: &Path, options: &ScanOptions) -> FileScan {
    scan_path_as(path, &path.display().to_string(), options)
}

/// Scans the file at `path` as if it were called `name` (`-` for standard input spooled
/// to a temporary file): the report shows `name`, and sessions without an id of their
/// own are named after it.
pub fn scan_path_as(path: &Path, name: &str, options: &ScanOptions) -> FileScan {
    let shown = name.to_owned();
    let unreadable = |e: io::Error, size| {
        FileScan::not_scanned(
            shown.clone(),
            FileStatus::Unreadable {
                error: e.to_string(),
            },
            size,
        )
    };
    let mut file = match File::open(path) {
        Ok(f) => f,
        Err(e) => return unreadable(e, 0),
    };
    let size = file.metadata().map(|m| m.len()).unwrap_or(0);
    let name = match Path::new(name).file_name() {
        _ if name == "-" => "stdin".to_owned(),
        Some(n) => n.to_string_lossy().into_owned(),
        None => name.to_owned(),
    };
    let format = match options.format {
        Some(f) => f,
        None => {
            let mut prefix = Vec::with_capacity(PREFIX_BYTES.min(size as usize + 1));
            if let Err(e) = (&mut file)
                .take(PREFIX_BYTES as u64)
                .read_to_end(&mut prefix)
            {
                return unreadable(e, size);
            }
            match detect(&prefix, Some(&name)) {
                Detected::Transcript(f) => f,
                Detected::Companion(kind) => {
                    return FileScan::not_scanned(shown, FileStatus::Companion { kind }, size)
                }
                Detected::Unknown(reason) => {
                    return FileScan::not_scanned(shown, FileStatus::UnknownFormat { reason }, size)
                }
            }
        }
    };
    if let Err(e) = file.seek(SeekFrom::Start(0)) {
        return unreadable(e, size);
    }
    let windows = match format {
        Format::OpenClaw => openclaw::sidecar_of(path).and_then(|sidecar| {
            let file = File::open(sidecar).ok()?;
            RunWindows::read(BufReader::new(file)).ok().map(|(w, _)| w)
        }),
        _ => None,
    };
    let mut read_options = ReadOptions::new(session_hint(&name));
    read_options.max_line = options.max_line;
    read_options.run_windows = windows.as_ref().filter(|w| !w.is_empty());
    let metered = Metered {
        inner: file,
        unreported: 0,
        progress: options.progress.as_deref(),
    };
    let input = BufReader::with_capacity(1 << 18, metered);
    match scan_reader(format, input, &read_options, options) {
        Ok((stats, sessions)) => FileScan {
            file: shown,
            format: Some(format),
            status: FileStatus::Scanned,
            size,
            read: stats,
            sidecar_runs: read_options.run_windows.map(RunWindows::len),
            sessions,
        },
        Err(e) => unreadable(e, size),
    }
}

/// How many times a reader goes over a file of `format` (progress bars count bytes read).
pub fn passes(format: Format) -> u64 {
    match format {
        Format::OpenClaw => 2,
        _ => 1,
    }
}

/// The session name a file gives: its name up to the first dot.
fn session_hint(file_name: &str) -> &str {
    let name = file_name.split('.').next().unwrap_or(file_name);
    if name.is_empty() {
        file_name
    } else {
        name
    }
}

/// Reports bytes read to a progress callback, a megabyte at a time.
struct Metered<'p, R> {
    inner: R,
    unreported: u64,
    progress: Option<&'p (dyn Fn(u64) + Send + Sync)>,
}

impl<R: Read> Read for Metered<'_, R> {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        let n = self.inner.read(buf)?;
        if let Some(progress) = self.progress {
            self.unreported += n as u64;
            if self.unreported >= 1 << 20 || n == 0 {
                progress(std::mem::take(&mut self.unreported));
            }
        }
        Ok(n)
    }
}

impl<R: Seek> Seek for Metered<'_, R> {
    fn seek(&mut self, pos: SeekFrom) -> io::Result<u64> {
        self.inner.seek(pos)
    }
}

impl<R> Drop for Metered<'_, R> {
    fn drop(&mut self) {
        if let (Some(progress), n @ 1..) = (self.progress, self.unreported) {
            progress(n);
        }
    }
}

#[cfg(test)]
mod tests;
