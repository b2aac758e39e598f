//! `loopguard sessions list|show|reset`: what the guard keeps, per session and run.
//!
//! Two places hold sessions: the SQLite file that `loopguard serve` and the agent hooks
//! share (read and written here in one short transaction, the way a hook does, so it is
//! safe while they run), and a running server, asked over HTTP (`--url`). Both answer
//! with the same view, `GET /v1/sessions/{id}`'s (`loopguard_server::SessionView`): each
//! run's history, post-compaction guard, why it stopped, and its last calls with what the
//! guard did to them. Human output on a terminal, JSON when piped or with `--json`.
//!
//! Listing needs the file: the server has no endpoint that enumerates sessions (a Redis
//! store would have to scan its whole keyspace for it).

use std::fmt::Write as _;
use std::path::{Path, PathBuf};

use clap::{Args, Subcommand};
use http_body_util::{BodyExt, Full};
use hyper::body::Bytes;
use loopguard::{Clock, SystemClock};
use loopguard_hooks::store::HookDb;
use loopguard_server::SessionView;
use loopguard_store::RunSnapshot;
use serde_json::{json, Value};

use crate::output::{fatal, wants_json};
use crate::{EXIT_FATAL, EXIT_OK};

/// A command line that cannot be served (clap's own status for usage errors).
const EXIT_USAGE: u8 = 2;

/// See and reset what the guard keeps per session and run.
#[derive(Subcommand, Debug)]
pub enum SessionsCommand {
    /// List the sessions in the database: runs, stopped runs, last activity.
    #[command(after_help = "Examples:\n  \
loopguard sessions list\n  \
loopguard sessions list --db /var/lib/loopguard/loopguard.db --json | jq '.sessions[].session'")]
    List(ListArgs),
    /// Show one session: per run, its history, guard, stop, and last calls with verdicts.
    ///
    /// `recent` lists a run's last calls, newest first: the tool, whether the guard blocked
    /// it, its outcome and how many calls with the same tool and arguments the history
    /// holds. A run that stopped (circuit breaker, a loop that survived a compaction)
    /// blocks every later call until it ends.
    #[command(after_help = "Examples:\n  \
loopguard sessions show 3f2c…                      # a Claude Code session id\n  \
loopguard sessions show s1 --url http://127.0.0.1:7671")]
    Show(ShowArgs),
    /// Forget a session, or one run of it: its next call starts with a clean history.
    #[command(after_help = "Examples:\n  \
loopguard sessions reset 3f2c…                     # the whole session\n  \
loopguard sessions reset s1 --run r1 --url http://127.0.0.1:7671")]
    Reset(ResetArgs),
}

/// Where the sessions are.
#[derive(Args, Debug)]
pub struct Place {
    /// The SQLite database (default: the one `loopguard serve` and the hooks use).
    #[arg(long, value_name = "PATH", env = "LOOPGUARD_DB")]
    db: Option<PathBuf>,
    /// A running `loopguard serve` instead of the database (http://HOST:PORT; its token
    /// from LOOPGUARD_TOKEN).
    #[arg(long, value_name = "URL")]
    url: Option<String>,
    /// Print JSON even on a terminal.
    #[arg(long)]
    json: bool,
}

#[derive(Args, Debug)]
pub struct ListArgs {
    /// The SQLite database (default: the one `loopguard serve` and the hooks use).
    #[arg(long, value_name = "PATH", env = "LOOPGUARD_DB")]
    db: Option<PathBuf>,
    /// Print JSON even on a terminal.
    #[arg(long)]
    json: bool,
    /// Not for `list` (a server cannot list its sessions); accepted only to say so.
    #[arg(long, value_name = "URL", hide = true)]
    url: Option<String>,
}

#[derive(Args, Debug)]
pub struct ShowArgs {
    /// The session id.
    #[arg(value_name = "SESSION")]
    session: String,
    #[command(flatten)]
    place: Place,
}

