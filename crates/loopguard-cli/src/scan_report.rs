//! The report of `loopguard scan`: one value built from the file scans, written as tables
//! for people or as one JSON document (schema `loopguard-scan/1`, documented in
//! `docs/scan.md`). The HTML page (`scan_html`) renders the same value.

use std::io::{self, Write};
use std::path::Path;
use std::time::Duration;

use loopguard::{ConfigSet, Level};
use loopguard_transcripts::{
    BudgetStop, FileScan, FileStatus, Savings, ScanOptions, SessionReport, Usage,
};
use serde::Serialize;
use serde_json::json;

use crate::scan_tree::{add_spend, Tree};

/// Version of the JSON document.
pub const SCHEMA: &str = "loopguard-scan/1";

/// Where the config came from.
#[derive(Clone, Debug)]
pub enum ConfigSource {
    /// No `--config`: detection on with default thresholds.
    Defaults,
    /// A config file.
    File(String),
}

/// Everything a scan found.
pub struct Report {
    pub files: Vec<FileScan>,
    /// With no path given: the usual folders looked in.
    pub searched: Vec<crate::scan_inputs::Searched>,
    pub ignored_files: u64,
    pub config: serde_json::Value,
    pub config_note: String,
    pub summary: Summary,
    /// Agent trees and run storms ([`crate::scan_tree`]).
    pub trees: Vec<Tree>,
    pub elapsed: Duration,
}

/// The JSON document (`loopguard-scan/1`). Keys come in sorted order, the order of
/// `serde_json`'s maps, as when the document was one value: each part but the sessions
/// is made a value (small), each session one at a time.
struct Document<'a>(&'a Report);

impl Serialize for Document<'_> {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        use serde::ser::{Error, SerializeMap};
        fn value<T: Serialize, E: Error>(v: &T) -> Result<serde_json::Value, E> {
            serde_json::to_value(v).map_err(E::custom)
        }
        let report = self.0;
        let mut m = serializer.serialize_map(Some(7))?;
        m.serialize_entry("config", &value::<_, S::Error>(&report.config)?)?;
        m.serialize_entry("files", &value::<_, S::Error>(&report.files)?)?;
        m.serialize_entry("schema", SCHEMA)?;
        m.serialize_entry("searched", &value::<_, S::Error>(&report.searched)?)?;
        m.serialize_entry("sessions", &Sessions(report))?;
        m.serialize_entry("summary", &value::<_, S::Error>(&report.summary)?)?;
        m.serialize_entry("trees", &report.trees)?;
        m.end()
    }
}

/// The sessions of a report, each with its file and format first.
struct Sessions<'a>(&'a Report);

impl Serialize for Sessions<'_> {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.collect_seq(self.0.sessions().map(|(file, session)| {
            let mut value = serde_json::to_value(session).unwrap_or_default();
            if let Some(map) = value.as_object_mut() {
                map.insert("file".into(), json!(file.file));
                map.insert("format".into(), json!(file.format));
            }
            value
        }))
    }
}

/// Totals over every file and session.
#[derive(Clone, Debug, Default, Serialize)]
pub struct Summary {
    pub files: u64,
    pub scanned_files: u64,
    pub unread_files: u64,
    pub companion_files: u64,
    pub skipped_files: u64,
    pub unknown_format_files: u64,
    pub unreadable_files: u64,
    pub ignored_files: u64,
    pub older_files: u64,
    pub bytes: u64,
    pub lines: u64,
    pub skipped_lines: u64,
    pub failed_results: u64,
    pub sessions: u64,
    pub sessions_with_findings: u64,
    pub sessions_with_blocks: u64,
    pub runs: u64,
    pub calls: u64,
    pub warned_calls: u64,
    pub blocked_calls: u64,
    pub messages: u64,
    pub warned_messages: u64,
    pub blocked_messages: u64,
    pub loops: u64,
    pub findings: u64,
    pub compaction_aborts: u64,
    pub unpaired_calls: u64,
    pub orphan_results: u64,
    pub sessions_closed_early: u64,
    pub tokens: Option<u64>,
    pub cost: Option<f64>,
    /// Tokens and cost spent inside loops, over the sessions that record usage.
    pub loop_tokens: Option<u64>,
    pub loop_cost: Option<f64>,
    /// Sessions a budget would have stopped, and what those stops would have saved.
    pub sessions_stopped_by_budgets: u64,
    pub saved_by_budgets: Savings,
    pub saved: Savings,
    /// Agent trees (roots with linked children) and sessions with run storms.
    pub trees: u64,
    /// Sessions linked under a parent, over every tree.
    pub subagent_sessions: u64,
    /// `run_storm` findings, over every tree.
    pub run_storms: u64,
}

