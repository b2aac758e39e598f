//! Canonical JSON text of a value: members sorted by key bytes, no whitespace, integral
//! numbers written as integers. SPEC §2 rule 1 hashes an error value by its *text*, which
//! must also be searched for an unknown tool name; this is that text for values that are
//! not a string or a message object. Iterative, like the encoder.

use std::borrow::Cow;

use crate::json::{Canonical, Json, Kind, Num, Object, Str};

/// Canonical JSON text of a value.
pub fn json_text<'a, J: Json<'a>>(value: J) -> String {
    enum Frame<'a, J: Json<'a>> {
        Array(J::Items, bool),
        Object(J::Object, <J::Object as Object<'a>>::Sorted, bool, usize),
    }
    let mut scratch = Vec::new();
    let mut out = String::new();
    let mut stack: Vec<Frame<'a, J>> = Vec::new();
    let mut pending = Some(value);
    loop {
        if let Some(v) = pending.take() {
            match v.kind() {
                Kind::Array(items) => {
                    out.push('[');
                    stack.push(Frame::Array(items, true));
                }
                Kind::Object(object) => {
                    out.push('{');
                    let mark = scratch.len();
                    let (_, members) = object.sorted(&mut scratch);
                    stack.push(Frame::Object(object, members, true, mark));
                }
                Kind::Null => out.push_str("null"),
                Kind::Bool(b) => out.push_str(if b { "true" } else { "false" }),
                Kind::Number(n) => out.push_str(&number_text(n)),
                Kind::String(s) => s.push_json(&mut out),
            }
        }
        let Some(top) = stack.last_mut() else { break };
        match top {
            Frame::Array(items, first) => match items.next() {
                Some(v) => {
                    if !*first {
                        out.push(',');
                    }
                    *first = false;
                    pending = Some(v);
                }
                None => {
                    out.push(']');
                    stack.pop();
                }
            },
            Frame::Object(object, members, first, mark) => {
                match object.next_sorted(members, &scratch) {
                    Some((k, v)) => {
                        if !*first {
                            out.push(',');
                        }
                        *first = false;
                        key_str(k).push_json(&mut out);
                        out.push(':');
                        pending = Some(v);
                    }
                    None => {
                        out.push('}');
                        scratch.truncate(*mark);
                        stack.pop();
                    }
                }
            }
        }
    }
    out
}

/// A key's bytes as a string: UTF-8, or WTF-8 when a raw key holds a lone surrogate.
fn key_str(k: &[u8]) -> Str<'_> {
    std::str::from_utf8(k).map_or(Str::Wtf8(k), Str::Text)
}

/// A JSON number as text, integral values without a fraction (`1.0` → `1`); a number
/// beyond the double range as it was written.
pub fn number_text(n: Num<'_>) -> Cow<'_, str> {
    if let Num::Value(n) = n {
        if n.is_u64() || n.is_i64() {
            return Cow::Owned(n.to_string());
        }
    }
    match n.canonical() {
        Canonical::Int(i) => Cow::Owned(i.to_string()),
        Canonical::Double(f) => Cow::Owned(match n {
            Num::Value(n) => n.to_string(),
            Num::Text(_) => {
                serde_json::Number::from_f64(f).map_or_else(String::new, |n| n.to_string())
            }
        }),
        Canonical::Big(text) => Cow::Borrowed(text),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::{json, Value};

    #[test]
    fn json_text_is_canonical() {
        let v: Value = serde_json::from_str(r#"{"b":1.0,"a":["x\"y",true,null,1.5]}"#).unwrap();
        assert_eq!(json_text(&v), r#"{"a":["x\"y",true,null,1.5],"b":1}"#);
        assert_eq!(json_text(&json!({})), "{}");
        assert_eq!(json_text(&json!([])), "[]");
        assert_eq!(json_text(&json!("\u{1}")), "\"\\u0001\"");
    }

    #[test]
    fn raw_text_matches_and_keeps_what_a_value_cannot() {
        let mut tape = crate::json::Tape::new();
        let text = r#"{"b":1.0,"a":["x\"y",true,null,1.50e0],"b":2}"#;
        let doc = tape.parse(text).unwrap();
        let v: Value = serde_json::from_str(text).unwrap();
        assert_eq!(json_text(doc), json_text(&v));
        let doc = tape.parse(r#"{"z":1e999,"\ud800":"a\udc00b"}"#).unwrap();
        assert_eq!(json_text(doc), r#"{"z":1e999,"\ud800":"a\udc00b"}"#);
    }
}
