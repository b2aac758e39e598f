//! # loopguard-transcripts
//!
//! Reads the session transcripts agents leave on disk and turns them into the event stream
//! the loopguard engine consumes (SPEC §7: calls, results, compactions, each in its
//! session and run), so that months of real sessions can be replayed through the guard in
//! shadow mode: what would it have warned about, what would it have blocked, and what
//! would that have saved?
//!
//! ```
//! use loopguard_transcripts::{scan_bytes, ScanOptions};
//!
//! // An OpenClaw transcript in which `read` fails the same way 25 times in one turn.
//! let mut jsonl = String::from(r#"{"type":"session","version":3,"id":"s1"}"#);
//! jsonl.push_str("\n{\"type\":\"message\",\"id\":\"u\",\"parentId\":null,\"message\":{\"role\":\"user\",\"content\":\"go\"}}");
//! let mut parent = "u".to_string();
//! for i in 0..25 {
//!     jsonl.push_str(&format!(
//!         "\n{{\"type\":\"message\",\"id\":\"a{i}\",\"parentId\":\"{parent}\",\"message\":{{\"role\":\"assistant\",\"content\":[{{\"type\":\"toolCall\",\"id\":\"c{i}\",\"name\":\"read\",\"arguments\":{{\"path\":\"/x\"}}}}]}}}}\
//!          \n{{\"type\":\"message\",\"id\":\"r{i}\",\"parentId\":\"a{i}\",\"message\":{{\"role\":\"toolResult\",\"toolCallId\":\"c{i}\",\"content\":[{{\"type\":\"text\",\"text\":\"ENOENT\"}}],\"isError\":true}}}}"
//!     ));
//!     parent = format!("r{i}");
//! }
//! let scan = scan_bytes(jsonl.as_bytes(), None, "s1", &ScanOptions::default())?;
//! let session = &scan.sessions[0];
//! assert_eq!(session.calls, 25);
//! let block = session.loops[0].first_block.as_ref().unwrap();
//! assert_eq!((block.call_index, block.count), (21, 20)); // the 21st identical call
//! # Ok::<(), std::io::Error>(())
//! ```
//!
//! ## Pieces
//!
//! - [`detect()`] tells a file's [`Format`] from its first bytes; [`agent_files`] knows
//!   the names agents give their files, so that a directory scan passes none over.
//! - One reader per format, in [`readers`], turns a file into [`Item`]s with their
//!   [`Pos`]itions, streaming (one line or one JSON element in memory at a time);
//!   [`read()`] picks the right one.
//! - Every line a reader cannot use is counted in its [`ReadStats`], with the reason; the
//!   records it recognised are counted too, so that a file read as nothing is told from a
//!   transcript without tool calls.
//! - [`FailureRules`] say, per format, which results failed (exit codes, error flags,
//!   error texts), as data a user can extend.
//! - [`scan`] applies the items to a guard and reports, per session, the loops found (one
//!   report per loop, with every detector that saw it) and what blocking them would have
//!   saved.

#![forbid(unsafe_code)]
#![warn(missing_docs)]

pub mod agent_files;
pub mod detect;
mod error;
pub mod failures;
mod item;
pub mod json_ref;
pub mod readers;
pub mod scan;
mod stats;

pub use detect::{detect, Companion, Detection, Format};
pub use error::{Error, ErrorKind};
pub use failures::FailureRules;
pub use item::{owned_event, subagent_session, Item, Pos, Sink, Usage};
pub use json_ref::JsonRef;
pub use readers::lines::DEFAULT_MAX_LINE;
pub use readers::openclaw::RunWindows;
pub use readers::{read, ReadOptions};
pub use scan::{
    is_spend_budget, scan_bytes, scan_path, scan_path_as, BudgetStop, FileScan, FileStatus,
    Finding, LoopReport, Mark, Savings, ScanOptions, Scanner, SessionReport, Timeline,
    DEFAULT_LIVE_MEMORY,
};
pub use stats::{ReadStats, Skip, SkipReason};

#[cfg(test)]
pub(crate) mod testing;
