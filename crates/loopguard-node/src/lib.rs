//! The native half of `@loopguard/node`: the loopguard engine in a Node.js process.
//!
//! The binding is deliberately thin. A call reaches the engine as an event of the replay
//! protocol (SPEC §7) and goes through the protocol crate ([`loopguard_events`]), so a call
//! made from JavaScript is answered exactly as `loopguard replay` answers the same event:
//! one definition of what an event means. The package's `Guard.begin` hands out the
//! engine's own [`Ticket`], kept in JavaScript as a string of its bytes
//! ([`Ticket::to_bytes`]: a string costs a fifth of an object with a native finalizer, the
//! only other way to keep a Rust value there), and `Ticket.finish` gives it back with the
//! outcome alone. This module only turns JavaScript values into events and answers into
//! plain JavaScript objects; the idiomatic API (`Guard`, `Ticket`, errors with config
//! positions) is the package's `index.js` on top of it.
//!
//! Events arrive in one of two forms, both measured (`bench/bench.mjs` in the package):
//! JSON text (written in JavaScript with `JSON.stringify`, V8's native serializer) or a
//! JavaScript object converted value by value through N-API into a `serde_json::Value`.
//! The text form is the default and the hot path: the replayer tokenizes it into its
//! reusable tape and fingerprints `args` and `result` from the text itself (no value tree,
//! no allocation per value, no depth limit, no recursion), exactly as `loopguard replay`
//! reads a line. It is faster on every workload measured, and it fails with JavaScript's
//! own clear errors on cycles and BigInt before anything reaches the engine. The answers
//! are cheap too: an allowed call is its ticket alone (or `null`, for a call event) and a
//! recorded outcome with nothing more to say is a boolean, which the package maps to
//! shared frozen objects.

#![deny(unsafe_code)]

mod js_text;
mod lifted;

use std::cell::{RefCell, RefMut};

use loopguard::json::{Json, Object as _, Raw, Tape};
use loopguard::{Abort, ConfigSet, Detection, Guard, OutcomeOf, Recorded, Ticket, Verdict};
use loopguard_events::{apply_to_guard, from_value, parse_raw, Answer, EventRef, Replayer, Reply};
use napi::bindgen_prelude::*;
use napi::JsString;
use napi_derive::napi;
use serde_json::Value;

/// A verdict other than allow, as a plain object (`allow` is `null`: the package returns
/// one frozen object for it, so the common case builds nothing).
#[napi(object)]
pub struct NativeVerdict {
    /// `warn` or `block` (`allow` in shadow mode, with `shadow` set).
    pub verdict: String,
    pub level: Option<String>,
    pub detector: Option<String>,
    pub count: Option<u32>,
    pub message: Option<String>,
    pub notify: bool,
    pub terminal: bool,
    pub paired_tool: Option<String>,
    /// For a block: the tool result to hand the model instead of running the call.
    pub blocked_result: Option<Value>,
    /// For a warning to surface now: the note to append to the call's result.
    pub warning_note: Option<String>,
    /// Shadow mode: what would have fired (the call runs).
    pub shadow: Option<NativeShadow>,
}

/// What a shadow-mode verdict would have been.
#[napi(object)]
pub struct NativeShadow {
    pub verdict: String,
    pub level: String,
    pub detector: String,
    pub count: u32,
    pub message: String,
    pub terminal: bool,
    pub paired_tool: Option<String>,
}

/// An abort of the run by the post-compaction guard.
#[napi(object)]
pub struct NativeAbort {
    pub detector: String,
    pub tool: String,
    pub count: u32,
    pub message: String,
}

/// What became of an outcome.
#[napi(object)]
pub struct NativeRecorded {
    pub recorded: bool,
    pub abort: Option<NativeAbort>,
    /// Shadow mode: the abort that would have happened.
    pub shadow_abort: Option<NativeAbort>,
}

