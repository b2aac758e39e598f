//! [`Guard`]: the engine with its state in memory, the API a host runtime calls around each
//! tool call.

use crate::budget::{Counted, SessionState, Usage, UsageError};
use crate::clock::{Clock, Millis, SystemClock};
use crate::config::ConfigSet;
use crate::fingerprint::OutcomeOf;
use crate::json::Json;
use crate::message::Message;
use crate::run::RunState;
use crate::scope::Scope;
use crate::table::{Limits, SessionTable, WhenFull};
use crate::ticket::{Call, Called, Ticket};
use crate::verdict::{Recorded, Verdict};

/// The loop guard with its state in memory.
///
/// For each tool call, [`Guard::begin`] hands out a [`Ticket`] with the verdict: do not run
/// a blocked call; run any other and give the ticket back to [`Guard::finish`] with what
/// the call returned. [`Guard::call`] does both around a closure that runs the tool. Call
/// [`Guard::on_compaction`] after compacting an overflowing context and retrying. See the
/// crate docs for a host loop.
#[derive(Debug)]
pub struct Guard<C: Clock = SystemClock> {
    config: ConfigSet,
    /// The runs, each boxed (a state is large, most sessions hold one run), and each
    /// session's own state; a full table forgets its least recently active session.
    runs: SessionTable<Box<RunState>, SessionState>,
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

    /// Judges a call about to run: the [`Ticket`] says whether it may run
    /// ([`Ticket::is_blocked`]; a blocked call gets [`Ticket::blocked_result`] instead)
    /// and is given back to [`Guard::finish`] with the call's outcome.
    pub fn begin<'a, J: Json<'a>>(&mut self, scope: &Scope<'_>, call: &Call<'a, J>) -> Ticket {
        self.link_call(scope, call);
        let (cfg, run, session, now) = self.enter(scope);
        let ticket = run.begin(session, cfg, scope, call, now);
        if ticket.is_blocked() {
            self.child_blocked(scope, ticket.signature());
        }
        ticket
    }

    /// [`Guard::link_child`] for `call`, when `scope` names a parent (the call is
    /// fingerprinted for it only at the sub-agent's first call).
    pub fn link_call<'a, J: Json<'a>>(&mut self, scope: &Scope<'_>, call: &Call<'a, J>) {
        if scope.parent_session().is_none() {
            return;
        }
        let cfg = self.config.for_agent(scope.agent());
        let Some(tree) = cfg.agent_tree() else {
            return;
        };
        let now = self.clock.now_ms();
        let mut states = TableStates {
            runs: &mut self.runs,
            tick: &mut self.tick,
            now,
        };
        let print = || crate::fingerprint::CallPrint::for_config(call.tool, call.args, cfg);
        // A session the table cannot open (at its bound, refusing) is left alone.
        let _ = crate::tree::link_child(&mut states, &tree, scope, || print().signature, now);
    }

    /// `agent_tree`, before the call of `scope` whose print is `signature` is judged: a
    /// sub-agent's session (one naming a parent) is linked into its tree at its first
    /// call, the root's record judging the spawn (see [`crate::tree`]). Nothing happens for
    /// other sessions, linked ones, or without the detector. Front ends that judge events
    /// through [`Guard::with_run`] call it first, and [`Guard::child_blocked`] after.
    pub fn link_child(&mut self, scope: &Scope<'_>, signature: crate::Signature) {
        let Some(tree) = self.config.for_agent(scope.agent()).agent_tree() else {
            return;
        };
        let now = self.clock.now_ms();
        // A session the table cannot open (at its bound, refusing) is left alone.
        let _ = crate::tree::link_child(&mut self.states(now), &tree, scope, || signature, now);
    }

    /// `agent_tree`, after a call of `scope` was blocked: a sub-agent failed, and its
    /// root's record is told once, with the print of the call blocked.
    pub fn child_blocked(&mut self, scope: &Scope<'_>, signature: crate::Signature) {
        let now = self.clock.now_ms();
        let _ = crate::tree::child_blocked(&mut self.states(now), scope, signature, now);
    }

