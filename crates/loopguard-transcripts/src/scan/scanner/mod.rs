//! The scanner: items applied to a guard in shadow mode, and the session reports built
//! from its answers.
//!
//! **Loops.** Every verdict that is not an allow is grouped into a loop of its run (see
//! [`LoopReport`] for the rule): generic, from what the verdict carries (its call's
//! signature and the paired one), so that a detector added to the engine groups without
//! a change here.
//!
//! **Memory.** A scan keeps every session whose run may still go on: transcripts say when
//! a run ends (a new prompt), but not when a session does, and replay events interleave
//! sessions freely. What it keeps is bounded by bytes, not by a count: each open run is
//! charged an estimate of what it holds (its track here, the guard's history of it, its
//! unanswered calls), and when the total passes the budget
//! ([`ScanOptions::live_memory`](crate::ScanOptions::live_memory)) the least recently
//! active session is closed and reported as `closed_early`. The guard itself is given no
//! session limit of its own, so it never forgets a session the scanner keeps.

use std::collections::{BTreeMap, HashMap, VecDeque};
use std::mem::size_of;

use loopguard::canonical::json_text;
use loopguard::fingerprint::{args_fingerprint, is_failure};
use loopguard::json::Json;
use loopguard::{
    ConfigSet, Detection, Detector, Guard, Level, Limits, ManualClock, Millis, OutcomeOf, RunState,
    Signature, Verdict,
};
use loopguard_events::{Answer, EventRef, Ids, IdsRef, Replayer};
use serde_json::Value;

use super::report::{
    add_cost, add_spend, cut, is_spend_budget, BudgetStop, Finding, LoopReport, Mark, Savings,
    SessionReport, Timeline, TASK_CHARS,
};
use crate::item::{Item, Pos, Sink, Usage};
use crate::json_ref::JsonRef;

/// Runs tracked per session at once; beyond it the least recently active run is closed
/// (its unanswered calls are counted then, and the guard forgets it). The engine's own
/// limit, so the guard never has to choose a run to forget itself.
const MAX_RUNS: usize = 64;
/// Unanswered calls tracked per run.
const MAX_PENDING: usize = 4096;
/// Default live memory budget (1 GiB).
pub const DEFAULT_LIVE_MEMORY: usize = 1 << 30;

/// Estimated bytes of one open run, besides its history: its track here, the guard's run
/// state, and what both allocate with the run's first call (the guard's slot, the first
/// blocks of its history, names and answers, the map of unanswered calls). Checked against
/// what runs really hold by `tests/live_memory.rs` (counted by an allocator: 1.0 to 1.5
/// times).
const RUN_BYTES: usize = size_of::<RunTrack>() + size_of::<RunState>() + 640;
/// Estimated bytes of one record of a run's history in the guard (fingerprints, call id,
/// tool name, bookkeeping).
const RECORD_BYTES: usize = 128;
/// Estimated bytes of one unanswered call (map and queue entries), besides its id.
const PENDING_BYTES: usize = 96;

/// What a flagged call (or an abort) contributes to its loop.
struct Flag<'a> {
    detector: Detector,
    level: Level,
    count: u32,
    tool: &'a str,
    paired_tool: Option<&'a str>,
    message: &'a str,
    /// The call patterns it names: its call's, and the other side of a ping-pong.
    signatures: [Option<Signature>; 2],
}

impl<'a> Flag<'a> {
    fn of(detection: &'a Detection) -> Self {
        Self {
            detector: detection.detector,
            level: detection.level,
            count: detection.count,
            tool: &detection.tool,
            paired_tool: detection.evidence.paired_tool(),
            message: &detection.message,
            signatures: [
                Some(detection.signature),
                detection.evidence.paired_signature(),
            ],
        }
    }

    fn mark(&self, at: At) -> Mark {
        Mark {
            detector: self.detector,
            count: self.count,
            call_index: at.call,
            message_index: at.message,
            line: at.line,
        }
    }
}

/// Where a flag was raised: on a call (its index), or on a message (its index among the
/// messages, and the calls before it).
#[derive(Clone, Copy)]
struct At {
    call: u64,
    message: Option<u64>,
    line: u64,
}

/// A loop of a run: the call patterns it covers, and its place in the session's report.
struct LoopTrack {
    members: Vec<Signature>,
    index: usize,
}

