//! Throwaway Redis servers for tests: `redis-server` processes on free loopback ports with
//! temporary directories, a three-node Redis Cluster joined with `redis-cli --cluster
//! create`, and a minimal RESP client to look inside them. Everything is killed and
//! removed when dropped.
//!
//! Tests call [`require`] first: when `redis-server` is missing it fails the test under CI
//! (`CI=true`) and otherwise prints `SKIPPED` and returns `false`.
//!
//! ```no_run
//! use loopguard_store::redis::testing::{require, RedisServer};
//! if require("my_test") {
//!     let server = RedisServer::start().unwrap();
//!     assert_eq!(server.command(&["PING"]).unwrap().text(), Some("PONG".into()));
//! }
//! ```

use std::collections::hash_map::RandomState;
use std::hash::BuildHasher;
use std::io::{BufRead, BufReader, Write};
use std::net::{TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

/// Whether `redis-server` (and `redis-cli`) can be run.
pub fn available() -> bool {
    ["redis-server", "redis-cli"].iter().all(|program| {
        Command::new(program)
            .arg("--version")
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .status()
            .is_ok_and(|s| s.success())
    })
}

/// `true` when Redis is there. Otherwise: under CI (`CI=true`) a panic, since the test
/// must not silently pass; elsewhere prints `SKIPPED: <test>` and returns `false`.
pub fn require(test: &str) -> bool {
    if available() {
        return true;
    }
    let ci = std::env::var("CI").is_ok_and(|v| v == "true" || v == "1");
    assert!(
        !ci,
        "{test}: redis-server/redis-cli are not installed; scripts/setup/redis.sh installs them (apt-get install redis-server redis-tools)"
    );
    // Straight to the stream, past the test harness' capture, so that the skip shows.
    let _ = writeln!(
        std::io::stderr(),
        "SKIPPED: {test}: redis-server is not installed (scripts/test installs it; or apt-get install redis-server redis-tools)"
    );
    false
}

/// A reply of the RESP protocol.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Resp {
    /// `+OK`.
    Simple(String),
    /// `-ERR …`.
    Error(String),
    /// `:1`.
    Int(i64),
    /// `$…` (`None` for a nil bulk string).
    Bulk(Option<Vec<u8>>),
    /// `*…` (`None` for a nil array).
    Array(Option<Vec<Resp>>),
}

impl Resp {
    /// The reply as text, for simple and bulk strings.
    pub fn text(&self) -> Option<String> {
        match self {
            Self::Simple(s) => Some(s.clone()),
            Self::Bulk(Some(b)) => Some(String::from_utf8_lossy(b).into_owned()),
            _ => None,
        }
    }

    /// The reply as an integer.
    pub fn int(&self) -> Option<i64> {
        match self {
            Self::Int(n) => Some(*n),
            _ => self.text()?.parse().ok(),
        }
    }
}

/// Sends one command over a fresh connection and reads its reply.
pub fn command(port: u16, args: &[&[u8]], timeout: Duration) -> Result<Resp, String> {
    let stream = TcpStream::connect(("127.0.0.1", port)).map_err(|e| format!("connect: {e}"))?;
    stream
        .set_read_timeout(Some(timeout))
        .and_then(|()| stream.set_write_timeout(Some(timeout)))
        .map_err(|e| e.to_string())?;
    let mut request = format!("*{}\r\n", args.len()).into_bytes();
    for arg in args {
        request.extend_from_slice(format!("${}\r\n", arg.len()).as_bytes());
        request.extend_from_slice(arg);
        request.extend_from_slice(b"\r\n");
    }
    let mut reader = BufReader::new(stream);
    reader
        .get_mut()
        .write_all(&request)
        .map_err(|e| format!("write: {e}"))?;
    read_reply(&mut reader)
}

