//! The proxy process: the server as a child process, three threads, one relay.
//!
//! - the **client thread** reads the client's lines and hands them to the relay; what the
//!   relay forwards goes to the server's stdin, what it answers itself to the client;
//! - the **server thread** reads the server's stdout the same way, towards the client;
//! - the **calling thread** waits for either side to finish and shuts down.
//!
//! **Every request the proxy accepted is answered.** When the client's input ends, the
//! calls held behind an identical call in flight are still screened as the answers come
//! (forwarded, or answered with their block), and the server's stdin is closed once none is
//! held: the server then sees the end of its input after the last request, as it would
//! without the proxy. The proxy waits for the server's answers to everything forwarded, then
//! stops the server the MCP stdio way (its stdin closed, `shutdown_grace` to exit, then
//! SIGTERM, as long again, then SIGKILL). When the server goes away first, every request it
//! left unanswered is answered with a "Connection closed" error (code -32000, what the MCP
//! SDKs report for a closed connection). When the client closes its output instead, nothing
//! more can reach it, and the server is stopped at once.
//!
//! The server's stderr is the proxy's stderr. The proxy's exit status is the server's
//! (128 + N when a signal N ended it), except that a server that exits with 0 but left a
//! request unanswered gives 1 ([`ProxyExit::unanswered`] counts them). With
//! [`ProxyOptions::forward_signals`], SIGTERM, SIGINT and SIGHUP sent to the proxy are passed
//! on to the server, and the proxy ends when the server does (so a client stopping the proxy
//! stops the server the same way).

use std::io::{self, BufReader, Write};
use std::process::{Child, ChildStdin, Command, ExitStatus, Stdio};
use std::sync::mpsc;
use std::sync::{Arc, Mutex, MutexGuard};
use std::thread;
use std::time::{Duration, Instant};

use loopguard::ConfigSet;

use crate::framing::{read_line, Line};
use crate::relay::Relay;

/// Default longest line read from either side (64 MiB, the most a hook payload may be): a
/// line is held while it is read, so this is also the most a line can cost before it is
/// found too long; longer lines are answered
/// ([`Relay::client_line_too_long`](crate::Relay::client_line_too_long)) or skipped,
/// their bytes past the limit never held.
pub const DEFAULT_MAX_LINE_BYTES: usize = 64 << 20;

/// How the proxy runs.
#[derive(Clone, Debug)]
pub struct ProxyOptions {
    /// The engine's config.
    pub config: ConfigSet,
    /// The session all calls belong to.
    pub session: String,
    /// The agent whose config applies.
    pub agent: Option<String>,
    /// How long the server gets to exit after its stdin is closed, and again after SIGTERM.
    pub shutdown_grace: Duration,
    /// Longest line read from either side.
    pub max_line_bytes: usize,
    /// Pass SIGTERM, SIGINT and SIGHUP on to the server (Unix; the process-wide signal
    /// handlers are installed for as long as the proxy runs). For a process that is the
    /// proxy and nothing else, like `loopguard mcp-proxy`.
    pub forward_signals: bool,
}

impl ProxyOptions {
    /// Options for `session` under `config`: no agent, 2 s grace, 64 MiB lines.
    pub fn new(config: ConfigSet, session: String) -> Self {
        Self {
            config,
            session,
            agent: None,
            shutdown_grace: Duration::from_secs(2),
            max_line_bytes: DEFAULT_MAX_LINE_BYTES,
            forward_signals: false,
        }
    }
}

/// Why the proxy could not run.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ProxyError {
    /// The server could not be started.
    #[error("cannot start the MCP server {program:?}: {source}")]
    Spawn {
        /// The program.
        program: String,
        /// Why.
        source: io::Error,
    },
    /// A thread of the proxy could not be started.
    #[error("cannot start a thread: {0}")]
    Thread(io::Error),
    /// The signal handlers could not be installed.
    #[error("cannot handle signals: {0}")]
    Signals(io::Error),
}

/// How the proxy ended.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ProxyExit {
    /// The exit status to end with: the server's (128 + N for signal N); 1 when it cannot be
    /// known, or when the server exited with 0 but left requests unanswered.
    pub code: i32,
    /// What ended the session.
    pub reason: String,
    /// Requests the server never answered, which the proxy answered with a "Connection
    /// closed" error.
    pub unanswered: usize,
}

enum Event {
    /// The client's input ended (or could not be read).
    ClientEof,
    /// Writing to the client failed: it is gone.
    ClientGone,
    /// The server's stdout ended.
    ServerEof,
}

