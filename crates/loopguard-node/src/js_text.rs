//! JavaScript strings read as UTF-8 into buffers the guard reuses.
//!
//! napi-rs's `String` argument asks N-API for the UTF-8 length (one pass over the string),
//! allocates and zeroes a buffer and copies into it (a second pass), for every string of
//! every call. Here the room comes from the UTF-16 length, which N-API gives in constant
//! time (a UTF-16 unit never takes more than 3 bytes of UTF-8), and the one copy goes into
//! a buffer kept from call to call. N-API writes lone surrogates as U+FFFD, so the bytes
//! are always UTF-8; they are checked anyway, once, before they are read as text.

#![allow(unsafe_code)]

use std::ops::Range;
use std::ptr;

use napi::{sys, Error, JsString, JsValue, Result, Status};

/// Strings longer than this many UTF-16 units are measured first rather than given room
/// for 3 bytes a unit (a 50 MB result would otherwise reserve 150 MB).
const MEASURE_ABOVE: usize = 1 << 20;

/// Appends the UTF-8 of `value` to `out`; returns where it is. The bytes are N-API's and
/// not checked here: event text is checked by the reader that tokenizes it.
pub fn push_bytes(value: &JsString<'_>, out: &mut Vec<u8>) -> Result<Range<usize>> {
    let handle = value.value();
    let (env, value) = (handle.env, handle.value);
    let mut units = 0;
    // SAFETY: `env` and `value` are the handles of the current call, valid while it runs; a
    // null buffer asks only for the length, written to `units`.
    check(unsafe { sys::napi_get_value_string_utf16(env, value, ptr::null_mut(), 0, &mut units) })?;
    let room = if units > MEASURE_ABOVE {
        let mut bytes = 0;
        // SAFETY: as above (the length in UTF-8 bytes).
        check(unsafe {
            sys::napi_get_value_string_utf8(env, value, ptr::null_mut(), 0, &mut bytes)
        })?;
        bytes + 1
    } else {
        units * 3 + 1
    };
    let start = out.len();
    out.reserve(room);
    let mut written = 0;
    // SAFETY: `out` has at least `room` bytes of spare capacity from `start`. N-API writes at
    // most `room - 1` bytes and a NUL there, and reports the bytes (without the NUL) in
    // `written`: those are initialized, and only they become part of `out`.
    unsafe {
        check(sys::napi_get_value_string_utf8(
            env,
            value,
            out.as_mut_ptr().add(start).cast(),
            room,
            &mut written,
        ))?;
        out.set_len(start + written);
    }
    Ok(start..start + written)
}

/// Appends the text of `value` to `out`, checked as UTF-8; returns where it is.
pub fn push_str(value: &JsString<'_>, out: &mut String) -> Result<Range<usize>> {
    // SAFETY: `push_bytes` only appends; the appended bytes are removed again unless they
    // are UTF-8, so `out` is valid UTF-8 whenever this returns.
    let bytes = unsafe { out.as_mut_vec() };
    let range = push_bytes(value, bytes)?;
    if std::str::from_utf8(&bytes[range.clone()]).is_err() {
        bytes.truncate(range.start);
        return Err(Error::from_reason("N-API gave a string that is not UTF-8"));
    }
    Ok(range)
}

/// Appends the Latin-1 of `value` to `out` (one byte a character: the bytes a string made
/// by `napi_create_string_latin1` holds, such as a ticket's); returns where they are.
pub fn push_latin1(value: &JsString<'_>, out: &mut Vec<u8>) -> Result<Range<usize>> {
    let handle = value.value();
    let (env, value) = (handle.env, handle.value);
    let mut units = 0;
    // SAFETY: as in `push_bytes` (a null buffer asks only for the length).
    check(unsafe { sys::napi_get_value_string_utf16(env, value, ptr::null_mut(), 0, &mut units) })?;
    let start = out.len();
    out.reserve(units + 1);
    let mut written = 0;
    // SAFETY: `out` has `units + 1` bytes of spare capacity from `start`; N-API writes at
    // most `units` bytes (one a character) and a NUL, and reports the bytes in `written`.
    unsafe {
        check(sys::napi_get_value_string_latin1(
            env,
            value,
            out.as_mut_ptr().add(start).cast(),
            units + 1,
            &mut written,
        ))?;
        out.set_len(start + written);
    }
    Ok(start..start + written)
}

fn check(status: sys::napi_status) -> Result<()> {
    match status {
        sys::Status::napi_ok => Ok(()),
        status => Err(Error::new(
            Status::from(status),
            "expected a string".to_owned(),
        )),
    }
}