#[derive(Default)]
struct RunTrack {
    key: Option<String>,
    label: Option<String>,
    /// Unanswered calls: id → (position in the session, how its outcome is read).
    /// Calls waiting for their result, by call id: call index and tool.
    pending: HashMap<String, (u64, Box<str>)>,
    pending_order: VecDeque<String>,
    batch_calls: u32,
    batch_blocked: u32,
    batch_loop: Option<usize>,
    turn_saved: Option<usize>,
    stopped_by: Option<usize>,
    loops: Vec<LoopTrack>,
    /// The loop of the run's previous call, when that call was flagged.
    last_flagged: Option<usize>,
    /// Loops whose first flagged call's outcome is still to come: (call index, loop).
    awaiting_outcome: Vec<(u64, usize)>,
    /// The run's loop without tool calls still open: flagged on a message, and no tool
    /// call made since.
    text_open: Option<usize>,
    blocked: Vec<(Signature, usize)>,
    /// Spend inside loops: the current response's usage while it is not counted, whether
    /// it is counted (it made a flagged call, or the run was stopped by a loop), and the
    /// usage of the responses since the run's last flagged call.
    turn_spend: Option<Usage>,
    turn_in_loop: bool,
    spend_since_flag: Option<Usage>,
    last_used: u64,
    seen_event: bool,
    /// Calls so far, for the memory estimate (the guard keeps at most a history's worth).
    calls: usize,
    /// Estimated bytes this run holds.
    bytes: usize,
}

impl RunTrack {
    fn display(&self) -> Option<String> {
        self.label.clone().or_else(|| self.key.clone())
    }
}

/// What the scanner tracks of a session besides its report (kept apart, so that the
/// reports are handed over as they are, without a copy of them all).
#[derive(Default)]
struct SessionState {
    runs: Vec<RunTrack>,
    last_call_run: Option<Option<String>>,
    clock: u64,
    /// Its place in the scanner's activity order while it has open runs.
    stamp: Option<u64>,
    /// Estimated bytes of its open runs.
    bytes: usize,
}

impl SessionState {
    /// The run track for `key`, created when new. Returns its index and the key of the
    /// run closed to make room, if one was.
    fn run(
        &mut self,
        report: &mut SessionReport,
        key: Option<&str>,
    ) -> (usize, Option<Option<String>>) {
        self.clock += 1;
        if let Some(i) = self.runs.iter().position(|r| r.key.as_deref() == key) {
            self.runs[i].last_used = self.clock;
            return (i, None);
        }
        let mut closed = None;
        if self.runs.len() >= MAX_RUNS {
            let oldest = (0..self.runs.len())
                .min_by_key(|&i| self.runs[i].last_used)
                .unwrap_or(0);
            let gone = self.runs.swap_remove(oldest);
            report.unpaired_calls += gone.pending.len() as u64;
            self.bytes = self.bytes.saturating_sub(gone.bytes);
            closed = Some(gone.key);
        }
        let bytes = RUN_BYTES + key.map_or(0, str::len);
        self.bytes += bytes;
        // Most sessions have one run: no room for more until a second comes.
        self.runs.reserve_exact(1);
        self.runs.push(RunTrack {
            key: key.map(str::to_owned),
            last_used: self.clock,
            bytes,
            ..RunTrack::default()
        });
        (self.runs.len() - 1, closed)
    }

    /// Closes every run: unanswered calls are counted as unpaired.
    fn close(&mut self, report: &mut SessionReport) {
        let pending: usize = self.runs.iter().map(|r| r.pending.len()).sum();
        report.unpaired_calls += pending as u64;
        self.runs.clear();
        self.bytes = 0;
        self.last_call_run = None;
    }
}

/// Applies items to a guard and builds the session reports.
pub struct Scanner {
    replayer: Replayer,
    sessions: Vec<SessionState>,
    /// The report of each session, by the same index.
    reports: Vec<SessionReport>,
    index: HashMap<String, usize>,
    /// Sessions with open runs, by their last activity (oldest first).
    live: BTreeMap<u64, usize>,
    activity: u64,
    /// The session of the previous item (most items follow one of the same session).
    current: Option<usize>,
    /// Estimated bytes of every open run, and the budget.
    live_bytes: usize,
    budget: usize,
    /// History kept per run (for the memory estimate).
    history: usize,
    /// Whether the config sets spend budgets: the transcript's usage is then handed to
    /// the guard as usage events.
    budgets: bool,
}

impl std::fmt::Debug for Scanner {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Scanner")
            .field("sessions", &self.sessions.len())
            .field("live_bytes", &self.live_bytes)
            .finish_non_exhaustive()
    }
}

