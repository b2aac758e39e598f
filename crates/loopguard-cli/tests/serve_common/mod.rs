//! Helpers for the `loopguard serve` tests: start the real binary on a free loopback port,
//! talk HTTP/1.1 to it over plain sockets, stop it gently or with SIGKILL.
#![allow(dead_code)]

use std::io::{BufRead, BufReader, Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

/// A running `loopguard serve`.
pub struct Server {
    child: Option<Child>,
    /// Where it listens.
    pub addr: SocketAddr,
    stderr: std::sync::Arc<std::sync::Mutex<String>>,
}

impl Server {
    /// Starts `loopguard serve --listen 127.0.0.1:0 ARGS` and waits until it listens.
    pub fn start(args: &[&str]) -> Server {
        Self::start_with_env(args, &[])
    }

    /// [`Server::start`] with extra environment variables.
    pub fn start_with_env(args: &[&str], env: &[(&str, &str)]) -> Server {
        Self::try_start(args, env).unwrap_or_else(|e| panic!("loopguard serve {args:?}: {e}"))
    }

    /// Starts the server, or returns what it said on stderr when it exited instead.
    pub fn try_start(args: &[&str], env: &[(&str, &str)]) -> Result<Server, String> {
        Self::spawn(Command::new(env!("CARGO_BIN_EXE_loopguard")), args, env)
    }

    /// Starts the server with its open-file limit at `n` (soft and hard: it cannot raise
    /// it), through `sh -c 'ulimit -n N'`.
    pub fn try_start_with_nofile(n: u32, args: &[&str]) -> Result<Server, String> {
        let mut command = Command::new("sh");
        command
            .arg("-c")
            .arg(format!("ulimit -n {n} && exec \"$0\" \"$@\""))
            .arg(env!("CARGO_BIN_EXE_loopguard"));
        Self::spawn(command, args, &[])
    }

    fn spawn(mut command: Command, args: &[&str], env: &[(&str, &str)]) -> Result<Server, String> {
        command
            .arg("serve")
            .args(["--listen", "127.0.0.1:0"])
            .args(args)
            .env_remove("LOOPGUARD_TOKEN")
            .env_remove("LOOPGUARD_DB")
            .env_remove("LOOPGUARD_CONFIG")
            .env_remove("LOOPGUARD_LISTEN")
            .env_remove("LOOPGUARD_STORE")
            .env_remove("LOOPGUARD_REDIS_PREFIX")
            .env_remove("LOOPGUARD_REDIS_PASSWORD")
            .env_remove("LOOPGUARD_ON_STORE_FAILURE")
            .env("LOOPGUARD_LOG", "warn")
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped());
        for (k, v) in env {
            command.env(k, v);
        }
        let mut child = command.spawn().map_err(|e| format!("spawn: {e}"))?;
        let stdout = child.stdout.take().unwrap();
        let stderr = child.stderr.take().unwrap();
        let log = std::sync::Arc::new(std::sync::Mutex::new(String::new()));
        {
            let log = std::sync::Arc::clone(&log);
            std::thread::spawn(move || {
                for line in BufReader::new(stderr).lines().map_while(Result::ok) {
                    let mut log = log.lock().unwrap();
                    log.push_str(&line);
                    log.push('\n');
                }
            });
        }
        let (tx, rx) = mpsc::channel();
        std::thread::spawn(move || {
            let mut lines = BufReader::new(stdout).lines();
            let first = lines.next().and_then(Result::ok);
            let _ = tx.send(first);
            for _ in lines {}
        });
        let line = rx.recv_timeout(Duration::from_secs(30)).ok().flatten();
        let Some(line) = line else {
            let status = child.wait().map_err(|e| e.to_string())?;
            // Give the stderr reader a moment to collect the last words.
            std::thread::sleep(Duration::from_millis(100));
            let said = log.lock().unwrap().clone();
            return Err(format!(
                "exited with {status} before listening; stderr: {said}"
            ));
        };
        let url = line
            .split_whitespace()
            .find_map(|w| w.strip_prefix("http://"))
            .ok_or_else(|| format!("unexpected first line {line:?}"))?;
        let addr = url.parse().map_err(|e| format!("{url}: {e}"))?;
        Ok(Server {
            child: Some(child),
            addr,
            stderr: log,
        })
    }

    /// A new keep-alive connection.
    pub fn client(&self) -> Client {
        Client::connect(self.addr)
    }

    /// What it logged so far.
    pub fn stderr(&self) -> String {
        self.stderr.lock().unwrap().clone()
    }

    /// The process id.
    pub fn pid(&self) -> u32 {
        self.child.as_ref().unwrap().id()
    }

    /// Sends a signal with `kill(1)`.
    pub fn signal(&self, name: &str) {
        let status = Command::new("kill")
            .args([&format!("-{name}"), &self.pid().to_string()])
            .status()
            .expect("run kill");
        assert!(status.success(), "kill -{name}");
    }

    /// SIGKILL: no chance to flush anything.
    pub fn kill(mut self) {
        let mut child = self.child.take().unwrap();
        child.kill().unwrap();
        child.wait().unwrap();
    }

    /// SIGTERM, then waits for a clean exit (status 0).
    pub fn stop(mut self) {
        self.signal("TERM");
        let mut child = self.child.take().unwrap();
        let started = Instant::now();
        loop {
            if let Some(status) = child.try_wait().unwrap() {
                assert!(
                    status.success(),
                    "exit after SIGTERM: {status}; stderr: {}",
                    self.stderr()
                );
                return;
            }
            assert!(
                started.elapsed() < Duration::from_secs(20),
                "no exit 20 s after SIGTERM"
            );
            std::thread::sleep(Duration::from_millis(10));
        }
    }

    /// Whether the process is still running.
    pub fn alive(&mut self) -> bool {
        self.child.as_mut().unwrap().try_wait().unwrap().is_none()
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}

/// An HTTP response.
#[derive(Debug)]
pub struct Response {
    pub status: u16,
    pub headers: Vec<(String, String)>,
    pub body: Vec<u8>,
}

impl Response {
    /// The body as JSON.
    pub fn json(&self) -> serde_json::Value {
        serde_json::from_slice(&self.body).unwrap_or_else(|e| {
            panic!(
                "status {}: body is not JSON ({e}): {}",
                self.status,
                String::from_utf8_lossy(&self.body)
            )
        })
    }

    /// The body as text.
    pub fn text(&self) -> String {
        String::from_utf8_lossy(&self.body).into_owned()
    }

    /// A header, by case-insensitive name.
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(k, _)| k.eq_ignore_ascii_case(name))
            .map(|(_, v)| v.as_str())
    }
}

