//! The MCP stdio transport's framing: JSON-RPC messages, one per line, UTF-8, no embedded
//! newlines; a line may also hold a batch (a JSON array of messages).

use std::io::{self, BufRead};

use serde_json::Value;

/// One read from a stream of lines.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Line {
    /// A line, without its `\n`.
    Data(Vec<u8>),
    /// A line longer than the limit: its bytes were skipped, not kept; this many of them.
    TooLong(usize),
    /// The stream ended.
    Eof,
}

/// Reads the next line of `reader`, keeping at most `max` bytes of it. A last line without
/// a final newline counts as a line.
pub fn read_line(reader: &mut impl BufRead, max: usize) -> io::Result<Line> {
    let mut line = Vec::new();
    let mut skipped = 0usize;
    loop {
        let available = match reader.fill_buf() {
            Ok(buf) => buf,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
            Err(e) => return Err(e),
        };
        if available.is_empty() {
            return Ok(if skipped > 0 {
                Line::TooLong(skipped)
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
            line.extend_from_slice(chunk);
        } else {
            skipped += line.len() + chunk.len();
            line = Vec::new();
        }
        let used = done.unwrap_or(available.len());
        reader.consume(used);
        if done.is_some() {
            return Ok(if skipped > 0 {
                Line::TooLong(skipped)
            } else {
                Line::Data(line)
            });
        }
    }
}

fn memchr(bytes: &[u8]) -> Option<usize> {
    bytes.iter().position(|&b| b == b'\n')
}

/// Whether a line holds nothing but whitespace (no message: skipped).
pub fn is_blank(line: &[u8]) -> bool {
    line.iter().all(u8::is_ascii_whitespace)
}

/// What a JSON-RPC message is.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Kind<'a> {
    /// A request: it has a method and an id, and wants a response.
    Request {
        /// The id.
        id: &'a Value,
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
        id: &'a Value,
    },
    /// Anything else (not a JSON-RPC message).
    Other,
}

/// Classifies a message.
pub fn kind(message: &Value) -> Kind<'_> {
    let Some(map) = message.as_object() else {
        return Kind::Other;
    };
    let id = map.get("id").filter(|id| !id.is_null());
    match (map.get("method").and_then(Value::as_str), id) {
        (Some(method), Some(id)) => Kind::Request { id, method },
        (Some(method), None) => Kind::Notification { method },
        (None, Some(id)) if map.contains_key("result") || map.contains_key("error") => {
            Kind::Response { id }
        }
        _ => Kind::Other,
    }
}

/// The key of a request id: its JSON text, so that the number `1` and the string `"1"` are
/// two ids.
pub fn id_key(id: &Value) -> String {
    id.to_string()
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
                Line::TooLong(6),
                Line::Data(b"ij".to_vec()),
                Line::Eof
            ]
        );
        assert_eq!(lines(b"", 5), vec![Line::Eof]);
        assert_eq!(lines(b"toolongline", 3), vec![Line::TooLong(11), Line::Eof]);
        assert!(is_blank(b" \r\t"));
        assert!(!is_blank(b" x"));
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
        assert_eq!(kind(&json!([1])), Kind::Other);
        assert_eq!(id_key(&json!(1)), "1");
        assert_eq!(id_key(&json!("1")), "\"1\"");
    }
}
