//! Answers as models write them (markdown: paragraphs of distinct sentences, a list, a
//! code block, a table), every one different, for the benchmark and the example of
//! message events.

const WORDS: &[&str] = &[
    "the", "parser", "returns", "an", "error", "when", "config", "file", "is", "missing", "we",
    "should", "check", "path", "before", "reading", "it", "test", "suite", "passes", "now",
    "after", "fix", "module", "imports", "value", "cache", "request", "handler", "server",
    "client", "timeout", "retry", "build", "step", "output", "function", "line",
];

/// A markdown answer of about `size` bytes, different for every `seed`.
pub fn answer(size: usize, seed: u64) -> String {
    let mut state = seed
        .wrapping_mul(6364136223846793005)
        .wrapping_add(1442695040888963407);
    let mut word = || {
        state = state
            .wrapping_mul(6364136223846793005)
            .wrapping_add(1442695040888963407);
        WORDS[(state >> 33) as usize % WORDS.len()]
    };
    let mut out = format!("Answer {seed}: here is what I found.\n\n");
    let mut section = 0;
    while out.len() < size {
        section += 1;
        match section % 4 {
            0 => {
                out.push_str("```rust\n");
                for i in 0..4 {
                    out.push_str(&format!("let {} = {}({i});\n", word(), word()));
                }
                out.push_str("```\n\n");
            }
            1 => {
                for i in 1..=3 {
                    out.push_str(&format!(
                        "{i}. {} {} {} {}.\n",
                        word(),
                        word(),
                        word(),
                        word()
                    ));
                }
                out.push('\n');
            }
            2 => {
                out.push_str("| step | result |\n|---|---|\n");
                out.push_str(&format!("| {} | {} |\n\n", word(), word()));
            }
            _ => {
                for k in 0..4 {
                    let n = 8 + (section + k) % 6;
                    let sentence: Vec<&str> = (0..n).map(|_| word()).collect();
                    out.push_str(&sentence.join(" "));
                    out.push_str(". ");
                }
                out.push_str("\n\n");
            }
        }
    }
    let mut cut = size.min(out.len());
    while !out.is_char_boundary(cut) {
        cut -= 1;
    }
    out.truncate(cut);
    out
}

/// Sends `text` to `guard` whole, as the answer `id` (without tool calls).
#[allow(dead_code)] // The criterion bench sends its answers without an id.
pub fn whole(
    guard: &mut loopguard::Guard<loopguard::ManualClock>,
    scope: &loopguard::Scope<'_>,
    text: &str,
    id: &str,
) {
    let answer = loopguard::Message::assistant(text)
        .with_id(Some(id))
        .with_tool_calls(Some(false));
    std::hint::black_box(&guard.message(scope, &answer));
}

/// Sends `text` to `guard` as a stream of 64-byte pieces (at character boundaries) of the
/// answer `id`, then ends it.
pub fn stream(
    guard: &mut loopguard::Guard<loopguard::ManualClock>,
    scope: &loopguard::Scope<'_>,
    text: &str,
    id: &str,
) {
    let mut start = 0;
    let mut index = 0;
    while start < text.len() {
        let mut end = (start + 64).min(text.len());
        while !text.is_char_boundary(end) {
            end += 1;
        }
        let piece = loopguard::Message::assistant(&text[start..end])
            .with_id(Some(id))
            .as_delta(Some(index));
        // Read in place, as a host matches on it (not copied out).
        std::hint::black_box(&guard.message(scope, &piece));
        start = end;
        index += 1;
    }
    let end = loopguard::Message::assistant("").with_id(Some(id));
    std::hint::black_box(&guard.message(scope, &end));
}
