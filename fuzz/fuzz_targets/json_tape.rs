//! Any bytes as JSON text for the tape: it accepts what `serde_json` accepts (as syntax,
//! without a depth limit), and beyond it only texts with a non-finite literal (`NaN`,
//! `Infinity`, signed or not), never panics, and what it reads survives being written
//! out: its text (`to_json_text`) and its canonical text (`json_text`) read back to the same
//! fingerprint. Tokenized with only some members kept (`parse_read`), it refuses exactly
//! what it refuses in full, with the same error.
#![no_main]

use libfuzzer_sys::fuzz_target;
use loopguard::canonical::json_text;
use loopguard::fingerprint::Fingerprint;
use loopguard::json::{Member, Read, Tape};

/// Some members kept, at the root, in an array and in the objects of an array.
static READ: Read = Read::Members(&[
    Member::new("a", Read::All),
    Member::new(
        "b",
        Read::Items(&Read::Members(&[Member::new("c", Read::All)])),
    ),
    Member::new("d", Read::Members(&[Member::new("e", Read::All)])),
]);

fuzz_target!(|data: &[u8]| {
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    let full = Tape::new().parse(text).err();
    assert_eq!(Tape::new().parse_read(text, &READ).err(), full, "{text:?}");
    let mut tape = Tape::new();
    let parsed = tape.parse(text).map(|root| {
        let fingerprint = Fingerprint::of(root);
        (fingerprint, root.to_json_text(), json_text(root))
    });
    let syntax = serde_json::from_str::<serde::de::IgnoredAny>(text);
    match (parsed.is_ok(), syntax.is_ok()) {
        (tape, serde) if tape == serde => {}
        // The tape also reads non-finite literals, which serde_json refuses.
        (true, false) => assert!(
            text.contains("NaN") || text.contains("Infinity"),
            "the tape accepts {text:?}, which serde_json refuses"
        ),
        _ => panic!("the tape refuses {text:?}, which serde_json accepts"),
    }
    let Ok((fingerprint, written, canonical)) = parsed else {
        return;
    };
    for again in [written, canonical] {
        let mut tape = Tape::new();
        let root = tape.parse(&again).expect("written JSON reads back");
        assert_eq!(Fingerprint::of(root), fingerprint, "{text:?} -> {again:?}");
    }
});
