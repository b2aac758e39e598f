//! Differential: any bytes as one event line, read by the raw event parser (what replay,
//! serve and the hooks use) and by the `Value` parser. Where the `Value` parser reads the
//! line, the raw one reads the same event (ids, kind, call id, tool, a message's fields, a
//! usage's figures) or refuses it with the same error; where it refuses it for its own
//! limits (a number beyond the double range, a lone surrogate, nesting past 128 levels) the
//! raw one may read it.
#![no_main]

use libfuzzer_sys::fuzz_target;
use loopguard::json::Tape;
use loopguard_events::{parse_line, parse_raw, EventRef};

fuzz_target!(|data: &[u8]| {
    let mut tape = Tape::new();
    let raw = parse_raw(data, &mut tape);
    let by_value = parse_line(data);
    let value_limit = by_value.as_ref().err().is_some_and(|e| {
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
