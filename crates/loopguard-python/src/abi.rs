//! What Python 3.10's stable ABI adds to the 3.9 floor the wheel is built for, used when
//! the running interpreter has it: the only `unsafe` code of the binding.
//!
//! The wheel is one abi3 build for CPython 3.9 and later, so PyO3 compiles it for 3.9's
//! stable ABI. There a method receives its arguments as a tuple and a dict of keywords
//! that the interpreter builds for every call, PyO3 matches each keyword by copying its
//! name out as UTF-8, and a string's UTF-8 is only reachable as a copy (a new `bytes`
//! object, then copied again into Rust). 3.10 put two things into the stable ABI that
//! remove that work, and this module uses them when `sys.version_info >= (3, 10)`:
//!
//! - [`text`] reads a string's UTF-8 in place (`PyUnicode_AsUTF8AndSize`: the string's own
//!   bytes for ASCII, a UTF-8 copy cached on the string otherwise);
//! - [`install`] replaces `Guard.before_call` and `Guard.after_call`, the two methods a host
//!   calls on every tool call, with vectorcall methods (`METH_FASTCALL | METH_KEYWORDS`):
//!   the arguments arrive as an array, and the keyword names as a tuple of the caller's
//!   strings, which are interned, so [`Signature`] matches them by identity (by text only
//!   when that fails). They parse into the same [`CallArgs`] as the PyO3 methods and run
//!   the same code.
//!
//! On 3.9 nothing here is used, and the PyO3 methods stay. They remain reachable on every
//! version as `Guard._before_call_compat` / `_after_call_compat`, so that the tests drive
//! both ways in.

#![allow(unsafe_code)]

use std::borrow::Cow;
use std::ffi::{c_char, c_int, CString};
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::atomic::{AtomicBool, Ordering};

use pyo3::exceptions::{PyTypeError, PyValueError};
use pyo3::ffi;
use pyo3::panic::PanicException;
use pyo3::prelude::*;
use pyo3::sync::PyOnceLock;
use pyo3::types::{PyString, PyTuple, PyType};
use pyo3::Borrowed;

use crate::PyGuard;

/// Set once, when the module is loaded on Python 3.10 or later.
static ABI_3_10: AtomicBool = AtomicBool::new(false);

// `Include/methodobject.h`; in the stable ABI from 3.10 (PyO3 declares them for 3.10
// builds only).
const METH_FASTCALL: c_int = 0x0080;
const METH_KEYWORDS: c_int = 0x0002;

type FastWithKeywords = unsafe extern "C" fn(
    *mut ffi::PyObject,
    *const *mut ffi::PyObject,
    ffi::Py_ssize_t,
    *mut ffi::PyObject,
) -> *mut ffi::PyObject;

unsafe extern "C" {
    // In the stable ABI from 3.10 (and exported by every CPython 3; called only there).
    fn PyUnicode_AsUTF8AndSize(
        unicode: *mut ffi::PyObject,
        size: *mut ffi::Py_ssize_t,
    ) -> *const c_char;
}

/// The UTF-8 of `s`: borrowed from the string on 3.10 and later, a copy on 3.9.
pub fn text<'a>(s: &'a Bound<'_, PyString>) -> PyResult<Cow<'a, str>> {
    if !ABI_3_10.load(Ordering::Relaxed) {
        return s.to_cow();
    }
    let mut size: ffi::Py_ssize_t = 0;
    // SAFETY: `s` is a str (any subclass is one for this function), alive for 'a; the
    // interpreter is attached (`s` is bound). The pointer stays valid while the string
    // lives and the string is immutable; CPython's UTF-8 is valid UTF-8 (strings with lone
    // surrogates fail here with `UnicodeEncodeError` instead).
    unsafe {
        let data = PyUnicode_AsUTF8AndSize(s.as_ptr(), &mut size);
        if data.is_null() {
            return Err(PyErr::fetch(s.py()));
        }
        let bytes = std::slice::from_raw_parts(data.cast::<u8>(), size as usize);
        Ok(Cow::Borrowed(std::str::from_utf8_unchecked(bytes)))
    }
}

