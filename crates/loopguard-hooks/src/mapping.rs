//! The events every agent's hooks report, and what each does to the engine.
//!
//! Each agent module turns its payload into an [`Origin`] and a [`HookEvent`]; [`apply`]
//! runs the event against the stored state of its run and answers with a [`Reaction`],
//! which the agent module renders in its own protocol.
//!
//! | event | engine operation |
//! |---|---|
//! | [`HookEvent::ToolCall`] | a `call` event of the current run: the verdict |
//! | [`HookEvent::ToolResult`] | a `result` event of the current run (the call by id, tool and arguments) |
//! | [`HookEvent::Compaction`] | a `compaction` event: arms the post-compaction guard |
//! | [`HookEvent::PromptSubmitted`] | a new run: the session's run number goes up by one |
//! | [`HookEvent::SessionStarted`] | a new run when the conversation starts clean; idle rows are swept |
//! | [`HookEvent::SessionEnded`] | the session's runs are forgotten |
//! | [`HookEvent::SubagentStopped`] | the subagent's run is forgotten; its tree's root counts it finished |
//! | [`HookEvent::AnswerPiece`] | a `message` event (a piece of the streamed answer, `delta`), and the response's `usage` on its last piece |
//! | [`HookEvent::AnswerEnded`] | a whole `message` event without tool calls: the streamed answer ends there |
//!
//! Runs are named `prompt-N`, N being the number of prompts the session has seen (calls
//! before the first prompt belong to `prompt-0`). The calls a subagent makes belong to a
//! session of its own, `SESSION/agent-ID` (the name the transcript readers give it), in run
//! `prompt-N`, spawned by the session's run `prompt-N` (`parent_session`, `parent_run`): a
//! subagent works in a context of its own, its calls should not count as repeats of the
//! main conversation's (or of a parallel subagent's), and the agent tree sees it.

use loopguard::json::Tape;
use loopguard::{ConfigSet, Fingerprint, Message, OutcomeOf, Verdict};
use loopguard_events::{
    apply_event, apply_with_tree, EventRef, IdsRef, OwnedOutcome, OwnedUsage, Reply,
};
use serde_json::Value;

use crate::store::{HookTx, StoreError};

/// Where an event comes from.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Origin {
    /// The agent's session id (`"default"` when the payload has none).
    pub session: String,
    /// The subagent whose call this is, when the agent says so: its calls belong to a
    /// session of its own, spawned by the session's current run.
    pub subagent: Option<String>,
    /// The agent id whose config applies (`agents.list[].id`), when the payload names one
    /// (the subagent type); otherwise the `--agent` of the command line.
    pub agent: Option<String>,
    /// The session's transcript, when the payload names one in a format the hook reads
    /// ([`crate::transcript`]).
    pub transcript: Option<Transcript>,
}

/// A session transcript a payload names.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Transcript {
    /// Its path.
    pub path: String,
    /// Its format.
    pub format: loopguard_transcripts::Format,
    /// The model the payload names (Codex's), for usage the lines read do not name (a
    /// rollout names it once per turn, maybe before the lines a read starts at).
    pub model: Option<String>,
}

impl Origin {
    /// An origin in `session` (trimmed; blank means `"default"`), not from a subagent.
    pub fn new(session: Option<&str>) -> Self {
        Self {
            session: session
                .and_then(loopguard::text::non_blank)
                .unwrap_or("default")
                .to_owned(),
            subagent: None,
            agent: None,
            transcript: None,
        }
    }

    /// The agent whose config applies: the payload's, else `default_agent` (the command
    /// line's); blank is none.
    pub fn agent<'a>(&'a self, default_agent: Option<&'a str>) -> Option<&'a str> {
        self.agent
            .as_deref()
            .or(default_agent)
            .and_then(loopguard::text::non_blank)
    }
}

/// JSON from a payload: a `Value`, or, for JSON a `Value` cannot hold (a number beyond the
/// double range, a lone surrogate escape, nesting past 128 levels), its canonical text
/// ([`loopguard::canonical::json_text`], which keeps its fingerprint).
#[derive(Clone, Debug, PartialEq)]
pub enum Json {
    /// A value.
    Value(Value),
    /// Canonical JSON text.
    Text(String),
}

impl From<Value> for Json {
    fn from(value: Value) -> Self {
        Self::Value(value)
    }
}

