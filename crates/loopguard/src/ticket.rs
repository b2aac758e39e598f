//! One tool call from its verdict to its outcome: the [`Call`] a host hands in, the
//! [`Ticket`] it gets back, and [`Called`], what [`Guard::call`](crate::Guard::call) makes
//! of a call it runs itself.
//!
//! Every front end drives the engine this way. A host in the same process keeps the ticket
//! while the tool runs and finishes it with the outcome ([`Guard::begin`] and
//! [`Guard::finish`]); the event protocol is the same pair on the wire: a `call` event
//! begins a ticket and leaves it with its run as the call's pending record, and a `result`
//! event resumes it ([`RunState::resume`]: by the call's id, or by its own tool and
//! arguments) and finishes it. Either way one code path judges a call and one records its
//! outcome.
//!
//! [`Guard::begin`]: crate::Guard::begin
//! [`Guard::finish`]: crate::Guard::finish
//! [`RunState::resume`]: crate::RunState::resume

use serde::{Deserialize, Serialize};
use serde_json::Value;
use smallvec::SmallVec;

use crate::answers::CallIdUse;
use crate::fingerprint::{OutcomeRule, Signature};
use crate::scope::Scope;
use crate::verdict::{Recorded, Verdict};

/// A tool call as the host sees it: its arguments as a `serde_json::Value`, or in any
/// other [`Json`](crate::json::Json) view ([`Call::with_args`]; raw JSON text is
/// [`crate::json::Raw`]).
#[derive(Clone, Copy, Debug)]
pub struct Call<'a, J = &'a Value> {
    /// The tool name (trimmed before use).
    pub tool: &'a str,
    /// The JSON arguments.
    pub args: J,
    /// The provider's call id, if any (matches the outcome to its call).
    pub call_id: Option<&'a str>,
    /// The batch of parallel calls (one assistant message) this call belongs to, if known.
    pub batch: Option<&'a str>,
}

impl<'a> Call<'a> {
    /// A call of `tool` with `args` and no call id.
    pub fn new(tool: &'a str, args: &'a Value) -> Self {
        Self::with_args(tool, args)
    }
}

impl<'a, J> Call<'a, J> {
    /// A call of `tool` with arguments in any [`Json`](crate::json::Json) view, and no
    /// call id.
    pub fn with_args(tool: &'a str, args: J) -> Self {
        Self {
            tool,
            args,
            call_id: None,
            batch: None,
        }
    }

    /// The same call with a provider call id (a blank id counts as none).
    pub fn with_id(mut self, call_id: Option<&'a str>) -> Self {
        self.call_id = call_id.and_then(crate::text::non_blank);
        self
    }

    /// The same call as part of batch `batch` (the parallel calls of one assistant
    /// message share a batch id; a blank id counts as none).
    pub fn with_batch(mut self, batch: Option<&'a str>) -> Self {
        self.batch = batch.and_then(crate::text::non_blank);
        self
    }
}

