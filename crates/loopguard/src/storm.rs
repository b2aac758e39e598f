//! `run_storm`: the runs of one session that end the same way, again and again, without
//! progress (a heartbeat or a cron job failing the same way at every run, a "continue" or
//! auto-resume loop, a restart that repeats the same work).
//!
//! A run's **loop signature** is the set of call signatures a detector warned or blocked in
//! it, and the signature of the call that ended it when that call failed. A run that made
//! progress (a success new to the session's recent runs, or a success of a `mutate` tool:
//! the definition of [`crate::budget`], over runs) has none and ends a storm. The runs of a
//! session form a **row** while each one's signature shares a call with the row's pattern
//! (the pattern narrows to what they share); a run with another signature, or none, starts
//! the row again (with `windowMinutes`, only progress does, and only the row's runs ending
//! within the window count).
//!
//! When the row holds `warningThreshold − 1` runs, the next run is warned at its first call
//! of the pattern; at `criticalThreshold − 1`, that call is blocked at once, without
//! waiting for the run's own detectors; once `stopAfter` runs of the row have ended, every
//! call of every run of the session is blocked, for `cooldownMinutes` or until the session
//! is reset.
//!
//! A run ends, for this account, when another run of the session begins: the session's
//! runs are taken to follow one another, as a heartbeat's or a cron job's do. Runs that
//! overlap are sub-agents better given sessions of their own; an event of a run already
//! ended is judged as always and changes nothing here.
//!
//! Everything lives in the session's [`SessionState`](crate::SessionState), which every
//! store keeps beside the session's runs and updates with them in one atomic step: the
//! storm history survives a restart and is shared by replicas, as the session budgets are.

use serde::{Deserialize, Serialize};

use crate::clock::Millis;

/// A call signature ([`crate::fingerprint::Signature`]'s value).
type Signature = u128;

/// Effective `runStorm` settings (`loopguard.detectors.runStorm`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct RunStorm {
    /// The run, in a row of runs ending the same way, warned at its first call of the
    /// pattern.
    pub warning: u32,
    /// The run blocked at its first call of the pattern (above `warning`).
    pub critical: u32,
    /// Runs ending the same way after which every run of the session is stopped.
    pub stop_after: u32,
    /// Only runs ending within this many milliseconds count (`None`: runs in a row).
    pub window_ms: Option<u64>,
    /// Milliseconds a stopped session stays stopped (`None`: until it is reset).
    pub cooldown_ms: Option<u64>,
}

/// Call signatures a run's loop signature (and a row's pattern) keeps.
pub const STORM_PRINTS: usize = 8;
/// Ended runs whose ids a session remembers (their late events change nothing).
pub const STORM_RUNS_KEPT: usize = 16;
/// Ends of a row's runs a session keeps (for `windowMinutes`).
pub const STORM_ENDS_KEPT: usize = 64;
/// Successful (tool, arguments, outcome) triples a session remembers across its runs to
/// tell progress.
pub const STORM_SUCCESSES_KEPT: usize = 64;

/// What a session keeps for `run_storm`.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) struct Storm {
    /// The run going on.
    open: Option<OpenRun>,
    /// The row's pattern: the calls its runs share, sorted.
    pattern: Vec<Signature>,
    /// When each run of the row ended, oldest first.
    ends: Vec<Millis>,
    /// Ids (hashes) of the runs that ended, newest last.
    ended: Vec<u64>,
    /// Successful triples of the session's recent runs, oldest first.
    successes: Vec<u64>,
    /// The session's stop, when the storm stopped it.
    stop: Option<StormStop>,
}

/// The run going on.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
struct OpenRun {
    /// Its id's hash.
    run: u64,
    /// Calls a detector warned or blocked in it, sorted.
    prints: Vec<Signature>,
    /// Its newest call, when that failed.
    failed: Option<Signature>,
    /// Whether it made progress.
    progress: bool,
}