impl Report {
    pub fn new(
        files: Vec<FileScan>,
        ignored_files: u64,
        source: ConfigSource,
        options: &ScanOptions,
        elapsed: Duration,
    ) -> Self {
        let (config, config_note) =
            describe_config(&source, &options.config, options.agent.as_deref());
        let mut summary = Summary {
            files: files.len() as u64,
            ignored_files,
            ..Summary::default()
        };
        for file in &files {
            match &file.status {
                FileStatus::Scanned => summary.scanned_files += 1,
                FileStatus::Unread { .. } => summary.unread_files += 1,
                FileStatus::Companion { .. } => summary.companion_files += 1,
                FileStatus::Skipped { .. } => summary.skipped_files += 1,
                FileStatus::UnknownFormat { .. } => summary.unknown_format_files += 1,
                FileStatus::Unreadable { .. } => summary.unreadable_files += 1,
                _ => {}
            }
            summary.bytes += file.read.bytes;
            summary.lines += file.read.lines;
            summary.skipped_lines += file.read.skipped_lines();
            summary.failed_results += file.read.failed_results();
            for s in &file.sessions {
                summary.sessions += 1;
                summary.sessions_with_findings += u64::from(!s.findings.is_empty());
                summary.sessions_with_blocks += u64::from(s.has_blocks());
                summary.runs += s.runs;
                summary.calls += s.calls;
                summary.warned_calls += s.warned_calls;
                summary.blocked_calls += s.blocked_calls;
                summary.messages += s.messages;
                summary.warned_messages += s.warned_messages;
                summary.blocked_messages += s.blocked_messages;
                summary.loops += s.loops.len() as u64;
                summary.findings += s.findings.len() as u64;
                summary.compaction_aborts += s.timeline.aborts.len() as u64;
                summary.unpaired_calls += s.unpaired_calls;
                summary.orphan_results += s.orphan_results;
                summary.sessions_closed_early += u64::from(s.closed_early);
                if let Some(u) = s.usage {
                    add_spend(
                        (&mut summary.tokens, &mut summary.cost),
                        Some(u.tokens),
                        u.cost,
                    );
                }
                if let Some(u) = s.loop_spend {
                    let total = (&mut summary.loop_tokens, &mut summary.loop_cost);
                    add_spend(total, Some(u.tokens), u.cost);
                }
                if let Some(stop) = &s.budget_stop {
                    summary.sessions_stopped_by_budgets += 1;
                    summary.saved_by_budgets.add(&stop.saved);
                }
                summary.saved.add(&s.saved);
            }
        }
        let trees = crate::scan_tree::trees(
            files
                .iter()
                .flat_map(|f| f.sessions.iter().map(move |s| (f, s))),
        );
        summary.trees = trees.len() as u64;
        summary.subagent_sessions = trees.iter().map(|t| t.children).sum();
        summary.run_storms = trees.iter().map(|t| t.totals.run_storms).sum();
        Self {
            trees,
            files,
            searched: Vec::new(),
            ignored_files,
            config,
            config_note,
            summary,
            elapsed,
        }
    }

    /// Files that could not be read, are of no known format, or gave no call although
    /// they have entries.
    pub fn unread_files(&self) -> u64 {
        self.summary.unknown_format_files
            + self.summary.unreadable_files
            + self.summary.unread_files
    }

    /// Findings at `level` or above.
    pub fn findings_at(&self, level: Level) -> usize {
        self.sessions()
            .flat_map(|(_, s)| &s.findings)
            .filter(|f| f.level >= level)
            .count()
    }

    /// Every session with its file.
    pub fn sessions(&self) -> impl Iterator<Item = (&FileScan, &SessionReport)> {
        self.files
            .iter()
            .flat_map(|f| f.sessions.iter().map(move |s| (f, s)))
    }

    /// The JSON document as a value (tests; [`Report::write_json`] writes it without
    /// building one).
    #[cfg(test)]
    pub fn to_json(&self) -> serde_json::Value {
        serde_json::to_value(Document(self)).unwrap_or_default()
    }

    /// Writes the JSON document as it is serialized: one session's value at a time,
    /// never the whole document (a scan of 100,000 sessions would hold several hundred
    /// megabytes of values only to write them).
    pub fn write_json(&self, out: &mut impl Write) -> io::Result<()> {
        serde_json::to_writer(&mut *out, &Document(self))?;
        out.write_all(b"\n")
    }

