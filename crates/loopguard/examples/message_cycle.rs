//! Sends N model answers of a given size as `message` events, whole or streamed in 64-byte
//! pieces, with the `recommended` preset (or the config in `LOOPGUARD_BENCH_CONFIG`): a
//! harness for profilers (`perf`, `valgrind --tool=callgrind
//! --toggle-collect='*message_cycle::cycle*'`).
//!
//! ```sh
//! cargo run --release -p loopguard --example message_cycle -- 16384 200 stream
//! ```

use std::time::Instant;

use loopguard::{ConfigSet, Guard, Limits, ManualClock, Millis, Scope};

#[path = "../benches/common/answers.rs"]
mod answers;

/// The measured part (a separate function so that profilers can select it).
#[inline(never)]
fn cycle(guard: &mut Guard<ManualClock>, texts: &[String], stream: bool) {
    let scope = Scope::new("perf").with_run(Some("r"));
    for (n, text) in texts.iter().enumerate() {
        let id = format!("m{n}");
        match stream {
            true => answers::stream(guard, &scope, text, &id),
            false => answers::whole(guard, &scope, text, &id),
        }
    }
}

fn main() {
    let mut args = std::env::args().skip(1);
    let size: usize = args.next().map_or(16_384, |s| s.parse().expect("SIZE"));
    let count: u64 = args.next().map_or(200, |s| s.parse().expect("COUNT"));
    let stream = args.next().as_deref() == Some("stream");
    let texts: Vec<String> = (0..count).map(|seed| answers::answer(size, seed)).collect();
    // Another config to profile (the detectors of messages alone, masking off) in
    // LOOPGUARD_BENCH_CONFIG.
    let text = std::env::var("LOOPGUARD_BENCH_CONFIG").unwrap_or_else(|_| {
        "{ tools: { loopDetection: { enabled: true } }, loopguard: { preset: 'recommended' } }"
            .to_owned()
    });
    let config = ConfigSet::parse(&text).expect("the config parses");
    let mut guard = Guard::with_clock(config, Limits::default(), ManualClock::new(Millis::ZERO));
    let started = Instant::now();
    cycle(&mut guard, &texts, stream);
    let elapsed = started.elapsed();
    let kib = (size as f64 * count as f64) / 1024.0;
    println!(
        "{} answers of {size} bytes ({}): {:.3} µs per KiB",
        count,
        if stream { "streamed" } else { "whole" },
        elapsed.as_secs_f64() * 1e6 / kib
    );
}