/// One problem of a config document, for the package's `ConfigError`.
#[napi(object)]
pub struct NativeConfigIssue {
    /// Dotted path of the offending key (empty for the whole document).
    pub path: String,
    pub line: Option<u32>,
    pub column: Option<u32>,
    pub message: String,
}

/// The engine with its state in memory, behind the replay protocol. JavaScript holds it
/// as an external value and passes it to the functions below: a method of a napi-rs class
/// costs about 0.4 µs of CPU a call in napi-rs's borrow bookkeeping, a function taking an
/// external about 0.15 µs (`endRun` as a method 0.61 µs; measured with Node 24).
pub struct NativeGuard {
    replayer: Replayer<loopguard::SystemClock>,
    /// Where result events with lifted strings are tokenized, reused.
    tape: Tape,
    /// The text of the event being applied, in a buffer reused from call to call (its
    /// UTF-8 is checked as it is tokenized).
    event: Vec<u8>,
    /// Its outcome's lifted strings, likewise.
    lifted: lifted::Strings,
    /// A ticket's bytes, going out or coming back.
    ticket: Vec<u8>,
}

/// A guard over the JSON5 config document `text`; `origin` (a file name) prefixes
/// errors. Throws the document's problems, one per line.
#[napi(ts_return_type = "ExternalObject<NativeGuard>")]
pub fn new_guard(text: String, origin: Option<String>) -> Result<External<RefCell<NativeGuard>>> {
    let config = ConfigSet::parse_named(&text, origin.as_deref())
        .map_err(|e| Error::new(Status::InvalidArg, e.to_string()))?;
    Ok(External::new(RefCell::new(NativeGuard {
        replayer: Replayer::with_guard(Guard::new(config), None),
        tape: Tape::new(),
        event: Vec::new(),
        lifted: lifted::Strings::default(),
        ticket: Vec::new(),
    })))
}

/// A call event as JSON text: the verdict, or `null` for allow.
#[napi(ts_args_type = "guard: ExternalObject<NativeGuard>, event: string")]
pub fn call_text(
    guard: &External<RefCell<NativeGuard>>,
    event: JsString,
) -> Result<Option<NativeVerdict>> {
    verdict_text(guard, &event)
}

/// A call or message event as JSON text, answered with a verdict.
fn verdict_text(
    guard: &External<RefCell<NativeGuard>>,
    event: &JsString,
) -> Result<Option<NativeVerdict>> {
    let mut this = enter(guard)?;
    let this = &mut *this;
    this.read_event(event)?;
    match this.replayer.apply_line(0, &this.event) {
        Answer::Call { verdict, .. } | Answer::Message { verdict, .. } => {
            Ok(native_verdict(&verdict))
        }
        other => Err(unexpected(&other)),
    }
}

/// A call event as a JavaScript object.
#[napi]
pub fn call_object(
    guard: &External<RefCell<NativeGuard>>,
    event: Value,
) -> Result<Option<NativeVerdict>> {
    let mut this = enter(guard)?;
    let this = &mut *this;
    let event = from_value(event).map_err(invalid)?;
    match this.replayer.apply(0, &event.as_ref()) {
        Answer::Call { verdict, .. } => Ok(native_verdict(&verdict)),
        other => Err(unexpected(&other)),
    }
}

/// A result event as JSON text, its outcome's long strings lifted into `lifted` (see the
/// `lifted` module; one string crosses by itself, cheaper than in an array): whether it
/// was recorded, or an object when there is more to say (an abort, or one shadow mode
/// would have made).
#[napi(
    ts_args_type = "guard: ExternalObject<NativeGuard>, event: string, lifted?: string | string[]"
)]
pub fn result_text(
    guard: &External<RefCell<NativeGuard>>,
    event: JsString,
    lifted: Option<Either<JsString, Array>>,
) -> Result<Either<bool, NativeRecorded>> {
    let mut this = enter(guard)?;
    let this = &mut *this;
    this.read_event(&event)?;
    this.read_lifted(lifted)?;
    let event = match parse_raw(&this.event, &mut this.tape) {
        Ok(event) => lift(event, &this.lifted),
        Err(error) => return Err(invalid(error)),
    };
    let scope = event.scope(None);
    match apply_to_guard(this.replayer.guard_mut(), &scope, &event) {
        Reply::Result(recorded) => Ok(native_recorded(recorded)),
        Reply::Invalid(error) => Err(invalid(error)),
        _ => Err(Error::from_reason(
            "internal error: the event was answered as another kind",
        )),
    }
}

