//! # The host loop
//!
//! A host (an agent runtime, a proxy, a hook) owns one [`Guard`](crate::Guard) and, for
//! every tool call of the model, asks [`Guard::before_call`](crate::Guard::before_call)
//! first. A [`Verdict::Block`](crate::Verdict::Block) means: do not run the tool, hand
//! the model [`Verdict::blocked_result`](crate::Verdict::blocked_result) instead. Any
//! other verdict means: run it, then report what came back with
//! [`Guard::after_call`](crate::Guard::after_call), and append
//! [`Verdict::warning_note`](crate::Verdict::warning_note) to the result the model sees
//! when there is one. Calls are grouped by [`Scope`](crate::Scope): a session, and
//! inside it a run (one user turn); detectors count within a run.
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
//!     let verdict = guard.before_call(&scope, &call);
//!     if let Some(blocked) = verdict.blocked_result() {
//!         // The model reads this instead of a result; the tool did not run.
//!         assert_eq!(blocked["details"]["status"], "blocked");
//!         seen.push("block");
//!         continue;
//!     }
//!     let result = json!({ "status": "pending" });
//!     let recorded = guard.after_call(&scope, &call, Outcome::Result(&result));
//!     assert!(recorded.recorded);
//!     seen.push(if verdict.warning_note().is_some() { "warn" } else { "allow" });
//! }
//! assert_eq!(seen, ["allow", "allow", "warn", "block"]);
//!
//! // A new run (the user's next turn) starts from a clean history.
//! let next = Scope::new("session-1").with_run(Some("turn-2"));
//! let call = Call::new("fetch", &args).with_id(Some("call-9"));
//! assert!(matches!(guard.before_call(&next, &call), Verdict::Allow));
//! # Ok::<(), loopguard::ConfigError>(())
//! ```
//!
//! Errors are outcomes too ([`Outcome::Error`](crate::Outcome::Error)): the same failure
//! over and over is a loop like any other. A result that arrives for a blocked call is
//! ignored (`recorded` is false), however late it comes. When the model's context is
//! compacted, tell the guard ([`Guard::on_compaction`](crate::Guard::on_compaction)): the
//! post-compaction guard then watches the next calls, and
//! [`Recorded::abort`](crate::Recorded::abort) says when the same loop came back and the
//! run must end (`compaction_loop_persisted`).
