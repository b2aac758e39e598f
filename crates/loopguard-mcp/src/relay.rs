//! The proxy's decisions on each line, without any I/O: what goes to the server, what goes
//! back to the client, and what the engine is told.
//!
//! **Calls in flight are part of the loop.** A client may send a `tools/call` before the
//! answer to an identical one (same tool, same arguments as the policy compares them) has
//! come back; screened at once, it would be judged without that answer, and a pipelined
//! loop would run a few calls further than a sequential one. Such a call is **held** until
//! the identical call in flight is answered, then screened with its outcome: forwarded, or
//! answered by the proxy when blocked. Different calls are never held, and calls inside one
//! JSON-RPC batch are screened together (they are the parallel calls of one message). A
//! held call that the client cancels is dropped; a call in flight that the client cancels
//! releases the calls held behind it.

use std::collections::{HashMap, HashSet, VecDeque};

use loopguard::json::{to_value, Json, Raw, Tape};
use loopguard::{
    Call, CallPrint, ConfigSet, Guard, OutcomeOf, Recorded, Scope, Signature, Ticket, Verdict,
};
use serde_json::{Map, Value};

use crate::framing::{id_key, id_value, is_blank, kind, Kind};
use crate::large::{call_params, call_response, Envelope, READ_WHOLE_BELOW};
use crate::outcome::{
    append_text, blocked_response, connection_closed, line_too_long, map_raw_response,
    map_response, unreadable_response, MappedText,
};

/// A client request forwarded to the server and not answered yet.
#[derive(Debug)]
struct Open {
    id: Value,
    call: Option<PendingCall>,
}

/// A forwarded `tools/call`: its ticket, finished with the server's response (dropped,
/// the call did not run, when the client cancels it or the server cannot answer).
#[derive(Debug)]
struct PendingCall {
    ticket: Ticket,
    /// The warning to append to its result.
    note: Option<String>,
}

impl PendingCall {
    fn signature(&self) -> Signature {
        self.ticket.signature()
    }
}

/// A `tools/call` waiting for an identical call in flight to be answered.
#[derive(Clone, Debug)]
struct Held {
    id: Value,
    tool: String,
    args: Args,
    signature: Signature,
    /// The client's line, forwarded as it came when the call is allowed.
    line: Vec<u8>,
}

/// A held call's arguments, kept to judge the call when it is released.
#[derive(Clone, Debug)]
enum Args {
    Value(Value),
    /// Arguments a `Value` cannot hold (a number beyond the double range, a lone surrogate
    /// escape, nesting past 128 levels), as canonical JSON text, which keeps their
    /// fingerprint.
    Text(String),
}

impl Args {
    fn of<'j, J: Json<'j>>(args: J) -> Self {
        match to_value(args) {
            Some(value) => Self::Value(value),
            None => Self::Text(loopguard::canonical::json_text(args)),
        }
    }
}

/// Evaluates `$body` with `$a` bound to `$args` (an [`Args`]) as a [`Json`] view.
macro_rules! with_args {
    ($args:expr, |$a:ident| $body:expr) => {
        match $args {
            Args::Value(value) => {
                let $a = value;
                $body
            }
            Args::Text(text) => {
                let mut tape = Tape::new();
                let empty = Value::Object(Map::new());
                match tape.parse(text) {
                    Ok($a) => $body,
                    // Canonical text always parses.
                    Err(_) => {
                        let $a = &empty;
                        $body
                    }
                }
            }
        }
    };
}

/// A batch some of whose calls the proxy answered itself: those answers join the server's
/// response to the rest of the batch.
#[derive(Clone, Debug)]
struct BatchFix {
    ids: HashSet<String>,
    answers: Vec<Value>,
}

/// What to do after a line from either side: lines for each side, in order (each without
/// its newline), and diagnostics.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Routed {
    /// Lines for the server.
    pub to_server: Vec<Vec<u8>>,
    /// Lines for the client.
    pub to_client: Vec<Vec<u8>>,
    /// Diagnostics for stderr.
    pub log: Vec<String>,
}

/// The proxy's state: the engine, and the requests on their way.
#[derive(Debug)]
pub struct Relay {
    guard: Guard,
    session: String,
    agent: Option<String>,
    open: HashMap<String, Open>,
    held: VecDeque<Held>,
    batches: Vec<BatchFix>,
}

/// The screening of one `tools/call`.
enum Screened {
    Blocked(Value),
    Allowed(PendingCall),
}

/// What becomes of one message from the client.
enum Route {
    Forward,
    Answer(Value),
    Hold,
}

impl Relay {
    /// A relay whose calls all belong to session `session` (run: none), under the config of
    /// `agent`.
    pub fn new(config: ConfigSet, session: String, agent: Option<String>) -> Self {
        Self {
            guard: Guard::new(config),
            session,
            agent,
            open: HashMap::new(),
            held: VecDeque::new(),
            batches: Vec::new(),
        }
    }

    /// Requests forwarded to the server and not answered yet.
    pub fn open_requests(&self) -> usize {
        self.open.len()
    }

    /// Calls held until an identical call in flight is answered.
    pub fn held_calls(&self) -> usize {
        self.held.len()
    }

