//! The scanner: items applied to a guard in shadow mode, and the session reports built
//! from its answers.

use std::collections::HashMap;

use loopguard::fingerprint::args_fingerprint;
use loopguard::{ConfigSet, Detection, Detector, Level, Signature, Verdict};
use loopguard_events::{Answer, Event, Ids, Replayer};

use super::report::{add_cost, Finding, LoopReport, Mark, Savings, SessionReport, Timeline};
use crate::item::{Item, Pos, Sink, Usage};

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

#[cfg(test)]
mod tests;
