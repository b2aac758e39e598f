//! What a run remembers of its messages, for the detectors of loops without tool calls:
//!
//! - `repeated_message`: the same answer (its text masked like outcomes: volatile tokens
//!   by the masking rules in force, whitespace collapsed) several times among the run's
//!   newest messages, consecutive or not. Every copy counts for the warning; the critical
//!   count is the copies since the last sign of progress: a message never seen before in
//!   the window (a new prompt, a new answer) or a tool call whose outcome is new;
//! - `no_tool_turns`: the harness answering the model with the same feedback (a format
//!   error, "no tool call found") again and again: each such feedback stands for one answer
//!   without a tool call. Counted in a row; a tool call, an answer with tool calls, a
//!   prompt or another feedback ends the row.
//!
//! `content_chanting` reads the text itself ([`chanting`](super::chanting)); the answer
//! being streamed is kept here until it ends.

use std::collections::VecDeque;

use serde::{Deserialize, Serialize};

use super::chanting::ChantTrack;
use crate::history::History;
use crate::message::Role;

/// Messages a run keeps at most, whatever its `historySize`.
pub const MAX_MESSAGES: usize = 256;

/// One message of the run.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
struct Said {
    /// [`Role::code`].
    role: u8,
    /// The masked text's print (0: no text).
    print: u64,
    /// The sequence number of the run's next call when it was said.
    calls: u64,
    /// No earlier message of the window has this role and print.
    fresh: bool,
    /// An answer that carried tool calls.
    with_calls: bool,
}

/// An answer being streamed.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) struct Stream {
    /// Hash of the answer's id (0: none given).
    pub id: u64,
    /// The index the next piece should have.
    pub next: u64,
    /// Its text so far.
    pub text: ChantTrack,
    /// Its reasoning so far.
    pub reasoning: ChantTrack,
    /// Its id as the host spelt it, once a piece came with it.
    #[serde(skip)]
    pub spelt: Spelt,
}

/// The id of the answer being streamed, as the host spelt it: each next piece is matched
/// to the stream by comparing strings, not by hashing its id again. A cache, not state:
/// neither stored nor compared (a stream read back from bytes fills it again).
#[derive(Clone, Debug, Default)]
pub(crate) struct Spelt(pub Option<Box<str>>);

impl PartialEq for Spelt {
    fn eq(&self, _: &Self) -> bool {
        true
    }
}

impl Eq for Spelt {}

/// The message state of one run.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) struct Turns {
    /// The newest messages, oldest first.
    log: VecDeque<Said>,
    /// The feedback of the current row of answers without a tool call (its print).
    feedback: u64,
    /// How many times in a row it was given.
    streak: u32,
    /// The start of its text, for messages.
    feedback_excerpt: String,
    /// The answer being streamed.
    pub stream: Option<Box<Stream>>,
}

impl Turns {
    /// Whether nothing was said yet.
    pub(crate) fn is_empty(&self) -> bool {
        self.log.is_empty() && self.streak == 0 && self.stream.is_none()
    }

    /// Approximate heap bytes held.
    pub(crate) fn heap_bytes(&self) -> usize {
        self.log.capacity() * std::mem::size_of::<Said>()
            + self.feedback_excerpt.capacity()
            + self.stream.as_ref().map_or(0, |s| {
                std::mem::size_of::<Stream>()
                    + s.text.heap_bytes()
                    + s.reasoning.heap_bytes()
                    + s.spelt.0.as_ref().map_or(0, |id| id.len())
            })
    }

    /// Records a message of `role` whose text has print `print` (0: none), said before the
    /// call of sequence number `calls`; keeps the newest `window`.
    pub(crate) fn said(
        &mut self,
        role: Role,
        print: u64,
        calls: u64,
        with_calls: bool,
        window: usize,
    ) {
        let code = role.code();
        let fresh = print != 0 && !self.log.iter().any(|s| s.role == code && s.print == print);
        while self.log.len() >= window.clamp(1, MAX_MESSAGES) {
            self.log.pop_front();
        }
        self.log.push_back(Said {
            role: code,
            print,
            calls,
            fresh,
            with_calls,
        });
        match role {
            Role::Assistant if with_calls => self.streak = 0,
            Role::User => self.streak = 0,
            _ => {}
        }
    }

    /// A tool call was made: the row of answers without one ends.
    pub(crate) fn called(&mut self) {
        self.streak = 0;
    }

    /// The harness gave feedback `text` of print `print`: the row of identical feedback
    /// so far.
    pub(crate) fn feedback(&mut self, print: u64, text: &str) -> u32 {
        if print == self.feedback && self.streak > 0 {
            self.streak += 1;
        } else {
            self.feedback = print;
            self.feedback_excerpt = super::chanting::excerpt(text);
            self.streak = 1;
        }
        self.streak
    }

    /// The current row of identical feedback (an answer without a tool call continues
    /// it): its length, the feedback's print and the start of its text.
    pub(crate) fn streak(&self) -> (u32, u64, &str) {
        (self.streak, self.feedback, &self.feedback_excerpt)
    }

    /// The newest message's copies of the text of print `print` said by the assistant:
    /// every copy in the window (itself included), and the copies since the last sign of
    /// progress (see the module docs).
    pub(crate) fn copies(&self, print: u64, history: &History) -> (u32, u32) {
        let code = Role::Assistant.code();
        let same = |s: &Said| s.role == code && s.print == print && !s.with_calls;
        let mut total = 0;
        let mut unbroken = 0;
        let mut later: Option<usize> = None;
        let mut broken = false;
        for (i, s) in self.log.iter().enumerate().rev() {
            if !same(s) {
                continue;
            }
            total += 1;
            if !broken {
                match later {
                    Some(j) if self.progress(i, j, history) => broken = true,
                    _ => unbroken += 1,
                }
            }
            later = Some(i);
        }
        (total, unbroken)
    }

    /// Whether anything between the messages `earlier` and `later` of the log made
    /// progress: a message not seen before, or a call whose outcome is new.
    fn progress(&self, earlier: usize, later: usize, history: &History) -> bool {
        if self.log.range(earlier + 1..later).any(|s| s.fresh) {
            return true;
        }
        let (from, to) = (self.log[earlier].calls, self.log[later].calls);
        if from < to && from < history.seq_of(0) {
            // Calls made in between have left the window already: plenty happened.
            return true;
        }
        let records = history.records();
        (0..records.len())
            .filter(|&x| (from..to).contains(&history.seq_of(x)))
            .any(|x| {
                let r = &records[x];
                if r.is_veto() {
                    return false;
                }
                !records.range(..x).any(|e| {
                    e.signature() == r.signature()
                        && (e.outcome() == r.outcome() || r.outcome().is_none())
                })
            })
    }
}