/// A minimal HTTP/1.1 client over one keep-alive connection.
pub struct Client {
    addr: SocketAddr,
    reader: BufReader<TcpStream>,
    /// Extra headers sent with every request.
    pub headers: Vec<(String, String)>,
}

impl Client {
    /// Connects.
    pub fn connect(addr: SocketAddr) -> Client {
        let stream = TcpStream::connect(addr).expect("connect");
        stream.set_nodelay(true).unwrap();
        stream
            .set_read_timeout(Some(Duration::from_secs(30)))
            .unwrap();
        Client {
            addr,
            reader: BufReader::new(stream),
            headers: Vec::new(),
        }
    }

    /// Sends `Authorization: Bearer TOKEN` with every request.
    pub fn with_token(mut self, token: &str) -> Client {
        self.headers
            .push(("Authorization".into(), format!("Bearer {token}")));
        self
    }

    /// `POST path` with a JSON body.
    pub fn post(&mut self, path: &str, body: &str) -> Response {
        self.request(
            "POST",
            path,
            &[("Content-Type", "application/json")],
            body.as_bytes(),
        )
    }

    /// `POST path` with a JSON Lines body.
    pub fn post_ndjson(&mut self, path: &str, body: &[u8]) -> Response {
        self.request(
            "POST",
            path,
            &[("Content-Type", "application/x-ndjson")],
            body,
        )
    }

