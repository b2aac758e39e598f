//! The native half of the `loopguard` Python package (`loopguard._native`): the engine in
//! a Python process.
//!
//! The binding is thin. [`PyGuard`] is the engine behind a mutex, driven through the event
//! protocol's crate ([`loopguard_events::Replayer`]), as every front end is: `begin` hands
//! out the engine's own [`Ticket`] ([`PyTicket`], whose `finish` records the outcome
//! against the call as it was judged); `before_call`, `after_call` and `on_compaction` are
//! the protocol's call, result and compaction events, `record_usage` its usage event,
//! `message` its message event;
//! `apply_event` takes any event.
//! Python values are walked into a `flat` JSON view (`convert`, in buffers reused from
//! call to call) and the engine's answers are wrapped in frozen objects (`answers`):
//! every word a verdict says (message, blocked result, warning note) is the engine's.
//!
//! The methods are PyO3's own: with the stable ABI of Python 3.10 (the wheel's floor) they
//! are vectorcall methods whose keyword names PyO3 matches without copying, and strings
//! are read as UTF-8 in place.
//!
//! Threads: the guard is shared freely. An engine call on small values runs with the GIL
//! held (releasing and taking it back would cost more than the call). A value heavier than
//! `HEAVY` bytes is fingerprinted with the GIL released, so other Python threads run
//! meanwhile, and so is any call that finds the engine busy in another thread. The mutex is
//! never held while waiting for the GIL, so the two locks cannot deadlock.

#![deny(unsafe_code)]

mod answers;
mod convert;
mod flat;

use std::ffi::CString;
use std::path::PathBuf;
use std::sync::{Mutex, PoisonError, TryLockError};

use std::cell::RefCell;

use loopguard::config::ConfigIssue;
use loopguard::{Call, ConfigSet, Guard, OutcomeOf, SystemClock, Ticket};
use loopguard_events::{from_value, EventRef, IdsRef, Replayer, Reply};
use pyo3::exceptions::{PyRuntimeError, PyTypeError, PyValueError};
use pyo3::prelude::*;
use pyo3::sync::PyOnceLock;
use pyo3::types::{PyBytes, PyDict, PyList, PyString};

use answers::{PyAbort, PyCounted, PyRecorded, PyVerdict};
use convert::{to_flat, to_python};
use flat::Flat;

/// Converted values heavier than this (bytes of text, roughly) are hashed without the GIL.
const HEAVY: usize = 64 << 10;

/// Converted values are kept in buffers reused from call to call (a pool per thread, not
/// one set: a conversion can run Python code, `model_dump`, that calls the guard again).
/// Buffers that grew beyond this (a huge result) are dropped instead of kept.
const KEEP_BYTES: usize = 1 << 20;

thread_local! {
    static SPARE: RefCell<Vec<Flat>> = const { RefCell::new(Vec::new()) };
}

/// A converted value's buffers, from the pool and back to it.
struct Converted(Flat);

impl Converted {
    /// `obj` converted (`what` names it in errors).
    fn new(obj: &Bound<'_, PyAny>, what: &str) -> PyResult<Self> {
        let mut value = Self::empty();
        to_flat(obj, what, &mut value.0)?;
        Ok(value)
    }

    fn empty() -> Self {
        Self(
            SPARE
                .try_with(|spare| spare.borrow_mut().pop())
                .ok()
                .flatten()
                .unwrap_or_default(),
        )
    }
}

impl Drop for Converted {
    fn drop(&mut self) {
        if self.0.capacity() <= KEEP_BYTES {
            let flat = std::mem::take(&mut self.0);
            let _ = SPARE.try_with(|spare| spare.borrow_mut().push(flat));
        }
    }
}

/// An outcome given as `result=` or `error=` (an exception is its text), converted.
struct GivenOutcome(Option<(bool, Converted)>);

impl GivenOutcome {
    fn new(
        result: Option<&Bound<'_, PyAny>>,
        error: Option<&Bound<'_, PyAny>>,
        method: &str,
    ) -> PyResult<Self> {
        Ok(Self(match (result, error) {
            (Some(_), Some(_)) => {
                return Err(PyTypeError::new_err(format!(
                    "{method} takes result= or error=, not both"
                )))
            }
            (Some(result), None) => Some((false, Converted::new(result, "result")?)),
            (None, Some(error)) if error.is_instance_of::<pyo3::exceptions::PyBaseException>() => {
                let mut text = Converted::empty();
                text.0.clear();
                text.0.string(&error.str()?.to_cow()?);
                Some((true, text))
            }
            (None, Some(error)) => Some((true, Converted::new(error, "error")?)),
            (None, None) => None,
        }))
    }

    fn weight(&self) -> usize {
        self.0.as_ref().map_or(0, |(_, o)| o.0.weight())
    }

    fn view(&self) -> OutcomeOf<flat::Value<'_>> {
        match &self.0 {
            Some((false, value)) => OutcomeOf::Result(value.0.root()),
            Some((true, value)) => OutcomeOf::Error(value.0.root()),
            None => OutcomeOf::Nothing,
        }
    }
}