fn read_reply(reader: &mut impl BufRead) -> Result<Resp, String> {
    let mut line = Vec::new();
    reader
        .read_until(b'\n', &mut line)
        .map_err(|e| format!("read: {e}"))?;
    if line.len() < 3 || !line.ends_with(b"\r\n") {
        return Err(format!(
            "bad reply line {:?}",
            String::from_utf8_lossy(&line)
        ));
    }
    let text = String::from_utf8_lossy(&line[1..line.len() - 2]).into_owned();
    let number = || text.parse::<i64>().map_err(|e| format!("{text:?}: {e}"));
    Ok(match line[0] {
        b'+' => Resp::Simple(text),
        b'-' => Resp::Error(text),
        b':' => Resp::Int(number()?),
        b'$' => match number()? {
            n if n < 0 => Resp::Bulk(None),
            n => {
                let mut body = vec![0; usize::try_from(n).unwrap_or(0) + 2];
                reader
                    .read_exact(&mut body)
                    .map_err(|e| format!("read: {e}"))?;
                body.truncate(body.len() - 2);
                Resp::Bulk(Some(body))
            }
        },
        b'*' => match number()? {
            n if n < 0 => Resp::Array(None),
            n => Resp::Array(Some(
                (0..n)
                    .map(|_| read_reply(reader))
                    .collect::<Result<_, _>>()?,
            )),
        },
        other => return Err(format!("unknown reply type {:?}", other as char)),
    })
}

static NEXT: AtomicU64 = AtomicU64::new(0);

/// A port in 15000..25000 that is free, and whose cluster bus port (+10000) is free too.
pub fn free_port() -> Result<u16, String> {
    let seed = RandomState::new().hash_one((std::process::id(), Instant::now()));
    for i in 0..200u64 {
        let port = 15_000 + u16::try_from(seed.wrapping_add(i * 7919) % 10_000).unwrap_or(0);
        let free = |p: u16| TcpListener::bind(("127.0.0.1", p)).is_ok();
        if free(port) && free(port + 10_000) {
            return Ok(port);
        }
    }
    Err("no free loopback port found".into())
}

/// A temporary directory, removed when dropped.
#[derive(Debug)]
struct TempDir(PathBuf);

impl TempDir {
    fn new() -> Result<Self, String> {
        let n = NEXT.fetch_add(1, Ordering::Relaxed);
        let nanos = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.subsec_nanos())
            .unwrap_or(0);
        let dir = std::env::temp_dir().join(format!(
            "loopguard-redis-{}-{n}-{nanos}",
            std::process::id()
        ));
        std::fs::create_dir_all(&dir).map_err(|e| format!("{}: {e}", dir.display()))?;
        Ok(Self(dir))
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// A `redis-server` process on a loopback port.
#[derive(Debug)]
pub struct RedisServer {
    child: Option<Child>,
    port: u16,
    args: Vec<String>,
    dir: TempDir,
}

impl RedisServer {
    /// A server without persistence.
    pub fn start() -> Result<Self, String> {
        Self::start_with(&[])
    }

    /// A server with extra `redis-server` arguments (`["--appendonly", "yes"]`, …).
    pub fn start_with(extra: &[&str]) -> Result<Self, String> {
        Self::start_on(None, extra)
    }

    /// A server on `port` (one from [`free_port`], say), or on a free port when `None`.
    pub fn start_on(port: Option<u16>, extra: &[&str]) -> Result<Self, String> {
        let mut server = Self {
            child: None,
            port: 0,
            args: Vec::new(),
            dir: TempDir::new()?,
        };
        let mut last = String::new();
        for _ in 0..10 {
            server.port = match port {
                Some(p) => p,
                None => free_port()?,
            };
            server.args = [
                "--port",
                &server.port.to_string(),
                "--bind",
                "127.0.0.1",
                "--save",
                "",
                "--appendonly",
                "no",
                "--daemonize",
                "no",
                "--logfile",
                "redis.log",
            ]
            .iter()
            .map(|s| (*s).to_owned())
            .chain(extra.iter().map(|s| (*s).to_owned()))
            .collect();
            match server.spawn() {
                Ok(()) => return Ok(server),
                Err(e) => {
                    last = e;
                    server.kill();
                    if port.is_some() {
                        std::thread::sleep(Duration::from_millis(100));
                    }
                }
            }
        }
        Err(format!("redis-server did not start: {last}"))
    }