impl Json {
    /// The fingerprint of the JSON.
    pub fn fingerprint(&self) -> Fingerprint {
        match self {
            Self::Value(v) => Fingerprint::of(v),
            Self::Text(t) => {
                let mut tape = Tape::new();
                tape.parse(t)
                    .map_or(Fingerprint::from_u128(0), Fingerprint::of)
            }
        }
    }
}

/// What a tool call returned, as the engine will read it.
#[derive(Clone, Debug, PartialEq)]
pub enum Outcome {
    /// The tool's result.
    Result(Json),
    /// The error the call failed with.
    Error(Json),
    /// Nothing to record.
    Nothing,
}

impl From<OwnedOutcome> for Outcome {
    fn from(outcome: OwnedOutcome) -> Self {
        match outcome {
            OwnedOutcome::Result(v) => Self::Result(v.into()),
            OwnedOutcome::Error(v) => Self::Error(v.into()),
            OwnedOutcome::Nothing => Self::Nothing,
        }
    }
}

/// A tool call as the agent reports it.
#[derive(Clone, Debug, PartialEq)]
pub struct ToolUse {
    /// Tool name.
    pub tool: String,
    /// Arguments (`{}` when the agent sends none).
    pub args: Json,
    /// The agent's id for this call, when it has one.
    pub call_id: Option<String>,
}

impl ToolUse {
    /// The key of the call among the run's pending warning notes: its id, or its tool and
    /// arguments when it has no id.
    pub fn note_key(&self) -> String {
        match &self.call_id {
            Some(id) => format!("id:{id}"),
            None => format!("call:{}:{}", self.tool, self.args.fingerprint()),
        }
    }
}

/// What a hook invocation reports, whatever the agent.
#[derive(Clone, Debug, PartialEq)]
#[non_exhaustive]
pub enum HookEvent {
    /// A tool call is about to run.
    ToolCall(ToolUse),
    /// A tool call finished.
    ToolResult {
        /// The call.
        call: ToolUse,
        /// Its result, its error, or nothing to record.
        outcome: Outcome,
    },
    /// The context is about to be compacted.
    Compaction,
    /// The user submitted a prompt: a new run starts.
    PromptSubmitted,
    /// A session started; `fresh` when the conversation starts clean (a new session or a
    /// cleared one) rather than resuming or continuing after a compaction.
    SessionStarted {
        /// Whether the conversation starts clean.
        fresh: bool,
    },
    /// The session ended.
    SessionEnded,
    /// The model finished answering (Claude Code's `Stop`): its last answer is whole.
    Stopped,
    /// A subagent finished (Claude Code's `SubagentStop`): its run ends, and its tree's
    /// root counts it finished.
    SubagentStopped,
    /// A piece of the model's answer as it streams (Gemini CLI's `AfterModel`, sent for
    /// every chunk): judged for chanting as it comes.
    AnswerPiece(AnswerPiece),
    /// The model's last answer of the turn, whole (Gemini CLI's `AfterAgent`): the answer
    /// streamed before it ends here, without tool calls (an answer of which no piece was
    /// seen is judged whole).
    AnswerEnded {
        /// The answer's text.
        text: String,
    },
}

/// A piece of a streamed answer, as the agent reports it.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct AnswerPiece {
    /// The piece of the answer's text.
    pub text: String,
    /// The piece of the model's reasoning (its thoughts), when the piece holds some.
    pub reasoning: Option<String>,
    /// What the whole response spent, on its last piece.
    pub usage: Option<OwnedUsage>,
}

/// The key of the note kept for a warning about the model's answer, for agents that show
/// notes with a tool result ([`NoteDelivery::WithResult`]): the run's next result shows it.
const ANSWER_NOTE: &str = "answer";

impl HookEvent {
    /// Whether the event needs the engine's config (so the config file is read only then).
    pub fn needs_config(&self) -> bool {
        matches!(
            self,
            Self::ToolCall(_)
                | Self::ToolResult { .. }
                | Self::Compaction
                | Self::AnswerPiece(_)
                | Self::AnswerEnded { .. }
        )
    }

    /// Whether the event reads what the session's transcript gained (when the payload
    /// names one): before the call or the result is judged, before a new run starts (the
    /// last answer belongs to the run that gave it), and when the model has finished.
    pub fn reads_tail(&self) -> bool {
        matches!(
            self,
            Self::ToolCall(_)
                | Self::ToolResult { .. }
                | Self::Compaction
                | Self::PromptSubmitted
                | Self::Stopped
        )
    }
}

