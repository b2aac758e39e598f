//! Volatile-token masking: before an outcome is fingerprinted, tokens that change on every
//! call without meaning anything (UUIDs, nonces, timestamps, epoch milliseconds, durations,
//! pids, request ids) are replaced by placeholders, so results that differ only by them
//! count as the same outcome. Opt-in (the `loopguard.masking` block, or per tool).
//!
//! The rules are data ([`MASK_RULES`]): a name, a placeholder, a pattern, an example. A
//! *token* is a maximal run of the characters `A-Z a-z 0-9 _ - + / = . : µ`; every rule
//! needs a digit in the token, so the scanner jumps from digit to digit (eight bytes at a
//! time) and only the few tokens that hold one are matched against the patterns. Two rules
//! look at context instead: a number right after the word `pid` is a pid, and the token
//! after a request-id key (`request_id=`, `requestId:` …) is a request id.
//!
//! One rule is opt-in: `digits` replaces every run of digits, for tools whose outputs
//! renumber things on every call (a browser's element indices, a state dump's counters).
//! It is never part of "every rule"; it is named in `masking.rules` or in a tool rule's
//! `mask` list.

use std::cell::RefCell;
use std::sync::LazyLock;

use regex::Regex;

/// One masking rule.
#[derive(Clone, Copy, Debug)]
pub struct MaskRule {
    /// Name used in configs (`masking.rules`) and by `config explain`.
    pub name: &'static str,
    /// What a match is replaced with.
    pub placeholder: &'static str,
    /// What the rule masks, in a sentence.
    pub description: &'static str,
    /// A regular expression applied inside a token (`None` for context rules).
    pub pattern: Option<&'static str>,
    /// Words that, right before a token, make that token volatile.
    pub after_words: &'static [&'static str],
    /// Input the rule masks, and the result (tested one by one).
    pub example: (&'static str, &'static str),
    /// Only when named: not part of "every rule" ([`MaskSet::ALL`]).
    pub opt_in: bool,
}

/// Every masking rule, in the order they are tried.
pub const MASK_RULES: &[MaskRule] = &[
    MaskRule {
        name: "uuid",
        placeholder: "<uuid>",
        description: "UUIDs in 8-4-4-4-12 hex form",
        pattern: Some(
            r"[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}",
        ),
        after_words: &[],
        example: (
            "run 550e8400-e29b-41d4-a716-446655440000 done",
            "run <uuid> done",
        ),
        opt_in: false,
    },
    MaskRule {
        name: "iso8601",
        placeholder: "<timestamp>",
        description: "ISO-8601 dates and timestamps, with optional time, fraction and zone",
        pattern: Some(
            r"\d{4}-\d{2}-\d{2}(?:T\d{2}:\d{2}(?::\d{2}(?:[.,]\d+)?)?(?:Z|[+-]\d{2}:?\d{2})?)?",
        ),
        after_words: &[],
        example: ("at 2026-04-09T22:52:03.638Z", "at <timestamp>"),
        opt_in: false,
    },
    MaskRule {
        name: "clock",
        placeholder: "<time>",
        description: "clock times such as 22:52:03 or 09:15:00.250",
        pattern: Some(r"\b\d{1,2}:\d{2}:\d{2}(?:[.,]\d+)?\b"),
        after_words: &[],
        example: ("updated 22:52:03 UTC", "updated <time> UTC"),
        opt_in: false,
    },
    MaskRule {
        name: "epoch_ms",
        placeholder: "<epoch-ms>",
        description: "epoch milliseconds (13 digits, years 2017 to 2033)",
        pattern: Some(r"\b1[5-9]\d{11}\b"),
        after_words: &[],
        example: ("ts=1775775123638", "ts=<epoch-ms>"),
        opt_in: false,
    },
    MaskRule {
        name: "duration",
        placeholder: "<duration>",
        description: "durations with a unit: 12ms, 1.5s, 3m, 2h, 250µs",
        pattern: Some(r"\b\d+(?:\.\d+)?(?:ns|us|µs|ms|s|sec|secs|m|min|mins|h|hr|hrs)\b"),
        after_words: &[],
        example: ("took 1.25s", "took <duration>"),
        opt_in: false,
    },
    MaskRule {
        name: "pid",
        placeholder: "<pid>",
        description: "process ids: pid=123, pid:123, or a number right after the word pid",
        pattern: Some(r"(?i:\bpid[=:])\d+"),
        after_words: &["pid", "PID", "Pid"],
        example: ("started (pid 48213)", "started (pid <pid>)"),
        opt_in: false,
    },
    MaskRule {
        name: "request_id",
        placeholder: "<request-id>",
        description: "request and trace ids: req_… tokens, or the value after a request-id key",
        pattern: Some(r"\b(?:req|request|trace)_[A-Za-z0-9]{8,}"),
        after_words: &[
            "request_id",
            "requestId",
            "request-id",
            "x-request-id",
            "X-Request-Id",
            "req_id",
            "reqId",
            "trace_id",
            "traceId",
            "trace-id",
        ],
        example: ("request_id: a1b2c3d4e5", "request_id: <request-id>"),
        opt_in: false,
    },
    MaskRule {
        name: "hex",
        placeholder: "<hex>",
        description: "hex nonces, hashes and long numbers: 16 or more hex digits",
        pattern: Some(r"\b[0-9a-fA-F]{16,}\b"),
        after_words: &[],
        example: ("sha 9f86d081884c7d659a2feaa0c55ad015", "sha <hex>"),
        opt_in: false,
    },
    MaskRule {
        name: "base64",
        placeholder: "<nonce>",
        description:
            "base64 nonces and tokens: 24 or more base64 characters with letters and digits",
        pattern: Some(r"[A-Za-z0-9+/_-]{24,}={0,2}"),
        after_words: &[],
        example: ("nonce=dGhpcyBpcyBhIG5vbmNlIDEyMzQ1Ng==", "nonce=<nonce>"),
        opt_in: false,
    },
    MaskRule {
        name: "digits",
        placeholder: "<n>",
        description: "every run of digits (opt-in: for tools that renumber their output, such as a browser's element indices)",
        pattern: Some(r"[0-9]+"),
        after_words: &[],
        example: ("Clicked element 1232 of 40", "Clicked element <n> of <n>"),
        opt_in: true,
    },
];

