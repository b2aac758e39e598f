//! JSON as readers find it in a line: a node of the line's tape, or a value a reader
//! composes from such nodes without copying them.
//!
//! Readers tokenize each line once into a [`Tape`](loopguard::json::Tape) and hand the
//! guard views into it ([`JsonRef`]), so that a scan builds no `serde_json::Value` tree on
//! its hot path, as replay does. Transcripts rarely hold an event's JSON exactly as the
//! guard reads it: OpenClaw stores a tool result's `content` and `details` beside other
//! fields of its message, and an error as text to be joined. [`JsonRef::ToolResult`] and
//! [`JsonRef::Text`] are those compositions, read through the same [`Json`] trait as the
//! raw nodes, so fingerprints are computed exactly as for the `Value` the readers built
//! before (`{"content": …, "details": …}`, a string).

use loopguard::json::{Json, Kind, Object, Raw, RawItems, RawObject, Str};
use serde_json::Value;

/// A JSON value found in a transcript line, or composed from values found there.
#[derive(Clone, Copy, Debug)]
pub enum JsonRef<'a> {
    /// A value of the line, as tokenized.
    Raw(Raw<'a>),
    /// `null`.
    Null,
    /// A string the reader made (an error's joined text).
    Text(&'a str),
    /// The result object tools return, `{"content": …, "details": …}`: `content` is `null`
    /// when absent, `details` left out when absent.
    ToolResult {
        /// The `content` member (`None`: `null`).
        content: Option<Raw<'a>>,
        /// The `details` member, when there is one.
        details: Option<Raw<'a>>,
    },
}

impl<'a> JsonRef<'a> {
    /// The value as a `serde_json::Value`, for sinks that keep owned events; JSON a `Value`
    /// cannot hold (numbers beyond the double range, nesting deeper than `serde_json`'s
    /// limit, which raw JSON may have) is kept as its canonical JSON text, a string.
    pub fn to_value(self) -> Value {
        loopguard::json::to_value(self)
            .unwrap_or_else(|| Value::String(loopguard::canonical::json_text(self)))
    }
}

impl<'a> From<Raw<'a>> for JsonRef<'a> {
    fn from(raw: Raw<'a>) -> Self {
        Self::Raw(raw)
    }
}

/// An object of a [`JsonRef`].
#[derive(Clone, Copy, Debug)]
pub enum MembersRef<'a> {
    /// An object of the line.
    Raw(RawObject<'a>),
    /// A composed result object.
    ToolResult {
        /// `content` (`None`: `null`).
        content: Option<Raw<'a>>,
        /// `details`, when present.
        details: Option<Raw<'a>>,
    },
}

/// An iteration over a [`MembersRef`] in key order.
#[derive(Clone, Copy, Debug)]
pub enum SortedRef {
    /// Over a raw object.
    Raw(<RawObject<'static> as Object<'static>>::Sorted),
    /// Over a composed result: the next member (0 `content`, 1 `details`).
    ToolResult(u8),
}

type ItemsRef<'a> = std::iter::Map<RawItems<'a>, fn(Raw<'a>) -> JsonRef<'a>>;

impl<'a> Json<'a> for JsonRef<'a> {
    type Items = ItemsRef<'a>;
    type Object = MembersRef<'a>;

    #[inline]
    fn kind(self) -> Kind<'a, Self> {
        match self {
            Self::Raw(raw) => match raw.kind() {
                Kind::Null => Kind::Null,
                Kind::Bool(b) => Kind::Bool(b),
                Kind::Number(n) => Kind::Number(n),
                Kind::String(s) => Kind::String(s),
                Kind::Array(items) => Kind::Array(items.map(JsonRef::Raw as fn(_) -> _)),
                Kind::Object(o) => Kind::Object(MembersRef::Raw(o)),
            },
            Self::Null => Kind::Null,
            Self::Text(s) => Kind::String(Str::Text(s)),
            Self::ToolResult { content, details } => {
                Kind::Object(MembersRef::ToolResult { content, details })
            }
        }
    }
}

impl<'a> Object<'a> for MembersRef<'a> {
    type Value = JsonRef<'a>;
    type Sorted = SortedRef;

    fn get(self, key: &str) -> Option<JsonRef<'a>> {
        match self {
            Self::Raw(o) => o.get(key).map(JsonRef::Raw),
            Self::ToolResult { content, details } => match key {
                "content" => Some(content.map_or(JsonRef::Null, JsonRef::Raw)),
                "details" => details.map(JsonRef::Raw),
                _ => None,
            },
        }
    }

    fn each_key(self, mut f: impl FnMut(&'a [u8])) {
        match self {
            Self::Raw(o) => o.each_key(f),
            Self::ToolResult { details, .. } => {
                f(b"content");
                if details.is_some() {
                    f(b"details");
                }
            }
        }
    }

    fn sorted(self, scratch: &mut Vec<u32>) -> (usize, SortedRef) {
        match self {
            Self::Raw(o) => {
                let (n, it) = o.sorted(scratch);
                (n, SortedRef::Raw(it))
            }
            Self::ToolResult { details, .. } => {
                (1 + usize::from(details.is_some()), SortedRef::ToolResult(0))
            }
        }
    }

    #[inline]
    fn next_sorted(self, it: &mut SortedRef, scratch: &[u32]) -> Option<(&'a [u8], JsonRef<'a>)> {
        match (self, it) {
            (Self::Raw(o), SortedRef::Raw(it)) => o
                .next_sorted(it, scratch)
                .map(|(k, v)| (k, JsonRef::Raw(v))),
            (Self::ToolResult { content, details }, SortedRef::ToolResult(next)) => {
                let member = match *next {
                    0 => Some((&b"content"[..], content.map_or(JsonRef::Null, JsonRef::Raw))),
                    1 => details.map(|d| (&b"details"[..], JsonRef::Raw(d))),
                    _ => None,
                };
                *next += 1;
                member
            }
            _ => None,
        }
    }
}

