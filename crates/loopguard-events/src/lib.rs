//! The loopguard event protocol (SPEC §7, the replay format): events in, answers out.
//!
//! [`Replayer`] applies [`Event`]s to a [`loopguard::Guard`] and produces the [`Answer`]s
//! that `loopguard replay` prints and that `loopguard serve` returns; [`replay`] streams a
//! whole input, line by line, in bounded memory.
//!
//! ```
//! use loopguard::ConfigSet;
//! use loopguard_events::{replay, Replayer};
//!
//! let input = concat!(
//!     r#"{"type":"call","session":"s","call_id":"c1","tool":"read","args":{"path":"/a"}}"#, "\n",
//!     r#"{"type":"result","session":"s","call_id":"c1","result":{"content":[]}}"#, "\n",
//!     "not json\n",
//! );
//! let mut out = Vec::new();
//! let mut replayer = Replayer::new(ConfigSet::default(), None);
//! let summary = replay(&mut replayer, input.as_bytes(), &mut out, 1 << 20)?;
//! assert_eq!(summary.invalid, 1);
//! let text = String::from_utf8(out).unwrap();
//! assert!(text.starts_with(r#"{"seq":1,"type":"call","session":"s","run":null,"verdict":"allow"}"#));
//! # Ok::<(), std::io::Error>(())
//! ```

#![forbid(unsafe_code)]
#![warn(missing_docs)]

mod answer;
mod cost;
mod event;
pub mod lines;
pub mod usage;
mod view;

use std::io::{self, BufRead, Write};

use loopguard::json::{Json, Tape};
use loopguard::{
    Call, CallRef, Clock, ConfigSet, EffectiveConfig, Guard, Limits, ManualClock, Millis, RunState,
    Scope, SessionState, Ticket,
};

use answer::View;
pub use answer::{Answer, Reply};
pub use cost::{
    is_readable_part, parse_cost, value_tree_cost, MAX_COST_PER_BODY_BYTE, MAX_PART_COST,
};
pub use event::{
    from_value, json_fault, kind_of, message_of, parse_line, Event, Ids, OwnedMessage,
    OwnedOutcome, OwnedUsage, MAX_DEPTH,
};
pub use lines::{Line, LineReader};
pub use view::{from_raw, parse_raw, EventRef, IdsRef, RawEvent};

/// Default longest line `replay` reads (256 MiB); longer lines are reported and skipped.
pub const DEFAULT_MAX_LINE: usize = 256 << 20;

/// Longest `session`, `run`, `agent`, `call_id` and `tool` the front ends that keep state
/// take as given, in bytes: `serve` refuses longer ones by default, the hooks (which cannot
/// refuse without letting the call through) keep a bounded digest form of them.
pub const MAX_ID_BYTES: usize = 256;

/// Applies events to a guard.
#[derive(Debug)]
pub struct Replayer<C: Clock = ManualClock> {
    guard: Guard<C>,
    default_agent: Option<String>,
    /// Where lines are tokenized, reused from one line to the next.
    tape: Tape,
}

impl Replayer<ManualClock> {
    /// A replayer over a fresh in-memory guard whose clock stands still, so a replay's
    /// answers never depend on how fast it runs. `default_agent` applies to events that
    /// name none (`--agent`).
    pub fn new(config: ConfigSet, default_agent: Option<String>) -> Self {
        let guard = Guard::with_clock(config, Limits::default(), ManualClock::new(Millis::ZERO));
        Self::with_guard(guard, default_agent)
    }
}

impl<C: Clock> Replayer<C> {
    /// A replayer over an existing guard.
    pub fn with_guard(guard: Guard<C>, default_agent: Option<String>) -> Self {
        Self {
            guard,
            default_agent: default_agent.filter(|a| !loopguard::text::is_blank(a)),
            tape: Tape::new(),
        }
    }

    /// The guard.
    pub fn guard(&self) -> &Guard<C> {
        &self.guard
    }

    /// The guard, mutably (to swap its config, end runs, …).
    pub fn guard_mut(&mut self) -> &mut Guard<C> {
        &mut self.guard
    }

