//! What the guard answers, as frozen Python objects: [`PyVerdict`], [`PyRecorded`],
//! [`PyAbort`], [`PyCounted`]. Each wraps the engine's own value and reads every field from it, so the
//! words, the blocked result and the warning note are the engine's; `to_dict()` is the
//! answer `loopguard replay` prints for the same event, without `seq`, `type`, `session` and
//! `run` (it is serialized by the event protocol crate, not rebuilt here).
//!
//! `Guard.remote` builds the same objects from the sidecar's JSON answers
//! ([`verdict_from_answer`], [`recorded_from_answer`], [`counted_from_answer`]), so both
//! guards hand back one type.

use loopguard::{Abort, CallIdUse, Counted, Detection, Level, Recorded, Verdict};
use loopguard_events::Answer;
use pyo3::exceptions::PyValueError;
use pyo3::prelude::*;
use pyo3::sync::PyOnceLock;
use pyo3::types::PyDict;
use serde_json::Value;

use crate::convert::to_python;

/// The verdict on a call before it runs, or on a message.
#[pyclass(module = "loopguard", name = "Verdict", frozen)]
pub struct PyVerdict {
    inner: Verdict,
}

/// The allow verdict, made once: most calls get it, and it carries nothing.
static ALLOW: PyOnceLock<Py<PyVerdict>> = PyOnceLock::new();

pub fn verdict(py: Python<'_>, inner: Verdict) -> PyResult<Py<PyVerdict>> {
    if inner == Verdict::Allow {
        return Ok(ALLOW
            .get_or_try_init(py, || {
                Py::new(
                    py,
                    PyVerdict {
                        inner: Verdict::Allow,
                    },
                )
            })?
            .clone_ref(py));
    }
    Py::new(py, PyVerdict { inner })
}

impl PyVerdict {
    /// The detection whose fields this verdict shows (not a shadow verdict's: that one is
    /// under `shadow`, and the call is allowed).
    fn shown(&self) -> Option<&Detection> {
        match &self.inner {
            Verdict::Warn { detection, .. } | Verdict::Block { detection, .. } => Some(detection),
            _ => None,
        }
    }

    /// Whether the call must not run.
    pub fn is_blocked(&self) -> bool {
        self.inner.is_blocked()
    }

    /// The blocked result as a Python value.
    pub fn blocked_result_value<'py>(
        &self,
        py: Python<'py>,
    ) -> PyResult<Option<Bound<'py, PyAny>>> {
        self.inner
            .blocked_result()
            .map(|v| to_python(py, &v))
            .transpose()
    }

    /// The warning note, when there is one to surface.
    pub fn warning_note_text(&self) -> Option<String> {
        self.inner.warning_note()
    }

    /// The message of a terminal block.
    pub fn ends_run(&self) -> Option<String> {
        match &self.inner {
            Verdict::Block {
                detection,
                terminal: true,
            } => Some(detection.message.clone()),
            _ => None,
        }
    }

    /// Its `repr()`.
    pub fn repr(&self) -> String {
        self.__repr__()
    }
}

