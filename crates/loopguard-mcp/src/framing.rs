//! The MCP stdio transport's framing: JSON-RPC messages, one per line, UTF-8, no embedded
//! newlines; a line may also hold a batch (a JSON array of messages).

use std::io::{self, BufRead};

use loopguard::json::{Json, Kind as JsonKind, Num, Object as _};
use serde_json::Value;

/// How much of a line longer than the limit is kept: enough to find a request's `id` and
/// `method`, which come first in practice.
pub const HEAD_BYTES: usize = 4096;

/// One read from a stream of lines.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Line {
    /// A line, without its `\n`.
    Data(Vec<u8>),
    /// A line longer than the limit: its bytes were skipped, except the first
    /// [`HEAD_BYTES`] (or the limit, if smaller).
    TooLong {
        /// The line's length.
        len: usize,
        /// Its first bytes.
        head: Vec<u8>,
    },
    /// The stream ended.
    Eof,
}

/// Reads the next line of `reader`, keeping at most `max` bytes of it. A last line without
/// a final newline counts as a line.
pub fn read_line(reader: &mut impl BufRead, max: usize) -> io::Result<Line> {
    let mut line = Vec::new();
    let mut skipped = 0usize;
    let keep = HEAD_BYTES.min(max);
    loop {
        let available = match reader.fill_buf() {
            Ok(buf) => buf,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
            Err(e) => return Err(e),
        };
        if available.is_empty() {
            return Ok(if skipped > 0 {
                Line::TooLong {
                    len: skipped,
                    head: line,
                }
            } else if line.is_empty() {
                Line::Eof
            } else {
                Line::Data(line)
            });
        }
        let (chunk, done) = match memchr(available) {
            Some(i) => (&available[..i], Some(i + 1)),
            None => (available, None),
        };
        if skipped == 0 && line.len() + chunk.len() <= max {
            let needed = line.len() + chunk.len();
            if line.capacity() < needed {
                // Doubling, but never past the limit: no room is taken a line may not use.
                let room = (line.capacity() * 2).max(needed).min(max);
                line.reserve_exact(room - line.len());
            }
            line.extend_from_slice(chunk);
        } else {
            if skipped == 0 {
                // From here on only the head is kept.
                skipped = line.len();
                line.truncate(keep);
                line.shrink_to_fit();
            }
            let room = keep.saturating_sub(line.len());
            line.extend_from_slice(&chunk[..room.min(chunk.len())]);
            skipped += chunk.len();
        }
        let used = done.unwrap_or(available.len());
        reader.consume(used);
        if done.is_some() {
            return Ok(if skipped > 0 {
                Line::TooLong {
                    len: skipped,
                    head: line,
                }
            } else {
                Line::Data(line)
            });
        }
    }
}

/// The `id` and `method` of the JSON-RPC message whose first bytes are `head`, as far as
/// they can be read before the bytes run out (members after a cut-off value are unknown).
pub fn leading_id(head: &[u8]) -> (Option<Value>, Option<String>) {
    use serde::de::{Deserializer, IgnoredAny, MapAccess, Visitor};

    #[derive(Default)]
    struct Found {
        id: Option<Value>,
        method: Option<String>,
    }
    struct Members<'f>(&'f mut Found);
    impl<'de> Visitor<'de> for Members<'_> {
        type Value = ();
        fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
            f.write_str("a JSON-RPC message")
        }
        fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<(), A::Error> {
            while let Some(key) = map.next_key::<String>()? {
                match key.as_str() {
                    "id" => self.0.id = Some(map.next_value()?),
                    "method" => self.0.method = map.next_value()?,
                    _ => {
                        map.next_value::<IgnoredAny>()?;
                    }
                }
            }
            Ok(())
        }
    }
    let mut found = Found::default();
    // The head is cut off, so the parse ends in an error; what was read before it counts.
    let _ = serde_json::Deserializer::from_slice(head).deserialize_map(Members(&mut found));
    let id = found.id.filter(|id| id.is_string() || id.is_number());
    (id, found.method)
}

fn memchr(bytes: &[u8]) -> Option<usize> {
    bytes.iter().position(|&b| b == b'\n')
}

/// Whether a line holds nothing but whitespace (no message: skipped).
pub fn is_blank(line: &[u8]) -> bool {
    line.iter().all(u8::is_ascii_whitespace)
}

/// What a JSON-RPC message is (`J`: the JSON view the message is read with).
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Kind<'a, J = &'a Value> {
    /// A request: it has a method and an id, and wants a response.
    Request {
        /// The id.
        id: J,
        /// The method.
        method: &'a str,
    },
    /// A notification: a method without an id.
    Notification {
        /// The method.
        method: &'a str,
    },
    /// A response: an id with a result or an error.
    Response {
        /// The id of the request it answers.
        id: J,
    },
    /// Anything else (not a JSON-RPC message).
    Other,
}

/// Classifies a message.
pub fn kind<'a, J: Json<'a>>(message: J) -> Kind<'a, J> {
    let Some(map) = message.as_object() else {
        return Kind::Other;
    };
    let id = map.get("id").filter(|id| !id.is_null());
    match (map.get("method").and_then(Json::as_str), id) {
        (Some(method), Some(id)) => Kind::Request { id, method },
        (Some(method), None) => Kind::Notification { method },
        (None, Some(id)) if map.get("result").is_some() || map.get("error").is_some() => {
            Kind::Response { id }
        }
        _ => Kind::Other,
    }
}

