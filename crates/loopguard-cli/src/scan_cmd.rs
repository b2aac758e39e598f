//! `loopguard scan`: replay real agent transcripts through the guard in shadow mode and
//! report every loop it would have warned about or blocked.
//!
//! This module finds the files, runs the scans in parallel and picks the output; reading
//! and scanning live in `loopguard-transcripts`, the reports in `scan_report` (terminal
//! and JSON) and `scan_html` (the page).

use std::collections::BTreeMap;
use std::io::{self, IsTerminal, Write};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Instant;

use clap::{Args, ValueEnum};
use indicatif::{ProgressBar, ProgressDrawTarget, ProgressStyle};
use loopguard::ConfigSet;
use loopguard_transcripts::readers::openclaw::{self, CopyKind};
use loopguard_transcripts::readers::openhands;
use loopguard_transcripts::{
    scan_path_as, FailureRules, FileScan, FileStatus, Format, ScanOptions, DEFAULT_MAX_LINE,
};
use rayon::prelude::*;

use crate::output::{fatal, read_text, wants_json};
use crate::scan_report::{ConfigSource, Report};
use crate::EXIT_OK;

/// Exit status: some files could not be read or are of no known format.
pub const EXIT_UNREAD_FILES: u8 = 2;
/// Exit status: `--fail-on` found a finding of that level.
pub const EXIT_FINDINGS: u8 = 3;

/// What would the guard have caught? Replays agent session transcripts through the loop
/// guard in shadow mode and reports, per session, every loop it would have warned about or
/// blocked: the detector, the tool, where the first warning and the first block would have
/// come, how often the agent repeated the call after that, compaction aborts, and the calls
/// and tokens that blocking would have saved.
///
/// Reads OpenClaw session JSONL (following the active branch, with run ids from side
/// entries and the trajectory sidecar), Claude Code sessions (subagent files and
/// stream-json too), Codex rollouts and `codex exec --json` streams, Gemini CLI chat
/// sessions, OpenAI chat and Anthropic Messages arrays, SWE-agent `.traj`, mini-swe-agent
/// trajectories, OpenHands events (V0 and V1: event arrays, state files, evaluation
/// output.jsonl, conversation directories) and loopguard replay events; the format is
/// detected per file (--format forces one). Directories are searched recursively for
/// *.jsonl, *.json, *.traj and OpenClaw archive names; archived OpenClaw copies (.reset,
/// .bak, .checkpoint, .deleted) that overlap another file of the same session are skipped
/// (and listed), unless --all-copies.
///
/// Tool results count as failed by each format's own signals (error flags, exit codes,
/// error texts); --failure-text and --failure-rules add rules (docs/scan.md lists the
/// built-in ones).
///
/// Without --config, detection is on with the default thresholds (as if the config were
/// `{ tools: { loopDetection: { enabled: true } } }`).
///
/// Output: tables on a terminal; one JSON document when piped or with --json (schema in
/// docs/scan.md); --html writes a self-contained page with a timeline per session.
///
/// Exit status: 0 the scan ran and every file was read; 1 fatal error (invalid config or
/// failure rule, nothing to scan, output not writable); 2 some files could not be read,
/// are of no known format, or are UNREAD: they have entries but no call could be read from
/// them (they are listed in the report, with the reason); 3 --fail-on found a finding of
/// that level (wins over 2).
#[derive(Args, Debug)]
#[command(after_help = "Examples:\n  \
loopguard scan ~/.openclaw/agents/main/sessions\n  \
loopguard scan ~/.claude/projects --html loops.html\n  \
loopguard scan --config openclaw.json5 --agent worker sessions/ --json | jq '.summary'\n  \
loopguard scan run.traj --fail-on critical      # exit 3 when the guard would have blocked\n  \
cat events.jsonl | loopguard scan - --format loopguard")]
pub struct ScanArgs {
    /// Files or directories (searched recursively); `-` reads standard input.
    #[arg(value_name = "PATH")]
    paths: Vec<PathBuf>,
    /// OpenClaw-style JSON5 config; its tools.loopDetection blocks apply.
    #[arg(long, value_name = "FILE")]
    config: Option<PathBuf>,
    /// Agent whose config applies (events that name an agent use theirs).
    #[arg(long, value_name = "ID")]
    agent: Option<String>,
    /// Read every file as this format instead of detecting it.
    #[arg(long, value_name = "FORMAT", value_parser = parse_format)]
    format: Option<Format>,
    /// Print JSON even on a terminal.
    #[arg(long)]
    json: bool,
    /// Also write a self-contained HTML report with a timeline per session.
    #[arg(long, value_name = "FILE")]
    html: Option<PathBuf>,
    /// Scan every archived OpenClaw copy, even those that overlap another file.
    #[arg(long)]
    all_copies: bool,
    /// Exit with status 3 when a finding of at least this level is found.
    #[arg(long, value_name = "LEVEL")]
    fail_on: Option<FailOn>,
    /// Files scanned at once (default: one per core).
    #[arg(long, short = 'j', value_name = "N")]
    jobs: Option<usize>,
    /// Longest line read; longer lines are counted as skipped, never buffered.
    #[arg(long, value_name = "BYTES", default_value_t = DEFAULT_MAX_LINE)]
    max_line_bytes: usize,
    /// Also count a tool result of FORMAT as failed when its text matches REGEX (FORMAT
    /// may be * for every format); repeatable. The built-in rules are in docs/scan.md.
    #[arg(long, value_name = "FORMAT=REGEX")]
    failure_text: Vec<String>,
    /// Add the failure rules of a JSON file: {"FORMAT" or "*": [REGEX or {"field":
    /// "/json/pointer", "when": "true"|"nonzero"|"present"|{"equals": TEXT}}, ...]}.
    #[arg(long, value_name = "FILE")]
    failure_rules: Option<PathBuf>,
}