/// How a result names the call it belongs to, for [`RunState::resume`](crate::RunState::resume).
#[derive(Clone, Copy, Debug)]
pub enum CallRef<'a, J = &'a Value> {
    /// By the id of a call the run has seen (the result carries no arguments): the
    /// ticket is made from the call's record, its fingerprint taken from there.
    Id(&'a str),
    /// By its own tool and arguments (and id, when it has one): fingerprinted now.
    Call(Call<'a, J>),
}

impl<'a> CallRef<'a> {
    /// [`CallRef::Id`], for a result with no JSON of its own to name its call by (the
    /// JSON view is then `&Value`'s, which it does not use).
    pub fn id(call_id: &'a str) -> Self {
        Self::Id(call_id)
    }
}

/// One call between its verdict and its outcome, owned by the host: what
/// [`Guard::begin`](crate::Guard::begin) hands out.
///
/// It holds everything the call's two ends need: the verdict and what follows from it
/// ([`Ticket::blocked_result`], [`Ticket::warning_note`], [`Ticket::ends_run`]), and what
/// the outcome is recorded by (the call's tool, scope and fingerprints), so the outcome
/// needs nothing else: [`Guard::finish`](crate::Guard::finish) takes the ticket and what
/// the tool returned. A blocked call has no outcome; neither has a call that did not run:
/// drop its ticket (or [`Ticket::cancel`] it, which says so), and the call stays in the
/// run's history without one, exactly as a call whose result never came.
///
/// The tool name and the scope's ids are kept inline (no allocation for ids that
/// together fit in 96 bytes), so a host cycle allocates nothing in steady state.
#[derive(Debug, PartialEq, Eq)]
#[must_use = "finish the ticket with the call's outcome; a blocked call or one that did not run has none (drop or cancel it)"]
pub struct Ticket {
    names: Names,
    pub(crate) signature: Signature,
    pub(crate) rule: OutcomeRule,
    /// The (tool, target) key of `target_thrash`, when the call names a target.
    pub(crate) target: Option<u64>,
    /// The hash of the call's id.
    pub(crate) call_id: Option<u64>,
    /// The verdict when it is not an allow (rare, and large: a ticket is moved around).
    verdict: Option<Box<Verdict>>,
    pub(crate) standing: Standing,
    /// Whether the call was new, a retry, or came again under a reused id.
    id_use: CallIdUse,
}

/// The verdict of a ticket that holds none.
const ALLOW: &Verdict = &Verdict::Allow;

/// What finishing a ticket does, decided when it was made.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) enum Standing {
    /// The call may run (or ran): its outcome is recorded.
    Open,
    /// The call was blocked: it never ran, and an outcome for it is ignored.
    Blocked,
    /// Resumed by id, the call already has its outcome: only a retry of that outcome is
    /// answered (again); any other is refused.
    Recorded,
    /// Resumed by an id the run does not know: only a retry of an outcome recorded under
    /// that id is answered; any other is refused.
    Unknown,
}

impl Ticket {
    /// A ticket for the call `print` of `scope`, with the call's verdict.
    pub(crate) fn new(
        scope: &Scope<'_>,
        tool: &str,
        keys: Keys,
        verdict: Verdict,
        standing: Standing,
    ) -> Self {
        Self {
            names: Names::new(tool, scope),
            signature: keys.signature,
            rule: keys.rule,
            target: keys.target,
            call_id: keys.call_id,
            verdict: match verdict {
                Verdict::Allow => None,
                other => Some(Box::new(other)),
            },
            standing,
            id_use: CallIdUse::New,
        }
    }

    /// The same ticket, for a call that stands as `id_use` to the earlier calls with its
    /// id.
    pub(crate) fn with_id_use(mut self, id_use: CallIdUse) -> Self {
        self.id_use = id_use;
        self
    }

    /// Whether the call was new, a retry of one already answered (its verdict given
    /// again, nothing counted), or came again under an id the host seems to reuse.
    pub fn id_use(&self) -> CallIdUse {
        self.id_use
    }

    /// The verdict on the call.
    pub fn verdict(&self) -> &Verdict {
        self.verdict.as_deref().unwrap_or(ALLOW)
    }

    /// The verdict, giving up the ticket (the call will have no outcome).
    pub fn into_verdict(self) -> Verdict {
        self.verdict.map_or(Verdict::Allow, |v| *v)
    }

    /// Whether the call must not run.
    pub fn is_blocked(&self) -> bool {
        self.verdict().is_blocked()
    }

    /// For a blocked call: the tool result to hand the model instead of running it
    /// ([`Verdict::blocked_result`]).
    pub fn blocked_result(&self) -> Option<Value> {
        self.verdict().blocked_result()
    }

    /// For a warning to surface now: the note to append to the call's result
    /// ([`Verdict::warning_note`]).
    pub fn warning_note(&self) -> Option<String> {
        self.verdict().warning_note()
    }

