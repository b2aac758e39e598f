//! Any bytes as a logged delta of a run state (a change-log row someone else wrote), and
//! any pair of byte strings through the delta encoder: applying fails cleanly or builds
//! at most the length it announces, and a delta the encoder makes rebuilds its input.
#![no_main]

use libfuzzer_sys::fuzz_target;
use loopguard_store::delta;

fuzz_target!(|data: &[u8]| {
    // The first byte splits the rest into a base and a second string.
    let Some((&split, rest)) = data.split_first() else {
        return;
    };
    let cut = usize::from(split).min(rest.len());
    let (base, other) = rest.split_at(cut);
    if let Ok(built) = delta::apply(base, other) {
        assert!(built.len() <= delta::MAX_LEN);
    }
    if let Some(d) = delta::diff(base, other) {
        assert!(
            d.len() <= other.len() / 2,
            "a delta is only made when it is small"
        );
        assert_eq!(
            delta::apply(base, &d).unwrap(),
            other,
            "a delta rebuilds its input"
        );
    }
});
