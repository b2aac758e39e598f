//! [`Guard`]: the engine with its state in memory, the API a host runtime calls around each
//! tool call.

use serde_json::Value;

use crate::clock::{Clock, Millis, SystemClock};
use crate::config::ConfigSet;
use crate::fingerprint::{CallPrint, OutcomeOf};
use crate::json::Json;
use crate::observe;
use crate::run::{ResultError, RunState};
use crate::scope::Scope;
use crate::table::{Limits, SessionTable, WhenFull};
use crate::verdict::{Recorded, Verdict};

/// A tool call as the host sees it: its arguments as a `serde_json::Value`, or in any
/// other [`Json`] view ([`Call::with_args`]; raw JSON text is [`crate::json::Raw`]).
#[derive(Clone, Copy, Debug)]
pub struct Call<'a, J = &'a Value> {
    /// The tool name (trimmed before use).
    pub tool: &'a str,
    /// The JSON arguments.
    pub args: J,
    /// The provider's call id, if any (matches the outcome to its call).
    pub call_id: Option<&'a str>,
    /// The batch of parallel calls (one assistant message) this call belongs to, if known.
    pub batch: Option<&'a str>,
}

impl<'a> Call<'a> {
    /// A call of `tool` with `args` and no call id.
    pub fn new(tool: &'a str, args: &'a Value) -> Self {
        Self::with_args(tool, args)
    }
}

impl<'a, J> Call<'a, J> {
    /// A call of `tool` with arguments in any [`Json`] view, and no call id.
    pub fn with_args(tool: &'a str, args: J) -> Self {
        Self {
            tool,
            args,
            call_id: None,
            batch: None,
        }
    }

    /// The same call with a provider call id (a blank id counts as none).
    pub fn with_id(mut self, call_id: Option<&'a str>) -> Self {
        self.call_id = call_id.and_then(crate::text::non_blank);
        self
    }

    /// The same call as part of batch `batch` (the parallel calls of one assistant
    /// message share a batch id; a blank id counts as none).
    pub fn with_batch(mut self, batch: Option<&'a str>) -> Self {
        self.batch = batch.and_then(crate::text::non_blank);
        self
    }
}

/// A call fingerprinted once ([`Guard::prepare`]): a host that keeps it between
/// [`Guard::before_prepared`] and [`Guard::after_prepared`] hashes the arguments once
/// instead of twice.
#[derive(Clone, Copy, Debug)]
pub struct PreparedCall<'a> {
    print: CallPrint<'a>,
    call_id: Option<&'a str>,
    batch: Option<&'a str>,
}

impl<'a> PreparedCall<'a> {
    /// The call's fingerprints.
    pub fn print(&self) -> &CallPrint<'a> {
        &self.print
    }
}

/// The loop guard with its state in memory.
///
/// Call [`Guard::before_call`] before each tool call and do not run a blocked call;
/// call [`Guard::after_call`] with what the call returned; call [`Guard::on_compaction`]
/// after compacting an overflowing context and retrying. See the crate docs for a host loop.
#[derive(Debug)]
pub struct Guard<C: Clock = SystemClock> {
    config: ConfigSet,
    /// The runs, each boxed (a state is large, most sessions hold one run); a full table
    /// forgets its least recently active session.
    runs: SessionTable<Box<RunState>>,
    limits: Limits,
    clock: C,
    last_sweep: Millis,
    /// Counts events: the activity stamp of least-recently-used eviction.
    tick: u64,
}

impl Guard<SystemClock> {
    /// A guard with `config`, default limits and the system clock.
    pub fn new(config: ConfigSet) -> Self {
        Self::with_clock(config, Limits::default(), SystemClock)
    }
}

impl<C: Clock> Guard<C> {
    /// A guard with explicit limits and clock.
    pub fn with_clock(config: ConfigSet, limits: Limits, clock: C) -> Self {
        let last_sweep = clock.now_ms();
        Self {
            config,
            runs: SessionTable::new(&limits, WhenFull::EvictLeastRecent),
            limits,
            clock,
            last_sweep,
            tick: 0,
        }
    }

    /// The config in force.
    pub fn config(&self) -> &ConfigSet {
        &self.config
    }

    /// Replaces the config; state is kept.
    pub fn set_config(&mut self, config: ConfigSet) {
        self.config = config;
    }

    /// The verdict on a call about to run. A blocked call must not run: give the model
    /// [`Verdict::blocked_result`] instead.
    pub fn before_call<'a, J: Json<'a>>(
        &mut self,
        scope: &Scope<'_>,
        call: &Call<'a, J>,
    ) -> Verdict {
        let call = self.prepare(scope, call);
        self.before_prepared(scope, &call)
    }