/// The loop guard with its state in memory.
#[pyclass(module = "loopguard", name = "Guard", frozen)]
pub struct PyGuard {
    engine: Mutex<Replayer<SystemClock>>,
    /// The `seq` of `apply_event`'s last answer.
    seq: Mutex<u64>,
    /// The config's warnings (`ConfigSet::warnings`), placed as `ConfigError`'s issues are.
    config_warnings: Vec<ConfigIssue>,
}

/// An optional keyword argument that tells "not given" from `None` (`result=None` is a
/// tool that returned `None`, which is JSON `null`).
struct Given<'py>(Option<Bound<'py, PyAny>>);

impl<'a, 'py> FromPyObject<'a, 'py> for Given<'py> {
    type Error = PyErr;

    fn extract(obj: pyo3::Borrowed<'a, 'py, PyAny>) -> PyResult<Self> {
        Ok(Self(Some(obj.to_owned())))
    }
}

impl PyGuard {
    /// Runs `op` on the engine: at once when the values are light and the engine is free,
    /// otherwise with the GIL released.
    fn with_engine<R: Send>(
        &self,
        py: Python<'_>,
        heavy: bool,
        op: impl FnOnce(&mut Replayer<SystemClock>) -> R + Send,
    ) -> R {
        if !heavy {
            match self.engine.try_lock() {
                Ok(mut engine) => return op(&mut engine),
                Err(TryLockError::Poisoned(p)) => return op(&mut p.into_inner()),
                Err(TryLockError::WouldBlock) => {}
            }
        }
        py.detach(|| op(&mut self.engine.lock().unwrap_or_else(PoisonError::into_inner)))
    }
}

/// The names a call carries, read from their Python strings in place.
struct Names<'a> {
    tool: &'a str,
    session: &'a str,
    run: Option<&'a str>,
    agent: Option<&'a str>,
    call_id: Option<&'a str>,
    parent_session: Option<&'a str>,
    parent_run: Option<&'a str>,
}

impl<'a> Names<'a> {
    fn of(
        tool: &'a Bound<'_, PyAny>,
        session: &'a Bound<'_, PyAny>,
        run: Option<&'a Bound<'_, PyAny>>,
        agent: Option<&'a Bound<'_, PyAny>>,
        call_id: Option<&'a Bound<'_, PyAny>>,
    ) -> PyResult<Self> {
        let tool = required_text(tool, "tool")?;
        if tool.trim().is_empty() {
            return Err(PyValueError::new_err("tool must be a non-blank string"));
        }
        Ok(Self {
            tool,
            session: required_text(session, "session")?,
            run: optional_text(run, "run")?,
            agent: optional_text(agent, "agent")?,
            call_id: optional_text(call_id, "call_id")?,
            parent_session: None,
            parent_run: None,
        })
    }

    /// The same names in a session spawned by run `run` of `session` (a sub-agent's).
    fn with_parent(
        mut self,
        session: Option<&'a Bound<'_, PyAny>>,
        run: Option<&'a Bound<'_, PyAny>>,
    ) -> PyResult<Self> {
        let ids = parent_ids(
            IdsRef::new(self.session, self.run, self.agent),
            session,
            run,
        )?;
        (self.parent_session, self.parent_run) = (ids.parent_session, ids.parent_run);
        Ok(self)
    }

    fn ids(&self) -> IdsRef<'a> {
        IdsRef {
            parent_session: self.parent_session,
            parent_run: self.parent_run,
            ..IdsRef::new(self.session, self.run, self.agent)
        }
    }

    fn scope(&self) -> loopguard::Scope<'a> {
        loopguard::Scope::new(self.session)
            .with_run(self.run)
            .with_agent(self.agent)
            .with_parent(self.parent_session, self.parent_run)
    }
}

/// `ids` spawned by the parent a caller named (`parent_session=`, `parent_run=`).
fn parent_ids<'a>(
    ids: IdsRef<'a>,
    session: Option<&'a Bound<'_, PyAny>>,
    run: Option<&'a Bound<'_, PyAny>>,
) -> PyResult<IdsRef<'a>> {
    ids.with_parent(
        optional_text(session, "parent_session")?,
        optional_text(run, "parent_run")?,
    )
    .map_err(PyValueError::new_err)
}

fn required_text<'a>(ob: &'a Bound<'_, PyAny>, what: &str) -> PyResult<&'a str> {
    match ob.cast::<PyString>() {
        Ok(s) => s.to_str(),
        Err(_) => Err(PyTypeError::new_err(format!(
            "{what} must be a str, not {}",
            ob.get_type()
                .qualname()
                .map(|n| n.to_string())
                .unwrap_or_else(|_| "?".into())
        ))),
    }
}

/// A string argument that may be `None`.
fn optional_text<'a>(ob: Option<&'a Bound<'_, PyAny>>, what: &str) -> PyResult<Option<&'a str>> {
    match ob {
        Some(ob) if !ob.is_none() => required_text(ob, what).map(Some),
        _ => Ok(None),
    }
}