/// What `before_call` and `after_call` are given, whichever way they are called.
pub struct CallArgs<'a, 'py> {
    pub tool: &'a Bound<'py, PyAny>,
    pub args: &'a Bound<'py, PyAny>,
    pub session: &'a Bound<'py, PyAny>,
    pub run: Option<&'a Bound<'py, PyAny>>,
    pub agent: Option<&'a Bound<'py, PyAny>>,
    pub call_id: Option<&'a Bound<'py, PyAny>>,
}

impl<'a, 'py> CallArgs<'a, 'py> {
    pub fn new(
        tool: &'a Bound<'py, PyAny>,
        args: &'a Bound<'py, PyAny>,
        session: &'a Bound<'py, PyAny>,
        run: Option<&'a Bound<'py, PyAny>>,
        agent: Option<&'a Bound<'py, PyAny>>,
        call_id: Option<&'a Bound<'py, PyAny>>,
    ) -> Self {
        Self {
            tool,
            args,
            session,
            run,
            agent,
            call_id,
        }
    }
}

/// A vectorcall method's parameters: `names` in order, the first `positional` may be
/// given by position, the first `required` must be given. Matches Python's own rules and
/// messages for a function `def f(tool, args, *, session, run, ...)`.
pub struct Signature<const N: usize> {
    method: &'static str,
    names: [&'static str; N],
    positional: usize,
    required: usize,
    interned: PyOnceLock<[Py<PyString>; N]>,
}

pub static BEFORE_CALL: Signature<7> = Signature {
    method: "before_call",
    names: [
        "tool", "args", "session", "run", "agent", "call_id", "batch",
    ],
    positional: 2,
    required: 4,
    interned: PyOnceLock::new(),
};

pub static AFTER_CALL: Signature<8> = Signature {
    method: "after_call",
    names: [
        "tool", "args", "session", "run", "agent", "call_id", "result", "error",
    ],
    positional: 2,
    required: 4,
    interned: PyOnceLock::new(),
};

impl<const N: usize> Signature<N> {
    /// Each parameter's argument, `None` when not given.
    ///
    /// # Safety
    ///
    /// `args` holds `nargs` positional arguments followed by one per name of `kwnames` (a
    /// tuple of str, or null), as the vectorcall protocol passes them, all alive for 'a.
    unsafe fn parse<'a, 'py>(
        &self,
        py: Python<'py>,
        args: *const *mut ffi::PyObject,
        nargs: ffi::Py_ssize_t,
        kwnames: *mut ffi::PyObject,
    ) -> PyResult<[Option<Borrowed<'a, 'py, PyAny>>; N]> {
        let nargs = nargs as usize;
        let mut out = [None; N];
        if nargs > self.positional {
            return Err(PyTypeError::new_err(format!(
                "{}() takes {} positional arguments but {nargs} were given",
                self.qualified(),
                self.positional
            )));
        }
        for (i, slot) in out.iter_mut().enumerate().take(nargs) {
            // SAFETY: i < nargs (the caller's contract).
            *slot = Some(unsafe { Borrowed::from_ptr(py, *args.add(i)) });
        }
        if !kwnames.is_null() {
            // SAFETY: a non-null `kwnames` is a tuple (the caller's contract).
            let kwnames = unsafe { Borrowed::from_ptr(py, kwnames).cast_unchecked::<PyTuple>() };
            let interned = self.interned(py);
            for (k, name) in kwnames.iter_borrowed().enumerate() {
                let at = interned
                    .iter()
                    .position(|n| n.as_ptr() == name.as_ptr())
                    .or_else(|| self.position_by_text(&name))
                    .ok_or_else(|| {
                        PyTypeError::new_err(format!(
                            "{}() got an unexpected keyword argument {}",
                            self.qualified(),
                            repr(&name)
                        ))
                    })?;
                // SAFETY: keyword values follow the positional ones, one per name.
                let value = unsafe { Borrowed::from_ptr(py, *args.add(nargs + k)) };
                if out[at].replace(value).is_some() {
                    return Err(PyTypeError::new_err(format!(
                        "{}() got multiple values for argument '{}'",
                        self.qualified(),
                        self.names[at]
                    )));
                }
            }
        }
        // As Python reports it: the missing positional parameters first, else the
        // keyword-only ones.
        for (params, kind) in [
            (0..self.positional, "positional"),
            (self.positional..self.required, "keyword"),
        ] {
            let missing: Vec<String> = params
                .filter(|&i| out[i].is_none())
                .map(|i| format!("'{}'", self.names[i]))
                .collect();
            if let Some((last, first)) = missing.split_last() {
                let names = match first {
                    [] => last.clone(),
                    _ => format!("{} and {last}", first.join(", ")),
                };
                return Err(PyTypeError::new_err(format!(
                    "{}() missing {} required {kind} argument{}: {names}",
                    self.qualified(),
                    missing.len(),
                    if missing.len() == 1 { "" } else { "s" },
                )));
            }
        }
        Ok(out)
    }

