//! Messages too large to read whole into values (256 KiB and up): read member by member,
//! each member's text borrowed from the line, and the parts of a call (its arguments, its
//! result's content and structured content, its error) read into values only up to
//! [`MAX_PART_COST`], known by their bytes beyond ([`bytes_stand_in`]). A tool result of
//! 50 MB of rows then costs the proxy about the line it forwards, not a value tree a
//! hundred times its size; the line itself goes on unchanged (or with a note inserted
//! into its `content`, the one place the proxy writes into a result).

use std::ops::Range;

use loopguard::fingerprint::bytes_stand_in;
use loopguard_events::{is_readable_part, MAX_COST_PER_BODY_BYTE, MAX_PART_COST};
use serde::Deserialize;
use serde_json::value::RawValue;
use serde_json::{json, Map, Value};

/// Lines shorter than this are read whole into values: that costs at most
/// [`MAX_PART_COST`].
pub const READ_WHOLE_BELOW: usize = MAX_PART_COST / MAX_COST_PER_BODY_BYTE;

/// A JSON-RPC message's members, borrowed from its line (a repeated member, or a line
/// that is not an object, does not read: the caller reads the line whole instead).
#[derive(Deserialize)]
pub(crate) struct Envelope<'a> {
    #[serde(borrow, default)]
    pub id: Option<&'a RawValue>,
    #[serde(borrow, default)]
    pub method: Option<&'a RawValue>,
    #[serde(borrow, default)]
    pub params: Option<&'a RawValue>,
    #[serde(borrow, default)]
    pub result: Option<&'a RawValue>,
    #[serde(borrow, default)]
    pub error: Option<&'a RawValue>,
}

impl<'a> Envelope<'a> {
    /// The members of the message on `line`.
    pub fn read(line: &'a [u8]) -> Option<Self> {
        serde_json::from_slice(line).ok()
    }

    /// The id, read (ids are small); `None` when there is none or it is `null`.
    pub fn id(&self) -> Option<Value> {
        let id: Value = serde_json::from_str(self.id?.get()).ok()?;
        (!id.is_null()).then_some(id)
    }

    /// The method, when it is a string.
    pub fn method(&self) -> Option<String> {
        serde_json::from_str(self.method?.get()).ok()
    }
}

/// A part of a call: read into a value up to [`MAX_PART_COST`], its bytes' stand-in
/// beyond; `None` when a readable part is JSON a `Value` cannot hold (the caller reads the
/// line its other way).
pub(crate) fn part(raw: &RawValue) -> Option<Value> {
    let text = raw.get();
    if is_readable_part(text.as_bytes()) {
        serde_json::from_str(text).ok()
    } else {
        Some(Value::String(bytes_stand_in(text.as_bytes())))
    }
}

/// The `params` of a `tools/call`, its arguments as a part.
pub(crate) fn call_params(params: &RawValue) -> Option<Value> {
    #[derive(Deserialize)]
    struct Params<'a> {
        name: Value,
        #[serde(borrow, default)]
        arguments: Option<&'a RawValue>,
    }
    let params: Params<'_> = serde_json::from_str(params.get()).ok()?;
    let mut out = Map::new();
    out.insert("name".into(), params.name);
    if let Some(arguments) = params.arguments {
        out.insert("arguments".into(), part(arguments)?);
    }
    Some(Value::Object(out))
}

/// The response of a `tools/call` as the outcome mapping reads it (`result` or `error`),
/// with stand-ins for parts too large to read, and where the result's `content` array
/// lies in `line` (to insert a note into). `None` when it does not read this way.
pub(crate) fn call_response(line: &[u8], envelope: &Envelope<'_>) -> Option<(Value, Insert)> {
    let mut response = Map::new();
    if let Some(error) = envelope.error {
        response.insert("error".into(), part(error)?);
        return Some((Value::Object(response), Insert::None));
    }
    let Some(result) = envelope.result else {
        return Some((Value::Object(response), Insert::None));
    };
    #[derive(Deserialize)]
    struct CallToolResult<'a> {
        #[serde(borrow, default)]
        content: Option<&'a RawValue>,
        #[serde(borrow, default, rename = "structuredContent")]
        structured: Option<&'a RawValue>,
        #[serde(default, rename = "isError")]
        is_error: Option<Value>,
    }
    let text = result.get();
    let Ok(fields) = serde_json::from_str::<CallToolResult<'_>>(text) else {
        // Not an object (or one with a repeated member): the whole result as a part.
        response.insert("result".into(), part(result)?);
        return Some((Value::Object(response), Insert::None));
    };
    let mut reduced = Map::new();
    let insert = match fields.content {
        Some(content) => {
            let t = content.get();
            let value = if is_readable_part(t.as_bytes()) {
                serde_json::from_str(t).ok()?
            } else {
                json!([{"type": "text", "text": bytes_stand_in(t.as_bytes())}])
            };
            reduced.insert("content".into(), value);
            match t.as_bytes() {
                [b'[', inner @ .., b']'] => Insert::IntoArray {
                    at: span(line, t).end - 1,
                    empty: inner.iter().all(u8::is_ascii_whitespace),
                },
                _ => Insert::None,
            }
        }
        None => Insert::NewContent {
            at: span(line, text).start + 1,
            empty: text.len() == 2,
        },
    };
    if let Some(structured) = fields.structured {
        reduced.insert("structuredContent".into(), part(structured)?);
    }
    if let Some(is_error) = fields.is_error {
        reduced.insert("isError".into(), is_error);
    }
    response.insert("result".into(), Value::Object(reduced));
    Some((Value::Object(response), insert))
}

