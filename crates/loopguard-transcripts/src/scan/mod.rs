//! Shadow-mode scans: a transcript's items applied to a guard, as if it had been watching
//! the agent, and a report per session of what it would have done.
//!
//! The guard sees the transcript as the agent lived it: every call, including the ones it
//! would have blocked (a blocked call's result is then ignored, as SPEC §7 says). For each
//! session the report gives the calls, the loops found (each a pattern in one run: its
//! detector, tool, first warning, first block, how often the agent repeated the blocked
//! call afterwards, whether the run would have been stopped), the compaction aborts, and
//! what blocking would have saved:
//!
//! - **calls**: the calls the guard would have blocked;
//! - **tokens** and **cost**, where the transcript records usage: the model responses
//!   that only reacted to blocked calls, i.e. every response whose previous batch of calls
//!   (in the same run) was blocked entirely. A response's tokens include its whole input
//!   (the context it re-read), which is what a loop burns.

use std::collections::HashMap;
use std::fs::File;
use std::io::{self, BufRead, BufReader, Cursor, Read, Seek, SeekFrom};
use std::path::Path;
use std::sync::Arc;

use loopguard::ConfigSet;
use serde::Serialize;

use crate::agent_files;
use crate::detect::{detect, Companion, Detection as Detected, Format, PREFIX_BYTES};
use crate::failures::FailureRules;
use crate::readers::claude_code;
use crate::readers::openclaw::{self, RunWindows};
use crate::readers::{cline, cline_ui, gemini_cli, openhands};
use crate::stats::{ReadStats, SkipReason};
use crate::{read, ReadOptions, DEFAULT_MAX_LINE};

mod report;
mod scanner;

pub use report::{
    is_spend_budget, BudgetStop, Finding, LoopReport, Mark, Savings, SessionReport, Timeline,
};
pub use scanner::{Scanner, DEFAULT_LIVE_MEMORY};

/// How to scan.
#[derive(Clone)]
pub struct ScanOptions {
    /// The guard's config (default: detection on with default thresholds,
    /// [`ConfigSet::enabled_defaults`]).
    pub config: ConfigSet,
    /// The agent whose config applies (events that name an agent use theirs).
    pub agent: Option<String>,
    /// Read every file as this format instead of detecting it.
    pub format: Option<Format>,
    /// Longest line read.
    pub max_line: usize,
    /// How results are judged failed (default: the built-in rules).
    pub failures: Arc<FailureRules>,
    /// Bytes the open runs of one file's scan may hold (an estimate: see
    /// [`Scanner`]); beyond it the least recently active session is closed and reported
    /// `closed_early`. Default [`DEFAULT_LIVE_MEMORY`] (1 GiB).
    pub live_memory: usize,
    /// Called with the number of bytes of the file scanned so far, every megabyte or so
    /// (progress bars): each file adds up to its size exactly once, however often its
    /// reader goes over it.
    pub progress: Option<Arc<dyn Fn(u64) + Send + Sync>>,
    /// Transcripts of a database (OpenClaw's) that last changed before this time are left
    /// out and counted ([`FileScan::older_sessions`]); files are filtered by their caller.
    pub since: Option<std::time::SystemTime>,
}

impl Default for ScanOptions {
    fn default() -> Self {
        Self {
            config: ConfigSet::enabled_defaults(),
            agent: None,
            format: None,
            max_line: DEFAULT_MAX_LINE,
            failures: Arc::new(FailureRules::builtin().clone()),
            live_memory: DEFAULT_LIVE_MEMORY,
            progress: None,
            since: None,
        }
    }
}

impl ScanOptions {
    /// What the readers of a scan are given: the line limits (no line longer than the live
    /// budget is held, none whose parsing could pass it is parsed) and the failure rules.
    fn read_options<'a>(&'a self, session_hint: &'a str) -> ReadOptions<'a> {
        let mut read = ReadOptions::new(session_hint);
        read.max_line = self.max_line.min(self.live_memory);
        read.max_line_cost = self.live_memory;
        read.failures = &self.failures;
        read
    }
}

