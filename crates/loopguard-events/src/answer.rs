//! Output objects (SPEC §7): one per input line. Other tools parse these; field names,
//! order and types are a contract.

use loopguard::budget::{BudgetScope, Cost, Measure, Reading};
use loopguard::{Abort, CallIdUse, Counted, Detection, Detector, Recorded, Scope, Verdict};
use serde::ser::{Serialize, SerializeMap, Serializer};
use serde_json::{json, Value};

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
        /// Whether the call was new, a retry (answered again, not counted), or came
        /// again under an id the host seems to reuse (the answer then says so).
        id_use: CallIdUse,
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
    /// What a usage event counted.
    Usage {
        /// Input line number.
        seq: u64,
        /// Session.
        session: String,
        /// Run.
        run: Option<String>,
        /// Its cost and the budget it used up, if any.
        counted: Counted,
    },
    /// The verdict on a message.
    Message {
        /// Input line number.
        seq: u64,
        /// Session.
        session: String,
        /// Run.
        run: Option<String>,
        /// The verdict.
        verdict: Verdict,
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

    /// The verdict, for call and message answers.
    pub fn verdict(&self) -> Option<&Verdict> {
        match self {
            Self::Call { verdict, .. } | Self::Message { verdict, .. } => Some(verdict),
            _ => None,
        }
    }

    /// Reads an answer as `replay` prints it and `serve` returns it: what a client of a
    /// sidecar turns back into the engine's own values, so that the blocked result and the
    /// warning note it hands the model are the engine's, built by the same code as in
    /// process. The answer of a call names its tool only in its message; `tool` is the
    /// call's (for a message, its role). The signatures a detection holds are not in the
    /// answer: they are zero.
    pub fn from_json(text: &[u8], tool: &str) -> Result<Self, String> {
        let answer: Value = serde_json::from_slice(text).map_err(|e| e.to_string())?;
        let seq = answer["seq"].as_u64().unwrap_or(0);
        if let Some(error) = answer["error"].as_str() {
            return Ok(Self::Invalid {
                seq,
                error: error.to_owned(),
            });
        }
        let session = answer["session"].as_str().unwrap_or_default().to_owned();
        let run = answer["run"].as_str().map(str::to_owned);
        match answer["type"].as_str() {
            Some("call") => Ok(Self::Call {
                seq,
                session,
                run,
                verdict: verdict_of(&answer, tool)?,
                id_use: match answer["call_id_reused"].as_u64() {
                    Some(sent) => CallIdUse::Reused {
                        sent: u8::try_from(sent).unwrap_or(u8::MAX),
                    },
                    None => CallIdUse::New,
                },
            }),
            Some("result") => Ok(Self::Result {
                seq,
                session,
                run,
                recorded: recorded_of(&answer)?,
            }),
            Some("message") => Ok(Self::Message {
                seq,
                session,
                run,
                verdict: verdict_of(&answer, tool)?,
            }),
            Some("compaction") => Ok(Self::Compaction {
                seq,
                session,
                run,
                armed: answer["armed"]
                    .as_u64()
                    .and_then(|n| u32::try_from(n).ok())
                    .ok_or("a compaction answer without armed")?,
            }),
            Some("usage") => Ok(Self::Usage {
                seq,
                session,
                run,
                counted: counted_of(&answer)?,
            }),
            _ => Err(format!("not an answer: {answer}")),
        }
    }
}

/// The verdict of a call answer (`verdict`, with `shadow` in shadow mode).
fn verdict_of(answer: &Value, tool: &str) -> Result<Verdict, String> {
    let detection = |d: &Value| -> Result<Detection, String> {
        serde_json::from_value(json!({
            "level": d["level"], "detector": d["detector"], "count": d["count"],
            "tool": tool, "paired_tool": d.get("paired_tool"), "message": d["message"],
            "signature": "0", "paired_signature": d.get("paired_tool").map(|_| "0"),
        }))
        .map_err(|e| format!("a detection that cannot be read ({e}): {d}"))
    };
    let flag = |d: &Value, key: &str| d[key].as_bool().unwrap_or(false);
    Ok(match (answer["verdict"].as_str(), answer.get("shadow")) {
        (Some("allow"), Some(shadow)) => Verdict::Shadow {
            detection: detection(shadow)?,
            terminal: flag(shadow, "terminal"),
        },
        (Some("allow"), None) => Verdict::Allow,
        (Some("warn"), _) => Verdict::Warn {
            detection: detection(answer)?,
            notify: flag(answer, "notify"),
        },
        (Some("block"), _) => Verdict::Block {
            detection: detection(answer)?,
            terminal: flag(answer, "terminal"),
        },
        _ => return Err(format!("not a verdict: {answer}")),
    })
}