    pub fn write_human(&self, out: &mut impl Write, html: Option<&Path>) -> io::Result<()> {
        let s = &self.summary;
        writeln!(
            out,
            "loopguard scan (shadow mode: what the guard would have done)"
        )?;
        writeln!(out, "config: {}", self.config_note)?;
        writeln!(out)?;
        self.write_loops(out)?;
        self.write_spend(out)?;
        self.write_trees(out)?;
        self.write_files(out)?;
        self.write_problems(out)?;
        writeln!(out)?;
        writeln!(
            out,
            "Total: {} ({} scanned{}), {}, {}, {} ({} failed); {} warned, {} blocked in {} ({} with blocks, {}).",
            plural(s.files, "file"),
            s.scanned_files,
            if s.unread_files > 0 {
                format!(", {} UNREAD", s.unread_files)
            } else {
                String::new()
            },
            plural(s.sessions, "session"),
            plural(s.runs, "run"),
            plural(s.calls, "call"),
            s.failed_results,
            s.warned_calls,
            s.blocked_calls,
            plural(s.loops, "loop"),
            plural(s.sessions_with_blocks, "session"),
            plural(s.compaction_aborts, "compaction abort"),
        )?;
        if s.warned_messages + s.blocked_messages > 0 {
            writeln!(
                out,
                "Without tool calls: {} messages read; {} warned, {} blocked (each block stops its run).",
                s.messages, s.warned_messages, s.blocked_messages
            )?;
        }
        writeln!(
            out,
            "Would have saved: {}.",
            savings_text(&s.saved, s.tokens.is_some())
        )?;
        if let Some(tokens) = s.loop_tokens {
            writeln!(
                out,
                "Spent inside loops: {} tokens{} of {} tokens{}.",
                count_text(tokens),
                s.loop_cost.map_or(String::new(), |c| format!(", ${c:.2}")),
                count_text(s.tokens.unwrap_or(0)),
                s.cost.map_or(String::new(), |c| format!(", ${c:.2}")),
            )?;
        }
        if self.config["effective"]["budgets"].is_object() {
            writeln!(
                out,
                "Budgets would have stopped {}; saved: {}.",
                plural(s.sessions_stopped_by_budgets, "session"),
                savings_text(&s.saved_by_budgets, s.tokens.is_some())
            )?;
        }
        if s.sessions_closed_early > 0 {
            let (was, its) = if s.sessions_closed_early == 1 {
                ("was", "its")
            } else {
                ("were", "their")
            };
            writeln!(
                out,
                "{} {was} closed before {its} end to stay within the live memory budget (--max-live-bytes); {its} later calls were checked without {its} earlier history.",
                plural(s.sessions_closed_early, "session"),
            )?;
        }
        let secs = self.elapsed.as_secs_f64();
        writeln!(
            out,
            "Read {} ({}) in {:.2} s{}.",
            bytes_text(s.bytes),
            plural(s.lines, "line"),
            secs,
            if secs > 0.0 {
                format!(", {}/s", bytes_text((s.bytes as f64 / secs) as u64))
            } else {
                String::new()
            }
        )?;
        if let Some(html) = html {
            writeln!(out, "HTML report: {}", html.display())?;
        }
        Ok(())
    }

