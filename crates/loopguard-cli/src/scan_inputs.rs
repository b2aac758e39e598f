//! What `loopguard scan` reads: the files and directories given (or, with none, the usual
//! transcript folders of the agents on this machine), walked for transcripts.
//!
//! - **Names.** Inside directories, `*.jsonl`, `*.json`, `*.traj` and OpenClaw archive
//!   names are transcripts, and so are the files agents keep under other names
//!   ([`agent_files`]: aider's `.aider.chat.history.md`, goose's and OpenCode's session
//!   databases, listed as unread with the reason) and text files (`.md`, `.txt`, `.log`,
//!   no extension) whose first bytes are a transcript's; other files are counted, not
//!   read. A file named on the command line is always read.
//! - **OpenHands conversation directories** are one transcript each.
//! - **Symbolic links** are followed, files and directories alike, with loop protection:
//!   a link back to a directory above it is listed as skipped, not followed, and a file or
//!   directory reached a second time (through a link, or named twice) is scanned once and
//!   listed as skipped the other times. A link that leads nowhere is listed as unreadable.
//! - **`--since`** leaves out files found in directories that were last modified before
//!   it (they are counted); files named on the command line are always read.
//! - **Archived OpenClaw copies** of one session are scanned once (see
//!   [`skip_overlapping_copies`]).

use std::collections::{BTreeMap, HashMap};
use std::io::Read;
use std::path::{Path, PathBuf};
use std::time::{Duration, SystemTime};

use loopguard_transcripts::agent_files;
use loopguard_transcripts::readers::openclaw::{self, CopyKind};
use loopguard_transcripts::readers::openhands;
use loopguard_transcripts::FileStatus;

/// A file to scan, or one that will only be listed.
pub struct Input {
    pub path: PathBuf,
    pub shown: String,
    /// Set for files that are listed but not scanned.
    pub status: Option<FileStatus>,
    pub size: u64,
}

impl Input {
    fn listed(path: &Path, shown: String, status: FileStatus) -> Self {
        Self {
            path: path.to_owned(),
            shown,
            status: Some(status),
            size: 0,
        }
    }
}

/// The folders agents keep their transcripts in, relative to the home directory; `*`
/// stands for every folder at that place (OpenClaw keeps one per agent). A database that
/// holds them (OpenClaw 2026.9 and later) is named as a file.
pub const DEFAULT_FOLDERS: &[(&str, &str)] = &[
    ("OpenClaw", ".openclaw/agents/*/sessions"),
    ("OpenClaw", ".openclaw/agents/*/agent/openclaw-agent.sqlite"),
    ("Claude Code", ".claude/projects"),
    ("Codex", ".codex/sessions"),
    ("Gemini CLI", ".gemini/tmp"),
];

/// One of the usual folders: the agent, where it was looked for, and whether it is there.
#[derive(Clone, Debug, serde::Serialize)]
pub struct Searched {
    pub agent: &'static str,
    pub path: String,
    pub found: bool,
}

/// The usual transcript folders under `home`, expanded; those that do not exist are
/// returned too (with `found: false`), so that the scan can say where it looked.
pub fn default_folders(home: &Path) -> Vec<Searched> {
    let mut out = Vec::new();
    for (agent, relative) in DEFAULT_FOLDERS {
        let mut paths = vec![home.to_owned()];
        for part in relative.split('/') {
            paths = paths
                .into_iter()
                .flat_map(|p| -> Vec<PathBuf> {
                    if part != "*" {
                        return vec![p.join(part)];
                    }
                    let mut dirs: Vec<PathBuf> = std::fs::read_dir(&p)
                        .into_iter()
                        .flatten()
                        .flatten()
                        .map(|e| e.path())
                        .filter(|d| d.is_dir())
                        .collect();
                    dirs.sort();
                    dirs
                })
                .collect();
        }
        let found: Vec<PathBuf> = paths.into_iter().filter(|p| p.exists()).collect();
        if found.is_empty() {
            out.push(Searched {
                agent,
                path: home.join(relative).display().to_string(),
                found: false,
            });
        }
        for path in found {
            out.push(Searched {
                agent,
                path: path.display().to_string(),
                found: true,
            });
        }
    }
    out
}