/// What a usage answer says was counted.
fn counted_of(answer: &Value) -> Result<Counted, String> {
    if answer["counted"].as_bool() != Some(true) {
        return Err(format!("not a usage answer: {answer}"));
    }
    let cost = answer["cost"].as_f64().and_then(Cost::from_usd);
    let (stop, shadow) = match (answer.get("stop"), answer.get("shadow_stop")) {
        (_, Some(s)) if !s.is_null() => (Some(s), true),
        (Some(s), _) if !s.is_null() => (Some(s), false),
        _ => (None, false),
    };
    let Some(stop) = stop else {
        return Ok(Counted::new(cost, None, None, false));
    };
    let unreadable = || format!("a budget stop that cannot be read: {stop}");
    let detector: Detector =
        serde_json::from_value(stop["detector"].clone()).map_err(|_| unreadable())?;
    let scope = BudgetScope::ALL
        .into_iter()
        .find(|s| s.detector() == detector)
        .ok_or_else(unreadable)?;
    let measure: Measure =
        serde_json::from_value(stop["measure"].clone()).map_err(|_| unreadable())?;
    let amount = |v: &Value| -> Option<u64> {
        let x = v.as_f64()?;
        match measure {
            Measure::Cost => Cost::from_usd(x).map(Cost::pico),
            Measure::WallSeconds => Some((x * 1000.0).round() as u64),
            Measure::Tokens | Measure::Calls => v.as_u64(),
        }
    };
    let reading = Reading {
        scope,
        measure,
        used: amount(&stop["used"]).ok_or_else(unreadable)?,
        limit: amount(&stop["limit"]).ok_or_else(unreadable)?,
    };
    let message = stop["message"].as_str().map(str::to_owned);
    Ok(Counted::new(cost, Some(reading), message, shadow))
}

/// What a result answer says became of the outcome.
fn recorded_of(answer: &Value) -> Result<Recorded, String> {
    let abort = |a: Option<&Value>| -> Result<Option<Abort>, String> {
        match a {
            None | Some(Value::Null) => Ok(None),
            Some(a) => serde_json::from_value(json!({
                "tool": a["tool"], "count": a["count"], "message": a["message"], "signature": "0",
            }))
            .map(Some)
            .map_err(|e| format!("an abort that cannot be read ({e}): {a}")),
        }
    };
    let recorded = answer["recorded"]
        .as_bool()
        .ok_or_else(|| format!("not a result answer: {answer}"))?;
    Ok(Recorded::new(
        recorded,
        abort(answer.get("abort"))?,
        abort(answer.get("shadow_abort"))?,
    ))
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
                id_use,
            } => View {
                seq: *seq,
                ids: Some((session, run.as_deref())),
                reply: ReplyRef::Call(verdict, *id_use),
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
            Self::Usage {
                seq,
                session,
                run,
                counted,
            } => View {
                seq: *seq,
                ids: Some((session, run.as_deref())),
                reply: ReplyRef::Usage(counted),
            },
            Self::Message {
                seq,
                session,
                run,
                verdict,
            } => View {
                seq: *seq,
                ids: Some((session, run.as_deref())),
                reply: ReplyRef::Message(verdict),
            },
        };
        view.serialize(serializer)
    }
}

/// What the engine said to one event ([`crate::apply_event`]), before the event's ids are
/// attached.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum Reply {
    /// The verdict on a call, and whether the call was new, a retry, or came again under a
    /// reused id.
    Call(Verdict, CallIdUse),
    /// What became of a result.
    Result(Recorded),
    /// The window a compaction armed the post-compaction guard with (0: disabled).
    Compaction(u32),
    /// What a usage counted.
    Usage(Counted),
    /// A result the engine cannot take (it names no call it can be recorded against).
    Invalid(String),
    /// The verdict on a message.
    Message(Verdict),
}

