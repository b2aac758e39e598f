//! The step that applies a [`Message`] to a run: `content_chanting` on the text as it
//! comes, then, once an answer is whole, `repeated_message` and `no_tool_turns` on the
//! run's messages ([`turns`](crate::detectors::turns)).
//!
//! A message is answered with a [`Verdict`], as a call is. Its detectors run only when
//! the `loopguard` block turns one of them on; a message of a run already stopped is
//! answered with the stop whatever the config. A critical finding stops the run (the
//! verdict is terminal): the words exist already, so what a block can still do is refuse
//! the next model call, and every later call and message of the run is blocked.

use crate::answers::Retried;
use crate::clock::Millis;
use crate::config::extensions::Levels;
use crate::config::EffectiveConfig;
use crate::detectors::chanting::{excerpt, Chant, ChantTrack};
use crate::detectors::turns::{Spelt, Stream};
use crate::enforcement::WarningKey;
use crate::fingerprint::{Fingerprint, OutcomeRule, Signature};
use crate::history::call_id_hash;
use crate::message::{Message, Role};
use crate::observe;
use crate::scope::Scope;
use crate::verdict::{messages, Detection, Detector, Evidence, Level, Verdict};

use super::{RunState, Stop};

/// What a detector of messages found.
struct Found {
    level: Level,
    detector: Detector,
    count: u32,
    /// The role the finding is about (the tool of its detection).
    role: Role,
    /// The repeated text's hash (the warning key).
    hash: u64,
    message: String,
}

/// The finding of a detector at `levels` for `count`.
fn leveled(levels: Option<Levels>, count: u32) -> Option<Level> {
    let levels = levels?;
    if count >= levels.critical {
        Some(Level::Critical)
    } else if count >= levels.warning {
        Some(Level::Warning)
    } else {
        None
    }
}

/// Critical before warning, `a` before `b` at one level.
fn first(a: Option<Found>, b: Option<Found>) -> Option<Found> {
    match (a, b) {
        (Some(a), Some(b)) if a.level == Level::Warning && b.level == Level::Critical => Some(b),
        (a, b) => a.or(b),
    }
}

/// The key a message's answer is kept under for retries: its id's hash, set apart from
/// call ids; a piece of a stream adds its index.
fn retry_key(id: &str, index: Option<u64>) -> u64 {
    let key = call_id_hash(id).rotate_left(29) ^ 0x6D65_7373_6167_6521;
    match index {
        Some(i) => key ^ (i.wrapping_add(1)).wrapping_mul(0x9E37_79B9_7F4A_7C15),
        None => key,
    }
}

/// What the retry cache keeps a piece of a stream under (its key is its id and index).
const PIECE: Signature = Signature::from_raw(0x7069_6563_6520_6f66_2061_2073_7472_6561);

/// What a message is compared by when it is sent again: its role, text, reasoning and
/// whether it carried calls.
fn retry_signature(message: &Message<'_>, print: u64, reasoning: u64) -> Signature {
    let calls = u128::from(message.has_tool_calls == Some(true));
    let digest = (u128::from(print) << 64 | u128::from(reasoning)) ^ calls;
    Signature::new(message.role.as_str(), Fingerprint::from_u128(digest))
}

impl RunState {
    /// Judges a message of the run: the model's answer (whole, or a piece of its stream),
    /// the harness's feedback, a prompt. Given the id of a message already answered, with
    /// the same text, this is a retry: the same verdict again, nothing changed. The verdict
    /// is logged (`tracing`, target `loopguard`).
    pub fn message(
        &mut self,
        cfg: &EffectiveConfig,
        scope: &Scope<'_>,
        message: &Message<'_>,
        now: Millis,
    ) -> Verdict {
        self.last_active = now;
        let verdict = self.judge_message(cfg, message);
        if matches!(verdict, Verdict::Allow) {
            // Most messages: nothing to log, and no verdict to move.
            return Verdict::Allow;
        }
        observe::message(scope, message.role.as_str(), &verdict);
        verdict
    }

