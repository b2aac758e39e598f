//! A load generator for `loopguard serve` (and for the `ceiling` example): N keep-alive
//! HTTP/1.1 connections on loopback, each driving its own sessions through the host loop
//! (a call, then its result), one event per request. Bounded in time and in count.
//!
//! ```sh
//! loadgen --addr 127.0.0.1:7671 --connections 64 --duration 10s --warmup 2s
//! loadgen --addr 127.0.0.1:7671 --fill-sessions 100000 --calls 30 --pid 1234
//! loadgen --addr 127.0.0.1:7001,127.0.0.1:7002,127.0.0.1:7003 --pid 11,12,13 --connections 64
//! ```
//!
//! With several addresses (replicas of one deployment), each connection keeps one HTTP
//! connection to every replica and sends each request to the next replica in turn, as a
//! load balancer that spreads one session's events over replicas would; CPU is summed over
//! every `--pid`. `--fill-sessions` then spreads sessions over the replicas, and reports
//! resident memory only when given `--pid`.
//!
//! The first form prints events/s and latency percentiles over the measured window; the
//! second fills the server with sessions of `--calls` calls and results each (one array per
//! session) and reports the server's resident memory per session (from /proc/PID/status).
//! Both end with one JSON line, for scripts.

use std::net::SocketAddr;
use std::time::{Duration, Instant};

use http_body_util::{BodyExt, Full};
use hyper::body::Bytes;
use hyper::client::conn::http1;
use hyper::{header, Request};
use hyper_util::rt::TokioIo;
use tokio::net::TcpStream;

struct Args {
    addrs: Vec<SocketAddr>,
    connections: usize,
    duration: Duration,
    warmup: Duration,
    max_requests: u64,
    sessions_per_connection: usize,
    token: Option<String>,
    fill_sessions: usize,
    calls: usize,
    pids: Vec<u32>,
    label: String,
}

fn parse_args() -> Result<Args, String> {
    let mut args = Args {
        addrs: vec!["127.0.0.1:7671".parse().unwrap()],
        connections: 64,
        duration: Duration::from_secs(10),
        warmup: Duration::from_secs(2),
        max_requests: 5_000_000,
        sessions_per_connection: 16,
        token: std::env::var("LOOPGUARD_TOKEN").ok(),
        fill_sessions: 0,
        calls: 30,
        pids: Vec::new(),
        label: "server".into(),
    };
    let mut it = std::env::args().skip(1);
    while let Some(flag) = it.next() {
        let mut value = || it.next().ok_or_else(|| format!("{flag} needs a value"));
        let number = |v: String| v.parse::<u64>().map_err(|e| format!("{v}: {e}"));
        match flag.as_str() {
            "--addr" => {
                args.addrs = value()?
                    .split(',')
                    .map(|a| a.trim().parse().map_err(|e| format!("--addr {a}: {e}")))
                    .collect::<Result<_, _>>()?
            }
            "--connections" => args.connections = number(value()?)? as usize,
            "--duration" => args.duration = seconds(&value()?)?,
            "--warmup" => args.warmup = seconds(&value()?)?,
            "--max-requests" => args.max_requests = number(value()?)?,
            "--sessions-per-connection" => {
                args.sessions_per_connection = number(value()?)? as usize
            }
            "--token" => args.token = Some(value()?),
            "--fill-sessions" => args.fill_sessions = number(value()?)? as usize,
            "--calls" => args.calls = number(value()?)? as usize,
            "--pid" => {
                args.pids = value()?
                    .split(',')
                    .map(|p| p.trim().parse().map_err(|e| format!("--pid {p}: {e}")))
                    .collect::<Result<_, _>>()?
            }
            "--label" => args.label = value()?,
            other => return Err(format!("unknown argument {other}")),
        }
    }
    if args.connections == 0 || args.sessions_per_connection == 0 {
        return Err("--connections and --sessions-per-connection must be at least 1".into());
    }
    Ok(args)
}

fn seconds(text: &str) -> Result<Duration, String> {
    let n = text.trim_end_matches('s');
    n.parse::<f64>()
        .map(Duration::from_secs_f64)
        .map_err(|e| format!("{text}: {e}"))
}