#[pymethods]
impl PyVerdict {
    /// `allow`, `warn` or `block`.
    #[getter]
    fn verdict(&self) -> &'static str {
        match self.inner {
            Verdict::Warn { .. } => "warn",
            Verdict::Block { .. } => "block",
            _ => "allow",
        }
    }

    #[getter]
    fn level(&self) -> Option<&'static str> {
        self.shown().map(|d| d.level.as_str())
    }

    #[getter]
    fn detector(&self) -> Option<&'static str> {
        self.shown().map(|d| d.detector.as_str())
    }

    #[getter]
    fn count(&self) -> Option<u32> {
        self.shown().map(|d| d.count)
    }

    #[getter]
    fn message(&self) -> Option<&str> {
        self.shown().map(|d| d.message.as_str())
    }

    #[getter]
    fn notify(&self) -> bool {
        matches!(self.inner, Verdict::Warn { notify: true, .. })
    }

    #[getter]
    fn terminal(&self) -> bool {
        matches!(self.inner, Verdict::Block { terminal: true, .. })
    }

    #[getter]
    fn paired_tool(&self) -> Option<&str> {
        self.shown().and_then(|d| d.evidence.paired_tool())
    }

    #[getter]
    fn blocked(&self) -> bool {
        self.inner.is_blocked()
    }

    #[getter]
    fn blocked_result<'py>(&self, py: Python<'py>) -> PyResult<Option<Bound<'py, PyAny>>> {
        self.blocked_result_value(py)
    }

    #[getter]
    fn warning_note(&self) -> Option<String> {
        self.inner.warning_note()
    }

    /// Shadow mode: what would have happened (a warn or a block verdict); the call runs.
    #[getter]
    fn shadow(&self, py: Python<'_>) -> PyResult<Option<Py<PyVerdict>>> {
        let Verdict::Shadow {
            detection,
            terminal,
        } = &self.inner
        else {
            return Ok(None);
        };
        let inner = match detection.level {
            Level::Critical => Verdict::Block {
                detection: detection.clone(),
                terminal: *terminal,
            },
            _ => Verdict::Warn {
                detection: detection.clone(),
                notify: false,
            },
        };
        Py::new(py, PyVerdict { inner }).map(Some)
    }

    fn to_dict<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyAny>> {
        answer_dict(
            py,
            &Answer::Call {
                seq: 0,
                session: String::new(),
                run: None,
                verdict: self.inner.clone(),
                id_use: CallIdUse::New,
            },
        )
    }

    fn __repr__(&self) -> String {
        match self.shown() {
            None if matches!(self.inner, Verdict::Shadow { .. }) => {
                "Verdict(verdict='allow', shadow=...)".into()
            }
            None => "Verdict(verdict='allow')".into(),
            Some(d) => format!(
                "Verdict(verdict='{}', detector='{}', count={}, {})",
                self.verdict(),
                d.detector.as_str(),
                d.count,
                match self.inner {
                    Verdict::Block { terminal, .. } => format!("terminal={}", py_bool(terminal)),
                    _ => format!("notify={}", py_bool(self.notify())),
                }
            ),
        }
    }
}

/// What became of a call's outcome.
#[pyclass(module = "loopguard", name = "Recorded", frozen)]
pub struct PyRecorded {
    inner: Recorded,
}

static RECORDED: PyOnceLock<[Py<PyRecorded>; 2]> = PyOnceLock::new();

pub fn recorded(py: Python<'_>, inner: Recorded) -> PyResult<Py<PyRecorded>> {
    if inner.abort.is_none() && inner.would_abort.is_none() {
        let both = RECORDED.get_or_try_init(py, || -> PyResult<_> {
            let make = |recorded| {
                Py::new(
                    py,
                    PyRecorded {
                        inner: Recorded::new(recorded, None, None),
                    },
                )
            };
            Ok([make(false)?, make(true)?])
        })?;
        return Ok(both[usize::from(inner.recorded)].clone_ref(py));
    }
    Py::new(py, PyRecorded { inner })
}

#[pymethods]
impl PyRecorded {
    /// Whether the history changed (false for outcomes without a fingerprint and for the
    /// results of blocked calls).
    #[getter]
    fn recorded(&self) -> bool {
        self.inner.recorded
    }

    /// Set when this outcome made the post-compaction guard abort the run.
    #[getter]
    fn abort(&self) -> Option<PyAbort> {
        self.inner.abort.clone().map(|inner| PyAbort { inner })
    }

    /// When this outcome ended the run (the post-compaction guard aborted it): the
    /// message it ends with.
    #[getter]
    fn ends_run(&self) -> Option<&str> {
        self.inner.ends_run()
    }

    /// Shadow mode: the abort that would have happened.
    #[getter]
    fn shadow_abort(&self) -> Option<PyAbort> {
        self.inner
            .would_abort
            .clone()
            .map(|inner| PyAbort { inner })
    }

    fn to_dict<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyAny>> {
        answer_dict(
            py,
            &Answer::Result {
                seq: 0,
                session: String::new(),
                run: None,
                recorded: self.inner.clone(),
            },
        )
    }

    fn __repr__(&self) -> String {
        match &self.inner.abort {
            Some(a) => format!(
                "Recorded(recorded={}, abort=Abort(tool='{}', count={}))",
                py_bool(self.inner.recorded),
                a.tool,
                a.count
            ),
            None => format!("Recorded(recorded={})", py_bool(self.inner.recorded)),
        }
    }
}

/// A run aborted by the post-compaction guard.
#[pyclass(module = "loopguard", name = "Abort", frozen)]
pub struct PyAbort {
    inner: Abort,
}

#[pymethods]
impl PyAbort {
    #[getter]
    fn detector(&self) -> &'static str {
        self.inner.detector().as_str()
    }

    #[getter]
    fn tool(&self) -> &str {
        &self.inner.tool
    }

    #[getter]
    fn count(&self) -> u32 {
        self.inner.count
    }

    #[getter]
    fn message(&self) -> &str {
        &self.inner.message
    }

    fn __repr__(&self) -> String {
        format!(
            "Abort(detector={:?}, tool={:?}, count={})",
            self.detector(),
            self.inner.tool,
            self.inner.count
        )
    }
}