/// A set of rules to apply (a subset of [`MASK_RULES`]); empty by default.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub struct MaskSet(u16);

impl MaskSet {
    /// Every rule but the opt-in ones (`digits`).
    pub const ALL: Self = {
        let mut bits = 0u16;
        let mut i = 0;
        while i < MASK_RULES.len() {
            if !MASK_RULES[i].opt_in {
                bits |= 1 << i;
            }
            i += 1;
        }
        Self(bits)
    };
    /// No rule.
    pub const NONE: Self = Self(0);

    /// The set of the named rules; the first unknown name is returned as an error.
    pub fn from_names<'a>(names: impl IntoIterator<Item = &'a str>) -> Result<Self, &'a str> {
        let mut bits = 0u16;
        for name in names {
            let i = MASK_RULES.iter().position(|r| r.name == name).ok_or(name)?;
            bits |= 1 << i;
        }
        Ok(Self(bits))
    }

    /// The rules of both sets.
    pub const fn union(self, other: Self) -> Self {
        Self(self.0 | other.0)
    }

    /// Whether the set is empty.
    pub fn is_empty(self) -> bool {
        self.0 == 0
    }

    /// The rules in the set.
    pub fn rules(self) -> impl Iterator<Item = &'static MaskRule> {
        MASK_RULES
            .iter()
            .enumerate()
            .filter(move |(i, _)| self.0 & (1 << i) != 0)
            .map(|(_, r)| r)
    }

    fn has(self, i: usize) -> bool {
        self.0 & (1 << i) != 0
    }

    /// Whether the set holds the `digits` rule, which masks every digit.
    fn masks_every_digit(self) -> bool {
        self.has(DIGITS)
    }
}

/// Index of the `digits` rule.
const DIGITS: usize = MASK_RULES.len() - 1;
const _: () = assert!(MASK_RULES[DIGITS].opt_in, "digits is the last rule");

static PATTERNS: LazyLock<Vec<Option<Regex>>> = LazyLock::new(|| {
    MASK_RULES
        .iter()
        .map(|r| {
            r.pattern
                .map(|p| Regex::new(p).expect("masking patterns are valid"))
        })
        .collect()
});

fn is_token_byte(b: u8) -> bool {
    b.is_ascii_alphanumeric() || matches!(b, b'_' | b'-' | b'+' | b'/' | b'=' | b'.' | b':')
        // µ is U+00B5, 0xC2 0xB5 in UTF-8: both bytes belong to the token.
        || b == 0xC2
        || b == 0xB5
}