/// Parses `--since`: a duration back from now (`30m`, `12h`, `7d`, `2w`), a date
/// (`2026-01-15`, midnight UTC) or a date and time (`2026-01-15T08:00:00Z`).
pub fn parse_since(text: &str, now: SystemTime) -> Result<SystemTime, String> {
    let text = text.trim();
    let bad = || {
        format!(
            "--since {text:?}: expected a duration (30m, 12h, 7d, 2w), a date (2026-01-15) or a date and time (2026-01-15T08:00:00Z)"
        )
    };
    let duration = text.char_indices().last().filter(|(i, unit)| {
        unit.is_ascii_alphabetic() && text[..*i].bytes().all(|b| b.is_ascii_digit())
    });
    if let Some((i, unit)) = duration {
        let number: u64 = text[..i].parse().map_err(|_| bad())?;
        let seconds = match unit {
            's' => 1,
            'm' => 60,
            'h' => 3600,
            'd' => 86_400,
            'w' => 7 * 86_400,
            _ => return Err(bad()),
        };
        let back = Duration::from_secs(number.checked_mul(seconds).ok_or_else(bad)?);
        return Ok(now.checked_sub(back).unwrap_or(SystemTime::UNIX_EPOCH));
    }
    let iso = if text.len() == 10 {
        format!("{text}T00:00:00Z")
    } else {
        text.to_owned()
    };
    let ms = openclaw::parse_iso_ms(&iso).ok_or_else(bad)?;
    let ms = u64::try_from(ms).map_err(|_| bad())?;
    Ok(SystemTime::UNIX_EPOCH + Duration::from_millis(ms))
}

/// Collects the inputs of a scan.
#[derive(Default)]
pub struct Collector {
    pub inputs: Vec<Input>,
    /// Files in the directories that are not transcripts by their name.
    pub ignored: u64,
    /// Transcripts in the directories left out by `--since`.
    pub older: u64,
    since: Option<SystemTime>,
    /// Canonical paths already collected, with how they were shown.
    seen: HashMap<PathBuf, String>,
}

impl Collector {
    pub fn new(since: Option<SystemTime>) -> Self {
        Self {
            since,
            ..Self::default()
        }
    }

    /// Whether `path` (by its canonical path) was collected already; records it if not.
    /// Returns how it was shown the first time.
    fn again(&mut self, path: &Path, shown: &str) -> Option<String> {
        let canonical = std::fs::canonicalize(path).ok()?;
        match self.seen.get(&canonical) {
            Some(first) => Some(first.clone()),
            None => {
                self.seen.insert(canonical, shown.to_owned());
                None
            }
        }
    }

    /// Adds a file or directory named on the command line.
    pub fn add(&mut self, path: &Path) {
        let shown = path.display().to_string();
        let metadata = match std::fs::metadata(path) {
            Ok(m) => m,
            Err(e) => {
                let error = e.to_string();
                self.inputs
                    .push(Input::listed(path, shown, FileStatus::Unreadable { error }));
                return;
            }
        };
        if !metadata.is_dir() {
            if let Some(first) = self.again(path, &shown) {
                let reason = format!("the same file as {first}, which is scanned");
                self.inputs
                    .push(Input::listed(path, shown, FileStatus::Skipped { reason }));
                return;
            }
            self.inputs.push(Input {
                path: path.to_owned(),
                shown,
                status: None,
                size: metadata.len(),
            });
            return;
        }
        self.walk(path);
    }