    fn write_loops(&self, out: &mut impl Write) -> io::Result<()> {
        let with: Vec<_> = self
            .sessions()
            .filter(|(_, s)| !s.loops.is_empty())
            .collect();
        if with.is_empty() {
            writeln!(
                out,
                "No loops: the guard would not have stepped in on any of the {} ({} read).",
                plural(self.summary.sessions, "session"),
                plural(self.summary.calls, "call")
            )?;
            return writeln!(out);
        }
        writeln!(
            out,
            "Loops found ({} in {} of {}):",
            self.summary.loops,
            with.len(),
            plural(self.summary.sessions, "session")
        )?;
        for (file, session) in with {
            writeln!(out)?;
            writeln!(out, "  {}  session {}", file.file, session.session)?;
            let usage_known = session.usage.is_some();
            for l in &session.loops {
                let tools = match &l.paired_tool {
                    Some(p) if l.tools.len() <= 2 => format!("{} <-> {p}", l.tool),
                    _ => l.tools.join(", "),
                };
                writeln!(
                    out,
                    "    run {}  {}  (calls {}-{}; {})",
                    l.run.as_deref().unwrap_or("(none)"),
                    tools,
                    l.calls[0],
                    l.calls[1],
                    l.detectors
                        .iter()
                        .map(|d| d.as_str())
                        .collect::<Vec<_>>()
                        .join(", ")
                )?;
                if let Some(args) = &l.args {
                    writeln!(out, "      called with {}", shorten(args, 100))?;
                }
                if let Some(outcome) = &l.outcome {
                    writeln!(out, "      returned    {}", shorten(outcome, 100))?;
                }
                let steps = [
                    ("warning", &l.first_warning),
                    ("block", &l.first_block),
                    ("escalation", &l.escalation),
                    ("stop", &l.stop),
                ];
                for (what, mark) in steps {
                    if let Some(m) = mark {
                        let at = match m.message_index {
                            Some(n) => format!("message {n:>5} after call {}", m.call_index),
                            None => format!("call {:>5}", m.call_index),
                        };
                        writeln!(
                            out,
                            "      {what:<10} {:<25} {at} (line {:>6})  count {}",
                            m.detector.as_str(),
                            m.line,
                            m.count
                        )?;
                    }
                }
                if let Some(text) = &l.text {
                    let share = match (l.tokens, l.token_share) {
                        (Some(t), Some(share)) => format!(
                            "; {} tokens while it went on, {:.0}% of the session's",
                            count_text(t),
                            share * 100.0
                        ),
                        _ => String::new(),
                    };
                    let [first, last] = l.messages.unwrap_or_default();
                    writeln!(
                        out,
                        "      repeated   \"{}\" (messages {first}-{last}{share})",
                        shorten(&text.split_whitespace().collect::<Vec<_>>().join(" "), 90)
                    )?;
                }
                if l.messages.is_some() && l.first_block.is_some() {
                    // A loop without tool calls: no call to repeat; its block stops the run.
                    writeln!(
                        out,
                        "      saved: {} (the run would have been stopped)",
                        savings_text(&l.saved, usage_known)
                    )?;
                } else if l.first_block.is_some() || l.stopped_run {
                    let stop = if l.stopped_run {
                        " (the run would have been stopped)"
                    } else {
                        ""
                    };
                    writeln!(
                        out,
                        "      after the block the agent repeated the call {} more time{}; saved: {}{stop}",
                        l.repeats_after_block,
                        if l.repeats_after_block == 1 { "" } else { "s" },
                        savings_text(&l.saved, usage_known)
                    )?;
                }
            }
        }
        writeln!(out)
    }

    /// Per session: what it spent, how much of it inside loops, and where a budget would
    /// have stopped it with what that would have saved. Only when a transcript records
    /// usage or a budget stops something.
    fn write_spend(&self, out: &mut impl Write) -> io::Result<()> {
        let rows: Vec<_> = self
            .sessions()
            .filter(|(_, s)| s.usage.is_some() || s.budget_stop.is_some())
            .collect();
        if rows.is_empty() {
            return Ok(());
        }
        let budgets = self.config["effective"]["budgets"].is_object();
        writeln!(
            out,
            "Spend per session (tokens every response processed; cost from the transcript or the price table){}:",
            if budgets {
                ", and where the budgets would have stopped it"
            } else {
                ""
            }
        )?;
        let width = rows
            .iter()
            .map(|(f, s)| f.file.chars().count() + s.session.chars().count() + 2)
            .max()
            .unwrap_or(7)
            .clamp(7, 60);
        write!(
            out,
            "  {:<width$} {:>6} {:>8} {:>9} {:>8} {:>9}",
            "SESSION", "CALLS", "TOKENS", "COST", "IN LOOPS", "LOOP COST"
        )?;
        if budgets {
            write!(out, "  {:<40} SAVED", "STOPPED BY")?;
        }
        writeln!(out)?;
        for (file, s) in rows {
            let tokens =
                |u: Option<Usage>| u.map_or_else(|| "unknown".to_owned(), |u| count_text(u.tokens));
            let cost = |u: Option<Usage>| {
                u.and_then(|u| u.cost)
                    .map_or_else(|| "unknown".to_owned(), |c| format!("${c:.2}"))
            };
            write!(
                out,
                "  {:<width$} {:>6} {:>8} {:>9} {:>8} {:>9}",
                shorten(&format!("{}  {}", file.file, s.session), width),
                s.calls,
                tokens(s.usage),
                cost(s.usage),
                tokens(s.loop_spend),
                cost(s.loop_spend),
            )?;
            if budgets {
                match &s.budget_stop {
                    Some(stop) => write!(
                        out,
                        "  {:<40} {}",
                        stop_text(stop),
                        savings_text(&stop.saved, s.usage.is_some())
                    )?,
                    None => write!(out, "  {:<40} -", "not stopped")?,
                }
            }
            writeln!(out)?;
        }
        writeln!(out)
    }