/// What the agent should be told.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum Reaction {
    /// Nothing: go on as usual.
    Proceed,
    /// Run the call, and show the model this note.
    Warn {
        /// `[loopguard] WARNING: …`
        note: String,
    },
    /// Do not run the call; the model reads `message`.
    Block {
        /// The engine's message (level, tool, count, pattern, what to do instead).
        message: String,
        /// Which detector fired.
        detector: String,
        /// Its count.
        count: u32,
        /// The run is over: every later call of this run is blocked too.
        terminal: bool,
    },
    /// An outcome was recorded.
    Recorded {
        /// A warning to show the model with this result (agents that cannot show one
        /// before the call keep it until now).
        note: Option<String>,
        /// The run was aborted (`compaction_loop_persisted`): this message says why.
        abort: Option<String>,
    },
}

/// How an agent can show a warning to the model.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum NoteDelivery {
    /// With the verdict, before the call runs (Claude Code, Codex: `additionalContext`).
    BeforeCall,
    /// With the result, after the call ran (Gemini CLI: `AfterTool`'s
    /// `additionalContext`): the note is kept in the store until then.
    WithResult,
}

/// The run id of run number `n`.
pub fn run_id(n: u64) -> String {
    format!("prompt-{n}")
}

/// Applies `event` to the stored state and answers it. `config` is needed for the events
/// whose [`HookEvent::needs_config`] is true (others ignore it); `default_agent` is the
/// `--agent` of the command line.
pub fn apply(
    tx: &mut HookTx<'_>,
    config: Option<&ConfigSet>,
    default_agent: Option<&str>,
    origin: &Origin,
    event: &HookEvent,
    delivery: NoteDelivery,
) -> Result<Reaction, StoreError> {
    let said = match (&origin.transcript, config) {
        (Some(transcript), Some(config)) if event.reads_tail() => read_transcript(
            tx,
            config,
            default_agent,
            origin,
            transcript,
            matches!(event, HookEvent::Stopped),
        )?,
        _ => Said::default(),
    };
    let reaction = apply_event_of(tx, config, default_agent, origin, event, delivery)?;
    Ok(said.into_reaction(event, reaction))
}