type Shared<T> = Arc<Mutex<T>>;

/// The way to the server: its stdin, until the proxy closes it.
struct Upstream {
    stdin: Option<ChildStdin>,
    /// The client's input ended: the stdin is closed as soon as no call is held.
    client_done: bool,
}

impl Upstream {
    /// Writes `lines` to the server's stdin, each with its newline; a failed write means
    /// the server is going away (its end is reported by the server thread).
    fn send(&mut self, lines: &[Vec<u8>]) {
        for line in lines {
            let Some(pipe) = self.stdin.as_mut() else {
                return;
            };
            let sent = pipe
                .write_all(line)
                .and_then(|()| pipe.write_all(b"\n"))
                .and_then(|()| pipe.flush());
            if sent.is_err() {
                self.stdin = None;
            }
        }
    }

    /// After the client's last line, closes the server's stdin once the relay holds no
    /// call: nothing more will be forwarded. Called with the lock that sends, so that a
    /// call released by an answer is written before the stdin can close.
    fn close_when_drained(&mut self, relay: &Mutex<Relay>) {
        if self.client_done && lock(relay).held_calls() == 0 {
            self.stdin = None;
        }
    }
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

/// Writes whole lines to one destination; after a write fails, it drops everything.
struct LineWriter<W: Write> {
    inner: W,
    broken: bool,
}

impl<W: Write> LineWriter<W> {
    fn new(inner: W) -> Self {
        Self {
            inner,
            broken: false,
        }
    }