/// A call event as JSON text: judges the call and hands out its ticket. An allowed call
/// answers the ticket alone, as a string of its bytes (one character a byte: the package's
/// `Ticket` keeps it and gives it back to `finishText`); any other verdict answers the
/// verdict's object with the ticket under `ticket`.
#[napi(
    ts_args_type = "guard: ExternalObject<NativeGuard>, event: string",
    ts_return_type = "string | (NativeVerdict & { ticket: string })"
)]
pub fn begin_text<'env>(
    env: &'env Env,
    guard: &External<RefCell<NativeGuard>>,
    event: JsString,
) -> Result<Either<JsString<'env>, Object<'env>>> {
    let mut this = enter(guard)?;
    let this = &mut *this;
    this.read_event(&event)?;
    let ticket = this.replayer.begin_line(&this.event).map_err(invalid)?;
    this.ticket.clear();
    ticket.encode_into(&mut this.ticket);
    let bytes = env.create_string_latin1(&this.ticket)?;
    match native_verdict(ticket.verdict()) {
        None => Ok(Either::A(bytes)),
        Some(verdict) => {
            let mut object = Object::from_unknown(verdict.into_unknown(env)?)?;
            object.set_named_property("ticket", bytes)?;
            Ok(Either::B(object))
        }
    }
}

/// Finishes a ticket from `beginText` with the outcome in `outcome`, the JSON text of an
/// object with `result` or `error` (the error wins; neither records nothing), its long
/// strings lifted as for `resultText`: whether it was recorded, or an object when there is
/// more to say.
#[napi(
    ts_args_type = "guard: ExternalObject<NativeGuard>, ticket: string, outcome: string, lifted?: string | string[]"
)]
pub fn finish_text(
    guard: &External<RefCell<NativeGuard>>,
    ticket: JsString,
    outcome: JsString,
    lifted: Option<Either<JsString, Array>>,
) -> Result<Either<bool, NativeRecorded>> {
    let mut this = enter(guard)?;
    let this = &mut *this;
    this.ticket.clear();
    js_text::push_latin1(&ticket, &mut this.ticket)?;
    let ticket = Ticket::from_bytes(&this.ticket)
        .ok_or_else(|| invalid("not a ticket of this guard".to_owned()))?;
    this.read_event(&outcome)?;
    this.read_lifted(lifted)?;
    let text = std::str::from_utf8(&this.event)
        .map_err(|_| invalid("the outcome is not UTF-8".to_owned()))?;
    let root = this
        .tape
        .parse(text)
        .map_err(|e| invalid(format!("the outcome is not JSON: {e}")))?;
    let member = |key: &str| root.as_object().and_then(|o| o.get(key));
    let outcome = match (member("error"), member("result")) {
        (Some(error), _) => OutcomeOf::Error(lifted::Lifted::new(error, &this.lifted)),
        (None, Some(result)) => OutcomeOf::Result(lifted::Lifted::new(result, &this.lifted)),
        (None, None) => OutcomeOf::Nothing,
    };
    let recorded = this.replayer.guard_mut().finish(ticket, outcome);
    Ok(native_recorded(recorded))
}

/// A result event as a JavaScript object.
#[napi]
pub fn result_object(
    guard: &External<RefCell<NativeGuard>>,
    event: Value,
) -> Result<Either<bool, NativeRecorded>> {
    let mut this = enter(guard)?;
    let this = &mut *this;
    let event = from_value(event).map_err(invalid)?;
    match this.replayer.apply(0, &event.as_ref()) {
        Answer::Result { recorded, .. } => Ok(native_recorded(recorded)),
        other => Err(unexpected(&other)),
    }
}