    fn scope(&self) -> Scope<'_> {
        Scope::new(&self.session).with_agent(self.agent.as_deref())
    }

    /// Handles a line the client sent.
    pub fn from_client(&mut self, line: &[u8]) -> Routed {
        let mut out = Routed::default();
        if is_blank(line) {
            return out;
        }
        if line.len() >= READ_WHOLE_BELOW {
            if let Some(message) = large_request(line) {
                self.route_client_message(&message, line, &mut out);
                return out;
            }
        }
        let Ok(message) = serde_json::from_slice::<Value>(line) else {
            return self.client_line_raw(line);
        };
        match message {
            Value::Array(items) => self.client_batch(line, items, &mut out),
            message => self.route_client_message(&message, line, &mut out),
        }
        out
    }

    /// Routes one message the client sent alone on `line`.
    fn route_client_message(&mut self, message: &Value, line: &[u8], out: &mut Routed) {
        match self.client_message(message, Some(line), out) {
            Route::Answer(answer) => out.to_client.push(answer.to_string().into_bytes()),
            // Lines released by a cancellation follow the cancellation itself.
            Route::Forward => out.to_server.insert(0, line.to_vec()),
            Route::Hold => {}
        }
    }

    /// A client line that is not a `Value`: JSON a `Value` cannot hold (a number beyond the
    /// double range, a lone surrogate escape, nesting past 128 levels), screened from the
    /// raw text like any other, or not JSON at all, which the server answers (with a parse
    /// error) as it would without us.
    fn client_line_raw(&mut self, line: &[u8]) -> Routed {
        let mut out = Routed::default();
        let mut tape = Tape::new();
        let Some(message) = std::str::from_utf8(line)
            .ok()
            .and_then(|text| tape.parse(text).ok())
        else {
            out.to_server.push(line.to_vec());
            return out;
        };
        let Some(items) = message.as_array() else {
            match self.client_message(message, Some(line), &mut out) {
                Route::Answer(answer) => out.to_client.push(answer.to_string().into_bytes()),
                Route::Forward => out.to_server.insert(0, line.to_vec()),
                Route::Hold => {}
            }
            return out;
        };
        let mut kept = Vec::new();
        let mut answers = Vec::new();
        for item in items {
            match self.client_message(item, None, &mut out) {
                Route::Answer(answer) => answers.push(answer),
                Route::Forward | Route::Hold => kept.push(item),
            }
        }
        let released = std::mem::take(&mut out.to_server);
        if answers.is_empty() {
            out.to_server.push(line.to_vec());
        } else {
            let requests = requests_of(kept.iter().copied());
            // The rest of the batch, as written (whitespace aside).
            let texts: Vec<String> = kept.iter().map(|&m| m.to_json_text()).collect();
            let kept = (!kept.is_empty()).then(|| format!("[{}]", texts.join(",")).into_bytes());
            self.batch_answers(kept, requests, answers, &mut out);
        }
        out.to_server.extend(released);
        out
    }

    /// Handles a client line longer than the proxy reads: `head` is its beginning. A
    /// request is answered with an error (the server never sees it), so the client does not
    /// wait forever.
    pub fn client_line_too_long(&mut self, head: &[u8], len: usize, max: usize) -> Routed {
        let mut out = Routed::default();
        let (id, method) = crate::framing::leading_id(head);
        match (id, method) {
            (Some(id), Some(method)) => {
                out.log.push(format!(
                    "answered request {id} ({method}) with an error: its line of {len} bytes is longer than {max}"
                ));
                out.to_client
                    .push(line_too_long(&id, len, max).to_string().into_bytes());
            }
            _ => out.log.push(format!(
                "skipped a line of {len} bytes from the client (longer than {max}; no request id in its first bytes)"
            )),
        }
        out
    }

    /// Handles a server line longer than the proxy reads: `head` is its beginning. A
    /// response to an open request is replaced by an error, so the client does not wait
    /// forever; nothing is recorded for a call it answered.
    pub fn server_line_too_long(&mut self, head: &[u8], len: usize, max: usize) -> Routed {
        let mut out = Routed::default();
        let (id, method) = crate::framing::leading_id(head);
        let open = match (&id, method) {
            (Some(id), None) => self.open.remove(&id_key(id)),
            _ => None,
        };
        match open {
            Some(open) => {
                out.log.push(format!(
                    "answered request {} with an error: the server's response of {len} bytes is longer than {max}",
                    open.id
                ));
                let answer = line_too_long(&open.id, len, max);
                self.answer_for_server(open, &answer, &mut out);
            }
            None => out.log.push(format!(
                "dropped a line of {len} bytes from the server (longer than {max})"
            )),
        }
        out
    }

    /// Answers `open` in the server's place with `answer`, when the server's response to it
    /// cannot be passed on: a call ran, but its outcome is lost (its ticket goes
    /// unfinished), and the calls held behind it go on.
    fn answer_for_server(&mut self, open: Open, answer: &Value, out: &mut Routed) {
        out.to_client.push(answer.to_string().into_bytes());
        if let Some(call) = open.call {
            let signature = call.signature();
            call.ticket.cancel();
            self.release(signature, out);
        }
    }

    /// Handles one message from the client. `line` is its own line when it came alone (a
    /// call in a batch is never held).
    fn client_message<'j, J: Json<'j>>(
        &mut self,
        message: J,
        line: Option<&[u8]>,
        out: &mut Routed,
    ) -> Route {
        match kind(message) {
            Kind::Request { id, method } => {
                let call = if method == "tools/call" {
                    let Some((tool, args)) = call_of(message.get("params")) else {
                        // No tool named: the server refuses it.
                        self.open.insert(
                            id_key(id),
                            Open {
                                id: id_value(id).unwrap_or(Value::Null),
                                call: None,
                            },
                        );
                        return Route::Forward;
                    };
                    let signature = self.signature(&tool, &args);
                    let id = id_value(id).unwrap_or(Value::Null);
                    if let Some(line) = line.filter(|_| self.in_flight(signature)) {
                        out.log.push(format!(
                            "held tools/call {tool} (id {id}) until the identical call in flight is answered"
                        ));
                        self.held.push_back(Held {
                            id,
                            tool,
                            args,
                            signature,
                            line: line.to_vec(),
                        });
                        return Route::Hold;
                    }
                    match self.screen(&id, &tool, &args, &mut out.log) {
                        Screened::Blocked(answer) => return Route::Answer(answer),
                        Screened::Allowed(call) => Some(call),
                    }
                } else {
                    None
                };
                self.open.insert(
                    id_key(id),
                    Open {
                        id: id_value(id).unwrap_or(Value::Null),
                        call,
                    },
                );
            }
            Kind::Notification {
                method: "notifications/cancelled",
            } => {
                // The server need not answer a cancelled request; nothing of it is recorded.
                if let Some(id) = message.get("params").and_then(|p| p.get("requestId")) {
                    let key = id_key(id);
                    self.held.retain(|h| id_key(&h.id) != key);
                    if let Some(Open {
                        call: Some(call), ..
                    }) = self.open.remove(&key)
                    {
                        let signature = call.signature();
                        call.ticket.cancel();
                        self.release(signature, out);
                    }
                }
            }
            _ => {}
        }
        Route::Forward
    }

    fn client_batch(&mut self, line: &[u8], items: Vec<Value>, out: &mut Routed) {
        let mut kept = Vec::with_capacity(items.len());
        let mut answers = Vec::new();
        for item in items {
            match self.client_message(&item, None, out) {
                Route::Answer(answer) => answers.push(answer),
                Route::Forward | Route::Hold => kept.push(item),
            }
        }
        // Lines released by cancellations in the batch follow the batch.
        let released = std::mem::take(&mut out.to_server);
        if answers.is_empty() {
            out.to_server.push(line.to_vec());
        } else {
            let requests = requests_of(kept.iter());
            let kept = (!kept.is_empty()).then(|| Value::Array(kept).to_string().into_bytes());
            self.batch_answers(kept, requests, answers, out);
        }
        out.to_server.extend(released);
    }

    /// A batch some of whose calls the proxy answered: the rest (`kept`, a line) goes to
    /// the server, and the answers go back at once when no response from the server will
    /// carry them, else with that response.
    fn batch_answers(
        &mut self,
        kept: Option<Vec<u8>>,
        requests: HashSet<String>,
        answers: Vec<Value>,
        out: &mut Routed,
    ) {
        out.to_server.extend(kept);
        if requests.is_empty() {
            out.to_client
                .push(Value::Array(answers).to_string().into_bytes());
        } else {
            self.batches.push(BatchFix {
                ids: requests,
                answers,
            });
        }
    }

    /// The call's signature under the config in force (to hold it behind an identical
    /// call in flight before judging it).
    fn signature(&self, tool: &str, args: &Args) -> Signature {
        let cfg = self.guard.config().for_agent(self.scope().agent());
        with_args!(args, |a| CallPrint::for_config(tool, a, cfg).signature)
    }

    /// Whether a call with `signature` was forwarded and is not answered yet.
    fn in_flight(&self, signature: Signature) -> bool {
        self.open
            .values()
            .any(|o| o.call.as_ref().is_some_and(|c| c.signature() == signature))
    }

    /// Screens the calls held behind an identical call that is no longer in flight: the
    /// first allowed one is forwarded (and holds the rest again), blocked ones are answered.
    fn release(&mut self, signature: Signature, out: &mut Routed) {
        while !self.in_flight(signature) {
            let Some(at) = self.held.iter().position(|h| h.signature == signature) else {
                return;
            };
            let Some(held) = self.held.remove(at) else {
                return;
            };
            match self.screen(&held.id, &held.tool, &held.args, &mut out.log) {
                Screened::Blocked(answer) => out.to_client.push(answer.to_string().into_bytes()),
                Screened::Allowed(call) => {
                    self.open.insert(
                        id_key(&held.id),
                        Open {
                            id: held.id,
                            call: Some(call),
                        },
                    );
                    out.to_server.push(held.line);
                }
            }
        }
    }

    /// Asks the engine about a `tools/call`: begins its ticket.
    fn screen(&mut self, id: &Value, tool: &str, args: &Args, log: &mut Vec<String>) -> Screened {
        let key = id_key(id);
        let scope = Scope::new(&self.session).with_agent(self.agent.as_deref());
        let ticket = with_args!(args, |a| {
            self.guard
                .begin(&scope, &Call::with_args(tool, a).with_id(Some(&key)))
        });
        match ticket.verdict() {
            Verdict::Block {
                detection,
                terminal,
            } => {
                log.push(format!(
                    "blocked tools/call {tool} ({}, {}{})",
                    detection.detector,
                    detection.count,
                    if *terminal { ", run stopped" } else { "" }
                ));
                Screened::Blocked(blocked_response(id, &detection.message))
            }
            _ => {
                let note = ticket.warning_note();
                if let Some(note) = &note {
                    log.push(format!("warned tools/call {tool}: {note}"));
                }
                Screened::Allowed(PendingCall { ticket, note })
            }
        }
    }

    /// Handles a line the server sent.
    pub fn from_server(&mut self, line: &[u8]) -> Routed {
        self.from_server_owned(line.to_vec())
    }

    /// [`Relay::from_server`], given the line to keep: a line passed on unchanged is not
    /// copied (a tool result may be tens of megabytes).
    pub fn from_server_owned(&mut self, line: Vec<u8>) -> Routed {
        if is_blank(&line) {
            return Routed::default();
        }
        let line = if line.len() >= READ_WHOLE_BELOW {
            match self.server_line_large(line) {
                Ok(routed) => return routed,
                Err(line) => line,
            }
        } else {
            line
        };
        let Ok(message) = serde_json::from_slice::<Value>(&line) else {
            return self.server_line_raw(&line);
        };
        let mut out = Routed::default();
        // The calls this line answers release the calls held behind them, after it.
        let mut answered = Vec::new();
        let line_out = match message {
            Value::Array(mut items) => {
                let mut changed = false;
                let mut ids = HashSet::new();
                for item in &mut items {
                    if let Kind::Response { id } = kind(&*item) {
                        ids.insert(id_key(id));
                    }
                    changed |= self.server_message(item, &mut answered, &mut out.log);
                }
                if let Some(at) = self.batches.iter().position(|b| !b.ids.is_disjoint(&ids)) {
                    items.extend(self.batches.swap_remove(at).answers);
                    changed = true;
                }
                if changed {
                    Value::Array(items).to_string().into_bytes()
                } else {
                    line
                }
            }
            mut message => {
                if self.server_message(&mut message, &mut answered, &mut out.log) {
                    message.to_string().into_bytes()
                } else {
                    line
                }
            }
        };
        out.to_client.push(line_out);
        for signature in answered {
            self.release(signature, &mut out);
        }
        out
    }

    /// A server line that is not a `Value`: JSON a `Value` cannot hold is passed on
    /// unchanged, and the outcomes it carries are recorded (without notes: they would
    /// need the line rewritten); anything else is dropped, as the client's reader would
    /// break on it.
    fn server_line_raw(&mut self, line: &[u8]) -> Routed {
        let mut out = Routed::default();
        let mut tape = Tape::new();
        let Some(message) = std::str::from_utf8(line)
            .ok()
            .and_then(|text| tape.parse(text).ok())
        else {
            // A server must write only MCP messages on stdout; passing anything else on
            // would break the client's reader. When the line names a request still open,
            // that request is answered with an error instead, and the calls held behind it
            // go on: the client must not wait for an answer that will never come.
            let (id, method) = crate::framing::leading_id(line);
            let open = match (&id, method) {
                (Some(id), None) => self.open.remove(&id_key(id)),
                _ => None,
            };
            let Some(open) = open else {
                out.log.push(format!(
                    "dropped a line from the server that is not JSON: {}",
                    preview(line)
                ));
                return out;
            };
            out.log.push(format!(
                "answered request {} with an error: the server's response is not JSON: {}",
                open.id,
                preview(line)
            ));
            let answer = unreadable_response(&open.id);
            self.answer_for_server(open, &answer, &mut out);
            return out;
        };
        let messages: Vec<Raw<'_>> = match message.as_array() {
            Some(items) => items.collect(),
            None => vec![message],
        };
        let mut answered = Vec::new();
        for message in messages {
            let Kind::Response { id } = kind(message) else {
                continue;
            };
            let key = id_key(id);
            let Some(Open {
                call: Some(call), ..
            }) = self.open.remove(&key)
            else {
                continue;
            };
            answered.push(call.signature());
            let Some(response) = message.as_object() else {
                call.ticket.cancel();
                continue;
            };
            let mapped = map_raw_response(response);
            let mut outcome_tape = Tape::new();
            let outcome = match &mapped {
                MappedText::Result(text) => outcome_tape.parse(text).ok().map(OutcomeOf::Result),
                MappedText::Error(text) => outcome_tape.parse(text).ok().map(OutcomeOf::Error),
                MappedText::Nothing => Some(OutcomeOf::Nothing),
            };
            let (tool, noted) = (call.ticket.tool().to_owned(), call.note.is_some());
            let recorded = self.record(call, outcome.unwrap_or(OutcomeOf::Nothing));
            if noted || recorded.abort.is_some() {
                out.log.push(format!(
                    "tools/call {tool}: a note for the model was not added to a response that is not a plain JSON value"
                ));
            }
            if let Some(reason) = recorded.ends_run() {
                out.log
                    .push(format!("run stopped after tools/call {tool}: {reason}"));
            }
        }
        out.to_client.push(line.to_vec());
        for signature in answered {
            self.release(signature, &mut out);
        }
        out
    }

    /// A server line too large to read whole (see [`crate::large`]): a response to an open
    /// call has its outcome recorded from its parts, parts too large known by their bytes,
    /// and goes on unchanged (or with its note inserted); anything else goes on unchanged
    /// unless it is a batch or does not read this way, which the caller reads whole
    /// (`Err` gives the line back).
    fn server_line_large(&mut self, line: Vec<u8>) -> Result<Routed, Vec<u8>> {
        let mut out = Routed::default();
        let Some(envelope) = Envelope::read(&line) else {
            return Err(line);
        };
        let is_response =
            envelope.method.is_none() && (envelope.result.is_some() || envelope.error.is_some());
        let key = match envelope.id().filter(|_| is_response) {
            Some(id) => id_key(&id),
            // A request or a notification of the server's own: passed on.
            None => {
                out.to_client.push(line);
                return Ok(out);
            }
        };
        let calls = self.open.get(&key).is_some_and(|o| o.call.is_some());
        if !calls {
            self.open.remove(&key);
            out.to_client.push(line);
            return Ok(out);
        }
        let Some((response, insert)) = call_response(&line, &envelope) else {
            return Err(line);
        };
        let Some(Open {
            call: Some(mut call),
            ..
        }) = self.open.remove(&key)
        else {
            return Err(line);
        };
        let signature = call.signature();
        let outcome = response
            .as_object()
            .map_or(crate::outcome::Mapped::Nothing, map_response);
        let note = call.note.take();
        let tool = call.ticket.tool().to_owned();
        let recorded = self.record(call, outcome.as_outcome());
        let texts: Vec<&str> = note
            .as_deref()
            .into_iter()
            .chain(recorded.ends_run())
            .collect();
        let line = match insert.apply(&line, &texts).filter(|_| !texts.is_empty()) {
            Some(noted) => noted,
            None => {
                if !texts.is_empty() {
                    out.log.push(format!(
                        "tools/call {tool}: a note for the model was not added to a response without a result to add it to"
                    ));
                }
                line
            }
        };
        if let Some(reason) = recorded.ends_run() {
            out.log
                .push(format!("run stopped after tools/call {tool}: {reason}"));
        }
        out.to_client.push(line);
        self.release(signature, &mut out);
        Ok(out)
    }

    /// Records what a forwarded call returned: finishes its ticket.
    fn record<'o, O: Json<'o>>(&mut self, call: PendingCall, outcome: OutcomeOf<O>) -> Recorded {
        self.guard.finish(call.ticket, outcome)
    }

    /// Handles one message from the server; returns whether it was changed. The signature
    /// of a call it answers is added to `answered`.
    fn server_message(
        &mut self,
        message: &mut Value,
        answered: &mut Vec<Signature>,
        log: &mut Vec<String>,
    ) -> bool {
        let Kind::Response { id } = kind(&*message) else {
            return false;
        };
        let key = id_key(id);
        let Some(Open {
            call: Some(mut call),
            ..
        }) = self.open.remove(&key)
        else {
            return false;
        };
        answered.push(call.signature());
        let Some(response) = message.as_object_mut() else {
            call.ticket.cancel();
            return false;
        };
        let outcome = map_response(response);
        let note = call.note.take();
        let tool = call.ticket.tool().to_owned();
        let recorded = self.record(call, outcome.as_outcome());
        let mut changed = false;
        for text in note.iter().map(String::as_str).chain(recorded.ends_run()) {
            changed |= append_text(response, text);
        }
        if let Some(reason) = recorded.ends_run() {
            log.push(format!("run stopped after tools/call {tool}: {reason}"));
        }
        changed
    }

    /// The answers owed to the client for every request still open or held, when the
    /// server can no longer answer (`why` says what happened); forgets them.
    pub fn close(&mut self, why: &str) -> Vec<Vec<u8>> {
        let mut ids: Vec<Value> = self.open.drain().map(|(_, o)| o.id).collect();
        ids.extend(self.held.drain(..).map(|h| h.id));
        ids.sort_by_key(Value::to_string);
        self.batches.clear();
        ids.iter()
            .map(|id| connection_closed(id, why).to_string().into_bytes())
            .collect()
    }
}