impl std::fmt::Debug for ScanOptions {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ScanOptions")
            .field("agent", &self.agent)
            .field("format", &self.format)
            .field("max_line", &self.max_line)
            .finish_non_exhaustive()
    }
}

/// What became of one file.
#[derive(Clone, Debug, PartialEq, Serialize)]
#[serde(tag = "status", rename_all = "snake_case")]
#[non_exhaustive]
pub enum FileStatus {
    /// Read as a transcript (which may hold no tool call: a chat without tools).
    Scanned,
    /// Read as a transcript of its format, but no call came out although the file has
    /// entries: every record was skipped, or none of the format's records was found. The
    /// scan cannot tell it from a clean transcript, so it says so.
    Unread {
        /// Which records were skipped and why, or that none was found.
        reason: String,
    },
    /// A file that accompanies transcripts (sidecars, pointers, session stores): not
    /// scanned on its own.
    Companion {
        /// Which kind.
        kind: Companion,
    },
    /// Not a format this tool reads.
    UnknownFormat {
        /// Why not, and which readers were tried.
        reason: String,
    },
    /// Could not be read.
    Unreadable {
        /// The I/O error.
        error: String,
    },
    /// Deliberately not scanned (an archived copy that overlaps another file, a second
    /// path to a file already scanned).
    Skipped {
        /// Why.
        reason: String,
    },
}

impl FileStatus {
    /// The snake_case name used in reports.
    pub fn as_str(&self) -> &'static str {
        match self {
            Self::Scanned => "scanned",
            Self::Unread { .. } => "unread",
            Self::Companion { .. } => "companion",
            Self::UnknownFormat { .. } => "unknown_format",
            Self::Unreadable { .. } => "unreadable",
            Self::Skipped { .. } => "skipped",
        }
    }
}

/// The scan of one file.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct FileScan {
    /// The file, as given.
    pub file: String,
    /// Its format, when known.
    pub format: Option<Format>,
    /// What became of it.
    #[serde(flatten)]
    pub status: FileStatus,
    /// Its size in bytes, when known.
    pub size: u64,
    /// The account of reading it.
    pub read: ReadStats,
    /// OpenClaw: runs found in the trajectory sidecar.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub sidecar_runs: Option<usize>,
    /// A database: its transcripts left out because they last changed before
    /// [`ScanOptions::since`].
    #[serde(skip_serializing_if = "is_zero")]
    pub older_sessions: u64,
    /// Its sessions.
    #[serde(skip)]
    pub sessions: Vec<SessionReport>,
}

impl FileScan {
    /// A file that was not scanned.
    pub fn not_scanned(file: impl Into<String>, status: FileStatus, size: u64) -> Self {
        Self {
            file: file.into(),
            format: None,
            status,
            size,
            read: ReadStats::default(),
            sidecar_runs: None,
            older_sessions: 0,
            sessions: Vec::new(),
        }
    }

    /// A file read as `format`: scanned, or unread when no call came out of entries.
    fn read_as(
        file: String,
        format: Format,
        size: u64,
        read: ReadStats,
        sessions: Vec<SessionReport>,
    ) -> Self {
        let calls: u64 = sessions.iter().map(|s| s.calls).sum();
        let status = match unread_reason(format, &read, calls) {
            Some(reason) => FileStatus::Unread { reason },
            None => FileStatus::Scanned,
        };
        Self {
            file,
            format: Some(format),
            status,
            size,
            read,
            sidecar_runs: None,
            older_sessions: 0,
            sessions,
        }
    }

    /// Tool calls, over every session.
    pub fn calls(&self) -> u64 {
        self.sessions.iter().map(|s| s.calls).sum()
    }
}

fn is_zero(n: &u64) -> bool {
    *n == 0
}

