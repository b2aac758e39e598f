//! Any bytes as a stored run state (a database row or a Redis value someone else wrote):
//! decoding fails cleanly or gives a state that encodes back to bytes which decode to the
//! same state.
#![no_main]

use libfuzzer_sys::fuzz_target;
use loopguard::RunState;

fuzz_target!(|data: &[u8]| {
    if let Ok(state) = RunState::from_bytes(data) {
        let bytes = state.to_bytes();
        let again = RunState::from_bytes(&bytes).expect("its own encoding decodes");
        assert_eq!(again.to_bytes(), bytes, "encoding is stable");
    }
});
