//! # loopguard
//!
//! Stops AI agents from burning tokens in tool-call loops: the same call with the same
//! arguments over and over, a poll that never changes, two calls ping-ponging, retries of a
//! tool that does not exist, and the same loop again after the context was compacted.
//!
//! This crate is the engine: pure and synchronous, no I/O. It implements the
//! `tools.loopDetection` guardrails of the OpenClaw agent gateway (rolling-history
//! detectors with warning and critical thresholds, a global circuit breaker, per-agent
//! overrides, and the post-compaction guard) as specified in the project's `SPEC.md`.
//!
//! ## A host loop
//!
//! ```
//! use loopguard::{Call, ConfigSet, Guard, Outcome, Scope};
//! use serde_json::json;
//!
//! let config = ConfigSet::parse("{ tools: { loopDetection: { enabled: true } } }")?;
//! let mut guard = Guard::new(config);
//! let scope = Scope::new("session-1").with_run(Some("run-1"));
//!
//! let args = json!({ "path": "/tmp/missing.txt" });
//! let mut blocked_at = None;
//! for attempt in 1..=25 {
//!     let call = Call::new("read", &args).with_id(Some("call-x"));
//!     // The ticket carries the verdict and everything the outcome is recorded by.
//!     let ticket = guard.begin(&scope, &call);
//!     if ticket.is_blocked() {
//!         // Do not run the tool; the model gets `ticket.blocked_result()` instead.
//!         blocked_at = Some(attempt);
//!         break;
//!     }
//!     // Append the warning to the result the model sees, when there is one.
//!     if let Some(note) = ticket.warning_note() {
//!         assert!(note.contains("read"));
//!     }
//!     // Run the tool (here: it always fails the same way), then finish the ticket.
//!     let error = json!("ENOENT: no such file");
//!     let recorded = guard.finish(ticket, Outcome::Error(&error));
//!     assert!(recorded.ends_run().is_none());
//! }
//! // 20 identical failures: the 21st attempt is blocked (generic_repeat, critical).
//! assert_eq!(blocked_at, Some(21));
//! # Ok::<(), loopguard::ConfigError>(())
//! ```
//!
//! [`Guard::call`] does the same around a closure that runs the tool, so that the outcome
//! cannot be forgotten.
//!
//! ## Where to start
//!
//! The [`_guide`] walks a host through the loop, configs and clamps, durable state, shadow
//! mode and loopguard's own detectors, and the fingerprint encoding; every example in it
//! runs as a test.
//!
//! ## The chain
//!
//! Data flows one way, one module per step (the modules are private; their design notes
//! are in the source): `scope` → [`fingerprint`] (over [`canonical`] JSON and the
//! [`policy`] tables) → `history` → `metrics` → `detectors` → `verdict` → `enforcement` →
//! record, with the `compaction` guard watching outcomes. `run` holds the state of one
//! (session, run) and applies the chain to each [`Ticket`] (`ticket`: a call from its
//! verdict to its outcome); [`Guard`] keeps runs in memory with an injectable [`Clock`];
//! durable stores keep [`RunState`] values instead.

#![forbid(unsafe_code)]
#![warn(missing_docs)]

pub mod _guide;
mod answers;
pub mod budget;
pub mod canonical;
mod clock;
mod compaction;
pub mod config;
mod detectors;
mod enforcement;
pub mod fingerprint;
mod guard;
mod history;
pub mod json;
pub mod masking;
mod message;
mod metrics;
mod observe;
pub mod policy;
mod run;
mod scope;
pub mod storm;
mod table;
pub mod text;
mod ticket;
pub mod tree;
mod verdict;

pub use answers::{CallIdUse, ANSWERS_KEPT, BLOCKED_IDS_KEPT, RETRIES_PER_CALL};
pub use budget::{Counted, SessionState, Spend, Usage, UsageError};
pub use clock::{Clock, ManualClock, Millis, SystemClock};
pub use config::{ConfigError, ConfigSet, EffectiveConfig};
pub use fingerprint::{CallPrint, Fingerprint, Outcome, OutcomeOf, RawOutcome, Signature};
pub use guard::Guard;
pub use message::{Message, Role};
pub use run::{ResultError, RunState, StateDecodeError, Stop, STATE_FORMAT_VERSION};
pub use scope::{Scope, DEFAULT_SESSION};
pub use table::{Limits, SessionLimit, SessionTable, SessionValue, Touched, WhenFull};
pub use ticket::{Call, CallRef, Called, Ticket};
pub use verdict::{Abort, Detection, Detector, Evidence, Level, Recorded, Verdict};

/// How the engine reads a message's text, whole or in pieces (for the fuzz target that
/// checks that both read alike).
#[doc(hidden)]
pub use detectors::chanting::{read_answer, Reading};