/// The engine's reply to an event of the kind it was built as.
fn unexpected(reply: Reply) -> PyErr {
    match reply {
        Reply::Invalid(error) => PyValueError::new_err(error),
        _ => PyRuntimeError::new_err("internal error: the event was answered as another kind"),
    }
}

#[pymethods]
impl PyGuard {
    /// A guard with `config`: a path to a JSON5 document, the document's text, or the
    /// document as a dict; `None` runs SPEC's defaults (rolling detectors off, the
    /// post-compaction guard on).
    #[new]
    #[pyo3(signature = (config = None))]
    fn new(py: Python<'_>, config: Option<&Bound<'_, PyAny>>) -> PyResult<Self> {
        let (config, source) = match config {
            None => (ConfigSet::default(), ConfigText::default()),
            Some(config) => load_config(py, config)?,
        };
        let config_warnings: Vec<ConfigIssue> =
            config.warnings().iter().map(|w| source.placed(w)).collect();
        for warning in &config_warnings {
            let text = warning.located(source.origin.as_deref()).to_string();
            let text = CString::new(text.replace('\0', " ")).unwrap_or_default();
            PyErr::warn(py, config_warning_class(py)?, &text, 1)?;
        }
        Ok(Self {
            engine: Mutex::new(Replayer::with_guard(Guard::new(config), None)),
            seq: Mutex::new(0),
            config_warnings,
        })
    }

    /// What the config document holds that does nothing (a key that looks like a misspelt
    /// block name, `tools.loopdetection`): dicts with `path`, `line`, `column` and
    /// `message`, as `ConfigError.issues`. Each was also issued as a
    /// `loopguard.ConfigWarning` when the guard was made.
    #[getter]
    fn config_warnings<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyList>> {
        let out = PyList::empty(py);
        for warning in &self.config_warnings {
            out.append(issue_dict(py, warning)?)?;
        }
        Ok(out)
    }

    /// Judges a call about to run and hands out its ticket: do not run a blocked call
    /// (hand the model `ticket.blocked_result`); run any other, then
    /// `ticket.finish(result=...)` (or `error=`). As a context manager, the ticket records
    /// an exception raised inside the block as the call's error.
    #[pyo3(signature = (tool, args, *, session, run, agent = None, call_id = None, batch = None, parent_session = None, parent_run = None))]
    #[allow(clippy::too_many_arguments)]
    fn begin(
        slf: &Bound<'_, Self>,
        tool: &Bound<'_, PyAny>,
        args: &Bound<'_, PyAny>,
        session: &Bound<'_, PyAny>,
        run: Option<&Bound<'_, PyAny>>,
        agent: Option<&Bound<'_, PyAny>>,
        call_id: Option<&Bound<'_, PyAny>>,
        batch: Option<&Bound<'_, PyAny>>,
        parent_session: Option<&Bound<'_, PyAny>>,
        parent_run: Option<&Bound<'_, PyAny>>,
    ) -> PyResult<Py<PyTicket>> {
        let py = slf.py();
        let names = Names::of(tool, session, run, agent, call_id)?
            .with_parent(parent_session, parent_run)?;
        let batch = optional_text(batch, "batch")?;
        let args = Converted::new(args, "args")?;
        let heavy = args.0.weight() > HEAVY;
        let ticket = slf.get().with_engine(py, heavy, |engine| {
            let call = Call::with_args(names.tool, args.0.root())
                .with_id(names.call_id)
                .with_batch(batch);
            engine.guard_mut().begin(&names.scope(), &call)
        });
        let verdict = answers::verdict(py, ticket.verdict().clone())?;
        Py::new(
            py,
            PyTicket {
                guard: slf.clone().unbind(),
                ticket: Mutex::new(Some(ticket)),
                verdict,
            },
        )
    }

    /// The verdict on a call about to run (the protocol's `call` event: the engine keeps
    /// the call pending, for a result that names it). A blocked call must not run: hand
    /// the model `verdict.blocked_result` (or `verdict.message`) instead.
    #[pyo3(signature = (tool, args, *, session, run, agent = None, call_id = None, batch = None, parent_session = None, parent_run = None))]
    #[allow(clippy::too_many_arguments)]
    fn before_call(
        &self,
        py: Python<'_>,
        tool: &Bound<'_, PyAny>,
        args: &Bound<'_, PyAny>,
        session: &Bound<'_, PyAny>,
        run: Option<&Bound<'_, PyAny>>,
        agent: Option<&Bound<'_, PyAny>>,
        call_id: Option<&Bound<'_, PyAny>>,
        batch: Option<&Bound<'_, PyAny>>,
        parent_session: Option<&Bound<'_, PyAny>>,
        parent_run: Option<&Bound<'_, PyAny>>,
    ) -> PyResult<Py<PyVerdict>> {
        let names = Names::of(tool, session, run, agent, call_id)?
            .with_parent(parent_session, parent_run)?;
        let batch = optional_text(batch, "batch")?;
        let args = Converted::new(args, "args")?;
        let heavy = args.0.weight() > HEAVY;
        let reply = self.with_engine(py, heavy, |engine| {
            engine.reply(&EventRef::Call {
                ids: names.ids(),
                call_id: names.call_id,
                tool: names.tool,
                args: Some(args.0.root()),
                batch,
            })
        });
        match reply {
            Reply::Call(verdict, _) => answers::verdict(py, verdict),
            other => Err(unexpected(other)),
        }
    }

