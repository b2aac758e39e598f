//! # Configs
//!
//! [`ConfigSet::parse`](crate::ConfigSet::parse) reads OpenClaw's config document (JSON5,
//! comments and trailing commas allowed): the global `tools.loopDetection` block, and
//! per-agent blocks under `agents.list[]` that override it key by key.
//! [`ConfigSet::for_agent`](crate::ConfigSet::for_agent) gives the
//! [`EffectiveConfig`](crate::EffectiveConfig) in force for an agent: merged, defaulted
//! and clamped so that the levels stay ordered (every clamp is listed, with its reason).
//! It is read through its accessors and cannot be written, so no host can undo a clamp.
//!
//! ```
//! use loopguard::ConfigSet;
//!
//! let set = ConfigSet::parse(r#"{
//!   tools: { loopDetection: { enabled: true, warningThreshold: 10, criticalThreshold: 20 } },
//!   agents: { list: [
//!     { id: "ops", tools: { loopDetection: { warningThreshold: 3, criticalThreshold: 2 } } },
//!   ] },
//! }"#)?;
//! assert_eq!(set.for_agent(None).critical_threshold(), 20);
//! let ops = set.for_agent(Some("ops"));
//! assert_eq!(ops.warning_threshold(), 3);
//! // A critical threshold at or below the warning one is raised, and says so.
//! assert_eq!(ops.critical_threshold(), 4);
//! assert_eq!(ops.clamps()[0].field, "criticalThreshold");
//! // An agent without a block of its own gets the global settings.
//! assert_eq!(set.for_agent(Some("research")).warning_threshold(), 10);
//! # Ok::<(), loopguard::ConfigError>(())
//! ```
//!
//! A document with problems is refused whole, with every problem at once: its dotted
//! path, its line and column, and what would be right (the closest known key for a typo).
//!
//! ```
//! use loopguard::ConfigSet;
//!
//! let err = ConfigSet::parse("{ tools: { loopDetection: {\n  warningTreshold: 5 } } }").unwrap_err();
//! let issue = &err.issues[0];
//! assert_eq!(issue.path, "tools.loopDetection.warningTreshold");
//! assert_eq!(issue.position.map(|p| p.line), Some(2));
//! assert!(issue.to_string().contains("did you mean `warningThreshold`?"));
//! ```