/// One HTTP/1.1 connection.
struct Conn {
    sender: http1::SendRequest<Full<Bytes>>,
    host: String,
    token: Option<String>,
}

impl Conn {
    async fn open(addr: SocketAddr, token: Option<String>) -> Result<Self, String> {
        let stream = TcpStream::connect(addr).await.map_err(|e| e.to_string())?;
        stream.set_nodelay(true).map_err(|e| e.to_string())?;
        let (sender, conn) = http1::handshake(TokioIo::new(stream))
            .await
            .map_err(|e| e.to_string())?;
        tokio::spawn(conn);
        Ok(Self {
            sender,
            host: addr.to_string(),
            token,
        })
    }

    async fn post(&mut self, body: Vec<u8>) -> Result<(u16, Bytes), String> {
        let mut request = Request::post("/v1/events")
            .header(header::HOST, &self.host)
            .header(header::CONTENT_TYPE, "application/json");
        if let Some(token) = &self.token {
            request = request.header(header::AUTHORIZATION, format!("Bearer {token}"));
        }
        let request = request
            .body(Full::new(Bytes::from(body)))
            .map_err(|e| e.to_string())?;
        self.sender.ready().await.map_err(|e| e.to_string())?;
        let response = self
            .sender
            .send_request(request)
            .await
            .map_err(|e| e.to_string())?;
        let status = response.status().as_u16();
        let body = response
            .into_body()
            .collect()
            .await
            .map_err(|e| e.to_string())?
            .to_bytes();
        Ok((status, body))
    }
}

/// Text of about 1 KiB that changes with `n` (a tool result that makes progress).
fn result_text(n: u64) -> String {
    let mut text = format!("// file version {n}\n");
    while text.len() < 1000 {
        text.push_str(
            "fn handle(request: &Request) -> Response { respond(request.id, Status::Ok) }\n",
        );
    }
    text
}

/// The event stream of one session: read one of 7 files (args ~150 bytes), then its
/// result (~1 KiB; every 3rd read of a file returns the same content as the last one).
fn event(session: &str, step: u64) -> Vec<u8> {
    let call = step / 2;
    let file = call % 7;
    let id = format!("call-{call}");
    let value = if step.is_multiple_of(2) {
        serde_json::json!({
            "type": "call", "session": session, "run": "run-1", "call_id": id, "tool": "read",
            "args": {"path": format!("/workspace/project/src/module_{file}/handler.rs"), "offset": 0, "limit": 400, "encoding": "utf-8"},
        })
    } else {
        serde_json::json!({
            "type": "result", "session": session, "run": "run-1", "call_id": id,
            "result": {"content": [{"type": "text", "text": result_text(call / 3)}]},
        })
    };
    serde_json::to_vec(&value).unwrap()
}

#[derive(Default)]
struct Tally {
    latencies_us: Vec<u32>,
    answered: u64,
    measured: u64,
    errors: u64,
    first_error: Option<String>,
}

async fn drive(args: &Args, index: usize, start: Instant, budget: u64) -> Tally {
    let mut tally = Tally::default();
    let mut conns = Vec::with_capacity(args.addrs.len());
    for &addr in &args.addrs {
        match Conn::open(addr, args.token.clone()).await {
            Ok(c) => conns.push(c),
            Err(e) => {
                tally.errors = 1;
                tally.first_error = Some(e);
                return tally;
            }
        }
    }
    let sessions: Vec<String> = (0..args.sessions_per_connection)
        .map(|k| format!("load-{index}-{k}"))
        .collect();
    let measure_from = start + args.warmup;
    let end = measure_from + args.duration;
    let mut step = 0u64;
    let mut sent = 0u64;
    while sent < budget {
        let now = Instant::now();
        if now >= end {
            break;
        }
        // Round-robin over this connection's sessions, two events (call, result) each.
        let session = &sessions[((step / 2) as usize) % sessions.len()];
        let body = event(session, step / (2 * sessions.len() as u64) * 2 + step % 2);
        // Each request to the next replica (starting apart, so that replicas share the load).
        let replica = (index + step as usize) % conns.len();
        step += 1;
        sent += 1;
        let t = Instant::now();
        let outcome = conns[replica].post(body).await;
        let elapsed = t.elapsed();
        match outcome {
            Ok((200, _)) => {
                tally.answered += 1;
                if t >= measure_from {
                    tally.measured += 1;
                    tally
                        .latencies_us
                        .push(u32::try_from(elapsed.as_micros()).unwrap_or(u32::MAX));
                }
            }
            Ok((status, body)) => {
                tally.errors += 1;
                tally.first_error.get_or_insert_with(|| {
                    format!("status {status}: {}", String::from_utf8_lossy(&body))
                });
            }
            Err(e) => {
                tally.errors += 1;
                tally.first_error.get_or_insert(e);
                match Conn::open(args.addrs[replica], args.token.clone()).await {
                    Ok(c) => conns[replica] = c,
                    Err(_) => break,
                }
            }
        }
    }
    tally
}