    /// Agent trees and run storms: a row per root with the tree's totals, then its
    /// sessions indented by depth (the first [`TREE_ROWS`]), and the children that
    /// repeated a task or a failure.
    fn write_trees(&self, out: &mut impl Write) -> io::Result<()> {
        if self.trees.is_empty() {
            return Ok(());
        }
        writeln!(
            out,
            "Agent trees and run storms (sessions linked to the run that spawned them):"
        )?;
        let width = 48;
        writeln!(
            out,
            "  {:<width$} {:>8} {:>5} {:>5} {:>6} {:>8} {:>8} {:>6} {:>8} {:>9}",
            "ROOT",
            "SESSIONS",
            "DEPTH",
            "RUNS",
            "CALLS",
            "FINDINGS",
            "CRITICAL",
            "STORMS",
            "TOKENS",
            "COST"
        )?;
        for t in &self.trees {
            let root = match &t.file {
                Some(file) => format!("{file}  {}", t.root),
                None => format!("{} (not scanned)", t.root),
            };
            writeln!(
                out,
                "  {:<width$} {:>8} {:>5} {:>5} {:>6} {:>8} {:>8} {:>6} {:>8} {:>9}",
                shorten(&root, width),
                t.sessions,
                t.depth,
                t.totals.runs,
                t.totals.calls,
                t.totals.findings,
                t.totals.critical,
                t.totals.run_storms,
                t.totals
                    .tokens
                    .map_or_else(|| "unknown".to_owned(), count_text),
                t.totals
                    .cost
                    .map_or_else(|| "unknown".to_owned(), |c| format!("${c:.2}")),
            )?;
            for n in t.nodes.iter().skip(1).take(TREE_ROWS) {
                let indent = "  ".repeat((n.depth as usize).min(8));
                let spawned = n
                    .parent_run
                    .as_deref()
                    .map_or_else(String::new, |r| format!(" (from {r})"));
                let flagged = match (n.totals.findings, n.totals.critical) {
                    (0, _) => String::new(),
                    (f, 0) => format!(", {}", plural(f, "finding")),
                    (f, c) => format!(", {} ({c} critical)", plural(f, "finding")),
                };
                writeln!(
                    out,
                    "    {indent}└ {}{spawned}: {}, {} ({} failed){flagged}",
                    shorten(&n.session, 60),
                    plural(n.totals.runs, "run"),
                    plural(n.totals.calls, "call"),
                    n.totals.failed,
                )?;
            }
            let more = (t.nodes.len().saturating_sub(1 + TREE_ROWS)) as u64 + t.nodes_left_out;
            if more > 0 {
                writeln!(out, "      … {} more", plural(more, "session"))?;
            }
            for (what, repeats) in [
                ("given the same task", &t.repeated_tasks),
                ("failing the same way", &t.repeated_failures),
            ] {
                for r in repeats {
                    let text = shorten(&r.what.replace('\n', " "), 80);
                    writeln!(out, "      {} children {what}: {text}", r.children)?;
                }
            }
        }
        writeln!(out)
    }

    fn write_files(&self, out: &mut impl Write) -> io::Result<()> {
        let read: Vec<&FileScan> = self
            .files
            .iter()
            .filter(|f| matches!(f.status, FileStatus::Scanned | FileStatus::Unread { .. }))
            .collect();
        if read.is_empty() {
            return Ok(());
        }
        let width = read
            .iter()
            .map(|f| f.file.chars().count())
            .max()
            .unwrap_or(4)
            .clamp(4, 72);
        writeln!(
            out,
            "{:<width$}  {:<18} {:<13} {:>8} {:>8} {:>6} {:>6} {:>6} {:>8}",
            "FILE", "FORMAT", "STATUS", "SESSIONS", "CALLS", "FAILED", "WARN", "BLOCK", "SKIPPED"
        )?;
        for f in read {
            let sessions = f.sessions.len();
            let calls = f.calls();
            let warned: u64 = f.sessions.iter().map(|s| s.warned_calls).sum();
            let blocked: u64 = f.sessions.iter().map(|s| s.blocked_calls).sum();
            let status = match f.status {
                FileStatus::Unread { .. } => "UNREAD",
                _ if calls == 0 => "no tool calls",
                _ => "scanned",
            };
            writeln!(
                out,
                "{:<width$}  {:<18} {:<13} {:>8} {:>8} {:>6} {:>6} {:>6} {:>8}",
                shorten(&f.file, width),
                f.format.map_or("-", |f| f.as_str()),
                status,
                sessions,
                calls,
                f.read.failed_results(),
                warned,
                blocked,
                f.read.skipped_lines()
            )?;
        }
        Ok(())
    }

