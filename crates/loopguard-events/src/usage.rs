//! The members of a `usage` event, read once for both representations (a parsed `Value`
//! and raw text), so that the two parsers cannot disagree on them:
//!
//! ```text
//! {"type":"usage","session":"s","run":"r","agent":"a","id":"resp_1","model":"gpt-4o",
//!  "input_tokens":1200,"output_tokens":300,"cache_read_tokens":8000,"cache_write_tokens":0,
//!  "cost":0.0123}
//! ```
//!
//! Unlike the other events, a usage event refuses members it does not know: a figure sent
//! under another name (`prompt_tokens`) would otherwise count as nothing, and spend would
//! pass unseen. `input_tokens` and `output_tokens` are required; the token counts are whole
//! numbers from 0 to [`MAX_USAGE_TOKENS`](loopguard::budget::MAX_USAGE_TOKENS), `cost` a
//! finite number of US dollars from 0 to
//! [`MAX_USAGE_COST`](loopguard::budget::MAX_USAGE_COST). `input_tokens` are the input
//! tokens not read from or written to the prompt cache (Anthropic's count; a host whose
//! provider counts cached tokens inside its prompt tokens subtracts them).

use loopguard::json::{kind_name, Json, Object, Str};
use loopguard::Usage;

/// The members a usage event may have.
pub const USAGE_FIELDS: [&str; 14] = [
    "type",
    "session",
    "run",
    "agent",
    "parent_session",
    "parent_run",
    "ts",
    "id",
    "model",
    "input_tokens",
    "output_tokens",
    "cache_read_tokens",
    "cache_write_tokens",
    "cost",
];

/// Names other APIs give the figures, and the member they are here.
const ALIASES: [(&str, &str); 8] = [
    ("prompt_tokens", "input_tokens"),
    ("completion_tokens", "output_tokens"),
    ("cached_tokens", "cache_read_tokens"),
    ("cache_read_input_tokens", "cache_read_tokens"),
    ("cache_creation_input_tokens", "cache_write_tokens"),
    ("reasoning_tokens", "output_tokens"),
    ("total_tokens", "input_tokens and output_tokens"),
    ("total_cost", "cost"),
];

/// Reads the usage of a usage event's `object` (its envelope read already).
pub(crate) fn usage_of<'a, J: Json<'a>>(object: J::Object) -> Result<Usage<'a>, String> {
    check_members::<J>(object)?;
    figures(|key| object.get(key))
}

/// Refuses a usage event with a member it does not know, naming the first of them in byte
/// order: the same whichever representation read the event (a parsed object's members
/// come sorted, raw text's in the order they were written).
pub(crate) fn check_members<'a, J: Json<'a>>(object: J::Object) -> Result<(), String> {
    let mut unknown: Option<&'a [u8]> = None;
    object.each_key(|key| {
        if unknown.is_none_or(|first| key < first)
            && !USAGE_FIELDS.iter().any(|f| f.as_bytes() == key)
        {
            unknown = Some(key);
        }
    });
    let Some(key) = unknown else {
        return Ok(());
    };
    let key = String::from_utf8_lossy(key);
    let shown: String = key.chars().take(64).collect();
    Err(match ALIASES.iter().find(|(alias, _)| *alias == key) {
        Some((_, ours)) => format!("usage event: unknown member {shown:?} (send it as {ours})"),
        None => format!(
            "usage event: unknown member {shown:?} (a usage event has id, model, input_tokens, output_tokens, cache_read_tokens, cache_write_tokens and cost)"
        ),
    })
}

/// Reads the figures of a usage event whose members [`check_members`] accepted, each
/// looked up by `get`.
pub(crate) fn figures<'a, J: Json<'a>>(
    get: impl Fn(&'static str) -> Option<J>,
) -> Result<Usage<'a>, String> {
    let tokens = |key: &'static str, required: bool| -> Result<u64, String> {
        match get(key) {
            None if required => Err(format!("usage event without {key}")),
            None => Ok(0),
            Some(v) => whole(v).ok_or_else(|| {
                format!(
                    "{key} must be a whole number of tokens from 0 to {}, not {}",
                    loopguard::budget::MAX_USAGE_TOKENS,
                    shown(v)
                )
            }),
        }
    };
    let text = |key: &'static str| -> Result<Option<&'a str>, String> {
        match get(key) {
            None => Ok(None),
            Some(v) => match v.as_string() {
                Some(Str::Text(s)) => Ok(loopguard::text::non_blank(s)),
                Some(Str::Wtf8(_)) => Err(format!(
                    "{key} must be Unicode text, not a string with a lone surrogate escape"
                )),
                None => Err(format!("{key} must be a string, not {}", kind_name(v))),
            },
        }
    };
    let cost = match get("cost") {
        None => None,
        Some(v) => Some(
            v.as_number()
                .and_then(|n| n.as_f64())
                .filter(|c| c.is_finite() && (0.0..=loopguard::budget::MAX_USAGE_COST).contains(c))
                .ok_or_else(|| {
                    format!(
                        "cost must be a number of US dollars from 0 to {}, not {}",
                        loopguard::budget::MAX_USAGE_COST,
                        shown(v)
                    )
                })?,
        ),
    };
    let usage = Usage {
        model: text("model")?,
        input_tokens: tokens("input_tokens", true)?,
        output_tokens: tokens("output_tokens", true)?,
        cache_read_tokens: tokens("cache_read_tokens", false)?,
        cache_write_tokens: tokens("cache_write_tokens", false)?,
        cost,
        id: text("id")?,
    };
    usage.check().map_err(|e| e.to_string())?;
    Ok(usage)
}

