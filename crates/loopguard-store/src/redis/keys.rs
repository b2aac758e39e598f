//! Key layout of the Redis store.
//!
//! With the prefix `P` (default `loopguard:`) and a session id `S` escaped as below:
//!
//! | key | type | holds |
//! |---|---|---|
//! | `P{S}:r:RUN` | string | the state of one run: `[layout version][etag: 8 bytes][RunState::to_bytes()]`, with a TTL of the idle TTL |
//! | `P{S}:runs` | sorted set | the session's runs: member = run id (empty for calls outside any run), score = last activity (ms); same TTL |
//! | `P{S}:s` | string | the session's own state: `[layout version][etag: 8 bytes][SessionState::to_bytes()]`, with a TTL of the idle TTL from its last change |
//! | `P{%}:sessions` | sorted set | the live sessions, for `--max-sessions`: member = escaped session id, score = last refresh (ms) |
//!
//! Every key of a session carries the hash tag `{S}`, so a session lives on one shard of a
//! Redis Cluster and the scripts that touch several of its keys run there. The session id
//! inside the tag is escaped (`%` → `%25`, `{` → `%7B`, `}` → `%7D`, the empty id →
//! `%00`) so that the tag always ends at the `}` the layout puts there and is never empty
//! (an empty tag `{}` would make Redis hash the whole key). A bare `%` is never the escape
//! of a session id, which keeps the registry's tag `{%}` apart from every session's.

/// The keys of one run, and what the scripts need to name its siblings.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct RunKeys {
    /// `P{S}:r:RUN`.
    pub run: Vec<u8>,
    /// `P{S}:runs`.
    pub index: Vec<u8>,
    /// `P{S}:r:` (the scripts append a run id to it).
    pub run_prefix: Vec<u8>,
    /// The run's member in the index: its id, or empty.
    pub member: Vec<u8>,
    /// `P{S}:s`, the session's own state.
    pub session: Vec<u8>,
}

/// The keys of one session.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct SessionKeys {
    /// `P{S}:runs`.
    pub index: Vec<u8>,
    /// `P{S}:r:`.
    pub run_prefix: Vec<u8>,
    /// The session's member in the registry (the escaped id).
    pub member: Vec<u8>,
    /// `P{S}:s`, the session's own state.
    pub state: Vec<u8>,
}

/// Builds keys under one prefix.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Layout {
    prefix: Vec<u8>,
}

impl Layout {
    /// Keys under `prefix`, which must not contain `{` or `}` (checked by the caller).
    pub(crate) fn new(prefix: &str) -> Self {
        Self {
            prefix: prefix.as_bytes().to_vec(),
        }
    }

    /// `P{S}` for `session`.
    fn tagged(&self, session: &str, extra: usize) -> Vec<u8> {
        let mut key = Vec::with_capacity(self.prefix.len() + session.len() + 2 + extra);
        key.extend_from_slice(&self.prefix);
        key.push(b'{');
        escape_into(session, &mut key);
        key.push(b'}');
        key
    }

    /// The keys of a run (`run` = `None` for calls outside any run).
    pub(crate) fn run(&self, session: &str, run: Option<&str>) -> RunKeys {
        let member = run.unwrap_or("").as_bytes().to_vec();
        let mut run_prefix = self.tagged(session, 3 + member.len());
        run_prefix.extend_from_slice(b":r:");
        let mut run_key = run_prefix.clone();
        run_key.extend_from_slice(&member);
        let mut index = self.tagged(session, 5);
        index.extend_from_slice(b":runs");
        RunKeys {
            run: run_key,
            index,
            run_prefix,
            member,
            session: self.state(session),
        }
    }

    /// The keys of a session.
    pub(crate) fn session(&self, session: &str) -> SessionKeys {
        let mut index = self.tagged(session, 5);
        index.extend_from_slice(b":runs");
        let mut run_prefix = self.tagged(session, 3);
        run_prefix.extend_from_slice(b":r:");
        SessionKeys {
            index,
            run_prefix,
            member: escape(session),
            state: self.state(session),
        }
    }

    /// `P{S}:s` for `session`.
    fn state(&self, session: &str) -> Vec<u8> {
        let mut key = self.tagged(session, 2);
        key.extend_from_slice(b":s");
        key
    }