/// A message event as JSON text: the verdict, or `null` for allow.
#[napi(ts_args_type = "guard: ExternalObject<NativeGuard>, event: string")]
pub fn message_text(
    guard: &External<RefCell<NativeGuard>>,
    event: JsString,
) -> Result<Option<NativeVerdict>> {
    verdict_text(guard, &event)
}

/// A compaction event as JSON text: the number of attempts the post-compaction guard
/// watches (0 when it is disabled).
#[napi]
pub fn compaction_text(guard: &External<RefCell<NativeGuard>>, event: String) -> Result<u32> {
    let mut this = enter(guard)?;
    let this = &mut *this;
    match this.replayer.apply_line(0, event.as_bytes()) {
        Answer::Compaction { armed, .. } => Ok(armed),
        other => Err(unexpected(&other)),
    }
}

/// A usage event as JSON text: the answer's JSON text (`counted`, `cost`, `stop`, and
/// `shadow_stop` in shadow mode); figures the protocol refuses throw, counting nothing.
#[napi]
pub fn usage_text(guard: &External<RefCell<NativeGuard>>, event: String) -> Result<String> {
    let mut this = enter(guard)?;
    let this = &mut *this;
    match this.replayer.apply_line(0, event.as_bytes()) {
        answer @ Answer::Usage { .. } => {
            serde_json::to_string(&answer).map_err(|e| Error::from_reason(e.to_string()))
        }
        other => Err(unexpected(&other)),
    }
}

/// Any line of the replay protocol, answered as `loopguard replay` prints it (the
/// answer's JSON text, error lines included).
#[napi]
pub fn apply_line(
    guard: &External<RefCell<NativeGuard>>,
    seq: u32,
    line: Either<String, Buffer>,
) -> Result<String> {
    let mut this = enter(guard)?;
    let this = &mut *this;
    let bytes: &[u8] = match &line {
        Either::A(text) => text.as_bytes(),
        Either::B(buffer) => buffer,
    };
    let answer = this.replayer.apply_line(u64::from(seq), bytes);
    serde_json::to_string(&answer).map_err(|e| Error::from_reason(e.to_string()))
}

/// Forgets a run; returns whether it existed.
#[napi]
pub fn end_run(
    guard: &External<RefCell<NativeGuard>>,
    session: Option<String>,
    run: Option<String>,
) -> Result<bool> {
    let mut this = enter(guard)?;
    let this = &mut *this;
    let scope = loopguard::Scope::new(session.as_deref().unwrap_or("")).with_run(run.as_deref());
    Ok(this.replayer.guard_mut().end_run(&scope))
}

/// Forgets a session and all its runs; returns whether it existed.
#[napi]
pub fn end_session(guard: &External<RefCell<NativeGuard>>, session: String) -> Result<bool> {
    let mut this = enter(guard)?;
    let this = &mut *this;
    Ok(this.replayer.guard_mut().end_session(&session))
}

/// The settings in force for `agent` (the global ones without an agent, or for an
/// agent without blocks of its own): merged, defaulted and clamped, with every clamp
/// and unreachable threshold explained.
#[napi]
pub fn config_explain(
    guard: &External<RefCell<NativeGuard>>,
    agent: Option<String>,
) -> Result<Value> {
    let this = enter(guard)?;
    let set = this.replayer.guard().config();
    let agent = agent.as_deref().and_then(loopguard::text::non_blank);
    let own_block = agent.is_some_and(|a| set.agents().any(|(id, _, _)| id == a));
    let effective = serde_json::to_value(set.for_agent(agent))
        .map_err(|e| Error::from_reason(e.to_string()))?;
    Ok(serde_json::json!({
        "agent": agent,
        "ownBlock": own_block,
        "effective": effective,
    }))
}

