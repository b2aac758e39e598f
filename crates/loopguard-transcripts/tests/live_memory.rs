//! What `scan` charges its open runs against `--max-live-bytes` is what they hold: the
//! same sessions scanned with room for all of them and with room for none differ, in bytes
//! held (counted by a global allocator), by about what the scanner estimated for them.

use std::alloc::{GlobalAlloc, Layout, System};
use std::sync::atomic::{AtomicIsize, Ordering};

use loopguard::ConfigSet;
use loopguard_events::{Event, Ids, OwnedOutcome};
use loopguard_transcripts::{Item, Pos, Scanner, Sink};
use serde_json::json;

struct Counting;

static HELD: AtomicIsize = AtomicIsize::new(0);

// A global allocator has no safe interface (workspace lints: Cargo.toml); this one
// counts, then forwards every call to the system's with the caller's own arguments.
#[allow(unsafe_code)]
// SAFETY: every method forwards to `System`, which upholds `GlobalAlloc`'s contract.
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        HELD.fetch_add(layout.size() as isize, Ordering::Relaxed);
        // SAFETY: the caller's arguments, passed on as `GlobalAlloc` received them.
        unsafe { System.alloc(layout) }
    }
    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        HELD.fetch_sub(layout.size() as isize, Ordering::Relaxed);
        // SAFETY: the caller's arguments, passed on as `GlobalAlloc` received them.
        unsafe { System.dealloc(ptr, layout) }
    }
    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        HELD.fetch_add(
            new_size as isize - layout.size() as isize,
            Ordering::Relaxed,
        );
        // SAFETY: the caller's arguments, passed on as `GlobalAlloc` received them.
        unsafe { System.realloc(ptr, layout, new_size) }
    }
}

#[global_allocator]
static GLOBAL: Counting = Counting;

/// Scans `sessions` sessions of `calls` calls each (results for all but the last call,
/// so that one stays unanswered), sessions interleaved call by call, with a live budget
/// of `budget`. Returns the bytes held at the end (before the reports are taken) and the
/// scanner's estimate of its open runs.
fn scan(sessions: usize, calls: usize, budget: usize) -> (isize, usize) {
    let before = HELD.load(Ordering::Relaxed);
    let mut scanner = Scanner::with_budget(ConfigSet::enabled_defaults(), None, budget);
    let mut line = 0;
    for c in 0..calls {
        for s in 0..sessions {
            let ids = Ids {
                session: format!("session-{s:07}"),
                run: Some("run".into()),
                ..Ids::default()
            };
            let call_id = Some(format!("call-{c}"));
            line += 1;
            let call = Event::Call {
                ids: ids.clone(),
                call_id: call_id.clone(),
                tool: "read".into(),
                args: json!({"path": format!("/src/{s}/{c}")}),
                batch: None,
            };
            scanner.push(Pos::new(line, 0), Item::Event(call));
            if c + 1 < calls {
                line += 1;
                let result = Event::Result {
                    ids,
                    call_id,
                    tool: None,
                    args: None,
                    outcome: OwnedOutcome::Result(
                        json!({"content": [{"type": "text", "text": "ok"}]}),
                    ),
                };
                scanner.push(Pos::new(line, 0), Item::Event(result));
            }
        }
    }
    let held = HELD.load(Ordering::Relaxed) - before;
    let estimate = scanner.live_bytes();
    drop(scanner.finish());
    (held, estimate)
}

#[test]
fn the_live_estimate_is_what_open_runs_hold() {
    // One call unanswered; a few calls; a full history (the default keeps 30).
    let mut off = Vec::new();
    for (sessions, calls) in [(20_000, 1), (5_000, 4), (500, 40)] {
        let (all, estimate) = scan(sessions, calls, usize::MAX);
        let (none, _) = scan(sessions, calls, 0);
        let open = (all - none) as f64;
        let ratio = estimate as f64 / open;
        println!(
            "{sessions} sessions of {calls} calls: open runs hold {:.0} bytes each, estimated {:.0} ({ratio:.2}x); all closed: {:.0} bytes a session",
            open / sessions as f64,
            estimate as f64 / sessions as f64,
            none as f64 / sessions as f64,
        );
        if !(1.0..=1.5).contains(&ratio) {
            off.push(format!(
                "{sessions} sessions of {calls} calls: estimate {estimate}, held {open}"
            ));
        }
    }
    assert!(off.is_empty(), "{off:?}");
}
