//! Differential: any bytes as a model's answer (invalid UTF-8 replaced), read whole and in
//! pieces of sizes taken from the input, masked or not. Both readings must agree (the same
//! print, the same chant), and reading must end: masking once went round a `/` after a
//! non-ASCII byte forever, which no parser target reached.
#![no_main]

use libfuzzer_sys::fuzz_target;
use loopguard::masking::{mask, MaskSet};
use loopguard::read_answer;

fuzz_target!(|data: &[u8]| {
    let Some((&[options, size], rest)) = data.split_first_chunk::<2>() else {
        return;
    };
    let text = String::from_utf8_lossy(rest);
    let set = if options & 1 == 1 {
        MaskSet::ALL
    } else {
        MaskSet::NONE
    };
    let whole = read_answer([text.as_ref()], set);
    // Pieces of 1 to 256 bytes, growing by `options` each time, cut at characters.
    let mut pieces = Vec::new();
    let mut rest = text.as_ref();
    let mut size = usize::from(size) + 1;
    while !rest.is_empty() {
        let mut cut = size.min(rest.len());
        while !rest.is_char_boundary(cut) {
            cut += 1;
        }
        let (piece, tail) = rest.split_at(cut);
        pieces.push(piece);
        rest = tail;
        size = (size + usize::from(options >> 1)) % 256 + 1;
    }
    assert_eq!(read_answer(pieces, set), whole);
    let _ = mask(&text, set);
});