impl Scanner {
    /// A scanner over a fresh guard with `config`; `agent` applies to events that name
    /// none. Live memory is bounded by [`DEFAULT_LIVE_MEMORY`].
    pub fn new(config: ConfigSet, agent: Option<String>) -> Self {
        Self::with_budget(config, agent, DEFAULT_LIVE_MEMORY)
    }

    /// A scanner that keeps at most about `budget` bytes of open runs.
    pub fn with_budget(config: ConfigSet, agent: Option<String>, budget: usize) -> Self {
        let history = config.for_agent(agent.as_deref()).history_size() as usize;
        let budgets = std::iter::once(config.global())
            .chain(config.agents().map(|(_, _, cfg)| cfg))
            .any(|cfg| cfg.budgets().is_some());
        // The scanner decides which sessions to forget, by bytes; the guard never does.
        let limits = Limits {
            max_sessions: usize::MAX,
            ..Limits::default()
        };
        let guard = Guard::with_clock(config, limits, ManualClock::new(Millis::ZERO));
        Self {
            replayer: Replayer::with_guard(guard, agent),
            sessions: Vec::new(),
            reports: Vec::new(),
            index: HashMap::new(),
            live: BTreeMap::new(),
            activity: 0,
            current: None,
            live_bytes: 0,
            budget,
            history,
            budgets,
        }
    }

    /// Estimated bytes of the open runs: what the budget is checked against.
    pub fn live_bytes(&self) -> usize {
        self.live_bytes
    }

    /// The reports, sessions in order of appearance.
    pub fn finish(mut self) -> Vec<SessionReport> {
        for (state, report) in self.sessions.iter_mut().zip(&mut self.reports) {
            state.close(report);
            report.budget_stop = BudgetStop::of(&report.loops);
            // Where the transcript records usage, nothing saved is 0 tokens, not unknown.
            if let Some(usage) = report.usage {
                let in_loops = report.loop_spend.get_or_insert(Usage::default());
                if usage.cost.is_some() {
                    in_loops.cost.get_or_insert(0.0);
                }
                report.saved.tokens.get_or_insert(0);
                for l in &mut report.loops {
                    l.saved.tokens.get_or_insert(0);
                    if l.messages.is_some() {
                        let tokens = *l.tokens.get_or_insert(0);
                        l.token_share =
                            (usage.tokens > 0).then(|| tokens as f64 / usage.tokens as f64);
                    }
                }
            }
        }
        self.reports
    }

    /// The session and run of `ids`, opened when needed.
    fn enter(&mut self, ids: IdsRef<'_>) -> (usize, usize) {
        let s = self.session(ids.session);
        let report = &mut self.reports[s];
        if report.parent_session.is_none() {
            if let Some(parent) = ids.parent_session {
                report.parent_session = Some(parent.to_owned());
                report.parent_run = ids.parent_run.map(str::to_owned);
            }
        }
        if self.current != Some(s) || self.sessions[s].stamp.is_none() {
            self.current = Some(s);
            if let Some(old) = self.sessions[s].stamp.take() {
                self.live.remove(&old);
            }
            self.activity += 1;
            self.sessions[s].stamp = Some(self.activity);
            self.live.insert(self.activity, s);
        }
        let before = self.sessions[s].bytes;
        let (r, closed) = self.sessions[s].run(&mut self.reports[s], ids.run);
        if let Some(run) = closed {
            let scope = loopguard::Scope::new(ids.session).with_run(run.as_deref());
            self.replayer.guard_mut().end_run(&scope);
        }
        self.live_bytes = (self.live_bytes + self.sessions[s].bytes).saturating_sub(before);
        (s, r)
    }

    /// Closes the least recently active sessions (never `keep`) until the open runs fit
    /// the budget again.
    fn fit_budget(&mut self, keep: usize) {
        while self.live_bytes > self.budget {
            let Some((&stamp, &s)) = self.live.iter().find(|(_, &s)| s != keep) else {
                return;
            };
            self.live.remove(&stamp);
            let state = &mut self.sessions[s];
            state.stamp = None;
            self.live_bytes = self.live_bytes.saturating_sub(state.bytes);
            let report = &mut self.reports[s];
            state.close(report);
            report.closed_early = true;
            let name = report.session.clone();
            self.replayer.guard_mut().end_session(&name);
            if self.current == Some(s) {
                self.current = None;
            }
        }
    }

