//! A JSON number's value, as the `lg1` encoding sees it, from a parsed `serde_json::Number`
//! or from the number's text.
//!
//! The two must agree for every number `serde_json` parses (with `float_roundtrip`):
//! an integer literal in [-2^63, 2^64) is that integer; any other number is the double
//! nearest to it (both `serde_json` and `str::parse::<f64>` round correctly), kept as an
//! integer when it is integral and inside that range. A number whose nearest double is
//! infinite (`1e999`) is one `serde_json` refuses; it stays [`Canonical::Big`], known by
//! its text.

use serde_json::Number;

/// A number's value.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Canonical<'a> {
    /// An integral value in [-2^63, 2^64).
    Int(i128),
    /// Any other value inside the double range.
    Double(f64),
    /// Beyond the double range: the number's text.
    Big(&'a str),
}

impl<'a> Canonical<'a> {
    /// The value of a parsed number.
    pub fn of_number(n: &Number) -> Self {
        if let Some(u) = n.as_u64() {
            Self::Int(i128::from(u))
        } else if let Some(i) = n.as_i64() {
            Self::Int(i128::from(i))
        } else {
            Self::of_f64(n.as_f64().unwrap_or(f64::NAN))
        }
    }

    /// The value of a double: an integer when it is integral and in range.
    pub fn of_f64(f: f64) -> Self {
        const MIN: f64 = -9_223_372_036_854_775_808.0; // -2^63
        const MAX: f64 = 18_446_744_073_709_551_616.0; // 2^64
        if f.is_finite() && f.fract() == 0.0 && (MIN..MAX).contains(&f) {
            Self::Int(f as i128)
        } else {
            Self::Double(f)
        }
    }

    /// The value of a number written as JSON text (`text` must be a valid JSON number, or
    /// a non-finite literal the tape reads: `NaN`, `Infinity`, signed or not, which is
    /// [`Canonical::Big`] under its one spelling `NaN`, `Infinity` or `-Infinity`).
    pub fn of_text(text: &'a str) -> Self {
        if let Some(spelling) = non_finite(text) {
            return Self::Big(spelling);
        }
        let bytes = text.as_bytes();
        let (negative, digits) = match bytes.split_first() {
            Some((b'-', rest)) => (true, rest),
            _ => (false, bytes),
        };
        // Integer literals inside [-2^63, 2^64) are exact; up to 19 digits fit a u64
        // without a parse.
        let all_digits = digits.iter().all(u8::is_ascii_digit);
        let magnitude = match digits.len() {
            0..=19 if all_digits => Some(
                digits
                    .iter()
                    .fold(0u64, |acc, &d| acc * 10 + u64::from(d - b'0')),
            ),
            20 if all_digits => digits_str(digits).parse::<u64>().ok(),
            _ => None,
        };
        match magnitude {
            Some(m) if !negative => return Self::Int(i128::from(m)),
            Some(m) if m <= 1 << 63 => return Self::Int(-i128::from(m)),
            _ => {}
        }
        match text.parse::<f64>() {
            Ok(f) if f.is_finite() => Self::of_f64(f),
            _ => Self::Big(text),
        }
    }
}

/// The one spelling of a non-finite literal: `NaN` (however signed), `Infinity` (or
/// `+Infinity`), `-Infinity`.
fn non_finite(text: &str) -> Option<&'static str> {
    match text {
        "NaN" | "+NaN" | "-NaN" => Some("NaN"),
        "Infinity" | "+Infinity" => Some("Infinity"),
        "-Infinity" => Some("-Infinity"),
        _ => None,
    }
}

fn digits_str(digits: &[u8]) -> &str {
    std::str::from_utf8(digits).unwrap_or("")
}

#[cfg(test)]
mod tests {
    use super::*;

    fn same(text: &str) {
        let n: Number = serde_json::from_str(text).unwrap();
        assert_eq!(Canonical::of_text(text), Canonical::of_number(&n), "{text}");
    }

    #[test]
    fn text_agrees_with_serde_json() {
        for text in [
            "0",
            "-0",
            "1",
            "-1",
            "1.0",
            "1e0",
            "-0.0",
            "1.5",
            "18446744073709551615",
            "18446744073709551616",
            "-9223372036854775808",
            "-9223372036854775809",
            "-9999999999999999999",
            "-18446744073709551615",
            "-18446744073709551616",
            "9999999999999999999",
            "99999999999999999999",
            "123456789012345678901234567890",
            "-123456789012345678901234567890",
            "1e300",
            "1e-300",
            "1e-400",
            "5e-324",
            "2.2250738585072011e-308",
            "1.7976931348623157e308",
            "0.30000000000000004",
            "9007199254740993",
            "9007199254740993.0",
            "1.00000000000000011102230246251565404236316680908203125",
            "0e99999999999999999999",
            "1e-99999999999999999999",
        ] {
            same(text);
        }
    }

    #[test]
    fn non_finite_literals_have_one_spelling() {
        for (text, spelling) in [
            ("NaN", "NaN"),
            ("+NaN", "NaN"),
            ("-NaN", "NaN"),
            ("Infinity", "Infinity"),
            ("+Infinity", "Infinity"),
            ("-Infinity", "-Infinity"),
        ] {
            assert_eq!(Canonical::of_text(text), Canonical::Big(spelling));
        }
    }

    #[test]
    fn beyond_the_double_range_is_big() {
        for text in [
            "1e999",
            "-1e400",
            "1.7976931348623159e308",
            "1e99999999999999999999",
        ] {
            assert!(serde_json::from_str::<Number>(text).is_err(), "{text}");
            assert_eq!(Canonical::of_text(text), Canonical::Big(text));
        }
    }
}