#[derive(Args, Debug)]
pub struct ResetArgs {
    /// The session id.
    #[arg(value_name = "SESSION")]
    session: String,
    /// Only this run of it.
    #[arg(long, value_name = "RUN")]
    run: Option<String>,
    #[command(flatten)]
    place: Place,
}

pub fn run(cmd: SessionsCommand) -> u8 {
    let result = match cmd {
        SessionsCommand::List(args) => list(args),
        SessionsCommand::Show(args) => show(args),
        SessionsCommand::Reset(args) => reset(args),
    };
    result.unwrap_or_else(|message| fatal(&message))
}

fn db_path(db: Option<PathBuf>) -> Result<PathBuf, String> {
    db.map_or_else(loopguard_store::default_db_path, Ok)
        .map_err(|_| "no default database location: give --db PATH (or LOOPGUARD_DB)".into())
}

/// Runs `f` in one transaction on the database, which must exist (reading must not
/// create it).
fn with_db<R>(
    path: &Path,
    f: impl FnOnce(
        &mut loopguard_hooks::store::HookTx<'_>,
    ) -> Result<R, loopguard_hooks::store::StoreError>,
) -> Result<Option<R>, String> {
    if !path.exists() {
        return Ok(None);
    }
    let mut db = HookDb::open(path).map_err(|e| e.to_string())?;
    let mut tx = db.begin(SystemClock.now_ms()).map_err(|e| e.to_string())?;
    let out = f(&mut tx).map_err(|e| e.to_string())?;
    for warning in tx.warnings() {
        eprintln!("loopguard sessions: {warning}");
    }
    tx.commit().map_err(|e| e.to_string())?;
    Ok(Some(out))
}

/// One line of `sessions list`.
#[derive(serde::Serialize)]
struct SessionLine {
    session: String,
    runs: usize,
    stopped_runs: usize,
    last_active_ms: u64,
}

fn list(args: ListArgs) -> Result<u8, String> {
    if let Some(url) = &args.url {
        eprintln!(
            "loopguard sessions list: error: --url {url}: a server cannot list its sessions \
(it has no endpoint for it: a Redis store would have to scan its whole keyspace). List them \
from its SQLite file where the server runs (loopguard sessions list --db PATH), or ask the \
server about one session: loopguard sessions show SESSION --url {url}"
        );
        return Ok(EXIT_USAGE);
    }
    let path = db_path(args.db)?;
    let runs = with_db(&path, |tx| tx.runs(None))?.unwrap_or_default();
    let mut sessions: Vec<SessionLine> = Vec::new();
    for (session, _, state) in &runs {
        if sessions.last().is_none_or(|s| s.session != *session) {
            sessions.push(SessionLine {
                session: session.clone(),
                runs: 0,
                stopped_runs: 0,
                last_active_ms: 0,
            });
        }
        let line = sessions.last_mut().expect("pushed");
        line.runs += 1;
        line.stopped_runs += usize::from(state.stop().is_some());
        line.last_active_ms = line.last_active_ms.max(state.last_active().get());
    }
    sessions.sort_by(|a, b| {
        b.last_active_ms
            .cmp(&a.last_active_ms)
            .then_with(|| a.session.cmp(&b.session))
    });
    if wants_json(args.json) {
        print_json(&json!({"database": path.display().to_string(), "sessions": sessions}));
        return Ok(EXIT_OK);
    }
    if sessions.is_empty() {
        println!("no sessions in {}", path.display());
        return Ok(EXIT_OK);
    }
    let width = sessions
        .iter()
        .map(|s| s.session.chars().count())
        .max()
        .unwrap_or(7)
        .clamp(7, 60);
    println!(
        "{:<width$}  {:>4}  {:>7}  LAST ACTIVE",
        "SESSION", "RUNS", "STOPPED"
    );
    let now = SystemClock.now_ms();
    for s in &sessions {
        println!(
            "{:<width$}  {:>4}  {:>7}  {}",
            s.session,
            s.runs,
            s.stopped_runs,
            ago(now.get(), s.last_active_ms)
        );
    }
    println!(
        "{} session{} in {}",
        sessions.len(),
        plural(sessions.len()),
        path.display()
    );
    Ok(EXIT_OK)
}