    /// Charges `add` bytes more and `remove` less to run `r` of session `s`.
    fn charge(&mut self, s: usize, r: usize, add: usize, remove: usize) {
        let state = &mut self.sessions[s];
        let run = &mut state.runs[r];
        run.bytes = (run.bytes + add).saturating_sub(remove);
        state.bytes = (state.bytes + add).saturating_sub(remove);
        self.live_bytes = (self.live_bytes + add).saturating_sub(remove);
    }

    fn session(&mut self, session: &str) -> usize {
        if let Some(&i) = self.index.get(session) {
            return i;
        }
        self.sessions.push(SessionState::default());
        self.reports.push(SessionReport {
            session: session.to_owned(),
            ..SessionReport::default()
        });
        self.index
            .insert(session.to_owned(), self.sessions.len() - 1);
        self.sessions.len() - 1
    }

    /// Applies an event (owned, or read in place from a line) and tracks it.
    fn event<'a, J: Json<'a>>(&mut self, pos: Pos, event: &EventRef<'a, J>) {
        let (s, r) = self.enter(event.ids());
        let counts = !matches!(event, EventRef::Message { .. });
        if counts && !std::mem::replace(&mut self.sessions[s].runs[r].seen_event, true) {
            self.reports[s].runs += 1;
        }
        match event {
            EventRef::Call { .. } => self.call(s, r, pos, event),
            EventRef::Result { .. } => self.result(s, r, pos, event),
            EventRef::Compaction { .. } => {
                self.replayer.apply(pos.line, event);
                let report = &mut self.reports[s];
                report.compactions += 1;
                report.timeline.compactions.push(report.calls);
            }
            EventRef::Usage { usage, .. } => {
                // Counted in the report like a response's own figures, once per id: a
                // usage event the guard refuses (a repeated id, absurd figures) adds nothing.
                let answer = self.replayer.apply(pos.line, event);
                if let Answer::Usage { counted, .. } = answer {
                    if counted.repeat {
                        return self.fit_budget(s);
                    }
                    // The host's cost, else the price table's for its model.
                    let total = Usage {
                        tokens: usage.tokens(),
                        cost: usage.cost.or(counted.cost.map(|c| c.usd())),
                    };
                    // A usage event stands for one response.
                    new_response(&self.reports[s], &mut self.sessions[s].runs[r]);
                    self.usage(s, r, total);
                }
            }
            EventRef::Message { .. } => self.message(s, r, pos, event),
        }
        self.fit_budget(s);
    }

    /// A message: a loop without tool calls when a detector of messages flags it.
    fn message<'a, J: Json<'a>>(&mut self, s: usize, r: usize, pos: Pos, event: &EventRef<'a, J>) {
        let EventRef::Message { message, .. } = event else {
            return;
        };
        let answer = self.replayer.apply(pos.line, event);
        let report = &mut self.reports[s];
        report.messages += 1;
        if report.task.is_none() && message.role == loopguard::Role::User {
            let text = message.text.trim();
            if !text.is_empty() {
                report.task = Some(text.chars().take(TASK_CHARS).collect());
            }
        }
        let at = At {
            call: report.calls,
            message: Some(report.messages),
            line: pos.line,
        };
        let run = &mut self.sessions[s].runs[r];
        let verdict = match answer {
            Answer::Message { verdict, .. } => seen(verdict),
            _ => Verdict::Allow,
        };
        let (detection, outcome) = match &verdict {
            Verdict::Warn { detection, .. } => {
                report.warned_messages += 1;
                (detection, Outcome::Warned)
            }
            Verdict::Block {
                detection,
                terminal,
            } => {
                if let Some(l) = run.stopped_by {
                    // A message of a run already stopped: the model was not called again.
                    let the_loop = &mut report.loops[l];
                    if let Some(m) = &mut the_loop.messages {
                        m[1] = report.messages;
                    }
                    return;
                }
                report.blocked_messages += 1;
                let outcome = match terminal {
                    true => Outcome::Stopped,
                    false => Outcome::Blocked,
                };
                (detection, outcome)
            }
            _ => return,
        };
        let flag = Flag::of(detection);
        // Text loops group by their text, else with the run's open text loop; never with
        // a loop of calls by contiguity.
        let calls_last = std::mem::replace(&mut run.last_flagged, run.text_open);
        let l = loop_for(report, run, &flag);
        spend_in_loop(report, run, l, flag.detector);
        run.last_flagged = calls_last;
        run.text_open = Some(l);
        record(report, run, l, &flag, at, outcome);
        let the_loop = &mut report.loops[l];
        let index = report.messages;
        let range = the_loop.messages.get_or_insert([index, index]);
        range[1] = index;
        if the_loop.text.is_none() {
            the_loop.text = Some(detection.excerpt().unwrap_or(message.text).to_owned());
        }
        if outcome == Outcome::Stopped {
            run.stopped_by = Some(l);
        }
    }

