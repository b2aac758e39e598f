//! `loopguard replay`: the SPEC §7 contract.

use std::fs::File;
use std::io::{self, BufReader, BufWriter, IsTerminal};
use std::path::PathBuf;

use clap::Args;
use loopguard_events::{replay_lines, LineReader, Replayer, DEFAULT_MAX_LINE};

use crate::output::fatal;
use crate::startup::{self, config_error_one_line};
use crate::{EXIT_FATAL, EXIT_INVALID_LINES, EXIT_OK};

/// Replay tool-call events through the guard and print its answer to each.
///
/// Reads events, one JSON object per line (call, result, compaction), and writes one JSON
/// answer per line, in order: the verdict on each call, whether each result was recorded
/// (and whether it aborted the run), the guard window of each compaction, or an error for
/// a line that is not a valid event. The output format is a contract; see SPEC §7.
///
/// Exit status: 0 when every line was valid, 2 when some lines were invalid (they are
/// answered with {"seq": N, "error": ...} and the replay goes on), 1 on a fatal error
/// (unreadable input or invalid config: one line on stderr, nothing on stdout; for a
/// config, its first problem as FILE:LINE:COLUMN, and `loopguard config check FILE` lists
/// them all).
#[derive(Args, Debug)]
#[command(after_help = "Examples:\n  \
loopguard replay events.jsonl\n  \
loopguard replay --config openclaw.json5 --agent worker events.jsonl\n  \
producer | loopguard replay - | jq 'select(.verdict == \"block\")'\n\n\
Without a config file (--config or LOOPGUARD_CONFIG), SPEC §7's defaults apply: rolling \
detectors off, post-compaction guard on. replay is the contract's test harness; the \
commands that guard live calls (serve, hook, mcp-proxy) turn detection on instead. On a \
terminal, replay says on stderr which config it runs with.")]
pub struct ReplayArgs {
    /// OpenClaw-style JSON5 config; its tools.loopDetection blocks apply. Without it, the
    /// file LOOPGUARD_CONFIG names; without either, SPEC §7's defaults.
    #[arg(long, value_name = "FILE")]
    config: Option<PathBuf>,
    /// Agent whose config applies to events that name none (an event's own agent wins).
    #[arg(long, value_name = "ID")]
    agent: Option<String>,
    /// Longest input line read; longer lines are answered with an error and skipped.
    #[arg(long, value_name = "BYTES", default_value_t = DEFAULT_MAX_LINE)]
    max_line_bytes: usize,
    /// Events file (JSON Lines); `-` or nothing reads stdin.
    #[arg(value_name = "FILE|-")]
    input: Option<PathBuf>,
}

pub fn run(args: ReplayArgs) -> u8 {
    let loaded = match startup::load("replay", args.config) {
        Ok(loaded) => loaded,
        Err(e) => return config_error_one_line(&e),
    };
    // stdout and a piped stderr are contracts; a person at a terminal is told what runs.
    if io::stderr().is_terminal() {
        eprintln!(
            "{}",
            startup::startup_line("replay", &loaded, "memory (this replay only)")
        );
        for warning in startup::config_warnings(&loaded) {
            eprintln!("loopguard replay: {warning}");
        }
        if let Some(notice) = startup::detection_off_notice(&loaded) {
            eprintln!("loopguard replay: {notice}");
        }
    }
    let from_stdin = args.input.as_deref().is_none_or(|p| p.as_os_str() == "-");
    if from_stdin && io::stdin().is_terminal() {
        eprintln!(
            "loopguard replay: reading events from the terminal, one JSON object per line \
(Ctrl-D ends); give a file to replay it, see loopguard replay --help"
        );
    }
    let mut replayer = Replayer::new(loaded.config, args.agent);
    let writer = BufWriter::with_capacity(1 << 16, io::stdout().lock());
    let max = args.max_line_bytes;
    let replayed = match args.input.as_deref() {
        Some(p) if p.as_os_str() != "-" => match File::open(p) {
            // A file can be read twice: an over-long line is skipped without being held.
            Ok(f) => LineReader::seekable(BufReader::with_capacity(1 << 16, f), max)
                .and_then(|lines| replay_lines(&mut replayer, lines, writer)),
            Err(e) => return fatal(&format!("cannot read {}: {e}", p.display())),
        },
        _ => {
            let stdin = BufReader::with_capacity(1 << 16, io::stdin().lock());
            replay_lines(&mut replayer, LineReader::new(stdin, max), writer)
        }
    };
    match replayed {
        Ok(summary) if summary.invalid > 0 => EXIT_INVALID_LINES,
        Ok(_) => EXIT_OK,
        // A closed pipe (`| head`) is not a failure of the replay.
        Err(e) if e.kind() == io::ErrorKind::BrokenPipe => EXIT_OK,
        Err(e) => {
            let _ = fatal(&format!("replay failed: {e}"));
            EXIT_FATAL
        }
    }
}
