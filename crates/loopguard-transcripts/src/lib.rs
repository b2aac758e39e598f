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
//! - [`detect()`] tells a file's [`Format`] from its first bytes.
//! - One reader per format turns a file into [`Item`]s with their [`Pos`]itions, streaming
//!   (one line or one JSON element in memory at a time): [`openclaw`], [`claude_code`],
//!   [`codex_rollout`], [`codex_exec`], [`openai_chat`], [`anthropic_messages`],
//!   [`loopguard`], [`swe_agent`], [`openhands`], [`openclaw_calls`]. [`read()`] picks
//!   the right one.
//! - Every line a reader cannot use is counted in its [`ReadStats`], with the reason.
//! - [`scan`] applies the items to a guard and reports, per session, the loops found and
//!   what blocking them would have saved.

#![forbid(unsafe_code)]
#![warn(missing_docs)]

pub mod anthropic_messages;
mod chat;
pub mod claude_code;
pub mod codex_exec;
pub mod codex_rollout;
pub mod detect;
mod item;
mod lines;
pub mod loopguard;
pub mod openai_chat;
pub mod openclaw;
pub mod openclaw_calls;
pub mod openhands;
pub mod scan;
mod stats;
pub mod swe_agent;
mod walk;

use std::io::{self, BufRead, Seek};

pub use detect::{detect, Companion, Detection, Format};
pub use item::{Item, Pos, Sink, Usage};
pub use lines::DEFAULT_MAX_LINE;
pub use openclaw::RunWindows;
pub use scan::{
    passes, scan_bytes, scan_path, scan_path_as, FileScan, FileStatus, Finding, LoopReport, Mark,
    Savings, ScanOptions, Scanner, SessionReport, Timeline,
};
pub use stats::{ReadStats, Skip, SkipReason};

/// What a reader needs besides the bytes.
#[derive(Clone, Copy, Debug)]
pub struct ReadOptions<'a> {
    /// The session id for transcripts that name none (usually the file name without its
    /// extensions).
    pub session_hint: &'a str,
    /// Longest line read; longer lines are counted and skipped without being buffered.
    pub max_line: usize,
    /// OpenClaw: run windows from the transcript's trajectory sidecar.
    pub run_windows: Option<&'a RunWindows>,
}

impl<'a> ReadOptions<'a> {
    /// Options with `session_hint` and the defaults.
    pub fn new(session_hint: &'a str) -> Self {
        Self {
            session_hint,
            max_line: DEFAULT_MAX_LINE,
            run_windows: None,
        }
    }
}

/// Reads `input` as `format`, handing every item to `sink`. Only I/O errors fail; every
/// line that cannot be used is counted in the returned stats.
pub fn read<R: BufRead + Seek>(
    format: Format,
    input: R,
    options: &ReadOptions<'_>,
    sink: &mut dyn Sink,
) -> io::Result<ReadStats> {
    match format {
        Format::OpenClaw => openclaw::read(input, options, sink),
        Format::ClaudeCode => claude_code::read(input, options, sink),
        Format::CodexRollout => codex_rollout::read(input, options, sink),
        Format::CodexExec => codex_exec::read(input, options, sink),
        Format::OpenaiChat => openai_chat::read(input, options, sink),
        Format::AnthropicMessages => anthropic_messages::read(input, options, sink),
        Format::Loopguard => loopguard::read(input, options, sink),
        Format::SweAgent => swe_agent::read(input, options, sink),
        Format::OpenHands => openhands::read(input, options, sink),
        Format::OpenClawCalls => openclaw_calls::read(input, options, sink),
    }
}

#[cfg(test)]
pub(crate) mod testing;