    fn write_problems(&self, out: &mut impl Write) -> io::Result<()> {
        let not_scanned: Vec<&FileScan> = self
            .files
            .iter()
            .filter(|f| !matches!(f.status, FileStatus::Scanned))
            .collect();
        if !not_scanned.is_empty() {
            writeln!(out)?;
            writeln!(out, "Files not scanned, or read as nothing:")?;
            for f in not_scanned {
                let why = match &f.status {
                    FileStatus::Unread { reason } => format!("UNREAD, no call read: {reason}"),
                    FileStatus::Companion { kind } => {
                        format!(
                            "companion file ({}), read with its transcript",
                            kind.as_str()
                        )
                    }
                    FileStatus::UnknownFormat { reason } => format!("unknown format: {reason}"),
                    FileStatus::Unreadable { error } => format!("unreadable: {error}"),
                    FileStatus::Skipped { reason } => format!("skipped: {reason}"),
                    _ => "not scanned".into(),
                };
                writeln!(out, "  {}  {why}", f.file)?;
            }
        }
        if self.summary.older_files > 0 {
            writeln!(
                out,
                "  ({} in the directories and databases {} older than --since)",
                plural(self.summary.older_files, "transcript"),
                if self.summary.older_files == 1 {
                    "was"
                } else {
                    "were"
                }
            )?;
        }
        if self.ignored_files > 0 {
            writeln!(
                out,
                "  ({} in the directories {} not considered: not *.jsonl, *.json, *.traj or an OpenClaw archive)",
                plural(self.ignored_files, "other file"),
                if self.ignored_files == 1 { "was" } else { "were" }
            )?;
        }
        let with_skips: Vec<&FileScan> = self
            .files
            .iter()
            .filter(|f| !f.read.skipped.is_empty() || f.read.repaired > 0)
            .collect();
        if !with_skips.is_empty() {
            writeln!(out)?;
            writeln!(out, "Lines not used:")?;
            for f in with_skips {
                for skip in &f.read.skipped {
                    writeln!(
                        out,
                        "  {}  {} line{} {} ({}), first at line {}{}",
                        f.file,
                        skip.count,
                        if skip.count == 1 { "" } else { "s" },
                        skip.reason.as_str(),
                        skip.reason.describe(),
                        skip.first_line,
                        skip.example
                            .as_deref()
                            .map_or(String::new(), |e| format!(": {e}"))
                    )?;
                }
                if f.read.repaired > 0 {
                    writeln!(
                        out,
                        "  {}  {} repaired (invalid UTF-8 or split surrogates replaced) and used",
                        f.file,
                        plural(f.read.repaired, "line")
                    )?;
                }
            }
        }
        Ok(())
    }
}

/// The config as the report shows it, and a sentence for people.
fn describe_config(
    source: &ConfigSource,
    config: &ConfigSet,
    agent: Option<&str>,
) -> (serde_json::Value, String) {
    let c = config.for_agent(agent);
    let thresholds = json!({
        "detectors_enabled": c.detectors_enabled(),
        "history_size": c.history_size(),
        "warning_threshold": c.warning_threshold(),
        "critical_threshold": c.critical_threshold(),
        "global_circuit_breaker_threshold": c.global_circuit_breaker_threshold(),
        "unknown_tool_threshold": c.unknown_tool_threshold(),
        "post_compaction_window": c.post_compaction_window(),
        "budgets": c.budgets(),
    });
    let numbers = format!(
        "warning at {}, block at {}, global breaker at {}, unknown tool at {}, history {} calls per run, post-compaction window {}",
        c.warning_threshold(),
        c.critical_threshold(),
        c.global_circuit_breaker_threshold(),
        c.unknown_tool_threshold(),
        c.history_size(),
        c.post_compaction_window()
    );
    let (file, note) = match source {
        ConfigSource::Defaults => (
            None,
            format!("none given, so detection is on with the default thresholds ({numbers})"),
        ),
        ConfigSource::File(path) => {
            let on = if c.detectors_enabled() {
                "detection on"
            } else {
                "rolling detectors OFF in this config (only the post-compaction guard runs)"
            };
            (
                Some(path.clone()),
                format!(
                    "{path}{}: {on} ({numbers})",
                    agent.map_or(String::new(), |a| format!(" for agent {a}"))
                ),
            )
        }
    };
    let value = json!({
        "source": match source { ConfigSource::Defaults => "defaults", ConfigSource::File(_) => "file" },
        "file": file,
        "agent": agent,
        "note": note,
        "effective": thresholds,
    });
    (value, note)
}

