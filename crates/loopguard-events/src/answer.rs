//! Output objects (SPEC §7): one per input line. Other tools parse these; field names,
//! order and types are a contract.

use loopguard::{Abort, Detection, Recorded, Scope, Verdict};
use serde::ser::{Serialize, SerializeMap, Serializer};

/// The answer to one input line.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Answer {
    /// The verdict on a call.
    Call {
        /// Input line number (1-based).
        seq: u64,
        /// Session.
        session: String,
        /// Run.
        run: Option<String>,
        /// The verdict.
        verdict: Verdict,
    },
    /// What became of a result.
    Result {
        /// Input line number.
        seq: u64,
        /// Session.
        session: String,
        /// Run.
        run: Option<String>,
        /// Recorded or not, and an abort.
        recorded: Recorded,
    },
    /// A compaction.
    Compaction {
        /// Input line number.
        seq: u64,
        /// Session.
        session: String,
        /// Run.
        run: Option<String>,
        /// Window the guard was armed with; 0 when disabled.
        armed: u32,
    },
    /// A line that is not a valid event.
    Invalid {
        /// Input line number.
        seq: u64,
        /// Why.
        error: String,
    },
}

impl Answer {
    /// Whether this answers an invalid line.
    pub fn is_error(&self) -> bool {
        matches!(self, Self::Invalid { .. })
    }

    /// The verdict, for call answers.
    pub fn verdict(&self) -> Option<&Verdict> {
        match self {
            Self::Call { verdict, .. } => Some(verdict),
            _ => None,
        }
    }
}

impl Serialize for Answer {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        let view = match self {
            Self::Invalid { seq, error } => View {
                seq: *seq,
                ids: None,
                reply: ReplyRef::Invalid(error),
            },
            Self::Call {
                seq,
                session,
                run,
                verdict,
            } => View {
                seq: *seq,
                ids: Some((session, run.as_deref())),
                reply: ReplyRef::Call(verdict),
            },
            Self::Result {
                seq,
                session,
                run,
                recorded,
            } => View {
                seq: *seq,
                ids: Some((session, run.as_deref())),
                reply: ReplyRef::Result(recorded),
            },
            Self::Compaction {
                seq,
                session,
                run,
                armed,
            } => View {
                seq: *seq,
                ids: Some((session, run.as_deref())),
                reply: ReplyRef::Compaction(*armed),
            },
        };
        view.serialize(serializer)
    }
}

/// What the engine said to one event, before the event's ids are attached.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) enum Reply {
    Call(Verdict),
    Result(Recorded),
    Compaction(u32),
    Invalid(String),
}

impl Reply {
    /// The answer to the event `seq` of `scope`.
    pub(crate) fn into_answer(self, seq: u64, scope: &Scope<'_>) -> Answer {
        let session = scope.session().to_owned();
        let run = scope.run().map(str::to_owned);
        match self {
            Self::Call(verdict) => Answer::Call {
                seq,
                session,
                run,
                verdict,
            },
            Self::Result(recorded) => Answer::Result {
                seq,
                session,
                run,
                recorded,
            },
            Self::Compaction(armed) => Answer::Compaction {
                seq,
                session,
                run,
                armed,
            },
            Self::Invalid(error) => Answer::Invalid { seq, error },
        }
    }

    /// The answer as it is written, with the ids borrowed from the event.
    pub(crate) fn view<'a>(&'a self, seq: u64, scope: &Scope<'a>) -> View<'a> {
        let ids = Some((scope.session(), scope.run()));
        let reply = match self {
            Self::Call(verdict) => ReplyRef::Call(verdict),
            Self::Result(recorded) => ReplyRef::Result(recorded),
            Self::Compaction(armed) => ReplyRef::Compaction(*armed),
            Self::Invalid(error) => {
                return View {
                    seq,
                    ids: None,
                    reply: ReplyRef::Invalid(error),
                }
            }
        };
        View { seq, ids, reply }
    }
}

