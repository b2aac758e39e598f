//! How OpenClaw names the files of a sessions directory (FORMATS §1.1): the live
//! transcript, its archived copies (which overlap it), and its trajectory sidecar.

use std::collections::HashMap;
use std::io::{self, Read};
use std::path::{Path, PathBuf};
use std::sync::Arc;

use serde::{Deserialize, Serialize};

/// What kind of copy of a session's transcript a file is.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize)]
#[serde(rename_all = "snake_case")]
#[non_exhaustive]
pub enum CopyKind {
    /// `<session>.jsonl`: the live transcript.
    Live,
    /// `<session>.jsonl.reset.<ts>`: frozen by `/new`, `/reset` or a daily reset.
    Reset,
    /// `<session>.jsonl.deleted.<ts>`: a deleted session.
    Deleted,
    /// `<session>.jsonl.bak-…`, `.jsonl.bak.…`, `.jsonl.backup`: backups.
    Backup,
    /// `<session>.checkpoint.<uuid>.jsonl`: a pre-compaction checkpoint.
    Checkpoint,
}

/// A transcript file name taken apart.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct SessionFile<'a> {
    /// The session id the name starts with.
    pub session: &'a str,
    /// Which copy.
    pub kind: CopyKind,
}

/// Reads an OpenClaw transcript file name; `None` for names that are not one (sidecars,
/// pointers, the session store, other files).
pub fn classify(file_name: &str) -> Option<SessionFile<'_>> {
    if file_name.ends_with(".trajectory.jsonl") || file_name.ends_with(".trajectory-path.json") {
        return None;
    }
    if let Some((session, rest)) = file_name.split_once(".checkpoint.") {
        if rest.ends_with(".jsonl") && !session.is_empty() {
            return Some(SessionFile {
                session,
                kind: CopyKind::Checkpoint,
            });
        }
    }
    let (session, rest) = file_name.split_once(".jsonl")?;
    if session.is_empty() || session.contains('.') {
        return None;
    }
    let kind = match rest {
        "" => CopyKind::Live,
        r if r.starts_with(".reset.") => CopyKind::Reset,
        r if r.starts_with(".deleted.") => CopyKind::Deleted,
        r if r.starts_with(".bak") || r == ".backup" => CopyKind::Backup,
        _ => return None,
    };
    Some(SessionFile { session, kind })
}

/// The trajectory sidecar of a transcript, when it exists beside it.
pub fn sidecar_of(transcript: &Path) -> Option<PathBuf> {
    let name = transcript.file_name()?.to_str()?;
    let file = classify(name)?;
    let sidecar = transcript.with_file_name(format!("{}.trajectory.jsonl", file.session));
    sidecar.is_file().then_some(sidecar)
}

/// What OpenClaw's session store (`sessions.json`, beside the transcripts) says about
/// spawned sessions: for each session id, the session that spawned it (`spawnedBy`, else
/// `parentSessionKey`: a session key, given as the session id the store maps it to, else
/// as the key itself).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct SessionStore {
    /// A spawned session's id: the id of the session that spawned it, and its own key
    /// (what the parent's spawn call answered with, [`super::spawns_of`]).
    parents: HashMap<String, (String, String)>,
}

/// The largest session store read (a bigger one links nothing).
const MAX_STORE_BYTES: u64 = 64 << 20;

impl SessionStore {
    /// Reads a session store: `{sessionKey: {sessionId, spawnedBy?, parentSessionKey?,
    /// ...}}`; other members and entries of other shapes are passed over.
    pub fn read(input: impl Read) -> io::Result<Self> {
        #[derive(Deserialize)]
        struct Entry {
            #[serde(rename = "sessionId", default)]
            session_id: Option<String>,
            #[serde(rename = "spawnedBy", default)]
            spawned_by: Option<String>,
            #[serde(rename = "parentSessionKey", default)]
            parent_key: Option<String>,
        }
        let mut text = Vec::new();
        input.take(MAX_STORE_BYTES + 1).read_to_end(&mut text)?;
        if text.len() as u64 > MAX_STORE_BYTES {
            return Err(io::Error::other("session store too large"));
        }
        let entries: HashMap<String, serde_json::Value> =
            serde_json::from_slice(&text).map_err(io::Error::other)?;
        let entries: HashMap<String, Entry> = entries
            .into_iter()
            .filter_map(|(k, v)| Some((k, serde_json::from_value::<Entry>(v).ok()?)))
            .collect();
        let mut parents = HashMap::new();
        for (own_key, entry) in &entries {
            let Some(id) = entry.session_id.as_deref().filter(|s| !s.trim().is_empty()) else {
                continue;
            };
            let Some(key) = entry.spawned_by.as_deref().or(entry.parent_key.as_deref()) else {
                continue;
            };
            let parent = entries
                .get(key)
                .and_then(|p| p.session_id.clone())
                .unwrap_or_else(|| key.to_owned());
            if parent != id {
                parents.insert(id.to_owned(), (parent, own_key.clone()));
            }
        }
        Ok(Self { parents })
    }

