//! # Durable state
//!
//! A [`Guard`](crate::Guard) keeps runs in memory. A host that restarts, or that runs as
//! one short process per event (a hook), keeps each run's [`RunState`](crate::RunState)
//! instead: [`RunState::to_bytes`](crate::RunState::to_bytes) gives a compact, versioned
//! encoding ([`STATE_FORMAT_VERSION`](crate::STATE_FORMAT_VERSION); older versions are
//! still read) and [`RunState::from_bytes`](crate::RunState::from_bytes) continues it.
//! Bytes that are not a state are an error, never a panic.
//!
//! [`Guard::with_run`](crate::Guard::with_run) hands a host the config, the run and the
//! time together, to apply an event with the run's own methods; the same methods work on
//! a state just read from a store. They are the ticket's two ends, split over two events
//! as the event protocol splits them: [`RunState::begin`](crate::RunState::begin) judges a
//! call and leaves its record pending, and a later event resumes the call's ticket from
//! that record ([`RunState::resume`](crate::RunState::resume), by the call's id) and
//! finishes it ([`RunState::finish`](crate::RunState::finish)). Each logs what it answers.
//!
//! A session's [`SessionState`](crate::SessionState) (what its runs, agents and days
//! spent, for the budgets) is kept the same way, one per session beside its runs
//! ([`SessionState::to_bytes`](crate::SessionState::to_bytes)), and handed to every
//! event of any of its runs: a call is judged against the session's budgets there, and a
//! model response's usage ([`RunState::usage`](crate::RunState::usage)) is counted there.
//! It needs writing back only when [`SessionState::changed`](crate::SessionState::changed).
//!
//! ```
//! use loopguard::{Call, CallRef, ConfigSet, Millis, Outcome, RunState, Scope, SessionState};
//! use serde_json::json;
//!
//! let set = ConfigSet::parse("{ tools: { loopDetection: { enabled: true, warningThreshold: 2, criticalThreshold: 3 } } }")?;
//! let cfg = set.for_agent(None);
//! let scope = Scope::new("s").with_run(Some("r"));
//! let (args, result) = (json!({ "q": "x" }), json!("no results"));
//!
//! // One process per event: read the states, apply the event, write them back.
//! let (mut stored, mut stored_session): (Option<Vec<u8>>, Option<Vec<u8>>) = (None, None);
//! let mut event = |apply: &mut dyn FnMut(&mut RunState, &mut SessionState)| {
//!     let mut run = match &stored {
//!         Some(bytes) => RunState::from_bytes(bytes).expect("a state this build wrote"),
//!         None => RunState::default(),
//!     };
//!     let mut session = match &stored_session {
//!         Some(bytes) => SessionState::from_bytes(bytes).expect("a state this build wrote"),
//!         None => SessionState::default(),
//!     };
//!     apply(&mut run, &mut session);
//!     stored = Some(run.to_bytes());
//!     if session.changed() {
//!         stored_session = Some(session.to_bytes());
//!     }
//! };
//! let mut verdicts = Vec::new();
//! for (i, now) in (0..4).zip((1_000..).map(Millis::new)) {
//!     let id = format!("c{i}");
//!     let mut blocked = false;
//!     // The call: judged, its ticket left with the run as the call's pending record.
//!     event(&mut |run, session| {
//!         let call = Call::new("search", &args).with_id(Some(&id));
//!         let ticket = run.begin(session, cfg, &scope, &call, now);
//!         blocked = ticket.is_blocked();
//!     });
//!     if !blocked {
//!         // Its result, in another process: the ticket resumed by the call's id.
//!         event(&mut |run, session| {
//!             let ticket = run.resume(cfg, &scope, CallRef::id(&id));
//!             let recorded = run.finish(session, cfg, ticket, Outcome::Result(&result), now);
//!             assert!(recorded.expect("a pending call").recorded);
//!         });
//!     }
//!     verdicts.push(blocked);
//! }
//! assert_eq!(verdicts, [false, false, false, true]);
//! assert!(RunState::from_bytes(b"not a state").is_err());
//! # Ok::<(), loopguard::ConfigError>(())
//! ```
