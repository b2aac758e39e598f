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
//! a state just read from a store. A run knows no scope, so its methods log nothing: the
//! host logs their answers with [`observe`](crate::observe), as the guard does.
//!
//! ```
//! use loopguard::{observe, CallPrint, ConfigSet, Millis, Outcome, RunState, Scope};
//! use serde_json::json;
//!
//! let set = ConfigSet::parse("{ tools: { loopDetection: { enabled: true, warningThreshold: 2, criticalThreshold: 3 } } }")?;
//! let cfg = set.for_agent(None);
//! let scope = Scope::new("s").with_run(Some("r"));
//! let (args, result) = (json!({ "q": "x" }), json!("no results"));
//!
//! // One process per event: read the state, apply, write it back.
//! let mut stored: Option<Vec<u8>> = None;
//! let mut verdicts = Vec::new();
//! for (i, now) in (0..4).zip((1_000..).map(Millis::new)) {
//!     let mut run = match &stored {
//!         Some(bytes) => RunState::from_bytes(bytes).expect("a state this build wrote"),
//!         None => RunState::default(),
//!     };
//!     let id = format!("c{i}");
//!     let print = CallPrint::for_config("search", &args, cfg);
//!     let verdict = run.before_call(cfg, &print, Some(&id), None, now);
//!     observe::verdict(&scope, print.tool, &verdict);
//!     if !verdict.is_blocked() {
//!         let recorded = run.after_call(cfg, &print, Some(&id), Outcome::Result(&result), now);
//!         observe::recorded(&scope, &recorded);
//!     }
//!     verdicts.push(verdict.is_blocked());
//!     stored = Some(run.to_bytes());
//! }
//! assert_eq!(verdicts, [false, false, false, true]);
//! assert!(RunState::from_bytes(b"not a state").is_err());
//! # Ok::<(), loopguard::ConfigError>(())
//! ```