    /// A store from its links: a spawned session's id to the id of the session that
    /// spawned it and its own key.
    pub fn from_parents(parents: HashMap<String, (String, String)>) -> Self {
        Self { parents }
    }

    /// The session that spawned `session`, if the store says.
    pub fn parent_of(&self, session: &str) -> Option<&str> {
        self.parents.get(session).map(|(parent, _)| parent.as_str())
    }

    /// The key of the spawned session `session` (`agent:main:subagent:…`), if the store
    /// says it was spawned.
    pub fn key_of(&self, session: &str) -> Option<&str> {
        self.parents.get(session).map(|(_, key)| key.as_str())
    }
}

/// The session store beside a transcript, read once while unchanged (`None`: there is
/// none, or it cannot be read).
pub fn store_of(transcript: &Path) -> Option<Arc<SessionStore>> {
    let store = transcript.with_file_name("sessions.json");
    store
        .is_file()
        .then(|| crate::readers::linked::cached(&store, SessionStore::read))
        .flatten()
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The store's shape as OpenClaw writes it: a child names its parent's key
    /// (`spawnedBy`), a grandchild in another agent's store its parent's
    /// (`parentSessionKey`, not in this store: the key stands for it).
    #[test]
    fn session_store_parents() {
        let store = r#"{
            "agent:main:main": {"sessionId": "root", "updatedAt": 1},
            "agent:main:subagent:7f3c": {"sessionId": "child", "spawnedBy": "agent:main:main", "spawnDepth": 1},
            "agent:worker:subagent:g": {"sessionId": "grandchild", "parentSessionKey": "agent:main:subagent:elsewhere"},
            "agent:main:self": {"sessionId": "loop", "spawnedBy": "agent:main:self"},
            "odd": 3
        }"#;
        let store = SessionStore::read(store.as_bytes()).unwrap();
        assert_eq!(store.parent_of("child"), Some("root"));
        assert_eq!(
            store.parent_of("grandchild"),
            Some("agent:main:subagent:elsewhere")
        );
        assert_eq!(store.parent_of("root"), None);
        assert_eq!(
            store.parent_of("loop"),
            None,
            "a session is not its own parent"
        );
        assert!(SessionStore::read(&b"[1]"[..]).is_err());
    }

    #[test]
    fn names() {
        let c = |n| classify(n).map(|f| (f.session, f.kind));
        assert_eq!(c("abc.jsonl"), Some(("abc", CopyKind::Live)));
        assert_eq!(
            c("abc-topic-7.jsonl"),
            Some(("abc-topic-7", CopyKind::Live))
        );
        assert_eq!(
            c("abc.jsonl.reset.2026-04-09T22-52-03.638Z"),
            Some(("abc", CopyKind::Reset))
        );
        assert_eq!(
            c("abc.jsonl.deleted.1712"),
            Some(("abc", CopyKind::Deleted))
        );
        assert_eq!(c("abc.jsonl.bak-12-1712"), Some(("abc", CopyKind::Backup)));
        assert_eq!(c("abc.jsonl.bak.1712"), Some(("abc", CopyKind::Backup)));
        assert_eq!(c("abc.jsonl.backup"), Some(("abc", CopyKind::Backup)));
        assert_eq!(
            c("abc.checkpoint.016e7403.jsonl"),
            Some(("abc", CopyKind::Checkpoint))
        );
        assert_eq!(c("abc.trajectory.jsonl"), None);
        assert_eq!(c("abc.trajectory-path.json"), None);
        assert_eq!(c("sessions.json"), None);
        assert_eq!(c("abc.jsonl.tmp"), None);
        assert_eq!(c(".jsonl"), None);
    }
}