/// A client line too large to read whole, as a message small enough to route (see
/// [`crate::large`]): a request with its method, and for a `tools/call` its params, the
/// arguments known by their bytes when too large to read. `None` for anything else (a
/// notification, a batch, a line that does not read this way): the caller reads it whole.
fn large_request(line: &[u8]) -> Option<Value> {
    let envelope = Envelope::read(line)?;
    let id = envelope.id()?;
    let method = envelope.method()?;
    let mut message = Map::new();
    message.insert("jsonrpc".into(), Value::from("2.0"));
    message.insert("id".into(), id);
    if method == "tools/call" {
        message.insert("params".into(), call_params(envelope.params?)?);
    }
    message.insert("method".into(), Value::String(method));
    Some(Value::Object(message))
}

/// The tool and arguments of a `tools/call`'s params; `None` when they name no tool.
fn call_of<'j, J: Json<'j>>(params: Option<J>) -> Option<(String, Args)> {
    let tool = params?.get("name")?.as_str()?.to_owned();
    let args = match params.and_then(|p| p.get("arguments")) {
        Some(args) if !args.is_null() => Args::of(args),
        _ => Args::Value(Value::Object(Map::new())),
    };
    Some((tool, args))
}

/// The ids of the requests among `messages`.
fn requests_of<'j, J: Json<'j>>(messages: impl Iterator<Item = J>) -> HashSet<String> {
    messages
        .filter_map(|m| match kind(m) {
            Kind::Request { id, .. } => Some(id_key(id)),
            _ => None,
        })
        .collect()
}