/// Where `inner`, a slice of `line`'s text, lies in it.
fn span(line: &[u8], inner: &str) -> Range<usize> {
    let start = (inner.as_ptr() as usize).saturating_sub(line.as_ptr() as usize);
    start..start + inner.len()
}

/// Where text blocks can go into a response's line.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Insert {
    /// Before the closing bracket at `at` of the `content` array (`empty`: no element yet).
    IntoArray { at: usize, empty: bool },
    /// A `content` member at `at`, just inside the result object's brace (`empty`: the
    /// object has no member yet).
    NewContent { at: usize, empty: bool },
    /// Nowhere: an error, or a result that is not an object.
    None,
}

impl Insert {
    /// `line` with `texts` appended to its result's content as text blocks (as
    /// [`crate::outcome::append_text`] appends them to a parsed response), or `None` when
    /// there is no content to extend.
    pub fn apply(self, line: &[u8], texts: &[&str]) -> Option<Vec<u8>> {
        let blocks: Vec<String> = texts
            .iter()
            .map(|t| json!({"type": "text", "text": t}).to_string())
            .collect();
        let blocks = blocks.join(",");
        let (at, piece) = match self {
            Self::IntoArray { at, empty } => {
                (at, format!("{}{blocks}", if empty { "" } else { "," }))
            }
            Self::NewContent { at, empty } => (
                at,
                format!("\"content\":[{blocks}]{}", if empty { "" } else { "," }),
            ),
            Self::None => return None,
        };
        let mut out = Vec::with_capacity(line.len() + piece.len());
        out.extend_from_slice(&line[..at]);
        out.extend_from_slice(piece.as_bytes());
        out.extend_from_slice(&line[at..]);
        Some(out)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn notes_go_into_the_content_as_append_text_puts_them() {
        for (line, want) in [
            (
                r#"{"id":1,"result":{"content":[{"type":"text","text":"a"}],"isError":false}}"#,
                r#"{"id":1,"result":{"content":[{"type":"text","text":"a"},{"text":"N","type":"text"}],"isError":false}}"#,
            ),
            (
                r#"{"id":1,"result":{"content":[ ],"x":1}}"#,
                r#"{"id":1,"result":{"content":[ {"text":"N","type":"text"}],"x":1}}"#,
            ),
            (
                r#"{"id":1,"result":{"x":1}}"#,
                r#"{"id":1,"result":{"content":[{"text":"N","type":"text"}],"x":1}}"#,
            ),
            (
                r#"{"id":1,"result":{}}"#,
                r#"{"id":1,"result":{"content":[{"text":"N","type":"text"}]}}"#,
            ),
        ] {
            let envelope = Envelope::read(line.as_bytes()).unwrap();
            let (_, insert) = call_response(line.as_bytes(), &envelope).unwrap();
            let got = insert.apply(line.as_bytes(), &["N"]).unwrap();
            assert_eq!(String::from_utf8(got).unwrap(), want);
            // The same as rewriting the parsed response.
            let mut parsed: Value = serde_json::from_str(line).unwrap();
            crate::outcome::append_text(parsed.as_object_mut().unwrap(), "N");
            assert_eq!(parsed, serde_json::from_str::<Value>(want).unwrap());
        }
        let error = r#"{"id":1,"error":{"code":1,"message":"x"}}"#;
        let envelope = Envelope::read(error.as_bytes()).unwrap();
        let (_, insert) = call_response(error.as_bytes(), &envelope).unwrap();
        assert_eq!(insert, Insert::None);
    }

    #[test]
    fn parts_past_the_cap_are_known_by_their_bytes() {
        let rows = vec![r#"{"a":0}"#; MAX_PART_COST / 100].join(",");
        let line = format!(
            r#"{{"id":7,"result":{{"content":[{{"type":"text","text":"ok"}}],"structuredContent":{{"rows":[{rows}]}}}}}}"#
        );
        let envelope = Envelope::read(line.as_bytes()).unwrap();
        assert_eq!(envelope.id(), Some(json!(7)));
        let (response, _) = call_response(line.as_bytes(), &envelope).unwrap();
        let structured = &response["result"]["structuredContent"];
        let raw = format!(r#"{{"rows":[{rows}]}}"#);
        assert_eq!(structured, &Value::String(bytes_stand_in(raw.as_bytes())));
        assert_eq!(response["result"]["content"][0]["text"], "ok");
    }
}