/// A session stopped by `run_storm`.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct StormStop {
    /// Runs of the row when it stopped.
    pub runs: u32,
    /// When the stop ends (`None`: when the session is reset).
    pub until: Option<Millis>,
}

/// What `run_storm` says of a call.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum StormCall {
    /// Nothing.
    Quiet,
    /// A call of the pattern: warn, after this many runs.
    Warn(u32),
    /// A call of the pattern: block, after this many runs.
    Block(u32),
    /// The session is stopped: block every call (runs of the row, minutes left).
    Stopped(u32, Option<u64>),
}

fn insert_sorted(set: &mut Vec<Signature>, s: Signature) -> bool {
    match set.binary_search(&s) {
        Ok(_) => false,
        Err(_) if set.len() >= STORM_PRINTS => false,
        Err(i) => {
            set.insert(i, s);
            true
        }
    }
}

fn push_bounded<T>(v: &mut Vec<T>, x: T, bound: usize) {
    if v.len() >= bound {
        v.remove(0);
    }
    v.push(x);
}

impl Storm {
    /// Nothing kept.
    pub(crate) const EMPTY: Self = Self {
        open: None,
        pattern: Vec::new(),
        ends: Vec::new(),
        ended: Vec::new(),
        successes: Vec::new(),
        stop: None,
    };

    /// Runs in the row (the runs that ended the same way, the newest last).
    pub(crate) fn row(&self) -> u32 {
        u32::try_from(self.ends.len()).unwrap_or(u32::MAX)
    }

    /// Whether `run` is the run going on.
    pub(crate) fn is_open(&self, run: u64) -> bool {
        self.open.as_ref().is_some_and(|o| o.run == run)
    }

    /// The session's stop, when one holds at `now`.
    pub(crate) fn stop(&self) -> Option<&StormStop> {
        self.stop.as_ref()
    }

    /// Runs in the row at `now`.
    fn runs(&self, cfg: &RunStorm, now: Millis) -> u32 {
        let live = match cfg.window_ms {
            Some(w) => {
                let from = now.get().saturating_sub(w);
                self.ends.iter().filter(|e| e.get() >= from).count()
            }
            None => self.ends.len(),
        };
        u32::try_from(live).unwrap_or(u32::MAX)
    }

    /// An event of run `run` at `now`: a run not seen before ends the one going on. Returns
    /// whether the run is going on (`false`: it already ended; its event changes nothing
    /// here). Sets `changed` when anything changed.
    pub(crate) fn enter(
        &mut self,
        cfg: &RunStorm,
        run: u64,
        now: Millis,
        changed: &mut bool,
    ) -> bool {
        if self.open.as_ref().is_some_and(|o| o.run == run) {
            return true;
        }
        if self.ended.contains(&run) {
            return false;
        }
        *changed = true;
        if let Some(open) = self.open.take() {
            self.close(cfg, open, now);
        }
        self.open = Some(OpenRun {
            run,
            ..OpenRun::default()
        });
        true
    }

    /// Ends `run`: its loop signature joins the row, starts a new one, or (progress) ends
    /// the row; a row of `stopAfter` runs stops the session.
    fn close(&mut self, cfg: &RunStorm, mut run: OpenRun, now: Millis) {
        push_bounded(&mut self.ended, run.run, STORM_RUNS_KEPT);
        if let Some(f) = run.failed {
            insert_sorted(&mut run.prints, f);
        }
        if run.progress {
            self.pattern.clear();
            self.ends.clear();
            return;
        }
        if let Some(w) = cfg.window_ms {
            let from = now.get().saturating_sub(w);
            self.ends.retain(|e| e.get() >= from);
        }
        if run.prints.is_empty() {
            // A run that ended otherwise: a row in a row ends here, a row in a window
            // goes on.
            if cfg.window_ms.is_none() {
                self.pattern.clear();
                self.ends.clear();
            }
            return;
        }
        let shared: Vec<Signature> = run
            .prints
            .iter()
            .copied()
            .filter(|s| self.pattern.binary_search(s).is_ok())
            .collect();
        if !shared.is_empty() && !self.ends.is_empty() {
            self.pattern = shared;
        } else if cfg.window_ms.is_some() && !self.ends.is_empty() {
            // Another ending inside a window: the row goes on without it.
            return;
        } else {
            self.pattern = run.prints;
            self.ends.clear();
        }
        push_bounded(&mut self.ends, now, STORM_ENDS_KEPT);
        let runs = self.runs(cfg, now);
        if runs >= cfg.stop_after {
            self.stop = Some(StormStop {
                runs,
                until: cfg
                    .cooldown_ms
                    .map(|c| Millis::new(now.get().saturating_add(c))),
            });
        }
    }

