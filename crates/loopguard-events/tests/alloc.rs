//! Allocations of a replay, counted by a global allocator: once the run exists and the
//! buffers have grown to the stream's lines, reading, fingerprinting, judging and answering
//! an event allocates nothing (warnings and blocks carry their message, which does).

use std::alloc::{GlobalAlloc, Layout, System};
use std::sync::atomic::{AtomicUsize, Ordering};

use loopguard::ConfigSet;
use loopguard_events::{replay, Replayer};

struct Counting;

static ALLOCATIONS: AtomicUsize = AtomicUsize::new(0);

// A global allocator has no safe interface (workspace lints: Cargo.toml); this one
// counts, then forwards every call to the system's with the caller's own arguments.
#[allow(unsafe_code)]
// SAFETY: every method forwards to `System`, which upholds `GlobalAlloc`'s contract.
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        ALLOCATIONS.fetch_add(1, Ordering::Relaxed);
        // SAFETY: the caller's arguments, passed on as `GlobalAlloc` received them.
        unsafe { System.alloc(layout) }
    }
    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        // SAFETY: the caller's arguments, passed on as `GlobalAlloc` received them.
        unsafe { System.dealloc(ptr, layout) }
    }
    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        ALLOCATIONS.fetch_add(1, Ordering::Relaxed);
        // SAFETY: the caller's arguments, passed on as `GlobalAlloc` received them.
        unsafe { System.realloc(ptr, layout, new_size) }
    }
}

#[global_allocator]
static GLOBAL: Counting = Counting;

const TOOLS: [&str; 6] = ["read", "exec", "process", "message", "grep", "update_plan"];

/// A call and its result, shaped like the benchmark workloads: ~1 KB of text with escapes,
/// keys out of order, ids in every line.
fn pair(i: usize, out: &mut String) {
    use std::fmt::Write;
    let tool = TOOLS[i % TOOLS.len()];
    let v = (i * 7919) % 50;
    let args = match tool {
        "process" => format!(r#"{{"sessionId":"proc-{v:03}","action":"poll"}}"#),
        "message" => format!(r#"{{"text":"update {v}","action":"send","to":"chat"}}"#),
        "exec" => format!(r#"{{"command":"npm test -- suite_{v}","cwd":"/workspace"}}"#),
        "update_plan" => {
            format!(r#"{{"plan":[{{"step":"s{v}","status":"pending"}}],"explanation":"e"}}"#)
        }
        _ => format!(r#"{{"path":"/workspace/src/module_{v:04}.ts","limit":400}}"#),
    };
    let text = format!(
        "[{i}] {}\\n\\t\\\"quoted\\\" \\u00e9",
        "lorem ipsum dolor sit amet ".repeat(36)
    );
    let details = match tool {
        "exec" => format!(
            r#"{{"status":"completed","exitCode":0,"durationMs":{i},"aggregated":"{text}"}}"#
        ),
        "process" => r#"{"status":"running","aggregated":"x"}"#.to_owned(),
        "message" => format!(r#"{{"ok":true,"messageId":"m{i}"}}"#),
        _ => r#"{"ok":true,"bytes":1000}"#.to_owned(),
    };
    let _ = writeln!(
        out,
        r#"{{"type":"call","session":"perf","run":"run-1","call_id":"call-{i}","tool":"{tool}","args":{args}}}"#
    );
    let _ = writeln!(
        out,
        r#"{{"type":"result","session":"perf","run":"run-1","call_id":"call-{i}","tool":"{tool}","args":{args},"result":{{"content":[{{"type":"text","text":"{text}"}}],"details":{details}}}}}"#
    );
}

fn stream(from: usize, to: usize) -> Vec<u8> {
    let mut out = String::new();
    for i in from..to {
        pair(i, &mut out);
    }
    out.into_bytes()
}

/// Allocations while replaying `events` call/result pairs after `warm` pairs.
fn allocations(config: &str, warm: usize, events: usize) -> (usize, u64) {
    let mut replayer = Replayer::new(ConfigSet::parse(config).unwrap(), None);
    let (first, second) = (stream(0, warm), stream(warm, warm + events));
    replay(&mut replayer, &first[..], std::io::sink(), 1 << 20).unwrap();
    let before = ALLOCATIONS.load(Ordering::Relaxed);
    let summary = replay(&mut replayer, &second[..], std::io::sink(), 1 << 20).unwrap();
    let after = ALLOCATIONS.load(Ordering::Relaxed);
    assert_eq!(summary.invalid, 0);
    (after - before, summary.events)
}

#[test]
fn a_steady_replay_allocates_nothing_per_event() {
    // The default config (rolling detectors off, the post-compaction guard on), then
    // detection on with thresholds this stream never reaches.
    for config in [
        "{}",
        "{ tools: { loopDetection: { enabled: true, historySize: 30, warningThreshold: 1000, criticalThreshold: 1001, globalCircuitBreakerThreshold: 1002 } } }",
    ] {
        let (allocations, events) = allocations(config, 2_000, 2_000);
        println!("{config}: {allocations} allocations for {events} events");
        // The replay's own line buffer grows once per replay call; nothing is per event.
        assert!(
            allocations <= 16,
            "{allocations} allocations for {events} events"
        );
    }
}