fn preview(line: &[u8]) -> String {
    let text = String::from_utf8_lossy(&line[..line.len().min(200)]);
    let text = text.escape_debug().to_string();
    if line.len() > 200 {
        format!("{text}…")
    } else {
        text
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    const LOW: &str = "{ tools: { loopDetection: { enabled: true, warningThreshold: 2, criticalThreshold: 3 } } }";

    fn relay() -> Relay {
        Relay::new(ConfigSet::parse(LOW).unwrap(), "s".into(), None)
    }

    fn call(id: u64) -> Vec<u8> {
        json!({"jsonrpc": "2.0", "id": id, "method": "tools/call", "params": {"name": "read", "arguments": {"path": "/x"}}})
            .to_string()
            .into_bytes()
    }

    fn result(id: u64) -> Vec<u8> {
        json!({"jsonrpc": "2.0", "id": id, "result": {"content": [{"type": "text", "text": "same"}], "isError": false}})
            .to_string()
            .into_bytes()
    }

    fn parse(bytes: &[u8]) -> Value {
        serde_json::from_slice(bytes).unwrap()
    }

    #[test]
    fn a_loop_is_warned_then_blocked_without_reaching_the_server() {
        let mut r = relay();
        let mut outcomes = Vec::new();
        for id in 1..=4 {
            let c = r.from_client(&call(id));
            if let [answer] = &c.to_client[..] {
                assert!(c.to_server.is_empty());
                outcomes.push(("blocked", parse(answer)));
                continue;
            }
            assert_eq!(c.to_server, vec![call(id)], "forwarded unchanged");
            let s = r.from_server(&result(id));
            outcomes.push(("answered", parse(&s.to_client[0])));
        }
        // Calls 1 and 2 pass unchanged; call 3 is warned (note appended); call 4 blocked.
        assert_eq!(outcomes[0].1, parse(&result(1)));
        assert_eq!(outcomes[1].1, parse(&result(2)));
        let warned = &outcomes[2].1["result"]["content"];
        assert_eq!(warned.as_array().unwrap().len(), 2);
        assert!(warned[1]["text"]
            .as_str()
            .unwrap()
            .starts_with("[loopguard] WARNING"));
        assert_eq!(outcomes[3].0, "blocked");
        assert_eq!(outcomes[3].1["id"], 4);
        assert_eq!(outcomes[3].1["result"]["isError"], true);
        assert!(outcomes[3].1["result"]["content"][0]["text"]
            .as_str()
            .unwrap()
            .starts_with("CRITICAL"));
        assert_eq!(r.open_requests(), 0);
    }

    /// Arguments a `Value` cannot hold are screened like any others: identical calls are
    /// warned, then blocked; their results (also beyond a `Value`) reach the client as sent.
    #[test]
    fn calls_beyond_a_value_are_screened() {
        let deep = format!("{}1{}", "[".repeat(200), "]".repeat(200));
        for args in [r#"{"n":1e999}"#, r#"{"s":"\ud800"}"#, deep.as_str()] {
            let mut r = relay();
            let mut outcomes = Vec::new();
            for id in 1..=4 {
                let call = format!(
                    r#"{{"jsonrpc":"2.0","id":{id},"method":"tools/call","params":{{"name":"read","arguments":{args}}}}}"#
                );
                let c = r.from_client(call.as_bytes());
                if let [answer] = &c.to_client[..] {
                    outcomes.push(("blocked", parse(answer)));
                    continue;
                }
                assert_eq!(c.to_server, vec![call.into_bytes()]);
                let result = format!(
                    r#"{{"jsonrpc":"2.0","id":{id},"result":{{"content":[{{"type":"text","text":"same \udc00"}}]}}}}"#
                );
                let s = r.from_server(result.as_bytes());
                assert_eq!(s.to_client, vec![result.into_bytes()], "passed on");
                outcomes.push(("answered", Value::Null));
            }
            assert_eq!(outcomes[3].0, "blocked", "{args}");
            assert_eq!(outcomes[3].1["id"], 4);
            assert_eq!(r.open_requests(), 0);
        }
    }

    #[test]
    fn raw_batches_forward_what_is_not_blocked() {
        let mut r = relay();
        let call = |id: u64| {
            format!(
                r#"{{"jsonrpc":"2.0","id":{id},"method":"tools/call","params":{{"name":"read","arguments":{{"n":1e999}}}}}}"#
            )
        };
        for id in 1..=3 {
            r.from_client(call(id).as_bytes());
            r.from_server(
                format!(r#"{{"jsonrpc":"2.0","id":{id},"result":{{"content":[]}}}}"#).as_bytes(),
            );
        }
        let batch = format!(
            r#"[{},{{"jsonrpc":"2.0","id":11,"method":"ping","params":{{"x":1.50}}}}]"#,
            call(10)
        );
        let c = r.from_client(batch.as_bytes());
        assert_eq!(
            c.to_server,
            vec![br#"[{"jsonrpc":"2.0","id":11,"method":"ping","params":{"x":1.50}}]"#.to_vec()]
        );
        let s = r.from_server(br#"[{"jsonrpc":"2.0","id":11,"result":{}}]"#);
        let answer = parse(&s.to_client[0]);
        assert_eq!(answer[1]["id"], 10);
        assert_eq!(answer[1]["result"]["isError"], true);
    }

    #[test]
    fn everything_else_passes_through_unchanged() {
        let mut r = relay();
        for line in [
            &br#"{"jsonrpc":"2.0","id":0,"method":"initialize","params":{"protocolVersion":"2025-11-25"}}"#[..],
            br#"{"jsonrpc":"2.0","method":"notifications/initialized"}"#,
            br#"{"jsonrpc":"2.0","id":"srv-1","result":{"roots":[]}}"#,
            br#"not json at all"#,
        ] {
            let c = r.from_client(line);
            assert_eq!((c.to_server, c.to_client), (vec![line.to_vec()], vec![]));
        }
        for line in [
            &br#"{"jsonrpc":"2.0","id":0,"result":{"protocolVersion":"2025-11-25","capabilities":{}}}"#[..],
            br#"{"jsonrpc":"2.0","method":"notifications/progress","params":{"progressToken":1,"progress":0.5}}"#,
            br#"{"jsonrpc":"2.0","id":"srv-1","method":"roots/list"}"#,
            br#"{"jsonrpc":"2.0","id":99,"result":{}}"#,
        ] {
            assert_eq!(r.from_server(line).to_client, vec![line.to_vec()]);
        }
        assert!(r.from_client(b"  ").to_server.is_empty());
    }

    #[test]
    fn garbage_from_the_server_is_dropped_and_logged() {
        let mut r = relay();
        let s = r.from_server(b"DEBUG: starting up");
        assert!(s.to_client.is_empty());
        assert!(s.log[0].contains("DEBUG: starting up"));
    }

    /// A response that is not JSON but names an open call (its first bytes hold the id)
    /// answers that call with an error, and the identical call held behind it goes on.
    #[test]
    fn an_unreadable_response_answers_its_request_and_releases_the_held_calls() {
        let mut r = relay();
        assert_eq!(r.from_client(&call(1)).to_server, vec![call(1)]);
        let held = r.from_client(&call(2));
        assert!(held.to_server.is_empty() && held.to_client.is_empty());
        assert_eq!(r.held_calls(), 1);
        let s = r.from_server(
            br#"{"jsonrpc":"2.0","id":1,"result":{"content":[{"type":"text","text":"x"}]"#,
        );
        let answer = parse(&s.to_client[0]);
        assert_eq!(answer["id"], 1);
        assert_eq!(answer["error"]["code"], -32603, "{answer}");
        assert!(s.log[0].contains("not JSON"), "{:?}", s.log);
        assert_eq!(s.to_server, vec![call(2)], "the held call is released");
        assert_eq!((r.open_requests(), r.held_calls()), (1, 0));
    }

    /// Arguments with non-finite literals, as the MCP Python SDK writes them, are
    /// screened like any other: the loop is warned, then blocked before the server.
    #[test]
    fn non_finite_arguments_are_screened() {
        let mut r = relay();
        let mut verdicts = Vec::new();
        for id in 1..=4 {
            let line = format!(
                r#"{{"jsonrpc":"2.0","id":{id},"method":"tools/call","params":{{"name":"read","arguments":{{"x":NaN,"y":[Infinity,-Infinity]}}}}}}"#
            );
            let c = r.from_client(line.as_bytes());
            if let [answer] = &c.to_client[..] {
                assert_eq!(parse(answer)["result"]["isError"], true);
                verdicts.push("blocked");
                continue;
            }
            assert_eq!(c.to_server, vec![line.into_bytes()]);
            let s = r.from_server(&result(id));
            let text = parse(&s.to_client[0])["result"]["content"].to_string();
            verdicts.push(if text.contains("WARNING") {
                "warned"
            } else {
                "allowed"
            });
        }
        assert_eq!(verdicts, ["allowed", "allowed", "warned", "blocked"]);
    }

    /// Lines too large to read whole: the arguments and the structured result past the
    /// cap are known by their bytes, the response goes on unchanged with the warning
    /// inserted into its content, and the loop is caught as with small lines.
    #[test]
    fn large_lines_are_read_by_their_parts() {
        let mut r = relay();
        let rows = vec![r#"{"a":0}"#; loopguard_events::MAX_PART_COST / 100].join(",");
        let big_call = |id: u64| {
            format!(r#"{{"jsonrpc":"2.0","id":{id},"method":"tools/call","params":{{"name":"query","arguments":{{"rows":[{rows}]}}}}}}"#).into_bytes()
        };
        let big_result = |id: u64| {
            format!(r#"{{"jsonrpc":"2.0","id":{id},"result":{{"content":[{{"type":"text","text":"ok"}}],"structuredContent":{{"rows":[{rows}]}}}}}}"#).into_bytes()
        };
        let mut verdicts = Vec::new();
        for id in 1..=4 {
            let c = r.from_client(&big_call(id));
            if let [answer] = &c.to_client[..] {
                assert_eq!(parse(answer)["result"]["isError"], true);
                verdicts.push("blocked");
                continue;
            }
            assert_eq!(c.to_server, vec![big_call(id)], "forwarded unchanged");
            let s = r.from_server_owned(big_result(id));
            let answered = &s.to_client[0];
            if answered == &big_result(id) {
                verdicts.push("allowed");
            } else {
                let answer = parse(answered);
                assert_eq!(answer["result"]["content"][0]["text"], "ok");
                assert!(answer["result"]["content"][1]["text"]
                    .as_str()
                    .unwrap()
                    .contains("WARNING"));
                verdicts.push("warned");
            }
        }
        assert_eq!(verdicts, ["allowed", "allowed", "warned", "blocked"]);
    }

    #[test]
    fn cancelled_calls_are_forgotten() {
        let mut r = relay();
        r.from_client(&call(1));
        assert_eq!(r.open_requests(), 1);
        let cancel = json!({"jsonrpc": "2.0", "method": "notifications/cancelled", "params": {"requestId": 1}}).to_string();
        let c = r.from_client(cancel.as_bytes());
        assert_eq!(c.to_server, vec![cancel.as_bytes().to_vec()]);
        assert_eq!(r.open_requests(), 0);
        // A late answer still reaches the client, untouched.
        assert_eq!(r.from_server(&result(1)).to_client, vec![result(1)]);
    }

    #[test]
    fn batches_keep_blocked_answers_with_the_servers_response() {
        let mut r = relay();
        for id in 1..=3 {
            r.from_client(&call(id));
            r.from_server(&result(id));
        }
        // Call 10 is blocked; the ping goes on; the answer to the batch carries both.
        let batch = format!(
            "[{},{}]",
            String::from_utf8(call(10)).unwrap(),
            r#"{"jsonrpc":"2.0","id":11,"method":"ping"}"#
        );
        let c = r.from_client(batch.as_bytes());
        assert!(c.to_client.is_empty());
        assert_eq!(
            parse(&c.to_server[0]),
            json!([{"jsonrpc": "2.0", "id": 11, "method": "ping"}])
        );
        let s = r.from_server(br#"[{"jsonrpc":"2.0","id":11,"result":{}}]"#);
        let answer = parse(&s.to_client[0]);
        assert_eq!(answer[0], json!({"jsonrpc": "2.0", "id": 11, "result": {}}));
        assert_eq!(answer[1]["id"], 10);
        assert_eq!(answer[1]["result"]["isError"], true);
        // A batch of blocked calls and notifications only is answered at once.
        let c = r.from_client(format!("[{}]", String::from_utf8(call(12)).unwrap()).as_bytes());
        assert!(c.to_server.is_empty());
        assert_eq!(parse(&c.to_client[0])[0]["id"], 12);
    }

    #[test]
    fn closing_answers_every_open_request() {
        let mut r = relay();
        r.from_client(&call(1));
        r.from_client(br#"{"jsonrpc":"2.0","id":"x","method":"resources/list"}"#);
        r.from_client(br#"{"jsonrpc":"2.0","method":"notifications/initialized"}"#);
        let answers: Vec<Value> = r
            .close("the server exited")
            .iter()
            .map(|a| parse(a))
            .collect();
        assert_eq!(answers.len(), 2);
        for a in &answers {
            assert_eq!(a["error"]["code"], -32000);
            assert!(a["error"]["message"]
                .as_str()
                .unwrap()
                .contains("the server exited"));
        }
        assert_eq!(r.open_requests(), 0);
    }

    #[test]
    fn malformed_calls_are_left_to_the_server() {
        let mut r = relay();
        let no_name = br#"{"jsonrpc":"2.0","id":5,"method":"tools/call","params":{}}"#;
        assert_eq!(r.from_client(no_name).to_server, vec![no_name.to_vec()]);
        let s = r.from_server(
            br#"{"jsonrpc":"2.0","id":5,"error":{"code":-32602,"message":"missing name"}}"#,
        );
        assert_eq!(s.to_client.len(), 1);
    }

    #[test]
    fn unknown_tools_are_blocked_after_repeated_failures() {
        let mut r = Relay::new(
            ConfigSet::parse(
                "{ tools: { loopDetection: { enabled: true, unknownToolThreshold: 2 } } }",
            )
            .unwrap(),
            "s".into(),
            None,
        );
        let call = |id: u64| {
            json!({"jsonrpc": "2.0", "id": id, "method": "tools/call", "params": {"name": "nope"}})
                .to_string()
                .into_bytes()
        };
        let err = |id: u64| {
            json!({"jsonrpc": "2.0", "id": id, "error": {"code": -32602, "message": "Unknown tool: nope"}}).to_string().into_bytes()
        };
        for id in 1..=2 {
            assert_eq!(r.from_client(&call(id)).to_server.len(), 1);
            r.from_server(&err(id));
        }
        let c = r.from_client(&call(3));
        let answer = parse(&c.to_client[0]);
        assert!(answer["result"]["content"][0]["text"]
            .as_str()
            .unwrap()
            .contains("nope"));
    }

    /// The documented check (docs/mcp-proxy.md): four identical calls sent at once, before
    /// any answer. Each waits for the one before it, so the loop is caught where a
    /// sequential one is: id 4 carries the warning, id 5 is the proxy's own answer.
    #[test]
    fn pipelined_identical_calls_are_screened_one_answer_at_a_time() {
        let mut r = relay();
        let first = r.from_client(&call(2));
        assert_eq!(first.to_server, vec![call(2)]);
        for id in 3..=5 {
            let c = r.from_client(&call(id));
            assert!(
                c.to_server.is_empty() && c.to_client.is_empty(),
                "id {id} held"
            );
            assert!(c.log[0].starts_with("held tools/call read"), "{:?}", c.log);
        }
        assert_eq!((r.open_requests(), r.held_calls()), (1, 3));
        // Each answer goes to the client, then releases the next identical call.
        let s = r.from_server(&result(2));
        assert_eq!(
            (s.to_client.clone(), s.to_server.clone()),
            (vec![result(2)], vec![call(3)])
        );
        let s = r.from_server(&result(3));
        assert_eq!(
            (s.to_client.clone(), s.to_server.clone()),
            (vec![result(3)], vec![call(4)])
        );
        let s = r.from_server(&result(4));
        let warned = parse(&s.to_client[0]);
        assert!(warned["result"]["content"][1]["text"]
            .as_str()
            .unwrap()
            .starts_with("[loopguard] WARNING"));
        // Id 5 is blocked without reaching the server.
        assert!(s.to_server.is_empty());
        let blocked = parse(&s.to_client[1]);
        assert_eq!(
            (blocked["id"].clone(), blocked["result"]["isError"].clone()),
            (json!(5), json!(true))
        );
        assert_eq!((r.open_requests(), r.held_calls()), (0, 0));
    }

    #[test]
    fn different_calls_are_never_held() {
        let mut r = relay();
        let other = json!({"jsonrpc": "2.0", "id": 9, "method": "tools/call", "params": {"name": "read", "arguments": {"path": "/y"}}}).to_string();
        assert_eq!(r.from_client(&call(1)).to_server.len(), 1);
        assert_eq!(
            r.from_client(other.as_bytes()).to_server,
            vec![other.into_bytes()]
        );
        assert_eq!(r.held_calls(), 0);
    }

    #[test]
    fn cancelling_frees_held_calls() {
        let mut r = relay();
        r.from_client(&call(1));
        r.from_client(&call(2));
        r.from_client(&call(3));
        assert_eq!(r.held_calls(), 2);
        // A held call cancelled is dropped: the server never sees it.
        let cancel = |id: u64| {
            json!({"jsonrpc": "2.0", "method": "notifications/cancelled", "params": {"requestId": id}}).to_string().into_bytes()
        };
        let c = r.from_client(&cancel(2));
        assert_eq!(c.to_server, vec![cancel(2)]);
        assert_eq!(r.held_calls(), 1);
        // The call in flight cancelled: the next one goes, after the cancellation.
        let c = r.from_client(&cancel(1));
        assert_eq!(c.to_server, vec![cancel(1), call(3)]);
        assert_eq!((r.open_requests(), r.held_calls()), (1, 0));
    }

    #[test]
    fn held_calls_are_answered_when_the_server_goes_away() {
        let mut r = relay();
        r.from_client(&call(1));
        r.from_client(&call(2));
        let ids: Vec<Value> = r
            .close("gone")
            .iter()
            .map(|a| parse(a)["id"].clone())
            .collect();
        assert_eq!(ids, vec![json!(1), json!(2)]);
    }

    #[test]
    fn lines_too_long_are_answered_when_they_are_requests() {
        let mut r = relay();
        let head = br#"{"jsonrpc":"2.0","id":"big","method":"tools/call","params":{"name":"write","arguments":{"text":"aaaa"#;
        let c = r.client_line_too_long(head, 300 << 20, 256 << 20);
        let answer = parse(&c.to_client[0]);
        assert_eq!(
            (answer["id"].clone(), answer["error"]["code"].clone()),
            (json!("big"), json!(-32600))
        );
        assert!(c.to_server.is_empty());
        // A notification, or no id to be found: logged only.
        let c = r.client_line_too_long(
            br#"{"jsonrpc":"2.0","method":"notifications/x","params":{"#,
            9,
            5,
        );
        assert!(c.to_client.is_empty() && c.log[0].contains("9 bytes"));
        // A response too long for an open call: the client gets an error for it, and an
        // identical call held behind it goes on.
        r.from_client(&call(1));
        r.from_client(&call(2));
        let s = r.server_line_too_long(
            br#"{"jsonrpc":"2.0","id":1,"result":{"content":[{"type":"text","text":"xx"#,
            9,
            5,
        );
        assert_eq!(parse(&s.to_client[0])["error"]["code"], -32600);
        assert_eq!(s.to_server, vec![call(2)]);
    }
}