fn percentile(sorted: &[u32], p: f64) -> f64 {
    if sorted.is_empty() {
        return f64::NAN;
    }
    let i = ((sorted.len() as f64 - 1.0) * p).round() as usize;
    sorted[i] as f64 / 1000.0
}

/// CPU time (user + system) the processes have used, in microseconds.
fn cpu_micros_of(pids: &[u32]) -> Result<u64, String> {
    pids.iter().map(|&p| cpu_micros(p)).sum()
}

/// CPU time (user + system) a process has used, in microseconds.
fn cpu_micros(pid: u32) -> Result<u64, String> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat"))
        .map_err(|e| format!("cannot read /proc/{pid}/stat: {e}"))?;
    // Fields after the command name (which may contain spaces) start after the last ')'.
    let rest = stat
        .rsplit_once(')')
        .map(|(_, r)| r)
        .ok_or("bad /proc stat")?;
    let fields: Vec<&str> = rest.split_whitespace().collect();
    let ticks: u64 = fields
        .get(11..13)
        .ok_or("bad /proc stat")?
        .iter()
        .map(|f| f.parse::<u64>().unwrap_or(0))
        .sum();
    // Linux reports clock ticks of 1/100 s (USER_HZ).
    Ok(ticks * 10_000)
}

async fn load(args: Args) -> Result<(), String> {
    let start = Instant::now();
    let cpu_at_start = (!args.pids.is_empty())
        .then(|| cpu_micros_of(&args.pids))
        .transpose()?;
    let budget = args.max_requests / args.connections as u64;
    let args = std::sync::Arc::new(args);
    let tasks: Vec<_> = (0..args.connections)
        .map(|i| {
            let args = std::sync::Arc::clone(&args);
            tokio::spawn(async move { drive(&args, i, start, budget).await })
        })
        .collect();
    let mut latencies = Vec::new();
    let (mut measured, mut answered, mut errors, mut first_error) = (0, 0, 0, None);
    for task in tasks {
        let t = task.await.map_err(|e| e.to_string())?;
        latencies.extend(t.latencies_us);
        measured += t.measured;
        answered += t.answered;
        errors += t.errors;
        first_error = first_error.or(t.first_error);
    }
    let window = start.elapsed().saturating_sub(args.warmup).as_secs_f64();
    // CPU is spread over every event answered, warm-up included.
    let cpu_per_event = match cpu_at_start {
        Some(before) => {
            let used = cpu_micros_of(&args.pids)?.saturating_sub(before) as f64;
            Some(used / (answered as f64).max(1.0))
        }
        None => None,
    };
    latencies.sort_unstable();
    let rate = measured as f64 / window;
    let (p50, p99, p999) = (
        percentile(&latencies, 0.50),
        percentile(&latencies, 0.99),
        percentile(&latencies, 0.999),
    );
    println!(
        "{}: {measured} events in {window:.1} s over {} connections to {} server(s): {rate:.0} events/s, p50 {p50:.3} ms, p99 {p99:.3} ms, p99.9 {p999:.3} ms, {errors} errors{}",
        args.label,
        args.connections,
        args.addrs.len(),
        cpu_per_event.map_or(String::new(), |c| format!(", server CPU {c:.1} us/event"))
    );
    if let Some(e) = first_error {
        println!("first error: {e}");
    }
    println!(
        "{}",
        serde_json::json!({
            "label": args.label, "connections": args.connections, "servers": args.addrs.len(), "events": measured,
            "seconds": window, "events_per_second": rate, "p50_ms": p50, "p99_ms": p99,
            "p999_ms": p999, "errors": errors, "server_cpu_us_per_event": cpu_per_event,
        })
    );
    if errors > 0 {
        return Err(format!("{errors} requests failed"));
    }
    Ok(())
}

