//! `loopguard replay`: the SPEC §7 contract.

use std::fs::File;
use std::io::{self, BufReader, BufWriter};
use std::path::PathBuf;

use clap::Args;
use loopguard_events::{replay_lines, LineReader, Replayer, DEFAULT_MAX_LINE};

use crate::output::{fatal, load_config};
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
/// (unreadable input or invalid config: one line on stderr, nothing on stdout).
#[derive(Args, Debug)]
#[command(after_help = "Examples:\n  \
loopguard replay events.jsonl\n  \
loopguard replay --config openclaw.json5 --agent worker events.jsonl\n  \
producer | loopguard replay - | jq 'select(.verdict == \"block\")'\n\n\
Without --config the defaults apply: rolling detectors off, post-compaction guard on.")]
pub struct ReplayArgs {
    /// OpenClaw-style JSON5 config; its tools.loopDetection blocks apply.
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
    let config = match load_config(args.config.as_deref()) {
        Ok(c) => c,
        Err(message) => return fatal(&message.replace('\n', "; ")),
    };
    let mut replayer = Replayer::new(config, args.agent);
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
