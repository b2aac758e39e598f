//! The native half of the `loopguard` Python package (`loopguard._native`): the engine in
//! a Python process.
//!
//! The binding is thin. [`PyGuard`] is the engine's [`Guard`] behind a mutex; each method
//! turns its Python arguments into the engine's [`Scope`], [`Call`] and [`OutcomeOf`]
//! (`convert` walks Python values into a `flat` JSON view, in buffers reused from call to
//! call), asks the engine, and wraps the engine's answer in a frozen object (`answers`).
//! Everything a verdict says (words, blocked result, warning note) is read from the
//! engine's own values.
//!
//! Threads: the guard is shared freely. An engine call on small values runs with the GIL
//! held (releasing and taking it back would cost more than the call). A value heavier than
//! `HEAVY` bytes is fingerprinted with the GIL released, so other Python threads run
//! meanwhile, and so is any call that finds the engine busy in another thread. The mutex is
//! never held while waiting for the GIL, so the two locks cannot deadlock.

#![deny(unsafe_code)]

mod abi;
mod answers;
mod convert;
mod flat;

use std::borrow::Cow;
use std::path::PathBuf;
use std::sync::{Mutex, PoisonError, TryLockError};

use std::cell::RefCell;

use loopguard::{Call, CallRef, ConfigSet, Guard, OutcomeOf, Scope};
use pyo3::exceptions::{PyTypeError, PyValueError};
use pyo3::prelude::*;
use pyo3::sync::PyOnceLock;
use pyo3::types::{PyDict, PyList, PyString};

use abi::CallArgs;
use answers::{PyAbort, PyRecorded, PyVerdict};
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

/// The loop guard with its state in memory.
#[pyclass(module = "loopguard", name = "Guard", frozen)]
pub struct PyGuard {
    engine: Mutex<Guard>,
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
        op: impl FnOnce(&mut Guard) -> R + Send,
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

    /// `before_call`, however it was called.
    fn judge(
        &self,
        py: Python<'_>,
        call: &CallArgs<'_, '_>,
        batch: Option<&Bound<'_, PyAny>>,
    ) -> PyResult<Py<PyVerdict>> {
        let names = Names::of(call)?;
        let batch = optional_text(batch, "batch")?;
        let args = Converted::new(call.args, "args")?;
        let heavy = args.0.weight() > HEAVY;
        let verdict = self.with_engine(py, heavy, |engine| {
            let call = Call::with_args(&names.tool, args.0.root())
                .with_id(names.call_id.as_deref())
                .with_batch(batch.as_deref());
            engine.begin(&names.scope(), &call).into_verdict()
        });
        answers::verdict(py, verdict)
    }

    /// `after_call`, however it was called (`result` and `error` are `None` when not given).
    fn record(
        &self,
        py: Python<'_>,
        call: &CallArgs<'_, '_>,
        result: Option<&Bound<'_, PyAny>>,
        error: Option<&Bound<'_, PyAny>>,
    ) -> PyResult<Py<PyRecorded>> {
        let names = Names::of(call)?;
        let args = Converted::new(call.args, "args")?;
        let outcome = match (result, error) {
            (Some(_), Some(_)) => {
                return Err(PyTypeError::new_err(
                    "after_call takes result= or error=, not both",
                ))
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
        };
        let heavy = args.0.weight() + outcome.as_ref().map_or(0, |(_, o)| o.0.weight()) > HEAVY;
        let recorded = self.with_engine(py, heavy, |engine| {
            let call =
                Call::with_args(&names.tool, args.0.root()).with_id(names.call_id.as_deref());
            let outcome = match &outcome {
                Some((false, value)) => OutcomeOf::Result(value.0.root()),
                Some((true, value)) => OutcomeOf::Error(value.0.root()),
                None => OutcomeOf::Nothing,
            };
            let scope = names.scope();
            engine.with_run(&scope, |cfg, run, now| {
                let ticket = run.resume(cfg, &scope, CallRef::Call(call));
                run.finish(cfg, ticket, outcome, now).unwrap_or_default()
            })
        });
        answers::recorded(py, recorded)
    }
}

/// The names a call carries, read from their Python strings (in place where the
/// interpreter allows: `abi::text`).
struct Names<'a> {
    tool: Cow<'a, str>,
    session: Cow<'a, str>,
    run: Option<Cow<'a, str>>,
    agent: Option<Cow<'a, str>>,
    call_id: Option<Cow<'a, str>>,
}

impl<'a> Names<'a> {
    fn of(call: &CallArgs<'a, '_>) -> PyResult<Self> {
        let tool = required_text(call.tool, "tool")?;
        if tool.trim().is_empty() {
            return Err(PyValueError::new_err("tool must be a non-blank string"));
        }
        Ok(Self {
            tool,
            session: required_text(call.session, "session")?,
            run: optional_text(call.run, "run")?,
            agent: optional_text(call.agent, "agent")?,
            call_id: optional_text(call.call_id, "call_id")?,
        })
    }

    fn scope(&self) -> Scope<'_> {
        Scope::new(&self.session)
            .with_run(self.run.as_deref())
            .with_agent(self.agent.as_deref())
    }
}