/// Why a file read as `format` with `calls` calls counts as unread, if it does: no call,
/// and either some records were skipped (they may have held the calls) or none was
/// recognised at all. A transcript whose every record was understood and held no call
/// (a chat without tools) is not unread.
fn unread_reason(format: Format, read: &ReadStats, calls: u64) -> Option<String> {
    if calls > 0 || (read.records > 0 && read.skipped.is_empty()) {
        return None;
    }
    if read.skipped.is_empty() {
        return Some(format!(
            "read as {format}: no {format} record in {} line{} (use --format to read it as another format)",
            read.lines,
            if read.lines == 1 { "" } else { "s" }
        ));
    }
    let skips: Vec<String> = read
        .skipped
        .iter()
        .map(|s| {
            format!(
                "{} {} ({}) from line {}{}",
                s.count,
                s.reason.as_str(),
                s.reason.describe(),
                s.first_line,
                s.example
                    .as_deref()
                    .map_or(String::new(), |e| format!(", e.g. {e}"))
            )
        })
        .collect();
    Some(format!(
        "read as {format}: no tool call; {} record{} recognised, skipped: {}",
        read.records,
        if read.records == 1 { "" } else { "s" },
        skips.join("; ")
    ))
}

fn scanner(options: &ScanOptions) -> Scanner {
    Scanner::with_budget(
        options.config.clone(),
        options.agent.clone(),
        options.live_memory,
    )
}

/// Scans a transcript in `format` from `input`.
pub fn scan_reader<R: BufRead + Seek>(
    format: Format,
    input: R,
    read_options: &ReadOptions<'_>,
    options: &ScanOptions,
) -> io::Result<(ReadStats, Vec<SessionReport>)> {
    let mut scanner = scanner(options);
    let stats = read(format, input, read_options, &mut scanner)?;
    Ok((stats, scanner.finish()))
}

/// Scans a transcript held in memory (detecting its format unless `format` is given);
/// `name` names the session when the transcript does not.
pub fn scan_bytes(
    bytes: &[u8],
    format: Option<Format>,
    name: &str,
    options: &ScanOptions,
) -> io::Result<FileScan> {
    let format = match format.or(options.format) {
        Some(f) => f,
        None => match detect(bytes, Some(name)) {
            Detected::Transcript(f) => f,
            Detected::Companion(kind) => {
                return Ok(FileScan::not_scanned(
                    name,
                    FileStatus::Companion { kind },
                    bytes.len() as u64,
                ))
            }
            Detected::Unknown(reason) => {
                return Ok(FileScan::not_scanned(
                    name,
                    FileStatus::UnknownFormat { reason },
                    bytes.len() as u64,
                ))
            }
        },
    };
    let read_options = options.read_options(session_hint(name));
    let (stats, sessions) = scan_reader(format, Cursor::new(bytes), &read_options, options)?;
    Ok(FileScan::read_as(
        name.to_owned(),
        format,
        bytes.len() as u64,
        stats,
        sessions,
    ))
}

/// Scans a file, or an OpenHands conversation directory. Never fails: a file that cannot
/// be read, or is of no known format, is reported as such.
pub fn scan_path(path: &Path, options: &ScanOptions) -> FileScan {
    scan_path_as(path, &path.display().to_string(), options)
}