    fn walk(&mut self, root: &Path) {
        let mut walk = walkdir::WalkDir::new(root)
            .follow_links(true)
            .sort_by_file_name()
            .into_iter();
        while let Some(entry) = walk.next() {
            let entry = match entry {
                Ok(entry) => entry,
                Err(e) => {
                    let path = e.path().unwrap_or(root).to_owned();
                    let shown = path.display().to_string();
                    let status = match e.loop_ancestor() {
                        Some(ancestor) => FileStatus::Skipped {
                            reason: format!(
                                "a symbolic link back to {}, which is scanned (not followed again)",
                                ancestor.display()
                            ),
                        },
                        None => FileStatus::Unreadable {
                            error: e.to_string(),
                        },
                    };
                    self.inputs.push(Input::listed(&path, shown, status));
                    continue;
                }
            };
            let path = entry.path();
            let shown = path.display().to_string();
            if entry.file_type().is_dir() {
                if let Some(first) = self.again(path, &shown) {
                    let reason = format!(
                        "the same directory as {first}, which is scanned (reached again through a symbolic link)"
                    );
                    self.inputs
                        .push(Input::listed(path, shown, FileStatus::Skipped { reason }));
                    walk.skip_current_dir();
                    continue;
                }
                // An OpenHands conversation directory is one transcript of many files.
                if let Some(conversation) = openhands::conversation_root(path) {
                    let size = openhands::conversation_events(&conversation)
                        .map(|files| files.iter().map(|(_, n)| n).sum())
                        .unwrap_or(0);
                    self.inputs.push(Input {
                        shown: format!("{}/", conversation.display()),
                        path: conversation,
                        status: None,
                        size,
                    });
                    walk.skip_current_dir();
                }
                continue;
            }
            if !entry.file_type().is_file() {
                continue;
            }
            if !looks_like_transcript(path) && !agent_transcript(path) {
                self.ignored += 1;
                continue;
            }
            let metadata = entry.metadata().ok();
            let modified = metadata.as_ref().and_then(|m| m.modified().ok());
            if let (Some(since), Some(modified)) = (self.since, modified) {
                if modified < since {
                    self.older += 1;
                    continue;
                }
            }
            if let Some(first) = self.again(path, &shown) {
                let reason = format!(
                    "the same file as {first}, which is scanned (reached again through a symbolic link)"
                );
                self.inputs
                    .push(Input::listed(path, shown, FileStatus::Skipped { reason }));
                continue;
            }
            self.inputs.push(Input {
                path: path.to_owned(),
                shown,
                status: None,
                size: metadata.map_or(0, |m| m.len()),
            });
        }
    }

    /// Inputs that will be scanned.
    pub fn to_scan(&self) -> usize {
        self.inputs.iter().filter(|i| i.status.is_none()).count()
    }
}

/// Whether a file found in a directory is worth reading: transcripts end in .jsonl,
/// .json or .traj, or carry an OpenClaw archive suffix.
pub fn looks_like_transcript(path: &Path) -> bool {
    let Some(name) = path.file_name().and_then(|n| n.to_str()) else {
        return false;
    };
    name.ends_with(".jsonl")
        || name.ends_with(".json")
        || name.ends_with(".traj")
        || openclaw::classify(name).is_some()
}

/// Whether a file whose name is not a transcript's is an agent's file all the same: a
/// name agents use (`.aider.chat.history.md`, goose's `sessions.db`, …; listed as read,
/// companion or unread, never passed over), or text whose first bytes detection
/// recognises as a transcript.
pub fn agent_transcript(path: &Path) -> bool {
    if agent_files::agent_file(path).is_some() {
        return true;
    }
    if !agent_files::sniff_extension(path) {
        return false;
    }
    let Ok(file) = std::fs::File::open(path) else {
        return false;
    };
    let mut prefix = Vec::new();
    if file
        .take(agent_files::SNIFF_BYTES as u64)
        .read_to_end(&mut prefix)
        .is_err()
    {
        return false;
    }
    let name = path.file_name().and_then(|n| n.to_str());
    agent_files::sniffs_like_transcript(&prefix, name)
}