    /// `GET path`.
    pub fn get(&mut self, path: &str) -> Response {
        self.request("GET", path, &[], b"")
    }

    /// Any request.
    pub fn request(
        &mut self,
        method: &str,
        path: &str,
        headers: &[(&str, &str)],
        body: &[u8],
    ) -> Response {
        let mut head = format!(
            "{method} {path} HTTP/1.1\r\nHost: {}\r\nContent-Length: {}\r\n",
            self.addr,
            body.len()
        );
        for (k, v) in headers {
            head.push_str(&format!("{k}: {v}\r\n"));
        }
        for (k, v) in &self.headers {
            head.push_str(&format!("{k}: {v}\r\n"));
        }
        head.push_str("\r\n");
        let stream = self.reader.get_mut();
        // The server may answer (413) and close before reading a large body: a failed
        // write is fine as long as the response can be read.
        let _ = stream
            .write_all(head.as_bytes())
            .and_then(|()| stream.write_all(body));
        self.read_response()
    }

    /// Writes raw bytes (for malformed requests).
    pub fn write_raw(&mut self, bytes: &[u8]) {
        let _ = self.reader.get_mut().write_all(bytes);
    }

    /// `POST path` with a JSON body; `None` when the connection fails (the server died,
    /// or closed the connection) instead of a panic.
    pub fn try_post(&mut self, path: &str, body: &str) -> Option<Response> {
        let head = format!(
            "POST {path} HTTP/1.1\r\nHost: {}\r\nContent-Type: application/json\r\nContent-Length: {}\r\n\r\n",
            self.addr,
            body.len()
        );
        let stream = self.reader.get_mut();
        stream
            .write_all(head.as_bytes())
            .and_then(|()| stream.write_all(body.as_bytes()))
            .ok()?;
        self.try_read_response().ok()
    }

    /// Reads one response.
    pub fn read_response(&mut self) -> Response {
        self.try_read_response().expect("a response")
    }

    /// Reads one response, or the I/O error that ended the connection.
    pub fn try_read_response(&mut self) -> std::io::Result<Response> {
        let bad = |what: String| std::io::Error::new(std::io::ErrorKind::InvalidData, what);
        let mut status_line = String::new();
        self.reader.read_line(&mut status_line)?;
        let status: u16 = status_line
            .split_whitespace()
            .nth(1)
            .and_then(|s| s.parse().ok())
            .ok_or_else(|| bad(format!("bad status line {status_line:?}")))?;
        let mut headers = Vec::new();
        loop {
            let mut line = String::new();
            self.reader.read_line(&mut line)?;
            let line = line.trim_end();
            if line.is_empty() {
                break;
            }
            let (k, v) = line
                .split_once(':')
                .ok_or_else(|| bad(format!("bad header {line:?}")))?;
            headers.push((k.trim().to_owned(), v.trim().to_owned()));
        }
        let find = |name: &str| {
            headers
                .iter()
                .find(|(k, _): &&(String, String)| k.eq_ignore_ascii_case(name))
                .map(|(_, v)| v.clone())
        };
        let mut body = Vec::new();
        if let Some(len) = find("content-length") {
            body.resize(len.parse().map_err(|_| bad(len))?, 0);
            self.reader.read_exact(&mut body)?;
        } else if find("transfer-encoding").is_some_and(|v| v.contains("chunked")) {
            loop {
                let mut size = String::new();
                self.reader.read_line(&mut size)?;
                let size = usize::from_str_radix(size.trim(), 16).map_err(|_| bad(size))?;
                let mut chunk = vec![0; size + 2];
                self.reader.read_exact(&mut chunk)?;
                if size == 0 {
                    break;
                }
                body.extend_from_slice(&chunk[..size]);
            }
        }
        Ok(Response {
            status,
            headers,
            body,
        })
    }
}

