//! Whitespace as the SPEC means it.
//!
//! The reference behaviour comes from a JavaScript runtime, so "trimmed" and "blank" follow
//! ECMAScript's `String.prototype.trim`: its WhiteSpace and LineTerminator characters. That
//! set differs from Rust's `char::is_whitespace` in two places: it includes U+FEFF (byte
//! order mark) and excludes U+0085 (next line).

/// Whether `c` is ECMAScript whitespace or a line terminator.
pub fn is_js_space(c: char) -> bool {
    matches!(
        c,
        '\u{09}'
            | '\u{0A}'
            | '\u{0B}'
            | '\u{0C}'
            | '\u{0D}'
            | '\u{20}'
            | '\u{A0}'
            | '\u{1680}'
            | '\u{2000}'
            ..='\u{200A}'
                | '\u{2028}'
                | '\u{2029}'
                | '\u{202F}'
                | '\u{205F}'
                | '\u{3000}'
                | '\u{FEFF}'
    )
}

/// `s` without leading and trailing whitespace.
pub fn trim(s: &str) -> &str {
    // Fast path: a visible ASCII character at both ends, the usual case for ids and text.
    match (s.as_bytes().first(), s.as_bytes().last()) {
        (Some(first), Some(last)) if first.is_ascii_graphic() && last.is_ascii_graphic() => s,
        (None, _) => s,
        _ => s.trim_matches(is_js_space),
    }
}

/// Whether `s` is empty or only whitespace.
pub fn is_blank(s: &str) -> bool {
    match s.as_bytes().first() {
        Some(first) if first.is_ascii_graphic() => false,
        _ => s.chars().all(is_js_space),
    }
}

/// `s` trimmed, or `None` when it is blank: how the SPEC reads optional string fields.
pub fn non_blank(s: &str) -> Option<&str> {
    let t = trim(s);
    (!t.is_empty()).then_some(t)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn follows_ecmascript() {
        assert_eq!(trim("\u{FEFF} a b\u{3000}\n"), "a b");
        assert_eq!(trim("\u{85}a"), "\u{85}a");
        assert!(is_blank(" \t\r\n\u{A0}"));
        assert!(is_blank(""));
        assert!(!is_blank(" x "));
        assert_eq!(non_blank("  "), None);
        assert_eq!(non_blank(" r1 "), Some("r1"));
        assert_eq!(trim("a b"), "a b");
        assert_eq!(trim("a\u{3000}"), "a");
        assert_eq!(trim("\u{FEFF}a"), "a");
        assert!(!is_blank("x "));
    }
}