fn show(args: ShowArgs) -> Result<u8, String> {
    let view: Value = match &args.place.url {
        Some(url) => {
            let (status, body) = http(
                url,
                hyper::Method::GET,
                &format!("/v1/sessions/{}", encode(&args.session)),
                None,
            )?;
            if status == 404 {
                return Ok(not_found(&args.session, url));
            }
            check_status(status, &body)?;
            body
        }
        None => {
            let path = db_path(args.place.db)?;
            let runs = with_db(&path, |tx| tx.runs(Some(&args.session)))?.unwrap_or_default();
            if runs.is_empty() {
                return Ok(not_found(&args.session, &path.display().to_string()));
            }
            let mut snapshots: Vec<RunSnapshot> = runs
                .into_iter()
                .map(|(_, run, state)| RunSnapshot {
                    run: (!run.is_empty()).then_some(run),
                    state,
                })
                .collect();
            // Most recently active first, as the server lists them.
            snapshots.sort_by_key(|s| std::cmp::Reverse(s.state.last_active()));
            let state = with_db(&path, |tx| tx.session_state(&args.session))?.flatten();
            let view = SessionView::new(args.session.clone(), &snapshots)
                .with_session_state(state.as_ref());
            serde_json::to_value(view).map_err(|e| e.to_string())?
        }
    };
    if wants_json(args.place.json) {
        print_json(&view);
    } else {
        print!("{}", human_session(&view, SystemClock.now_ms().get()));
    }
    Ok(EXIT_OK)
}

fn reset(args: ResetArgs) -> Result<u8, String> {
    let (removed, place) = match &args.place.url {
        Some(url) => {
            let (status, body) = match &args.run {
                Some(run) => http(
                    url,
                    hyper::Method::POST,
                    "/v1/runs/end",
                    Some(json!({"session": args.session, "run": run})),
                )?,
                None => http(
                    url,
                    hyper::Method::DELETE,
                    &format!("/v1/sessions/{}", encode(&args.session)),
                    None,
                )?,
            };
            check_status(status, &body)?;
            let removed = match &args.run {
                Some(_) => usize::from(body["ended"].as_bool().unwrap_or(false)),
                None => body["ended_runs"].as_u64().unwrap_or(0) as usize,
            };
            (removed, url.clone())
        }
        None => {
            let path = db_path(args.place.db.clone())?;
            let removed = with_db(&path, |tx| match &args.run {
                Some(run) => tx.forget_run(&args.session, run).map(usize::from),
                None => tx.forget_session(&args.session),
            })?
            .unwrap_or(0);
            (removed, path.display().to_string())
        }
    };
    if wants_json(args.place.json) {
        print_json(&json!({"session": args.session, "run": args.run, "removed_runs": removed}));
    } else if removed == 0 {
        println!("nothing to reset: no such {} in {place}", what(&args));
    } else {
        println!(
            "reset {}: {removed} run{} forgotten in {place}",
            what(&args),
            plural(removed)
        );
    }
    Ok(EXIT_OK)
}

fn what(args: &ResetArgs) -> String {
    match &args.run {
        Some(run) => format!("run {run:?} of session {:?}", args.session),
        None => format!("session {:?}", args.session),
    }
}

fn not_found(session: &str, place: &str) -> u8 {
    eprintln!("loopguard sessions: no live session {session:?} in {place}");
    EXIT_FATAL
}

fn plural(n: usize) -> &'static str {
    if n == 1 {
        ""
    } else {
        "s"
    }
}

