//! The line reader `replay` and the transcript readers share: whatever the bytes, the
//! limit and the probe, a seekable input (lines past the probe measured, then read again)
//! gives exactly the lines a pipe gives, and nothing panics.
#![no_main]

use std::io::Cursor;

use libfuzzer_sys::fuzz_target;
use loopguard_events::lines::LineReader;

fuzz_target!(|data: &[u8]| {
    let [max, probe, rest @ ..] = data else {
        return;
    };
    let (max, probe) = (usize::from(*max) + 1, usize::from(*probe) + 1);
    let mut piped = LineReader::new(rest, max);
    let mut measured = LineReader::seekable(Cursor::new(rest), max)
        .expect("a cursor can seek")
        .with_probe(probe);
    loop {
        let a = piped.next_line().unwrap().map(|l| format!("{l:?}"));
        let b = measured.next_line().unwrap().map(|l| format!("{l:?}"));
        assert_eq!(a, b);
        if a.is_none() {
            break;
        }
    }
    assert_eq!(piped.offset(), measured.offset());
    assert_eq!(piped.offset(), rest.len() as u64);
});