    /// The guard's sessions' states at `now`, for the agent tree's steps.
    fn states(&mut self, now: Millis) -> TableStates<'_, Box<RunState>> {
        TableStates {
            runs: &mut self.runs,
            tick: &mut self.tick,
            now,
        }
    }

    /// Records what the call of `ticket` returned (also for warned calls; the outcome of a
    /// blocked call is ignored). [`Recorded::ends_run`] says when the post-compaction guard
    /// stopped the run. (A ticket resumed by id from a run's state that cannot take this
    /// outcome, see [`RunState::finish`], records nothing.)
    pub fn finish<'o, O: Json<'o>>(&mut self, ticket: Ticket, outcome: OutcomeOf<O>) -> Recorded {
        let (cfg, run, session, now) = self.enter(&ticket.scope());
        run.finish(session, cfg, ticket, outcome, now)
            .unwrap_or_default()
    }

    /// Counts what a model response of the run used ([`RunState::usage`]): [`Counted`]
    /// says what it cost and which budget, if any, it used up (the run's next call is then
    /// blocked). A usage with an id already counted is answered again and counts nothing.
    ///
    /// ```
    /// use loopguard::{ConfigSet, Guard, Scope, Usage};
    ///
    /// let config = ConfigSet::parse("{ loopguard: { budgets: { run: { cost: 0.01 } } } }")?;
    /// let mut guard = Guard::new(config);
    /// let scope = Scope::new("s").with_run(Some("r"));
    /// let usage = Usage::new(2_000, 500).with_model(Some("gpt-4o")).with_id(Some("resp-1"));
    /// let counted = guard.record_usage(&scope, &usage).unwrap();
    /// assert_eq!(counted.cost.unwrap().to_string(), "$0.01"); // 2000 × $2.50/M + 500 × $10/M
    /// assert!(counted.stop.is_some(), "the run's cost budget is used up");
    /// # Ok::<(), loopguard::ConfigError>(())
    /// ```
    pub fn record_usage(
        &mut self,
        scope: &Scope<'_>,
        usage: &Usage<'_>,
    ) -> Result<Counted, UsageError> {
        let (cfg, run, session, now) = self.enter(scope);
        run.usage(session, cfg, scope, usage, now)
    }

    /// Runs a tool call under the guard, tower-style: judges the call, runs `tool` unless
    /// the call is blocked, and records what it returned (`Ok` as the result, `Err` as the
    /// error, both JSON values of one type, such as `serde_json::Value`). The outcome cannot be forgotten; [`Called`] holds the tool's output with the
    /// blocked result, the warning note and the end of the run to act on.
    ///
    /// ```
    /// use loopguard::{Call, Called, ConfigSet, Guard, Scope};
    /// use serde_json::{json, Value};
    ///
    /// let mut guard = Guard::new(ConfigSet::enabled_defaults());
    /// let scope = Scope::new("s").with_run(Some("r"));
    /// let args = json!({ "path": "/tmp/a" });
    /// let called = guard.call(&scope, &Call::new("read", &args), || {
    ///     Ok::<Value, Value>(json!("contents"))
    /// });
    /// assert!(matches!(called, Called::Ran { output: Ok(_), .. }));
    /// assert_eq!(called.ends_run(), None);
    /// ```
    pub fn call<'a, J: Json<'a>, T>(
        &mut self,
        scope: &Scope<'_>,
        call: &Call<'a, J>,
        tool: impl FnOnce() -> Result<T, T>,
    ) -> Called<T>
    where
        for<'v> &'v T: Json<'v>,
    {
        let ticket = self.begin(scope, call);
        if ticket.is_blocked() {
            return Called::Blocked {
                verdict: ticket.into_verdict(),
            };
        }
        let verdict = ticket.verdict().clone();
        let output = tool();
        let outcome = match &output {
            Ok(result) => OutcomeOf::Result(result),
            Err(error) => OutcomeOf::Error(error),
        };
        let recorded = self.finish(ticket, outcome);
        Called::Ran {
            output,
            verdict,
            recorded,
        }
    }

    /// Judges a message of the run (the model's answer, a piece of its stream, the
    /// harness's feedback): see [`Message`] for what a blocked message means. Only the
    /// detectors of messages the `loopguard` block turns on run; without them every
    /// message is allowed (unless the run was stopped).
    ///
    /// ```
    /// use loopguard::{ConfigSet, Guard, Message, Scope};
    ///
    /// let config = ConfigSet::parse("{ loopguard: { detectors: { noToolTurns: {} } } }")?;
    /// let mut guard = Guard::new(config);
    /// let scope = Scope::new("s").with_run(Some("r"));
    /// let mut stopped = None;
    /// for turn in 1..=10 {
    ///     let answer = Message::assistant("I think the fix is done.").with_tool_calls(Some(false));
    ///     let _ = guard.message(&scope, &answer);
    ///     let feedback = Message::tool_feedback("No tool calls found in the response.");
    ///     if guard.message(&scope, &feedback).is_blocked() {
    ///         stopped = Some(turn);
    ///         break;
    ///     }
    /// }
    /// assert_eq!(stopped, Some(8));
    /// # Ok::<(), loopguard::ConfigError>(())
    /// ```
    pub fn message(&mut self, scope: &Scope<'_>, message: &Message<'_>) -> Verdict {
        let (cfg, run, _, now) = self.enter(scope);
        run.message(cfg, scope, message, now)
    }

    /// A compaction retry happened in this run: arms the post-compaction guard. Returns
    /// the number of attempts it watches, or 0 when the guard is disabled.
    pub fn on_compaction(&mut self, scope: &Scope<'_>) -> u32 {
        let (cfg, run, _, now) = self.enter(scope);
        run.compaction(cfg, scope, now)
    }

    /// Forgets a run (its prompt-to-answer cycle is over). Returns whether it existed. A
    /// sub-agent's run that ends tells its tree's root that the sub-agent finished
    /// (`agent_tree`'s children at once).
    pub fn end_run(&mut self, scope: &Scope<'_>) -> bool {
        let now = self.clock.now_ms();
        let _ = crate::tree::run_ended(&mut self.states(now), scope.session(), now);
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

    /// The state of a session beyond its runs (its spend), if the guard holds the session.
    pub fn session_state(&self, session: &str) -> Option<&SessionState> {
        self.runs.session_value(Scope::new(session).session())
    }

    /// Every live run: session id, run id, state.
    pub fn runs(&self) -> impl Iterator<Item = (&str, Option<&str>, &RunState)> {
        self.runs
            .iter()
            .map(|(session, run, state)| (session, (!run.is_empty()).then_some(run), &**state))
    }

    /// Puts a run's state in place (a durable store restoring what it saved).
    pub fn insert_run(&mut self, scope: &Scope<'_>, state: RunState) {
        let (_, run, _, _) = self.enter(scope);
        *run = state;
    }

    /// Puts a session's state in place (a durable store restoring what it saved).
    pub fn insert_session(&mut self, scope: &Scope<'_>, state: SessionState) {
        let (_, _, session, _) = self.enter(scope);
        *session = state;
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

    /// Runs `f` with the config for the scope's agent, the run's state (created if needed),
    /// its session's state and the clock's time: what a host needs to apply an event to the
    /// run with [`RunState`]'s methods, as a durable store does, while the guard keeps the
    /// run (the event protocol's crate applies its events to a guard this way).
    ///
    /// ```
    /// use loopguard::{Call, ConfigSet, Guard, Scope};
    /// use serde_json::json;
    ///
    /// let mut guard = Guard::new(ConfigSet::parse("{ tools: { loopDetection: { enabled: true } } }")?);
    /// let scope = Scope::new("s").with_run(Some("r"));
    /// let args = json!({ "path": "a" });
    /// let call = Call::new("read", &args).with_id(Some("c1"));
    /// let ticket =
    ///     guard.with_run(&scope, |cfg, run, session, now| run.begin(session, cfg, &scope, &call, now));
    /// assert!(!ticket.is_blocked());
    /// # Ok::<(), loopguard::ConfigError>(())
    /// ```
    pub fn with_run<R>(
        &mut self,
        scope: &Scope<'_>,
        f: impl FnOnce(&crate::config::EffectiveConfig, &mut RunState, &mut SessionState, Millis) -> R,
    ) -> R {
        let (cfg, run, session, now) = self.enter(scope);
        f(cfg, run, session, now)
    }

    /// The config for the scope's agent, the run's state (created if needed), its
    /// session's state and the time.
    fn enter(
        &mut self,
        scope: &Scope<'_>,
    ) -> (
        &crate::config::EffectiveConfig,
        &mut RunState,
        &mut SessionState,
        Millis,
    ) {
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
        let touched = self
            .runs
            .touch(
                scope.session(),
                scope.run().unwrap_or(""),
                self.tick,
                now,
                Box::default,
            )
            .expect("a table that evicts never refuses");
        (
            self.config.for_agent(scope.agent()),
            &mut **touched.value,
            touched.session,
            now,
        )
    }
}

/// A guard's sessions' states, one at a time ([`crate::tree::SessionStates`]), touched at
/// `now`.
struct TableStates<'g, R> {
    runs: &'g mut SessionTable<R, SessionState>,
    tick: &'g mut u64,
    now: Millis,
}

