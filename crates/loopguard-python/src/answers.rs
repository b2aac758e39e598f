//! What the guard answers, as frozen Python objects: [`PyVerdict`], [`PyRecorded`],
//! [`PyAbort`]. Each wraps the engine's own value and reads every field from it, so the
//! words, the blocked result and the warning note are the engine's; `to_dict()` is the
//! answer `loopguard replay` prints for the same event, without `seq`, `type`, `session` and
//! `run` (it is serialized by the event protocol crate, not rebuilt here).
//!
//! `Guard.remote` builds the same objects from the sidecar's JSON answers
//! ([`verdict_from_answer`], [`recorded_from_answer`]), so both guards hand back one type.

use loopguard::{Abort, Detection, Level, Recorded, Verdict};
use loopguard_events::Answer;
use pyo3::exceptions::PyValueError;
use pyo3::prelude::*;
use pyo3::sync::PyOnceLock;
use pyo3::types::PyDict;
use serde_json::{json, Value};

use crate::convert::to_python;

/// The verdict on a call, before it runs.
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
        self.inner
            .blocked_result()
            .map(|v| to_python(py, &v))
            .transpose()
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

/// A sidecar's answer to a call event (JSON text) as a verdict on a call of `tool`.
///
/// The answer carries what the engine's [`Detection`] holds except the signatures, which
/// a host never sees; they are left zero. Reading it with the engine's own types keeps the
/// blocked result and the warning note the engine's.
#[pyfunction]
pub fn verdict_from_answer(py: Python<'_>, answer: &[u8], tool: &str) -> PyResult<Py<PyVerdict>> {
    let answer: Value = serde_json::from_slice(answer).map_err(bad_answer)?;
    let detection = |d: &Value| -> PyResult<Detection> {
        serde_json::from_value(json!({
            "level": d["level"], "detector": d["detector"], "count": d["count"],
            "tool": tool, "paired_tool": d.get("paired_tool"), "message": d["message"],
            "signature": "0", "paired_signature": d.get("paired_tool").map(|_| "0"),
        }))
        .map_err(bad_answer)
    };
    let flag = |d: &Value, key: &str| d[key].as_bool().unwrap_or(false);
    let inner = match (answer["verdict"].as_str(), answer.get("shadow")) {
        (Some("allow"), Some(shadow)) => Verdict::Shadow {
            detection: detection(shadow)?,
            terminal: flag(shadow, "terminal"),
        },
        (Some("allow"), None) => Verdict::Allow,
        (Some("warn"), _) => Verdict::Warn {
            detection: detection(&answer)?,
            notify: flag(&answer, "notify"),
        },
        (Some("block"), _) => Verdict::Block {
            detection: detection(&answer)?,
            terminal: flag(&answer, "terminal"),
        },
        _ => return Err(bad_answer(format!("not a verdict: {answer}"))),
    };
    verdict(py, inner)
}

/// A sidecar's answer to a result event (JSON text).
#[pyfunction]
pub fn recorded_from_answer(py: Python<'_>, answer: &[u8]) -> PyResult<Py<PyRecorded>> {
    let answer: Value = serde_json::from_slice(answer).map_err(bad_answer)?;
    let abort = |a: Option<&Value>| -> PyResult<Option<Abort>> {
        match a {
            None | Some(Value::Null) => Ok(None),
            Some(a) => serde_json::from_value(json!({
                "tool": a["tool"], "count": a["count"], "message": a["message"], "signature": "0",
            }))
            .map(Some)
            .map_err(bad_answer),
        }
    };
    let Some(flag) = answer["recorded"].as_bool() else {
        return Err(bad_answer(format!("not a result answer: {answer}")));
    };
    recorded(
        py,
        Recorded::new(
            flag,
            abort(answer.get("abort"))?,
            abort(answer.get("shadow_abort"))?,
        ),
    )
}

fn bad_answer(e: impl std::fmt::Display) -> PyErr {
    PyValueError::new_err(format!("the sidecar's answer cannot be read: {e}"))
}
