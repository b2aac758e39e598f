//! The reliability suite of `loopguard serve`: hostile and unlucky clients against the real
//! binary on loopback, each test bounded in time. Run with `--nocapture` for the figures.
//!
//! - slow bodies, slow heads and idle connections by the hundred: `/healthz` and a normal
//!   client are served meanwhile, and the server closes every one of them on time;
//! - more connections than the open-file limit allows: the server caps itself below it,
//!   closes idle connections to make room, and keeps serving;
//! - every request of a stream retried at random, and the server killed between sending
//!   a request and reading its answer: the answers are those of one clean replay, so no
//!   event counted twice;
//! - bodies of the JSON shapes that cost the most to parse: each request stays within the
//!   cost it reserved, memory goes back afterwards, and the budget bounds requests that
//!   arrive together.
//!
//! Redis faults with retries are in `redis_faults.rs`.

mod common;
mod serve_common;

use std::io::Write;
use std::net::TcpStream;
use std::time::{Duration, Instant};

use loopguard::ConfigSet;
use serde_json::Value;
use serve_common::{
    assert_replays, config_file, session_events, tempdir, Client, Rng, Server, CONFIG,
};

/// Milliseconds at the given quantile of `samples` (sorted here).
fn quantile(samples: &mut [f64], q: f64) -> f64 {
    samples.sort_by(f64::total_cmp);
    let i = ((samples.len() as f64 - 1.0) * q).round() as usize;
    samples.get(i).copied().unwrap_or(f64::NAN)
}