/// The guard's state for one call. A call that runs JavaScript (reading the lifted strings
/// of an array whose elements are getters) could call the guard again from inside: that
/// call gets an error instead of a second, aliasing borrow.
fn enter(guard: &External<RefCell<NativeGuard>>) -> Result<RefMut<'_, NativeGuard>> {
    guard
        .try_borrow_mut()
        .map_err(|_| Error::from_reason("the guard was called again from inside one of its calls"))
}

impl NativeGuard {
    /// Reads an outcome's lifted strings into the reused buffer.
    fn read_lifted(&mut self, lifted: Option<Either<JsString, Array>>) -> Result<()> {
        self.lifted.clear();
        match lifted {
            None => {}
            Some(Either::A(string)) => self
                .lifted
                .push_with(|text| js_text::push_str(&string, text).map(drop))?,
            Some(Either::B(strings)) => {
                for i in 0..strings.len() {
                    let string: JsString = strings
                        .get(i)?
                        .ok_or_else(|| invalid("lifted strings must be strings".into()))?;
                    self.lifted
                        .push_with(|text| js_text::push_str(&string, text).map(drop))?;
                }
            }
        }
        Ok(())
    }

    /// Reads an event's text into the reused buffer.
    fn read_event(&mut self, event: &JsString<'_>) -> Result<()> {
        self.event.clear();
        if self.event.capacity() > KEEP_BYTES {
            self.event.shrink_to(KEEP_BYTES);
        }
        js_text::push_bytes(event, &mut self.event).map(drop)
    }
}

/// Buffers larger than this are given back after use.
const KEEP_BYTES: usize = 16 << 20;

/// An event read from text, its outcome read through `strings` (its arguments are never
/// lifted).
fn lift<'a>(
    event: EventRef<'a, Raw<'a>>,
    strings: &'a lifted::Strings,
) -> EventRef<'a, lifted::Lifted<'a>> {
    event.map_json(
        |args| lifted::Lifted::new(args, &lifted::NONE),
        |outcome| lifted::Lifted::new(outcome, strings),
    )
}

/// A `loopguard serve` answer to a call event (its JSON text) as the verdict `callText`
/// gives (`null` for an allow): read back into the engine's own values by the protocol
/// crate, so a sidecar's blocked result and warning note are the engine's. `tool` is the
/// call's (for the answer to a message event, the message's role).
#[napi]
pub fn verdict_from_answer(answer: String, tool: String) -> Result<Option<NativeVerdict>> {
    match Answer::from_json(answer.as_bytes(), &tool).map_err(invalid)? {
        Answer::Call { verdict, .. } | Answer::Message { verdict, .. } => {
            Ok(native_verdict(&verdict))
        }
        other => Err(invalid(format!(
            "not the answer to a call or a message: {}",
            serde_json::to_string(&other).unwrap_or_default()
        ))),
    }
}

/// The problems of a config document with their positions, or `null` when it is valid.
#[napi]
pub fn config_issues(text: String, origin: Option<String>) -> Option<Vec<NativeConfigIssue>> {
    let error = ConfigSet::parse_named(&text, origin.as_deref()).err()?;
    Some(error.issues.iter().map(native_issue).collect())
}

/// What the guard's config document holds that is not wrong but does nothing (a key that
/// looks like a misspelt block name: `ConfigSet::warnings`), each with its place in the
/// document `origin` (a file name) as the CLI prints it, for `process.emitWarning`.
#[napi]
pub fn config_warnings(
    guard: &External<RefCell<NativeGuard>>,
    origin: Option<String>,
) -> Result<Vec<NativeConfigWarning>> {
    let this = enter(guard)?;
    Ok(this
        .replayer
        .guard()
        .config()
        .warnings()
        .iter()
        .map(|issue| NativeConfigWarning {
            issue: native_issue(issue),
            located: issue.located(origin.as_deref()).to_string(),
        })
        .collect())
}

/// A config warning: the issue, and the same with its place as one line.
#[napi(object)]
pub struct NativeConfigWarning {
    pub issue: NativeConfigIssue,
    /// `FILE:LINE:COLUMN: message`, as `loopguard config check` prints it.
    pub located: String,
}