    fn judge_message(&mut self, cfg: &EffectiveConfig, message: &Message<'_>) -> Verdict {
        if let Some(stop) = &self.stop {
            let detection = Detection {
                level: Level::Critical,
                detector: stop.detector,
                count: stop.count,
                tool: message.role.as_str().to_owned(),
                message: match (stop.detector.is_budget(), self.added6.budget.stop()) {
                    (true, Some(r)) => messages::budget_stopped_message(r),
                    _ => messages::stopped_run_message(stop.detector, &stop.tool, stop.count),
                },
                signature: Signature::new(message.role.as_str(), Fingerprint::from_u128(0)),
                evidence: Evidence::None,
            };
            return Verdict::Block {
                detection,
                terminal: true,
            };
        }
        let Some(ext) = cfg.extensions.as_deref().filter(|x| x.judges_messages()) else {
            return Verdict::Allow;
        };
        let mask = ext.masking;
        if message.role == Role::Assistant {
            if let Some(index) = message.delta {
                return self.piece(cfg, message, index);
            }
        }
        // A whole message: its print (and, for an answer, its chanting) first, then the
        // run's state.
        let streamed = match (message.role, &self.added7.turns.stream) {
            (Role::Assistant, Some(s)) => s.id == message.id.map_or(0, call_id_hash),
            _ => false,
        };
        let mut chant = None;
        let (print, reasoning) = if streamed {
            // The end of a streamed answer: its text was read piece by piece.
            let mut stream = self.added7.turns.stream.take().unwrap_or_default();
            chant = Chant::max(stream.text.finish(mask), stream.reasoning.finish(mask));
            (stream.text.print, stream.reasoning.print)
        } else if message.role == Role::Assistant && ext.content_chanting.is_some() {
            let mut text = ChantTrack::new(true);
            chant = Chant::max(text.feed(message.text, mask), text.finish(mask));
            let mut thought = ChantTrack::new(true);
            if let Some(r) = message.reasoning {
                chant = Chant::max(chant, thought.feed(r, mask));
                chant = Chant::max(chant, thought.finish(mask));
            }
            (text.print, thought.print)
        } else {
            let reasoning = message
                .reasoning
                .map_or(0, |r| ChantTrack::print_of(r, mask));
            (ChantTrack::print_of(message.text, mask), reasoning)
        };
        let signature = retry_signature(message, print, reasoning);
        let key = message.id.map(|id| retry_key(id, None));
        // As for calls: a message sent again under its id is answered again, a few times;
        // past that the id looks reused, and the message counts as new.
        let resent = match key.map(|k| self.added.answers.retried_call(k, signature)) {
            Some(Retried::Again(verdict)) => return verdict,
            Some(Retried::Reused(n)) => n,
            Some(Retried::New) | None => 0,
        };
        if !streamed && message.role == Role::Assistant {
            // An answer streamed under another id, never ended: it ends here.
            self.end_stream(cfg, false);
        }
        let found = self.said(cfg, message, print, chant);
        let verdict = self.verdict_on(cfg, found);
        if let Some(key) = key {
            self.added
                .answers
                .called(key, signature, OutcomeRule::NONE, &verdict, resent);
        }
        verdict
    }

    /// Records a whole message and runs the detectors of messages on it.
    fn said(
        &mut self,
        cfg: &EffectiveConfig,
        message: &Message<'_>,
        print: u64,
        chant: Option<Chant>,
    ) -> Option<Found> {
        let ext = cfg.extensions.as_deref()?;
        let calls = self.history.seq_of(self.history.len());
        let window = cfg.history_size as usize;
        let with_calls = message.has_tool_calls == Some(true);
        let turns = &mut self.added7.turns;
        turns.said(message.role, print, calls, with_calls, window);
        let role = message.role;
        match role {
            Role::Assistant => {
                let chanting = chant.and_then(|c| {
                    let level = leveled(ext.content_chanting, c.count)?;
                    Some(chanting_found(level, role, c))
                });
                let repeated = (print != 0 && !with_calls)
                    .then(|| {
                        let (total, unbroken) = turns.copies(print, &self.history);
                        // Every copy counts for a warning, the copies without progress
                        // between them for a block.
                        let (level, count) = match leveled(ext.repeated_message, unbroken) {
                            Some(Level::Critical) => (Level::Critical, unbroken),
                            _ => {
                                leveled(ext.repeated_message, total)?;
                                (Level::Warning, total)
                            }
                        };
                        let text = excerpt(message.text);
                        Some(Found {
                            level,
                            detector: Detector::RepeatedMessage,
                            count,
                            role,
                            hash: print,
                            message: match level {
                                Level::Critical => {
                                    messages::repeated_message_critical(count, &text)
                                }
                                _ => messages::repeated_message_warning(count, &text),
                            },
                        })
                    })
                    .flatten();
                let no_tool = (!with_calls)
                    .then(|| no_tool_found(ext.no_tool_turns, turns.streak()))
                    .flatten();
                first(first(chanting, repeated), no_tool)
            }
            Role::ToolFeedback => {
                turns.feedback(print, message.text);
                no_tool_found(ext.no_tool_turns, turns.streak()).map(|mut f| {
                    f.role = Role::ToolFeedback;
                    f
                })
            }
            _ => None,
        }
    }

