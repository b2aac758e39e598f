//! One reader per transcript format, and the plumbing they share.
//!
//! Every reader streams its input (one line, or one JSON element of a whole document, in
//! memory at a time) and hands what it finds to a [`Sink`] as [`Item`](crate::Item)s; every
//! line or element it cannot use is counted in the [`ReadStats`] it returns, with the
//! reason. [`read()`] dispatches on the [`Format`].

pub mod aider;
pub mod anthropic_messages;
pub(crate) mod chat;
pub mod claude_code;
pub mod cline;
pub mod cline_ui;
pub mod codex_exec;
pub mod codex_rollout;
pub mod continue_dev;
pub mod gemini_cli;
pub mod goose;
pub(crate) mod lines;
pub(crate) mod linked;
pub use linked::Spawns;
pub mod loopguard;
pub mod mini_swe_agent;
pub mod openai_chat;
pub mod openclaw;
pub mod openclaw_calls;
pub mod opencode;
pub mod openhands;
pub mod swe_agent;
pub(crate) mod walk;

use std::io::{self, BufRead, Seek};

use crate::detect::Format;
use crate::failures::FailureRules;
use crate::item::Sink;
use crate::stats::ReadStats;

/// What a reader needs besides the bytes.
#[derive(Clone, Copy, Debug)]
pub struct ReadOptions<'a> {
    /// The session id for transcripts that name none (usually the file name without its
    /// extensions).
    pub session_hint: &'a str,
    /// Longest line read; longer lines are counted and skipped without being buffered.
    pub max_line: usize,
    /// Most memory parsing one line may take (bounded from its text before it is parsed,
    /// [`loopguard_events::value_tree_cost`]); costlier lines are counted and skipped.
    pub max_line_cost: usize,
    /// OpenClaw: run windows from the transcript's trajectory sidecar.
    pub run_windows: Option<&'a openclaw::RunWindows>,
    /// How results are judged failed ([`FailureRules::builtin`] by default).
    pub failures: &'a FailureRules,
    /// Claude Code subagent files: the runs of the parent session that spawned its
    /// subagents, read from the parent's file ([`claude_code::spawns_of`]).
    pub spawns: Option<&'a Spawns>,
    /// OpenClaw: the session that spawned the transcript's, as the session store beside
    /// it records it ([`openclaw::SessionStore`]).
    pub parent_session: Option<&'a str>,
    /// OpenClaw: the run of the parent session whose spawn call started the transcript's
    /// session, read from the parent's transcript ([`openclaw::spawns_of`]).
    pub parent_run: Option<&'a str>,
}

impl<'a> ReadOptions<'a> {
    /// Options with `session_hint` and the defaults.
    pub fn new(session_hint: &'a str) -> Self {
        Self {
            session_hint,
            max_line: lines::DEFAULT_MAX_LINE,
            max_line_cost: usize::MAX,
            run_windows: None,
            failures: FailureRules::builtin(),
            spawns: None,
            parent_session: None,
            parent_run: None,
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
        Format::GeminiCli => gemini_cli::read(input, options, sink),
        Format::SweAgent => swe_agent::read(input, options, sink),
        Format::MiniSweAgent => mini_swe_agent::read(input, options, sink),
        Format::OpenHands => openhands::read(input, options, sink),
        Format::OpenClawCalls => openclaw_calls::read(input, options, sink),
        Format::Aider => aider::read(input, options, sink),
        Format::Cline => cline::read(input, options, sink),
        Format::ClineUi => cline_ui::read(input, options, sink),
        Format::Continue => continue_dev::read(input, options, sink),
        Format::Goose => goose::read(input, options, sink),
        Format::OpenCode => opencode::read(input, options, sink),
    }
}