/// [`apply`] without the transcript.
fn apply_event_of(
    tx: &mut HookTx<'_>,
    config: Option<&ConfigSet>,
    default_agent: Option<&str>,
    origin: &Origin,
    event: &HookEvent,
    delivery: NoteDelivery,
) -> Result<Reaction, StoreError> {
    let session = origin.session.as_str();
    match event {
        HookEvent::Stopped => Ok(Reaction::Proceed),
        HookEvent::SubagentStopped => {
            if let Some(id) = &origin.subagent {
                let child = loopguard_transcripts::subagent_session(session, id);
                let now = tx.now();
                loopguard::tree::run_ended(tx, &child, now)?;
                tx.forget_run(&child, &run_id(tx.run_number(session)?))?;
            }
            Ok(Reaction::Proceed)
        }
        HookEvent::PromptSubmitted => {
            tx.start_run(session)?;
            tx.sweep()?;
            Ok(Reaction::Proceed)
        }
        HookEvent::SessionStarted { fresh } => {
            if *fresh {
                tx.start_run(session)?;
            }
            // What the transcript holds already (a resumed conversation) is not this
            // run's doing.
            if let Some(t) = &origin.transcript {
                match crate::transcript::mark_at_end(&t.path) {
                    Ok(mark) => tx.put_transcript_mark(session, &mark)?,
                    Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
                    Err(e) => tx.warn(format!("transcript {}: {e}", t.path)),
                }
            }
            tx.sweep()?;
            Ok(Reaction::Proceed)
        }
        HookEvent::SessionEnded => {
            tx.forget_session(session)?;
            Ok(Reaction::Proceed)
        }
        HookEvent::AnswerPiece(_) | HookEvent::AnswerEnded { .. } => {
            let default = ConfigSet::default();
            let config = config.unwrap_or(&default);
            let agent = origin.agent(default_agent);
            let run = run_id(tx.run_number(session)?);
            let ids = IdsRef::new(session, Some(&run), agent);
            let cfg = config.for_agent(agent);
            let mut said = Said::default();
            for answer_event in answer_events(event, ids) {
                let reply = apply_in(tx, session, &run, cfg, &answer_event)?;
                said.take(tx, reply, "the model's answer");
            }
            let reaction = said.reaction();
            if let (Reaction::Warn { note }, NoteDelivery::WithResult) = (&reaction, delivery) {
                tx.put_note(session, &run, ANSWER_NOTE, note)?;
            }
            Ok(reaction)
        }
        HookEvent::ToolCall(_) | HookEvent::ToolResult { .. } | HookEvent::Compaction => {
            let default = ConfigSet::default();
            let config = config.unwrap_or(&default);
            let agent = origin.agent(default_agent);
            // A compaction belongs to the main conversation, whoever reports it.
            let subagent = match event {
                HookEvent::Compaction => None,
                _ => origin.subagent.as_deref(),
            };
            let run = run_id(tx.run_number(session)?);
            let child = subagent.map(|id| loopguard_transcripts::subagent_session(session, id));
            let parent = child.as_ref().map(|_| session);
            let session = child.as_deref().unwrap_or(session);
            let ids = IdsRef {
                parent_session: parent,
                parent_run: parent.map(|_| run.as_str()),
                ..IdsRef::new(session, Some(&run), agent)
            };
            let cfg = config.for_agent(agent);
            let (args, outcome) = match event {
                HookEvent::ToolCall(call) => (Some(&call.args), None),
                HookEvent::ToolResult { call, outcome } => (Some(&call.args), Some(outcome)),
                _ => (None, None),
            };
            let texts = [args, outcome.and_then(Outcome::json)]
                .iter()
                .any(|j| matches!(j, Some(Json::Text(_))));
            let reply = if texts {
                // JSON a `Value` cannot hold: everything is read as raw text.
                let args_text = args.map(Json::text);
                let outcome_text = outcome.and_then(Outcome::json).map(Json::text);
                let (mut t1, mut t2) = (Tape::new(), Tape::new());
                let args = args_text.as_deref().and_then(|t| t1.parse(t).ok());
                let outcome_json = outcome_text.as_deref().and_then(|t| t2.parse(t).ok());
                let outcome = outcome.map(|o| o.with(outcome_json));
                let replay_event = hook_event(event, ids, args, outcome);
                apply_in(tx, session, &run, cfg, &replay_event)?
            } else {
                let args = args.and_then(Json::value);
                let outcome = outcome.map(|o| o.with(o.json().and_then(Json::value)));
                let replay_event = hook_event(event, ids, args, outcome);
                apply_in(tx, session, &run, cfg, &replay_event)?
            };
            match (reply, event) {
                (Reply::Call(verdict, _), HookEvent::ToolCall(call)) => {
                    let reaction = reaction_to(&verdict);
                    if let (Reaction::Warn { note }, NoteDelivery::WithResult) =
                        (&reaction, delivery)
                    {
                        tx.put_note(session, &run, &call.note_key(), note)?;
                    }
                    Ok(reaction)
                }
                (Reply::Result(recorded), HookEvent::ToolResult { call, .. }) => {
                    let note = match delivery {
                        NoteDelivery::WithResult => {
                            let answer = tx.take_note(session, &run, ANSWER_NOTE)?;
                            let call = tx.take_note(session, &run, &call.note_key())?;
                            match (answer, call) {
                                (Some(a), Some(c)) => Some(format!("{a}\n{c}")),
                                (a, c) => a.or(c),
                            }
                        }
                        NoteDelivery::BeforeCall => None,
                    };
                    Ok(Reaction::Recorded {
                        note,
                        abort: recorded.ends_run().map(str::to_owned),
                    })
                }
                _ => Ok(Reaction::Proceed),
            }
        }
    }
}

/// What the model said and spent since the last read of its transcript, as the guard
/// judged it: the first warning to show, the block that stopped the run.
#[derive(Debug, Default)]
struct Said {
    note: Option<String>,
    stop: Option<Reaction>,
}

impl Said {
    /// Takes the verdict on a message, or the stop of a usage.
    fn judged(&mut self, reaction: Reaction) {
        match reaction {
            Reaction::Warn { note } if self.note.is_none() => self.note = Some(note),
            block @ Reaction::Block { .. } if self.stop.is_none() => self.stop = Some(block),
            _ => {}
        }
    }