    /// When the verdict ends the run (a terminal block: the global circuit breaker, or
    /// an escalation's last attempt): the message the run ends with. The host stops the
    /// run; every later call of it would be blocked anyway. (An outcome can end the run
    /// too: [`Recorded::ends_run`].)
    pub fn ends_run(&self) -> Option<&str> {
        match self.verdict() {
            Verdict::Block {
                detection,
                terminal: true,
            } => Some(&detection.message),
            _ => None,
        }
    }

    /// The tool called (trimmed).
    pub fn tool(&self) -> &str {
        self.names.tool()
    }

    /// The scope the call belongs to.
    pub fn scope(&self) -> Scope<'_> {
        self.names.scope()
    }

    /// The call's signature: the fingerprint of its tool and arguments.
    pub fn signature(&self) -> Signature {
        self.signature
    }

    /// Says the call did not run (a host that decided not to run it, or a request its
    /// client cancelled): the same as dropping the ticket, written out.
    pub fn cancel(self) {}

    /// The ticket as bytes, its verdict left out: what a host keeps when a Rust value
    /// costs it more to hold than a string (a JavaScript binding: an object with a native
    /// finalizer costs several times the whole call). [`Ticket::from_bytes`] makes the
    /// same ticket again, in this process (the encoding is not a stored format).
    pub fn to_bytes(&self) -> Vec<u8> {
        let mut out = Vec::with_capacity(48 + self.names.text.len());
        self.encode_into(&mut out);
        out
    }

    /// [`Ticket::to_bytes`], appended to `out` (reuse one buffer across calls).
    pub fn encode_into(&self, out: &mut Vec<u8>) {
        let portable = Portable {
            names: &self.names.text,
            ends: self.names.ends,
            signature: self.signature,
            rule: self.rule,
            target: self.target,
            call_id: self.call_id,
            standing: self.standing,
        };
        // Encoding plain data into a Vec cannot fail.
        if let Ok(bytes) = postcard::to_extend(&portable, std::mem::take(out)) {
            *out = bytes;
        }
    }

    /// Reads back [`Ticket::to_bytes`]: the ticket, with an allow for its verdict (a
    /// blocked ticket stays blocked: its outcome is still ignored). `None` for bytes that
    /// are not a ticket.
    pub fn from_bytes(bytes: &[u8]) -> Option<Self> {
        let p: Portable<'_> = postcard::from_bytes(bytes).ok()?;
        let names = Names::from_parts(p.names, p.ends)?;
        Some(Self {
            names,
            signature: p.signature,
            rule: p.rule,
            target: p.target,
            call_id: p.call_id,
            verdict: None,
            standing: p.standing,
            id_use: CallIdUse::New,
        })
    }
}

/// A ticket's encoding ([`Ticket::to_bytes`]).
#[derive(Serialize, Deserialize)]
struct Portable<'a> {
    #[serde(borrow)]
    names: &'a [u8],
    ends: [u32; 3],
    signature: Signature,
    rule: OutcomeRule,
    target: Option<u64>,
    call_id: Option<u64>,
    standing: Standing,
}

/// What a ticket records its outcome by, besides the names.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Keys {
    pub signature: Signature,
    pub rule: OutcomeRule,
    pub target: Option<u64>,
    pub call_id: Option<u64>,
}

/// Bytes of names a ticket keeps without allocating.
const INLINE: usize = 96;

/// A ticket's tool name and scope ids, owned, in one buffer: `tool`, `session`, `run` and
/// `agent` one after the other (a blank run or agent is absent in a [`Scope`], so empty
/// means none). Inline up to 96 bytes: a ticket is made for every call and moved a few
/// times, so it stays small.
#[derive(Clone, Debug, PartialEq, Eq)]
struct Names {
    text: SmallVec<[u8; INLINE]>,
    /// Where the tool, the session and the run end in `text` (the agent is the rest).
    ends: [u32; 3],
}