    fn call<'a, J: Json<'a>>(&mut self, s: usize, r: usize, pos: Pos, event: &EventRef<'a, J>) {
        let EventRef::Call {
            ids,
            call_id,
            tool,
            args,
            ..
        } = *event
        else {
            return;
        };
        // A call without arguments has `{}` (as the guard reads it).
        let empty = Value::Object(serde_json::Map::new());
        let signature = || {
            let fingerprint = match args {
                Some(args) => args_fingerprint(tool, args),
                None => args_fingerprint(tool, &empty),
            };
            Signature::new(tool, fingerprint)
        };
        let answer = self.replayer.apply(pos.line, event);
        let history = self.history;
        let state = &mut self.sessions[s];
        let report = &mut self.reports[s];
        report.calls += 1;
        let index = report.calls;
        if state.last_call_run.as_ref().map(Option::as_deref) != Some(ids.run) {
            report.timeline.run_starts.push(index);
            state.last_call_run = Some(ids.run.map(str::to_owned));
        }
        let run = &mut state.runs[r];
        let (mut add, mut remove) = (0, 0);
        run.calls += 1;
        if run.calls <= history {
            add += RECORD_BYTES;
        }
        if let Some(id) = call_id {
            match run.pending.insert(id.to_owned(), (index, tool.into())) {
                Some(_) => report.unpaired_calls += 1,
                None => {
                    add += PENDING_BYTES + id.len() + tool.len();
                    run.pending_order.push_back(id.to_owned());
                    if run.pending_order.len() > 2 * MAX_PENDING {
                        // Answered calls stay in the queue until here: drop them.
                        let pending = &run.pending;
                        run.pending_order.retain(|id| pending.contains_key(id));
                    }
                }
            }
            if run.pending.len() > MAX_PENDING {
                while let Some(old) = run.pending_order.pop_front() {
                    if let Some((_, tool)) = run.pending.remove(&old) {
                        remove += PENDING_BYTES + old.len() + tool.len();
                        report.unpaired_calls += 1;
                        break;
                    }
                }
            }
        }
        if !run.blocked.is_empty() {
            let signature = signature();
            for &(blocked, l) in &run.blocked {
                if blocked == signature {
                    report.loops[l].repeats_after_block += 1;
                }
            }
        }
        run.batch_calls += 1;
        let verdict = match answer {
            Answer::Call { verdict, .. } => seen(verdict),
            _ => Verdict::Allow,
        };
        // A loop's first call: what it was called with (its outcome comes with its result).
        let first_of = |report: &mut SessionReport, run: &mut RunTrack, l: usize| {
            if report.loops[l].calls[0] == 0 {
                report.loops[l].args = Some(match args {
                    Some(args) => cut(&json_text(args)),
                    None => "{}".to_owned(),
                });
                run.awaiting_outcome.push((index, l));
            }
        };
        let at = At {
            call: index,
            message: None,
            line: pos.line,
        };
        // The model made a tool call: the run's loop without tool calls, if one was open,
        // ends there.
        run.text_open = None;
        let mark = match &verdict {
            Verdict::Warn { detection, .. } => {
                report.warned_calls += 1;
                let flag = Flag::of(detection);
                let l = loop_for(report, run, &flag);
                spend_in_loop(report, run, l, flag.detector);
                first_of(report, run, l);
                record(report, run, l, &flag, at, Outcome::Warned);
                run.last_flagged = Some(l);
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
                    // The run goes on after its stop: every call counts for the loop.
                    report.loops[l].saved.calls += 1;
                    report.loops[l].calls[1] = index;
                    run.batch_loop = Some(l);
                    Timeline::STOPPED
                } else {
                    let flag = Flag::of(detection);
                    let l = loop_for(report, run, &flag);
                    spend_in_loop(report, run, l, flag.detector);
                    first_of(report, run, l);
                    report.loops[l].saved.calls += 1;
                    run.batch_loop = Some(l);
                    run.last_flagged = Some(l);
                    let outcome = if *terminal {
                        Outcome::Stopped
                    } else {
                        Outcome::Blocked
                    };
                    if record(report, run, l, &flag, at, outcome) {
                        run.blocked.push((signature(), l));
                    }
                    if *terminal {
                        run.stopped_by = Some(l);
                    }
                    Timeline::BLOCK
                }
            }
            _ => {
                run.last_flagged = None;
                Timeline::ALLOW
            }
        };
        report.timeline.marks.push(mark);
        self.charge(s, r, add, remove);
    }

    fn result<'a, J: Json<'a>>(&mut self, s: usize, r: usize, pos: Pos, event: &EventRef<'a, J>) {
        let EventRef::Result {
            call_id,
            tool,
            outcome,
            ..
        } = *event
        else {
            return;
        };
        let run = &mut self.sessions[s].runs[r];
        let pending = call_id.and_then(|id| run.pending.remove(id));
        if pending.is_none() && tool.is_none() {
            self.reports[s].orphan_results += 1;
            return;
        }
        let freed = match (call_id, &pending) {
            (Some(id), Some((_, tool))) => PENDING_BYTES + id.len() + tool.len(),
            _ => 0,
        };
        let call_index = pending.as_ref().map(|(index, _)| *index);
        if let Some(at) =
            call_index.and_then(|index| run.awaiting_outcome.iter().position(|&(i, _)| i == index))
        {
            let (_, l) = run.awaiting_outcome.swap_remove(at);
            self.reports[s].loops[l].outcome = outcome_preview(outcome);
        }
        let tool = pending
            .as_ref()
            .map(|(_, tool)| &**tool)
            .or(tool)
            .unwrap_or("");
        let failed = is_failure(tool, outcome);
        let answer = self.replayer.apply(pos.line, event);
        let report = &mut self.reports[s];
        let run = &mut self.sessions[s].runs[r];
        match answer {
            Answer::Result { recorded, .. } => {
                report.outcomes += 1;
                report.failed_outcomes += u64::from(failed);
                // Shadow mode reports the abort it would have made.
                if let Some(abort) = recorded.abort.or(recorded.would_abort) {
                    let index = call_index.unwrap_or(report.calls);
                    let flag = Flag {
                        detector: abort.detector(),
                        level: Level::Critical,
                        count: abort.count,
                        tool: &abort.tool,
                        paired_tool: None,
                        message: &abort.message,
                        signatures: [Some(abort.signature), None],
                    };
                    let l = loop_for(report, run, &flag);
                    let at = At {
                        call: index,
                        message: None,
                        line: pos.line,
                    };
                    record(report, run, l, &flag, at, Outcome::Aborted);
                    if run.stopped_by.is_none() {
                        run.stopped_by = Some(l);
                    }
                    report.timeline.aborts.push(index);
                }
            }
            _ => report.rejected_results += 1,
        }
        self.charge(s, r, 0, freed);
    }

    fn turn(&mut self, s: usize, r: usize, usage: Option<Usage>) {
        let run = &mut self.sessions[s].runs[r];
        run.turn_saved = if run.stopped_by.is_some() {
            // The run was stopped: the model would not have been called again.
            run.stopped_by
        } else if run.batch_calls > 0 && run.batch_blocked == run.batch_calls {
            run.batch_loop
        } else {
            None
        };
        run.batch_calls = 0;
        run.batch_blocked = 0;
        run.batch_loop = None;
        new_response(&self.reports[s], run);
        if let Some(usage) = usage {
            self.usage(s, r, usage);
        }
    }

    /// Hands a response's usage to the guard as a usage event, so that the config's budgets
    /// count it: the transcript's total as input tokens (readers keep no split by kind, so
    /// the price table cannot apply) and its own cost when it records one.
    fn spend(&mut self, pos: Pos, ids: &Ids, usage: Usage) {
        let usage = loopguard::Usage::new(usage.tokens, 0)
            .with_cost(usage.cost.filter(|c| c.is_finite() && *c >= 0.0));
        let event: EventRef<'_, &Value> = EventRef::Usage {
            ids: ids.as_ref(),
            usage,
        };
        // Figures the engine refuses (beyond what one response can use) count nothing.
        self.replayer.apply(pos.line, &event);
    }

    fn usage(&mut self, s: usize, r: usize, usage: Usage) {
        let report = &mut self.reports[s];
        let total = report.usage.get_or_insert(Usage {
            tokens: 0,
            cost: None,
        });
        total.tokens += usage.tokens;
        if let Some(cost) = usage.cost {
            let sum = total.cost.get_or_insert(0.0);
            *sum = add_cost(*sum, cost);
        }
        if let Some(l) = self.sessions[s].runs[r].turn_saved {
            report.saved.add_usage(usage);
            report.loops[l].saved.add_usage(usage);
        }
        if let Some(l) = self.sessions[s].runs[r].text_open {
            *report.loops[l].tokens.get_or_insert(0) += usage.tokens;
        }
        let run = &mut self.sessions[s].runs[r];
        if run.turn_in_loop {
            add_spend(&mut report.loop_spend, usage);
        } else {
            add_spend(&mut run.turn_spend, usage);
        }
    }
}