enum ReplyRef<'a> {
    Call(&'a Verdict),
    Result(&'a Recorded),
    Compaction(u32),
    Invalid(&'a str),
}

/// An answer with everything borrowed: what is serialized, for [`Answer`] and for the
/// answers `replay` writes without building one.
pub(crate) struct View<'a> {
    seq: u64,
    /// Session and run (none for an invalid line).
    ids: Option<(&'a str, Option<&'a str>)>,
    reply: ReplyRef<'a>,
}

impl<'a> View<'a> {
    /// The answer to an invalid line.
    pub(crate) fn invalid(seq: u64, error: &'a str) -> Self {
        Self {
            seq,
            ids: None,
            reply: ReplyRef::Invalid(error),
        }
    }

    /// Whether this answers an invalid line.
    pub(crate) fn is_error(&self) -> bool {
        matches!(self.reply, ReplyRef::Invalid(_))
    }
}

impl Serialize for View<'_> {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        let mut m = serializer.serialize_map(None)?;
        let (session, run) = self.ids.unwrap_or_default();
        match &self.reply {
            ReplyRef::Invalid(error) => {
                m.serialize_entry("seq", &self.seq)?;
                m.serialize_entry("error", error)?;
            }
            ReplyRef::Call(verdict) => {
                head(&mut m, self.seq, "call", session, run)?;
                match verdict {
                    Verdict::Allow => m.serialize_entry("verdict", "allow")?,
                    Verdict::Warn { detection, notify } => {
                        m.serialize_entry("verdict", "warn")?;
                        detection_fields(&mut m, detection)?;
                        m.serialize_entry("notify", notify)?;
                        paired(&mut m, detection)?;
                    }
                    Verdict::Block {
                        detection,
                        terminal,
                    } => {
                        m.serialize_entry("verdict", "block")?;
                        detection_fields(&mut m, detection)?;
                        m.serialize_entry("terminal", terminal)?;
                        paired(&mut m, detection)?;
                    }
                    Verdict::Shadow {
                        detection,
                        terminal,
                    } => {
                        m.serialize_entry("verdict", "allow")?;
                        m.serialize_entry("shadow", &ShadowOut(detection, *terminal))?;
                    }
                    // A verdict this protocol has no word for yet: blocked stays blocked.
                    other => {
                        let word = if other.is_blocked() { "block" } else { "allow" };
                        m.serialize_entry("verdict", word)?;
                        if let Some(detection) = other.detection() {
                            detection_fields(&mut m, detection)?;
                        }
                    }
                }
            }
            ReplyRef::Result(recorded) => {
                head(&mut m, self.seq, "result", session, run)?;
                m.serialize_entry("recorded", &recorded.recorded)?;
                m.serialize_entry("abort", &recorded.abort.as_ref().map(AbortOut))?;
                if let Some(abort) = &recorded.would_abort {
                    m.serialize_entry("shadow_abort", &AbortOut(abort))?;
                }
            }
            ReplyRef::Compaction(armed) => {
                head(&mut m, self.seq, "compaction", session, run)?;
                m.serialize_entry("armed", armed)?;
            }
        }
        m.end()
    }
}

fn head<M: SerializeMap>(
    m: &mut M,
    seq: u64,
    kind: &str,
    session: &str,
    run: Option<&str>,
) -> Result<(), M::Error> {
    m.serialize_entry("seq", &seq)?;
    m.serialize_entry("type", kind)?;
    m.serialize_entry("session", session)?;
    m.serialize_entry("run", &run)
}

fn detection_fields<M: SerializeMap>(m: &mut M, d: &Detection) -> Result<(), M::Error> {
    m.serialize_entry("level", &d.level)?;
    m.serialize_entry("detector", &d.detector)?;
    m.serialize_entry("count", &d.count)?;
    m.serialize_entry("message", &d.message)
}

fn paired<M: SerializeMap>(m: &mut M, d: &Detection) -> Result<(), M::Error> {
    match d.evidence.paired_tool() {
        Some(tool) => m.serialize_entry("paired_tool", tool),
        None => Ok(()),
    }
}

/// What a shadow-mode verdict would have been.
struct ShadowOut<'a>(&'a Detection, bool);

impl Serialize for ShadowOut<'_> {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        let ShadowOut(d, terminal) = *self;
        let mut m = serializer.serialize_map(None)?;
        let block = d.level == loopguard::Level::Critical;
        m.serialize_entry("verdict", if block { "block" } else { "warn" })?;
        detection_fields(&mut m, d)?;
        if block {
            m.serialize_entry("terminal", &terminal)?;
        }
        paired(&mut m, d)?;
        m.end()
    }
}

struct AbortOut<'a>(&'a Abort);

impl Serialize for AbortOut<'_> {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        let mut m = serializer.serialize_map(Some(4))?;
        m.serialize_entry("detector", &self.0.detector())?;
        m.serialize_entry("tool", &self.0.tool)?;
        m.serialize_entry("count", &self.0.count)?;
        m.serialize_entry("message", &self.0.message)?;
        m.end()
    }
}