    /// `P{%}:sessions`, the registry of live sessions.
    pub(crate) fn registry(&self) -> Vec<u8> {
        let mut key = self.prefix.clone();
        key.extend_from_slice(b"{%}:sessions");
        key
    }
}

/// The escaped form of a session id (see the module docs).
pub(crate) fn escape(session: &str) -> Vec<u8> {
    let mut out = Vec::with_capacity(session.len());
    escape_into(session, &mut out);
    out
}

fn escape_into(session: &str, out: &mut Vec<u8>) {
    if session.is_empty() {
        out.extend_from_slice(b"%00");
        return;
    }
    for &b in session.as_bytes() {
        match b {
            b'%' => out.extend_from_slice(b"%25"),
            b'{' => out.extend_from_slice(b"%7B"),
            b'}' => out.extend_from_slice(b"%7D"),
            _ => out.push(b),
        }
    }
}

/// The hash slot of a key in a Redis Cluster (CRC16/XMODEM of the hash tag, mod 16384),
/// as the cluster computes it: for tests and for docs.
#[cfg(test)]
pub(crate) fn slot(key: &[u8]) -> u16 {
    let hashed = key
        .iter()
        .position(|&b| b == b'{')
        .and_then(|open| {
            let rest = &key[open + 1..];
            rest.iter()
                .position(|&b| b == b'}')
                .filter(|&close| close > 0)
                .map(|close| &rest[..close])
        })
        .unwrap_or(key);
    let mut crc: u16 = 0;
    for &b in hashed {
        crc ^= u16::from(b) << 8;
        for _ in 0..8 {
            crc = if crc & 0x8000 != 0 {
                (crc << 1) ^ 0x1021
            } else {
                crc << 1
            };
        }
    }
    crc % 16384
}

#[cfg(test)]
mod tests {
    use super::*;

    fn text(bytes: &[u8]) -> &str {
        std::str::from_utf8(bytes).unwrap()
    }

    #[test]
    fn layout_of_a_run() {
        let keys = Layout::new("lg:").run("s1", Some("r1"));
        assert_eq!(text(&keys.run), "lg:{s1}:r:r1");
        assert_eq!(text(&keys.index), "lg:{s1}:runs");
        assert_eq!(text(&keys.run_prefix), "lg:{s1}:r:");
        assert_eq!(text(&keys.member), "r1");
        assert_eq!(text(&keys.session), "lg:{s1}:s");
        let none = Layout::new("lg:").run("s1", None);
        assert_eq!(text(&none.run), "lg:{s1}:r:");
        assert!(none.member.is_empty());
        assert_eq!(text(&Layout::new("lg:").registry()), "lg:{%}:sessions");
        let session = Layout::new("lg:").session("a{b}");
        assert_eq!(text(&session.index), "lg:{a%7Bb%7D}:runs");
        assert_eq!(text(&session.member), "a%7Bb%7D");
    }

    #[test]
    fn escaping_is_injective_and_never_yields_the_registry_tag() {
        let ids = ["", "%", "%25", "%00", "{", "}", "%7B", "a}b", "{}", "x"];
        let escaped: std::collections::HashSet<Vec<u8>> = ids.iter().map(|s| escape(s)).collect();
        assert_eq!(escaped.len(), ids.len());
        assert!(!escaped.contains(b"%".as_slice()));
        for id in ids {
            let e = escape(id);
            assert!(!e.is_empty());
            assert!(!e.contains(&b'}') && !e.contains(&b'{'));
        }
    }

    /// Every key of a session hashes to one slot, whatever the ids hold.
    #[test]
    fn keys_of_a_session_share_a_slot() {
        let layout = Layout::new("loopguard:");
        for session in ["s", "", "}", "{", "a}{b", "%", "ünïcode", "with:colons"] {
            let index = layout.session(session).index;
            for run in [None, Some("r"), Some("}{"), Some("{x}")] {
                let keys = layout.run(session, run);
                assert_eq!(slot(&keys.run), slot(&index), "{session:?} {run:?}");
                assert_eq!(slot(&keys.index), slot(&index));
                assert_eq!(slot(&keys.session), slot(&index));
            }
        }
        // The slot function agrees with Redis' documented examples.
        assert_eq!(slot(b"{user1000}.following"), slot(b"{user1000}.followers"));
        assert_eq!(slot(b"foo{}{bar}"), slot(b"foo{}{bar}"));
        assert_eq!(slot(b"123456789"), 12739);
    }
}