impl Sink for Scanner {
    fn push_event(&mut self, pos: Pos, event: &EventRef<'_, JsonRef<'_>>) {
        self.event(pos, event);
    }

    fn push(&mut self, pos: Pos, item: Item) {
        if let Item::Event(event) = &item {
            return self.event(pos, &event.as_ref());
        }
        let (s, r) = self.enter(item.ids().as_ref());
        if let (
            true,
            Item::Turn {
                ids,
                usage: Some(usage),
            }
            | Item::Usage { ids, usage },
        ) = (self.budgets, &item)
        {
            self.spend(pos, ids, *usage);
        }
        match item {
            Item::Event(_) => {}
            Item::Turn { usage, .. } => self.turn(s, r, usage),
            Item::Usage { usage, .. } => self.usage(s, r, usage),
            Item::RunLabel { label, .. } => {
                let report = &mut self.reports[s];
                let run = &mut self.sessions[s].runs[r];
                run.label = Some(label.clone());
                for t in &run.loops {
                    let l = t.index;
                    report.loops[l].run = Some(label.clone());
                    for f in report.findings.iter_mut().filter(|f| f.loop_index == l) {
                        f.run = Some(label.clone());
                    }
                }
            }
        }
        self.fit_budget(s);
    }
}

/// A verdict as a scan reports it: what would have fired, in shadow mode or not.
fn seen(verdict: Verdict) -> Verdict {
    match verdict {
        Verdict::Shadow {
            detection,
            terminal,
        } => match detection.level {
            Level::Critical => Verdict::Block {
                detection,
                terminal,
            },
            _ => Verdict::Warn {
                detection,
                notify: false,
            },
        },
        other => other,
    }
}

