//! Positions inside a JSON5 document.
//!
//! `json5` reports where a syntax error is, but not where a well-formed key sits, and
//! config errors ("unknown key `repeatThreshold`") must say both. This scanner walks the
//! text once, iteratively, tracking the path of the token it is on. It is lenient (it never
//! fails, whatever the input) because it also runs before parsing, to refuse documents
//! nested deeper than the parser's recursion can safely go.

use std::iter::Peekable;
use std::str::CharIndices;

use crate::text::is_js_space;

/// A 1-based line and column (columns count characters).
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize)]
pub struct Position {
    /// Line, from 1.
    pub line: usize,
    /// Column, from 1.
    pub column: usize,
}

/// One step of a path into a document.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Segment {
    /// An object member.
    Key(String),
    /// An array element.
    Index(usize),
}

#[derive(Debug, PartialEq)]
enum Token {
    /// `{` (true) or `[` (false).
    Open(bool),
    Close,
    Colon,
    Comma,
    /// A string or a bare word (identifier, number, literal), with its decoded text.
    Atom(String),
}

struct Scanner<'a> {
    chars: Peekable<CharIndices<'a>>,
    line: usize,
    column: usize,
}

fn is_line_end(c: char) -> bool {
    matches!(c, '\n' | '\r' | '\u{2028}' | '\u{2029}')
}

impl<'a> Scanner<'a> {
    fn new(text: &'a str) -> Self {
        Self {
            chars: text.char_indices().peekable(),
            line: 1,
            column: 1,
        }
    }

    fn peek(&mut self) -> Option<char> {
        self.chars.peek().map(|&(_, c)| c)
    }

    fn bump(&mut self) -> Option<char> {
        let (_, c) = self.chars.next()?;
        if is_line_end(c) {
            // CR LF is one line end.
            if c == '\r' && self.peek() == Some('\n') {
                self.chars.next();
            }
            self.line += 1;
            self.column = 1;
        } else {
            self.column += 1;
        }
        Some(c)
    }

    fn position(&self) -> Position {
        Position {
            line: self.line,
            column: self.column,
        }
    }

    fn next_token(&mut self) -> Option<(Position, Token)> {
        loop {
            let c = self.peek()?;
            if is_js_space(c) {
                self.bump();
                continue;
            }
            if c == '/' {
                let pos = self.position();
                self.bump();
                match self.peek() {
                    Some('/') => {
                        while let Some(c) = self.peek() {
                            if is_line_end(c) {
                                break;
                            }
                            self.bump();
                        }
                    }
                    Some('*') => {
                        self.bump();
                        let mut star = false;
                        while let Some(c) = self.bump() {
                            if star && c == '/' {
                                break;
                            }
                            star = c == '*';
                        }
                    }
                    _ => return Some((pos, Token::Atom("/".into()))),
                }
                continue;
            }
            let pos = self.position();
            let token = match c {
                '{' | '[' => {
                    self.bump();
                    Token::Open(c == '{')
                }
                '}' | ']' => {
                    self.bump();
                    Token::Close
                }
                ':' => {
                    self.bump();
                    Token::Colon
                }
                ',' => {
                    self.bump();
                    Token::Comma
                }
                '"' | '\'' => {
                    self.bump();
                    Token::Atom(self.string(c))
                }
                _ => {
                    let mut word = String::new();
                    while let Some(c) = self.peek() {
                        if is_js_space(c) || "{}[]:,\"'/".contains(c) {
                            break;
                        }
                        word.push(c);
                        self.bump();
                    }
                    Token::Atom(word)
                }
            };
            return Some((pos, token));
        }
    }

    /// The rest of a string opened by `quote`, decoded.
    fn string(&mut self, quote: char) -> String {
        let mut out = String::new();
        while let Some(c) = self.bump() {
            if c == quote {
                break;
            }
            if c != '\\' {
                out.push(c);
                continue;
            }
            let Some(e) = self.bump() else { break };
            match e {
                'n' => out.push('\n'),
                't' => out.push('\t'),
                'r' => out.push('\r'),
                'b' => out.push('\u{08}'),
                'f' => out.push('\u{0C}'),
                'v' => out.push('\u{0B}'),
                '0' => out.push('\0'),
                'x' | 'u' => {
                    let digits = if e == 'x' { 2 } else { 4 };
                    let mut code = 0u32;
                    for _ in 0..digits {
                        match self.peek().and_then(|c| c.to_digit(16)) {
                            Some(d) => {
                                code = code * 16 + d;
                                self.bump();
                            }
                            None => break,
                        }
                    }
                    out.push(char::from_u32(code).unwrap_or('\u{FFFD}'));
                }
                c if is_line_end(c) => {}
                other => out.push(other),
            }
        }
        out
    }
}

