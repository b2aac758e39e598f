//! `loopguard scan`: replay real agent transcripts through the guard in shadow mode and
//! report every loop it would have warned about or blocked.
//!
//! This module finds the files, runs the scans in parallel and picks the output; reading
//! and scanning live in `loopguard-transcripts`, the reports in `scan_report` (terminal
//! and JSON) and `scan_html` (the page).

use std::io::{self, IsTerminal, Write};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Instant, SystemTime};

use clap::{Args, ValueEnum};
use indicatif::{ProgressBar, ProgressDrawTarget, ProgressStyle};
use loopguard_transcripts::{
    scan_path_as, FailureRules, FileScan, FileStatus, Format, ScanOptions, DEFAULT_LIVE_MEMORY,
    DEFAULT_MAX_LINE,
};
use rayon::prelude::*;

use crate::output::{fatal, read_text, wants_json};
use crate::scan_inputs::{
    default_folders, parse_since, skip_overlapping_copies, Collector, Input, Searched,
};
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
loopguard scan ~/.openclaw/agents/main/agent/openclaw-agent.sqlite   # OpenClaw 2026.9 and later\n  \
loopguard scan ~/.claude/projects --html loops.html\n  \
loopguard scan --config openclaw.json5 --agent worker sessions/ --json | jq '.summary'\n  \
loopguard scan sessions/ --budget run.cost=2 --budget withoutProgress.calls=15   # where would budgets stop?\n  \
loopguard scan run.traj --fail-on critical      # exit 3 when the guard would have blocked\n  \
cat events.jsonl | loopguard scan - --format loopguard")]
pub struct ScanArgs {
    /// Files or directories (searched recursively); `-` reads standard input. Without
    /// any, the usual transcript folders under $HOME: ~/.openclaw/agents/*/sessions and
    /// the agents' databases (~/.openclaw/agents/*/agent/openclaw-agent.sqlite, OpenClaw
    /// 2026.9 and later), ~/.claude/projects, ~/.codex/sessions and ~/.gemini/tmp (the
    /// scan says which exist).
    #[arg(value_name = "PATH")]
    paths: Vec<PathBuf>,
    /// Only transcripts found in directories, or kept in an OpenClaw database, that
    /// changed since then: a duration back from now (30m, 12h, 7d, 2w), a date
    /// (2026-01-15) or a date and time in UTC (2026-01-15T08:00:00Z). Files named on the
    /// command line are always read.
    #[arg(long, value_name = "WHEN")]
    since: Option<String>,
    /// OpenClaw-style JSON5 config; its tools.loopDetection blocks apply. Without it, the
    /// file LOOPGUARD_CONFIG names; without either, detection on at the default thresholds.
    #[arg(long, value_name = "FILE")]
    config: Option<PathBuf>,
    /// A spend budget, as the config's `loopguard.budgets` block would set it: SCOPE.KEY
    /// (`run`, `session`, `agent`, `day`: `tokens`, `cost`, `calls`, `wallSeconds`;
    /// `withoutProgress`: `calls`, `tokens`, `cost`, `enabled`) or `warnAt`, `timeZone`;
    /// repeatable, laid over the config's budgets block (and each agent's). The report then
    /// says which sessions a budget would have stopped, where, and what it would have saved.
    #[arg(long, value_name = "KEY=VALUE", value_parser = crate::scan_budget::parse_budget_flag)]
    budget: Vec<crate::scan_budget::BudgetFlag>,
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
    /// Memory the open runs of one file may hold (an estimate): beyond it the least
    /// recently active session is closed and reported as closed early. Sessions are never
    /// forgotten by count. A line whose parsing could take more is skipped, reported with
    /// its size.
    #[arg(long, value_name = "BYTES", default_value_t = DEFAULT_LIVE_MEMORY)]
    max_live_bytes: usize,
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

pub fn run(args: ScanArgs) -> u8 {
    let (config, source) = match crate::startup::load("scan", args.config.clone()) {
        Ok(loaded) => {
            for warning in crate::startup::config_warnings(&loaded) {
                eprintln!("loopguard scan: {warning}");
            }
            let source = match loaded.source.path() {
                None => ConfigSource::Defaults,
                Some(_) => ConfigSource::File(loaded.source.to_string()),
            };
            let config = match crate::scan_budget::merged(&args.budget) {
                Some(budgets) => loaded.config.with_budgets(&budgets),
                None => loaded.config,
            };
            (config, source)
        }
        Err(e) => return crate::startup::config_error(&e),
    };
    let failures = match failure_rules(&args) {
        Ok(rules) => Arc::new(rules),
        Err(message) => return fatal(&message),
    };
    let since = match args
        .since
        .as_deref()
        .map(|s| parse_since(s, SystemTime::now()))
    {
        None => None,
        Some(Ok(time)) => Some(time),
        Some(Err(message)) => return fatal(&message),
    };
    let mut paths = args.paths.clone();
    // No path: the usual transcript folders of the agents on this machine.
    let mut searched = Vec::new();
    if paths.is_empty() {
        let Some(home) = std::env::var_os("HOME").filter(|h| !h.is_empty()) else {
            return fatal("nothing to scan: no path given and HOME is not set (give files or directories, or - for standard input)");
        };
        searched = default_folders(Path::new(&home));
        let found: Vec<&Searched> = searched.iter().filter(|s| s.found).collect();
        if found.is_empty() {
            let looked: Vec<String> = searched
                .iter()
                .map(|s| format!("{} ({})", s.path, s.agent))
                .collect();
            return fatal(&format!(
                "nothing to scan: none of the usual transcript folders exists ({}); give files or directories, or - for standard input",
                looked.join(", ")
            ));
        }
        eprintln!(
            "loopguard: no path given; scanning {}",
            found
                .iter()
                .map(|s| format!("{} ({})", s.path, s.agent))
                .collect::<Vec<_>>()
                .join(", ")
        );
        paths = found.iter().map(|s| PathBuf::from(&s.path)).collect();
    }
    // Standard input is spooled to temporary files that live until the scan is over.
    let mut spools = Vec::new();
    let mut collector = Collector::new(since);
    for path in &paths {
        if path.as_os_str() == "-" {
            match spool_stdin() {
                Ok(file) => {
                    collector.inputs.push(Input {
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
        collector.add(path);
    }
    if collector.to_scan() == 0 {
        // An empty or wrong directory is not a clean scan.
        let mut why = Vec::new();
        for input in &collector.inputs {
            if let Some(FileStatus::Unreadable { error }) = &input.status {
                why.push(format!("cannot read {}: {error}", input.shown));
            }
        }
        if collector.ignored > 0 {
            why.push(format!(
                "{} ignored (not a transcript by name or by first bytes)",
                crate::scan_report::plural(collector.ignored, "file")
            ));
        }
        if collector.older > 0 {
            why.push(format!(
                "{} older than --since",
                crate::scan_report::plural(collector.older, "transcript")
            ));
        }
        let shown: Vec<String> = paths.iter().map(|p| p.display().to_string()).collect();
        return fatal(&format!(
            "nothing to scan: no transcript found in {}{}",
            shown.join(", "),
            if why.is_empty() {
                String::new()
            } else {
                format!(" ({})", why.join("; "))
            }
        ));
    }
    let Collector {
        mut inputs,
        ignored,
        older,
        ..
    } = collector;
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
        live_memory: args.max_live_bytes,
        since,
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
    let mut report = Report::new(files, ignored, source, &options, started.elapsed());
    // Transcripts left out by --since: files in directories, and those of databases.
    report.summary.older_files = older + report.files.iter().map(|f| f.older_sessions).sum::<u64>();
    report.searched = searched;
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