    /// Records what a call returned (the protocol's `result` event, naming its call by
    /// tool and arguments): `result=` (any JSON value, a pydantic model, a dataclass) or
    /// `error=` (an exception, whose text is used, or a JSON value); neither records
    /// nothing. Results of blocked calls are ignored. A ticket's `finish` needs neither
    /// the tool nor the arguments again.
    #[pyo3(signature = (tool, args, *, session, run, agent = None, call_id = None, result = Given(None), error = Given(None), parent_session = None, parent_run = None))]
    #[allow(clippy::too_many_arguments)]
    fn after_call(
        &self,
        py: Python<'_>,
        tool: &Bound<'_, PyAny>,
        args: &Bound<'_, PyAny>,
        session: &Bound<'_, PyAny>,
        run: Option<&Bound<'_, PyAny>>,
        agent: Option<&Bound<'_, PyAny>>,
        call_id: Option<&Bound<'_, PyAny>>,
        result: Given<'_>,
        error: Given<'_>,
        parent_session: Option<&Bound<'_, PyAny>>,
        parent_run: Option<&Bound<'_, PyAny>>,
    ) -> PyResult<Py<PyRecorded>> {
        let names = Names::of(tool, session, run, agent, call_id)?
            .with_parent(parent_session, parent_run)?;
        let args = Converted::new(args, "args")?;
        let outcome = GivenOutcome::new(result.0.as_ref(), error.0.as_ref(), "after_call")?;
        let heavy = args.0.weight() + outcome.weight() > HEAVY;
        let reply = self.with_engine(py, heavy, |engine| {
            engine.reply(&EventRef::Result {
                ids: names.ids(),
                call_id: names.call_id,
                tool: Some(names.tool),
                args: Some(args.0.root()),
                outcome: outcome.view(),
            })
        });
        match reply {
            Reply::Result(recorded) => answers::recorded(py, recorded),
            other => Err(unexpected(other)),
        }
    }

    /// A compaction retry happened in this run: arms the post-compaction guard. Returns
    /// the number of attempts it watches, or 0 when the guard is disabled.
    #[pyo3(signature = (*, session, run, agent = None, parent_session = None, parent_run = None))]
    fn on_compaction(
        &self,
        py: Python<'_>,
        session: String,
        run: Option<String>,
        agent: Option<String>,
        parent_session: Option<&Bound<'_, PyAny>>,
        parent_run: Option<&Bound<'_, PyAny>>,
    ) -> PyResult<u32> {
        let ids = parent_ids(
            IdsRef::new(&session, run.as_deref(), agent.as_deref()),
            parent_session,
            parent_run,
        )?;
        let reply = self.with_engine(py, false, |engine| {
            let event: EventRef<'_, flat::Value<'_>> = EventRef::Compaction { ids };
            engine.reply(&event)
        });
        match reply {
            Reply::Compaction(armed) => Ok(armed),
            other => Err(unexpected(other)),
        }
    }

    /// What one model response of this run used (a `usage` event): counted in the run, its
    /// session, its agent and the day, priced by `cost` (US dollars) when given, else by
    /// the price table. Answers what it counted; when it used a budget up, the run's next
    /// call is blocked (`Counted.ends_run`). A usage sent again with the same `id` counts
    /// once. Figures that cannot be right (negative, not whole, absurd) raise ValueError
    /// and count nothing.
    #[pyo3(signature = (*, session, run, input_tokens, output_tokens, agent = None, model = None, cache_read_tokens = None, cache_write_tokens = None, cost = None, id = None, parent_session = None, parent_run = None))]
    #[allow(clippy::too_many_arguments)]
    fn record_usage(
        &self,
        py: Python<'_>,
        session: &Bound<'_, PyAny>,
        run: Option<&Bound<'_, PyAny>>,
        input_tokens: &Bound<'_, PyAny>,
        output_tokens: &Bound<'_, PyAny>,
        agent: Option<&Bound<'_, PyAny>>,
        model: Option<&Bound<'_, PyAny>>,
        cache_read_tokens: Option<&Bound<'_, PyAny>>,
        cache_write_tokens: Option<&Bound<'_, PyAny>>,
        cost: Option<&Bound<'_, PyAny>>,
        id: Option<&Bound<'_, PyAny>>,
        parent_session: Option<&Bound<'_, PyAny>>,
        parent_run: Option<&Bound<'_, PyAny>>,
    ) -> PyResult<Py<PyCounted>> {
        // Read as the protocol reads a usage event, so both refuse the same figures with
        // the same words.
        let event = PyDict::new(py);
        event.set_item("type", "usage")?;
        event.set_item("session", required_text(session, "session")?)?;
        for (key, value) in [
            ("run", run),
            ("agent", agent),
            ("parent_session", parent_session),
            ("parent_run", parent_run),
            ("model", model),
            ("id", id),
            ("input_tokens", Some(input_tokens)),
            ("output_tokens", Some(output_tokens)),
            ("cache_read_tokens", cache_read_tokens),
            ("cache_write_tokens", cache_write_tokens),
            ("cost", cost),
        ] {
            if let Some(value) = value.filter(|v| !v.is_none()) {
                event.set_item(key, value)?;
            }
        }
        let value = loopguard::json::to_value(Converted::new(event.as_any(), "usage")?.0.root())
            .ok_or_else(|| PyValueError::new_err("usage: nested too deep"))?;
        let event = from_value(value).map_err(PyValueError::new_err)?;
        let reply = self.with_engine(py, false, |engine| engine.reply(&event.as_ref()));
        match reply {
            Reply::Usage(inner) => answers::counted(py, inner),
            other => Err(unexpected(other)),
        }
    }

