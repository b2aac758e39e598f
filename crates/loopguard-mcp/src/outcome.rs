//! MCP tool results as engine outcomes, and the proxy's own tool results.
//!
//! A `tools/call` is answered with a `CallToolResult` (`content` blocks, optional
//! `structuredContent`, optional `isError`) or with a JSON-RPC error. SPEC §2 fingerprints
//! a result by its `details` object and the text of its `content` blocks, and an error by
//! its text (a string, or an object's `message`). The mapping:
//!
//! | response | engine outcome |
//! |---|---|
//! | JSON-RPC `error` object | error: the object (fingerprinted by its `message`, where "Unknown tool: x" names a missing tool) |
//! | `result` with `isError: true` | error: the text of its text blocks, joined by newlines (the whole `content` when it has no text) |
//! | `result` otherwise | result `{content: <text blocks>, details: {structuredContent, blocks}}`: the text blocks as they are; `structuredContent` and the non-text blocks (images, audio, resources, links) in `details` when present |
//! | `result` that is not an object | result: the value itself |
//!
//! `_meta` is left out: it describes the message, not what the tool found.

use loopguard::json::{Json, Object, Raw, RawObject};
use serde_json::{json, Map, Value};

/// An outcome owned by the proxy until it is handed to the engine.
#[derive(Clone, Debug, PartialEq)]
pub enum Mapped {
    /// The tool's result.
    Result(Value),
    /// The call failed.
    Error(Value),
    /// Neither a result nor an error.
    Nothing,
}

impl Mapped {
    /// The borrowed form the engine takes.
    pub fn as_outcome(&self) -> loopguard::Outcome<'_> {
        match self {
            Self::Result(v) => loopguard::Outcome::Result(v),
            Self::Error(v) => loopguard::Outcome::Error(v),
            Self::Nothing => loopguard::Outcome::Nothing,
        }
    }
}

/// The engine outcome of a response to `tools/call` (the module docs give the mapping).
pub fn map_response(response: &Map<String, Value>) -> Mapped {
    match parts(response) {
        Parts::Error(error) => Mapped::Error(error.clone()),
        Parts::ErrorText(text) => Mapped::Error(Value::String(text)),
        Parts::ErrorContent(content) => Mapped::Error(content.cloned().unwrap_or(Value::Null)),
        Parts::Result(result) => Mapped::Result(result.clone()),
        Parts::Content {
            text,
            structured,
            other,
        } => {
            let mut details = Map::new();
            if let Some(structured) = structured {
                details.insert("structuredContent".into(), structured.clone());
            }
            if !other.is_empty() {
                details.insert(
                    "blocks".into(),
                    Value::Array(other.into_iter().cloned().collect()),
                );
            }
            Mapped::Result(json!({
                "content": text.into_iter().cloned().collect::<Vec<_>>(),
                "details": details,
            }))
        }
        Parts::Nothing => Mapped::Nothing,
    }
}

/// An outcome as JSON text, for a response read as raw JSON (one a `Value` cannot hold:
/// a number beyond the double range, a lone surrogate, deep nesting). The text is built
/// from canonical JSON ([`loopguard::canonical::json_text`]), which keeps every value's
/// fingerprint.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum MappedText {
    /// The tool's result, as JSON text.
    Result(String),
    /// The call failed: the error, as JSON text.
    Error(String),
    /// Neither.
    Nothing,
}

/// [`map_response`] for a response read as raw JSON.
pub fn map_raw_response(response: RawObject<'_>) -> MappedText {
    use loopguard::canonical::json_text;
    let string = |s: &str| Value::String(s.to_owned()).to_string();
    let list = |items: &[Raw<'_>]| {
        let texts: Vec<String> = items.iter().map(|&b| json_text(b)).collect();
        format!("[{}]", texts.join(","))
    };
    match parts(response) {
        Parts::Error(error) => MappedText::Error(json_text(error)),
        Parts::ErrorText(text) => MappedText::Error(string(&text)),
        Parts::ErrorContent(content) => {
            MappedText::Error(content.map_or_else(|| "null".to_owned(), json_text))
        }
        Parts::Result(result) => MappedText::Result(json_text(result)),
        Parts::Content {
            text,
            structured,
            other,
        } => {
            let mut details = Vec::new();
            if !other.is_empty() {
                details.push(format!("\"blocks\":{}", list(&other)));
            }
            if let Some(structured) = structured {
                details.push(format!("\"structuredContent\":{}", json_text(structured)));
            }
            MappedText::Result(format!(
                "{{\"content\":{},\"details\":{{{}}}}}",
                list(&text),
                details.join(",")
            ))
        }
        Parts::Nothing => MappedText::Nothing,
    }
}