    /// Judges the call `call` of the run going on at `now`.
    pub(crate) fn judge(
        &mut self,
        cfg: &RunStorm,
        call: Signature,
        now: Millis,
        changed: &mut bool,
    ) -> StormCall {
        if let Some(stop) = &self.stop {
            match stop.until {
                Some(until) if now >= until => {
                    self.stop = None;
                    *changed = true;
                }
                until => {
                    let left = until.map(|u| (u.get() - now.get()).div_ceil(60_000));
                    return StormCall::Stopped(stop.runs, left);
                }
            }
        }
        if self.pattern.binary_search(&call).is_err() {
            return StormCall::Quiet;
        }
        let runs = self.runs(cfg, now);
        let this_run = runs.saturating_add(1);
        if this_run >= cfg.critical {
            StormCall::Block(runs)
        } else if this_run >= cfg.warning {
            StormCall::Warn(runs)
        } else {
            StormCall::Quiet
        }
    }

    /// A detector warned or blocked the call `call` of the run going on.
    pub(crate) fn found(&mut self, call: Signature, changed: &mut bool) {
        if let Some(open) = &mut self.open {
            *changed |= insert_sorted(&mut open.prints, call);
        }
    }

    /// The call `call` of the run going on ended: failed, or succeeded with the triple
    /// `triple` (progress when the session's recent runs did not see it, or when `mutate`).
    pub(crate) fn outcome(
        &mut self,
        call: Signature,
        success: Option<(u64, bool)>,
        changed: &mut bool,
    ) {
        let Some(open) = &mut self.open else { return };
        match success {
            None => {
                if open.failed != Some(call) {
                    open.failed = Some(call);
                    *changed = true;
                }
            }
            Some((triple, mutate)) => {
                if open.failed.take().is_some() {
                    *changed = true;
                }
                let new = !self.successes.contains(&triple);
                if new {
                    push_bounded(&mut self.successes, triple, STORM_SUCCESSES_KEPT);
                    *changed = true;
                }
                if (new || mutate) && !open.progress {
                    open.progress = true;
                    *changed = true;
                }
            }
        }
    }