/// A fresh temporary directory.
pub fn tempdir() -> tempfile_lite::TempDir {
    tempfile_lite::TempDir::new()
}

/// Just enough of a temporary directory (the CLI has no `tempfile` dependency).
pub mod tempfile_lite {
    use std::path::{Path, PathBuf};
    use std::sync::atomic::{AtomicU64, Ordering};

    static NEXT: AtomicU64 = AtomicU64::new(0);

    /// Removed when dropped.
    pub struct TempDir(PathBuf);

    impl TempDir {
        pub fn new() -> Self {
            let n = NEXT.fetch_add(1, Ordering::Relaxed);
            let dir = std::env::temp_dir()
                .join(format!("loopguard-serve-test-{}-{n}", std::process::id()));
            let _ = std::fs::remove_dir_all(&dir);
            std::fs::create_dir_all(&dir).unwrap();
            TempDir(dir)
        }

        pub fn path(&self) -> &Path {
            &self.0
        }
    }

    impl Default for TempDir {
        fn default() -> Self {
            Self::new()
        }
    }

    impl Drop for TempDir {
        fn drop(&mut self) {
            let _ = std::fs::remove_dir_all(&self.0);
        }
    }
}

/// `loopguard replay [--config CONFIG] EVENTS`, its stdout.
pub fn replay(config: Option<&Path>, events: &Path) -> Vec<u8> {
    let mut command = Command::new(env!("CARGO_BIN_EXE_loopguard"));
    command.arg("replay");
    if let Some(config) = config {
        command.arg("--config").arg(config);
    }
    let out = command.arg(events).output().expect("run replay");
    out.stdout
}

/// Runs `f` over `items` on `threads` threads; panics with every failure.
pub fn parallel<T: Sync>(items: &[T], threads: usize, f: impl Fn(&T) -> Result<(), String> + Sync) {
    let next = std::sync::atomic::AtomicUsize::new(0);
    let failures = std::sync::Mutex::new(Vec::new());
    std::thread::scope(|s| {
        for _ in 0..threads {
            s.spawn(|| loop {
                let i = next.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                let Some(item) = items.get(i) else { break };
                if let Err(e) = f(item) {
                    failures.lock().unwrap().push(e);
                }
            });
        }
    });
    let failures = failures.into_inner().unwrap();
    assert!(
        failures.is_empty(),
        "{} of {} failed:\n{}",
        failures.len(),
        items.len(),
        failures.join("\n")
    );
}

/// Sends the events of a conformance case one request each, event `k` to
/// `clients[k % clients.len()]` (one client for one server, or one per replica as a load
/// balancer spreading one session would): each answer is replay's line for it (but
/// `seq`, which is the position in the request), and a line replay refuses is a 400 (not
/// an event) or a 422 (refused by the engine) with its error.
pub fn check_event_by_event(case: &Path, clients: &mut [Client]) -> Result<(), String> {
    use crate::common::vectors::{config_of, name};
    use serde_json::Value;

    let events = case.join("events.jsonl");
    let want = crate::common::json_lines(&replay(config_of(case).as_deref(), &events));
    let mut want = want.into_iter();
    let text = std::fs::read(&events).unwrap();
    let mut k = 0;
    for (i, line) in text.split(|&b| b == b'\n').enumerate() {
        if line.iter().all(u8::is_ascii_whitespace) {
            continue;
        }
        let seq = i + 1;
        let mut w = want.next().ok_or("fewer replay answers than lines")?;
        let replica = k % clients.len();
        k += 1;
        let response = clients[replica].request(
            "POST",
            "/v1/events",
            &[("Content-Type", "application/json")],
            line,
        );
        let mut got = response.json();
        let fail = |what: &str, got: &Value, w: &Value| {
            let at = if clients.len() > 1 {
                format!(" (replica {replica})")
            } else {
                String::new()
            };
            format!(
                "{} line {seq}{at}: {what}\n  got  {} {got}\n  want {w}",
                name(case),
                response.status
            )
        };
        if w.get("error").is_some() {
            let expected_status = if serde_json::from_slice::<Value>(line).is_ok()
                && loopguard_events::parse_line(line).is_ok()
            {
                422
            } else {
                400
            };
            if response.status != expected_status || got.get("error").is_none() {
                return Err(fail("want an error", &got, &w));
            }
            continue;
        }
        if response.status != 200 {
            return Err(fail("want 200", &got, &w));
        }
        got["seq"] = Value::Null;
        w["seq"] = Value::Null;
        if got != w {
            return Err(fail("answers differ", &got, &w));
        }
    }
    Ok(())
}