impl<R> crate::tree::SessionStates for TableStates<'_, R> {
    type Error = crate::table::SessionLimit;

    fn read_state<T>(
        &mut self,
        session: &str,
        f: impl FnOnce(Option<&SessionState>) -> T,
    ) -> Result<T, Self::Error> {
        Ok(f(self.runs.session_value(session)))
    }

    fn update_state<T>(
        &mut self,
        session: &str,
        f: impl FnOnce(&mut SessionState) -> T,
    ) -> Result<T, Self::Error> {
        *self.tick += 1;
        let mut out = None;
        self.runs
            .touch_session(session, *self.tick, self.now, |s| out = Some(f(s)))?;
        Ok(out.expect("touch_session applies its closure when it opens the session"))
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
        let _ = g.begin(&Scope::new("a"), &Call::new("read", &args));
        clock.advance(Duration::from_secs(30));
        let _ = g.begin(&Scope::new("b"), &Call::new("read", &args));
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
            let _ = g.begin(&Scope::new(s), &Call::new("read", &args));
        }
        assert_eq!(g.session_count(), 3);
        assert!(
            g.run_state(&Scope::new("a")).is_none(),
            "oldest session evicted"
        );
        for r in ["r1", "r2", "r3"] {
            clock.advance(Duration::from_millis(10));
            let _ = g.begin(
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
        let _ = g.begin(&s, &Call::new("read", &args));
        assert!(g.end_run(&s));
        assert!(!g.end_run(&s));
        let _ = g.begin(&s, &Call::new("read", &args));
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