/// The level `--fail-on` checks for.
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
enum FailOn {
    /// Any warning or block.
    Warning,
    /// Any block or compaction abort.
    Critical,
}

fn parse_format(s: &str) -> Result<Format, String> {
    s.parse()
        .map_err(|e: loopguard_transcripts::Error| e.to_string())
}

/// The built-in failure rules plus the ones given with --failure-rules and
/// --failure-text.
fn failure_rules(args: &ScanArgs) -> Result<FailureRules, String> {
    let mut rules = FailureRules::builtin().clone();
    if let Some(path) = &args.failure_rules {
        let text = read_text(path)?;
        rules
            .add_document(&text)
            .map_err(|e| format!("{}: {e}", path.display()))?;
    }
    for flag in &args.failure_text {
        rules
            .add_text_flag(flag)
            .map_err(|e| format!("--failure-text {flag}: {e}"))?;
    }
    Ok(rules)
}

/// A file to scan, or one that will only be listed.
struct Input {
    path: PathBuf,
    shown: String,
    /// Set for files that are listed but not scanned.
    status: Option<FileStatus>,
    size: u64,
}

pub fn run(args: ScanArgs) -> u8 {
    let (config, source) = match &args.config {
        None => (ConfigSet::enabled_defaults(), ConfigSource::Defaults),
        Some(path) => match read_text(path).and_then(|t| {
            ConfigSet::parse_named(&t, Some(&path.display().to_string())).map_err(|e| e.to_string())
        }) {
            Ok(c) => (c, ConfigSource::File(path.display().to_string())),
            Err(message) => return fatal(&message.replace('\n', "; ")),
        },
    };
    let failures = match failure_rules(&args) {
        Ok(rules) => Arc::new(rules),
        Err(message) => return fatal(&message),
    };
    let mut paths = args.paths.clone();
    if paths.is_empty() {
        if io::stdin().is_terminal() {
            return fatal("nothing to scan: give files or directories, or - for standard input (see loopguard scan --help)");
        }
        paths.push(PathBuf::from("-"));
    }
    // Standard input is spooled to temporary files that live until the scan is over.
    let mut spools = Vec::new();
    let mut inputs = Vec::new();
    let mut ignored = 0u64;
    for path in &paths {
        if path.as_os_str() == "-" {
            match spool_stdin() {
                Ok(file) => {
                    inputs.push(Input {
                        path: file.path().to_owned(),
                        shown: "-".into(),
                        status: None,
                        size: file.as_file().metadata().map(|m| m.len()).unwrap_or(0),
                    });
                    spools.push(file);
                }
                Err(e) => return fatal(&format!("cannot read standard input: {e}")),
            }
            continue;
        }
        collect(path, &mut inputs, &mut ignored);
    }
    if !args.all_copies {
        skip_overlapping_copies(&mut inputs);
    }
    let started = Instant::now();
    // Each file counts its size once, however often its reader goes over it.
    let total: u64 = inputs
        .iter()
        .filter(|i| i.status.is_none())
        .map(|i| i.size)
        .sum();
    let bar = progress_bar(total);
    let options = ScanOptions {
        config,
        agent: args.agent.clone(),
        format: args.format,
        max_line: args.max_line_bytes,
        failures,
        progress: Some(Arc::new({
            let bar = bar.clone();
            move |n| bar.inc(n)
        })),
    };
    let pool = match rayon::ThreadPoolBuilder::new()
        .num_threads(args.jobs.unwrap_or(0))
        .build()
    {
        Ok(pool) => pool,
        Err(e) => return fatal(&format!("cannot start worker threads: {e}")),
    };
    let files: Vec<FileScan> = pool.install(|| {
        inputs
            .par_iter()
            .map(|input| match &input.status {
                Some(status) => {
                    FileScan::not_scanned(input.shown.clone(), status.clone(), input.size)
                }
                None => scan_path_as(&input.path, &input.shown, &options),
            })
            .collect()
    });
    bar.finish_and_clear();
    let report = Report::new(files, ignored, source, &options, started.elapsed());
    if let Some(path) = &args.html {
        let page = crate::scan_html::render(&report);
        if let Err(e) = std::fs::write(path, page) {
            return fatal(&format!("cannot write {}: {e}", path.display()));
        }
    }
    let stdout = io::stdout();
    let mut out = io::BufWriter::new(stdout.lock());
    let written = if wants_json(args.json) {
        report.write_json(&mut out)
    } else {
        report.write_human(&mut out, args.html.as_deref())
    };
    match written.and_then(|()| out.flush()) {
        Ok(()) => {}
        Err(e) if e.kind() == io::ErrorKind::BrokenPipe => {}
        Err(e) => return fatal(&format!("cannot write the report: {e}")),
    }
    exit_status(&report, args.fail_on)
}