    /// Writes `line` and a newline, and flushes; false when the destination is gone.
    fn send(&mut self, line: &[u8]) -> bool {
        if self.broken {
            return false;
        }
        let ok = self
            .inner
            .write_all(line)
            .and_then(|()| self.inner.write_all(b"\n"))
            .and_then(|()| self.inner.flush())
            .is_ok();
        self.broken = !ok;
        ok
    }
}

/// Runs the proxy: starts `server`, relays between the client (`client_in`, `client_out`)
/// and it until one side goes away, and returns how it ended. Diagnostics go to `log`.
pub fn run<R, W, L>(
    mut server: Command,
    client_in: R,
    client_out: W,
    log: L,
    options: ProxyOptions,
) -> Result<ProxyExit, ProxyError>
where
    R: io::Read + Send + 'static,
    W: Write + Send + 'static,
    L: Write + Send + 'static,
{
    let log: Shared<Box<dyn Write + Send>> = Arc::new(Mutex::new(Box::new(log)));
    // Installed before the server starts, so that no signal can fall between the two.
    let forwarding = if options.forward_signals {
        Some(SignalForwarder::install(Arc::clone(&log))?)
    } else {
        None
    };
    let program = server.get_program().to_string_lossy().into_owned();
    let mut child = server
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .spawn()
        .map_err(|source| ProxyError::Spawn { program, source })?;
    let upstream = Arc::new(Mutex::new(Upstream {
        stdin: child.stdin.take(),
        client_done: false,
    }));
    let Some(server_out) = child.stdout.take() else {
        return Err(ProxyError::Spawn {
            program: server.get_program().to_string_lossy().into_owned(),
            source: io::Error::other("no stdout pipe"),
        });
    };
    let relay = Arc::new(Mutex::new(Relay::new(
        options.config.clone(),
        options.session.clone(),
        options.agent.clone(),
    )));
    if let Some(forwarding) = &forwarding {
        forwarding.target(&child);
    }
    let client = Arc::new(Mutex::new(LineWriter::new(client_out)));
    let (events, finished) = mpsc::channel::<Event>();
    let max = options.max_line_bytes;

    // Client → server.
    {
        let (relay, client, upstream, log, events) = (
            Arc::clone(&relay),
            Arc::clone(&client),
            Arc::clone(&upstream),
            Arc::clone(&log),
            events.clone(),
        );
        thread::Builder::new()
            .name("lg-mcp-client".into())
            .spawn(move || {
                let mut input = BufReader::new(client_in);
                loop {
                    let routed = match read_line(&mut input, max) {
                        Ok(Line::Data(line)) => lock(&relay).from_client(&line),
                        Ok(Line::TooLong { len, head }) => {
                            lock(&relay).client_line_too_long(&head, len, max)
                        }
                        Ok(Line::Eof) | Err(_) => break,
                    };
                    for entry in &routed.log {
                        say(&log, entry);
                    }
                    for answer in &routed.to_client {
                        if !lock(&client).send(answer) {
                            let _ = events.send(Event::ClientGone);
                            return;
                        }
                    }
                    lock(&upstream).send(&routed.to_server);
                }
                {
                    let mut upstream = lock(&upstream);
                    upstream.client_done = true;
                    upstream.close_when_drained(&relay);
                }
                let _ = events.send(Event::ClientEof);
            })
            .map_err(ProxyError::Thread)?;
    }

    // Server → client.
    {
        let (relay, client, upstream, log, events) = (
            Arc::clone(&relay),
            Arc::clone(&client),
            Arc::clone(&upstream),
            Arc::clone(&log),
            events.clone(),
        );
        thread::Builder::new()
            .name("lg-mcp-server".into())
            .spawn(move || {
                let mut input = BufReader::new(server_out);
                loop {
                    let line = match read_line(&mut input, max) {
                        Ok(Line::Data(line)) => Ok(line),
                        Ok(Line::TooLong { len, head }) => Err((len, head)),
                        Ok(Line::Eof) | Err(_) => break,
                    };
                    let routed = {
                        // Held calls an answer releases go to the server under the same
                        // lock, so that the stdin stays open for them.
                        let mut upstream = lock(&upstream);
                        let routed = match line {
                            Ok(line) => lock(&relay).from_server_owned(line),
                            Err((len, head)) => lock(&relay).server_line_too_long(&head, len, max),
                        };
                        upstream.send(&routed.to_server);
                        upstream.close_when_drained(&relay);
                        routed
                    };
                    for entry in &routed.log {
                        say(&log, entry);
                    }
                    for out in &routed.to_client {
                        if !lock(&client).send(out) {
                            let _ = events.send(Event::ClientGone);
                            // Keep draining, so that the server never blocks on a full pipe.
                        }
                    }
                }
                let _ = events.send(Event::ServerEof);
            })
            .map_err(ProxyError::Thread)?;
    }
    drop(events);

    let mut first = finished.recv().unwrap_or(Event::ServerEof);
    if matches!(first, Event::ClientEof) {
        // The client has said everything: what it asked is answered before the server is
        // stopped. Held calls go on as the answers come, the server's stdin closes after
        // the last one, and the server answers the rest as it would without the proxy.
        first = loop {
            {
                let relay = lock(&relay);
                if relay.held_calls() == 0 && relay.open_requests() == 0 {
                    break Event::ClientEof;
                }
            }
            match finished.recv_timeout(Duration::from_millis(20)) {
                Ok(Event::ClientEof) | Err(mpsc::RecvTimeoutError::Timeout) => {}
                Ok(event) => break event,
                Err(mpsc::RecvTimeoutError::Disconnected) => break Event::ServerEof,
            }
        };
    }
    // Stop forwarding before the server is reaped: after that its pid may be reused.
    drop(forwarding);
    let status = wait_or_stop(&mut child, &upstream, options.shutdown_grace);
    if !matches!(first, Event::ServerEof) {
        // The server's last words (answers to requests the client may still read).
        let deadline = Instant::now() + options.shutdown_grace;
        while let Some(left) = deadline.checked_duration_since(Instant::now()) {
            match finished.recv_timeout(left) {
                Ok(Event::ServerEof) | Err(_) => break,
                Ok(_) => {}
            }
        }
    }
    let reason = match first {
        Event::ServerEof => format!("the MCP server exited ({})", describe(status)),
        Event::ClientEof => format!(
            "the client's input ended; the MCP server {}",
            describe(status)
        ),
        Event::ClientGone => format!("the client went away; the MCP server {}", describe(status)),
    };
    // Whatever the server left unanswered (its answers are all in: its stdout ended, or
    // it was stopped) gets the closed-connection error.
    let answers = lock(&relay).close(&reason);
    let unanswered = answers.len();
    {
        let mut client = lock(&client);
        for answer in &answers {
            client.send(answer);
        }
    }
    if matches!(first, Event::ServerEof) {
        say(&log, &reason);
    }
    if unanswered > 0 {
        say(
            &log,
            &format!(
                "{unanswered} request{} the MCP server did not answer {} answered with a Connection closed error",
                if unanswered == 1 { "" } else { "s" },
                if unanswered == 1 { "was" } else { "were" },
            ),
        );
    }
    let code = match exit_code(status) {
        0 if unanswered > 0 => 1,
        code => code,
    };
    Ok(ProxyExit {
        code,
        reason,
        unanswered,
    })
}

fn say(log: &Mutex<Box<dyn Write + Send>>, message: &str) {
    let mut log = lock(log);
    let _ = writeln!(log, "loopguard mcp-proxy: {message}");
    let _ = log.flush();
}

/// Closes the server's stdin and waits for it to exit: `grace`, then SIGTERM and `grace`
/// again, then SIGKILL.
fn wait_or_stop(
    child: &mut Child,
    upstream: &Mutex<Upstream>,
    grace: Duration,
) -> Option<ExitStatus> {
    lock(upstream).stdin = None;
    if let Some(status) = wait_for(child, grace) {
        return Some(status);
    }
    terminate(child);
    if let Some(status) = wait_for(child, grace) {
        return Some(status);
    }
    let _ = child.kill();
    child.wait().ok()
}

fn wait_for(child: &mut Child, limit: Duration) -> Option<ExitStatus> {
    let deadline = Instant::now() + limit;
    loop {
        match child.try_wait() {
            Ok(Some(status)) => return Some(status),
            Ok(None) if Instant::now() < deadline => thread::sleep(Duration::from_millis(10)),
            _ => return None,
        }
    }
}

/// Passes the signals that ask a process to stop on to the server, while it lives.
#[cfg(unix)]
struct SignalForwarder {
    handle: signal_hook::iterator::Handle,
    server: Arc<Mutex<Option<rustix::process::Pid>>>,
}

#[cfg(unix)]
impl SignalForwarder {
    fn install(log: Shared<Box<dyn Write + Send>>) -> Result<Self, ProxyError> {
        use signal_hook::consts::{SIGHUP, SIGINT, SIGTERM};
        let mut signals = signal_hook::iterator::Signals::new([SIGTERM, SIGINT, SIGHUP])
            .map_err(ProxyError::Signals)?;
        let handle = signals.handle();
        let server: Arc<Mutex<Option<rustix::process::Pid>>> = Arc::new(Mutex::new(None));
        let target = Arc::clone(&server);
        thread::Builder::new()
            .name("lg-mcp-signals".into())
            .spawn(move || {
                for number in signals.forever() {
                    let Some(signal) = rustix::process::Signal::from_named_raw(number) else {
                        continue;
                    };
                    // Held while signalling, so that `Drop` cannot finish in between.
                    let pid = lock(&target);
                    match *pid {
                        Some(pid) => {
                            let _ = rustix::process::kill_process(pid, signal);
                            say(
                                &log,
                                &format!("passed {} on to the MCP server", signal_name(number)),
                            );
                        }
                        None => say(
                            &log,
                            &format!("{} before the MCP server started", signal_name(number)),
                        ),
                    }
                }
            })
            .map_err(ProxyError::Thread)?;
        Ok(Self { handle, server })
    }