    /// Parses and applies one line: read in place ([`parse_raw`]), no value tree.
    pub fn apply_line(&mut self, seq: u64, line: &[u8]) -> Answer {
        match parse_raw(line, &mut self.tape) {
            Ok(event) => {
                let scope = event.scope(self.default_agent.as_deref());
                apply_to_guard(&mut self.guard, &scope, &event).into_answer(seq, &scope)
            }
            Err(error) => Answer::Invalid { seq, error },
        }
    }

    /// [`Replayer::apply_line`], handing the answer to `write` with its ids borrowed
    /// from the line: nothing is copied or allocated for a valid event.
    fn apply_line_to<T>(&mut self, seq: u64, line: &[u8], write: impl FnOnce(&View<'_>) -> T) -> T {
        match parse_raw(line, &mut self.tape) {
            Ok(event) => {
                let scope = event.scope(self.default_agent.as_deref());
                let reply = apply_to_guard(&mut self.guard, &scope, &event);
                write(&reply.view(seq, &scope))
            }
            Err(error) => write(&View::invalid(seq, &error)),
        }
    }

    /// Applies one event in any JSON view: an owned [`Event`] ([`Event::as_ref`]), one read
    /// in place by a transcript reader, one a binding built from its own values.
    pub fn apply<'a, J: Json<'a>>(&mut self, seq: u64, event: &EventRef<'a, J>) -> Answer {
        let scope = event.scope(self.default_agent.as_deref());
        apply_to_guard(&mut self.guard, &scope, event).into_answer(seq, &scope)
    }

    /// Applies one event and gives the engine's reply without the event's ids (what a
    /// binding turns into its own objects).
    pub fn reply<'a, J: Json<'a>>(&mut self, event: &EventRef<'a, J>) -> Reply {
        let scope = event.scope(self.default_agent.as_deref());
        apply_to_guard(&mut self.guard, &scope, event)
    }

    /// Begins the ticket of the `call` event `line`, for a host that keeps the ticket
    /// while its tool runs ([`Guard::begin`]) instead of leaving it with the run; any
    /// other line is an error (the answer `replay` would print for it, or a word about
    /// the event's type).
    pub fn begin_line(&mut self, line: &[u8]) -> Result<Ticket, String> {
        let event = parse_raw(line, &mut self.tape)?;
        let scope = event.scope(self.default_agent.as_deref());
        let EventRef::Call {
            call_id,
            tool,
            args,
            batch,
            ..
        } = event
        else {
            return Err(format!(
                "expected a call event, not a {} event",
                event.kind()
            ));
        };
        let guard = &mut self.guard;
        Ok(match args {
            Some(args) => guard.begin(&scope, &call_of(tool, args, call_id, batch)),
            None => guard.begin(&scope, &call_of(tool, &*EMPTY_ARGS, call_id, batch)),
        })
    }
}

/// The engine's call for a call event's members (blank ids count as absent).
fn call_of<'a, J>(
    tool: &'a str,
    args: J,
    call_id: Option<&'a str>,
    batch: Option<&'a str>,
) -> Call<'a, J> {
    Call::with_args(tool, args)
        .with_id(call_id)
        .with_batch(batch)
}

/// [`apply_event`] on the run of `scope` in `guard`, with the agent tree's steps around a
/// sub-agent's call ([`Guard::link_call`], [`Guard::child_blocked`]).
pub fn apply_to_guard<'a, J: Json<'a>, C: Clock>(
    guard: &mut Guard<C>,
    scope: &Scope<'_>,
    event: &EventRef<'a, J>,
) -> Reply {
    let child_call = match *event {
        EventRef::Call {
            tool,
            args,
            call_id,
            batch,
            ..
        } if scope.parent_session().is_some() => {
            match args {
                Some(args) => guard.link_call(scope, &call_of(tool, args, call_id, batch)),
                None => guard.link_call(scope, &call_of(tool, &*EMPTY_ARGS, call_id, batch)),
            }
            true
        }
        _ => false,
    };
    let reply = guard.with_run(scope, |cfg, run, session, now| {
        apply_event(run, session, cfg, scope, event, now)
    });
    if let (true, Reply::Call(verdict, _)) = (child_call, &reply) {
        if let Some(d) = verdict.detection().filter(|_| verdict.is_blocked()) {
            guard.child_blocked(scope, d.signature);
        }
    }
    reply
}