/// What a response is made of, as the mapping reads it (written once for both views).
enum Parts<J> {
    Error(J),
    ErrorText(String),
    /// An error result without text: its `content` (`None`: null).
    ErrorContent(Option<J>),
    Result(J),
    Content {
        text: Vec<J>,
        structured: Option<J>,
        other: Vec<J>,
    },
    Nothing,
}

fn parts<'a, O: Object<'a>>(response: O) -> Parts<O::Value> {
    if let Some(error) = response.get("error") {
        return Parts::Error(error);
    }
    let Some(result) = response.get("result") else {
        return Parts::Nothing;
    };
    let Some(result) = result.as_object() else {
        return Parts::Result(result);
    };
    let content = result.get("content").and_then(Json::as_array);
    let (text, other): (Vec<O::Value>, Vec<O::Value>) = content
        .map(|c| c.partition(|&b| is_text_block(b)))
        .unwrap_or_default();
    if result.get("isError").and_then(Json::as_bool) == Some(true) {
        let joined: Vec<&str> = text
            .iter()
            .filter_map(|b| b.get("text").and_then(Json::as_str))
            .collect();
        return if joined.is_empty() {
            Parts::ErrorContent(result.get("content"))
        } else {
            Parts::ErrorText(joined.join("\n"))
        };
    }
    Parts::Content {
        text,
        structured: result.get("structuredContent"),
        other,
    }
}

fn is_text_block<'a, J: Json<'a>>(block: J) -> bool {
    block.get("type").and_then(Json::as_str) == Some("text")
        && block.get("text").and_then(Json::as_string).is_some()
}

/// Appends a text block to the `content` of a response's `result`; returns whether it
/// could (a JSON-RPC error, or a result that is not an object, has no content to extend).
pub fn append_text(response: &mut Map<String, Value>, text: &str) -> bool {
    let Some(Value::Object(result)) = response.get_mut("result") else {
        return false;
    };
    let block = json!({ "type": "text", "text": text });
    match result.get_mut("content") {
        Some(Value::Array(content)) => content.push(block),
        _ => {
            result.insert("content".into(), Value::Array(vec![block]));
        }
    }
    true
}

/// The proxy's answer to a blocked `tools/call`: a tool result with `isError: true` whose
/// text is the engine's message, so that the model reads why.
pub fn blocked_response(id: &Value, message: &str) -> Value {
    json!({
        "jsonrpc": "2.0",
        "id": id,
        "result": {
            "content": [{ "type": "text", "text": message }],
            "isError": true,
        },
    })
}

/// The answer to a request the server can no longer answer (it exited): the error the MCP
/// SDKs raise for a closed connection.
pub fn connection_closed(id: &Value, why: &str) -> Value {
    json!({
        "jsonrpc": "2.0",
        "id": id,
        "error": { "code": -32000, "message": format!("Connection closed: {why}") },
    })
}

/// The answer to request `id` when the server's response to it is not JSON: an internal
/// error, so that the client stops waiting.
pub fn unreadable_response(id: &Value) -> Value {
    json!({
        "jsonrpc": "2.0",
        "id": id,
        "error": {
            "code": -32603,
            "message": "Internal error: the MCP server's response could not be read (it is not JSON); the loopguard proxy answered in its place",
        },
    })
}