/// Scans the file at `path` as if it were called `name` (`-` for standard input spooled
/// to a temporary file): the report shows `name`, and sessions without an id of their
/// own are named after it.
pub fn scan_path_as(path: &Path, name: &str, options: &ScanOptions) -> FileScan {
    let shown = name.to_owned();
    let unreadable = |e: io::Error, size| {
        FileScan::not_scanned(
            shown.clone(),
            FileStatus::Unreadable {
                error: e.to_string(),
            },
            size,
        )
    };
    if path.is_dir() {
        return match openhands::conversation_root(path) {
            Some(root) => scan_conversation(&root, shown, options),
            None => unreadable(
                io::Error::other("a directory that is not an OpenHands conversation"),
                0,
            ),
        };
    }
    let mut file = match File::open(path) {
        Ok(f) => f,
        Err(e) => return unreadable(e, 0),
    };
    let size = file.metadata().map(|m| m.len()).unwrap_or(0);

    // Whatever happens below, the file counts its size once in the progress total.
    let progress = Progress::new(options.progress.as_deref(), size);
    // Files agents keep under known names: a database no reader takes, a companion.
    match agent_files::agent_file(path).map(|f| f.kind) {
        Some(agent_files::Kind::Unread(reason)) => {
            let reason = reason.to_owned();
            return FileScan::not_scanned(shown, FileStatus::Unread { reason }, size);
        }
        Some(agent_files::Kind::Companion(kind)) => {
            return FileScan::not_scanned(shown, FileStatus::Companion { kind }, size);
        }
        Some(agent_files::Kind::Database(Format::OpenClaw))
            if options.format.is_none_or(|f| f == Format::OpenClaw) =>
        {
            return scan_openclaw_database(path, shown, size, options, progress);
        }
        _ => {}
    }
    let name = match Path::new(name).file_name() {
        _ if name == "-" => "stdin".to_owned(),
        Some(n) => n.to_string_lossy().into_owned(),
        None => name.to_owned(),
    };
    let format = match options.format {
        Some(f) => f,
        None => {
            let mut prefix = Vec::with_capacity(PREFIX_BYTES.min(size as usize + 1));
            if let Err(e) = (&mut file)
                .take(PREFIX_BYTES as u64)
                .read_to_end(&mut prefix)
            {
                return unreadable(e, size);
            }
            match detect(&prefix, Some(&name)) {
                Detected::Transcript(f) => f,
                Detected::Companion(kind) => {
                    return FileScan::not_scanned(shown, FileStatus::Companion { kind }, size)
                }
                Detected::Unknown(reason) => {
                    return FileScan::not_scanned(shown, FileStatus::UnknownFormat { reason }, size)
                }
            }
        }
    };
    if format == Format::ClineUi && path.with_file_name(cline::FILE_NAME).is_file() {
        // The task's API history is the transcript; this is what the UI showed of it.
        let kind = Companion::ClineUiMessages;
        return FileScan::not_scanned(shown, FileStatus::Companion { kind }, size);
    }
    if let Err(e) = file.seek(SeekFrom::Start(0)) {
        return unreadable(e, size);
    }
    let windows = match format {
        Format::OpenClaw => openclaw::sidecar_of(path).and_then(|sidecar| {
            let file = File::open(sidecar).ok()?;
            RunWindows::read(BufReader::new(file)).ok().map(|(w, _)| w)
        }),
        _ => None,
    };
    let hint = task_directory(path, &name).unwrap_or_else(|| session_hint(&name).to_owned());
    let spawns = match format {
        Format::ClaudeCode => claude_code::spawns_of(path, &options.read_options(&hint)),
        _ => None,
    };
    let store = match format {
        Format::OpenClaw => openclaw::store_of(path),
        _ => None,
    };
    let session = openclaw::classify(&name).map_or(hint.as_str(), |f| f.session);
    let parent_spawns = store
        .as_deref()
        .and_then(|store| openclaw::spawns_of(path, session, store, &options.read_options(&hint)));
    let gemini_parent = match format {
        Format::GeminiCli => gemini_cli::parent_of(path),
        _ => None,
    };
    let mut read_options = options.read_options(&hint);
    read_options.run_windows = windows.as_ref().filter(|w| !w.is_empty());
    read_options.spawns = spawns.as_deref();
    read_options.parent_session = store
        .as_deref()
        .and_then(|s| s.parent_of(session))
        .or(gemini_parent.as_deref());
    read_options.parent_run = store
        .as_deref()
        .and_then(|s| s.key_of(session))
        .zip(parent_spawns.as_deref())
        .and_then(|(key, spawns)| spawns.run_of(key));
    let metered = Metered {
        inner: file,
        position: 0,
        progress,
    };
    let input = BufReader::with_capacity(1 << 18, metered);
    match scan_reader(format, input, &read_options, options) {
        Ok((stats, sessions)) => {
            let mut scan = FileScan::read_as(shown, format, size, stats, sessions);
            scan.sidecar_runs = read_options.run_windows.map(RunWindows::len);
            scan
        }
        Err(e) => unreadable(e, size),
    }
}