    /// A piece of a streamed answer: its chanting so far. A piece sent again (its index
    /// already seen) is answered as it was: allowed, or what the retry cache kept for it
    /// (only verdicts other than allow are kept, so that a stream does not push the
    /// answers of calls out of the cache).
    fn piece(
        &mut self,
        cfg: &EffectiveConfig,
        message: &Message<'_>,
        index: Option<u64>,
    ) -> Verdict {
        let Some(ext) = cfg.extensions.as_deref() else {
            return Verdict::Allow;
        };
        let key = || message.id.zip(index).map(|(id, i)| retry_key(id, Some(i)));
        let open = self.added7.turns.stream.as_deref();
        // The pieces of one stream share an id: hashed once, then compared as spelt.
        let id = match open {
            Some(s) if message.id.is_some() && s.spelt.0.as_deref() == message.id => s.id,
            _ => message.id.map_or(0, call_id_hash),
        };
        if open.is_some_and(|s| s.id != id) {
            self.end_stream(cfg, false);
        }
        // Segments are compared only for `content_chanting`; without it a stream makes
        // its print alone.
        let chants = ext.content_chanting.is_some();
        let stream = self.added7.turns.stream.get_or_insert_with(|| {
            Box::new(Stream {
                id,
                next: 0,
                text: ChantTrack::new(chants),
                reasoning: ChantTrack::new(chants),
                spelt: Spelt(None),
            })
        });
        if stream.spelt.0.is_none() {
            stream.spelt = Spelt(message.id.map(Box::from));
        }
        if let Some(index) = index {
            if index < stream.next {
                // Sent again: what it was answered, and nothing changes (its index was
                // read already, so past the retries it is allowed, not judged again).
                return match key().map(|k| self.added.answers.retried_call(k, PIECE)) {
                    Some(Retried::Again(verdict)) => verdict,
                    _ => Verdict::Allow,
                };
            }
            stream.next = index + 1;
        }
        let mask = ext.masking;
        let mut chant = stream.text.feed(message.text, mask);
        if let Some(r) = message.reasoning {
            chant = Chant::max(chant, stream.reasoning.feed(r, mask));
        }
        let found = chant.and_then(|c| {
            let level = leveled(ext.content_chanting, c.count)?;
            Some(chanting_found(level, Role::Assistant, c))
        });
        let Some(found) = found else {
            // Most pieces: nothing found, and nothing to keep for a retry.
            return Verdict::Allow;
        };
        let verdict = self.verdict_on(cfg, Some(found));
        if let Some(key) = (verdict != Verdict::Allow).then(key).flatten() {
            self.added
                .answers
                .called(key, PIECE, OutcomeRule::NONE, &verdict, 0);
        }
        verdict
    }

    /// Ends the answer being streamed, if one is: it is recorded as a whole answer
    /// (`with_calls`: a tool call followed it). What its last line adds is not judged:
    /// nothing waits for the answer any more.
    pub(super) fn end_stream(&mut self, cfg: &EffectiveConfig, with_calls: bool) {
        let Some(mut stream) = self.added7.turns.stream.take() else {
            return;
        };
        let mask = cfg
            .extensions
            .as_deref()
            .map_or(crate::masking::MaskSet::NONE, |x| x.masking);
        stream.text.finish(mask);
        let calls = self.history.seq_of(self.history.len());
        let window = cfg.history_size as usize;
        self.added7.turns.said(
            Role::Assistant,
            stream.text.print,
            calls,
            with_calls,
            window,
        );
    }