fn exit_status(report: &Report, fail_on: Option<FailOn>) -> u8 {
    let found = match fail_on {
        None => false,
        Some(FailOn::Warning) => report.findings_at(loopguard::Level::Warning) > 0,
        Some(FailOn::Critical) => report.findings_at(loopguard::Level::Critical) > 0,
    };
    if found {
        EXIT_FINDINGS
    } else if report.unread_files() > 0 {
        EXIT_UNREAD_FILES
    } else {
        EXIT_OK
    }
}

/// Standard input in a temporary file: readers of some formats go over a file twice.
fn spool_stdin() -> io::Result<tempfile::NamedTempFile> {
    let mut file = tempfile::NamedTempFile::new()?;
    io::copy(&mut io::stdin().lock(), &mut file)?;
    file.as_file().sync_data().ok();
    Ok(file)
}

/// Whether a file found in a directory is worth reading: transcripts end in .jsonl,
/// .json or .traj, or carry an OpenClaw archive suffix.
fn looks_like_transcript(path: &Path) -> bool {
    let Some(name) = path.file_name().and_then(|n| n.to_str()) else {
        return false;
    };
    name.ends_with(".jsonl")
        || name.ends_with(".json")
        || name.ends_with(".traj")
        || openclaw::classify(name).is_some()
}

fn collect(path: &Path, inputs: &mut Vec<Input>, ignored: &mut u64) {
    let shown = path.display().to_string();
    let metadata = match std::fs::metadata(path) {
        Ok(m) => m,
        Err(e) => {
            inputs.push(Input {
                path: path.to_owned(),
                shown,
                status: Some(FileStatus::Unreadable {
                    error: e.to_string(),
                }),
                size: 0,
            });
            return;
        }
    };
    if !metadata.is_dir() {
        inputs.push(Input {
            path: path.to_owned(),
            shown,
            status: None,
            size: metadata.len(),
        });
        return;
    }
    let mut walk = walkdir::WalkDir::new(path)
        .follow_links(false)
        .sort_by_file_name()
        .into_iter();
    while let Some(entry) = walk.next() {
        // An OpenHands conversation directory is one transcript of many event files.
        if let Ok(dir) = &entry {
            let root = dir
                .file_type()
                .is_dir()
                .then(|| openhands::conversation_root(dir.path()))
                .flatten();
            if let Some(root) = root {
                let size = openhands::conversation_events(&root)
                    .map(|files| files.iter().map(|(_, n)| n).sum())
                    .unwrap_or(0);
                inputs.push(Input {
                    shown: format!("{}/", root.display()),
                    path: root,
                    status: None,
                    size,
                });
                walk.skip_current_dir();
                continue;
            }
        }
        match entry {
            Ok(entry) if entry.file_type().is_file() => {
                if looks_like_transcript(entry.path()) {
                    inputs.push(Input {
                        path: entry.path().to_owned(),
                        shown: entry.path().display().to_string(),
                        status: None,
                        size: entry.metadata().map(|m| m.len()).unwrap_or(0),
                    });
                } else {
                    *ignored += 1;
                }
            }
            Ok(_) => {}
            Err(e) => {
                let shown = e
                    .path()
                    .map_or_else(|| shown.clone(), |p| p.display().to_string());
                inputs.push(Input {
                    path: PathBuf::from(&shown),
                    shown,
                    status: Some(FileStatus::Unreadable {
                        error: e.to_string(),
                    }),
                    size: 0,
                });
            }
        }
    }
}

/// Among OpenClaw copies of one session in one directory, keeps the live transcript, or
/// else the largest copy (the file only grows), and marks the others as skipped.
fn skip_overlapping_copies(inputs: &mut [Input]) {
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

fn progress_bar(total: u64) -> ProgressBar {
    if !io::stderr().is_terminal() {
        return ProgressBar::hidden();
    }
    let bar = ProgressBar::with_draw_target(Some(total), ProgressDrawTarget::stderr());
    let style = ProgressStyle::with_template(
        "{spinner} scanning {bar:30} {bytes}/{total_bytes} {bytes_per_sec} eta {eta}",
    )
    .unwrap_or_else(|_| ProgressStyle::default_bar());
    bar.set_style(style);
    bar
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
}