    /// Takes the guard's reply to a message or a usage of `what` (an unreadable figure is a
    /// warning on stderr: it counts nothing, the rest goes on).
    fn take(&mut self, tx: &mut HookTx<'_>, reply: Reply, what: &str) {
        match reply {
            Reply::Message(verdict) => self.judged(reaction_to(&verdict)),
            Reply::Usage(counted) => {
                if let (Some(message), Some(stop), false) =
                    (counted.message, counted.stop, counted.shadow)
                {
                    self.judged(Reaction::Block {
                        message,
                        detector: stop.scope.detector().as_str().to_owned(),
                        count: stop.percent(),
                        terminal: true,
                    });
                }
            }
            Reply::Invalid(e) => tx.warn(format!("{what}: {e}")),
            _ => {}
        }
    }

    /// What was said, as a reaction of its own: the stop, else the first warning.
    fn reaction(self) -> Reaction {
        match (self.stop, self.note) {
            (Some(stop), _) => stop,
            (None, Some(note)) => Reaction::Warn { note },
            (None, None) => Reaction::Proceed,
        }
    }

    /// The reaction to `event` given what was said before it: a warning about the
    /// transcript goes with the call's own answer; a run the transcript stopped has its
    /// call blocked by the engine already (a stopped run blocks every call), and the block
    /// is said at the event that found it even when that event has no call to block (the
    /// agent shows what it can).
    fn into_reaction(self, event: &HookEvent, reaction: Reaction) -> Reaction {
        match (reaction, self.note, self.stop) {
            (r @ Reaction::Block { .. }, _, _) => r,
            (_, _, Some(stop)) if matches!(event, HookEvent::ToolCall(_)) => stop,
            (Reaction::Proceed, Some(note), _) if matches!(event, HookEvent::ToolCall(_)) => {
                Reaction::Warn { note }
            }
            (Reaction::Warn { note }, Some(said), _) => Reaction::Warn {
                note: format!("{said}\n{note}"),
            },
            (Reaction::Recorded { note, abort }, said, stop) => Reaction::Recorded {
                note: match (note, said) {
                    (Some(a), Some(b)) => Some(format!("{b}\n{a}")),
                    (a, b) => a.or(b),
                },
                abort: abort.or(stop.and_then(|s| match s {
                    Reaction::Block { message, .. } => Some(message),
                    _ => None,
                })),
            },
            (r, _, _) => r,
        }
    }
}

/// Reads what the session's transcript gained and hands its usage and messages to the
/// guard, in the run of the main conversation (a subagent's calls have runs of their own,
/// its responses are in files of their own). A transcript that cannot be read is a
/// warning: the call is still judged.
fn read_transcript(
    tx: &mut HookTx<'_>,
    config: &ConfigSet,
    default_agent: Option<&str>,
    origin: &Origin,
    transcript: &Transcript,
    finished: bool,
) -> Result<Said, StoreError> {
    let session = origin.session.as_str();
    let mark = tx.transcript_mark(session)?;
    let tail = match crate::transcript::read_tail(
        &transcript.path,
        transcript.format,
        session,
        mark.as_ref(),
        finished,
    ) {
        Ok(tail) => tail,
        Err(e) => {
            tx.warn(format!("transcript {}: {e}", transcript.path));
            return Ok(Said::default());
        }
    };
    if let Some(mark) = &tail.mark {
        tx.put_transcript_mark(session, mark)?;
    }
    let mut said = Said::default();
    if tail.events.is_empty() {
        return Ok(said);
    }
    let agent = origin.agent(default_agent);
    let run = run_id(tx.run_number(session)?);
    let ids = IdsRef::new(session, Some(&run), agent);
    let cfg = config.for_agent(agent);
    for event in &tail.events {
        let replay_event: EventRef<'_, &Value> = match event {
            loopguard_events::Event::Usage { usage, .. } => EventRef::Usage {
                ids,
                usage: match usage.model {
                    Some(_) => usage.as_usage(),
                    None => usage.as_usage().with_model(transcript.model.as_deref()),
                },
            },
            loopguard_events::Event::Message { message, .. } => EventRef::Message {
                ids,
                message: message.as_message(),
            },
            _ => continue,
        };
        let reply = apply_in(tx, session, &run, cfg, &replay_event)?;
        said.take(tx, reply, &format!("transcript {}", transcript.path));
    }
    Ok(said)
}