/// [`apply_event`] for a front end that holds its sessions' states apart (a store, the
/// hooks' database): `apply` applies `event` to its run, and around a sub-agent's call the
/// agent tree's steps reach the sessions it needs through `states`
/// ([`loopguard::tree::link_child`] before, [`loopguard::tree::child_blocked`] after a
/// block). What [`apply_to_guard`] does in memory.
pub fn apply_with_tree<'a, J: Json<'a>, S: loopguard::tree::SessionStates>(
    states: &mut S,
    cfg: &EffectiveConfig,
    scope: &Scope<'_>,
    event: &EventRef<'a, J>,
    now: Millis,
    apply: impl FnOnce(&mut S) -> Result<Reply, S::Error>,
) -> Result<Reply, S::Error> {
    let tree = match (event, cfg.agent_tree()) {
        (EventRef::Call { tool, args, .. }, Some(tree)) if scope.parent_session().is_some() => {
            // Fingerprinted only at the sub-agent's first call.
            let signature = || match args {
                Some(args) => loopguard::CallPrint::for_config(tool, *args, cfg).signature,
                None => loopguard::CallPrint::for_config(tool, &*EMPTY_ARGS, cfg).signature,
            };
            loopguard::tree::link_child(states, &tree, scope, signature, now)?;
            true
        }
        _ => false,
    };
    let reply = apply(states)?;
    if let (true, Reply::Call(verdict, _)) = (tree, &reply) {
        if let Some(d) = verdict.detection().filter(|_| verdict.is_blocked()) {
            loopguard::tree::child_blocked(states, scope, d.signature, now)?;
        }
    }
    Ok(reply)
}

/// Applies one event to the state of its run: the one way into the engine for every front
/// end that reads events (replay, the sidecar and its durable stores, the agent hooks,
/// `scan`, the bindings' `applyEvent`). `run` must be the state of `scope`'s run (the
/// event's ids, with a default agent applied), `session` the state of its session, and
/// `cfg` the config of its agent.
///
/// Each kind of event is one step of the engine: a `call` begins the call's [`Ticket`]
/// ([`RunState::begin`]) and leaves it with the run as the call's pending record; a
/// `result` resumes the ticket of the call it names ([`RunState::resume`]) and finishes
/// it ([`RunState::finish`]); a `compaction` arms the post-compaction guard; a `usage`
/// counts what a model response used ([`RunState::usage`]); a `message` is judged by the
/// detectors of messages ([`RunState::message`]). The engine logs each answer.
pub fn apply_event<'a, J: Json<'a>>(
    run: &mut RunState,
    session: &mut SessionState,
    cfg: &EffectiveConfig,
    scope: &Scope<'_>,
    event: &EventRef<'a, J>,
    now: Millis,
) -> Reply {
    match *event {
        EventRef::Call {
            call_id,
            tool,
            args,
            batch,
            ..
        } => {
            let ticket = match args {
                Some(args) => run.begin(
                    session,
                    cfg,
                    scope,
                    &call_of(tool, args, call_id, batch),
                    now,
                ),
                None => run.begin(
                    session,
                    cfg,
                    scope,
                    &call_of(tool, &*EMPTY_ARGS, call_id, batch),
                    now,
                ),
            };
            let id_use = ticket.id_use();
            Reply::Call(ticket.into_verdict(), id_use)
        }
        EventRef::Result {
            call_id,
            tool,
            args,
            outcome,
            ..
        } => {
            let call_id = call_id.and_then(loopguard::text::non_blank);
            let by_id = match (tool, call_id) {
                (None, Some(id)) => Some(id),
                (Some(_), Some(id)) if takes_pending_args(run, event) => Some(id),
                _ => None,
            };
            let ticket = match (by_id, tool, args) {
                (Some(id), _, _) => run.resume(cfg, scope, CallRef::id(id)),
                (None, Some(tool), Some(args)) => run.resume(
                    cfg,
                    scope,
                    CallRef::Call(call_of(tool, args, call_id, None)),
                ),
                (None, Some(tool), None) => run.resume(
                    cfg,
                    scope,
                    CallRef::Call(call_of(tool, &*EMPTY_ARGS, call_id, None)),
                ),
                (None, None, _) => {
                    return Reply::Invalid(
                        "result without tool needs the call_id of a pending call".into(),
                    )
                }
            };
            match run.finish(session, cfg, ticket, outcome, now) {
                Ok(recorded) => Reply::Result(recorded),
                Err(e) => Reply::Invalid(e.to_string()),
            }
        }
        EventRef::Compaction { .. } => Reply::Compaction(run.compaction(cfg, scope, now)),
        EventRef::Usage { usage, .. } => match run.usage(session, cfg, scope, &usage, now) {
            Ok(counted) => Reply::Usage(counted),
            Err(e) => Reply::Invalid(e.to_string()),
        },
        EventRef::Message { ref message, .. } => {
            Reply::Message(run.message(cfg, scope, message, now))
        }
    }
}