    fn interned(&self, py: Python<'_>) -> &[Py<PyString>; N] {
        self.interned
            .get_or_init(py, || self.names.map(|n| PyString::intern(py, n).unbind()))
    }

    /// A keyword name that is not the interned parameter name (built at run time, or a
    /// `str` subclass): compared by text.
    fn position_by_text(&self, name: &Borrowed<'_, '_, PyAny>) -> Option<usize> {
        let name = name.cast::<PyString>().ok()?;
        let name = name.to_cow().ok()?;
        self.names.iter().position(|n| *n == name)
    }

    fn qualified(&self) -> String {
        format!("Guard.{}", self.method)
    }
}

fn repr(ob: &Bound<'_, PyAny>) -> String {
    ob.repr()
        .map(|r| r.to_string())
        .unwrap_or_else(|_| "?".into())
}

/// Turns on what 3.10 allows when the interpreter is 3.10 or later: in-place UTF-8, and
/// vectorcall `before_call` / `after_call` on `guard` (the `Guard` type). The PyO3 methods
/// are kept under `_before_call_compat` and `_after_call_compat` either way.
pub fn install(guard: &Bound<'_, PyType>) -> PyResult<()> {
    let py = guard.py();
    let methods: [(&str, FastWithKeywords); 2] = [
        ("before_call", before_call_vectorcall),
        ("after_call", after_call_vectorcall),
    ];
    for (name, _) in methods {
        guard.setattr(format!("_{name}_compat"), guard.getattr(name)?)?;
    }
    if py.version_info() < (3, 10) {
        return Ok(());
    }
    ABI_3_10.store(true, Ordering::Relaxed);
    for (name, function) in methods {
        let compat = guard.getattr(name)?;
        // The text signature and doc PyO3 made for the method, in the layout CPython reads
        // `__text_signature__` from.
        let signature = compat.getattr("__text_signature__")?.extract::<String>()?;
        let doc = compat
            .getattr("__doc__")?
            .extract::<Option<String>>()?
            .unwrap_or_default();
        let doc = CString::new(format!("{name}{signature}\n--\n\n{doc}"))
            .map_err(|e| PyValueError::new_err(e.to_string()))?;
        let name = CString::new(name).map_err(|e| PyValueError::new_err(e.to_string()))?;
        // Leaked: a method definition must outlive the type, which lives as long as the
        // process (a few bytes per interpreter that loads the module).
        let def = Box::leak(Box::new(ffi::PyMethodDef {
            ml_name: name.into_raw(),
            // SAFETY: the cast CPython's own headers make: the flags tell the interpreter
            // the function's real signature.
            ml_meth: ffi::PyMethodDefPointer {
                // SAFETY: as above.
                PyCFunction: unsafe {
                    std::mem::transmute::<FastWithKeywords, ffi::PyCFunction>(function)
                },
            },
            ml_flags: METH_FASTCALL | METH_KEYWORDS,
            ml_doc: doc.into_raw(),
        }));
        // SAFETY: `def` lives forever; the type is a live type object.
        let descriptor = unsafe {
            Bound::from_owned_ptr_or_err(py, ffi::PyDescr_NewMethod(guard.as_type_ptr(), def))?
        };
        guard.setattr(def_name(def), descriptor)?;
    }
    Ok(())
}

fn def_name(def: &ffi::PyMethodDef) -> String {
    // SAFETY: `ml_name` came from a CString above.
    unsafe { std::ffi::CStr::from_ptr(def.ml_name) }
        .to_string_lossy()
        .into_owned()
}

/// Runs `body` as the body of a method called by the interpreter: a Python exception is
/// set and null returned on error, and a panic becomes a `PanicException` instead of
/// unwinding into C.
fn method_body(
    body: impl FnOnce(Python<'_>) -> PyResult<*mut ffi::PyObject>,
) -> *mut ffi::PyObject {
    // The interpreter called us, so this thread is attached: `attach` only records that
    // for PyO3 (objects released in here are then released at once, not deferred).
    Python::attach(|py| {
        let outcome = catch_unwind(AssertUnwindSafe(|| body(py))).unwrap_or_else(|payload| {
            let message = payload
                .downcast_ref::<String>()
                .cloned()
                .or_else(|| payload.downcast_ref::<&str>().map(|s| (*s).to_owned()))
                .unwrap_or_else(|| "panic from Rust code".to_owned());
            Err(PanicException::new_err(message))
        });
        outcome.unwrap_or_else(|e| {
            e.restore(py);
            std::ptr::null_mut()
        })
    })
}

/// `Guard.before_call` as a vectorcall method.
unsafe extern "C" fn before_call_vectorcall(
    slf: *mut ffi::PyObject,
    args: *const *mut ffi::PyObject,
    nargs: ffi::Py_ssize_t,
    kwnames: *mut ffi::PyObject,
) -> *mut ffi::PyObject {
    // SAFETY: the interpreter's own arguments for a method of `Guard`.
    unsafe {
        vectorcall(
            slf,
            args,
            nargs,
            kwnames,
            &BEFORE_CALL,
            |guard, py, call, [batch]| Ok(guard.judge(py, call, batch.as_deref())?.into_ptr()),
        )
    }
}

/// `Guard.after_call` as a vectorcall method.
unsafe extern "C" fn after_call_vectorcall(
    slf: *mut ffi::PyObject,
    args: *const *mut ffi::PyObject,
    nargs: ffi::Py_ssize_t,
    kwnames: *mut ffi::PyObject,
) -> *mut ffi::PyObject {
    // SAFETY: the interpreter's own arguments for a method of `Guard`.
    unsafe {
        vectorcall(
            slf,
            args,
            nargs,
            kwnames,
            &AFTER_CALL,
            |guard, py, call, [result, error]| {
                let recorded = guard.record(py, call, result.as_deref(), error.as_deref())?;
                Ok(recorded.into_ptr())
            },
        )
    }
}

/// A vectorcall method of `Guard` whose first six parameters are those of [`CallArgs`]
/// and whose `E` others are passed to `body` as they were given.
///
/// # Safety
///
/// Called by the interpreter with the vectorcall arguments of a method of `Guard` (the
/// method descriptor has checked that `slf` is one).
unsafe fn vectorcall<const N: usize, const E: usize>(
    slf: *mut ffi::PyObject,
    args: *const *mut ffi::PyObject,
    nargs: ffi::Py_ssize_t,
    kwnames: *mut ffi::PyObject,
    signature: &Signature<N>,
    body: impl for<'a, 'py> FnOnce(
        &PyGuard,
        Python<'py>,
        &CallArgs<'a, 'py>,
        [Option<Borrowed<'a, 'py, PyAny>>; E],
    ) -> PyResult<*mut ffi::PyObject>,
) -> *mut ffi::PyObject {
    method_body(|py| {
        // SAFETY: the caller's contract.
        let guard = unsafe { Borrowed::from_ptr(py, slf) }.cast::<PyGuard>()?;
        // SAFETY: the caller's contract (the interpreter's vectorcall arguments).
        let slots = unsafe { signature.parse(py, args, nargs, kwnames)? };
        let [tool, args, session, run, agent, call_id] = first(&slots);
        let (Some(tool), Some(args), Some(session)) = (tool, args, session) else {
            unreachable!("Signature::parse checks the required arguments")
        };
        let call = CallArgs::new(
            &tool,
            &args,
            &session,
            run.as_deref(),
            agent.as_deref(),
            call_id.as_deref(),
        );
        body(guard.get(), py, &call, last(&slots))
    })
}

fn first<T: Copy, const N: usize, const K: usize>(slots: &[T; N]) -> [T; K] {
    std::array::from_fn(|i| slots[i])
}

fn last<T: Copy, const N: usize, const K: usize>(slots: &[T; N]) -> [T; K] {
    std::array::from_fn(|i| slots[N - K + i])
}