fn print_json(value: &impl serde::Serialize) {
    println!(
        "{}",
        serde_json::to_string_pretty(value).unwrap_or_default()
    );
}

/// `12s ago`, `5m ago`, `3h ago`, `2d ago`.
fn ago(now_ms: u64, then_ms: u64) -> String {
    let s = now_ms.saturating_sub(then_ms) / 1000;
    match s {
        0..60 => format!("{s}s ago"),
        60..3600 => format!("{}m ago", s / 60),
        3600..86_400 => format!("{}h ago", s / 3600),
        _ => format!("{}d ago", s / 86_400),
    }
}

/// A session view (as `GET /v1/sessions/{id}` answers) for people.
fn human_session(view: &Value, now_ms: u64) -> String {
    let mut out = String::new();
    let runs = view["runs"]
        .as_array()
        .map(Vec::as_slice)
        .unwrap_or_default();
    let _ = writeln!(
        out,
        "session {} ({} run{})",
        view["session"].as_str().unwrap_or("?"),
        runs.len(),
        plural(runs.len())
    );
    if let Some(tree) = view["tree"].as_object() {
        if let Some(root) = tree.get("root").and_then(Value::as_str) {
            let spawn = &tree["spawn"];
            let _ = writeln!(
                out,
                "sub-agent of the tree rooted at {root}: spawn {}{}",
                spawn["verdict"].as_str().unwrap_or("?"),
                match spawn["limit"].as_str() {
                    Some(limit) => format!(" ({limit} {})", spawn["count"]),
                    None => String::new(),
                }
            );
        }
        if let Some(c) = tree.get("counts").filter(|c| c.is_object()) {
            let _ = writeln!(
                out,
                "root of a tree: {} sub-agents ({} running, {} failed), depth {}; spawns warned {}, blocked {}",
                c["children"], c["running"], c["failed"], c["depth"], c["warned"], c["blocked"]
            );
        }
    }
    for run in runs {
        let h = &run["history"];
        let name = run["run"]
            .as_str()
            .map_or_else(|| "(no run)".to_owned(), |r| format!("run {r}"));
        let _ = writeln!(
            out,
            "\n{name}: last active {}; {} kept ({} with an outcome, {} pending, {} blocked)",
            ago(now_ms, run["last_active_ms"].as_u64().unwrap_or(0)),
            match h["records"].as_u64().unwrap_or(0) {
                1 => "1 call".to_owned(),
                n => format!("{n} calls"),
            },
            h["completed"],
            h["pending"],
            h["vetoes"]
        );
        if run["guard"]["armed"].as_bool() == Some(true) {
            let _ = writeln!(
                out,
                "  post-compaction guard armed: watching {} more outcomes",
                run["guard"]["remaining"]
            );
        }
        if let Some(stop) = run["stopped"].as_object() {
            let _ = writeln!(
                out,
                "  STOPPED by {} at {} ({}): every later call of this run is blocked; reset it with `loopguard sessions reset {} --run {}`",
                stop.get("detector").and_then(Value::as_str).unwrap_or("?"),
                stop.get("count").unwrap_or(&Value::Null),
                stop.get("tool").and_then(Value::as_str).unwrap_or("?"),
                view["session"].as_str().unwrap_or("?"),
                run["run"].as_str().unwrap_or("''"),
            );
        }
        let recent = run["recent"]
            .as_array()
            .map(Vec::as_slice)
            .unwrap_or_default();
        if !recent.is_empty() {
            let _ = writeln!(out, "  last calls, newest first:");
            for call in recent {
                let _ = writeln!(
                    out,
                    "    {:<8} {:<24} {:<8} {} identical in the history",
                    if call["blocked"].as_bool() == Some(true) {
                        "BLOCKED"
                    } else {
                        "allowed"
                    },
                    call["tool"].as_str().unwrap_or("?"),
                    call["outcome"].as_str().unwrap_or("?"),
                    call["repeats"]
                );
            }
        }
    }
    out
}