    /// Judges a message of the run (the protocol's `message` event): the model's answer
    /// (`role="assistant"`, with its `reasoning` and whether it carried tool calls), a
    /// piece of its stream (`delta=True`, numbered by `index` when the host numbers its
    /// pieces), the harness's feedback to an answer without a tool call
    /// (`role="tool_feedback"`), a prompt (`"user"`, `"system"`). Words cannot be taken
    /// back: a blocked message stops the run, so do not call the model again in it (stop
    /// the stream being read); hand a warning's `warning_note` to the next prompt.
    #[pyo3(signature = (text, *, session, run, role = "assistant", agent = None, reasoning = None, has_tool_calls = None, id = None, delta = false, index = None, parent_session = None, parent_run = None))]
    #[allow(clippy::too_many_arguments)]
    fn message(
        &self,
        py: Python<'_>,
        text: &Bound<'_, PyAny>,
        session: &Bound<'_, PyAny>,
        run: Option<&Bound<'_, PyAny>>,
        role: &str,
        agent: Option<&Bound<'_, PyAny>>,
        reasoning: Option<&Bound<'_, PyAny>>,
        has_tool_calls: Option<bool>,
        id: Option<&Bound<'_, PyAny>>,
        delta: bool,
        index: Option<u64>,
        parent_session: Option<&Bound<'_, PyAny>>,
        parent_run: Option<&Bound<'_, PyAny>>,
    ) -> PyResult<Py<PyVerdict>> {
        let text = required_text(text, "text")?;
        let ids = parent_ids(
            IdsRef::new(
                required_text(session, "session")?,
                optional_text(run, "run")?,
                optional_text(agent, "agent")?,
            ),
            parent_session,
            parent_run,
        )?;
        let message = loopguard_events::message_of(
            role,
            text,
            optional_text(reasoning, "reasoning")?,
            has_tool_calls,
            optional_text(id, "id")?,
            delta,
            index,
        )
        .map_err(PyValueError::new_err)?;
        let heavy = text.len() + message.reasoning.map_or(0, str::len) > HEAVY;
        let reply = self.with_engine(py, heavy, |engine| {
            let event: EventRef<'_, flat::Value<'_>> = EventRef::Message { ids, message };
            engine.reply(&event)
        });
        match reply {
            Reply::Message(verdict) => answers::verdict(py, verdict),
            other => Err(unexpected(other)),
        }
    }