    /// The verdict on a message for what its detectors found: a warning surfaced once per
    /// multiple of its threshold and repeated text; a critical finding stops the run.
    fn verdict_on(&mut self, cfg: &EffectiveConfig, found: Option<Found>) -> Verdict {
        let Some(f) = found else {
            return Verdict::Allow;
        };
        let role = f.role.as_str();
        let signature = Signature::new(role, Fingerprint::from_u128(u128::from(f.hash)));
        let detection = Detection {
            level: f.level,
            detector: f.detector,
            count: f.count,
            tool: role.to_owned(),
            message: f.message,
            signature,
            evidence: Evidence::None,
        };
        let critical = f.level == Level::Critical;
        if cfg.is_shadow() {
            return Verdict::Shadow {
                detection,
                terminal: critical,
            };
        }
        if !critical {
            let ext = cfg.extensions.as_deref();
            let threshold = match f.detector {
                Detector::RepeatedMessage => ext.and_then(|x| x.repeated_message),
                Detector::ContentChanting => ext.and_then(|x| x.content_chanting),
                _ => ext.and_then(|x| x.no_tool_turns),
            }
            .map_or(1, |l| l.warning);
            let key = WarningKey::Other(f.detector, signature);
            let notify = self.notify.surface(key, f.count, threshold);
            return Verdict::Warn { detection, notify };
        }
        self.stop = Some(Stop {
            detector: f.detector,
            count: f.count,
            tool: Role::Assistant.as_str().to_owned(),
        });
        Verdict::Block {
            detection,
            terminal: true,
        }
    }
}

/// A `content_chanting` finding.
fn chanting_found(level: Level, role: Role, c: Chant) -> Found {
    let message = match level {
        Level::Critical => messages::chanting_critical(role.as_str(), c.count, &c.excerpt),
        _ => messages::chanting_warning(role.as_str(), c.count, &c.excerpt),
    };
    Found {
        level,
        detector: Detector::ContentChanting,
        count: c.count,
        role,
        hash: c.hash,
        message,
    }
}