impl Reply {
    /// The answer to the event `seq` of `scope`.
    pub fn into_answer(self, seq: u64, scope: &Scope<'_>) -> Answer {
        let session = scope.session().to_owned();
        let run = scope.run().map(str::to_owned);
        match self {
            Self::Call(verdict, id_use) => Answer::Call {
                seq,
                session,
                run,
                verdict,
                id_use,
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
            Self::Usage(counted) => Answer::Usage {
                seq,
                session,
                run,
                counted,
            },
            Self::Invalid(error) => Answer::Invalid { seq, error },
            Self::Message(verdict) => Answer::Message {
                seq,
                session,
                run,
                verdict,
            },
        }
    }

    /// The answer as it is written, with the ids borrowed from the event.
    pub(crate) fn view<'a>(&'a self, seq: u64, scope: &Scope<'a>) -> View<'a> {
        let ids = Some((scope.session(), scope.run()));
        let reply = match self {
            Self::Call(verdict, id_use) => ReplyRef::Call(verdict, *id_use),
            Self::Result(recorded) => ReplyRef::Result(recorded),
            Self::Compaction(armed) => ReplyRef::Compaction(*armed),
            Self::Usage(counted) => ReplyRef::Usage(counted),
            Self::Message(verdict) => ReplyRef::Message(verdict),
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
    Call(&'a Verdict, CallIdUse),
    Message(&'a Verdict),
    Result(&'a Recorded),
    Compaction(u32),
    Usage(&'a Counted),
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
            ReplyRef::Call(verdict, _) | ReplyRef::Message(verdict) => {
                // A message has no call id: nothing to say of its use.
                let (kind, id_use) = match self.reply {
                    ReplyRef::Call(_, id_use) => ("call", id_use),
                    _ => ("message", CallIdUse::New),
                };
                head(&mut m, self.seq, kind, session, run)?;
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
                if let (CallIdUse::Reused { sent }, Some(warning)) = (id_use, id_use.warning()) {
                    m.serialize_entry("call_id_reused", &sent)?;
                    m.serialize_entry("call_id_warning", &warning)?;
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
            ReplyRef::Usage(counted) => {
                head(&mut m, self.seq, "usage", session, run)?;
                m.serialize_entry("counted", &true)?;
                m.serialize_entry("cost", &counted.cost.map(Cost::usd))?;
                let stop = counted.stop.as_ref().map(|r| StopOut(r, counted));
                match counted.shadow {
                    false => m.serialize_entry("stop", &stop)?,
                    true => {
                        m.serialize_entry("stop", &None::<StopOut<'_>>)?;
                        if let Some(stop) = stop {
                            m.serialize_entry("shadow_stop", &stop)?;
                        }
                    }
                }
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

/// A budget a usage used up: its detector, the percent used, what and how much of how
/// much (US dollars, tokens, calls or seconds), and the message.
struct StopOut<'a>(&'a Reading, &'a Counted);

impl Serialize for StopOut<'_> {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        let StopOut(r, counted) = *self;
        let mut m = serializer.serialize_map(Some(6))?;
        m.serialize_entry("detector", &r.scope.detector())?;
        m.serialize_entry("count", &r.percent())?;
        m.serialize_entry("measure", &r.measure)?;
        for (key, amount) in [("used", r.used), ("limit", r.limit)] {
            match r.measure {
                Measure::Cost => m.serialize_entry(key, &Cost::from_pico(amount).usd())?,
                Measure::WallSeconds => m.serialize_entry(key, &(amount as f64 / 1000.0))?,
                Measure::Tokens | Measure::Calls => m.serialize_entry(key, &amount)?,
            }
        }
        m.serialize_entry("message", counted.message.as_deref().unwrap_or_default())?;
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::Replayer;
    use loopguard::ConfigSet;

    /// A client reading `serve`'s answers gets the engine's values back: the same JSON
    /// when written out again, the same blocked result and warning note.
    #[test]
    fn answers_read_back_as_the_engine_wrote_them() {
        let config = ConfigSet::parse(
            "{ tools: { loopDetection: { enabled: true, warningThreshold: 2, criticalThreshold: 3 } } }",
        )
        .unwrap();
        let shadow = ConfigSet::parse(
            "{ tools: { loopDetection: { enabled: true, warningThreshold: 1, criticalThreshold: 2 } }, loopguard: { mode: 'shadow' } }",
        )
        .unwrap();
        for config in [config, shadow] {
            let mut replayer = Replayer::new(config, None);
            for i in 0..6u64 {
                let lines = [
                    format!(
                        r#"{{"type":"call","session":"s","run":"r","call_id":"c{i}","tool":"read","args":{{"p":1}}}}"#
                    ),
                    format!(
                        r#"{{"type":"result","session":"s","run":"r","call_id":"c{i}","result":"same"}}"#
                    ),
                    r#"{"type":"compaction","session":"s"}"#.to_owned(),
                    r#"{"type":"result","call_id":"nope"}"#.to_owned(),
                ];
                for line in &lines {
                    let answer = replayer.apply_line(i, line.as_bytes());
                    let text = serde_json::to_vec(&answer).unwrap();
                    let back = Answer::from_json(&text, "read").unwrap();
                    assert_eq!(serde_json::to_vec(&back).unwrap(), text, "{line}");
                    let (a, b) = (answer.verdict(), back.verdict());
                    assert_eq!(
                        a.map(Verdict::blocked_result),
                        b.map(Verdict::blocked_result)
                    );
                    assert_eq!(a.map(Verdict::warning_note), b.map(Verdict::warning_note));
                }
            }
        }
        // Message answers too.
        let config = ConfigSet::parse(
            "{ loopguard: { detectors: { noToolTurns: { warningThreshold: 2, criticalThreshold: 4 } } } }",
        )
        .unwrap();
        let mut replayer = Replayer::new(config, None);
        let line =
            r#"{"type":"message","session":"s","role":"tool_feedback","text":"No tool call."}"#;
        let mut words = Vec::new();
        for i in 0..5 {
            let answer = replayer.apply_line(i, line.as_bytes());
            let text = serde_json::to_vec(&answer).unwrap();
            let back = Answer::from_json(&text, "tool_feedback").unwrap();
            assert_eq!(serde_json::to_vec(&back).unwrap(), text);
            assert_eq!(
                answer.verdict().map(Verdict::warning_note),
                back.verdict().map(Verdict::warning_note)
            );
            let json: Value = serde_json::from_slice(&text).unwrap();
            assert_eq!(json["type"], "message");
            words.push(json["verdict"].as_str().unwrap().to_owned());
        }
        assert_eq!(words, ["allow", "warn", "warn", "block", "block"]);
        assert!(Answer::from_json(b"[]", "t").is_err());
        assert!(Answer::from_json(br#"{"type":"call","verdict":"block"}"#, "t").is_err());
    }
}