/// A response begins in `run`: the previous one, unless it was spent inside a loop, waits
/// with the others since the run's last flag; the new one is inside a loop from the start
/// when a loop stopped the run.
fn new_response(report: &SessionReport, run: &mut RunTrack) {
    if let Some(previous) = run.turn_spend.take() {
        add_spend(&mut run.spend_since_flag, previous);
    }
    run.turn_in_loop = run.stopped_by.is_some_and(|l| {
        report.loops[l]
            .stop
            .as_ref()
            .is_some_and(|m| !is_spend_budget(m.detector))
    });
}

/// A call (or message) of loop `l` was flagged by `detector`: the response that made it
/// is spent inside a loop, and when the loop was flagged before (it goes on), so are the
/// responses since the run's last flag. Spend budgets find no loop.
fn spend_in_loop(report: &mut SessionReport, run: &mut RunTrack, l: usize, detector: Detector) {
    if is_spend_budget(detector) {
        return;
    }
    let since = run.spend_since_flag.take();
    if !report.loops[l].detectors.is_empty() {
        if let Some(since) = since {
            add_spend(&mut report.loop_spend, since);
        }
    }
    if let Some(turn) = run.turn_spend.take() {
        add_spend(&mut report.loop_spend, turn);
    }
    run.turn_in_loop = true;
}

/// The loop a flag belongs to, created when new (see [`LoopReport`] for the rule).
fn loop_for(report: &mut SessionReport, run: &mut RunTrack, flag: &Flag<'_>) -> usize {
    let signatures = flag.signatures.iter().flatten();
    let by_pattern = run
        .loops
        .iter()
        .position(|t| signatures.clone().any(|s| t.members.contains(s)));
    let by_contiguity = || {
        run.last_flagged
            .and_then(|l| run.loops.iter().position(|t| t.index == l))
    };
    if let Some(t) = by_pattern.or_else(by_contiguity) {
        let track = &mut run.loops[t];
        for s in signatures {
            if !track.members.contains(s) {
                track.members.push(*s);
            }
        }
        return track.index;
    }
    report.loops.push(LoopReport {
        run: run.display(),
        tool: flag.tool.to_owned(),
        paired_tool: flag.paired_tool.map(str::to_owned),
        tools: Vec::new(),
        args: None,
        outcome: None,
        detectors: Vec::new(),
        calls: [0, 0],
        warned_calls: 0,
        blocked_calls: 0,
        first_warning: None,
        first_block: None,
        escalation: None,
        stop: None,
        repeats_after_block: 0,
        stopped_run: false,
        saved: Savings::default(),
        messages: None,
        text: None,
        tokens: None,
        token_share: None,
    });
    let index = report.loops.len() - 1;
    run.loops.push(LoopTrack {
        members: signatures.copied().collect(),
        index,
    });
    index
}