    /// Any event of the replay protocol (SPEC §7): a dict, or a line of JSON text (`str`
    /// or `bytes`), answered as `loopguard replay` prints it (a dict; an invalid event is
    /// answered `{"seq", "error"}`, not raised). `seq` defaults to one more than the last.
    #[pyo3(signature = (event, seq = None))]
    fn apply_event<'py>(
        &self,
        py: Python<'py>,
        event: &Bound<'py, PyAny>,
        seq: Option<u64>,
    ) -> PyResult<Bound<'py, PyAny>> {
        let seq = {
            let mut last = self.seq.lock().unwrap_or_else(PoisonError::into_inner);
            *last = seq.unwrap_or(*last + 1);
            *last
        };
        let answer = if let Ok(text) = event.cast::<PyString>() {
            let line = text.to_str()?;
            self.with_engine(py, line.len() > HEAVY, |engine| {
                engine.apply_line(seq, line.as_bytes())
            })
        } else if let Ok(bytes) = event.cast::<PyBytes>() {
            let line = bytes.as_bytes();
            self.with_engine(py, line.len() > HEAVY, |engine| {
                engine.apply_line(seq, line)
            })
        } else if event.is_instance_of::<PyDict>() {
            let value = loopguard::json::to_value(Converted::new(event, "event")?.0.root())
                .ok_or_else(|| PyValueError::new_err("event: nested too deep"))?;
            match from_value(value) {
                Ok(event) => {
                    self.with_engine(py, false, |engine| engine.apply(seq, &event.as_ref()))
                }
                Err(error) => loopguard_events::Answer::Invalid { seq, error },
            }
        } else {
            return Err(PyTypeError::new_err(
                "event must be a dict, or a line of JSON text (str or bytes)",
            ));
        };
        let value =
            serde_json::to_value(&answer).map_err(|e| PyValueError::new_err(e.to_string()))?;
        to_python(py, &value)
    }

    /// Forgets a run (its prompt-to-answer cycle is over). Returns whether it existed.
    #[pyo3(signature = (*, session, run))]
    fn end_run(&self, py: Python<'_>, session: String, run: Option<String>) -> bool {
        self.with_engine(py, false, move |engine| {
            engine
                .guard_mut()
                .end_run(&loopguard::Scope::new(&session).with_run(run.as_deref()))
        })
    }

    /// Forgets a session and all its runs. Returns whether it existed.
    fn end_session(&self, py: Python<'_>, session: String) -> bool {
        self.with_engine(py, false, move |engine| {
            engine.guard_mut().end_session(&session)
        })
    }

    /// The settings in force for `agent` (the global ones without an agent, or for an
    /// agent without a block of its own): `{"agent", "own_block", "effective"}`, where
    /// `effective` is what `loopguard config explain --json` shows, clamps and unreachable
    /// thresholds explained.
    #[pyo3(signature = (agent = None))]
    fn explain<'py>(&self, py: Python<'py>, agent: Option<String>) -> PyResult<Bound<'py, PyAny>> {
        let agent = agent.filter(|a| !a.trim().is_empty());
        let agent = agent.as_deref().map(str::trim);
        let (own_block, effective) = self.with_engine(py, false, |engine| {
            let set = engine.guard().config();
            (
                agent.is_some_and(|a| set.agents().any(|(id, _, _)| id == a)),
                serde_json::to_value(set.for_agent(agent)),
            )
        });
        let effective = effective.map_err(|e| PyValueError::new_err(e.to_string()))?;
        let out = PyDict::new(py);
        out.set_item("agent", agent)?;
        out.set_item("own_block", own_block)?;
        out.set_item("effective", to_python(py, &effective)?)?;
        Ok(out.into_any())
    }

    /// A client of a `loopguard serve` sidecar with this same API.
    #[staticmethod]
    #[pyo3(signature = (url, token = None, *, timeout = 10.0))]
    fn remote<'py>(
        py: Python<'py>,
        url: &str,
        token: Option<&str>,
        timeout: f64,
    ) -> PyResult<Bound<'py, PyAny>> {
        let kwargs = PyDict::new(py);
        kwargs.set_item("token", token)?;
        kwargs.set_item("timeout", timeout)?;
        py.import("loopguard.remote")?
            .getattr("RemoteGuard")?
            .call((url,), Some(&kwargs))
    }

    fn __repr__(&self) -> String {
        "Guard(...)".to_owned()
    }
}

/// One tool call between its verdict and its outcome (`Guard.begin`): the engine's own
/// ticket, which holds the call as it was judged, so `finish` takes the outcome alone.
#[pyclass(module = "loopguard", name = "Ticket", frozen)]
pub struct PyTicket {
    guard: Py<PyGuard>,
    /// `None` once finished or cancelled.
    ticket: Mutex<Option<Ticket>>,
    verdict: Py<PyVerdict>,
}

impl PyTicket {
    /// The ticket, taken out to be finished: `None` when it already was (or was
    /// cancelled).
    fn take(&self) -> Option<Ticket> {
        self.ticket
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .take()
    }

    fn is_open(&self) -> bool {
        self.ticket
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .is_some()
    }

    fn record(&self, py: Python<'_>, outcome: &GivenOutcome) -> PyResult<Py<PyRecorded>> {
        let ticket = self.take().ok_or_else(|| {
            PyRuntimeError::new_err("this ticket was already finished or cancelled")
        })?;
        let guard = self.guard.get();
        let recorded = guard.with_engine(py, outcome.weight() > HEAVY, |engine| {
            engine.guard_mut().finish(ticket, outcome.view())
        });
        answers::recorded(py, recorded)
    }
}

#[pymethods]
impl PyTicket {
    /// The engine's verdict on the call.
    #[getter]
    fn verdict(&self, py: Python<'_>) -> Py<PyVerdict> {
        self.verdict.clone_ref(py)
    }

    /// Whether the call must not run.
    #[getter]
    fn blocked(&self) -> bool {
        self.verdict.get().is_blocked()
    }