/// Applies `event` to its run (and its session) in the hook's transaction.
/// [`apply_event`] on the stored state of (`session`, `run`), with the agent tree's steps
/// around a sub-agent's call (its link at its first call, its failure when it is blocked).
fn apply_in<'a, J: loopguard::json::Json<'a>>(
    tx: &mut HookTx<'_>,
    session: &str,
    run: &str,
    cfg: &loopguard::EffectiveConfig,
    event: &EventRef<'a, J>,
) -> Result<Reply, StoreError> {
    let scope = event.scope(None);
    let now = tx.now();
    apply_with_tree(tx, cfg, &scope, event, now, |tx| {
        tx.update_run(session, Some(run), |state, session_state, now| {
            apply_event(state, session_state, cfg, &scope, event, now)
        })
    })
}

/// The replay event of a hook event, with its JSON in view `J`.
fn hook_event<'a, J>(
    event: &'a HookEvent,
    ids: IdsRef<'a>,
    args: Option<J>,
    outcome: Option<OutcomeOf<J>>,
) -> EventRef<'a, J> {
    match event {
        HookEvent::ToolCall(call) => EventRef::Call {
            ids,
            call_id: call.call_id.as_deref(),
            tool: &call.tool,
            args,
            batch: None,
        },
        HookEvent::ToolResult { call, .. } => EventRef::Result {
            ids,
            call_id: call.call_id.as_deref(),
            tool: Some(&call.tool),
            args,
            outcome: outcome.unwrap_or(OutcomeOf::Nothing),
        },
        _ => EventRef::Compaction { ids },
    }
}

/// The replay events of an answer: its message (a piece of its stream, or the whole
/// answer without tool calls) and what its response spent. A piece with neither text nor
/// reasoning is no message.
fn answer_events<'a>(event: &'a HookEvent, ids: IdsRef<'a>) -> Vec<EventRef<'a, &'a Value>> {
    let mut events = Vec::with_capacity(2);
    match event {
        HookEvent::AnswerPiece(piece) => {
            if !piece.text.is_empty() || piece.reasoning.is_some() {
                let mut message = Message::assistant(&piece.text);
                message.reasoning = piece.reasoning.as_deref();
                message.delta = Some(None);
                events.push(EventRef::Message { ids, message });
            }
            if let Some(usage) = &piece.usage {
                events.push(EventRef::Usage {
                    ids,
                    usage: usage.as_usage(),
                });
            }
        }
        HookEvent::AnswerEnded { text } => {
            let mut message = Message::assistant(text);
            message.has_tool_calls = Some(false);
            events.push(EventRef::Message { ids, message });
        }
        _ => {}
    }
    events
}

impl Json {
    fn value(&self) -> Option<&Value> {
        match self {
            Self::Value(v) => Some(v),
            Self::Text(_) => None,
        }
    }

    /// The JSON as text (a `Value` written out).
    fn text(&self) -> std::borrow::Cow<'_, str> {
        match self {
            Self::Value(v) => v.to_string().into(),
            Self::Text(t) => t.as_str().into(),
        }
    }
}

impl Outcome {
    fn json(&self) -> Option<&Json> {
        match self {
            Self::Result(j) | Self::Error(j) => Some(j),
            Self::Nothing => None,
        }
    }

    /// The same kind of outcome, holding `json` (nothing when there is none).
    fn with<J>(&self, json: Option<J>) -> OutcomeOf<J> {
        match (self, json) {
            (Self::Result(_), Some(j)) => OutcomeOf::Result(j),
            (Self::Error(_), Some(j)) => OutcomeOf::Error(j),
            _ => OutcomeOf::Nothing,
        }
    }
}

/// The reaction to a verdict. Shadow verdicts are not shown to the model (that is what
/// shadow mode means); warnings are shown when the engine says to surface them.
pub fn reaction_to(verdict: &Verdict) -> Reaction {
    match verdict {
        Verdict::Block {
            detection,
            terminal,
        } => Reaction::Block {
            message: detection.message.clone(),
            detector: detection.detector.as_str().to_owned(),
            count: detection.count,
            terminal: *terminal,
        },
        Verdict::Warn { .. } => match verdict.warning_note() {
            Some(note) => Reaction::Warn { note },
            None => Reaction::Proceed,
        },
        _ => Reaction::Proceed,
    }
}