/// High bit set in each byte of `x` that is an ASCII digit. No byte carries into the next:
/// the sums are taken over the low seven bits of each byte (at most 0x7F plus 0x50 or
/// 0x46, below 0x100), and non-ASCII bytes are masked out after. (A non-ASCII byte added
/// as it is would carry into the next one, and make a `/` after `人` a digit.)
#[inline(always)]
fn digit_bits(x: u64) -> u64 {
    const ONES: u64 = 0x0101_0101_0101_0101;
    let low = x & (ONES * 0x7F);
    let ge_0 = low.wrapping_add(ONES * (0x80 - 0x30));
    let gt_9 = low.wrapping_add(ONES * (0x7F - 0x39));
    ge_0 & !gt_9 & !x & (ONES * 0x80)
}

#[inline(always)]
fn word_at(bytes: &[u8], i: usize) -> u64 {
    u64::from_le_bytes(bytes[i..i + 8].try_into().expect("8 bytes"))
}

/// The position of the next ASCII digit at or after `from`: 64 bytes per step while none
/// is found (digits are rare in text), then 8, then the last 8 at once.
fn next_digit(bytes: &[u8], from: usize) -> Option<usize> {
    let mut i = from;
    // A branch-free test of 64 bytes at a time, which the compiler turns into SIMD.
    while i + 64 <= bytes.len() {
        let chunk: &[u8; 64] = bytes[i..i + 64].try_into().expect("64 bytes");
        let any = chunk
            .iter()
            .fold(0u8, |acc, &b| acc | u8::from(b.wrapping_sub(b'0') < 10));
        if any != 0 {
            break;
        }
        i += 64;
    }
    while i + 8 <= bytes.len() {
        let digits = digit_bits(word_at(bytes, i));
        if digits != 0 {
            return Some(i + (digits.trailing_zeros() / 8) as usize);
        }
        i += 8;
    }
    if i >= bytes.len() {
        return None;
    }
    if bytes.len() < 8 {
        return bytes[i..]
            .iter()
            .position(u8::is_ascii_digit)
            .map(|p| i + p);
    }
    // The last eight bytes, read at once; those before `i` (read already) left out.
    let last = bytes.len() - 8;
    let digits = digit_bits(word_at(bytes, last)) & (u64::MAX << ((i - last) * 8));
    (digits != 0).then(|| last + (digits.trailing_zeros() / 8) as usize)
}

/// The word right before `start` (skipping spaces, `:`, `=`, quotes and an opening
/// parenthesis): `pid` in `(pid 4821)`, `request_id` in `request_id: a1b2`.
fn word_before(bytes: &[u8], start: usize) -> &[u8] {
    let mut end = start;
    while end > 0 && matches!(bytes[end - 1], b' ' | b':' | b'=' | b'"' | b'\'' | b'(') {
        end -= 1;
    }
    if end == start {
        // The token is glued to what precedes it: no separate word.
        return &[];
    }
    let mut begin = end;
    while begin > 0
        && (bytes[begin - 1].is_ascii_alphanumeric() || matches!(bytes[begin - 1], b'_' | b'-'))
    {
        begin -= 1;
    }
    &bytes[begin..end]
}

thread_local! {
    static OUT: RefCell<String> = const { RefCell::new(String::new()) };
}

/// Runs `f` with `text` masked by `set` (or `text` itself when nothing matched).
pub(crate) fn with_masked<R>(text: &str, set: MaskSet, f: impl FnOnce(&str) -> R) -> R {
    let bytes = text.as_bytes();
    masked_from(text, set, |from| next_digit(bytes, from), f)
}

/// [`with_masked`] for a text of at most 64 bytes whose ASCII digits are the bits of
/// `digits` (bit `k` for byte `k`), found by the caller in a pass it made anyway.
pub(crate) fn with_masked_short<R>(
    text: &str,
    set: MaskSet,
    digits: u64,
    f: impl FnOnce(&str) -> R,
) -> R {
    debug_assert!(text.len() <= 64);
    let next = |from: usize| {
        let rest = digits & u64::MAX.checked_shl(from as u32).unwrap_or(0);
        (rest != 0).then(|| rest.trailing_zeros() as usize)
    };
    masked_from(text, set, next, f)
}