    /// Fingerprints a call under the config of the scope's agent, once, for
    /// [`Guard::before_prepared`] and [`Guard::after_prepared`].
    pub fn prepare<'a, J: Json<'a>>(
        &self,
        scope: &Scope<'_>,
        call: &Call<'a, J>,
    ) -> PreparedCall<'a> {
        PreparedCall {
            print: CallPrint::for_config(
                call.tool,
                call.args,
                self.config.for_agent(scope.agent()),
            ),
            call_id: call.call_id,
            batch: call.batch,
        }
    }

    /// [`Guard::before_call`] for a call from [`Guard::prepare`].
    pub fn before_prepared(&mut self, scope: &Scope<'_>, call: &PreparedCall<'_>) -> Verdict {
        let (cfg, run, now) = self.enter(scope);
        let verdict = run.before_call(cfg, &call.print, call.call_id, call.batch, now);
        observe::verdict(scope, call.print.tool, &verdict);
        verdict
    }

    /// Records what a call returned (also for warned calls; results of blocked calls are
    /// ignored). Reports an abort when the post-compaction guard stops the run.
    pub fn after_call<'a, 'o, J: Json<'a>, O: Json<'o>>(
        &mut self,
        scope: &Scope<'_>,
        call: &Call<'a, J>,
        outcome: OutcomeOf<O>,
    ) -> Recorded {
        let call = self.prepare(scope, call);
        self.after_prepared(scope, &call, outcome)
    }

    /// [`Guard::after_call`] for a call from [`Guard::prepare`].
    pub fn after_prepared<'o, O: Json<'o>>(
        &mut self,
        scope: &Scope<'_>,
        call: &PreparedCall<'_>,
        outcome: OutcomeOf<O>,
    ) -> Recorded {
        let (cfg, run, now) = self.enter(scope);
        let recorded = run.after_call(cfg, &call.print, call.call_id, outcome, now);
        observe::recorded(scope, &recorded);
        recorded
    }

    /// Records what the call with id `call_id` returned, when the host no longer has the
    /// call's tool and arguments at hand.
    pub fn after_call_by_id<'o, O: Json<'o>>(
        &mut self,
        scope: &Scope<'_>,
        call_id: &str,
        outcome: OutcomeOf<O>,
    ) -> Result<Recorded, ResultError> {
        if self.run_state(scope).is_none() {
            return Err(ResultError::UnknownCall);
        }
        let (cfg, run, now) = self.enter(scope);
        let recorded = run.after_call_by_id(cfg, call_id, outcome, now)?;
        observe::recorded(scope, &recorded);
        Ok(recorded)
    }

    /// A compaction retry happened in this run: arms the post-compaction guard. Returns
    /// the number of attempts it watches, or 0 when the guard is disabled.
    pub fn on_compaction(&mut self, scope: &Scope<'_>) -> u32 {
        let (cfg, run, now) = self.enter(scope);
        let window = run.compaction(cfg, now);
        observe::armed(scope, window);
        window
    }

    /// Forgets a run (its prompt-to-answer cycle is over). Returns whether it existed.
    pub fn end_run(&mut self, scope: &Scope<'_>) -> bool {
        self.runs
            .remove_run(scope.session(), scope.run().unwrap_or(""))
            .is_some()
    }

    /// Forgets a session and all its runs. Returns whether it existed.
    pub fn end_session(&mut self, session: &str) -> bool {
        self.runs
            .remove_session(Scope::new(session).session())
            .is_some()
    }

    /// The state of a run, if it exists.
    pub fn run_state(&self, scope: &Scope<'_>) -> Option<&RunState> {
        self.runs
            .get(scope.session(), scope.run().unwrap_or(""))
            .map(|state| &**state)
    }

    /// Every live run: session id, run id, state.
    pub fn runs(&self) -> impl Iterator<Item = (&str, Option<&str>, &RunState)> {
        self.runs
            .iter()
            .map(|(session, run, state)| (session, (!run.is_empty()).then_some(run), &**state))
    }

    /// Puts a run's state in place (a durable store restoring what it saved).
    pub fn insert_run(&mut self, scope: &Scope<'_>, state: RunState) {
        let (_, run, _) = self.enter(scope);
        *run = state;
    }

    /// The clock.
    pub fn clock(&self) -> &C {
        &self.clock
    }

    /// Live sessions.
    pub fn session_count(&self) -> usize {
        self.runs.session_count()
    }

    /// Live runs across all sessions.
    pub fn run_count(&self) -> usize {
        self.runs.run_count()
    }

    /// Forgets sessions idle longer than the limit; returns how many.
    pub fn evict_idle(&mut self) -> usize {
        let now = self.clock.now_ms();
        self.last_sweep = now;
        let cutoff = self.limits.cutoff(now);
        self.runs
            .retain_sessions(|last_active| last_active >= cutoff)
    }

    /// Runs `f` with the config for the scope's agent, the run's state (created if needed)
    /// and the clock's time: what a host needs to apply an event to the run with
    /// [`RunState`]'s methods, as a durable store does, while the guard keeps the run.
    /// `RunState` logs nothing; the [`observe`](crate::observe) functions log its answers
    /// as the guard's own methods do.
    ///
    /// ```
    /// use loopguard::{observe, CallPrint, ConfigSet, Guard, Scope};
    /// use serde_json::json;
    ///
    /// let mut guard = Guard::new(ConfigSet::parse("{ tools: { loopDetection: { enabled: true } } }")?);
    /// let scope = Scope::new("s").with_run(Some("r"));
    /// let args = json!({ "path": "a" });
    /// let verdict = guard.with_run(&scope, |cfg, run, now| {
    ///     let print = CallPrint::for_config("read", &args, cfg);
    ///     let verdict = run.before_call(cfg, &print, Some("c1"), None, now);
    ///     observe::verdict(&scope, print.tool, &verdict);
    ///     verdict
    /// });
    /// assert!(!verdict.is_blocked());
    /// # Ok::<(), loopguard::ConfigError>(())
    /// ```
    pub fn with_run<R>(
        &mut self,
        scope: &Scope<'_>,
        f: impl FnOnce(&crate::config::EffectiveConfig, &mut RunState, Millis) -> R,
    ) -> R {
        let (cfg, run, now) = self.enter(scope);
        f(cfg, run, now)
    }

    /// The config for the scope's agent, the run's state (created if needed) and the time.
    fn enter(
        &mut self,
        scope: &Scope<'_>,
    ) -> (&crate::config::EffectiveConfig, &mut RunState, Millis) {
        let now = self.clock.now_ms();
        let sweep_every = (self.limits.ttl_ms() / 8).max(1000);
        if now.get().saturating_sub(self.last_sweep.get()) >= sweep_every {
            self.evict_idle();
        }
        // A full table forgets its least recently active session: idle ones go first.
        if self.runs.is_full_for(scope.session()) {
            self.evict_idle();
        }
        self.tick += 1;
        let run = self
            .runs
            .touch(
                scope.session(),
                scope.run().unwrap_or(""),
                self.tick,
                now,
                Box::default,
            )
            .expect("a table that evicts never refuses")
            .value;
        (self.config.for_agent(scope.agent()), &mut **run, now)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::clock::ManualClock;
    use serde_json::json;
    use std::time::Duration;

    fn guard(limits: Limits) -> (Guard<ManualClock>, ManualClock) {
        let clock = ManualClock::new(Millis::new(1_000_000));
        let config = ConfigSet::enabled_defaults();
        (Guard::with_clock(config, limits, clock.clone()), clock)
    }

    #[test]
    fn idle_sessions_expire_with_the_injected_clock() {
        let limits = Limits {
            idle_ttl: Duration::from_secs(60),
            ..Limits::default()
        };
        let (mut g, clock) = guard(limits);
        let args = json!({});
        let _ = g.before_call(&Scope::new("a"), &Call::new("read", &args));
        clock.advance(Duration::from_secs(30));
        let _ = g.before_call(&Scope::new("b"), &Call::new("read", &args));
        assert_eq!(g.session_count(), 2);
        clock.advance(Duration::from_secs(31));
        assert_eq!(g.evict_idle(), 1);
        assert!(g.run_state(&Scope::new("a")).is_none());
        assert!(g.run_state(&Scope::new("b")).is_some());
    }

    #[test]
    fn sessions_and_runs_are_bounded() {
        let limits = Limits {
            max_sessions: 3,
            max_runs_per_session: 2,
            ..Limits::default()
        };
        let (mut g, clock) = guard(limits);
        let args = json!({});
        for s in ["a", "b", "c", "d"] {
            clock.advance(Duration::from_millis(10));
            let _ = g.before_call(&Scope::new(s), &Call::new("read", &args));
        }
        assert_eq!(g.session_count(), 3);
        assert!(
            g.run_state(&Scope::new("a")).is_none(),
            "oldest session evicted"
        );
        for r in ["r1", "r2", "r3"] {
            clock.advance(Duration::from_millis(10));
            let _ = g.before_call(
                &Scope::new("d").with_run(Some(r)),
                &Call::new("read", &args),
            );
        }
        assert_eq!(g.run_count(), 2 + 2);
        assert!(g.run_state(&Scope::new("d").with_run(Some("r3"))).is_some());
    }

    #[test]
    fn end_run_and_session() {
        let (mut g, _) = guard(Limits::default());
        let args = json!({});
        let s = Scope::new("s").with_run(Some("r"));
        let _ = g.before_call(&s, &Call::new("read", &args));
        assert!(g.end_run(&s));
        assert!(!g.end_run(&s));
        let _ = g.before_call(&s, &Call::new("read", &args));
        assert!(g.end_session("s"));
        assert_eq!(g.session_count(), 0);
    }

    #[test]
    fn cutoff_saturates() {
        let limits = Limits {
            idle_ttl: Duration::from_secs(10),
            ..Limits::default()
        };
        assert_eq!(limits.cutoff(Millis::new(5_000)), Millis::ZERO);
        assert_eq!(limits.cutoff(Millis::new(15_000)), Millis::new(5_000));
    }
}
