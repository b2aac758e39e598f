//! The stored form of a run state: `[layout version][etag: 8 bytes, big-endian][state]`,
//! where the state is [`RunState::to_bytes`] (versioned by the engine itself).
//!
//! The compare-and-swap script compares the 8 bytes after the version byte
//! (`GETRANGE key 1 8`) with the tag the writer read, so it never copies the state into
//! Lua. [`tag_of`] is the same slice on the Rust side, for any bytes (a value too short or
//! unreadable still has a tag, so that it can be overwritten).

use loopguard::{RunState, SessionState};

/// Version of this layout (the header, not the engine's state format).
pub(crate) const LAYOUT_VERSION: u8 = 1;

/// Bytes before the state.
const HEADER: usize = 9;

/// The stored form of `state`, tagged `etag`.
pub(crate) fn encode(etag: u64, state: &RunState) -> Vec<u8> {
    framed(etag, &state.to_bytes())
}

/// The stored form of a session's state, tagged `etag` (the same layout).
pub(crate) fn encode_session(etag: u64, state: &SessionState) -> Vec<u8> {
    framed(etag, &state.to_bytes())
}

fn framed(etag: u64, body: &[u8]) -> Vec<u8> {
    let mut out = Vec::with_capacity(HEADER + body.len());
    out.push(LAYOUT_VERSION);
    out.extend_from_slice(&etag.to_be_bytes());
    out.extend_from_slice(body);
    out
}

/// Reads a stored session state back.
pub(crate) fn decode_session(value: &[u8]) -> Result<SessionState, String> {
    match value.first() {
        Some(&LAYOUT_VERSION) if value.len() >= HEADER => {
            SessionState::from_bytes(&value[HEADER..]).map_err(|e| e.to_string())
        }
        Some(&LAYOUT_VERSION) => Err("stored session state is truncated".into()),
        Some(&other) => Err(format!(
            "stored session state layout version {other} is not supported (this build reads version {LAYOUT_VERSION})"
        )),
        None => Err("stored session state is empty".into()),
    }
}

/// What `GETRANGE key 1 8` returns for a stored `value`: its tag (empty for a missing key).
pub(crate) fn tag_of(value: &[u8]) -> &[u8] {
    match value.get(1..) {
        Some(rest) => &rest[..rest.len().min(8)],
        None => &[],
    }
}

/// Reads a stored value back.
pub(crate) fn decode(value: &[u8]) -> Result<RunState, String> {
    match value.first() {
        Some(&LAYOUT_VERSION) if value.len() >= HEADER => {
            RunState::from_bytes(&value[HEADER..]).map_err(|e| e.to_string())
        }
        Some(&LAYOUT_VERSION) => Err("stored run state is truncated".into()),
        Some(&other) => Err(format!(
            "stored run state layout version {other} is not supported (this build reads version {LAYOUT_VERSION})"
        )),
        None => Err("stored run state is empty".into()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use loopguard::{ConfigSet, Millis};

    #[test]
    fn round_trip_and_tag() {
        let mut state = RunState::default();
        let config = ConfigSet::default();
        state.compaction(
            config.global(),
            &loopguard::Scope::new("s"),
            Millis::new(1234),
        );
        let bytes = encode(0x0102_0304_0506_0708, &state);
        assert_eq!(bytes[0], LAYOUT_VERSION);
        assert_eq!(tag_of(&bytes), &[1, 2, 3, 4, 5, 6, 7, 8]);
        assert_eq!(decode(&bytes).unwrap(), state);
        assert_eq!(decode(&bytes).unwrap().last_active(), Millis::new(1234));
    }

    #[test]
    fn odd_values_are_refused_but_keep_a_tag() {
        assert!(tag_of(b"").is_empty());
        assert!(tag_of(b"x").is_empty());
        assert_eq!(tag_of(b"\x01abc"), b"abc");
        assert!(decode(b"").unwrap_err().contains("empty"));
        assert!(decode(b"\x01abc").unwrap_err().contains("truncated"));
        assert!(decode(b"\x07123456789").unwrap_err().contains("version 7"));
        assert!(decode(b"\x0112345678\xff\xff").is_err());
    }
}