/// [`with_masked`] with the text's next digit at or after a position given by `next`.
#[inline(always)]
fn masked_from<R>(
    text: &str,
    set: MaskSet,
    next: impl Fn(usize) -> Option<usize>,
    f: impl FnOnce(&str) -> R,
) -> R {
    // Every rule needs a digit in its token: text without one (most prose) is left as it
    // is without taking the buffer.
    let bytes = text.as_bytes();
    let mut first = match set.is_empty() {
        true => None,
        false => next(0),
    };
    // Plain numbers (`1.` of a list, `(0)`) are what most digits are: skipped here as
    // `mask_into` would skip them, so that a text with no other token is used as it is
    // without taking the buffer.
    while let Some(end) = first.and_then(|digit| plain_number(bytes, digit, set)) {
        first = next(end);
    }
    let Some(first) = first else {
        return f(text);
    };
    OUT.with(|cell| match cell.try_borrow_mut() {
        Ok(mut out) => {
            out.clear();
            if mask_into(text, set, first, &mut out) {
                f(&out)
            } else {
                f(text)
            }
        }
        Err(_) => {
            let mut out = String::new();
            if mask_into(text, set, first, &mut out) {
                f(&out)
            } else {
                f(text)
            }
        }
    })
}

/// `text` with the rules of `set` applied.
pub fn mask(text: &str, set: MaskSet) -> String {
    with_masked(text, set, str::to_owned)
}

/// Writes the masked text into `out`; returns whether anything was masked (when not, `out`
/// holds an unspecified prefix and the caller uses `text`). `first` is the position of the
/// text's first digit.
fn mask_into(text: &str, set: MaskSet, first: usize, out: &mut String) -> bool {
    let bytes = text.as_bytes();
    let mut copied = 0; // bytes of `text` already in `out`
    let mut changed = false;
    let mut next = Some(first);
    while let Some(digit) = next {
        if let Some(end) = plain_number(bytes, digit, set) {
            next = next_digit(bytes, end);
            continue;
        }
        let (start, end) = token_around(text, digit);
        next = next_digit(bytes, end.max(digit + 1));
        if start >= end {
            continue;
        }
        let token = &text[start..end];
        if let Some(masked) = mask_token(bytes, start, token, set) {
            out.push_str(&text[copied..start]);
            out.push_str(&masked);
            copied = end;
            changed = true;
        }
    }
    if changed {
        out.push_str(&text[copied..]);
    }
    changed
}

/// The token holding the digit at `digit`, without the punctuation at its edges.
fn token_around(text: &str, digit: usize) -> (usize, usize) {
    let bytes = text.as_bytes();
    let mut start = digit;
    while start > 0 && is_token_byte(bytes[start - 1]) {
        start -= 1;
    }
    let mut end = digit;
    while end < bytes.len() && is_token_byte(bytes[end]) {
        end += 1;
    }
    // Token boundaries are ASCII or whole µ characters, so they are char boundaries,
    // except for a stray 0xC2/0xB5 byte of another character: fall back to the char edge.
    while !text.is_char_boundary(start) {
        start += 1;
    }
    while !text.is_char_boundary(end) {
        end -= 1;
    }
    // Punctuation at the edges belongs to the sentence: `12.` and `:17` are numbers.
    while start < end && matches!(bytes[start], b'.' | b':' | b'/' | b'=') {
        start += 1;
    }
    while end > start && matches!(bytes[end - 1], b'.' | b':' | b'/' | b'-') {
        end -= 1;
    }
    (start, end)
}

/// The end of the token starting with the digit at `digit` when it is a plain number no
/// rule of `set` masks (the usual case: `1.` of a list, `(0)`, `port 8080`): digits only,
/// shorter than epoch milliseconds, not after a context word (`pid`, `request_id`, all
/// ending in `d`), `digits` not in the set. `None`: the token is read in full.
#[inline]
fn plain_number(bytes: &[u8], digit: usize, set: MaskSet) -> Option<usize> {
    if set.masks_every_digit() || (digit > 0 && is_token_byte(bytes[digit - 1])) {
        return None;
    }
    let run = bytes[digit..]
        .iter()
        .take_while(|b| b.is_ascii_digit())
        .count();
    if run == 0 {
        // Not a digit at all: the caller's scan must move on, never stay here.
        return None;
    }
    let end = digit + run;
    // What follows ends the token, or is one mark the token loses at its edge (`12.`).
    let token_ends = |at: usize| bytes.get(at).is_none_or(|&b| !is_token_byte(b));
    let ends =
        token_ends(end) || (matches!(bytes[end], b'.' | b':' | b'/' | b'-') && token_ends(end + 1));
    let context = bytes[..digit]
        .iter()
        .rev()
        .find(|b| !matches!(b, b' ' | b':' | b'=' | b'"' | b'\'' | b'('));
    (ends && run < 13 && !matches!(context, Some(b'd' | b'D'))).then_some(end)
}