impl Names {
    fn new(tool: &str, scope: &Scope<'_>) -> Self {
        let parts = [
            tool,
            scope.session(),
            scope.run().unwrap_or(""),
            scope.agent().unwrap_or(""),
        ];
        let mut ends = [0; 4];
        let mut end = 0;
        for (slot, part) in ends.iter_mut().zip(parts) {
            end += part.len();
            *slot = end;
        }
        let text = if end <= INLINE {
            // Copied into place: cheaper than growing the vector part by part.
            let mut buf = [0; INLINE];
            let mut start = 0;
            for (part, end) in parts.iter().zip(ends) {
                crate::canonical::put(&mut buf[start..end], part.as_bytes());
                start = end;
            }
            SmallVec::from_buf_and_len(buf, end)
        } else {
            SmallVec::from_vec(parts.concat().into_bytes())
        };
        // Names longer than 4 GiB do not reach a ticket (they would not fit in memory
        // twice); saturating keeps the bounds ordered regardless.
        let bound = |e: usize| u32::try_from(e).unwrap_or(u32::MAX);
        Self {
            text,
            ends: [bound(ends[0]), bound(ends[1]), bound(ends[2])],
        }
    }

    /// Names read back from their bytes and bounds: `None` unless the bytes are UTF-8 and
    /// the bounds are ordered char boundaries inside them.
    fn from_parts(text: &[u8], ends: [u32; 3]) -> Option<Self> {
        let whole = std::str::from_utf8(text).ok()?;
        let mut start = 0;
        for end in ends.map(|e| e as usize) {
            whole.get(start..end)?;
            start = end;
        }
        Some(Self {
            text: SmallVec::from_slice(text),
            ends,
        })
    }

    /// The text from byte `start` on, with the bounds of the parts in it. Whole strings
    /// were written, split at these bounds: always UTF-8 and char boundaries (checked once
    /// per use, not per part; the tool is left out when only the ids are needed).
    fn text_from(&self, start: usize) -> &str {
        std::str::from_utf8(self.text.get(start..).unwrap_or_default()).unwrap_or_default()
    }

    fn tool(&self) -> &str {
        let [tool_end, ..] = self.ends.map(|e| e as usize);
        std::str::from_utf8(self.text.get(..tool_end).unwrap_or_default()).unwrap_or_default()
    }

    fn scope(&self) -> Scope<'_> {
        let [tool_end, session_end, run_end] = self.ends.map(|e| e as usize);
        let ids = self.text_from(tool_end);
        let part = |from: usize, to: Option<usize>| {
            let from = from - tool_end;
            match to {
                Some(to) => ids.get(from..to - tool_end),
                None => ids.get(from..),
            }
            .unwrap_or_default()
        };
        let (session, run, agent) = (
            part(tool_end, Some(session_end)),
            part(session_end, Some(run_end)),
            part(run_end, None),
        );
        // The ids of a scope, normalized when it was made.
        Scope::from_normalized(
            session,
            (!run.is_empty()).then_some(run),
            (!agent.is_empty()).then_some(agent),
        )
    }
}

/// What became of a call a guard ran itself ([`Guard::call`](crate::Guard::call)): the
/// tool's output (a result or an error, both JSON of type `T`) and what the engine said
/// before and after.
#[derive(Debug)]
#[must_use = "a blocked call has a result for the model, and a call may end the run"]
pub enum Called<T> {
    /// The call was blocked and the tool did not run: hand the model
    /// [`Called::blocked_result`] in its place.
    Blocked {
        /// The verdict (a block).
        verdict: Verdict,
    },
    /// The tool ran, and its outcome was recorded.
    Ran {
        /// What the tool returned.
        output: Result<T, T>,
        /// The verdict it ran under (append [`Called::warning_note`] to its result).
        verdict: Verdict,
        /// What became of its outcome.
        recorded: Recorded,
    },
}

impl<T> Called<T> {
    /// The verdict on the call.
    pub fn verdict(&self) -> &Verdict {
        match self {
            Self::Blocked { verdict } | Self::Ran { verdict, .. } => verdict,
        }
    }

