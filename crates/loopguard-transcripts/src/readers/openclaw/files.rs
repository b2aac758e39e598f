//! How OpenClaw names the files of a sessions directory (FORMATS §1.1): the live
//! transcript, its archived copies (which overlap it), and its trajectory sidecar.

use std::path::{Path, PathBuf};

use serde::Serialize;

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

#[cfg(test)]
mod tests {
    use super::*;

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
