//! Python objects to JSON values for the engine, and engine values back to Python.
//!
//! Arguments and results are converted value by value (`dict`, `list`, `tuple`, `str`,
//! `int`, `float`, `bool`, `None`, pydantic models through `model_dump(mode="json")`,
//! dataclasses field by field) into a [`Flat`] array that the engine reads through its
//! `Json` view, with no `serde_json` value tree in between (no allocation per node, no
//! tree to free). `bench/timing.py` measures this against `json.dumps` text read into the
//! engine's tape, and the walk is the faster. The walk refuses what JSON cannot say, with the
//! place it was found (`args['files'][2]`):
//!
//! - a type JSON has no word for (bytes, sets, arbitrary objects): `TypeError`;
//! - a key that is not a `str`: `TypeError` (`json.dumps` would quietly turn `1` into `"1"`
//!   and merge it with a real `"1"` key);
//! - NaN and infinities: `ValueError`;
//! - an integer beyond the 64 bits the engine keeps exactly is the double its decimal text
//!   parses to (what `loopguard replay` does with the same JSON text); one beyond any
//!   double: `OverflowError`;
//! - nesting deeper than the event protocol allows on a line ([`MAX_NESTING`]), which also
//!   catches a container that holds itself: `ValueError` naming the cycle when there is one.
//!
//! The walk recurses, but never deeper than [`MAX_NESTING`], whatever the input: the depth
//! check comes before the descent, so neither Rust's stack nor Python's recursion limit is
//! at the input's mercy.

use pyo3::exceptions::{PyOverflowError, PyRuntimeError, PyTypeError, PyValueError};
use pyo3::intern;
use pyo3::prelude::*;
use pyo3::sync::PyOnceLock;
use pyo3::types::{PyBool, PyDict, PyFloat, PyInt, PyList, PyString, PyTuple};
use serde_json::{Number, Value};

use crate::flat::Flat;

/// Deepest nesting of a value: serde_json counts every container of a line against the
/// protocol's limit, the event object included, so a value inside an event (its `args`,
/// its `result`) can nest [`loopguard_events::MAX_DEPTH`] − 2 levels. The same value is then
/// accepted here, by `loopguard replay` and by the sidecar (`tests/test_bad_input.py`
/// checks the edge against the real binary).
pub const MAX_NESTING: usize = loopguard_events::MAX_DEPTH - 2;

/// Converts `obj` into `flat` (cleared first); `what` names it in errors (`args`,
/// `result`, `error`).
pub fn to_flat(obj: &Bound<'_, PyAny>, what: &str, flat: &mut Flat) -> PyResult<()> {
    flat.clear();
    Walk { flat }.value(obj, 0).map_err(|mut failure| {
        failure.path.reverse();
        failure.into_err(what)
    })
}
/// Where a conversion failed (built while unwinding, innermost step first) and why.
struct Failure {
    path: Vec<Step>,
    problem: Problem,
}

enum Step {
    Key(String),
    Index(usize),
}

enum Problem {
    Type(String),
    Key(String),
    NotFinite(f64),
    TooLarge,
    TooMany,
    /// Nested too deep at the container whose address is `at`; `cycle` once that
    /// container was found among its own ancestors.
    TooDeep {
        at: usize,
        cycle: bool,
    },
    Python(PyErr),
}

impl From<PyErr> for Failure {
    fn from(e: PyErr) -> Self {
        Problem::Python(e).into()
    }
}

impl From<Problem> for Failure {
    fn from(problem: Problem) -> Self {
        Self {
            path: Vec::new(),
            problem,
        }
    }
}

impl Failure {
    /// The failure seen from `container`, at `step` inside it.
    fn at<T>(mut self, step: Step, container: &Bound<'_, T>) -> Self {
        if let Problem::TooDeep { at, cycle } = &mut self.problem {
            *cycle |= *at == container.as_ptr() as usize;
        }
        self.path.push(step);
        self
    }

