//! The raw path equals the value path: for any JSON text `serde_json` parses, fingerprints
//! computed from the text (a [`Tape`]) equal those computed from the parsed `Value`, for
//! args, for every outcome rule of SPEC §2, with masking and tool policies on, and for the
//! failure test and the canonical text. The texts are random: member order, duplicate
//! keys, escapes (surrogate pairs included), Unicode, number spellings, whitespace, nesting.
//! A result tokenized with only what the outcome rules read ([`RESULT_READ`], what event
//! readers keep of a result) hashes and fails alike too.

use loopguard::canonical::json_text;
use loopguard::config::ConfigSet;
use loopguard::fingerprint::{
    args_fingerprint, failure_of, is_failure, Fingerprint, OutcomeOf, OutcomePrint, RESULT_READ,
};
use loopguard::json::{Raw, Read, Tape};
use loopguard::CallPrint;
use proptest::prelude::*;
use serde_json::Value;

/// A JSON value with the choices of how to write it.
#[derive(Clone, Debug)]
enum Gen {
    Null,
    Bool(bool),
    /// A number, already written (in one of its spellings).
    Num(String),
    Str(Vec<(char, u8)>),
    Arr(Vec<Gen>),
    /// Members, with duplicates allowed (the last one counts).
    Obj(Vec<(Vec<(char, u8)>, Gen)>),
}

/// Characters worth escaping or not: ASCII, control characters, quotes, non-BMP.
fn chars() -> impl Strategy<Value = (char, u8)> {
    let c = prop_oneof![
        4 => prop::char::range('a', 'f'),
        1 => prop::char::range('\u{0}', '\u{1f}'),
        1 => prop::sample::select(vec!['"', '\\', '/', ' ', '\u{a0}', '\u{2028}', '\u{feff}', 'é', '中', '😀', '\u{10ffff}', '\u{7f}']),
    ];
    (c, any::<u8>())
}

fn key() -> impl Strategy<Value = Vec<(char, u8)>> {
    prop_oneof![
        3 => prop::collection::vec(chars(), 0..3),
        2 => prop::sample::select(vec![
            "content", "details", "type", "text", "status", "exitCode", "aggregated",
            "timedOut", "tail", "messageId", "id", "direction", "plan", "step", "explanation",
            "action", "to", "message", "name", "isError", "a", "b", "c", "ts", "path", "url",
        ])
        .prop_map(|k| k.chars().map(|c| (c, 0)).collect()),
    ]
}

/// Numbers in several spellings; some beyond the double range (those texts are left out
/// of the equality, `serde_json` refuses them).
fn number() -> impl Strategy<Value = String> {
    prop_oneof![
        any::<i64>().prop_map(|i| i.to_string()),
        any::<u64>().prop_map(|u| u.to_string()),
        (any::<i32>(), 0u8..4).prop_map(|(i, form)| match form {
            0 => format!("{i}.0"),
            1 => format!("{i}e0"),
            2 => format!("{i}0E-1"),
            _ => format!("{i}.000e+00"),
        }),
        any::<f64>()
            .prop_filter("finite", |f| f.is_finite())
            .prop_map(|f| format!("{f:e}")),
        any::<f64>()
            .prop_filter("finite", |f| f.is_finite())
            .prop_map(|f| format!("{f}")),
        (
            "-?[1-9][0-9]{0,25}",
            "(\\.[0-9]{1,25})?",
            "([eE][+-]?[0-9]{1,3})?"
        )
            .prop_map(|(i, f, e)| format!("{i}{f}{e}")),
        Just("-0".to_owned()),
        Just("-0.0".to_owned()),
        Just("18446744073709551616".to_owned()),
        Just("-9223372036854775809".to_owned()),
    ]
}

fn gen() -> impl Strategy<Value = Gen> {
    let leaf = prop_oneof![
        Just(Gen::Null),
        any::<bool>().prop_map(Gen::Bool),
        number().prop_map(Gen::Num),
        prop::collection::vec(chars(), 0..8).prop_map(Gen::Str),
    ];
    leaf.prop_recursive(5, 64, 6, |inner| {
        prop_oneof![
            prop::collection::vec(inner.clone(), 0..5).prop_map(Gen::Arr),
            prop::collection::vec((key(), inner), 0..6).prop_map(Gen::Obj),
        ]
    })
}