/// Whether `event` is a result that gives its tool but not its arguments and names, by its
/// `call_id`, a call of that tool still pending in `run`: the call's own fingerprint then
/// stands for the arguments (a host that kept nothing else of the call can send that much).
/// Any other result without arguments is read as having `{}`.
fn takes_pending_args<'a, J: Json<'a>>(run: &RunState, event: &EventRef<'a, J>) -> bool {
    let EventRef::Result {
        tool: Some(tool),
        args: None,
        call_id: Some(id),
        ..
    } = *event
    else {
        return false;
    };
    loopguard::text::non_blank(id)
        .and_then(|id| run.pending_call(id))
        .is_some_and(|(pending_tool, _)| pending_tool == loopguard::text::trim(tool))
}

/// The args of a call that gives none: `{}`.
static EMPTY_ARGS: std::sync::LazyLock<serde_json::Value> =
    std::sync::LazyLock::new(|| serde_json::Value::Object(serde_json::Map::new()));

/// Totals of a replay.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Summary {
    /// Physical lines read.
    pub lines: u64,
    /// Valid events applied.
    pub events: u64,
    /// Lines answered with an error.
    pub invalid: u64,
}

/// Streams `input` through `replayer`, writing one JSON answer per non-blank line to
/// `output`. Lines longer than `max_line` bytes are answered with an error and skipped;
/// from a pipe, such a line is held until it passes the limit (use [`replay_lines`] with
/// a [`LineReader::seekable`] input to skip it unheld). Only I/O errors stop the replay.
pub fn replay<C: Clock>(
    replayer: &mut Replayer<C>,
    input: impl BufRead,
    output: impl Write,
    max_line: usize,
) -> io::Result<Summary> {
    replay_lines(replayer, LineReader::new(input, max_line), output)
}