/// Saved calls, tokens and cost; `usage_known` says whether the transcripts record usage
/// (then a missing token count is 0, not unknown).
pub fn savings_text(s: &Savings, usage_known: bool) -> String {
    let mut parts = vec![plural(s.calls, "call")];
    match s.tokens {
        Some(t) => parts.push(format!("{} tokens", count_text(t))),
        None if usage_known => parts.push("0 tokens".into()),
        None => parts.push("tokens unknown (no usage in the transcript)".into()),
    }
    if let Some(c) = s.cost {
        parts.push(format!("${c:.2}"));
    }
    parts.join(", ")
}

/// Where a budget stops a session: `run_budget at call 12`, `… at message 5 after call 3`.
pub fn stop_text(stop: &BudgetStop) -> String {
    match stop.message_index {
        Some(m) => format!(
            "{} at message {m} after call {}",
            stop.detector.as_str(),
            stop.call_index
        ),
        None => format!("{} at call {}", stop.detector.as_str(), stop.call_index),
    }
}

/// Tokens and cost for people: `1.2M tokens, $0.40`; `unknown` parts where the
/// transcript records no usage (or no cost, and the price table knows no model).
pub fn spend_text(usage: Option<Usage>) -> String {
    match usage {
        None => "tokens and cost unknown".to_owned(),
        Some(u) => format!(
            "{} tokens, {}",
            count_text(u.tokens),
            u.cost
                .map_or_else(|| "cost unknown".to_owned(), |c| format!("${c:.2}"))
        ),
    }
}

/// `1 call`, `2 calls`.
pub fn plural(n: u64, word: &str) -> String {
    if n == 1 {
        format!("1 {word}")
    } else {
        format!("{n} {word}s")
    }
}

/// `1234567` as `1.2M`.
pub fn count_text(n: u64) -> String {
    match n {
        0..=9_999 => n.to_string(),
        10_000..=999_999 => format!("{:.1}k", n as f64 / 1e3),
        _ => format!("{:.1}M", n as f64 / 1e6),
    }
}

/// Bytes for people.
pub fn bytes_text(n: u64) -> String {
    match n {
        0..=9_999 => format!("{n} B"),
        10_000..=9_999_999 => format!("{:.1} kB", n as f64 / 1e3),
        10_000_000..=9_999_999_999 => format!("{:.1} MB", n as f64 / 1e6),
        _ => format!("{:.2} GB", n as f64 / 1e9),
    }
}

/// Sessions of a tree listed under its root in the terminal table.
const TREE_ROWS: usize = 12;

/// `text` cut in the middle to `width` characters.
fn shorten(text: &str, width: usize) -> String {
    let n = text.chars().count();
    if n <= width {
        return text.to_owned();
    }
    let keep = width.saturating_sub(1);
    let head: String = text.chars().take(keep / 2).collect();
    let tail: String = text.chars().skip(n - (keep - keep / 2)).collect();
    format!("{head}…{tail}")
}

#[cfg(test)]
mod tests {
    use super::*;
    use loopguard_transcripts::{scan_bytes, ScanOptions};

    fn report(name: &str) -> Report {
        let fixture = Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("tests/fixtures/scan")
            .join(name);
        let bytes = std::fs::read(fixture).unwrap();
        let options = ScanOptions::default();
        let scan = scan_bytes(&bytes, None, name, &options).unwrap();
        let unknown = FileScan::not_scanned(
            "notes.txt",
            FileStatus::UnknownFormat {
                reason: "not JSON or JSON Lines".into(),
            },
            5,
        );
        Report::new(
            vec![scan, unknown],
            3,
            ConfigSource::Defaults,
            &options,
            Duration::from_millis(5),
        )
    }

