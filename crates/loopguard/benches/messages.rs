//! The cost of a `message` event (loops without tool calls), with the `recommended` preset
//! (all three detectors of messages on):
//!
//! - `message_whole/{1k,16k}`: one answer of 1 KiB or 16 KiB sent whole
//!   (`Guard::message`: its chanting read, its print compared with the run's messages);
//! - `message_stream/{1k,16k}`: the same answer streamed in 64-byte pieces
//!   (`delta: true`, numbered), then ended by a message of its id.
//!
//! 64 bytes is not small for a stream: providers send deltas of a token or a few, and a
//! host that forwards each one sends more events per KiB. The size is kept so that the
//! figures stay comparable; the cost of one event is the difference between the two
//! groups (see BENCHMARKS.md, "Message events").
//!
//! The answers are markdown as models write it (paragraphs of distinct sentences, a list, a
//! code block, a table), every one different, so that no detector fires and the cost is the
//! reading. Criterion's throughput line gives bytes per second; µs per KiB = 1024 / that
//! × 10⁶.

use std::hint::black_box;

use criterion::{criterion_group, criterion_main, BatchSize, Criterion, Throughput};
use loopguard::{ConfigSet, Guard, Limits, ManualClock, Message, Millis, Scope};

#[path = "common/answers.rs"]
mod answers;
use answers::answer;

fn preset_guard() -> Guard<ManualClock> {
    let config = ConfigSet::parse(
        "{ tools: { loopDetection: { enabled: true } }, loopguard: { preset: 'recommended' } }",
    )
    .expect("the preset parses");
    Guard::with_clock(config, Limits::default(), ManualClock::new(Millis::ZERO))
}

fn messages(c: &mut Criterion) {
    let scope = Scope::new("bench").with_run(Some("r"));
    for (name, size) in [("1k", 1024), ("16k", 16 * 1024)] {
        // Enough different answers that each iteration reads a new one.
        let texts: Vec<String> = (0..64).map(|seed| answer(size, seed)).collect();
        let mut group = c.benchmark_group("message_whole");
        group.throughput(Throughput::Bytes(size as u64));
        let mut guard = preset_guard();
        let mut n = 0usize;
        group.bench_function(name, |b| {
            b.iter(|| {
                n += 1;
                let text = &texts[n % texts.len()];
                let verdict = guard.message(
                    &scope,
                    &Message::assistant(text).with_tool_calls(Some(false)),
                );
                black_box(verdict)
            })
        });
        group.finish();

        let mut group = c.benchmark_group("message_stream");
        group.throughput(Throughput::Bytes(size as u64));
        let ids: Vec<String> = (0..1024).map(|i| format!("m{i}")).collect();
        let mut guard = preset_guard();
        let mut n = 0usize;
        group.bench_function(name, |b| {
            b.iter_batched(
                || {
                    n += 1;
                    (&texts[n % texts.len()], &ids[n % ids.len()])
                },
                |(text, id)| answers::stream(&mut guard, &scope, text, id),
                BatchSize::SmallInput,
            )
        });
        group.finish();
    }
}

criterion_group!(benches, messages);
criterion_main!(benches);