/// [`replay`] over lines already set up: from a file, `LineReader::seekable` skips an
/// over-long line without holding it.
pub fn replay_lines<C: Clock, R: BufRead>(
    replayer: &mut Replayer<C>,
    mut lines: LineReader<R>,
    mut output: impl Write,
) -> io::Result<Summary> {
    let mut summary = Summary::default();
    let max_line = lines.max();
    while let Some(line) = lines.next_line()? {
        summary.lines += 1;
        let seq = summary.lines;
        let mut write = |answer: &View<'_>| -> io::Result<bool> {
            serde_json::to_writer(&mut output, answer)?;
            output.write_all(b"\n")?;
            Ok(answer.is_error())
        };
        let error = match line {
            Line::TooLong { len, .. } => {
                let error = format!("line is {len} bytes long, more than the limit of {max_line}");
                write(&View::invalid(seq, &error))?
            }
            Line::Text { bytes, .. } => {
                if bytes.iter().all(u8::is_ascii_whitespace) {
                    continue;
                }
                replayer.apply_line_to(seq, bytes, write)?
            }
        };
        if error {
            summary.invalid += 1;
        } else {
            summary.events += 1;
        }
    }
    output.flush()?;
    Ok(summary)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn run(input: &[u8], max: usize) -> (Summary, Vec<serde_json::Value>) {
        let mut out = Vec::new();
        let mut r = Replayer::new(ConfigSet::default(), None);
        let s = replay(&mut r, input, &mut out, max).unwrap();
        let answers = out
            .split(|&b| b == b'\n')
            .filter(|l| !l.is_empty())
            .map(|l| serde_json::from_slice(l).unwrap())
            .collect();
        (s, answers)
    }

    #[test]
    fn blank_lines_count_but_do_not_answer() {
        let (s, a) = run(b"\n  \r\n{\"type\":\"compaction\"}\n\n", 1000);
        assert_eq!(s.lines, 4);
        assert_eq!(a.len(), 1);
        assert_eq!(a[0]["seq"], 3);
        assert_eq!(a[0]["armed"], 3);
    }

    #[test]
    fn long_lines_are_skipped_unbuffered() {
        let mut input = b"{\"type\":\"compaction\"}\n".to_vec();
        input.extend(std::iter::repeat_n(b'x', 5000));
        input.extend(b"\n{\"type\":\"compaction\"}");
        let (s, a) = run(&input, 100);
        assert_eq!(
            s,
            Summary {
                lines: 3,
                events: 2,
                invalid: 1
            }
        );
        assert!(a[1]["error"].as_str().unwrap().contains("5000 bytes"));
        assert_eq!(a[2]["seq"], 3);
    }

    #[test]
    fn truncated_last_line_is_an_error_line() {
        let (s, a) = run(
            b"{\"type\":\"compaction\"}\n{\"type\":\"call\",\"tool\":",
            1000,
        );
        assert_eq!(s.invalid, 1);
        assert_eq!(a[1]["seq"], 2);
        assert!(a[1]["error"].as_str().unwrap().starts_with("invalid JSON"));
    }

    #[test]
    fn result_by_id_and_its_errors() {
        let input = concat!(
            r#"{"type":"call","call_id":"c1","tool":"read","args":{"p":1}}"#,
            "\n",
            r#"{"type":"result","call_id":"c1","result":"ok"}"#,
            "\n",
            r#"{"type":"result","call_id":"c1","result":"changed"}"#,
            "\n",
            r#"{"type":"result","call_id":"nope","result":"ok"}"#,
            "\n",
            r#"{"type":"call","call_id":"c2","tool":"read","args":{"p":2}}"#,
            "\n",
            r#"{"type":"result","call_id":"c2","tool":"read","result":"ok"}"#,
            "\n",
        );
        let (s, a) = run(input.as_bytes(), 1 << 20);
        assert_eq!(a[1]["recorded"], true);
        // A second, different outcome for a call that has one is refused (the same one
        // again is a retry: see `a_retried_result_gets_the_same_answer`).
        assert!(a[2]["error"]
            .as_str()
            .unwrap()
            .contains("already has a result"));
        assert!(a[3]["error"].as_str().unwrap().contains("no pending call"));
        assert_eq!(a[5]["recorded"], true, "args taken from the pending call");
        assert_eq!(s.invalid, 2);
    }

    #[test]
    fn a_retried_result_gets_the_same_answer() {
        let input = concat!(
            r#"{"type":"call","call_id":"c1","tool":"read","args":{"p":1}}"#,
            "\n",
            r#"{"type":"result","call_id":"c1","result":"ok"}"#,
            "\n",
            r#"{"type":"result","call_id":"c1","result":"ok"}"#,
            "\n",
            r#"{"type":"result","call_id":"c1","tool":"read","args":{"p":1},"result":"ok"}"#,
            "\n",
        );
        let (s, a) = run(input.as_bytes(), 1 << 20);
        assert_eq!(s.invalid, 0);
        for answer in &a[1..] {
            assert_eq!(answer["recorded"], true);
        }
        assert_eq!(a[2]["seq"], 3);
    }
}
