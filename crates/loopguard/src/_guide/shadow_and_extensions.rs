//! # Shadow mode and loopguard's own detectors
//!
//! The `loopguard` block of the config adds what OpenClaw's detectors miss in real
//! transcripts: near repeats (volatile ids masked), long cycles, runs of failures, calls
//! that go on after a block. `preset: "recommended"` turns on the set tuned on the
//! project's corpus of real agent transcripts; keys written next to it override it.
//! `mode: "shadow"` evaluates everything and blocks nothing: a would-be warning or block
//! comes back as [`Verdict::Shadow`](crate::Verdict::Shadow), so a team can see what the
//! guard would have done on live traffic before enforcing it.
//!
//! ```
//! use loopguard::{Call, ConfigSet, Guard, Outcome, Scope, Verdict};
//! use serde_json::json;
//!
//! let config = ConfigSet::parse(r#"{
//!   tools: { loopDetection: { enabled: true } },
//!   loopguard: { preset: "recommended", mode: "shadow" },
//! }"#)?;
//! let mut guard = Guard::new(config);
//! let scope = Scope::new("s").with_run(Some("r"));
//! let mut would_block = None;
//! // A two-step cycle: edit, then the same failing test, again and again.
//! for i in 0..40 {
//!     let (tool, args) = if i % 2 == 0 {
//!         ("edit", json!({ "path": "src/lib.rs", "text": "fix" }))
//!     } else {
//!         ("bash", json!({ "command": "cargo test" }))
//!     };
//!     let id = format!("c{i}");
//!     let call = Call::new(tool, &args).with_id(Some(&id));
//!     let ticket = guard.begin(&scope, &call);
//!     assert!(!ticket.is_blocked(), "shadow mode never blocks");
//!     if let Verdict::Shadow { detection, .. } = ticket.verdict() {
//!         if detection.level.as_str() == "critical" && would_block.is_none() {
//!             would_block = Some((i, detection.detector.as_str()));
//!         }
//!     }
//!     let out = if tool == "bash" { json!("1 test failed") } else { json!("ok") };
//!     let _ = guard.finish(ticket, Outcome::Result(&out));
//! }
//! let (at, detector) = would_block.expect("the cycle is caught");
//! assert!(at < 40, "{detector} at call {at}");
//! # Ok::<(), loopguard::ConfigError>(())
//! ```