/// A result that reaches the outcome rules: `content` blocks and `details` with the fields
/// the rules read, around random values.
fn result() -> impl Strategy<Value = Gen> {
    let status = prop::sample::select(vec![
        "running",
        "completed",
        "failed",
        "approval-pending",
        "approval-unavailable",
        "blocked",
        "error",
        "weird",
    ]);
    let text_block =
        (prop::collection::vec(chars(), 0..6), any::<bool>()).prop_map(|(t, typed)| {
            let mut m = vec![(k("text"), Gen::Str(t))];
            if typed {
                m.insert(0, (k("type"), Gen::Str(k("text"))));
            }
            Gen::Obj(m)
        });
    let content = prop::collection::vec(prop_oneof![3 => text_block, 1 => gen()], 0..4);
    let details = (
        status,
        prop::collection::vec((key(), gen()), 0..5),
        any::<bool>(),
        number(),
    )
        .prop_map(|(status, mut rest, loop_veto, code)| {
            rest.push((k("status"), Gen::Str(k(status))));
            rest.push((k("exitCode"), Gen::Num(code)));
            if loop_veto {
                rest.push((k("deniedReason"), Gen::Str(k("tool-loop"))));
            }
            Gen::Obj(rest)
        });
    prop_oneof![
        4 => (content, details, prop::collection::vec((key(), gen()), 0..2)).prop_map(|(c, d, mut rest)| {
            rest.push((k("content"), Gen::Arr(c)));
            rest.push((k("details"), d));
            Gen::Obj(rest)
        }),
        1 => gen(),
    ]
}

fn k(s: &str) -> Vec<(char, u8)> {
    s.chars().map(|c| (c, 0)).collect()
}

/// Writes `g` as JSON text, with escapes and whitespace chosen by each character's byte.
fn write(g: &Gen, out: &mut String) {
    match g {
        Gen::Null => out.push_str("null"),
        Gen::Bool(b) => out.push_str(if *b { "true" } else { "false" }),
        Gen::Num(n) => out.push_str(n),
        Gen::Str(s) => write_str(s, out),
        Gen::Arr(items) => {
            out.push('[');
            for (i, item) in items.iter().enumerate() {
                if i > 0 {
                    out.push_str(if i % 3 == 0 { " , " } else { "," });
                }
                write(item, out);
            }
            out.push(']');
        }
        Gen::Obj(members) => {
            out.push_str("{ ");
            for (i, (key, value)) in members.iter().enumerate() {
                if i > 0 {
                    out.push(',');
                }
                write_str(key, out);
                out.push_str(if i % 2 == 0 { ":" } else { " :\n" });
                write(value, out);
            }
            out.push('}');
        }
    }
}

fn write_str(s: &[(char, u8)], out: &mut String) {
    use std::fmt::Write;
    out.push('"');
    for &(c, how) in s {
        let must = c == '"' || c == '\\' || (c as u32) < 0x20;
        if !must && how % 3 != 0 {
            out.push(c);
            continue;
        }
        match (c, how % 2) {
            ('"', 0) => out.push_str("\\\""),
            ('\\', 0) => out.push_str("\\\\"),
            ('/', 0) => out.push_str("\\/"),
            ('\n', 0) => out.push_str("\\n"),
            ('\t', 0) => out.push_str("\\t"),
            ('\u{8}', 0) => out.push_str("\\b"),
            ('\u{c}', 0) => out.push_str("\\f"),
            ('\r', 0) => out.push_str("\\r"),
            _ => {
                let mut units = [0u16; 2];
                for u in c.encode_utf16(&mut units) {
                    if how % 4 < 2 {
                        let _ = write!(out, "\\u{u:04x}");
                    } else {
                        let _ = write!(out, "\\u{u:04X}");
                    }
                }
            }
        }
    }
    out.push('"');
}

fn text_of(g: &Gen) -> String {
    let mut s = String::new();
    write(g, &mut s);
    s
}

const TOOLS: [&str; 10] = [
    "read",
    "exec",
    "process",
    "message",
    "sessions_send",
    "telegram",
    "update_plan",
    "command_status",
    "notify_x",
    "fetch",
];

fn configs() -> Vec<ConfigSet> {
    vec![
        ConfigSet::default(),
        ConfigSet::parse(
            r#"{ tools: { loopDetection: { enabled: true } }, loopguard: {
                masking: {},
                detectors: { targetThrash: {} },
                policy: { tools: [
                    { match: "read", ignoreResult: ["details.a", "b", "details.*.c", "text"], ignoreArgs: ["a.b", "c", "$.b[*]"] },
                    { match: "notify_*", class: "send", ignoreResult: ["details.id"] },
                    { match: "fetch", mask: true, ignoreResult: ["content"] },
                    { match: "exec", mask: false },
                ] } } }"#,
        )
        .unwrap(),
    ]
}

