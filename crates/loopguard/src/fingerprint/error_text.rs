//! The text an error outcome is hashed by (SPEC §2 rule 1), and the unavailable tool it
//! may name.

use std::sync::LazyLock;

use regex::Regex;

use crate::canonical::{json_text, number_text};
use crate::json::{Json, Kind, Object, Str};
use crate::text::trim;

/// An error's text: borrowed from the error value, or built (canonical JSON, a number).
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum ErrorText<'a> {
    /// A string of the error value.
    Borrowed(Str<'a>),
    /// Text made from the value.
    Owned(String),
}

impl ErrorText<'_> {
    /// The text as a string of either kind.
    pub fn as_string(&self) -> Str<'_> {
        match self {
            Self::Borrowed(s) => *s,
            Self::Owned(s) => Str::Text(s),
        }
    }
}

/// The text an error is hashed by (SPEC §2 rule 1).
pub fn error_text<'a, J: Json<'a>>(error: J) -> ErrorText<'a> {
    match error.kind() {
        Kind::String(s) => ErrorText::Borrowed(s),
        Kind::Object(map) => {
            let message = map
                .get("message")
                .and_then(Json::as_string)
                .filter(|s| !s.as_bytes().is_empty());
            match message.or_else(|| map.get("name").and_then(Json::as_string)) {
                Some(s) => ErrorText::Borrowed(s),
                None => ErrorText::Owned(json_text(error)),
            }
        }
        Kind::Number(n) => ErrorText::Owned(number_text(n).into_owned()),
        Kind::Bool(b) => ErrorText::Borrowed(Str::Text(if b { "true" } else { "false" })),
        Kind::Null | Kind::Array(_) => ErrorText::Owned(json_text(error)),
    }
}

/// ECMAScript's `\s`, spelled out so that the match is the same as the reference's.
const JS_SPACE: &str = r"[\t\n\x0B\x0C\r \x{A0}\x{1680}\x{2000}-\x{200A}\x{2028}\x{2029}\x{202F}\x{205F}\x{3000}\x{FEFF}]";

static UNKNOWN_TOOL: LazyLock<[Regex; 2]> =
    LazyLock::new(|| {
        let name = r#"((?i-u:[a-z0-9_.-])+)"#;
        [
        Regex::new(&format!(r#"(?i-u:unknown tool)(?:[:]|{JS_SPACE})+["']?{name}"#))
            .expect("valid pattern"),
        Regex::new(&format!(
            r#"(?i-u:tool){JS_SPACE}+["']?{name}["']?{JS_SPACE}+(?i-u:not found|is not available)"#
        ))
        .expect("valid pattern"),
    ]
    });

/// The unavailable tool an error text names, lower-cased: `unknown tool: NAME`,
/// `tool NAME not found` or `tool NAME is not available` (case-insensitive).
pub fn unknown_tool_name(text: &str) -> Option<String> {
    let raw = trim(text);
    if raw.is_empty() {
        return None;
    }
    UNKNOWN_TOOL.iter().find_map(|re| {
        let name = re.captures(raw)?.get(1)?.as_str();
        (!name.is_empty()).then(|| name.to_ascii_lowercase())
    })
}

/// [`unknown_tool_name`] of a string of either kind. A lone surrogate is neither a space
/// nor a name character, and neither is U+FFFD, so the lossy text matches the same way.
pub(super) fn unknown_tool_in(text: Str<'_>) -> Option<String> {
    match text {
        Str::Text(t) => unknown_tool_name(t),
        Str::Wtf8(b) => unknown_tool_name(&String::from_utf8_lossy(b)),
    }
}