/// Thresholds low enough that every detector fires within a short session.
pub const CONFIG: &str = "{ tools: { loopDetection: { enabled: true, warningThreshold: 3, criticalThreshold: 6, globalCircuitBreakerThreshold: 9, unknownToolThreshold: 4 } } }";

/// Writes [`CONFIG`] to `DIR/config.json5`; returns its path.
pub fn config_file(dir: &Path) -> std::path::PathBuf {
    let path = dir.join("config.json5");
    std::fs::write(&path, CONFIG).unwrap();
    path
}

/// The events of one session: several runs mixing loops the detectors catch (identical
/// reads, a stuck poll, ping-pong, an unknown tool, a loop surviving a compaction) with
/// calls that make progress, and a result naming no pending call.
pub fn session_events(session: &str, seed: usize) -> Vec<String> {
    use serde_json::{json, Value};

    let mut out = Vec::new();
    let call =
        |out: &mut Vec<String>, run: &str, id: String, tool: &str, args: Value, outcome: Value| {
            out.push(
            json!({"type":"call","session":session,"run":run,"call_id":id,"tool":tool,"args":args})
                .to_string(),
        );
            let mut result = json!({"type":"result","session":session,"run":run,"call_id":id});
            match outcome.get("error") {
                Some(error) => result["error"] = error.clone(),
                None => result["result"] = outcome,
            }
            out.push(result.to_string());
        };
    for step in 0..12 {
        let i = step + seed;
        let same = json!({"content":[{"type":"text","text":"same"}]});
        call(
            &mut out,
            "loop",
            format!("a{step}"),
            "read",
            json!({"path": "/x"}),
            same,
        );
        let poll = json!({"action": "poll", "sessionId": "p"});
        let running = json!({"details": {"status": "running", "aggregated": "..."}});
        call(
            &mut out,
            "poll",
            format!("p{step}"),
            "process",
            poll,
            running,
        );
        let (tool, path) = if step.is_multiple_of(2) {
            ("read", "/a")
        } else {
            ("list", "/b")
        };
        call(
            &mut out,
            "pp",
            format!("q{step}"),
            tool,
            json!({"path": path}),
            json!(format!("{tool} same")),
        );
        call(
            &mut out,
            "fresh",
            format!("f{step}"),
            "read",
            json!({"path": format!("/f{i}")}),
            json!(format!("content {i}")),
        );
        call(
            &mut out,
            "missing",
            format!("m{step}"),
            "nope",
            json!({}),
            json!({"error": "Tool nope not found"}),
        );
        if step == 2 {
            out.push(json!({"type":"compaction","session":session,"run":"loop"}).to_string());
        }
    }
    // A result that names no pending call: the engine refuses it in both worlds.
    out.push(
        json!({"type":"result","session":session,"run":"loop","call_id":"zzz","result":1})
            .to_string(),
    );
    out
}