fn required_text<'a>(ob: &'a Bound<'_, PyAny>, what: &str) -> PyResult<Cow<'a, str>> {
    match ob.cast::<PyString>() {
        Ok(s) => abi::text(s),
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
fn optional_text<'a>(
    ob: Option<&'a Bound<'_, PyAny>>,
    what: &str,
) -> PyResult<Option<Cow<'a, str>>> {
    match ob {
        Some(ob) if !ob.is_none() => required_text(ob, what).map(Some),
        _ => Ok(None),
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
        let config = match config {
            None => ConfigSet::default(),
            Some(config) => load_config(py, config)?,
        };
        Ok(Self {
            engine: Mutex::new(Guard::new(config)),
        })
    }

    /// The verdict on a call about to run. A blocked call must not run: hand the model
    /// `verdict.blocked_result` (or `verdict.message`) instead.
    #[pyo3(signature = (tool, args, *, session, run, agent = None, call_id = None, batch = None))]
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
    ) -> PyResult<Py<PyVerdict>> {
        let call = CallArgs::new(tool, args, session, run, agent, call_id);
        self.judge(py, &call, batch)
    }

    /// Records what a call returned: `result=` (any JSON value, a pydantic model, a
    /// dataclass) or `error=` (an exception, whose text is used, or a JSON value); neither
    /// records nothing. Also for warned calls; results of blocked calls are ignored.
    #[pyo3(signature = (tool, args, *, session, run, agent = None, call_id = None, result = Given(None), error = Given(None)))]
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
    ) -> PyResult<Py<PyRecorded>> {
        let call = CallArgs::new(tool, args, session, run, agent, call_id);
        self.record(py, &call, result.0.as_ref(), error.0.as_ref())
    }

    /// A compaction retry happened in this run: arms the post-compaction guard. Returns
    /// the number of attempts it watches, or 0 when the guard is disabled.
    #[pyo3(signature = (*, session, run, agent = None))]
    fn on_compaction(
        &self,
        py: Python<'_>,
        session: String,
        run: Option<String>,
        agent: Option<String>,
    ) -> u32 {
        self.with_engine(py, false, move |engine| {
            let scope = Scope::new(&session)
                .with_run(run.as_deref())
                .with_agent(agent.as_deref());
            engine.on_compaction(&scope)
        })
    }

    /// Forgets a run (its prompt-to-answer cycle is over). Returns whether it existed.
    #[pyo3(signature = (*, session, run))]
    fn end_run(&self, py: Python<'_>, session: String, run: Option<String>) -> bool {
        self.with_engine(py, false, move |engine| {
            engine.end_run(&Scope::new(&session).with_run(run.as_deref()))
        })
    }

    /// Forgets a session and all its runs. Returns whether it existed.
    fn end_session(&self, py: Python<'_>, session: String) -> bool {
        self.with_engine(py, false, move |engine| engine.end_session(&session))
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
            let set = engine.config();
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

/// A config given as a path, JSON5 text or a dict.
fn load_config(py: Python<'_>, config: &Bound<'_, PyAny>) -> PyResult<ConfigSet> {
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
    ConfigSet::parse_named(&text, origin.as_deref()).map_err(|e| {
        config_error(
            py,
            &e,
            origin.is_none() && config.is_instance_of::<PyDict>(),
        )
    })
}

fn read_config(path: PathBuf) -> PyResult<(String, Option<String>)> {
    let text = std::fs::read_to_string(&path)?;
    Ok((text, Some(path.display().to_string())))
}

/// `loopguard.ConfigError` (defined in Python, `loopguard/_errors.py`) for `e`: the message
/// lists every problem; `file`, `path`, `line` and `column` locate the first; `issues`
/// holds them all. A dict has no lines: positions are then `None`.
fn config_error(py: Python<'_>, e: &loopguard::ConfigError, from_dict: bool) -> PyErr {
    let build = || -> PyResult<PyErr> {
        let issues = PyList::empty(py);
        for issue in &e.issues {
            let d = PyDict::new(py);
            let position = issue.position.filter(|_| !from_dict);
            d.set_item("path", &issue.path)?;
            d.set_item("line", position.map(|p| p.line))?;
            d.set_item("column", position.map(|p| p.column))?;
            d.set_item("message", issue.to_string())?;
            issues.append(d)?;
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

fn config_error_class(py: Python<'_>) -> PyResult<&Bound<'_, PyAny>> {
    static CLASS: PyOnceLock<Py<PyAny>> = PyOnceLock::new();
    CLASS
        .get_or_try_init(py, || {
            Ok::<_, PyErr>(
                py.import("loopguard._errors")?
                    .getattr("ConfigError")?
                    .unbind(),
            )
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
    abi::install(&m.py().get_type::<PyGuard>())?;
    m.add_class::<PyVerdict>()?;
    m.add_class::<PyRecorded>()?;
    m.add_class::<PyAbort>()?;
    m.add_function(wrap_pyfunction!(answers::verdict_from_answer, m)?)?;
    m.add_function(wrap_pyfunction!(answers::recorded_from_answer, m)?)?;
    m.add_function(wrap_pyfunction!(_convert_object, m)?)?;
    m.add_function(wrap_pyfunction!(_convert_text, m)?)?;
    m.add("MAX_NESTING", convert::MAX_NESTING)?;
    Ok(())
}
