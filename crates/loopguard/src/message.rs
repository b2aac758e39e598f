//! What a model said, and what it was told: the [`Message`] a host hands in when the loop
//! it guards has no tool call to judge (the model repeating an answer, chanting inside one,
//! answering in text turn after turn while its harness asks for a tool call).
//!
//! A message is judged like a call ([`Guard::message`](crate::Guard::message),
//! [`RunState::message`](crate::RunState::message)): the answer is a [`Verdict`]. What a
//! block means differs from a call's: the model's words exist already and cannot be "not
//! executed". A blocked message ends the run (the verdict is terminal: every later call
//! and message of the run is blocked too), so a host refuses the next model call or stops
//! the stream it is reading; a warning is for the next prompt the model reads.
//!
//! [`Verdict`]: crate::Verdict

use std::fmt;

/// Who a message is from.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum Role {
    /// The model's answer (its text, and its reasoning where the host has it).
    Assistant,
    /// A person's prompt.
    User,
    /// A system prompt.
    System,
    /// What the harness answered the model with instead of a tool result: a format error,
    /// "no tool call found", a reminder to use a tool.
    ToolFeedback,
}

impl Role {
    /// Every role, with its name on the wire.
    pub const ALL: [Self; 4] = [
        Self::Assistant,
        Self::User,
        Self::System,
        Self::ToolFeedback,
    ];

    /// The name on the wire (`assistant`, `user`, `system`, `tool_feedback`).
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Assistant => "assistant",
            Self::User => "user",
            Self::System => "system",
            Self::ToolFeedback => "tool_feedback",
        }
    }

    /// The role named `name` on the wire.
    pub fn from_name(name: &str) -> Option<Self> {
        Self::ALL.into_iter().find(|r| r.as_str() == name)
    }

    /// The role's number in stored states.
    pub(crate) fn code(self) -> u8 {
        self as u8
    }
}

impl fmt::Display for Role {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// One message of a run, as the host has it.
///
/// A streaming host may send an answer in pieces as it arrives ([`Message::delta`]), so
/// that an answer chanting one phrase is stopped before the model's output limit; the
/// pieces of one answer share its `id`, and the whole answer may follow as a message of
/// the same id without `delta` (its chanting was judged piece by piece already).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Message<'a> {
    /// Who says it.
    pub role: Role,
    /// The text (an answer's visible text; for a piece of a stream, the piece).
    pub text: &'a str,
    /// The model's reasoning, where the host has it (judged for chanting, not compared
    /// between answers).
    pub reasoning: Option<&'a str>,
    /// Whether the answer carried tool calls (`None`: the host does not say, read as no).
    pub has_tool_calls: Option<bool>,
    /// The message's id: a message sent again with the same id and text is a retry and
    /// counts once; the pieces of a streamed answer share it.
    pub id: Option<&'a str>,
    /// A piece of a streamed answer: `Some(index)` with the piece's position in the
    /// stream when the host numbers its pieces (0, 1, 2…: a piece sent again with an index
    /// already seen is a retry), `Some(None)` when it does not.
    pub delta: Option<Option<u64>>,
}

impl<'a> Message<'a> {
    /// A message of `role` saying `text`.
    pub fn new(role: Role, text: &'a str) -> Self {
        Self {
            role,
            text,
            reasoning: None,
            has_tool_calls: None,
            id: None,
            delta: None,
        }
    }

    /// The model's answer `text`.
    pub fn assistant(text: &'a str) -> Self {
        Self::new(Role::Assistant, text)
    }

    /// The harness's feedback `text` (a format error, "no tool call found").
    pub fn tool_feedback(text: &'a str) -> Self {
        Self::new(Role::ToolFeedback, text)
    }

    /// The same message with the model's reasoning.
    pub fn with_reasoning(mut self, reasoning: Option<&'a str>) -> Self {
        self.reasoning = reasoning;
        self
    }

    /// The same message saying whether the answer carried tool calls.
    pub fn with_tool_calls(mut self, has_tool_calls: Option<bool>) -> Self {
        self.has_tool_calls = has_tool_calls;
        self
    }

    /// The same message with an id (a blank id counts as none).
    pub fn with_id(mut self, id: Option<&'a str>) -> Self {
        self.id = id.and_then(crate::text::non_blank);
        self
    }

    /// The same message as a piece of a streamed answer, numbered `index` when the host
    /// numbers its pieces.
    pub fn as_delta(mut self, index: Option<u64>) -> Self {
        self.delta = Some(index);
        self
    }

    /// Whether the message is a piece of a streamed answer.
    pub fn is_delta(&self) -> bool {
        self.delta.is_some()
    }
}