/// What a sequential replay answers to `lines` (each with `seq` 1, as single events get).
pub fn replay_lines(config: &loopguard::ConfigSet, lines: &[String]) -> Vec<serde_json::Value> {
    let mut replayer = loopguard_events::Replayer::new(config.clone(), None);
    lines
        .iter()
        .map(|l| {
            let event = loopguard_events::parse_line(l.as_bytes()).unwrap();
            serde_json::to_value(replayer.apply(1, &event.as_ref())).unwrap()
        })
        .collect()
}

/// Asserts that the answers `got` to the events `lines` of one session equal a sequential
/// replay of them.
pub fn assert_replays(
    config: &loopguard::ConfigSet,
    session: &str,
    lines: &[String],
    got: &[serde_json::Value],
) {
    let want = replay_lines(config, lines);
    assert_eq!(got.len(), want.len(), "session {session}");
    for (n, (g, w)) in got.iter().zip(&want).enumerate() {
        assert_eq!(g, w, "session {session}, event {n}: {}", lines[n]);
    }
}

/// The detectors that fired in a list of answers.
pub fn detectors(answers: &[serde_json::Value]) -> Vec<String> {
    answers
        .iter()
        .filter_map(|a| a["detector"].as_str().map(str::to_owned))
        .collect()
}

/// `threads` clients at once, each with [`session_events`] for `sessions_per_client`
/// sessions of its own, interleaved, one request per event, each event to the next of
/// `servers` in turn: every answer is 200 or 422, the answers of every session equal a
/// sequential replay of it, and every detector fired in every session.
pub fn hammer_sessions(
    servers: &[Server],
    config: &loopguard::ConfigSet,
    threads: usize,
    sessions_per_client: usize,
) {
    std::thread::scope(|s| {
        for c in 0..threads {
            s.spawn(move || {
                let mut clients: Vec<_> = servers.iter().map(Server::client).collect();
                let sessions: Vec<(String, Vec<String>)> = (0..sessions_per_client)
                    .map(|k| {
                        let name = format!("c{c}-s{k}");
                        let events = session_events(&name, c * 100 + k);
                        (name, events)
                    })
                    .collect();
                let mut answers: Vec<Vec<serde_json::Value>> = vec![Vec::new(); sessions.len()];
                // Interleave the sessions of this client; other clients run at the same time.
                let longest = sessions.iter().map(|(_, e)| e.len()).max().unwrap();
                let mut n = c;
                for i in 0..longest {
                    for (k, (_, events)) in sessions.iter().enumerate() {
                        let Some(line) = events.get(i) else { continue };
                        let replica = n % clients.len();
                        n += 1;
                        let response = clients[replica].post("/v1/events", line);
                        assert!(
                            matches!(response.status, 200 | 422),
                            "replica {replica}: {} {}",
                            response.status,
                            response.text()
                        );
                        answers[k].push(response.json());
                    }
                }
                for ((name, events), got) in sessions.iter().zip(answers) {
                    assert_replays(config, name, events, &got);
                    let fired = detectors(&got);
                    for d in [
                        "generic_repeat",
                        "known_poll_no_progress",
                        "unknown_tool_repeat",
                    ] {
                        assert!(fired.iter().any(|f| f == d), "{name}: {d} never fired");
                    }
                }
            });
        }
    });
}

/// A small deterministic generator (xorshift), seeded per test and printed, so that a
/// failing run can be replayed.
pub struct Rng(u64);

impl Rng {
    /// Seeded from `LOOPGUARD_TEST_SEED`, else the clock; the seed is printed.
    pub fn seeded() -> Self {
        let seed = std::env::var("LOOPGUARD_TEST_SEED")
            .ok()
            .and_then(|s| s.parse().ok())
            .unwrap_or_else(|| {
                std::time::SystemTime::now()
                    .duration_since(std::time::UNIX_EPOCH)
                    .map_or(1, |d| d.as_nanos() as u64)
                    | 1
            });
        eprintln!("seed {seed} (LOOPGUARD_TEST_SEED={seed} replays this run)");
        Self(seed)
    }

    /// A number below `n`.
    pub fn below(&mut self, n: u64) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0 % n
    }
}