/// A `no_tool_turns` finding for a row of `streak` identical feedbacks of print `print`
/// whose text starts with `text`.
fn no_tool_found(levels: Option<Levels>, (streak, print, text): (u32, u64, &str)) -> Option<Found> {
    let level = leveled(levels, streak)?;
    Some(Found {
        level,
        detector: Detector::NoToolTurns,
        count: streak,
        role: Role::Assistant,
        hash: print,
        message: match level {
            Level::Critical => messages::no_tool_turns_critical(streak, text),
            _ => messages::no_tool_turns_warning(streak, text),
        },
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::budget::SessionState;
    use crate::config::ConfigSet;
    use crate::ticket::Call;
    use crate::{Outcome, RunState};
    use serde_json::json;

    fn scope() -> Scope<'static> {
        Scope::new("s").with_run(Some("r"))
    }

    fn config(detectors: &str) -> ConfigSet {
        ConfigSet::parse(&format!(
            "{{ tools: {{ loopDetection: {{ enabled: true }} }}, loopguard: {{ masking: {{}}, detectors: {{ {detectors} }} }} }}"
        ))
        .unwrap()
    }

    fn say(state: &mut RunState, cfg: &EffectiveConfig, m: Message<'_>) -> Verdict {
        state.message(cfg, &scope(), &m, Millis::new(0))
    }

    fn word(v: &Verdict) -> &'static str {
        match v {
            Verdict::Allow => "allow",
            Verdict::Warn { .. } => "warn",
            Verdict::Block { .. } => "block",
            _ => "shadow",
        }
    }

    /// A call with a result, made between two answers.
    fn call(state: &mut RunState, cfg: &EffectiveConfig, i: usize, out: &str) {
        let args = json!({ "path": format!("/f{i}") });
        let ticket = state.begin(
            &mut SessionState::default(),
            cfg,
            &scope(),
            &Call::new("read", &args),
            Millis::new(0),
        );
        let out = json!(out);
        state
            .finish(
                &mut SessionState::default(),
                cfg,
                ticket,
                Outcome::Result(&out),
                Millis::new(0),
            )
            .unwrap();
    }

    /// A run a budget stopped answers its messages with the budget's stop.
    #[test]
    fn a_message_of_a_run_a_budget_stopped_names_the_budget() {
        let set = ConfigSet::parse(
            "{ tools: { loopDetection: { enabled: true } }, loopguard: { budgets: { run: { tokens: 100 }, withoutProgress: { enabled: false } } } }",
        )
        .unwrap();
        let cfg = set.global();
        let mut state = RunState::default();
        let usage = crate::Usage {
            input_tokens: 90,
            output_tokens: 20,
            ..crate::Usage::default()
        };
        let counted = state
            .usage(
                &mut SessionState::default(),
                cfg,
                &scope(),
                &usage,
                Millis::new(0),
            )
            .unwrap();
        assert!(counted.stop.is_some() && !counted.shadow);
        let v = say(
            &mut state,
            cfg,
            Message::assistant("Next, I will read the file."),
        );
        assert!(v.is_blocked());
        let text = &v.detection().unwrap().message;
        assert!(
            text.contains("run_budget: it used up its token budget")
                && text.contains("do not call the model again")
                && !text.contains("repeated"),
            "{text}"
        );
    }

    #[test]
    fn the_same_answer_blocks_only_without_progress() {
        let set = config("repeatedMessage: { warningThreshold: 3, criticalThreshold: 4 }");
        let cfg = set.global();
        let answer = Message::assistant("I cannot find the config file, please check the path.");
        // Calls with new outcomes between the copies: progress, so warnings only.
        let mut state = RunState::default();
        let mut got = Vec::new();
        for i in 0..6 {
            got.push(word(&say(&mut state, cfg, answer)));
            call(&mut state, cfg, i, &format!("content {i}"));
        }
        assert_eq!(got, ["allow", "allow", "warn", "warn", "warn", "warn"]);
        // Nothing in between but the same feedback (new only the first time): 4 copies
        // since, blocked, and the run stopped.
        let mut state = RunState::default();
        let mut got = Vec::new();
        for _ in 0..6 {
            got.push(word(&say(&mut state, cfg, answer)));
            let _ = say(
                &mut state,
                cfg,
                Message::tool_feedback("Please use a tool."),
            );
        }
        assert_eq!(got, ["allow", "allow", "warn", "warn", "block", "block"]);
        let args = json!({});
        let v = state.begin(
            &mut SessionState::default(),
            cfg,
            &scope(),
            &Call::new("read", &args),
            Millis::new(0),
        );
        assert!(v.verdict().is_blocked());
        let text = &v.verdict().detection().unwrap().message;
        assert!(
            text.contains("repeated_message") && text.contains("read"),
            "{text}"
        );
        // Whitespace and volatile tokens do not make another answer.
        let mut state = RunState::default();
        for (i, t) in [
            "run 1f0c9a2e-0000-4000-8000-000000000001 failed",
            "run  1f0c9a2e-0000-4000-8000-000000000002   failed  \n\n",
        ]
        .iter()
        .enumerate()
        {
            let v = say(&mut state, cfg, Message::assistant(t));
            assert_eq!(word(&v), "allow", "{i}");
        }
        assert_eq!(
            word(&say(
                &mut state,
                cfg,
                Message::assistant("run 00000000-0000-4000-8000-00000000000f failed")
            )),
            "warn"
        );
        // Answers that carry tool calls are the call detectors' business.
        let mut state = RunState::default();
        for _ in 0..6 {
            let v = say(&mut state, cfg, answer.with_tool_calls(Some(true)));
            assert_eq!(word(&v), "allow");
        }
    }

    #[test]
    fn the_same_feedback_in_a_row_blocks() {
        let set = config("noToolTurns: { warningThreshold: 2, criticalThreshold: 4 }");
        let cfg = set.global();
        let mut state = RunState::default();
        let feedback = Message::tool_feedback("No tool calls found in the response.");
        let mut got = Vec::new();
        for i in 0..3 {
            let answer = Message::assistant(if i % 2 == 0 { "Done." } else { "All done." });
            got.push(word(&say(
                &mut state,
                cfg,
                answer.with_tool_calls(Some(false)),
            )));
            got.push(word(&say(&mut state, cfg, feedback)));
        }
        assert_eq!(got, ["allow", "allow", "allow", "warn", "warn", "warn"]);
        // A tool call ends the row; so does another feedback.
        call(&mut state, cfg, 0, "x");
        assert_eq!(word(&say(&mut state, cfg, feedback)), "allow");
        assert_eq!(
            word(&say(
                &mut state,
                cfg,
                Message::tool_feedback("Two code blocks found.")
            )),
            "allow"
        );
        let got: Vec<_> = (0..4)
            .map(|_| word(&say(&mut state, cfg, feedback)))
            .collect();
        assert_eq!(got, ["allow", "warn", "warn", "block"]);
        let v = say(&mut state, cfg, Message::assistant("again"));
        assert!(matches!(v, Verdict::Block { terminal: true, .. }));
    }

    #[test]
    fn a_chanting_stream_is_stopped_and_retried_pieces_count_once() {
        let set = config("contentChanting: { warningThreshold: 4, criticalThreshold: 8 }");
        let cfg = set.global();
        let mut state = RunState::default();
        let piece = "I will now run the tests again to be sure. ";
        let mut got = Vec::new();
        for i in 0..9u64 {
            let m = Message::assistant(piece)
                .with_id(Some("m1"))
                .as_delta(Some(i));
            got.push(word(&say(&mut state, cfg, m)));
            // Every piece sent twice: the second is a retry.
            let again = say(&mut state, cfg, m);
            assert_eq!(word(&again), *got.last().unwrap());
        }
        // The pieces end no line: the text is judged once a line or LINE_CAP is complete.
        assert!(got.iter().all(|w| *w == "allow"), "{got:?}");
        let end = Message::assistant("\n")
            .with_id(Some("m1"))
            .as_delta(Some(9));
        let v = say(&mut state, cfg, end);
        assert!(v.is_blocked(), "{v:?}");
        assert_eq!(v.detection().unwrap().count, 9);
        assert_eq!(v.detection().unwrap().detector, Detector::ContentChanting);
        // The same text in whole answers with a newline per sentence.
        let mut state = RunState::default();
        let text = format!("{piece}\n").repeat(5);
        let v = say(&mut state, cfg, Message::assistant(&text));
        assert_eq!(word(&v), "warn");
        assert_eq!(
            v.detection().unwrap().excerpt(),
            Some("I will now run the tests again to be sure.")
        );
    }

    /// Without `content_chanting`, a streamed answer makes its print alone (no segment is
    /// cut, hashed or kept), and a repeated answer is still found by its print.
    #[test]
    fn a_stream_without_content_chanting_makes_its_print_alone() {
        let text = "The build fails because the import is missing. I will add it.\nThen I run the tests.\n";
        for (detectors, compares) in [
            ("repeatedMessage: { warningThreshold: 2 }", false),
            (
                "repeatedMessage: { warningThreshold: 2 }, contentChanting: {}",
                true,
            ),
        ] {
            let set = config(detectors);
            let cfg = set.global();
            let mut state = RunState::default();
            let mut ends = Vec::new();
            for id in ["m1", "m2"] {
                for (i, piece) in text.as_bytes().chunks(16).enumerate() {
                    let piece = std::str::from_utf8(piece).unwrap();
                    let m = Message::assistant(piece)
                        .with_id(Some(id))
                        .as_delta(Some(i as u64));
                    assert_eq!(word(&say(&mut state, cfg, m)), "allow");
                    let stream = state.added7.turns.stream.as_ref().unwrap();
                    assert_eq!(stream.text.compares(), compares, "{detectors}");
                }
                let end = Message::assistant(text).with_id(Some(id));
                ends.push(word(&say(&mut state, cfg, end)));
            }
            assert_eq!(ends, ["allow", "warn"], "{detectors}");
        }
    }

    #[test]
    fn every_detection_quotes_its_text() {
        let set = config(
            "repeatedMessage: { warningThreshold: 2 }, noToolTurns: { warningThreshold: 2 }, contentChanting: { warningThreshold: 3 }",
        );
        let cfg = set.global();
        let mut state = RunState::default();
        let quoted = "He said \"no\" (twice) and left.";
        let _ = say(&mut state, cfg, Message::assistant(quoted));
        let v = say(&mut state, cfg, Message::assistant(quoted));
        assert_eq!(v.detection().unwrap().excerpt(), Some(quoted));
        let _ = say(&mut state, cfg, Message::tool_feedback("Use a tool."));
        let v = say(&mut state, cfg, Message::tool_feedback("Use a tool."));
        assert_eq!(v.detection().unwrap().detector, Detector::NoToolTurns);
        assert_eq!(v.detection().unwrap().excerpt(), Some("Use a tool."));
        let chant = "The same line comes back every time.\n".repeat(4);
        let v = say(&mut state, cfg, Message::assistant(&chant));
        assert_eq!(
            v.detection().unwrap().excerpt(),
            Some("The same line comes back every time.")
        );
    }

    #[test]
    fn a_retried_message_counts_once_and_state_round_trips() {
        let set = config(
            "repeatedMessage: { warningThreshold: 2, criticalThreshold: 3 }, contentChanting: {}",
        );
        let cfg = set.global();
        let mut state = RunState::default();
        let m = Message::assistant("Same words.").with_id(Some("a1"));
        for _ in 0..5 {
            assert_eq!(word(&say(&mut state, cfg, m)), "allow");
        }
        let open = Message::assistant("Half a line")
            .with_id(Some("a2"))
            .as_delta(Some(0));
        let _ = say(&mut state, cfg, open);
        let bytes = state.to_bytes();
        let mut back = RunState::from_bytes(&bytes).unwrap();
        assert_eq!(back, state);
        // Both go on the same way: the stream ends and is a second copy.
        let end = Message::assistant("").with_id(Some("a2"));
        let m2 = Message::assistant("Same words.").with_id(Some("a3"));
        for s in [&mut state, &mut back] {
            let _ = say(s, cfg, end);
            assert_eq!(word(&say(s, cfg, m2)), "warn");
        }
        assert_eq!(state, back);
    }

    /// A stream's id is matched by its spelling once hashed, a cache a state read back from
    /// bytes does not have: both go on alike, and a piece of another id ends the stream.
    #[test]
    fn a_stream_goes_on_alike_after_a_round_trip() {
        let set = config(
            "repeatedMessage: { warningThreshold: 2, criticalThreshold: 3 }, contentChanting: {}",
        );
        let cfg = set.global();
        let mut state = RunState::default();
        let piece = |id, i| {
            Message::assistant("The same words again.\n")
                .with_id(Some(id))
                .as_delta(Some(i))
        };
        let _ = say(&mut state, cfg, piece("s1", 0));
        let mut back = RunState::from_bytes(&state.to_bytes()).unwrap();
        for s in [&mut state, &mut back] {
            assert_eq!(word(&say(s, cfg, piece("s1", 1))), "allow");
            // Sent again: a retry, nothing changes.
            assert_eq!(word(&say(s, cfg, piece("s1", 1))), "allow");
            // Another id: the first stream ends (its print logged), a second begins.
            let _ = say(s, cfg, piece("s2", 0));
            let _ = say(s, cfg, Message::assistant("").with_id(Some("s2")));
            // The first stream holds both its pieces (one stream across the round trip):
            // the same two lines again are its second copy.
            let v = say(
                s,
                cfg,
                Message::assistant("The same words again.\n".repeat(2).as_str()),
            );
            assert_eq!(word(&v), "warn");
        }
        assert_eq!(state, back);
        assert_eq!(state.to_bytes(), back.to_bytes());
    }

    /// As for calls: a host that sends every message under one id is answered as retrying
    /// only `RETRIES_PER_CALL` times; every later copy counts, and the loop is caught.
    #[test]
    fn a_message_id_reused_past_the_retries_counts_as_new() {
        let set = config("repeatedMessage: { warningThreshold: 2, criticalThreshold: 3 }");
        let cfg = set.global();
        let mut state = RunState::default();
        let m = Message::assistant("Same words.").with_id(Some("m"));
        let retries = crate::answers::RETRIES_PER_CALL as usize;
        let words: Vec<&str> = (0..retries + 3)
            .map(|_| word(&say(&mut state, cfg, m)))
            .collect();
        let mut want = vec!["allow"; retries + 1];
        want.extend(["warn", "block"]);
        assert_eq!(words, want);
    }

    #[test]
    fn shadow_mode_reports_and_never_stops() {
        let set = ConfigSet::parse(
            "{ loopguard: { mode: 'shadow', detectors: { noToolTurns: { warningThreshold: 1, criticalThreshold: 2 } } } }",
        )
        .unwrap();
        let cfg = set.global();
        let mut state = RunState::default();
        for _ in 0..4 {
            let v = say(&mut state, cfg, Message::tool_feedback("Use a tool."));
            assert!(!v.is_blocked());
        }
        assert!(state.stop().is_none());
    }

    #[test]
    fn without_the_detectors_messages_are_allowed_and_kept_nowhere() {
        let set = ConfigSet::enabled_defaults();
        let cfg = set.global();
        let mut state = RunState::default();
        for _ in 0..50 {
            assert_eq!(
                say(&mut state, cfg, Message::tool_feedback("Use a tool.")),
                Verdict::Allow
            );
        }
        assert_eq!(
            state,
            RunState {
                last_active: state.last_active,
                ..RunState::default()
            }
        );
    }
}