    fn into_err(self, what: &str) -> PyErr {
        let mut place = what.to_owned();
        for step in &self.path {
            match step {
                Step::Key(k) => place.push_str(&format!("[{k:?}]")),
                Step::Index(i) => place.push_str(&format!("[{i}]")),
            }
        }
        match self.problem {
            Problem::Type(t) => PyTypeError::new_err(format!(
                "{place}: a {t} is not a JSON value; loopguard takes dict, list, tuple, str, int, float, bool, None, pydantic models and dataclasses"
            )),
            Problem::Key(t) => PyTypeError::new_err(format!(
                "{place}: dict keys must be str, not {t}"
            )),
            Problem::NotFinite(x) => PyValueError::new_err(format!(
                "{place}: {x} is not a JSON number"
            )),
            Problem::TooLarge => PyOverflowError::new_err(format!(
                "{place}: the integer is too large for a JSON number"
            )),
            Problem::TooMany => PyValueError::new_err(format!(
                "{place}: more values than the guard can address (4 billion)"
            )),
            Problem::TooDeep { cycle: true, .. } => PyValueError::new_err(format!(
                "{place}: the value contains itself (a reference cycle)"
            )),
            Problem::TooDeep { cycle: false, .. } => PyValueError::new_err(format!(
                "{place}: nested deeper than {MAX_NESTING} levels"
            )),
            Problem::Python(e) => e,
        }
    }
}

struct Walk<'o> {
    flat: &'o mut Flat,
}

impl Walk<'_> {
    fn value(&mut self, ob: &Bound<'_, PyAny>, depth: usize) -> Result<(), Failure> {
        if !self.flat.has_room() {
            return Err(Problem::TooMany.into());
        }
        // The exact built-in types first, a pointer comparison each; subclasses (and
        // `bool`, a subclass of `int`) take the checks after.
        if let Ok(s) = ob.cast_exact::<PyString>() {
            return self.string(s);
        }
        if let Ok(d) = ob.cast_exact::<PyDict>() {
            return self.dict(d, depth);
        }
        if let Ok(l) = ob.cast_exact::<PyList>() {
            return self.list(l, depth);
        }
        if let Ok(i) = ob.cast_exact::<PyInt>() {
            self.flat.number(int(i)?);
            return Ok(());
        }
        if let Ok(s) = ob.cast::<PyString>() {
            return self.string(s);
        }
        if ob.is_none() {
            self.flat.null();
            return Ok(());
        }
        if let Ok(b) = ob.cast::<PyBool>() {
            self.flat.bool(b.is_true());
            return Ok(());
        }
        if let Ok(i) = ob.cast::<PyInt>() {
            self.flat.number(int(i)?);
            return Ok(());
        }
        if let Ok(f) = ob.cast::<PyFloat>() {
            let x = f.value();
            let n = Number::from_f64(x).ok_or(Problem::NotFinite(x))?;
            self.flat.number(n);
            return Ok(());
        }
        if let Ok(d) = ob.cast::<PyDict>() {
            return self.dict(d, depth);
        }
        if let Ok(l) = ob.cast::<PyList>() {
            return self.list(l, depth);
        }
        if let Ok(t) = ob.cast::<PyTuple>() {
            enter(t, depth)?;
            let node = self.flat.open(false);
            for (i, item) in t.iter().enumerate() {
                self.value(&item, depth + 1)
                    .map_err(|e| e.at(Step::Index(i), t))?;
            }
            self.flat.close(node, t.len());
            return Ok(());
        }
        self.object(ob, depth)
    }

    fn string(&mut self, s: &Bound<'_, PyString>) -> Result<(), Failure> {
        self.flat.string(s.to_str()?);
        Ok(())
    }

    fn dict(&mut self, d: &Bound<'_, PyDict>, depth: usize) -> Result<(), Failure> {
        enter(d, depth)?;
        let node = self.flat.open(true);
        // A dict can change while its values are converted (a `model_dump` with side
        // effects); PyO3's iterator panics then, so the size is checked before each step
        // and no more entries are read than it had.
        let size = d.len();
        let mut entries = d.iter();
        let mut count = 0;
        while count < size {
            if d.len() != size {
                return Err(Problem::Python(PyRuntimeError::new_err(
                    "dictionary changed size during conversion",
                ))
                .into());
            }
            let Some((k, v)) = entries.next() else { break };
            let key = match k.cast::<PyString>() {
                Ok(k) => k.to_str()?,
                Err(_) => return Err(Problem::Key(type_name(&k)).into()),
            };
            self.flat.string(key);
            self.value(&v, depth + 1)
                .map_err(|e| e.at(Step::Key(key.to_owned()), d))?;
            count += 1;
        }
        self.flat.close(node, count);
        Ok(())
    }

    fn list(&mut self, l: &Bound<'_, PyList>, depth: usize) -> Result<(), Failure> {
        enter(l, depth)?;
        let node = self.flat.open(false);
        // A list can change while its items are converted (a model_dump with side
        // effects); indexing by the live length never reads past the end.
        let mut i = 0;
        while i < l.len() {
            let item = l.get_item(i)?;
            self.value(&item, depth + 1)
                .map_err(|e| e.at(Step::Index(i), l))?;
            i += 1;
        }
        self.flat.close(node, i);
        Ok(())
    }
    /// Pydantic models and dataclasses; anything else is a `TypeError`.
    fn object(&mut self, ob: &Bound<'_, PyAny>, depth: usize) -> Result<(), Failure> {
        let py = ob.py();
        if !ob.is_instance_of::<pyo3::types::PyType>() {
            if let Ok(dump) = ob.getattr(intern!(py, "model_dump")) {
                let kwargs = PyDict::new(py);
                kwargs.set_item(intern!(py, "mode"), intern!(py, "json"))?;
                let dumped = dump.call((), Some(&kwargs))?;
                if !dumped.is_instance_of::<PyDict>() {
                    return Err(Problem::Type(format!(
                        "{} whose model_dump() returned a {}",
                        type_name(ob),
                        type_name(&dumped)
                    ))
                    .into());
                }
                return self.value(&dumped, depth);
            }
            if ob.hasattr(intern!(py, "__dataclass_fields__"))? {
                enter(ob, depth)?;
                let node = self.flat.open(true);
                let mut count = 0;
                for field in dataclass_fields(py)?.call1((ob,))?.try_iter()? {
                    let name = field?.getattr(intern!(py, "name"))?;
                    let name = name.cast_into::<PyString>().map_err(PyErr::from)?;
                    let key = name.to_cow()?.into_owned();
                    let v = ob.getattr(&name)?;
                    self.flat.string(&key);
                    self.value(&v, depth + 1)
                        .map_err(|e| e.at(Step::Key(key), ob))?;
                    count += 1;
                }
                self.flat.close(node, count);
                return Ok(());
            }
        }
        Err(Problem::Type(type_name(ob)).into())
    }
}