    /// For a blocked call: the tool result to hand the model in its place.
    #[getter]
    fn blocked_result<'py>(&self, py: Python<'py>) -> PyResult<Option<Bound<'py, PyAny>>> {
        self.verdict.get().blocked_result_value(py)
    }

    /// For a warning to surface now: the note to append to the call's result.
    #[getter]
    fn warning_note(&self) -> Option<String> {
        self.verdict.get().warning_note_text()
    }

    /// When the verdict ends the run (a terminal block): the message it ends with.
    #[getter]
    fn ends_run(&self) -> Option<String> {
        self.verdict.get().ends_run()
    }

    /// Records what the call returned (`result=`) or how it failed (`error=`: an
    /// exception, whose text is used, or a JSON value); neither records nothing. A blocked
    /// call's outcome is ignored. Once per ticket.
    #[pyo3(signature = (*, result = Given(None), error = Given(None)))]
    fn finish(
        &self,
        py: Python<'_>,
        result: Given<'_>,
        error: Given<'_>,
    ) -> PyResult<Py<PyRecorded>> {
        if !self.is_open() {
            return Err(PyRuntimeError::new_err(
                "this ticket was already finished or cancelled",
            ));
        }
        let outcome = GivenOutcome::new(result.0.as_ref(), error.0.as_ref(), "finish")?;
        self.record(py, &outcome)
    }

    /// The call did not run: nothing is recorded (as when the ticket is dropped), and
    /// `finish` refuses it afterwards.
    fn cancel(&self) {
        drop(self.take());
    }

    fn __enter__(slf: Py<Self>) -> Py<Self> {
        slf
    }

    /// Leaving a `with` block: an exception raised in it is the call's error (recorded,
    /// then raised on). Leaving it without one, a call that may run must have its outcome
    /// by then (`finish`) or have been called off (`cancel`); a blocked call has none.
    fn __exit__(
        &self,
        py: Python<'_>,
        _kind: Option<&Bound<'_, PyAny>>,
        error: Option<&Bound<'_, PyAny>>,
        _trace: Option<&Bound<'_, PyAny>>,
    ) -> PyResult<bool> {
        if !self.is_open() || self.blocked() {
            return Ok(false);
        }
        match error {
            Some(error) if !error.is_none() => {
                let outcome = GivenOutcome::new(None, Some(error), "finish")?;
                self.record(py, &outcome)?;
                Ok(false)
            }
            _ => {
                self.cancel();
                Err(PyRuntimeError::new_err(
                    "the call's outcome was not given: call ticket.finish(result=...) inside \
the with block (or ticket.cancel() when the call did not run)",
                ))
            }
        }
    }

    fn __repr__(&self, py: Python<'_>) -> String {
        let state = if self.is_open() { "open" } else { "closed" };
        format!("Ticket({}, {state})", self.verdict.bind(py).borrow().repr())
    }
}

/// Where a config document came from: the file it was read from, and whether it was a
/// dict (whose issues have no lines: the text they would point into is not the user's).
#[derive(Default)]
struct ConfigText {
    origin: Option<String>,
    from_dict: bool,
}

impl ConfigText {
    /// `issue`, its position dropped when the document was a dict.
    fn placed(&self, issue: &ConfigIssue) -> ConfigIssue {
        ConfigIssue {
            position: issue.position.filter(|_| !self.from_dict),
            ..issue.clone()
        }
    }
}

/// A config given as a path, JSON5 text or a dict, and where it came from.
fn load_config(py: Python<'_>, config: &Bound<'_, PyAny>) -> PyResult<(ConfigSet, ConfigText)> {
    let (text, origin) = if let Ok(text) = config.cast::<PyString>() {
        let text = text.to_cow()?.into_owned();
        // A document starts with `{` (after blanks and comments); a path never does.
        let trimmed = text.trim_start();
        if trimmed.starts_with('{') || trimmed.starts_with("//") || trimmed.starts_with("/*") {
            (text, None)
        } else {
            read_config(PathBuf::from(text))?
        }
    } else if config.is_instance_of::<PyDict>() {
        // Through a value tree, whose members are in key order: a dict with several
        // problems reports them in the same order whatever order its keys were added in.
        let value = loopguard::json::to_value(Converted::new(config, "config")?.0.root())
            .ok_or_else(|| PyValueError::new_err("config: nested too deep"))?;
        (value.to_string(), None)
    } else if let Ok(path) = config.extract::<PathBuf>() {
        read_config(path)?
    } else {
        return Err(PyTypeError::new_err(
            "config must be a path, the text of a JSON5 document or a dict",
        ));
    };
    let source = ConfigText {
        from_dict: origin.is_none() && config.is_instance_of::<PyDict>(),
        origin,
    };
    match ConfigSet::parse_named(&text, source.origin.as_deref()) {
        Ok(set) => Ok((set, source)),
        Err(e) => Err(config_error(py, &e, &source)),
    }
}

fn read_config(path: PathBuf) -> PyResult<(String, Option<String>)> {
    let text = std::fs::read_to_string(&path)?;
    Ok((text, Some(path.display().to_string())))
}

