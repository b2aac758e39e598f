//! # The host loop
//!
//! A host (an agent runtime, a proxy, a hook) owns one [`Guard`](crate::Guard) and, for
//! every tool call of the model, begins a [`Ticket`](crate::Ticket) first
//! ([`Guard::begin`](crate::Guard::begin)). A blocked ticket
//! ([`Ticket::is_blocked`](crate::Ticket::is_blocked)) means: do not run the tool, hand the
//! model [`Ticket::blocked_result`](crate::Ticket::blocked_result) instead. Any other means:
//! run it, then give the ticket back with what came back
//! ([`Guard::finish`](crate::Guard::finish)), and append
//! [`Ticket::warning_note`](crate::Ticket::warning_note) to the result the model sees when
//! there is one. The ticket is an owned value: keep it anywhere while the tool runs (in a
//! map of calls in flight, across an `await`). Calls are grouped by
//! [`Scope`](crate::Scope): a session, and inside it a run (one user turn); detectors count
//! within a run.
//!
//! ```
//! use loopguard::{Call, ConfigSet, Guard, Outcome, Scope, Verdict};
//! use serde_json::json;
//!
//! // Warn at 2 identical calls with identical results, block at 3.
//! let config = ConfigSet::parse(
//!     "{ tools: { loopDetection: { enabled: true, warningThreshold: 2, criticalThreshold: 3 } } }",
//! )?;
//! let mut guard = Guard::new(config);
//! let scope = Scope::new("session-1").with_run(Some("turn-1"));
//! let args = json!({ "url": "https://example.com/status" });
//!
//! let mut seen = Vec::new();
//! for i in 0..4 {
//!     let id = format!("call-{i}");
//!     let call = Call::new("fetch", &args).with_id(Some(&id));
//!     let ticket = guard.begin(&scope, &call);
//!     if let Some(blocked) = ticket.blocked_result() {
//!         // The model reads this instead of a result; the tool did not run.
//!         assert_eq!(blocked["details"]["status"], "blocked");
//!         seen.push("block");
//!         continue;
//!     }
//!     seen.push(if ticket.warning_note().is_some() { "warn" } else { "allow" });
//!     let result = json!({ "status": "pending" });
//!     let recorded = guard.finish(ticket, Outcome::Result(&result));
//!     assert!(recorded.recorded);
//! }
//! assert_eq!(seen, ["allow", "allow", "warn", "block"]);
//!
//! // A new run (the user's next turn) starts from a clean history.
//! let next = Scope::new("session-1").with_run(Some("turn-2"));
//! let call = Call::new("fetch", &args).with_id(Some("call-9"));
//! assert!(matches!(guard.begin(&next, &call).verdict(), Verdict::Allow));
//! # Ok::<(), loopguard::ConfigError>(())
//! ```
//!
//! Errors are outcomes too ([`Outcome::Error`](crate::Outcome::Error)): the same failure
//! over and over is a loop like any other. A blocked call, or one the host decided not to
//! run, has no outcome: drop its ticket ([`Ticket::cancel`](crate::Ticket::cancel) says
//! so). When the model's context is compacted, tell the guard
//! ([`Guard::on_compaction`](crate::Guard::on_compaction)): the post-compaction guard then
//! watches the next calls, and [`Recorded::ends_run`](crate::Recorded::ends_run) says when
//! the same loop came back and the run must end (`compaction_loop_persisted`), as
//! [`Ticket::ends_run`](crate::Ticket::ends_run) does for a terminal block.
//!
//! [`Guard::call`](crate::Guard::call) wraps the whole cycle around a closure that runs the
//! tool, so that no outcome is forgotten:
//!
//! ```
//! use loopguard::{Call, Called, ConfigSet, Guard, Scope};
//! use serde_json::{json, Value};
//!
//! let mut guard = Guard::new(ConfigSet::enabled_defaults());
//! let scope = Scope::new("session-1").with_run(Some("turn-1"));
//! let args = json!({ "cmd": "make" });
//! let mut ended = None;
//! for attempt in 1..=50 {
//!     let called = guard.call(&scope, &Call::new("exec", &args), || {
//!         Err::<Value, Value>(json!("make: *** No rule to make target"))
//!     });
//!     if let Called::Blocked { .. } = called {
//!         // The model reads `called.blocked_result()` instead of the tool's output.
//!         assert!(called.blocked_result().is_some());
//!     }
//!     if called.ends_run().is_some() {
//!         ended = Some(attempt);
//!         break;
//!     }
//! }
//! // Blocked from the 21st identical failure on; the blocks extend the no-progress streak
//! // until the global circuit breaker stops the run.
//! assert_eq!(ended, Some(31));
//! ```