/// Resident memory of the processes together, in KiB.
fn rss_kib_of(pids: &[u32]) -> Result<u64, String> {
    pids.iter().map(|&p| rss_kib(p)).sum()
}

fn rss_kib(pid: u32) -> Result<u64, String> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status"))
        .map_err(|e| format!("cannot read /proc/{pid}/status: {e}"))?;
    status
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        .ok_or_else(|| "no VmRSS".into())
}

/// The body of one session: `calls` calls of one run, each followed by its result.
fn session_body(session: &str, calls: usize) -> Vec<u8> {
    let events: Vec<_> = (0..calls)
        .flat_map(|i| {
            let id = format!("c{i}");
            let args = serde_json::json!({"path": format!("/src/file_{}.rs", i % 7)});
            [
                serde_json::json!({"type":"call","session":session,"run":"r","call_id":id,"tool":"read","args":args}),
                serde_json::json!({"type":"result","session":session,"run":"r","call_id":id,"result":format!("content {i}")}),
            ]
        })
        .collect();
    serde_json::to_vec(&events).unwrap()
}

async fn fill(args: Args) -> Result<(), String> {
    let before = rss_kib_of(&args.pids)?;
    let started = Instant::now();
    let per_connection = args.fill_sessions.div_ceil(args.connections);
    let args = std::sync::Arc::new(args);
    let tasks: Vec<_> = (0..args.connections)
        .map(|c| {
            let args = std::sync::Arc::clone(&args);
            tokio::spawn(async move {
                let addr = args.addrs[c % args.addrs.len()];
                let mut conn = Conn::open(addr, args.token.clone()).await?;
                let first = c * per_connection;
                let last = (first + per_connection).min(args.fill_sessions);
                for s in first..last {
                    let body = session_body(&format!("fill-{s:07}"), args.calls);
                    let (status, body) = conn.post(body).await?;
                    if status != 200 {
                        return Err(format!(
                            "status {status}: {}",
                            String::from_utf8_lossy(&body)
                        ));
                    }
                }
                Ok::<_, String>(())
            })
        })
        .collect();
    for task in tasks {
        task.await.map_err(|e| e.to_string())??;
    }
    let seconds = started.elapsed().as_secs_f64();
    // Let the allocator settle, then read.
    tokio::time::sleep(Duration::from_millis(500)).await;
    let after = rss_kib_of(&args.pids)?;
    let per_session = (after.saturating_sub(before)) as f64 * 1024.0 / args.fill_sessions as f64;
    println!(
        "{}: {} sessions x {} calls in {seconds:.1} s: RSS {before} KiB -> {after} KiB, {per_session:.0} bytes per live session",
        args.label, args.fill_sessions, args.calls
    );
    println!(
        "{}",
        serde_json::json!({
            "label": args.label, "sessions": args.fill_sessions, "calls": args.calls,
            "rss_before_kib": before, "rss_after_kib": after, "bytes_per_session": per_session,
            "seconds": seconds,
        })
    );
    Ok(())
}

fn main() {
    let args = match parse_args() {
        Ok(a) => a,
        Err(e) => {
            eprintln!("loadgen: {e}");
            std::process::exit(2);
        }
    };
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("runtime");
    let result = runtime.block_on(async move {
        if args.fill_sessions > 0 {
            fill(args).await
        } else {
            load(args).await
        }
    });
    if let Err(e) = result {
        eprintln!("loadgen: {e}");
        std::process::exit(1);
    }
}