/// Checks the depth before the walk descends into the container `ob`.
fn enter<T>(ob: &Bound<'_, T>, depth: usize) -> Result<(), Failure> {
    if depth >= MAX_NESTING {
        return Err(Problem::TooDeep {
            at: ob.as_ptr() as usize,
            cycle: false,
        }
        .into());
    }
    Ok(())
}

/// An integer as the engine keeps it: exactly within 64 bits, else as the nearest double.
fn int(i: &Bound<'_, PyInt>) -> Result<Number, Failure> {
    if let Ok(n) = i.extract::<i64>() {
        return Ok(n.into());
    }
    if let Ok(n) = i.extract::<u64>() {
        return Ok(n.into());
    }
    let x = i.extract::<f64>().map_err(|_| Problem::TooLarge)?;
    Number::from_f64(x).ok_or_else(|| Problem::TooLarge.into())
}

fn dataclass_fields(py: Python<'_>) -> PyResult<&Bound<'_, PyAny>> {
    static FIELDS: PyOnceLock<Py<PyAny>> = PyOnceLock::new();
    FIELDS
        .get_or_try_init(py, || {
            Ok::<_, PyErr>(py.import("dataclasses")?.getattr("fields")?.unbind())
        })
        .map(|f| f.bind(py))
}

fn type_name(ob: &Bound<'_, PyAny>) -> String {
    ob.get_type()
        .qualname()
        .map(|n| n.to_string())
        .unwrap_or_else(|_| "value".into())
}

/// A JSON value made by the engine (a blocked result, an effective config) as Python
/// objects. Only engine-made values come here, whose nesting is fixed by the engine.
pub fn to_python<'py>(py: Python<'py>, value: &Value) -> PyResult<Bound<'py, PyAny>> {
    Ok(match value {
        Value::Null => py.None().into_bound(py),
        Value::Bool(b) => PyBool::new(py, *b).to_owned().into_any(),
        Value::Number(n) => match (n.as_i64(), n.as_u64()) {
            (Some(i), _) => i.into_pyobject(py)?.into_any(),
            (None, Some(u)) => u.into_pyobject(py)?.into_any(),
            _ => n.as_f64().unwrap_or(f64::NAN).into_pyobject(py)?.into_any(),
        },
        Value::String(s) => PyString::new(py, s).into_any(),
        Value::Array(items) => {
            let list = PyList::empty(py);
            for item in items {
                list.append(to_python(py, item)?)?;
            }
            list.into_any()
        }
        Value::Object(map) => {
            let dict = PyDict::new(py);
            for (k, v) in map {
                dict.set_item(k, to_python(py, v)?)?;
            }
            dict.into_any()
        }
    })
}