/// A short line for the user (not the model) about a block.
pub fn block_summary(tool: &str, detector: &str, count: u32, terminal: bool) -> String {
    if terminal {
        format!("loopguard stopped this run: {tool} was blocked ({detector}, {count})")
    } else {
        format!("loopguard blocked {tool} ({detector}, {count})")
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::store::HookDb;
    use loopguard::Millis;
    use serde_json::json;

    fn call(id: Option<&str>) -> ToolUse {
        ToolUse {
            tool: "read".into(),
            args: json!({"path": "/x"}).into(),
            call_id: id.map(str::to_owned),
        }
    }

    fn result(id: Option<&str>) -> HookEvent {
        HookEvent::ToolResult {
            call: call(id),
            outcome: Outcome::Result(json!({"content": [{"type": "text", "text": "same"}]}).into()),
        }
    }

    struct Fixture {
        _dir: tempfile::TempDir,
        db: HookDb,
        config: ConfigSet,
        now: u64,
    }

    impl Fixture {
        fn new(config: &str) -> Self {
            let dir = tempfile::tempdir().unwrap();
            let db = HookDb::open(&dir.path().join("db")).unwrap();
            Self {
                _dir: dir,
                db,
                config: ConfigSet::parse(config).unwrap(),
                now: 1_000,
            }
        }

        fn send(&mut self, origin: &Origin, event: HookEvent, delivery: NoteDelivery) -> Reaction {
            self.now += 1;
            let mut tx = self.db.begin(Millis::new(self.now)).unwrap();
            let r = apply(&mut tx, Some(&self.config), None, origin, &event, delivery).unwrap();
            tx.commit().unwrap();
            r
        }
    }

    const LOW: &str = "{ tools: { loopDetection: { enabled: true, warningThreshold: 2, criticalThreshold: 3, globalCircuitBreakerThreshold: 5 } } }";

    #[test]
    fn a_loop_warns_then_blocks_then_stops_the_run() {
        let mut f = Fixture::new(LOW);
        let o = Origin::new(Some("s"));
        let mut reactions = Vec::new();
        for i in 0..7 {
            let id = format!("c{i}");
            let r = f.send(
                &o,
                HookEvent::ToolCall(call(Some(&id))),
                NoteDelivery::BeforeCall,
            );
            if !matches!(r, Reaction::Block { .. }) {
                f.send(&o, result(Some(&id)), NoteDelivery::BeforeCall);
            }
            reactions.push(r);
        }
        assert_eq!(reactions[0], Reaction::Proceed);
        assert!(
            matches!(&reactions[2], Reaction::Warn { note } if note.starts_with("[loopguard] WARNING"))
        );
        assert!(
            matches!(&reactions[3], Reaction::Block { terminal: false, detector, .. } if detector == "generic_repeat")
        );
        assert!(
            matches!(&reactions[5], Reaction::Block { terminal: true, detector, .. } if detector == "global_circuit_breaker")
        );
        assert!(matches!(
            &reactions[6],
            Reaction::Block { terminal: true, .. }
        ));
    }

    #[test]
    fn a_prompt_starts_a_clean_run() {
        let mut f = Fixture::new(LOW);
        let o = Origin::new(Some("s"));
        for i in 0..3 {
            let id = format!("c{i}");
            f.send(
                &o,
                HookEvent::ToolCall(call(Some(&id))),
                NoteDelivery::BeforeCall,
            );
            f.send(&o, result(Some(&id)), NoteDelivery::BeforeCall);
        }
        assert!(matches!(
            f.send(
                &o,
                HookEvent::ToolCall(call(None)),
                NoteDelivery::BeforeCall
            ),
            Reaction::Block { .. }
        ));
        f.send(&o, HookEvent::PromptSubmitted, NoteDelivery::BeforeCall);
        assert_eq!(
            f.send(
                &o,
                HookEvent::ToolCall(call(Some("n"))),
                NoteDelivery::BeforeCall
            ),
            Reaction::Proceed
        );
        // Another session is unaffected by either.
        assert_eq!(
            f.send(
                &Origin::new(Some("t")),
                HookEvent::ToolCall(call(None)),
                NoteDelivery::BeforeCall
            ),
            Reaction::Proceed
        );
    }

    #[test]
    fn subagents_have_sessions_of_their_own() {
        let mut f = Fixture::new(LOW);
        let main = Origin::new(Some("s"));
        let sub = Origin {
            subagent: Some("a1".into()),
            ..Origin::new(Some("s"))
        };
        for i in 0..3 {
            let id = format!("m{i}");
            f.send(
                &main,
                HookEvent::ToolCall(call(Some(&id))),
                NoteDelivery::BeforeCall,
            );
            f.send(&main, result(Some(&id)), NoteDelivery::BeforeCall);
        }
        assert_eq!(
            f.send(
                &sub,
                HookEvent::ToolCall(call(Some("x"))),
                NoteDelivery::BeforeCall
            ),
            Reaction::Proceed
        );
        let tx = f.db.begin(Millis::new(f.now)).unwrap();
        assert_eq!(
            tx.run_state("s/agent-a1", Some("prompt-0"))
                .unwrap()
                .unwrap()
                .history()
                .len(),
            1
        );
        assert_eq!(
            tx.run_state("s", Some("prompt-0"))
                .unwrap()
                .unwrap()
                .history()
                .len(),
            3
        );
    }

    #[test]
    fn compaction_arms_the_guard_and_a_repeated_outcome_aborts() {
        let mut f = Fixture::new("{}");
        let o = Origin::new(Some("s"));
        assert_eq!(
            f.send(&o, HookEvent::Compaction, NoteDelivery::BeforeCall),
            Reaction::Proceed
        );
        let mut last = Reaction::Proceed;
        for i in 0..3 {
            let id = format!("c{i}");
            f.send(
                &o,
                HookEvent::ToolCall(call(Some(&id))),
                NoteDelivery::BeforeCall,
            );
            last = f.send(&o, result(Some(&id)), NoteDelivery::BeforeCall);
        }
        assert!(
            matches!(&last, Reaction::Recorded { abort: Some(m), .. } if m.contains("read")),
            "{last:?}"
        );
    }

    #[test]
    fn notes_wait_for_the_result_when_the_agent_needs_it() {
        let mut f = Fixture::new(LOW);
        let o = Origin::new(Some("s"));
        let mut seen = None;
        for _ in 0..3 {
            let r = f.send(
                &o,
                HookEvent::ToolCall(call(None)),
                NoteDelivery::WithResult,
            );
            let back = f.send(&o, result(None), NoteDelivery::WithResult);
            if let Reaction::Warn { note } = r {
                seen = Some(note.clone());
                assert_eq!(
                    back,
                    Reaction::Recorded {
                        note: Some(note),
                        abort: None
                    }
                );
            } else {
                assert_eq!(
                    back,
                    Reaction::Recorded {
                        note: None,
                        abort: None
                    }
                );
            }
        }
        assert!(seen.is_some());
    }

    #[test]
    fn session_end_forgets_and_clean_starts_begin_a_run() {
        let mut f = Fixture::new(LOW);
        let o = Origin::new(Some("s"));
        f.send(
            &o,
            HookEvent::ToolCall(call(None)),
            NoteDelivery::BeforeCall,
        );
        f.send(
            &o,
            HookEvent::SessionStarted { fresh: false },
            NoteDelivery::BeforeCall,
        );
        assert_eq!(
            f.db.begin(Millis::new(f.now))
                .unwrap()
                .run_number("s")
                .unwrap(),
            0
        );
        f.send(
            &o,
            HookEvent::SessionStarted { fresh: true },
            NoteDelivery::BeforeCall,
        );
        assert_eq!(
            f.db.begin(Millis::new(f.now))
                .unwrap()
                .run_number("s")
                .unwrap(),
            1
        );
        f.send(&o, HookEvent::SessionEnded, NoteDelivery::BeforeCall);
        let tx = f.db.begin(Millis::new(f.now)).unwrap();
        assert_eq!(tx.run_number("s").unwrap(), 0);
        assert!(tx.run_state("s", Some("prompt-0")).unwrap().is_none());
    }

    #[test]
    fn shadow_mode_never_tells_the_model() {
        let mut f = Fixture::new("{ tools: { loopDetection: { enabled: true, warningThreshold: 1, criticalThreshold: 2 } }, loopguard: { mode: 'shadow' } }");
        let o = Origin::new(Some("s"));
        for _ in 0..6 {
            assert_eq!(
                f.send(
                    &o,
                    HookEvent::ToolCall(call(None)),
                    NoteDelivery::BeforeCall
                ),
                Reaction::Proceed
            );
            f.send(&o, result(None), NoteDelivery::BeforeCall);
        }
    }

    #[test]
    fn note_keys() {
        assert_eq!(call(Some("t1")).note_key(), "id:t1");
        let a = call(None).note_key();
        assert!(a.starts_with("call:read:"));
        let mut other = call(None);
        other.args = json!({"path": "/y"}).into();
        assert_ne!(a, other.note_key());
        assert_eq!(run_id(3), "prompt-3");
    }
}