/// Among OpenClaw copies of one session in one directory, keeps the live transcript, or
/// else the largest copy (the file only grows), and marks the others as skipped.
pub fn skip_overlapping_copies(inputs: &mut [Input]) {
    let mut groups: BTreeMap<(PathBuf, String), Vec<usize>> = BTreeMap::new();
    for (i, input) in inputs.iter().enumerate() {
        if input.status.is_some() || input.shown == "-" {
            continue;
        }
        let Some(name) = input.path.file_name().and_then(|n| n.to_str()) else {
            continue;
        };
        if let Some(file) = openclaw::classify(name) {
            let dir = input.path.parent().unwrap_or(Path::new("")).to_owned();
            groups
                .entry((dir, file.session.to_owned()))
                .or_default()
                .push(i);
        }
    }
    for members in groups.values().filter(|m| m.len() > 1) {
        let kind = |i: usize| {
            let name = inputs[i]
                .path
                .file_name()
                .and_then(|n| n.to_str())
                .unwrap_or("");
            openclaw::classify(name).map(|f| f.kind)
        };
        let keep = members
            .iter()
            .copied()
            .max_by_key(|&i| {
                (
                    kind(i) == Some(CopyKind::Live),
                    inputs[i].size,
                    inputs[i].shown.clone(),
                )
            })
            .unwrap_or(members[0]);
        let kept = inputs[keep].shown.clone();
        for &i in members.iter().filter(|&&i| i != keep) {
            inputs[i].status = Some(FileStatus::Skipped {
                reason: format!("archived copy of the same session as {kept}, which is scanned instead (use --all-copies to scan both)"),
            });
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn input(name: &str, size: u64) -> Input {
        Input {
            path: PathBuf::from("dir").join(name),
            shown: format!("dir/{name}"),
            status: None,
            size,
        }
    }

    #[test]
    fn overlapping_copies_keep_the_live_file_or_the_largest() {
        let mut inputs = vec![
            input("a.jsonl", 10),
            input("a.jsonl.reset.2026-01-01T00-00-00.000Z", 99),
            input("a.checkpoint.123.jsonl", 50),
            input("b.jsonl.bak-1-2", 5),
            input("b.jsonl.reset.x", 7),
            input("c.jsonl.deleted.1", 1),
            input("notes.json", 1),
        ];
        skip_overlapping_copies(&mut inputs);
        let scanned: Vec<&str> = inputs
            .iter()
            .filter(|i| i.status.is_none())
            .map(|i| i.shown.as_str())
            .collect();
        assert_eq!(
            scanned,
            [
                "dir/a.jsonl",
                "dir/b.jsonl.reset.x",
                "dir/c.jsonl.deleted.1",
                "dir/notes.json"
            ]
        );
        match &inputs[1].status {
            Some(FileStatus::Skipped { reason }) => assert!(reason.contains("dir/a.jsonl")),
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn transcript_names() {
        for yes in [
            "a.jsonl",
            "x.json",
            "run.traj",
            "a.jsonl.reset.2026",
            "a.jsonl.bak-1-2",
        ] {
            assert!(looks_like_transcript(Path::new(yes)), "{yes}");
        }
        for no in ["README.md", "a.png", "jsonl"] {
            assert!(!looks_like_transcript(Path::new(no)), "{no}");
        }
    }

    #[test]
    fn since_takes_durations_dates_and_times() {
        let now = SystemTime::UNIX_EPOCH + Duration::from_secs(1_800_000_000);
        let ago = |s: u64| now - Duration::from_secs(s);
        assert_eq!(parse_since("30m", now), Ok(ago(1800)));
        assert_eq!(parse_since("12h", now), Ok(ago(12 * 3600)));
        assert_eq!(parse_since(" 7d ", now), Ok(ago(7 * 86_400)));
        assert_eq!(parse_since("2w", now), Ok(ago(14 * 86_400)));
        let day = SystemTime::UNIX_EPOCH + Duration::from_secs(1_768_435_200);
        assert_eq!(parse_since("2026-01-15", now), Ok(day));
        assert_eq!(
            parse_since("2026-01-15T01:00:00Z", now),
            Ok(day + Duration::from_secs(3600))
        );
        for bad in [
            "",
            "7",
            "7x",
            "d",
            "yesterday",
            "2026-13-01",
            "99999999999999999999d",
        ] {
            assert!(parse_since(bad, now).is_err(), "{bad}");
        }
    }
}
