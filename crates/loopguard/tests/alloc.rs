//! Memory, counted by a global allocator: no allocation per call in steady state, and the
//! size of a live (session, run) with 30 records.

use std::alloc::{GlobalAlloc, Layout, System};
use std::sync::atomic::{AtomicIsize, AtomicUsize, Ordering};

use loopguard::{Call, ConfigSet, Guard, Limits, ManualClock, Millis, Outcome, Scope, Verdict};
use serde_json::{json, Value};

struct Counting;

static ALLOCATIONS: AtomicUsize = AtomicUsize::new(0);
static LIVE_BYTES: AtomicIsize = AtomicIsize::new(0);

// A global allocator has no safe interface (workspace lints: Cargo.toml); this one
// counts, then forwards every call to the system's with the caller's own arguments.
#[allow(unsafe_code)]
// SAFETY: every method forwards to `System`, which upholds `GlobalAlloc`'s contract.
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        ALLOCATIONS.fetch_add(1, Ordering::Relaxed);
        LIVE_BYTES.fetch_add(layout.size() as isize, Ordering::Relaxed);
        // SAFETY: the caller's arguments, passed on as `GlobalAlloc` received them.
        unsafe { System.alloc(layout) }
    }
    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        LIVE_BYTES.fetch_sub(layout.size() as isize, Ordering::Relaxed);
        // SAFETY: the caller's arguments, passed on as `GlobalAlloc` received them.
        unsafe { System.dealloc(ptr, layout) }
    }
    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        ALLOCATIONS.fetch_add(1, Ordering::Relaxed);
        LIVE_BYTES.fetch_add(
            new_size as isize - layout.size() as isize,
            Ordering::Relaxed,
        );
        // SAFETY: the caller's arguments, passed on as `GlobalAlloc` received them.
        unsafe { System.realloc(ptr, layout, new_size) }
    }
}

#[global_allocator]
static GLOBAL: Counting = Counting;

const TOOLS: [&str; 8] = [
    "read",
    "write",
    "exec",
    "process",
    "message",
    "grep",
    "web_fetch",
    "update_plan",
];

/// A workload-like call: one of a few tools, arguments from a pool, a ~1 KB result.
fn call_data(i: usize) -> (String, Value, Value, String) {
    let tool = TOOLS[i % TOOLS.len()];
    let v = (i * 7919) % 300;
    let args = match tool {
        "process" => json!({"action": "poll", "sessionId": format!("proc-{v:03}")}),
        "message" => json!({"action": "send", "target": "chat", "text": format!("update {v}")}),
        "exec" => json!({"command": format!("npm test -- suite_{v}"), "cwd": "/workspace"}),
        _ => json!({"path": format!("/workspace/src/module_{v:04}.ts"), "limit": 400}),
    };
    let text = format!("[{i}] {}", "lorem ipsum dolor sit amet ".repeat(36));
    let result = match tool {
        "exec" => {
            json!({"content": [{"type": "text", "text": text}], "details": {"status": "completed", "exitCode": 0, "durationMs": i, "aggregated": text}})
        }
        "process" => {
            json!({"content": [{"type": "text", "text": text}], "details": {"status": "running", "aggregated": "x"}})
        }
        "message" => {
            json!({"content": [{"type": "text", "text": "sent"}], "details": {"ok": true, "messageId": format!("m{i}")}})
        }
        _ => {
            json!({"content": [{"type": "text", "text": text}], "details": {"ok": true, "bytes": 1000}})
        }
    };
    (tool.to_owned(), args, result, format!("call-{i}"))
}

fn guard() -> Guard<ManualClock> {
    let config = ConfigSet::parse("{ tools: { loopDetection: { enabled: true } } }").unwrap();
    Guard::with_clock(config, Limits::default(), ManualClock::new(Millis::ZERO))
}

/// Both measurements run in one test: the counters are global to the process.
#[test]
fn memory() {
    no_allocation_per_call_in_steady_state();
    bytes_per_live_run();
}

fn no_allocation_per_call_in_steady_state() {
    let mut g = guard();
    let scope = Scope::new("perf").with_run(Some("run-1"));
    // The calls' own data is built up front; only the guard's work is counted.
    let data: Vec<_> = (0..4000).map(call_data).collect();
    let cycle = |g: &mut Guard<ManualClock>, d: &(String, Value, Value, String)| {
        let call = Call::new(&d.0, &d.1).with_id(Some(&d.3));
        let ticket = g.begin(&scope, &call);
        assert!(matches!(ticket.verdict(), Verdict::Allow), "{ticket:?}");
        g.finish(ticket, Outcome::Result(&d.2));
    };
    for d in &data[..2000] {
        cycle(&mut g, d);
    }
    let before = ALLOCATIONS.load(Ordering::SeqCst);
    for d in &data[2000..] {
        cycle(&mut g, d);
    }
    let allocations = ALLOCATIONS.load(Ordering::SeqCst) - before;
    println!("allocations in 2000 steady-state calls: {allocations}");
    assert_eq!(allocations, 0, "the host cycle allocated in steady state");
}

fn bytes_per_live_run() {
    const RUNS: usize = 2000;
    let data: Vec<_> = (0..30).map(call_data).collect();
    let session_names: Vec<String> = (0..RUNS).map(|i| format!("session-{i:06}")).collect();
    let mut g = guard();
    let before = LIVE_BYTES.load(Ordering::SeqCst);
    for name in &session_names {
        let scope = Scope::new(name).with_run(Some("run-0001"));
        for d in &data {
            let call = Call::new(&d.0, &d.1).with_id(Some(&d.3));
            let ticket = g.begin(&scope, &call);
            g.finish(ticket, Outcome::Result(&d.2));
        }
    }
    let per_run = (LIVE_BYTES.load(Ordering::SeqCst) - before) as f64 / RUNS as f64;
    let records: usize = g.runs().map(|(_, _, s)| s.history().len()).sum();
    assert_eq!(records, RUNS * 30);
    println!("bytes per live (session, run) with 30 records: {per_run:.0}");
    assert!(per_run <= 4096.0, "{per_run} bytes per live run");
}