/// What a call returned, for people: a text result or error as its text (an MCP or
/// OpenClaw result by the text of its content blocks, an error object by its message),
/// anything else as its JSON; cut to a preview.
fn outcome_preview<'a, J: Json<'a>>(outcome: OutcomeOf<J>) -> Option<String> {
    let (value, error) = match outcome {
        OutcomeOf::Result(v) => (v, false),
        OutcomeOf::Error(v) => (v, true),
        OutcomeOf::Nothing => return None,
    };
    let text = value
        .as_str()
        .map(str::to_owned)
        .or_else(|| {
            value
                .get("message")
                .and_then(Json::as_str)
                .map(str::to_owned)
        })
        .or_else(|| {
            let texts: Vec<&str> = value
                .get("content")?
                .as_array()?
                .filter_map(|block| block.get("text").and_then(Json::as_str))
                .collect();
            (!texts.is_empty()).then(|| texts.join("\n"))
        })
        .unwrap_or_else(|| json_text(value));
    let text = cut(&text);
    Some(if error {
        format!("error: {text}")
    } else {
        text
    })
}

/// What a flagged call came to.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Outcome {
    Warned,
    Blocked,
    /// Blocked, and the block ends the run.
    Stopped,
    /// Its result aborted the run (post-compaction guard).
    Aborted,
}

/// Records a flag on loop `l`: its counts, detectors, tools and marks, and a finding
/// when it is the loop's first for this detector and level. Returns whether this was
/// the loop's first block.
fn record(
    report: &mut SessionReport,
    run: &RunTrack,
    l: usize,
    flag: &Flag<'_>,
    at: At,
    outcome: Outcome,
) -> bool {
    let (call_index, line) = (at.call, at.line);
    let on_call = at.message.is_none();
    let mark = flag.mark(at);
    let the_loop = &mut report.loops[l];
    if !the_loop.detectors.contains(&flag.detector) {
        the_loop.detectors.push(flag.detector);
    }
    for tool in [Some(flag.tool), flag.paired_tool].into_iter().flatten() {
        if !the_loop.tools.iter().any(|t| t == tool) {
            the_loop.tools.push(tool.to_owned());
        }
    }
    if the_loop.calls[0] == 0 || call_index < the_loop.calls[0] {
        the_loop.calls[0] = call_index;
    }
    the_loop.calls[1] = the_loop.calls[1].max(call_index);
    let mut first_block = false;
    match outcome {
        Outcome::Warned => {
            the_loop.warned_calls += u64::from(on_call);
            the_loop.first_warning.get_or_insert(mark);
        }
        Outcome::Blocked | Outcome::Stopped => {
            the_loop.blocked_calls += u64::from(on_call);
            match &the_loop.first_block {
                None => {
                    first_block = true;
                    the_loop.first_block = Some(mark.clone());
                }
                Some(first) if the_loop.escalation.is_none() && call_index > first.call_index => {
                    the_loop.escalation = Some(mark.clone());
                }
                Some(_) => {}
            }
            if outcome == Outcome::Stopped {
                the_loop.stopped_run = true;
                the_loop.stop.get_or_insert(mark);
            }
        }
        Outcome::Aborted => {
            the_loop.stopped_run = true;
            the_loop.stop.get_or_insert(mark);
        }
    }
    let seen = report
        .findings
        .iter()
        .any(|f| f.loop_index == l && f.detector == flag.detector && f.level == flag.level);
    if !seen {
        report.findings.push(Finding {
            detector: flag.detector,
            level: flag.level,
            tool: flag.tool.to_owned(),
            paired_tool: flag.paired_tool.map(str::to_owned),
            count: flag.count,
            call_index,
            message_index: at.message,
            line,
            run: run.display(),
            loop_index: l,
            message: flag.message.to_owned(),
        });
    }
    first_block
}

#[cfg(test)]
mod tests;