/// Scans an OpenClaw agent database: every transcript in it, each read as the file it
/// replaced ([`openclaw::database`]), a spawned one linked to its parent session and to the
/// run whose spawn call started it, in parallel on the current rayon pool. What a transcript could not give (an entry that does
/// not decompress, entries past the live memory budget) is counted in the file's skips.
fn scan_openclaw_database(
    path: &Path,
    shown: String,
    size: u64,
    options: &ScanOptions,
    progress: Progress<'_>,
) -> FileScan {
    use openclaw::database::{Database, Window};
    use rayon::prelude::*;
    let since_ms = options.since.map(|t| {
        let since_epoch = t.duration_since(std::time::UNIX_EPOCH).unwrap_or_default();
        i64::try_from(since_epoch.as_millis()).unwrap_or(i64::MAX)
    });
    let progress = std::sync::Mutex::new(progress);
    let done = std::sync::atomic::AtomicU64::new(0);
    let mut older = 0;
    let mut read = || -> io::Result<(ReadStats, Vec<SessionReport>)> {
        let windows = Database::open(path)?.windows()?;
        let store = Database::store(&windows);
        let count = windows.len().max(1) as u64;
        // Each transcript moves the progress by its share of the file.
        let advance = |n: u64| {
            let at = done.fetch_add(n, std::sync::atomic::Ordering::Relaxed) + n;
            if let Ok(mut progress) = progress.lock() {
                progress.reach(at * size / count);
            }
        };
        let live: Vec<&Window> = windows
            .iter()
            .filter(|w| since_ms.is_none_or(|since| w.updated_at >= since))
            .collect();
        older = (windows.len() - live.len()) as u64;
        advance(older);
        // The runs of each parent's spawn calls, read once per parent (few: the sessions
        // that spawned sub-agents), before its children.
        let mut parents: Vec<&str> = live
            .iter()
            .filter_map(|w| store.parent_of(&w.session))
            .collect();
        parents.sort_unstable();
        parents.dedup();
        let mut spawns: HashMap<&str, crate::readers::Spawns> = HashMap::new();
        if !parents.is_empty() {
            let mut database = Database::open(path)?;
            for parent in parents {
                let lines = database.transcript(parent, options.live_memory)?.lines;
                let read = openclaw::read_spawns(Cursor::new(lines), &options.read_options(parent));
                if let Ok(found) = read {
                    spawns.insert(parent, found);
                }
            }
        }
        // The transcripts are read in parallel, a connection per chunk of them, and their
        // reports kept in the database's order.
        let chunk = live.len().div_ceil(rayon::current_num_threads() * 4).max(1);
        let parts: Vec<io::Result<(ReadStats, Vec<SessionReport>)>> = live
            .par_chunks(chunk)
            .map(|windows| {
                let mut database = Database::open(path)?;
                let mut stats = ReadStats::default();
                let mut sessions = Vec::new();
                for window in windows {
                    let session = window.session.as_str();
                    let parent = store.parent_of(session);
                    let extracted = database.transcript(session, options.live_memory)?;
                    let mut read_options = options.read_options(session);
                    read_options.parent_session = parent;
                    read_options.parent_run = parent
                        .and_then(|p| spawns.get(p))
                        .zip(store.key_of(session))
                        .and_then(|(spawns, key)| spawns.run_of(key));
                    let (read, mut found) = scan_reader(
                        Format::OpenClaw,
                        Cursor::new(&extracted.lines),
                        &read_options,
                        options,
                    )?;
                    stats.bytes += read.bytes;
                    stats.lines += read.lines;
                    stats.absorb(read);
                    for _ in 0..extracted.undecodable {
                        stats.skip(SkipReason::Undecodable, 0, || format!("session {session}"));
                    }
                    for _ in 0..extracted.left_out {
                        stats.skip(SkipReason::LineTooCostly, 0, || {
                            format!("session {session}: past the live memory budget")
                        });
                    }
                    sessions.append(&mut found);
                    advance(1);
                }
                Ok((stats, sessions))
            })
            .collect();
        let mut stats = ReadStats::default();
        let mut sessions = Vec::new();
        for part in parts {
            let (read, mut found) = part?;
            stats.bytes += read.bytes;
            stats.lines += read.lines;
            stats.absorb(read);
            sessions.append(&mut found);
        }
        Ok((stats, sessions))
    };
    let read = read();
    match read {
        Ok((stats, sessions)) => {
            let mut scan = FileScan::read_as(shown, Format::OpenClaw, size, stats, sessions);
            scan.older_sessions = older;
            if older > 0 && scan.sessions.is_empty() {
                // Nothing changed since then: not an unread file.
                scan.status = FileStatus::Scanned;
            }
            scan
        }
        Err(e) => FileScan::not_scanned(
            shown,
            FileStatus::Unreadable {
                error: e.to_string(),
            },
            size,
        ),
    }
}