/// What a model response's usage counted: its cost, and the budget it used up, if any.
#[pyclass(module = "loopguard", name = "Counted", frozen)]
pub struct PyCounted {
    inner: Counted,
}

pub fn counted(py: Python<'_>, inner: Counted) -> PyResult<Py<PyCounted>> {
    Py::new(py, PyCounted { inner })
}

#[pymethods]
impl PyCounted {
    /// What the response cost in US dollars: the host's figure, else the price table's;
    /// `None` when neither is known.
    #[getter]
    fn cost(&self) -> Option<f64> {
        self.inner.cost.map(loopguard::budget::Cost::usd)
    }

    /// The detector of the budget used up (`run_budget`, …), or `None`.
    #[getter]
    fn detector(&self) -> Option<&'static str> {
        self.inner.detector().map(|d| d.as_str())
    }

    /// What the model or the user reads about the budget used up.
    #[getter]
    fn message(&self) -> Option<&str> {
        self.inner.message.as_deref()
    }

    /// Whether the budget is only reported (shadow mode): nothing is stopped.
    #[getter]
    fn shadow(&self) -> bool {
        self.inner.shadow
    }

    /// When a budget is used up (not in shadow mode): the message the run ends with; its
    /// next call is blocked.
    #[getter]
    fn ends_run(&self) -> Option<&str> {
        match self.inner.shadow {
            true => None,
            false => self.inner.message.as_deref(),
        }
    }

    fn to_dict<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyAny>> {
        answer_dict(
            py,
            &Answer::Usage {
                seq: 0,
                session: String::new(),
                run: None,
                counted: self.inner.clone(),
            },
        )
    }

    fn __repr__(&self) -> String {
        let cost = match self.inner.cost {
            Some(c) => format!("{}", c.usd()),
            None => "None".into(),
        };
        match self.inner.detector() {
            Some(d) => format!(
                "Counted(cost={cost}, detector='{}', shadow={})",
                d.as_str(),
                py_bool(self.inner.shadow)
            ),
            None => format!("Counted(cost={cost})"),
        }
    }
}

fn py_bool(b: bool) -> &'static str {
    if b {
        "True"
    } else {
        "False"
    }
}

/// The protocol's answer object without the fields that name the event.
fn answer_dict<'py>(py: Python<'py>, answer: &Answer) -> PyResult<Bound<'py, PyAny>> {
    let mut value =
        serde_json::to_value(answer).map_err(|e| PyValueError::new_err(e.to_string()))?;
    if let Value::Object(map) = &mut value {
        for key in ["seq", "type", "session", "run"] {
            map.remove(key);
        }
    }
    let dict = to_python(py, &value)?;
    debug_assert!(dict.is_instance_of::<PyDict>());
    Ok(dict)
}

/// A sidecar's answer to a call event (JSON text) as a verdict on a call of `tool` (or to
/// a message event, `tool` being the message's role), read back into the engine's own
/// values by the protocol crate ([`Answer::from_json`]), so that the blocked result and
/// the warning note are the engine's.
#[pyfunction]
pub fn verdict_from_answer(py: Python<'_>, answer: &[u8], tool: &str) -> PyResult<Py<PyVerdict>> {
    match Answer::from_json(answer, tool).map_err(bad_answer)? {
        Answer::Call { verdict: inner, .. } | Answer::Message { verdict: inner, .. } => {
            verdict(py, inner)
        }
        _ => Err(bad_answer("not the answer to a call or a message")),
    }
}

/// A sidecar's answer to a result event (JSON text).
#[pyfunction]
pub fn recorded_from_answer(py: Python<'_>, answer: &[u8]) -> PyResult<Py<PyRecorded>> {
    match Answer::from_json(answer, "").map_err(bad_answer)? {
        Answer::Result {
            recorded: inner, ..
        } => recorded(py, inner),
        _ => Err(bad_answer("not the answer to a result")),
    }
}

/// A sidecar's answer to a usage event (JSON text).
#[pyfunction]
pub fn counted_from_answer(py: Python<'_>, answer: &[u8]) -> PyResult<Py<PyCounted>> {
    match Answer::from_json(answer, "").map_err(bad_answer)? {
        Answer::Usage { counted: inner, .. } => counted(py, inner),
        _ => Err(bad_answer("not the answer to a usage event")),
    }
}

fn bad_answer(e: impl std::fmt::Display) -> PyErr {
    PyValueError::new_err(format!("the sidecar's answer cannot be read: {e}"))
}
