//! The names agents give the files they keep, so that a directory scan never passes over
//! an agent's transcript in silence.
//!
//! Inside directories, a scan reads files whose names say they may be transcripts
//! (`*.jsonl`, `*.json`, `*.traj`, OpenClaw archives). Agents also keep transcripts, and
//! files about them, under other names: aider writes Markdown, goose and OpenCode keep
//! their sessions in SQLite databases. [`AGENT_FILES`] lists those names, each with what
//! the file is:
//!
//! - a [`Kind::Transcript`] is read (detection still decides its format from its content);
//! - a [`Kind::Companion`] accompanies transcripts and is listed as such;
//! - a [`Kind::Unread`] holds transcripts in a form no reader takes: it is listed as
//!   unread, with the reason, so that the scan's summary and exit status say so.
//!
//! Files of other names are looked at too when they are text ([`sniff_extension`]): one
//! whose first bytes detection recognises as a transcript (an aider history saved under
//! another name, a stream of JSON Lines saved as `.log`) is read.

use std::path::Path;

use crate::detect::{Companion, Format};

/// What a file of a known name is.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Kind {
    /// A transcript of this format: read.
    Transcript(Format),
    /// A file that accompanies transcripts: listed, not read.
    Companion(Companion),
    /// Transcripts no reader takes: listed as unread, with this reason.
    Unread(&'static str),
    /// A database of transcripts of this format, read by the format's database reader.
    Database(Format),
}

/// How a name is matched.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Name {
    /// The whole file name.
    Exact(&'static str),
    /// The end of the file name (aider's files may carry a prefix).
    Suffix(&'static str),
}

/// A file an agent keeps.
#[derive(Clone, Copy, Debug)]
pub struct AgentFile {
    /// The agent.
    pub agent: &'static str,
    /// Its name.
    pub name: Name,
    /// A directory the file must be in, at any depth (for names other programs use too).
    pub within: Option<&'static str>,
    /// What it is.
    pub kind: Kind,
}

const fn file(
    agent: &'static str,
    name: Name,
    within: Option<&'static str>,
    kind: Kind,
) -> AgentFile {
    AgentFile {
        agent,
        name,
        within,
        kind,
    }
}

/// The files agents keep under names a scan would not otherwise read, or that it reads
/// but should tell apart.
pub const AGENT_FILES: &[AgentFile] = &[
    // aider/args.py: the defaults of --chat-history-file and --input-history-file.
    file(
        "aider",
        Name::Suffix(".aider.chat.history.md"),
        None,
        Kind::Transcript(Format::Aider),
    ),
    file(
        "aider",
        Name::Suffix(".aider.input.history"),
        None,
        Kind::Companion(Companion::AiderInputHistory),
    ),
    // Cline's src/core/storage/disk.ts (GlobalFileNames), Roo Code's alike.
    file(
        "Cline / Roo Code",
        Name::Exact("context_history.json"),
        Some("tasks"),
        Kind::Companion(Companion::ClineContextHistory),
    ),
    // OpenClaw 2026.9 moved an agent's transcripts from JSON Lines files into a database
    // (agents/<agent>/agent/openclaw-agent.sqlite).
    file(
        "OpenClaw",
        Name::Exact(crate::readers::openclaw::database::FILE_NAME),
        None,
        Kind::Database(Format::OpenClaw),
    ),
    // goose 1.10 moved its sessions from JSON Lines files into a database.
    file(
        "goose",
        Name::Exact("sessions.db"),
        Some("goose"),
        Kind::Unread(
            "goose's session database: goose 1.10 and later keep their sessions in this \
             SQLite file, which loopguard does not read (it reads the JSON Lines session \
             files of earlier builds, format goose)",
        ),
    ),
    // OpenCode 1.1 moved its storage/ JSON files into a database.
    file(
        "OpenCode",
        Name::Exact("opencode.db"),
        None,
        Kind::Unread(
            "OpenCode's session database (SQLite), which loopguard does not read; \
             `opencode export <session id>` writes one session as a file it reads \
             (format opencode)",
        ),
    ),
    // Cursor keeps its chats (composer and agent) in VS Code's state database.
    file(
        "Cursor",
        Name::Exact("state.vscdb"),
        Some("Cursor"),
        Kind::Unread(
            "Cursor's state database (SQLite), where Cursor keeps its chats; loopguard \
             has no reader for it",
        ),
    ),
];

/// The agent file `path` is, by its name (and the directories it is in).
pub fn agent_file(path: &Path) -> Option<&'static AgentFile> {
    let name = path.file_name()?.to_str()?;
    AGENT_FILES.iter().find(|f| {
        let named = match f.name {
            Name::Exact(n) => name == n,
            Name::Suffix(s) => name.ends_with(s),
        };
        named
            && f.within.is_none_or(|dir| {
                path.parent().is_some_and(|parent| {
                    parent
                        .components()
                        .any(|c| c.as_os_str().eq_ignore_ascii_case(dir))
                })
            })
    })
}