    /// Approximate heap bytes.
    pub(crate) fn heap_bytes(&self) -> usize {
        let open = self.open.as_ref().map_or(0, |o| {
            o.prints.capacity() * 16 + std::mem::size_of::<OpenRun>()
        });
        open + self.pattern.capacity() * 16
            + self.ends.capacity() * 8
            + self.ended.capacity() * 8
            + self.successes.capacity() * 8
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cfg(window: Option<u64>, cooldown: Option<u64>) -> RunStorm {
        RunStorm {
            warning: 2,
            critical: 3,
            stop_after: 3,
            window_ms: window,
            cooldown_ms: cooldown,
        }
    }

    fn sig(n: u128) -> Signature {
        n
    }

    /// One run that fails on `s` (after a success seen before, `seen`) at `t`.
    fn warm_up(st: &mut Storm, c: &RunStorm) {
        // A first run whose success is new: progress, and the success is seen from then on.
        assert_eq!(failing_run(st, c, 100, 5, 0), StormCall::Quiet);
    }

    fn failing_run(st: &mut Storm, c: &RunStorm, run: u64, s: u128, t: u64) -> StormCall {
        let mut ch = false;
        assert!(st.enter(c, run, Millis::new(t), &mut ch));
        st.outcome(sig(99), Some((7, false)), &mut ch);
        let said = st.judge(c, sig(s), Millis::new(t), &mut ch);
        st.outcome(sig(s), None, &mut ch);
        said
    }

    #[test]
    fn warn_then_block_then_stop_until_the_cooldown_ends() {
        let c = cfg(None, Some(60_000));
        let mut st = Storm::default();
        warm_up(&mut st, &c);
        assert_eq!(failing_run(&mut st, &c, 1, 5, 0), StormCall::Quiet);
        assert_eq!(failing_run(&mut st, &c, 2, 5, 10), StormCall::Warn(1));
        assert_eq!(failing_run(&mut st, &c, 3, 5, 20), StormCall::Block(2));
        // Run 4 begins: three runs ended the same way, the session stops.
        let mut ch = false;
        st.enter(&c, 4, Millis::new(30), &mut ch);
        assert_eq!(
            st.judge(&c, sig(1), Millis::new(30), &mut ch),
            StormCall::Stopped(3, Some(1))
        );
        assert_eq!(
            st.judge(&c, sig(1), Millis::new(60_030), &mut ch),
            StormCall::Quiet
        );
        assert_eq!(
            st.judge(&c, sig(5), Millis::new(60_030), &mut ch),
            StormCall::Block(3)
        );
        // A late event of an ended run changes nothing.
        assert!(!st.enter(&c, 2, Millis::new(60_040), &mut ch));
    }

    #[test]
    fn progress_and_another_ending_break_the_row() {
        let c = cfg(None, None);
        let mut st = Storm::default();
        warm_up(&mut st, &c);
        failing_run(&mut st, &c, 1, 5, 0);
        failing_run(&mut st, &c, 2, 5, 1);
        // Run 3 reads something new: progress.
        let mut ch = false;
        st.enter(&c, 3, Millis::new(2), &mut ch);
        st.outcome(sig(8), Some((1234, false)), &mut ch);
        assert_eq!(
            failing_run(&mut st, &c, 4, 5, 3),
            StormCall::Quiet,
            "the row began again"
        );
        assert_eq!(
            failing_run(&mut st, &c, 5, 6, 4),
            StormCall::Quiet,
            "another ending"
        );
        assert_eq!(failing_run(&mut st, &c, 6, 5, 5), StormCall::Quiet);
        assert_eq!(failing_run(&mut st, &c, 7, 5, 6), StormCall::Warn(1));
    }

    #[test]
    fn a_window_counts_runs_with_others_between() {
        let c = cfg(Some(100), None);
        let mut st = Storm::default();
        warm_up(&mut st, &c);
        failing_run(&mut st, &c, 1, 5, 0);
        failing_run(&mut st, &c, 2, 6, 10);
        assert_eq!(failing_run(&mut st, &c, 3, 5, 20), StormCall::Warn(1));
        // Run 1's end (when run 2 began) is out of the window: only run 3 counts.
        assert_eq!(failing_run(&mut st, &c, 4, 5, 500), StormCall::Warn(1));
    }

    #[test]
    fn a_run_blocked_on_the_pattern_that_then_fails_otherwise_continues_the_row() {
        let c = cfg(None, None);
        let mut st = Storm::default();
        warm_up(&mut st, &c);
        failing_run(&mut st, &c, 1, 5, 0);
        failing_run(&mut st, &c, 2, 5, 1);
        let mut ch = false;
        st.enter(&c, 3, Millis::new(2), &mut ch);
        assert_eq!(
            st.judge(&c, sig(5), Millis::new(2), &mut ch),
            StormCall::Block(2)
        );
        st.found(sig(5), &mut ch);
        st.outcome(sig(6), None, &mut ch);
        st.enter(&c, 4, Millis::new(3), &mut ch);
        assert_eq!(st.stop().map(|s| s.runs), Some(3));
        assert_eq!(
            st.judge(&c, sig(1), Millis::new(3), &mut ch),
            StormCall::Stopped(3, None)
        );
    }
}