/// `loopguard.ConfigError` (defined in Python, `loopguard/_errors.py`) for `e`: the message
/// lists every problem; `file`, `path`, `line` and `column` locate the first; `issues`
/// holds them all. A dict has no lines: positions are then `None`.
fn config_error(py: Python<'_>, e: &loopguard::ConfigError, source: &ConfigText) -> PyErr {
    let from_dict = source.from_dict;
    let build = || -> PyResult<PyErr> {
        let issues = PyList::empty(py);
        for issue in &e.issues {
            issues.append(issue_dict(py, &source.placed(issue))?)?;
        }
        let first = e.issues.first();
        let position = first.and_then(|i| i.position).filter(|_| !from_dict);
        let kwargs = PyDict::new(py);
        kwargs.set_item("file", e.origin.as_deref())?;
        kwargs.set_item("path", first.map(|i| i.path.as_str()))?;
        kwargs.set_item("line", position.map(|p| p.line))?;
        kwargs.set_item("column", position.map(|p| p.column))?;
        kwargs.set_item("issues", issues)?;
        let message = if from_dict {
            e.issues
                .iter()
                .map(ToString::to_string)
                .collect::<Vec<_>>()
                .join("\n")
        } else {
            e.to_string()
        };
        let class = config_error_class(py)?;
        Ok(PyErr::from_value(class.call((message,), Some(&kwargs))?))
    };
    build().unwrap_or_else(|err| err)
}

/// A config issue as a dict: `path`, `line`, `column`, `message`.
fn issue_dict<'py>(py: Python<'py>, issue: &ConfigIssue) -> PyResult<Bound<'py, PyDict>> {
    let d = PyDict::new(py);
    d.set_item("path", &issue.path)?;
    d.set_item("line", issue.position.map(|p| p.line))?;
    d.set_item("column", issue.position.map(|p| p.column))?;
    d.set_item("message", issue.to_string())?;
    Ok(d)
}

fn config_error_class(py: Python<'_>) -> PyResult<&Bound<'_, PyAny>> {
    static CLASS: PyOnceLock<Py<PyAny>> = PyOnceLock::new();
    errors_class(py, &CLASS, "ConfigError")
}

fn config_warning_class(py: Python<'_>) -> PyResult<&Bound<'_, PyAny>> {
    static CLASS: PyOnceLock<Py<PyAny>> = PyOnceLock::new();
    errors_class(py, &CLASS, "ConfigWarning")
}

/// The class `name` of `loopguard/_errors.py`, looked up once into `cell`.
fn errors_class<'a>(
    py: Python<'a>,
    cell: &'a PyOnceLock<Py<PyAny>>,
    name: &str,
) -> PyResult<&'a Bound<'a, PyAny>> {
    cell.get_or_try_init(py, || {
        Ok::<_, PyErr>(py.import("loopguard._errors")?.getattr(name)?.unbind())
    })
    .map(|c| c.bind(py))
}

/// For `bench/timing.py`: converts `obj` the way arguments and results are converted and
/// returns its weight. Not part of the API.
#[pyfunction]
fn _convert_object(obj: &Bound<'_, PyAny>) -> PyResult<usize> {
    Ok(Converted::new(obj, "value")?.0.weight())
}

/// For `bench/timing.py`: the other way to get a value across, `json.dumps` text read
/// here into the engine's tape. Not part of the API.
#[pyfunction]
fn _convert_text(text: &str) -> PyResult<usize> {
    let mut tape = TAPE.with_borrow_mut(std::mem::take);
    let parsed = tape
        .parse(text)
        .map(|_| text.len())
        .map_err(|e| PyValueError::new_err(e.to_string()));
    TAPE.set(tape);
    parsed
}

thread_local! {
    static TAPE: RefCell<loopguard::json::Tape> = RefCell::default();
}

#[pymodule]
#[pyo3(name = "_native")]
fn native(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_class::<PyGuard>()?;
    m.add_class::<PyTicket>()?;
    m.add_class::<PyVerdict>()?;
    m.add_class::<PyRecorded>()?;
    m.add_class::<PyAbort>()?;
    m.add_class::<PyCounted>()?;
    m.add_function(wrap_pyfunction!(answers::verdict_from_answer, m)?)?;
    m.add_function(wrap_pyfunction!(answers::recorded_from_answer, m)?)?;
    m.add_function(wrap_pyfunction!(answers::counted_from_answer, m)?)?;
    m.add_function(wrap_pyfunction!(_convert_object, m)?)?;
    m.add_function(wrap_pyfunction!(_convert_text, m)?)?;
    m.add("MAX_NESTING", convert::MAX_NESTING)?;
    // The engine's closed sets, for the stubs' test (`tests/test_typing.py`) to compare.
    let names = |all: &[&str]| all.iter().map(|s| (*s).to_owned()).collect::<Vec<_>>();
    let detectors: Vec<&str> = loopguard::Detector::ALL
        .iter()
        .map(|d| d.as_str())
        .collect();
    let levels: Vec<&str> = loopguard::Level::ALL.iter().map(|l| l.as_str()).collect();
    m.add(
        "DETECTORS",
        pyo3::types::PyTuple::new(m.py(), names(&detectors))?,
    )?;
    m.add("LEVELS", pyo3::types::PyTuple::new(m.py(), names(&levels))?)?;
    let roles: Vec<&str> = loopguard::Role::ALL.iter().map(|r| r.as_str()).collect();
    m.add("ROLES", pyo3::types::PyTuple::new(m.py(), names(&roles))?)?;
    Ok(())
}