/// Args that reach the policy tables: an `action`, a `to`, a `plan`.
fn args() -> impl Strategy<Value = Gen> {
    (
        prop::collection::vec((key(), gen()), 0..4),
        prop::option::of(prop::sample::select(vec![
            "poll", "log", "send", "read", "kill",
        ])),
        prop::option::of(prop::sample::select(vec!["x", " ", ""])),
    )
        .prop_map(|(mut members, action, to)| {
            if let Some(a) = action {
                members.push((k("action"), Gen::Str(k(a))));
            }
            if let Some(t) = to {
                members.push((k("to"), Gen::Str(k(t))));
            }
            Gen::Obj(members)
        })
}

/// What event readers keep of a result.
static RESULT: Read = RESULT_READ;

fn raw<'a>(tape: &'a mut Tape, text: &'a str) -> Raw<'a> {
    tape.parse(text)
        .expect("the tape accepts what serde_json accepts")
}

/// Writes `g` twice, its numbers chosen by `picks` turned into non-finite literals: once
/// in the spellings `picks` choose, once in the one spelling each value has.
fn non_finite_texts(g: &Gen, picks: &[u8]) -> (String, String) {
    fn turn(g: &Gen, picks: &[u8], at: &mut usize, canonical: bool) -> Gen {
        match g {
            Gen::Num(n) => {
                let pick = picks.get(*at).copied().unwrap_or(0);
                *at += 1;
                // (spellings, the one spelling)
                let (spellings, one): (&[&str], &str) = match pick % 4 {
                    0 => return Gen::Num(n.clone()),
                    1 => (&["NaN", "+NaN", "-NaN"], "NaN"),
                    2 => (&["Infinity", "+Infinity"], "Infinity"),
                    _ => (&["-Infinity"], "-Infinity"),
                };
                let spelled = spellings[usize::from(pick / 4) % spellings.len()];
                Gen::Num(if canonical { one } else { spelled }.to_owned())
            }
            Gen::Arr(items) => Gen::Arr(
                items
                    .iter()
                    .map(|i| turn(i, picks, at, canonical))
                    .collect(),
            ),
            Gen::Obj(members) => Gen::Obj(
                members
                    .iter()
                    .map(|(k, v)| (k.clone(), turn(v, picks, at, canonical)))
                    .collect(),
            ),
            other => other.clone(),
        }
    }
    let spelled = text_of(&turn(g, picks, &mut 0, false));
    let canonical = text_of(&turn(g, picks, &mut 0, true));
    (spelled, canonical)
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(1024))]

    /// Any value: its fingerprint, args fingerprint and canonical text.
    #[test]
    fn values_hash_alike(g in gen()) {
        let text = text_of(&g);
        let mut tape = Tape::new();
        let doc = raw(&mut tape, &text);
        let root: Raw<'_> = doc;
        let Ok(value) = serde_json::from_str::<Value>(&text) else {
            // Beyond what a Value holds (a number out of range): still hashed, the same
            // way every time.
            prop_assert_eq!(Fingerprint::of(root), Fingerprint::of(root));
            return Ok(());
        };
        prop_assert_eq!(Fingerprint::of(root), Fingerprint::of(&value), "{}", text);
        prop_assert_eq!(json_text(root), json_text(&value));
        for tool in TOOLS {
            prop_assert_eq!(args_fingerprint(tool, root), args_fingerprint(tool, &value));
        }
    }

    /// Calls and their outcomes under each config: print, rule, outcome print, failure.
    #[test]
    fn calls_and_outcomes_hash_alike(a in args(), r in result(), tool in 0..TOOLS.len(), error in any::<bool>()) {
        let tool = TOOLS[tool];
        let (args_text, result_text) = (text_of(&a), text_of(&r));
        let (Ok(args_value), Ok(result_value)) = (
            serde_json::from_str::<Value>(&args_text),
            serde_json::from_str::<Value>(&result_text),
        ) else {
            return Ok(());
        };
        let (mut t1, mut t2, mut t3) = (Tape::new(), Tape::new(), Tape::new());
        let args_doc = raw(&mut t1, &args_text);
        let result_doc = raw(&mut t2, &result_text);
        let read_doc = t3
            .parse_read(&result_text, &RESULT)
            .expect("the tape accepts what serde_json accepts");
        for config in configs() {
            let cfg = config.global();
            let by_value = CallPrint::for_config(tool, &args_value, cfg);
            let by_raw = CallPrint::for_config(tool, args_doc, cfg);
            prop_assert_eq!(by_value.args, by_raw.args);
            prop_assert_eq!(by_value.signature, by_raw.signature);
            prop_assert_eq!(by_value.rule, by_raw.rule);
            prop_assert_eq!(by_value.known_poll, by_raw.known_poll);
            prop_assert_eq!(by_value.target, by_raw.target);
            let (v, r) = if error {
                (OutcomeOf::Error(&result_value), OutcomeOf::Error(result_doc))
            } else {
                (OutcomeOf::Result(&result_value), OutcomeOf::Result(result_doc))
            };
            prop_assert_eq!(
                OutcomePrint::for_config(by_value.rule, v, cfg),
                OutcomePrint::for_config(by_raw.rule, r, cfg),
                "{} {} -> {}", tool, args_text, result_text
            );
            prop_assert_eq!(is_failure(tool, v), is_failure(tool, r));
            prop_assert_eq!(failure_of(tool, v), failure_of(tool, r));
            if !error {
                // Only what the rules read, as an event reader keeps a result.
                let read = OutcomeOf::Result(read_doc);
                prop_assert_eq!(
                    OutcomePrint::for_config(by_value.rule, v, cfg),
                    OutcomePrint::for_config(by_raw.rule, read, cfg),
                    "{} {} -> {} (as read)", tool, args_text, result_text
                );
                prop_assert_eq!(is_failure(tool, v), is_failure(tool, read));
                prop_assert_eq!(failure_of(tool, v), failure_of(tool, read));
            }
        }
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(512))]

    /// Non-finite literals (`NaN`, `Infinity`, `-Infinity`, and the signed spellings
    /// clients also write) are fingerprinted as the values they name: every spelling of one
    /// value gives one fingerprint, as args and as outcomes under every config, and the
    /// values stay apart from each other, from `null` and from strings. Finite numbers are
    /// untouched (`values_hash_alike` holds them to the parsed value's fingerprint).
    #[test]
    fn every_spelling_of_a_non_finite_number_is_one_value(g in args(), picks in prop::collection::vec(any::<u8>(), 0..64), tool in 0..TOOLS.len()) {
        let tool = TOOLS[tool];
        let (spelled, canonical) = non_finite_texts(&g, &picks);
        let (mut t1, mut t2) = (Tape::new(), Tape::new());
        let a = t1.parse(&spelled).expect("the tape reads non-finite literals");
        let b = t2.parse(&canonical).expect("the tape reads non-finite literals");
        prop_assert_eq!(Fingerprint::of(a), Fingerprint::of(b), "{} / {}", spelled, canonical);
        prop_assert_eq!(json_text(a), json_text(b));
        for config in configs() {
            let cfg = config.global();
            let (pa, pb) = (CallPrint::for_config(tool, a, cfg), CallPrint::for_config(tool, b, cfg));
            prop_assert_eq!(pa.signature, pb.signature);
            prop_assert_eq!(
                OutcomePrint::for_config(pa.rule, OutcomeOf::Result(a), cfg),
                OutcomePrint::for_config(pb.rule, OutcomeOf::Result(b), cfg)
            );
            prop_assert_eq!(
                OutcomePrint::for_config(pa.rule, OutcomeOf::Error(a), cfg),
                OutcomePrint::for_config(pb.rule, OutcomeOf::Error(b), cfg)
            );
        }
        // The canonical text reads back to the same fingerprint.
        let text = json_text(a);
        let mut t3 = Tape::new();
        prop_assert_eq!(Fingerprint::of(t3.parse(&text).unwrap()), Fingerprint::of(a));
    }
}

#[test]
fn non_finite_values_differ_from_each_other_and_from_what_looks_like_them() {
    let texts = [
        "NaN",
        "Infinity",
        "-Infinity",
        "null",
        "0",
        "\"NaN\"",
        "\"Infinity\"",
        "1e999",
        "-1e999",
    ];
    let prints: Vec<Fingerprint> = texts
        .iter()
        .map(|t| Fingerprint::of(Tape::new().parse(t).unwrap()))
        .collect();
    for (i, a) in prints.iter().enumerate() {
        for (j, b) in prints.iter().enumerate().skip(i + 1) {
            assert_ne!(a, b, "{} and {}", texts[i], texts[j]);
        }
    }
}