/// Scans an OpenHands conversation directory (`root`): one transcript, one session named
/// after the directory.
fn scan_conversation(root: &Path, shown: String, options: &ScanOptions) -> FileScan {
    let size = openhands::conversation_events(root)
        .map(|files| files.iter().map(|(_, n)| n).sum())
        .unwrap_or(0);
    let mut progress = Progress::new(options.progress.as_deref(), size);
    let name = root
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default();
    let read_options = options.read_options(&name);
    let mut scanner = scanner(options);
    let mut done = 0u64;
    let read = openhands::read_conversation(root, &read_options, &mut scanner, &mut |n| {
        done += n;
        progress.reach(done);
    });
    match read {
        Ok(stats) => FileScan::read_as(shown, Format::OpenHands, size, stats, scanner.finish()),
        Err(e) => FileScan::not_scanned(
            shown,
            FileStatus::Unreadable {
                error: e.to_string(),
            },
            size,
        ),
    }
}

/// The task directory's name, for the files agents name the same in every task
/// (Cline and Roo Code keep `tasks/<task id>/api_conversation_history.json`).
fn task_directory(path: &Path, name: &str) -> Option<String> {
    if name != cline::FILE_NAME && name != cline_ui::FILE_NAME {
        return None;
    }
    let parent = std::fs::canonicalize(path)
        .ok()?
        .parent()?
        .file_name()?
        .to_owned();
    Some(parent.to_string_lossy().into_owned())
}

/// The session name a file gives: its name up to the first dot.
pub(crate) fn session_hint(file_name: &str) -> &str {
    let name = file_name.split('.').next().unwrap_or(file_name);
    if name.is_empty() {
        file_name
    } else {
        name
    }
}

/// The progress of one file: how far into it the scan has got (a reader that goes over
/// it twice, or seeks back, moves nothing until it passes its furthest point), reported a
/// megabyte at a time; dropping it reports the rest of the file, so that each file counts
/// its size exactly once, read fully, partly or not at all.
struct Progress<'p> {
    callback: Option<&'p (dyn Fn(u64) + Send + Sync)>,
    size: u64,
    reported: u64,
    furthest: u64,
}

impl<'p> Progress<'p> {
    fn new(callback: Option<&'p (dyn Fn(u64) + Send + Sync)>, size: u64) -> Self {
        Self {
            callback,
            size,
            reported: 0,
            furthest: 0,
        }
    }

    /// The scan has read up to byte `position`.
    fn reach(&mut self, position: u64) {
        let position = position.min(self.size);
        if position <= self.furthest {
            return;
        }
        self.furthest = position;
        if self.furthest - self.reported >= 1 << 20 {
            self.flush();
        }
    }

    fn flush(&mut self) {
        if let (Some(callback), n @ 1..) = (self.callback, self.furthest - self.reported) {
            callback(n);
        }
        self.reported = self.furthest;
    }
}

impl Drop for Progress<'_> {
    fn drop(&mut self) {
        self.furthest = self.size;
        self.flush();
    }
}

/// A file that tells its [`Progress`] where reading has got.
struct Metered<'p, R> {
    inner: R,
    position: u64,
    progress: Progress<'p>,
}

impl<R: Read> Read for Metered<'_, R> {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        let n = self.inner.read(buf)?;
        self.position += n as u64;
        self.progress.reach(self.position);
        Ok(n)
    }
}

impl<R: Seek> Seek for Metered<'_, R> {
    fn seek(&mut self, pos: SeekFrom) -> io::Result<u64> {
        self.position = self.inner.seek(pos)?;
        Ok(self.position)
    }
}

#[cfg(test)]
mod tests;