    /// For a blocked call: the tool result to hand the model.
    pub fn blocked_result(&self) -> Option<Value> {
        self.verdict().blocked_result()
    }

    /// For a warning to surface: the note to append to the tool's result.
    pub fn warning_note(&self) -> Option<String> {
        self.verdict().warning_note()
    }

    /// When the run must end (a terminal block, or an outcome that aborted the run): the
    /// message it ends with.
    pub fn ends_run(&self) -> Option<&str> {
        match self {
            Self::Blocked {
                verdict:
                    Verdict::Block {
                        detection,
                        terminal: true,
                    },
            } => Some(&detection.message),
            Self::Blocked { .. } => None,
            Self::Ran { recorded, .. } => recorded.ends_run(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tickets_round_trip_through_bytes_and_bad_bytes_are_refused() {
        let scope = Scope::new("s").with_run(Some("r")).with_agent(Some("a"));
        let keys = Keys {
            signature: Signature::NONE,
            rule: OutcomeRule::NONE,
            target: Some(7),
            call_id: Some(9),
        };
        let ticket = Ticket::new(&scope, "read", keys, Verdict::Allow, Standing::Open);
        let bytes = ticket.to_bytes();
        assert_eq!(Ticket::from_bytes(&bytes), Some(ticket));
        for cut in 0..bytes.len() {
            assert_eq!(Ticket::from_bytes(&bytes[..cut]), None, "{cut} bytes");
        }
        // Bounds out of order, or inside a character, are not a ticket's.
        let mut names = Names::new("é", &scope);
        names.ends[0] = 1;
        assert_eq!(Names::from_parts(&names.text, names.ends), None);
        names.ends = [3, 2, 4];
        assert_eq!(Names::from_parts(&names.text, names.ends), None);
    }

    proptest::proptest! {
        /// Any bytes: refused, or a ticket that encodes to bytes that read back the same
        /// and that a run finishes without a panic (what the fuzz target `binding_inputs`
        /// checks at length).
        #[test]
        fn any_bytes_are_refused_or_a_ticket(
            bytes in proptest::collection::vec(proptest::prelude::any::<u8>(), 0..96),
            flip in proptest::prelude::any::<(usize, u8)>(),
        ) {
            // Random bytes, and a real ticket's bytes with one byte changed.
            let scope = Scope::new("s").with_run(Some("r"));
            let keys = Keys {
                signature: Signature::NONE,
                rule: OutcomeRule::NONE,
                target: Some(3),
                call_id: Some(4),
            };
            let mut real = Ticket::new(&scope, "read", keys, Verdict::Allow, Standing::Open).to_bytes();
            let at = flip.0 % real.len();
            real[at] ^= flip.1;
            for bytes in [bytes, real] {
            if let Some(ticket) = Ticket::from_bytes(&bytes) {
                let again = ticket.to_bytes();
                proptest::prop_assert_eq!(Ticket::from_bytes(&again).map(|t| t.to_bytes()), Some(again));
                let set = crate::ConfigSet::enabled_defaults();
                let result = serde_json::json!("same");
                let _ = crate::RunState::default().finish(
                    &mut crate::SessionState::default(),
                    set.global(),
                    ticket,
                    crate::Outcome::Result(&result),
                    crate::Millis::new(1),
                );
            }
            }
        }
    }

    #[test]
    fn names_round_trip_through_the_buffer() {
        let scope = Scope::new("session-1")
            .with_run(Some("run-1"))
            .with_agent(Some("ops"));
        let names = Names::new("read", &scope);
        assert_eq!(names.tool(), "read");
        assert_eq!(names.scope(), scope);
        assert!(!names.text.spilled(), "short ids stay inline");
        let long = "é".repeat(80);
        let bare = Scope::new(&long);
        let names = Names::new("t", &bare);
        assert_eq!(names.scope(), bare);
        assert_eq!(names.scope().run(), None);
        assert_eq!(names.scope().agent(), None);
        assert_eq!(names.tool(), "t");
    }
}