enum Frame {
    Object {
        key: Option<String>,
        expect_key: bool,
    },
    Array {
        index: usize,
    },
}

/// What the walk is looking at.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Visit {
    Key,
    Scalar,
    Container,
}

/// Walks the document; `visit` sees the path of every key and every value start (the
/// frames around it) and stops the walk by returning `true`. Returns where it stopped.
fn walk(text: &str, mut visit: impl FnMut(&[Frame], Visit) -> bool) -> Option<Position> {
    let mut scanner = Scanner::new(text);
    let mut frames: Vec<Frame> = Vec::new();
    while let Some((pos, token)) = scanner.next_token() {
        match token {
            Token::Colon => {}
            Token::Comma => match frames.last_mut() {
                Some(Frame::Object { key, expect_key }) => {
                    *key = None;
                    *expect_key = true;
                }
                Some(Frame::Array { index }) => *index += 1,
                None => {}
            },
            Token::Close => {
                frames.pop();
            }
            Token::Atom(atom) => {
                if let Some(Frame::Object {
                    key,
                    expect_key: expect @ true,
                }) = frames.last_mut()
                {
                    *key = Some(atom);
                    *expect = false;
                    if visit(&frames, Visit::Key) {
                        return Some(pos);
                    }
                } else if visit(&frames, Visit::Scalar) {
                    return Some(pos);
                }
            }
            Token::Open(is_object) => {
                if visit(&frames, Visit::Container) {
                    return Some(pos);
                }
                frames.push(if is_object {
                    Frame::Object {
                        key: None,
                        expect_key: true,
                    }
                } else {
                    Frame::Array { index: 0 }
                });
            }
        }
    }
    None
}

fn path_matches(frames: &[Frame], target: &[Segment]) -> bool {
    frames.len() == target.len()
        && frames
            .iter()
            .zip(target)
            .all(|(frame, seg)| match (frame, seg) {
                (Frame::Object { key: Some(k), .. }, Segment::Key(t)) => k == t,
                (Frame::Array { index }, Segment::Index(t)) => index == t,
                _ => false,
            })
}

/// Where the key (or array element) at `path` starts, if the document has it.
pub fn locate(text: &str, path: &[Segment]) -> Option<Position> {
    walk(text, |frames, visit| {
        let element = matches!(frames.last(), Some(Frame::Array { .. }));
        (visit == Visit::Key || element) && path_matches(frames, path)
    })
}

/// The position of the first container that opens deeper than `limit` levels, if any.
pub fn too_deep(text: &str, limit: usize) -> Option<Position> {
    walk(text, |frames, visit| {
        visit == Visit::Container && frames.len() >= limit
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn key(k: &str) -> Segment {
        Segment::Key(k.into())
    }

    const DOC: &str = "// comment\n{\n  tools: {\n    loopDetection: {\"enabled\": true, 'repeatThreshold': 5},\n  },\n  /* x: { */ agents: { list: [ {id: 'a'}, { id: \"b\", tools: {} } ] },\r\n  s: \"a\\\"b\",\n}";

    #[test]
    fn finds_keys_and_elements() {
        let p = |path: &[Segment]| locate(DOC, path).map(|p| (p.line, p.column));
        assert_eq!(p(&[key("tools")]), Some((3, 3)));
        assert_eq!(p(&[key("tools"), key("loopDetection")]), Some((4, 5)));
        assert_eq!(
            p(&[key("tools"), key("loopDetection"), key("repeatThreshold")]),
            Some((4, 38))
        );
        assert_eq!(
            p(&[key("agents"), key("list"), Segment::Index(1)]),
            Some((6, 43))
        );
        assert_eq!(
            p(&[key("agents"), key("list"), Segment::Index(1), key("tools")]),
            Some((6, 54))
        );
        assert_eq!(p(&[key("s")]), Some((7, 3)));
        assert_eq!(p(&[key("x")]), None);
        assert_eq!(p(&[key("tools"), key("nothing")]), None);
    }

    #[test]
    fn depth_limit() {
        let deep = "[".repeat(10) + &"]".repeat(10);
        assert_eq!(too_deep(&deep, 10), None);
        assert_eq!(too_deep(&deep, 9).map(|p| p.column), Some(10));
        let huge = "[".repeat(1_000_000);
        assert!(too_deep(&huge, 128).is_some());
    }

    #[test]
    fn never_fails_on_garbage() {
        for text in [
            "",
            "}",
            "]]]",
            "{'unterminated",
            "/",
            "/*",
            "{a:\"\\",
            "\u{2028}{\r",
        ] {
            let _ = locate(text, &[key("a")]);
            let _ = too_deep(text, 1);
        }
    }
}