/// Whether a file of this name, found in a directory, is worth sniffing: text that may be
/// a transcript under a name that does not say so (Markdown, text, logs, no extension).
pub fn sniff_extension(path: &Path) -> bool {
    match path.extension().and_then(|e| e.to_str()) {
        None => true,
        Some(ext) => ["md", "markdown", "txt", "log", "out", "history"]
            .iter()
            .any(|e| ext.eq_ignore_ascii_case(e)),
    }
}

/// How many bytes a sniff reads.
pub const SNIFF_BYTES: usize = 64 << 10;

/// Whether the first bytes of a file found in a directory say it is a transcript.
pub fn sniffs_like_transcript(prefix: &[u8], file_name: Option<&str>) -> bool {
    matches!(
        crate::detect(prefix, file_name),
        crate::Detection::Transcript(_)
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names() {
        let kind = |p: &str| agent_file(Path::new(p)).map(|f| f.kind);
        assert_eq!(
            kind("/p/.aider.chat.history.md"),
            Some(Kind::Transcript(Format::Aider))
        );
        assert_eq!(
            kind("/p/2024.aider.chat.history.md"),
            Some(Kind::Transcript(Format::Aider))
        );
        assert!(matches!(
            kind("/h/.local/share/goose/sessions/sessions.db"),
            Some(Kind::Unread(_))
        ));
        assert_eq!(kind("/h/other/sessions.db"), None);
        assert!(matches!(
            kind("/h/.local/share/opencode/opencode.db"),
            Some(Kind::Unread(_))
        ));
        assert!(matches!(
            kind("/c/Cursor/User/globalStorage/state.vscdb"),
            Some(Kind::Unread(_))
        ));
        assert_eq!(kind("/c/Code/User/globalStorage/state.vscdb"), None);
        assert_eq!(
            kind("/h/.openclaw/agents/main/agent/openclaw-agent.sqlite"),
            Some(Kind::Database(Format::OpenClaw))
        );
        assert_eq!(
            kind("/h/.openclaw/agents/main/agent/openclaw-agent.sqlite-wal"),
            None
        );
        assert_eq!(
            kind("/s/tasks/17/context_history.json"),
            Some(Kind::Companion(Companion::ClineContextHistory))
        );
        assert_eq!(kind("/p/README.md"), None);
    }

    #[test]
    fn sniffing() {
        assert!(sniff_extension(Path::new("notes.md")));
        assert!(sniff_extension(Path::new("history")));
        assert!(!sniff_extension(Path::new("a.png")));
        assert!(sniffs_like_transcript(
            b"\n# aider chat started at 2024-08-07 13:24:55\n\n> Aider v0.48\n",
            Some("chat.md")
        ));
        assert!(!sniffs_like_transcript(
            b"# README\n\nHello.\n",
            Some("README.md")
        ));
    }
}