/// The masked form of one token, if a rule applies.
fn mask_token(bytes: &[u8], start: usize, token: &str, set: MaskSet) -> Option<String> {
    let all_digits = token.bytes().all(|b| b.is_ascii_digit());
    // Context rules first: "pid 123", "request_id: abc123". Every context word ends in `d`
    // or `D`, which rules most plain numbers out before any word is compared.
    let before = match bytes[..start]
        .iter()
        .rev()
        .find(|b| !matches!(b, b' ' | b':' | b'=' | b'"' | b'\'' | b'('))
    {
        Some(b'd' | b'D') => word_before(bytes, start),
        _ => &[],
    };
    if !before.is_empty() {
        for (i, rule) in MASK_RULES.iter().enumerate() {
            if set.has(i) && rule.after_words.iter().any(|w| w.as_bytes() == before) {
                return Some(rule.placeholder.to_owned());
            }
        }
    }
    // Plain numbers shorter than epoch milliseconds are not volatile (unless every digit is).
    if all_digits && token.len() < 13 && !set.masks_every_digit() {
        return None;
    }
    let patterns = &*PATTERNS;
    let mut current: Option<String> = None;
    for (i, rule) in MASK_RULES.iter().enumerate() {
        if !set.has(i) {
            continue;
        }
        let Some(re) = &patterns[i] else { continue };
        let input = current.as_deref().unwrap_or(token);
        if !may_match(rule, input.as_bytes()) {
            continue;
        }
        // Every match the rule accepts becomes its placeholder (as `replace_all`, without
        // the capture groups it would fill).
        let mut replaced: Option<String> = None;
        let mut copied = 0;
        for m in re.find_iter(input) {
            if accepts(rule, m.as_str()) {
                let out = replaced.get_or_insert_with(|| String::with_capacity(input.len()));
                out.push_str(&input[copied..m.start()]);
                out.push_str(rule.placeholder);
                copied = m.end();
            }
        }
        if let Some(mut out) = replaced {
            out.push_str(&input[copied..]);
            current = Some(out);
        }
    }
    current
}

/// Whether a token can hold a match of the rule at all: the shortest text each pattern
/// matches, and the punctuation it needs (a cheap test that spares most tokens the regex).
fn may_match(rule: &MaskRule, token: &[u8]) -> bool {
    let has = |b: u8| token.contains(&b);
    match rule.name {
        "uuid" => token.len() >= 36 && has(b'-'),
        "iso8601" => token.len() >= 10 && has(b'-'),
        "clock" => token.len() >= 7 && has(b':'),
        "epoch_ms" => token.len() >= 13,
        "duration" => token.len() >= 2,
        "pid" => token.len() >= 5 && (has(b'=') || has(b':')),
        "request_id" => token.len() >= 12 && has(b'_'),
        "hex" => token.len() >= 16,
        "base64" => token.len() >= 24,
        _ => true,
    }
}

