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

use std::fs::File;
use std::io::{self, BufRead, BufReader, Cursor, Read, Seek, SeekFrom};
use std::path::Path;
use std::sync::Arc;

use loopguard::ConfigSet;
use serde::Serialize;

use crate::detect::{detect, Companion, Detection as Detected, Format, PREFIX_BYTES};
use crate::readers::openclaw::{self, RunWindows};
use crate::stats::ReadStats;
use crate::{read, ReadOptions, DEFAULT_MAX_LINE};

mod report;
mod scanner;

pub use report::{Finding, LoopReport, Mark, Savings, SessionReport, Timeline};
pub use scanner::Scanner;

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
    /// Called with the number of bytes read, every megabyte or so (progress bars).
    pub progress: Option<Arc<dyn Fn(u64) + Send + Sync>>,
}

impl Default for ScanOptions {
    fn default() -> Self {
        Self {
            config: ConfigSet::enabled_defaults(),
            agent: None,
            format: None,
            max_line: DEFAULT_MAX_LINE,
            progress: None,
        }
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
    /// Read as a transcript.
    Scanned,
    /// A file that accompanies transcripts (sidecars, pointers, session stores): not
    /// scanned on its own.
    Companion {
        /// Which kind.
        kind: Companion,
    },
    /// Not a format this tool reads.
    UnknownFormat {
        /// Why not.
        reason: String,
    },
    /// Could not be read.
    Unreadable {
        /// The I/O error.
        error: String,
    },
    /// Deliberately not scanned (an archived copy that overlaps another file).
    Skipped {
        /// Why.
        reason: String,
    },
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
            sessions: Vec::new(),
        }
    }
}

/// Scans a transcript in `format` from `input`.
pub fn scan_reader<R: BufRead + Seek>(
    format: Format,
    input: R,
    read_options: &ReadOptions<'_>,
    options: &ScanOptions,
) -> io::Result<(ReadStats, Vec<SessionReport>)> {
    let mut scanner = Scanner::new(options.config.clone(), options.agent.clone());
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
    let mut read_options = ReadOptions::new(session_hint(name));
    read_options.max_line = options.max_line;
    let (stats, sessions) = scan_reader(format, Cursor::new(bytes), &read_options, options)?;
    Ok(FileScan {
        file: name.to_owned(),
        format: Some(format),
        status: FileStatus::Scanned,
        size: bytes.len() as u64,
        read: stats,
        sidecar_runs: None,
        sessions,
    })
}

/// Scans a file. Never fails: a file that cannot be read, or is of no known format, is
/// reported as such.
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
    let mut file = match File::open(path) {
        Ok(f) => f,
        Err(e) => return unreadable(e, 0),
    };
    let size = file.metadata().map(|m| m.len()).unwrap_or(0);
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
    let mut read_options = ReadOptions::new(session_hint(&name));
    read_options.max_line = options.max_line;
    read_options.run_windows = windows.as_ref().filter(|w| !w.is_empty());
    let metered = Metered {
        inner: file,
        unreported: 0,
        progress: options.progress.as_deref(),
    };
    let input = BufReader::with_capacity(1 << 18, metered);
    match scan_reader(format, input, &read_options, options) {
        Ok((stats, sessions)) => FileScan {
            file: shown,
            format: Some(format),
            status: FileStatus::Scanned,
            size,
            read: stats,
            sidecar_runs: read_options.run_windows.map(RunWindows::len),
            sessions,
        },
        Err(e) => unreadable(e, size),
    }
}

/// How many times a reader goes over a file of `format` (progress bars count bytes read).
pub fn passes(format: Format) -> u64 {
    match format {
        Format::OpenClaw => 2,
        _ => 1,
    }
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

/// Reports bytes read to a progress callback, a megabyte at a time.
struct Metered<'p, R> {
    inner: R,
    unreported: u64,
    progress: Option<&'p (dyn Fn(u64) + Send + Sync)>,
}

impl<R: Read> Read for Metered<'_, R> {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        let n = self.inner.read(buf)?;
        if let Some(progress) = self.progress {
            self.unreported += n as u64;
            if self.unreported >= 1 << 20 || n == 0 {
                progress(std::mem::take(&mut self.unreported));
            }
        }
        Ok(n)
    }
}

impl<R: Seek> Seek for Metered<'_, R> {
    fn seek(&mut self, pos: SeekFrom) -> io::Result<u64> {
        self.inner.seek(pos)
    }
}

impl<R> Drop for Metered<'_, R> {
    fn drop(&mut self) {
        if let (Some(progress), n @ 1..) = (self.progress, self.unreported) {
            progress(n);
        }
    }
}
