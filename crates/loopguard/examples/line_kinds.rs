//! Sends 20 model answers of 100 lines of one kind each (`blank`, `code`, `table`, `list`,
//! `bullets`, `paragraph`) as whole `message` events with the `recommended` preset (or,
//! given `print`, without `contentChanting`: the answer's print alone): what one line of
//! each kind costs, for profilers (`valgrind --tool=callgrind
//! --toggle-collect='*line_kinds::cycle*'`; divide by the 2,000 lines).
//!
//! ```sh
//! cargo run --release -p loopguard --example line_kinds -- list
//! cargo run --release -p loopguard --example line_kinds -- list print
//! ```

use loopguard::{ConfigSet, Guard, Limits, ManualClock, Millis, Scope};

#[path = "../benches/common/answers.rs"]
#[allow(dead_code)] // The answers' generator and streaming are not used here.
mod answers;

const WORDS: &[&str] = &[
    "the", "parser", "returns", "an", "error", "when", "config", "file", "is", "missing", "we",
    "should", "check", "path", "before", "reading",
];

/// The measured part (a separate function so that profilers can select it).
#[inline(never)]
fn cycle(guard: &mut Guard<ManualClock>, texts: &[String]) {
    let scope = Scope::new("perf").with_run(Some("r"));
    for (n, text) in texts.iter().enumerate() {
        answers::whole(guard, &scope, text, &format!("m{n}"));
    }
}

/// Line `i` of the kind `kind`, its words drawn by `word`.
fn line(kind: &str, i: usize, mut word: impl FnMut() -> &'static str) -> String {
    match kind {
        "blank" => String::new(),
        "code" => format!("let {} = {}({i});", word(), word()),
        "table" => format!("| {} | {} |", word(), word()),
        "list" => format!(
            "{}. {} {} {} {}.",
            i % 9 + 1,
            word(),
            word(),
            word(),
            word()
        ),
        "bullets" => format!("- {} {} {} {}.", word(), word(), word(), word()),
        "paragraph" => (0..4)
            .map(|_| (0..10).map(|_| word()).collect::<Vec<_>>().join(" ") + ".")
            .collect::<Vec<_>>()
            .join(" "),
        other => panic!("no line kind {other:?} (blank, code, table, list, bullets, paragraph)"),
    }
}

fn main() {
    let mut args = std::env::args().skip(1);
    let kind = args.next().unwrap_or_else(|| "list".to_owned());
    // `print`: `contentChanting` off, so only the answer's print is made.
    let print_only = args.next().as_deref() == Some("print");
    let mut state = 7u64;
    let mut word = || {
        state = state
            .wrapping_mul(6364136223846793005)
            .wrapping_add(1442695040888963407);
        WORDS[(state >> 33) as usize % WORDS.len()]
    };
    let texts: Vec<String> = (0..20)
        .map(|_| {
            let lines = (0..100).map(|i| line(&kind, i, &mut word) + "\n");
            match kind.as_str() {
                "code" => format!("```rust\n{}```\n", lines.collect::<String>()),
                _ => lines.collect(),
            }
        })
        .collect();
    let config = ConfigSet::parse(
        match print_only {
            false => "{ tools: { loopDetection: { enabled: true } }, loopguard: { preset: 'recommended' } }",
            true => "{ tools: { loopDetection: { enabled: true } }, loopguard: { preset: 'recommended', detectors: { contentChanting: { enabled: false } } } }",
        },
    )
    .expect("the preset parses");
    let mut guard = Guard::with_clock(config, Limits::default(), ManualClock::new(Millis::ZERO));
    let bytes: usize = texts.iter().map(String::len).sum();
    cycle(&mut guard, &texts);
    println!("{kind}: 2,000 lines, {bytes} bytes");
}
