//! Helpers for the MCP proxy tests: the proxy as a child process, driven line by line.
#![allow(dead_code)]

use std::io::{BufRead, BufReader, Read, Write};
use std::path::{Path, PathBuf};
use std::process::{Child, ChildStdin, Command, Stdio};
use std::sync::mpsc::{channel, Receiver, RecvTimeoutError};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use serde_json::Value;

/// The test fixtures of the MCP tests.
pub fn fixtures() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/mcp")
}

/// `loopguard mcp-proxy ARGS -- SERVER…`, running.
pub struct Proxy {
    child: Child,
    stdin: Option<ChildStdin>,
    lines: Receiver<String>,
    stderr: Arc<Mutex<String>>,
}

impl Proxy {
    /// Starts the proxy with `args` in front of `server`.
    pub fn start(args: &[&str], server: &[&str]) -> Self {
        let mut child = Command::new(env!("CARGO_BIN_EXE_loopguard"))
            .arg("mcp-proxy")
            .args(args)
            .arg("--")
            .args(server)
            .env_remove("LOOPGUARD_CONFIG")
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .expect("start the proxy");
        let stdout = child.stdout.take().unwrap();
        let (tx, lines) = channel();
        std::thread::spawn(move || {
            for line in BufReader::new(stdout).lines() {
                let Ok(line) = line else { break };
                if tx.send(line).is_err() {
                    break;
                }
            }
        });
        let stderr = Arc::new(Mutex::new(String::new()));
        let sink = Arc::clone(&stderr);
        let mut err = child.stderr.take().unwrap();
        std::thread::spawn(move || {
            let mut buf = [0u8; 4096];
            while let Ok(n) = err.read(&mut buf) {
                if n == 0 {
                    break;
                }
                sink.lock()
                    .unwrap()
                    .push_str(&String::from_utf8_lossy(&buf[..n]));
            }
        });
        let stdin = child.stdin.take();
        Self {
            child,
            stdin,
            lines,
            stderr,
        }
    }

    /// The proxy's process id.
    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// Sends one line (a newline is added).
    pub fn send(&mut self, line: &str) {
        let stdin = self.stdin.as_mut().expect("stdin is open");
        stdin.write_all(line.as_bytes()).unwrap();
        stdin.write_all(b"\n").unwrap();
        stdin.flush().unwrap();
    }

    /// The next line the proxy writes (fails after 20 s).
    pub fn recv(&self) -> String {
        match self.lines.recv_timeout(Duration::from_secs(20)) {
            Ok(line) => line,
            Err(e) => panic!("no line from the proxy ({e:?}); stderr: {}", self.stderr()),
        }
    }

    /// The next line, as JSON.
    pub fn recv_json(&self) -> Value {
        let line = self.recv();
        serde_json::from_str(&line).unwrap_or_else(|e| panic!("not JSON ({e}): {line}"))
    }

    /// Every line the proxy writes until its stdout ends (fails after `limit`).
    pub fn rest(&self, limit: Duration) -> Vec<String> {
        let deadline = Instant::now() + limit;
        let mut lines = Vec::new();
        loop {
            let left = deadline.saturating_duration_since(Instant::now());
            match self.lines.recv_timeout(left) {
                Ok(line) => lines.push(line),
                Err(RecvTimeoutError::Disconnected) => return lines,
                Err(RecvTimeoutError::Timeout) => panic!(
                    "the proxy's stdout did not end within {limit:?} ({} lines); stderr: {}",
                    lines.len(),
                    self.stderr()
                ),
            }
        }
    }

    /// Whether the proxy's stdout ended without another line within `within`.
    pub fn ends_within(&self, within: Duration) -> bool {
        matches!(
            self.lines.recv_timeout(within),
            Err(RecvTimeoutError::Disconnected)
        )
    }

    /// Closes the proxy's stdin (the client goes away).
    pub fn close(&mut self) {
        self.stdin = None;
    }

    /// Sends the proxy a signal (`TERM`, `INT`, `HUP`, ...) with kill(1).
    pub fn signal(&self, name: &str) {
        let status = Command::new("kill")
            .arg("-s")
            .arg(name)
            .arg(self.child.id().to_string())
            .status()
            .expect("run kill");
        assert!(status.success(), "kill -s {name} failed");
    }

    /// What the proxy wrote on stderr so far (the server's stderr included).
    pub fn stderr(&self) -> String {
        self.stderr.lock().unwrap().clone()
    }

    /// Waits until the proxy's stderr contains `needle` (fails after 10 s: stderr is read
    /// by a thread of its own, so it may lag behind stdout).
    pub fn stderr_contains(&self, needle: &str) {
        let deadline = Instant::now() + Duration::from_secs(10);
        while !self.stderr().contains(needle) {
            assert!(
                Instant::now() < deadline,
                "stderr never said {needle:?}: {}",
                self.stderr()
            );
            std::thread::sleep(Duration::from_millis(10));
        }
    }

    /// Waits for the proxy to exit (fails after `limit`); returns its exit code and how
    /// long it took.
    pub fn wait(mut self, limit: Duration) -> (i32, Duration) {
        let start = Instant::now();
        loop {
            if let Some(status) = self.child.try_wait().unwrap() {
                return (status.code().unwrap_or(-1), start.elapsed());
            }
            if start.elapsed() > limit {
                let _ = self.child.kill();
                panic!(
                    "the proxy did not exit within {limit:?}; stderr: {}",
                    self.stderr()
                );
            }
            std::thread::sleep(Duration::from_millis(10));
        }
    }
}

impl Drop for Proxy {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// The scripted server (standard library Python) in `mode`, logging what it receives
/// to `log`.
pub fn scripted(mode: &str, log: &Path) -> Vec<String> {
    vec![
        "python3".into(),
        fixtures().join("scripted_server.py").display().to_string(),
        mode.into(),
        log.display().to_string(),
    ]
}