/// The error answering request `id` whose line (or whose response's line) was `len` bytes,
/// longer than the proxy's limit `max`: JSON-RPC's "invalid request".
pub fn line_too_long(id: &Value, len: usize, max: usize) -> Value {
    json!({
        "jsonrpc": "2.0",
        "id": id,
        "error": {
            "code": -32600,
            "message": format!("Message too large: {len} bytes, more than the loopguard proxy's limit of {max} bytes"),
        },
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use loopguard::fingerprint::{OutcomePrint, OutcomeRule};

    fn map(v: Value) -> Mapped {
        map_response(v.as_object().unwrap())
    }

    fn print(m: &Mapped) -> OutcomePrint {
        OutcomePrint::new(OutcomeRule::for_call("read", &json!({})), m.as_outcome())
    }

    #[test]
    fn results_keep_text_and_move_the_rest_to_details() {
        let m = map(json!({"jsonrpc": "2.0", "id": 1, "result": {
            "content": [{"type": "text", "text": "a"}, {"type": "image", "data": "AA", "mimeType": "image/png"}],
            "structuredContent": {"n": 1}, "_meta": {"x": 1}
        }}));
        assert_eq!(
            m,
            Mapped::Result(json!({
                "content": [{"type": "text", "text": "a"}],
                "details": {"structuredContent": {"n": 1}, "blocks": [{"type": "image", "data": "AA", "mimeType": "image/png"}]}
            }))
        );
        // Different structured content, different outcome; a different _meta, the same.
        let a = print(&map(
            json!({"result": {"content": [], "structuredContent": {"n": 1}}}),
        ));
        let b = print(&map(
            json!({"result": {"content": [], "structuredContent": {"n": 2}}}),
        ));
        let c = print(&map(
            json!({"result": {"content": [], "structuredContent": {"n": 1}, "_meta": {"t": 9}}}),
        ));
        assert_ne!(a, b);
        assert_eq!(a, c);
    }

    /// The raw mapping gives the fingerprints of the value mapping.
    #[test]
    fn raw_responses_map_alike() {
        for response in [
            json!({"jsonrpc": "2.0", "id": 1, "result": {
                "content": [{"type": "text", "text": "a"}, {"type": "image", "data": "AA"}],
                "structuredContent": {"n": 1.5}, "_meta": {"x": 1}
            }}),
            json!({"id": 1, "result": {"content": [{"type": "text", "text": "a"}]}}),
            json!({"id": 1, "error": {"code": -32602, "message": "Unknown tool: nope"}}),
            json!({"id": 1, "result": {"content": [{"type": "text", "text": "boom"}], "isError": true}}),
            json!({"id": 1, "result": {"content": [{"type": "image"}], "isError": true}}),
            json!({"id": 1, "result": {"isError": true}}),
            json!({"id": 1, "result": 5}),
            json!({"id": 1}),
        ] {
            let by_value = print(&map(response.clone()));
            let text = response.to_string();
            let mut tape = loopguard::json::Tape::new();
            let raw = tape.parse(&text).unwrap();
            let mapped = map_raw_response(raw.as_object().unwrap());
            let mut t2 = loopguard::json::Tape::new();
            let rule = OutcomeRule::for_call("read", &json!({}));
            let by_raw = match &mapped {
                MappedText::Result(t) => {
                    OutcomePrint::new(rule, loopguard::OutcomeOf::Result(t2.parse(t).unwrap()))
                }
                MappedText::Error(t) => {
                    OutcomePrint::new(rule, loopguard::OutcomeOf::Error(t2.parse(t).unwrap()))
                }
                MappedText::Nothing => OutcomePrint::Nothing,
            };
            assert_eq!(by_raw, by_value, "{response}");
        }
    }

    #[test]
    fn errors_are_errors() {
        assert_eq!(
            map(json!({"id": 1, "error": {"code": -32602, "message": "Unknown tool: nope"}})),
            Mapped::Error(json!({"code": -32602, "message": "Unknown tool: nope"}))
        );
        let unknown = print(&map(
            json!({"id": 1, "error": {"code": -32602, "message": "Unknown tool: nope"}}),
        ));
        assert!(
            matches!(unknown, OutcomePrint::Hashed { unknown_tool: Some(ref t), .. } if t == "nope")
        );
        assert_eq!(
            map(
                json!({"id": 1, "result": {"content": [{"type": "text", "text": "boom"}, {"type": "text", "text": "again"}], "isError": true}})
            ),
            Mapped::Error(json!("boom\nagain"))
        );
        assert_eq!(
            map(
                json!({"id": 1, "result": {"content": [{"type": "image", "data": "x"}], "isError": true}})
            ),
            Mapped::Error(json!([{"type": "image", "data": "x"}]))
        );
        assert_eq!(map(json!({"id": 1})), Mapped::Nothing);
        assert_eq!(map(json!({"id": 1, "result": 5})), Mapped::Result(json!(5)));
    }

    #[test]
    fn notes_are_appended_to_results_only() {
        let mut ok = json!({"id": 1, "result": {"content": [{"type": "text", "text": "a"}]}});
        assert!(append_text(ok.as_object_mut().unwrap(), "note"));
        assert_eq!(
            ok["result"]["content"][1],
            json!({"type": "text", "text": "note"})
        );
        let mut bare = json!({"id": 1, "result": {}});
        assert!(append_text(bare.as_object_mut().unwrap(), "note"));
        assert_eq!(
            bare["result"]["content"],
            json!([{"type": "text", "text": "note"}])
        );
        let mut err = json!({"id": 1, "error": {"code": 1, "message": "x"}});
        assert!(!append_text(err.as_object_mut().unwrap(), "note"));
    }

    #[test]
    fn proxy_answers() {
        assert_eq!(
            blocked_response(&json!(7), "CRITICAL"),
            json!({"jsonrpc": "2.0", "id": 7, "result": {"content": [{"type": "text", "text": "CRITICAL"}], "isError": true}})
        );
        assert_eq!(connection_closed(&json!("a"), "x")["error"]["code"], -32000);
    }
}