/// Extra conditions a pattern cannot say: a base64 nonce mixes upper case, lower case and
/// digits and is not a path (paths and identifiers are meaningful).
fn accepts(rule: &MaskRule, m: &str) -> bool {
    match rule.name {
        "base64" => {
            let b = m.as_bytes();
            b.iter().any(u8::is_ascii_digit)
                && b.iter().any(u8::is_ascii_uppercase)
                && b.iter().any(u8::is_ascii_lowercase)
                && b.iter().filter(|&&c| c == b'/').count() <= 2
        }
        _ => true,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A placeholder holds no whitespace, so a trimmed text stays trimmed once masked
    /// (the answer's print relies on it).
    #[test]
    fn placeholders_hold_no_whitespace() {
        for rule in MASK_RULES {
            assert!(
                !rule.placeholder.contains(char::is_whitespace),
                "{}",
                rule.name
            );
            assert!(!rule.placeholder.is_empty(), "{}", rule.name);
        }
    }

    /// Each rule's pre-test never turns down a token its pattern matches in: every
    /// example of every rule, and tokens built to sit just on the minimum lengths.
    #[test]
    fn the_pre_test_keeps_every_match() {
        let mut texts: Vec<String> = MASK_RULES.iter().map(|r| r.example.0.to_owned()).collect();
        texts.extend(
            [
                "1s",
                "5ms",
                "pid=1",
                "PID:9",
                "req_abcdefgh",
                "0:00:00",
                "2026-01-01",
                "1700000000000",
                "deadbeefdeadbeef",
                "QUJDREVGR0hJSktMTU5PUFFSU1RVVldY",
                "550e8400-e29b-41d4-a716-446655440000",
            ]
            .map(str::to_owned),
        );
        for text in &texts {
            for token in text.split([' ', '(', ')']) {
                for (i, rule) in MASK_RULES.iter().enumerate() {
                    let Some(re) = &PATTERNS[i] else { continue };
                    if re.is_match(token) {
                        assert!(may_match(rule, token.as_bytes()), "{} {token}", rule.name);
                    }
                }
            }
        }
    }

    #[test]
    fn every_rule_masks_its_example_alone() {
        for (i, rule) in MASK_RULES.iter().enumerate() {
            let only = MaskSet(1 << i);
            let (input, expected) = rule.example;
            assert_eq!(mask(input, only), expected, "rule {}", rule.name);
            // And the whole set masks it the same way (an opt-in rule joins it).
            assert_eq!(
                mask(input, MaskSet::ALL.union(only)),
                expected,
                "rule {} in the full set",
                rule.name
            );
            assert_eq!(MaskSet::ALL.has(i), !rule.opt_in, "rule {}", rule.name);
        }
    }

    #[test]
    fn rules_by_name() {
        let set = MaskSet::from_names(["uuid", "pid"]).unwrap();
        assert_eq!(
            set.rules().map(|r| r.name).collect::<Vec<_>>(),
            ["uuid", "pid"]
        );
        assert_eq!(MaskSet::from_names(["uuid", "nope"]), Err("nope"));
        assert_eq!(
            MaskSet::ALL.rules().count(),
            MASK_RULES.len() - 1,
            "all but digits"
        );
    }

    #[test]
    fn leaves_meaningful_text_alone() {
        for text in [
            "",
            "no digits here at all",
            "Found 3 files, 12 matches in 2 directories",
            "error: expected 42 but got 41",
            "version 2026.4.2 (build 1234)",
            "port 8080 and 443",
            "a [1234] b",
            "ünïcödé 123 µ",
            "/workspace/project/src/module_05/component_0123.ts",
            "see docs/Guides/topic-0042/section-7.html",
            "call-12345 and run-0007",
        ] {
            assert_eq!(mask(text, MaskSet::ALL), text, "{text:?}");
        }
    }

    #[test]
    fn masks_volatile_tokens_in_context() {
        let cases = [
            (
                "job 550e8400-e29b-41d4-a716-446655440000 started at 2026-04-09T22:52:03Z (pid 4821), took 35ms",
                "job <uuid> started at <timestamp> (pid <pid>), took <duration>",
            ),
            ("2026-04-09 22:52:03", "<timestamp> <time>"),
            ("{\"ts\":1775775123638,\"n\":17}", "{\"ts\":<epoch-ms>,\"n\":17}"),
            ("X-Request-Id: 7f3a9c2e11", "X-Request-Id: <request-id>"),
            ("id req_011CT8a9bXyZ done", "id <request-id> done"),
            ("pid=99 pid:100", "<pid> <pid>"),
            ("deadbeefdeadbeef0123", "<hex>"),
            ("123456789012345678", "<hex>"),
        ];
        for (input, expected) in cases {
            assert_eq!(mask(input, MaskSet::ALL), expected, "{input:?}");
        }
    }

    #[test]
    fn digits_make_renumbered_states_equal() {
        let digits = MaskSet::from_names(["digits"]).unwrap();
        let a = "[1232]<button>Save</button> [1233]<a href=\"/files?id=5\">Files</a> 40px";
        let b = "[1262]<button>Save</button> [1263]<a href=\"/files?id=5\">Files</a> 80px";
        assert_ne!(mask(a, MaskSet::ALL), mask(b, MaskSet::ALL), "opt-in");
        assert_eq!(mask(a, digits), mask(b, digits));
        assert_eq!(mask("v1.2.3 of 17", digits), "v<n>.<n>.<n> of <n>");
        // With the other rules, a UUID is still one token.
        let all = MaskSet::ALL.union(digits);
        assert_eq!(
            mask("job 550e8400-e29b-41d4-a716-446655440000 step 3", all),
            "job <uuid> step <n>"
        );
        assert_eq!(mask("no numbers here", all), "no numbers here");
    }

    #[test]
    fn digit_scan_finds_every_digit() {
        let text = "abcdefghijklmnopq7rstu9 ü8";
        let bytes = text.as_bytes();
        let mut found = Vec::new();
        let mut at = 0;
        while let Some(d) = next_digit(bytes, at) {
            found.push(d);
            at = d + 1;
        }
        let expected: Vec<usize> = bytes
            .iter()
            .enumerate()
            .filter(|(_, b)| b.is_ascii_digit())
            .map(|(i, _)| i)
            .collect();
        assert_eq!(found, expected);
        // From every position of texts of every length up to 80, digits anywhere.
        let mut state = 0x2545_F491_4F6C_DD1Du64;
        for len in 0..80 {
            let text: Vec<u8> = (0..len)
                .map(|_| {
                    state ^= state << 13;
                    state ^= state >> 7;
                    state ^= state << 17;
                    // Non-ASCII bytes before `/` and `9`, the ASCII neighbours of the
                    // digits: no carry may turn one into a digit or hide the other.
                    b"ab 7.\xC3/9\xBA\xFF"[(state % 10) as usize]
                })
                .collect();
            for from in 0..len + 2 {
                let want = (from..len).find(|&i| text[i].is_ascii_digit());
                assert_eq!(next_digit(&text, from), want, "{text:?} from {from}");
            }
        }
    }

    /// A `/` after a character whose last byte is 0xB0 or more (`人`, `°`) once read as a
    /// digit, and masking went round it forever; a `9` after one was missed.
    #[test]
    fn bytes_after_non_ascii_ones_are_read_as_they_are() {
        for text in ["人/ x", "20°/ day", "°/", "人/", "人/9 pid 人/ 7"] {
            assert_eq!(mask(text, MaskSet::ALL), text, "{text:?}");
        }
        assert_eq!(mask("人 pid 48213", MaskSet::ALL), "人 pid <pid>");
        // A `9` right after such a byte is a digit: its token is masked.
        assert_eq!(
            mask("人 ts=1775775129638 °9", MaskSet::ALL),
            "人 ts=<epoch-ms> °9"
        );
    }

    /// The shortcut for plain numbers takes only tokens the full reading leaves alone.
    #[test]
    fn plain_numbers_are_the_tokens_no_rule_masks() {
        let pieces = [
            "1",
            "12",
            "0",
            "1234567890123",
            ". ",
            ".",
            ":",
            "-",
            "/",
            "=",
            " ",
            "(",
            ")",
            "pid ",
            "id ",
            "request_id: ",
            "a",
            "s",
            "ms",
            "µ",
            "é",
            "x-",
            "_",
            "d",
            "D",
            "\"",
            "'",
            "\n",
        ];
        let digits = MaskSet::from_names(["digits"]).unwrap();
        let mut state = 0x9E37_79B9_7F4A_7C15u64;
        for _ in 0..20_000 {
            let mut text = String::new();
            for _ in 0..(state % 12) {
                state ^= state << 13;
                state ^= state >> 7;
                state ^= state << 17;
                text.push_str(pieces[(state % pieces.len() as u64) as usize]);
            }
            let bytes = text.as_bytes();
            for set in [MaskSet::ALL, MaskSet::from_names(["pid"]).unwrap(), digits] {
                let mut at = 0;
                while let Some(digit) = next_digit(bytes, at) {
                    at = digit + 1;
                    let Some(end) = plain_number(bytes, digit, set) else {
                        continue;
                    };
                    assert_eq!(token_around(&text, digit), (digit, end), "{text:?}");
                    let token = &text[digit..end];
                    assert_eq!(mask_token(bytes, digit, token, set), None, "{text:?}");
                }
            }
        }
    }

    #[test]
    fn never_panics_on_odd_text() {
        for text in [
            "\u{B5}1",
            "1\u{B5}",
            "\u{C2}\u{B5}9\u{100}",
            "µs1µs",
            "9é9é9",
            "::1::",
        ] {
            let _ = mask(text, MaskSet::ALL);
        }
    }
}