/// Sends `/healthz` and one event in turn for `for_`, on one keep-alive connection;
/// returns the latency of each request in ms. Every answer must be a 200.
fn serve_normally(server: &Server, for_: Duration, label: &str) -> Vec<f64> {
    let mut client = server.client();
    let started = Instant::now();
    let mut latencies = Vec::new();
    let mut i = 0u64;
    while started.elapsed() < for_ {
        i += 1;
        let t = Instant::now();
        let response = if i.is_multiple_of(2) {
            client.get("/healthz")
        } else {
            client.post(
                "/v1/events",
                &format!(r#"{{"type":"call","session":"{label}","call_id":"c{i}","tool":"read","args":{{"i":{i}}}}}"#),
            )
        };
        latencies.push(t.elapsed().as_secs_f64() * 1e3);
        assert_eq!(response.status, 200, "{label}: {}", response.text());
    }
    latencies
}

fn metric(text: &str, series: &str) -> f64 {
    text.lines()
        .find_map(|l| l.strip_prefix(series)?.strip_prefix(' ')?.parse().ok())
        .unwrap_or_else(|| panic!("no {series} in\n{text}"))
}

/// Room for `n` sockets in this test process (it raises its own soft limit as the server
/// does), less a reserve.
fn sockets_allowed(n: usize) -> usize {
    let (cap, _) = loopguard_server::connection_cap(usize::MAX);
    n.min(cap.saturating_sub(64))
}

#[test]
fn slow_bodies_heads_and_idle_connections_do_not_lock_the_server() {
    let server = Server::start(&[
        "--memory",
        "--header-timeout",
        "2s",
        "--body-timeout",
        "3s",
        "--idle-timeout",
        "4s",
    ]);
    let baseline = serve_normally(&server, Duration::from_millis(1500), "before");

    // The flood: connections that say nothing, that trickle a head, that trickle a body.
    let room = sockets_allowed(1000);
    let (idle_n, heads_n, bodies_n) = (room * 6 / 10, room / 10, room * 3 / 10);
    let connect = || TcpStream::connect(server.addr).expect("connect");
    let idle: Vec<TcpStream> = (0..idle_n).map(|_| connect()).collect();
    let mut slow: Vec<TcpStream> = Vec::new();
    for _ in 0..heads_n {
        let mut s = connect();
        let _ = s.write_all(b"POST /v1/events HTTP/1.1\r\nHost: x\r\n");
        slow.push(s);
    }
    for _ in 0..bodies_n {
        let mut s = connect();
        let _ = s.write_all(
            b"POST /v1/events HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: 100000\r\n\r\n[",
        );
        slow.push(s);
    }
    let held = idle.len() + slow.len();
    let trickling = std::sync::atomic::AtomicBool::new(true);
    let (during, metrics) = std::thread::scope(|scope| {
        scope.spawn(|| {
            // One byte per connection every 300 ms: heads and bodies that never end.
            let mut k = 0u64;
            while trickling.load(std::sync::atomic::Ordering::Relaxed) {
                for s in &mut slow {
                    let byte: &[u8] = if k.is_multiple_of(2) { b"X" } else { b"-" };
                    let _ = s.write_all(byte);
                }
                k += 1;
                std::thread::sleep(Duration::from_millis(300));
            }
        });
        let during = serve_normally(&server, Duration::from_millis(5500), "during");
        trickling.store(false, std::sync::atomic::Ordering::Relaxed);
        let metrics = server.client().get("/metrics").text();
        (during, metrics)
    });
    let (mut baseline, mut during) = (baseline, during);
    let (b50, b99) = (quantile(&mut baseline, 0.5), quantile(&mut baseline, 0.99));
    let (d50, d99) = (quantile(&mut during, 0.5), quantile(&mut during, 0.99));
    println!(
        "connections held: {held} ({idle_n} idle, {heads_n} trickling a head, {bodies_n} trickling a body)"
    );
    println!(
        "requests served meanwhile: {} (healthz and events alternating), p50 {d50:.2} ms, p99 {d99:.2} ms; before the flood: {} requests, p50 {b50:.2} ms, p99 {b99:.2} ms",
        during.len(),
        baseline.len()
    );
    let closed = |reason: &str| {
        metric(
            &metrics,
            &format!("loopguard_http_connections_closed_total{{reason=\"{reason}\"}}"),
        )
    };
    let timed_out_bodies = metric(&metrics, "loopguard_http_responses_total{code=\"408\"}");
    println!(
        "closed by the server: {} idle, {} slow heads, {} slow bodies (408)",
        closed("idle_timeout"),
        closed("header_timeout"),
        timed_out_bodies
    );
    assert!(
        d99 < (10.0 * b99).max(100.0),
        "p99 {d99:.1} ms during the flood, {b99:.1} ms before"
    );
    assert!(closed("header_timeout") >= heads_n as f64, "{metrics}");
    assert!(timed_out_bodies >= bodies_n as f64, "{metrics}");
    assert!(closed("idle_timeout") >= idle_n as f64, "{metrics}");
    drop(idle);
}

#[cfg(unix)]
#[test]
fn connections_are_capped_below_the_open_file_limit() {
    // A server whose open-file limit is 200 (soft and hard: it cannot raise it).
    let limited = Server::try_start_with_nofile(200, &["--memory"]).unwrap();
    let want = sockets_allowed(400);
    let conns: Vec<TcpStream> = (0..want)
        .map(|_| TcpStream::connect(limited.addr).unwrap())
        .collect();
    std::thread::sleep(Duration::from_millis(500));
    // A client arriving now is served: an idle connection makes room for it.
    let started = Instant::now();
    let mut client = Client::connect(limited.addr);
    assert_eq!(client.get("/healthz").status, 200);
    let waited = started.elapsed();
    let metrics = client.get("/metrics").text();
    let open = metric(&metrics, "loopguard_http_connections_open");
    let evicted = metric(
        &metrics,
        "loopguard_http_connections_closed_total{reason=\"evicted\"}",
    );
    println!(
        "{want} idle connections against an open-file limit of 200: {open} open at once (cap 136), {evicted} idle ones closed to make room, a new client served in {:.1} ms",
        waited.as_secs_f64() * 1e3
    );
    assert!(open <= 136.0, "{metrics}");
    assert!(evicted >= (want - 136) as f64, "{metrics}");
    assert!(waited < Duration::from_secs(2), "{waited:?}");
    assert!(
        !limited.stderr().contains("cannot accept"),
        "{}",
        limited.stderr()
    );
    drop(conns);
}

/// Sends one request and returns its answer, reconnecting after a failure.
fn post_until_answered(server: &Server, client: &mut Option<Client>, body: &str) -> (u16, Value) {
    loop {
        let c = client.get_or_insert_with(|| server.client());
        match c.try_post("/v1/events", body) {
            Some(r) if matches!(r.status, 200 | 422) => return (r.status, r.json()),
            _ => {
                *client = None;
                std::thread::sleep(Duration::from_millis(20));
            }
        }
    }
}

#[test]
fn retried_requests_count_once_across_kills() {
    let mut rng = Rng::seeded();
    let dir = tempdir();
    let config = config_file(dir.path());
    let config_arg = config.display().to_string();
    let db = dir.path().join("retries.db").display().to_string();
    let start = || Server::start(&["--db", &db, "--config", &config_arg]);
    let sessions: Vec<(String, Vec<String>)> = (0..6)
        .map(|k| {
            let name = format!("retry-{k}");
            let events = session_events(&name, k);
            (name, events)
        })
        .collect();
    let longest = sessions.iter().map(|(_, e)| e.len()).max().unwrap();
    let mut answers: Vec<Vec<Value>> = vec![Vec::new(); sessions.len()];
    let mut server = start();
    let mut client = None;
    let (mut sent, mut retries, mut kills) = (0, 0, 0);
    for i in 0..longest {
        for (k, (_, events)) in sessions.iter().enumerate() {
            let Some(line) = events.get(i) else { continue };
            sent += 1;
            if rng.below(40) == 0 {
                // Sent, then the server dies before answering: the event may or may not
                // have been committed. The client retries once the server is back.
                let c = client.get_or_insert_with(|| server.client());
                c.write_raw(
                    format!(
                        "POST /v1/events HTTP/1.1\r\nHost: x\r\nContent-Length: {}\r\n\r\n{line}",
                        line.len()
                    )
                    .as_bytes(),
                );
                std::thread::sleep(Duration::from_millis(rng.below(3)));
                server.kill();
                kills += 1;
                client = None;
                server = start();
                retries += 1;
            }
            let (mut status, mut answer) = post_until_answered(&server, &mut client, line);
            // Retried at random, as a client does whose answer was lost.
            for _ in 0..rng.below(3) {
                retries += 1;
                let (again_status, again) = post_until_answered(&server, &mut client, line);
                assert_eq!(again_status, status, "{line}");
                assert_eq!(again, answer, "a retry gets the same answer: {line}");
                (status, answer) = (again_status, again);
            }
            answers[k].push(answer);
        }
    }
    let config = ConfigSet::parse(CONFIG).unwrap();
    let mut double_counted = 0;
    for ((name, events), got) in sessions.iter().zip(&answers) {
        let want = serve_common::replay_lines(&config, events);
        double_counted += got.iter().zip(&want).filter(|(g, w)| g != w).count();
        assert_replays(&config, name, events, got);
    }
    println!(
        "{sent} events, {retries} retries ({kills} after killing the server between a request and its answer), {double_counted} events counted twice"
    );
    server.stop();
}

/// What a request costs: the peak resident memory while the server answers one body, and
/// the resident memory a moment later, in a fresh server each time.
#[cfg(target_os = "linux")]
#[test]
fn request_memory_stays_within_its_reservation_and_returns() {
    fn status(pid: u32, field: &str) -> u64 {
        let text = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap();
        text.lines()
            .find_map(|l| l.strip_prefix(field)?.strip_prefix(':'))
            .and_then(|v| v.split_whitespace().next()?.parse::<u64>().ok())
            .unwrap()
            * 1024
    }
    let body = |shape: &str, size: usize| -> String {
        let head = r#"{"type":"call","session":"m","tool":"t","args":"#;
        let room = size - head.len() - 1;
        let inner = match shape {
            "text" => format!("\"{}\"", "x".repeat(room - 2)),
            item => {
                let n = (room - 2) / (item.len() + 1);
                format!("[{}]", vec![item; n].join(","))
            }
        };
        format!("{head}{inner}}}")
    };
    println!("| shape | body MiB | status | reserved MiB | peak MiB | peak / body | RSS after - before MiB |");
    println!("|---|---:|---:|---:|---:|---:|---:|");
    let mib = |b: u64| b as f64 / (1 << 20) as f64;
    for (shape, item) in [
        ("numbers", "0"),
        ("objects", r#"{"a":0}"#),
        ("short strings", r#""a""#),
        ("text", "text"),
    ] {
        for size in [1 << 20, 4 << 20, (8 << 20) - 4096] {
            let server = Server::start(&["--memory"]);
            let pid = server.pid();
            let text = body(item, size);
            let cost = loopguard_server::parse_cost(text.as_bytes()) as u64;
            // One small request first, so that what the server sets up lazily on its first
            // request (worker threads, tables) is not counted as this body's memory.
            let warm = server.client().post("/v1/events", &body(item, 256));
            assert_eq!(warm.status, 200, "{}", warm.text());
            std::thread::sleep(Duration::from_millis(100));
            std::fs::write(format!("/proc/{pid}/clear_refs"), "5").unwrap();
            let before = status(pid, "VmRSS");
            let response = server.client().post("/v1/events", &text);
            let peak = status(pid, "VmHWM").saturating_sub(before);
            std::thread::sleep(Duration::from_millis(1200));
            let after = status(pid, "VmRSS").saturating_sub(before);
            println!(
                "| {shape} | {:.1} | {} | {:.0} | {:.1} | {:.1} | {:.1} |",
                mib(text.len() as u64),
                response.status,
                mib(cost.min(512 << 20)),
                mib(peak),
                peak as f64 / text.len() as f64,
                mib(after)
            );
            match response.status {
                200 => assert!(
                    peak <= cost,
                    "{shape} {size}: peak {peak} > reserved {cost}"
                ),
                413 => {
                    assert!(cost > 512 << 20, "{shape} {size}: refused at {cost}");
                    assert!(peak < 4 * size as u64 + (16 << 20), "{shape}: {peak}");
                }
                other => panic!("{shape} {size}: {other} {}", response.text()),
            }
            assert!(after < 16 << 20, "{shape} {size}: {after} bytes kept after");
        }
    }
}

/// Requests that arrive together share the budget: with room for two large parses, six at
/// once take turns, and the server's peak stays near the budget.
#[cfg(target_os = "linux")]
#[test]
fn the_memory_budget_bounds_requests_that_arrive_together() {
    let budget: u64 = 160 << 20;
    // (Test builds parse slowly: the requests waiting their turn must not time out.)
    let server = Server::start(&[
        "--memory",
        "--memory-budget",
        &budget.to_string(),
        "--body-timeout",
        "120s",
    ]);
    let item = "0";
    let n = ((2 << 20) - 64) / 2;
    let text = format!(
        r#"{{"type":"call","session":"m","tool":"t","args":[{}]}}"#,
        vec![item; n].join(",")
    );
    let cost = loopguard_server::parse_cost(text.as_bytes()) as u64;
    let pid = server.pid();
    std::fs::write(format!("/proc/{pid}/clear_refs"), "5").unwrap();
    let read = |field: &str| -> u64 {
        let text = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap();
        text.lines()
            .find_map(|l| l.strip_prefix(field)?.strip_prefix(':'))
            .and_then(|v| v.split_whitespace().next()?.parse::<u64>().ok())
            .unwrap()
            * 1024
    };
    let before = read("VmRSS");
    std::thread::scope(|s| {
        for _ in 0..6 {
            s.spawn(|| {
                let response = server.client().post("/v1/events", &text);
                assert_eq!(response.status, 200, "{}", response.text());
            });
        }
    });
    let peak = read("VmHWM") - before;
    println!(
        "6 bodies of {:.1} MiB at once, each reserving {:.0} MiB, budget {} MiB: peak {:.0} MiB above the idle server (without the budget: about {:.0} MiB)",
        text.len() as f64 / 1048576.0,
        cost as f64 / 1048576.0,
        budget >> 20,
        peak as f64 / 1048576.0,
        6.0 * cost as f64 / 1048576.0
    );
    // The budget, the bodies themselves while they arrive, and what the runtime keeps.
    assert!(
        peak < budget + 6 * text.len() as u64 + (64 << 20),
        "peak {peak}"
    );
}