/// The key of a request id: its JSON text, so that the number `1` and the string `"1"` are
/// two ids.
pub fn id_key<'a, J: Json<'a>>(id: J) -> String {
    match id_value(id) {
        Some(v) => v.to_string(),
        None => loopguard::canonical::json_text(id),
    }
}

/// A request id as a `Value` (raw ids are read again: they are small); `None` for an id
/// no `Value` holds (a number beyond the double range, a lone surrogate).
pub fn id_value<'a, J: Json<'a>>(id: J) -> Option<Value> {
    match id.kind() {
        JsonKind::Null => Some(Value::Null),
        JsonKind::Bool(b) => Some(Value::Bool(b)),
        JsonKind::String(s) => s.as_str().map(|s| Value::String(s.to_owned())),
        JsonKind::Number(Num::Value(n)) => Some(Value::Number(n.clone())),
        JsonKind::Number(Num::Text(t)) => serde_json::from_str(t).ok(),
        JsonKind::Array(_) | JsonKind::Object(_) => {
            serde_json::from_str(&loopguard::canonical::json_text(id)).ok()
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn lines(input: &[u8], max: usize) -> Vec<Line> {
        let mut r = io::BufReader::with_capacity(4, input);
        let mut out = Vec::new();
        loop {
            let l = read_line(&mut r, max).unwrap();
            let eof = l == Line::Eof;
            out.push(l);
            if eof {
                return out;
            }
        }
    }

    #[test]
    fn lines_are_split_and_capped() {
        assert_eq!(
            lines(b"ab\n\ncdefgh\nij", 5),
            vec![
                Line::Data(b"ab".to_vec()),
                Line::Data(vec![]),
                Line::TooLong {
                    len: 6,
                    head: b"cdefg".to_vec()
                },
                Line::Data(b"ij".to_vec()),
                Line::Eof
            ]
        );
        assert_eq!(lines(b"", 5), vec![Line::Eof]);
        assert_eq!(
            lines(b"toolongline", 3),
            vec![
                Line::TooLong {
                    len: 11,
                    head: b"too".to_vec()
                },
                Line::Eof
            ]
        );
        // A long line keeps only its head in memory.
        let mut long = br#"{"jsonrpc":"2.0","id":7,"method":"tools/call","params":{"x":""#.to_vec();
        long.extend(std::iter::repeat_n(b'a', 100_000));
        long.extend(b"\"}}\n");
        let read = lines(&long, 50_000);
        let Line::TooLong { len, head } = &read[0] else {
            panic!("{:?}", read[0]);
        };
        assert_eq!((*len, head.len()), (long.len() - 1, HEAD_BYTES));
        assert_eq!(
            leading_id(head),
            (Some(json!(7)), Some("tools/call".into()))
        );
        assert!(is_blank(b" \r\t"));
        assert!(!is_blank(b" x"));
    }

    #[test]
    fn ids_are_read_from_the_head_of_a_message() {
        for (head, id, method) in [
            (
                &br#"{"jsonrpc":"2.0","id":"a-1","method":"tools/call","params":{"argu"#[..],
                Some(json!("a-1")),
                Some("tools/call"),
            ),
            (br#"{"method":"ping","id":3"#, Some(json!(3)), Some("ping")),
            (
                br#"{"jsonrpc":"2.0","method":"tools/call","params":{"a":1,"b":"xx"#,
                None,
                Some("tools/call"),
            ),
            (
                br#"{"jsonrpc":"2.0","id":null,"method":"x""#,
                None,
                Some("x"),
            ),
            (br#"{"id":{"nested":1},"method":"x""#, None, Some("x")),
            (br#"[{"id":1,"method":"x"}"#, None, None),
            (b"garbage", None, None),
            (b"", None, None),
        ] {
            assert_eq!(
                leading_id(head),
                (id, method.map(str::to_owned)),
                "{}",
                String::from_utf8_lossy(head)
            );
        }
    }

    #[test]
    fn messages_are_classified() {
        let req = json!({"jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": {}});
        assert_eq!(
            kind(&req),
            Kind::Request {
                id: &json!(1),
                method: "tools/call"
            }
        );
        let note = json!({"jsonrpc": "2.0", "method": "notifications/progress"});
        assert_eq!(
            kind(&note),
            Kind::Notification {
                method: "notifications/progress"
            }
        );
        let resp = json!({"jsonrpc": "2.0", "id": "a", "result": {}});
        assert_eq!(kind(&resp), Kind::Response { id: &json!("a") });
        let err = json!({"jsonrpc": "2.0", "id": 2, "error": {"code": -1, "message": "x"}});
        assert_eq!(kind(&err), Kind::Response { id: &json!(2) });
        assert_eq!(kind(&json!({"id": 3})), Kind::Other);
        let mut tape = loopguard::json::Tape::new();
        let raw = tape
            .parse(r#"{"id":1.5,"method":"tools/call","params":{"n":1e999}}"#)
            .unwrap();
        let Kind::Request { id, method } = kind(raw) else {
            panic!("a request");
        };
        assert_eq!((id_key(id), method), ("1.5".to_owned(), "tools/call"));
        assert_eq!(kind(&json!([1])), Kind::Other);
        assert_eq!(id_key(&json!(1)), "1");
        assert_eq!(id_key(&json!("1")), "\"1\"");
    }
}