/// A path segment with everything but unreserved characters percent-encoded.
fn encode(segment: &str) -> String {
    let mut out = String::with_capacity(segment.len());
    for b in segment.bytes() {
        if b.is_ascii_alphanumeric() || b"-._~".contains(&b) {
            out.push(b as char);
        } else {
            let _ = write!(out, "%{b:02X}");
        }
    }
    out
}

fn check_status(status: u16, body: &Value) -> Result<(), String> {
    if (200..300).contains(&status) {
        return Ok(());
    }
    let why = body["error"]
        .as_str()
        .map_or_else(|| body.to_string(), str::to_owned);
    Err(format!("the server answered {status}: {why}"))
}

/// One request to a running server: status and JSON body.
fn http(
    base: &str,
    method: hyper::Method,
    path: &str,
    body: Option<Value>,
) -> Result<(u16, Value), String> {
    let base = base.trim_end_matches('/');
    let authority = base
        .strip_prefix("http://")
        .ok_or_else(|| {
            format!("--url {base}: give http://HOST:PORT (loopguard serve speaks plain HTTP)")
        })?
        .to_owned();
    let uri: hyper::Uri = format!("{base}{path}")
        .parse()
        .map_err(|e| format!("--url {base}: {e}"))?;
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .map_err(|e| e.to_string())?;
    runtime.block_on(async move {
        let stream = tokio::time::timeout(
            std::time::Duration::from_secs(10),
            tokio::net::TcpStream::connect(&authority),
        )
        .await
        .map_err(|_| format!("cannot reach {authority}: timed out"))?
        .map_err(|e| format!("cannot reach {authority}: {e}"))?;
        let (mut sender, conn) =
            hyper::client::conn::http1::handshake(hyper_util::rt::TokioIo::new(stream))
                .await
                .map_err(|e| format!("{authority}: {e}"))?;
        tokio::spawn(conn);
        let mut request = hyper::Request::builder()
            .method(method)
            .uri(uri)
            .header(hyper::header::HOST, &authority);
        if let Ok(token) = std::env::var("LOOPGUARD_TOKEN") {
            request = request.header(hyper::header::AUTHORIZATION, format!("Bearer {token}"));
        }
        let bytes = match body {
            Some(body) => {
                request = request.header(hyper::header::CONTENT_TYPE, "application/json");
                Bytes::from(body.to_string())
            }
            None => Bytes::new(),
        };
        let request = request.body(Full::new(bytes)).map_err(|e| e.to_string())?;
        let response = tokio::time::timeout(
            std::time::Duration::from_secs(30),
            sender.send_request(request),
        )
        .await
        .map_err(|_| format!("{authority}: no answer within 30 s"))?
        .map_err(|e| format!("{authority}: {e}"))?;
        let status = response.status().as_u16();
        let body = response
            .into_body()
            .collect()
            .await
            .map_err(|e| format!("{authority}: {e}"))?
            .to_bytes();
        let value = serde_json::from_slice(&body)
            .unwrap_or_else(|_| Value::String(String::from_utf8_lossy(&body).into_owned()));
        Ok((status, value))
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ages() {
        assert_eq!(ago(100_000, 95_000), "5s ago");
        assert_eq!(ago(10_000_000, 9_700_000), "5m ago");
        assert_eq!(ago(90_000_000, 10_000_000), "22h ago");
        assert_eq!(ago(1_000_000_000, 0), "11d ago");
        assert_eq!(ago(0, 5), "0s ago");
    }

    #[test]
    fn session_ids_are_encoded_in_paths() {
        assert_eq!(encode("s 1/x"), "s%201%2Fx");
        assert_eq!(encode("abc-DEF_1.~"), "abc-DEF_1.~");
        assert_eq!(encode("é"), "%C3%A9");
    }
}