fn native_issue(issue: &loopguard::config::ConfigIssue) -> NativeConfigIssue {
    NativeConfigIssue {
        path: issue.path.clone(),
        line: issue.position.map(|p| saturate(p.line)),
        column: issue.position.map(|p| saturate(p.column)),
        message: issue.to_string(),
    }
}

/// Every key each config block accepts, by the block's path inside a scope (for schemas
/// written elsewhere, such as the OpenClaw plugin's, to be checked against).
#[napi]
pub fn config_keys() -> Value {
    loopguard::config::known_keys()
        .into_iter()
        .map(|(path, keys)| (path.to_owned(), Value::from(keys.to_vec())))
        .collect::<serde_json::Map<_, _>>()
        .into()
}

fn saturate(n: usize) -> u32 {
    u32::try_from(n).unwrap_or(u32::MAX)
}

fn invalid(message: String) -> Error {
    Error::new(Status::InvalidArg, message)
}

/// An event of one kind answered as another: the JavaScript side built the wrong event.
fn unexpected(answer: &Answer) -> Error {
    match answer {
        Answer::Invalid { error, .. } => invalid(error.clone()),
        _ => Error::from_reason("internal error: the event was answered as another kind"),
    }
}

fn native_verdict(verdict: &Verdict) -> Option<NativeVerdict> {
    let detection = verdict.detection()?;
    let (kind, notify, terminal, shadow) = match verdict {
        Verdict::Allow => return None,
        Verdict::Warn { notify, .. } => ("warn", *notify, false, None),
        Verdict::Block { terminal, .. } => ("block", false, *terminal, None),
        Verdict::Shadow {
            detection,
            terminal,
        } => (
            "allow",
            false,
            false,
            Some(native_shadow(detection, *terminal)),
        ),
        // A verdict this binding has no word for yet: blocked stays blocked.
        other if other.is_blocked() => ("block", false, false, None),
        _ => ("allow", false, false, None),
    };
    if let Some(shadow) = shadow {
        return Some(NativeVerdict {
            verdict: kind.to_owned(),
            level: None,
            detector: None,
            count: None,
            message: None,
            notify,
            terminal,
            paired_tool: None,
            blocked_result: None,
            warning_note: None,
            shadow: Some(shadow),
        });
    }
    Some(NativeVerdict {
        verdict: kind.to_owned(),
        level: Some(detection.level.as_str().to_owned()),
        detector: Some(detection.detector.as_str().to_owned()),
        count: Some(detection.count),
        message: Some(detection.message.clone()),
        notify,
        terminal,
        paired_tool: detection.evidence.paired_tool().map(str::to_owned),
        blocked_result: verdict.blocked_result(),
        warning_note: verdict.warning_note(),
        shadow: None,
    })
}

fn native_shadow(detection: &Detection, terminal: bool) -> NativeShadow {
    let block = detection.level == loopguard::Level::Critical;
    NativeShadow {
        verdict: if block { "block" } else { "warn" }.to_owned(),
        level: detection.level.as_str().to_owned(),
        detector: detection.detector.as_str().to_owned(),
        count: detection.count,
        message: detection.message.clone(),
        terminal: block && terminal,
        paired_tool: detection.evidence.paired_tool().map(str::to_owned),
    }
}

fn native_abort(abort: Abort) -> NativeAbort {
    NativeAbort {
        detector: abort.detector().as_str().to_owned(),
        tool: abort.tool,
        count: abort.count,
        message: abort.message,
    }
}

/// The common answer (nothing to say but whether the outcome counted) crosses as a bare
/// boolean: the package maps it to one of two frozen objects, so it builds nothing.
fn native_recorded(recorded: Recorded) -> Either<bool, NativeRecorded> {
    if recorded.abort.is_none() && recorded.would_abort.is_none() {
        return Either::A(recorded.recorded);
    }
    Either::B(NativeRecorded {
        recorded: recorded.recorded,
        abort: recorded.abort.map(native_abort),
        shadow_abort: recorded.would_abort.map(native_abort),
    })
}
