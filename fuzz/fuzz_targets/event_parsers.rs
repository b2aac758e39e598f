//! Differential: any bytes as one event line, read by the raw event parser (what replay,
//! serve and the hooks use) and by the `Value` parser. Where the `Value` parser reads the
//! line, the raw one reads the same event (ids, kind, call id, tool, a message's fields, a
//! usage's figures) or refuses it with the same error; where it refuses it for its own
//! limits (a number beyond the double range, a lone surrogate, nesting past 128 levels) or
//! for a non-finite literal the tape reads (`NaN`, `Infinity`: what Python's `json.dumps`
//! writes for such floats) the raw one may read it, or refuse it with its own error.
#![no_main]

use libfuzzer_sys::fuzz_target;
use loopguard::json::Tape;
use loopguard_events::{parse_line, parse_raw, EventRef};

fuzz_target!(|data: &[u8]| {
    let mut tape = Tape::new();
    let raw = parse_raw(data, &mut tape);
    let by_value = parse_line(data);
    // Text the tape reads as JSON and `serde_json` does not: a non-finite literal.
    let non_finite = by_value.is_err()
        && std::str::from_utf8(data).is_ok_and(|text| Tape::new().parse(text).is_ok())
        && serde_json::from_slice::<serde_json::Value>(data).is_err();
    let value_limit = non_finite
        || by_value.as_ref().err().is_some_and(|e| {
            e.contains("nested deeper") || e.contains("surrogate") || e.contains("out of range")
        });
    match (&by_value, &raw) {
        (Ok(a), Ok(b)) => {
            let a = a.as_ref();
            assert_eq!(a.ids(), b.ids());
            assert_eq!(a.kind(), b.kind());
            assert_eq!(a.call_id_and_tool(), b.call_id_and_tool());
            if let (EventRef::Message { message: x, .. }, EventRef::Message { message: y, .. }) =
                (&a, b)
            {
                assert_eq!(x, y);
            }
            if let (EventRef::Usage { usage: x, .. }, EventRef::Usage { usage: y, .. }) = (&a, b) {
                assert_eq!(x, y);
            }
        }
        (Err(a), Err(b)) if !value_limit => assert_eq!(a, b),
        (Err(_), _) if value_limit => {}
        _ => panic!("the parsers disagree: {by_value:?} vs {raw:?}"),
    }
});