    fn target(&self, child: &Child) {
        *lock(&self.server) = Some(rustix::process::Pid::from_child(child));
    }
}

#[cfg(unix)]
impl Drop for SignalForwarder {
    fn drop(&mut self) {
        *lock(&self.server) = None;
        self.handle.close();
    }
}

#[cfg(unix)]
fn signal_name(number: i32) -> &'static str {
    match number {
        signal_hook::consts::SIGTERM => "SIGTERM",
        signal_hook::consts::SIGINT => "SIGINT",
        signal_hook::consts::SIGHUP => "SIGHUP",
        _ => "a signal",
    }
}

#[cfg(not(unix))]
struct SignalForwarder;

#[cfg(not(unix))]
impl SignalForwarder {
    fn install(_log: Shared<Box<dyn Write + Send>>) -> Result<Self, ProxyError> {
        Ok(Self)
    }

    fn target(&self, _child: &Child) {}
}

#[cfg(unix)]
fn terminate(child: &Child) {
    let pid = rustix::process::Pid::from_child(child);
    let _ = rustix::process::kill_process(pid, rustix::process::Signal::TERM);
}

#[cfg(not(unix))]
fn terminate(child: &mut Child) {
    let _ = child.kill();
}

/// The exit status to end with: the server's code, 128 + N for signal N, 1 if unknown.
fn exit_code(status: Option<ExitStatus>) -> i32 {
    let Some(status) = status else { return 1 };
    if let Some(code) = status.code() {
        return code;
    }
    #[cfg(unix)]
    {
        use std::os::unix::process::ExitStatusExt;
        if let Some(signal) = status.signal() {
            return 128 + signal;
        }
    }
    1
}

fn describe(status: Option<ExitStatus>) -> String {
    match status {
        None => "exit status unknown".into(),
        Some(s) => match s.code() {
            Some(code) => format!("exit status {code}"),
            None => format!("ended by a signal, status {}", exit_code(Some(s))),
        },
    }
}