/// A whole number of tokens in range.
fn whole<'a, J: Json<'a>>(v: J) -> Option<u64> {
    match v.as_number()?.canonical() {
        loopguard::json::Canonical::Int(i) => u64::try_from(i)
            .ok()
            .filter(|n| *n <= loopguard::budget::MAX_USAGE_TOKENS),
        _ => None,
    }
}

/// A value, shown in an error: a number as written, anything else by its kind.
fn shown<'a, J: Json<'a>>(v: J) -> String {
    match v.as_number() {
        Some(loopguard::json::Num::Text(t)) => t.chars().take(32).collect(),
        Some(loopguard::json::Num::Value(n)) => n.to_string(),
        None => kind_name(v).to_owned(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::{json, Value};

    fn read(v: Value) -> Result<(u64, u64, Option<f64>), String> {
        let object = v.as_object().unwrap();
        usage_of::<&Value>(object).map(|u| (u.input_tokens, u.cache_read_tokens, u.cost))
    }

    #[test]
    fn reads_the_figures_and_refuses_what_cannot_be_right() {
        assert_eq!(
            read(
                json!({"type":"usage","input_tokens":10,"output_tokens":2,"cache_read_tokens":5,"cost":0.5})
            ),
            Ok((10, 5, Some(0.5)))
        );
        assert_eq!(
            read(json!({"type":"usage","input_tokens":10.0,"output_tokens":0})),
            Ok((10, 0, None)),
            "an integral float is a whole number"
        );
        for (bad, says) in [
            (json!({"input_tokens":-1,"output_tokens":0}), "from 0"),
            (
                json!({"input_tokens":1.5,"output_tokens":0}),
                "whole number",
            ),
            (json!({"input_tokens":"10","output_tokens":0}), "a string"),
            (
                json!({"input_tokens":200_000_000u64,"output_tokens":0}),
                "from 0 to",
            ),
            (json!({"output_tokens":0}), "without input_tokens"),
            (
                json!({"input_tokens":1,"output_tokens":1,"cost":-0.1}),
                "cost must be",
            ),
            (
                json!({"input_tokens":1,"output_tokens":1,"cost":"1"}),
                "cost must be",
            ),
            (
                json!({"input_tokens":1,"output_tokens":1,"prompt_tokens":1}),
                "send it as input_tokens",
            ),
            (
                json!({"input_tokens":1,"output_tokens":1,"tokens":1}),
                "unknown member \"tokens\"",
            ),
            (
                json!({"input_tokens":1,"output_tokens":1,"model":5}),
                "model must be a string",
            ),
        ] {
            let error = read(bad.clone()).unwrap_err();
            assert!(error.contains(says), "{bad}: {error}");
        }
    }

    /// Several unknown members: both parsers name the same one, whatever their order in
    /// the text (found by the `event_parsers` fuzz target).
    #[test]
    fn both_parsers_name_the_same_unknown_member() {
        for line in [
            r#"{"type":"usage","zeta":1,"alpha":2,"input_tokens":1,"output_tokens":1}"#,
            r#"{"type":"usage","alpha":2,"zeta":1,"input_tokens":1,"output_tokens":1}"#,
        ] {
            let mut tape = loopguard::json::Tape::new();
            let raw = crate::parse_raw(line.as_bytes(), &mut tape)
                .map(|_| ())
                .unwrap_err();
            let by_value = crate::parse_line(line.as_bytes()).map(|_| ()).unwrap_err();
            assert_eq!(raw, by_value, "{line}");
            assert!(raw.contains("unknown member \"alpha\""), "{raw}");
        }
    }
}