/// The members `names` of `object` (the last of a repeated one), found in one pass.
pub(crate) fn pick<'a, const N: usize>(
    object: RawObject<'a>,
    names: [&str; N],
) -> [Option<Raw<'a>>; N] {
    let mut found = [None; N];
    for (key, value) in object.members() {
        if let Some(i) = names.iter().position(|n| n.as_bytes() == key.as_bytes()) {
            found[i] = Some(value);
        }
    }
    found
}

/// A member that must be a string when present: `null` counts as absent; anything else is
/// an error naming `key`.
pub(crate) fn opt_str<'a>(value: Option<Raw<'a>>, key: &str) -> Result<Option<&'a str>, String> {
    match value.map(Json::kind) {
        None | Some(Kind::Null) => Ok(None),
        Some(Kind::String(Str::Text(s))) => Ok(Some(s)),
        Some(_) => Err(format!("{key} must be a string, not {}", kind_of(value))),
    }
}

/// A member that must be a boolean when present (`null` counts as absent).
pub(crate) fn opt_bool(value: Option<Raw<'_>>, key: &str) -> Result<Option<bool>, String> {
    match value.map(Json::kind) {
        None | Some(Kind::Null) => Ok(None),
        Some(Kind::Bool(b)) => Ok(Some(b)),
        Some(_) => Err(format!("{key} must be a boolean, not {}", kind_of(value))),
    }
}

/// A member that must be a number when present (`null` counts as absent), as a double.
pub(crate) fn opt_f64(value: Option<Raw<'_>>) -> Result<Option<f64>, ()> {
    match value.map(Json::kind) {
        None | Some(Kind::Null) => Ok(None),
        Some(Kind::Number(n)) => Ok(Some(n.as_f64().unwrap_or(f64::INFINITY))),
        Some(_) => Err(()),
    }
}

fn kind_of(value: Option<Raw<'_>>) -> &'static str {
    value.map_or("nothing", loopguard::json::kind_name)
}

/// The `text` of every `{type: "text", text}` element of `content`, joined by newlines
/// (a string content is its own text).
pub(crate) fn joined_text<'a, J: Json<'a>>(content: J) -> String {
    match content.kind() {
        Kind::String(s) => String::from_utf8_lossy(s.as_bytes()).into_owned(),
        Kind::Array(parts) => {
            let texts: Vec<&str> = parts
                .filter(|p| p.get("type").and_then(Json::as_str) == Some("text"))
                .filter_map(|p| p.get("text").and_then(Json::as_str))
                .collect();
            texts.join("\n")
        }
        _ => String::new(),
    }
}

#[cfg(test)]
mod tests {
    use loopguard::fingerprint::{is_failure, OutcomeRule};
    use loopguard::json::Tape;
    use loopguard::OutcomeOf;
    use serde_json::json;

    use super::*;

    /// A composed result fingerprints, reads and converts exactly like the `Value` the
    /// readers used to build.
    #[test]
    fn composed_results_are_the_values_they_stand_for() {
        let line = r#"{"role":"toolResult","status":"error","isError":false,"content":[{"type":"text","text":" hi "}],"details":{"z":1,"a":[1,2],"status":"ok"}}"#;
        let mut tape = Tape::new();
        let root = tape.parse(line).unwrap();
        let content = root.get("content");
        for details in [root.get("details"), None] {
            for content in [content, None] {
                let view = JsonRef::ToolResult { content, details };
                let mut value =
                    json!({ "content": content.map_or(Value::Null, |c| c.to_value().unwrap()) });
                if let Some(d) = details {
                    value["details"] = d.to_value().unwrap();
                }
                assert_eq!(view.to_value(), value);
                let rule = OutcomeRule::for_call("read", &json!({}));
                assert_eq!(
                    loopguard::fingerprint::OutcomePrint::new(rule, OutcomeOf::Result(view)),
                    loopguard::fingerprint::OutcomePrint::new(rule, OutcomeOf::Result(&value)),
                );
                assert!(!is_failure("read", OutcomeOf::Result(view)));
                assert_eq!(
                    loopguard::canonical::json_text(view),
                    loopguard::canonical::json_text(&value)
                );
            }
        }
        let text = JsonRef::Text("boom");
        assert_eq!(text.to_value(), json!("boom"));
        assert_eq!(JsonRef::Null.to_value(), Value::Null);
        let deep = "[".repeat(300) + &"]".repeat(300);
        let root = tape.parse(&deep).unwrap();
        assert_eq!(JsonRef::Raw(root).to_value(), Value::String(deep.clone()));
    }
}