    #[test]
    fn human_report_names_loops_files_and_problems() {
        let report = report("openclaw-loop.jsonl");
        let mut out = Vec::new();
        report
            .write_human(&mut out, Some(Path::new("r.html")))
            .unwrap();
        let text = String::from_utf8(out).unwrap();
        for needle in [
            "config: none given, so detection is on with the default thresholds",
            "Loops found (1 in 1 of 1 session):",
            "openclaw-loop.jsonl  session demo-loop",
            "run turn-1  read  (calls 11-23; generic_repeat)",
            "warning    generic_repeat            call    11 (line     24)  count 10",
            "block      generic_repeat            call    21 (line     44)  count 20",
            "escalation generic_repeat            call    22 (line     46)  count 21",
            "repeated the call 2 more times; saved: 3 calls, 6150 tokens, $0.01",
            "notes.txt  unknown format: not JSON or JSON Lines",
            "3 other files in the directories were not considered",
            "2 lines off_branch (not on the active branch), first at line 50",
            "Total: 2 files (1 scanned), 1 session, 2 runs,",
            "blocked in 1 loop (1 session with blocks, 0 compaction aborts).",
            "HTML report: r.html",
            "Spend per session (tokens every response processed; cost from the transcript or the price table):",
            "Spent inside loops: 26.6k tokens",
        ] {
            assert!(text.contains(needle), "missing {needle:?} in:\n{text}");
        }
        assert_eq!(report.unread_files(), 1);
        assert_eq!(report.findings_at(Level::Critical), 1);
        assert_eq!(report.findings_at(Level::Warning), 2);
    }

    /// 35 identical failing calls: the loop's table shows its warning, block, escalation
    /// and the global breaker that stops the run, once, and the tokens it saved.
    #[test]
    fn a_loop_shows_every_step_up_to_the_stop() {
        let mut events = String::new();
        for i in 0..35 {
            events.push_str(&format!(
                "{{\"type\":\"call\",\"session\":\"s\",\"call_id\":\"c{i}\",\"tool\":\"read\",\"args\":{{\"path\":\"/x\"}}}}\n{{\"type\":\"result\",\"session\":\"s\",\"call_id\":\"c{i}\",\"error\":\"ENOENT\"}}\n"
            ));
        }
        let options = ScanOptions::default();
        let scan = scan_bytes(events.as_bytes(), None, "events.jsonl", &options).unwrap();
        let report = Report::new(
            vec![scan],
            0,
            ConfigSource::Defaults,
            &options,
            Duration::from_millis(1),
        );
        let mut out = Vec::new();
        report.write_human(&mut out, None).unwrap();
        let text = String::from_utf8(out).unwrap();
        for needle in [
            "Loops found (1 in 1 of 1 session):",
            "(calls 11-35; generic_repeat, global_circuit_breaker)",
            "warning    generic_repeat            call    11",
            "block      generic_repeat            call    21",
            "escalation generic_repeat            call    22",
            "stop       global_circuit_breaker    call    31",
            "(the run would have been stopped)",
            "tokens unknown (no usage in the transcript)",
        ] {
            assert!(text.contains(needle), "missing {needle:?} in:\n{text}");
        }
    }

    #[test]
    fn json_document_lists_every_file_and_session() {
        let report = report("openclaw-loop.jsonl");
        let doc = report.to_json();
        assert_eq!(doc["schema"], SCHEMA);
        assert_eq!(doc["sessions"][0]["file"], "openclaw-loop.jsonl");
        assert_eq!(doc["sessions"][0]["format"], "openclaw");
        assert_eq!(doc["sessions"][0]["findings"][1]["level"], "critical");
        assert_eq!(doc["files"][1]["status"], "unknown_format");
        assert_eq!(doc["summary"]["unknown_format_files"], 1);
        assert_eq!(doc["summary"]["saved"]["cost"], 0.0075);
    }

    #[test]
    fn number_and_text_helpers() {
        assert_eq!(count_text(999), "999");
        assert_eq!(count_text(12_345), "12.3k");
        assert_eq!(count_text(2_500_000), "2.5M");
        assert_eq!(bytes_text(16_600_000), "16.6 MB");
        assert_eq!(shorten("abcdefghij", 5), "ab…ij");
        assert_eq!(shorten("abc", 5), "abc");
        let s = Savings {
            calls: 1,
            tokens: None,
            cost: None,
        };
        assert_eq!(
            savings_text(&s, false),
            "1 call, tokens unknown (no usage in the transcript)"
        );
        assert_eq!(savings_text(&s, true), "1 call, 0 tokens");
    }
}