    fn spawn(&mut self) -> Result<(), String> {
        let child = Command::new("redis-server")
            .args(&self.args)
            .current_dir(&self.dir.0)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .map_err(|e| format!("cannot run redis-server: {e}"))?;
        self.child = Some(child);
        let started = Instant::now();
        loop {
            match self.command(&["PING"]) {
                Ok(Resp::Simple(pong)) if pong == "PONG" => return Ok(()),
                // Up, but wants a password.
                Ok(Resp::Error(e)) if e.starts_with("NOAUTH") => return Ok(()),
                _ => {}
            }
            if let Some(child) = self.child.as_mut() {
                if let Ok(Some(status)) = child.try_wait() {
                    self.child = None;
                    return Err(format!("exited with {status}: {}", self.log_tail()));
                }
            }
            if started.elapsed() > Duration::from_secs(20) {
                return Err(format!("not answering after 20 s: {}", self.log_tail()));
            }
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    /// The last lines of its log.
    pub fn log_tail(&self) -> String {
        let log = std::fs::read_to_string(self.dir.0.join("redis.log")).unwrap_or_default();
        let lines: Vec<&str> = log.lines().collect();
        lines[lines.len().saturating_sub(5)..].join(" | ")
    }

    /// Its port.
    pub fn port(&self) -> u16 {
        self.port
    }

    /// `redis://127.0.0.1:PORT`.
    pub fn url(&self) -> String {
        format!("redis://127.0.0.1:{}", self.port)
    }

    /// Its working directory (AOF files, the cluster config, the log).
    pub fn dir(&self) -> &Path {
        &self.dir.0
    }

    /// Its process id, while it runs.
    pub fn pid(&self) -> Option<u32> {
        self.child.as_ref().map(Child::id)
    }

    /// Runs one command (5 s timeout).
    pub fn command(&self, args: &[&str]) -> Result<Resp, String> {
        let args: Vec<&[u8]> = args.iter().map(|a| a.as_bytes()).collect();
        command(self.port, &args, Duration::from_secs(5))
    }

    /// Runs one command with binary arguments.
    pub fn command_bytes(&self, args: &[&[u8]]) -> Result<Resp, String> {
        command(self.port, args, Duration::from_secs(5))
    }

    /// `INFO section` as `field → value` pairs.
    pub fn info(&self, section: &str) -> Result<Vec<(String, String)>, String> {
        let text = self
            .command(&["INFO", section])?
            .text()
            .ok_or("INFO gave no text")?;
        Ok(text
            .lines()
            .filter_map(|l| l.split_once(':'))
            .map(|(k, v)| (k.to_owned(), v.trim().to_owned()))
            .collect())
    }

    /// One field of `INFO section`.
    pub fn info_field(&self, section: &str, field: &str) -> Result<String, String> {
        self.info(section)?
            .into_iter()
            .find(|(k, _)| k == field)
            .map(|(_, v)| v)
            .ok_or_else(|| format!("no {field} in INFO {section}"))
    }

    /// Whether the process is running.
    pub fn running(&mut self) -> bool {
        self.child
            .as_mut()
            .is_some_and(|c| c.try_wait().ok().flatten().is_none())
    }

    /// SIGKILL: nothing is flushed beyond what the persistence settings already did.
    pub fn kill(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }

    /// Stops and starts it again on the same port and directory (so with the same data
    /// when it persists any).
    pub fn restart(&mut self) -> Result<(), String> {
        self.kill();
        let started = Instant::now();
        loop {
            // The port may linger for a moment after the kill.
            match self.spawn() {
                Ok(()) => return Ok(()),
                Err(e) if started.elapsed() > Duration::from_secs(10) => return Err(e),
                Err(_) => std::thread::sleep(Duration::from_millis(100)),
            }
        }
    }

    /// Sends SIGSTOP (`true`) or SIGCONT (`false`): a Redis that accepts connections but
    /// does not answer.
    pub fn freeze(&self, stopped: bool) -> Result<(), String> {
        let pid = self.pid().ok_or("not running")?;
        let signal = if stopped { "-STOP" } else { "-CONT" };
        let status = Command::new("kill")
            .args([signal, &pid.to_string()])
            .status()
            .map_err(|e| e.to_string())?;
        status
            .success()
            .then_some(())
            .ok_or_else(|| format!("kill {signal} failed"))
    }
}

impl Drop for RedisServer {
    fn drop(&mut self) {
        if let Some(pid) = self.pid() {
            // A frozen server does not die of SIGKILL until it is continued on some
            // systems; continue it first.
            let _ = Command::new("kill")
                .args(["-CONT", &pid.to_string()])
                .stderr(Stdio::null())
                .status();
        }
        self.kill();
    }
}

/// A Redis Cluster of primaries on loopback, without replicas.
#[derive(Debug)]
pub struct RedisCluster {
    nodes: Vec<RedisServer>,
}

impl RedisCluster {
    /// Starts `n` (at least 3) nodes with `--cluster-enabled yes`, joins them with
    /// `redis-cli --cluster create … --cluster-yes`, and waits until every node reports
    /// `cluster_state:ok`.
    pub fn start(n: usize) -> Result<Self, String> {
        let nodes = (0..n.max(3))
            .map(|_| {
                RedisServer::start_with(&[
                    "--cluster-enabled",
                    "yes",
                    "--cluster-config-file",
                    "nodes.conf",
                    "--cluster-node-timeout",
                    "3000",
                ])
            })
            .collect::<Result<Vec<_>, _>>()?;
        let addrs: Vec<String> = nodes
            .iter()
            .map(|n| format!("127.0.0.1:{}", n.port()))
            .collect();
        let out = Command::new("redis-cli")
            .arg("--cluster")
            .arg("create")
            .args(&addrs)
            .args(["--cluster-replicas", "0", "--cluster-yes"])
            .stdin(Stdio::null())
            .output()
            .map_err(|e| format!("cannot run redis-cli: {e}"))?;
        if !out.status.success() {
            return Err(format!(
                "redis-cli --cluster create failed: {}{}",
                String::from_utf8_lossy(&out.stdout),
                String::from_utf8_lossy(&out.stderr)
            ));
        }
        let cluster = Self { nodes };
        let started = Instant::now();
        while !cluster.ok() {
            if started.elapsed() > Duration::from_secs(30) {
                return Err("the cluster did not reach cluster_state:ok in 30 s".into());
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        Ok(cluster)
    }

    fn ok(&self) -> bool {
        self.nodes.iter().all(|n| {
            n.command(&["CLUSTER", "INFO"])
                .ok()
                .and_then(|r| r.text())
                .is_some_and(|t| {
                    t.contains("cluster_state:ok") && t.contains("cluster_slots_ok:16384")
                })
        })
    }

    /// `redis-cluster://127.0.0.1:P1,127.0.0.1:P2,…`.
    pub fn url(&self) -> String {
        let nodes: Vec<String> = self
            .nodes
            .iter()
            .map(|n| format!("127.0.0.1:{}", n.port()))
            .collect();
        format!("redis-cluster://{}", nodes.join(","))
    }

    /// The nodes.
    pub fn nodes(&self) -> &[RedisServer] {
        &self.nodes
    }

    /// Total keys over every node.
    pub fn keys(&self) -> Result<i64, String> {
        let mut total = 0;
        for node in &self.nodes {
            total += node.command(&["DBSIZE"])?.int().ok_or("DBSIZE")?;
        }
        Ok(total)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn replies_parse() {
        let mut input: &[u8] = b"*3\r\n$3\r\nabc\r\n:-4\r\n$-1\r\n";
        assert_eq!(
            read_reply(&mut input).unwrap(),
            Resp::Array(Some(vec![
                Resp::Bulk(Some(b"abc".to_vec())),
                Resp::Int(-4),
                Resp::Bulk(None)
            ]))
        );
        let mut input: &[u8] = b"-ERR nope\r\n";
        assert_eq!(
            read_reply(&mut input).unwrap(),
            Resp::Error("ERR nope".into())
        );
        let mut input: &[u8] = b"?\r\n";
        assert!(read_reply(&mut input).is_err());
        assert_eq!(Resp::Bulk(Some(b"12".to_vec())).int(), Some(12));
    }
}
