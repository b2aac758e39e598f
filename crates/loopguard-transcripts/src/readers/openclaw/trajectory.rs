//! The OpenClaw trajectory sidecar (`<session>.trajectory.jsonl`): every runtime event
//! carries its `runId`, and `session.started` / `session.ended` bound each run in time.
//! A transcript scan uses those windows to put the real run id on the transcript's
//! entries (joined by timestamp, FORMATS §1.6).

use std::io::{self, BufRead, Seek};

use serde::Deserialize;

use crate::readers::lines::{self, Lines};
use crate::stats::ReadStats;

/// The time windows of the runs a sidecar describes.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct RunWindows {
    windows: Vec<Window>,
}

#[derive(Clone, Debug, PartialEq, Eq)]
struct Window {
    start_ms: i64,
    end_ms: i64,
    run_id: String,
}

#[derive(Deserialize)]
struct Event<'a> {
    #[serde(rename = "type", borrow)]
    kind: Option<std::borrow::Cow<'a, str>>,
    #[serde(borrow)]
    ts: Option<std::borrow::Cow<'a, str>>,
    #[serde(rename = "runId", borrow)]
    run_id: Option<std::borrow::Cow<'a, str>>,
}

impl RunWindows {
    /// Reads the run windows of a sidecar. Lines that are not run boundaries are skipped
    /// cheaply (most sidecar bytes are prompts and message snapshots).
    pub fn read(input: impl BufRead + Seek) -> io::Result<(Self, ReadStats)> {
        let mut stats = ReadStats::default();
        let mut lines = Lines::new(input, lines::DEFAULT_MAX_LINE)?;
        let mut windows: Vec<Window> = Vec::new();
        while let Some(line) = lines.next_line(&mut stats)? {
            let head = &line.bytes[..line.bytes.len().min(512)];
            let started = memchr::memmem::find(head, b"\"session.started\"").is_some();
            let ended = memchr::memmem::find(head, b"\"session.ended\"").is_some();
            if !started && !ended {
                continue;
            }
            let mut scratch = None;
            let Ok((event, _)) = lines::parse::<Event<'_>>(line.bytes, &mut scratch) else {
                continue;
            };
            let (Some(kind), Some(ts), Some(run)) = (event.kind, event.ts, event.run_id) else {
                continue;
            };
            let Some(ms) = parse_iso_ms(&ts) else {
                continue;
            };
            match kind.as_ref() {
                "session.started" => windows.push(Window {
                    start_ms: ms,
                    end_ms: i64::MAX,
                    run_id: run.into_owned(),
                }),
                "session.ended" => {
                    if let Some(w) = windows.iter_mut().rev().find(|w| w.run_id == run) {
                        w.end_ms = ms;
                    }
                }
                _ => {}
            }
        }
        windows.sort_by_key(|w| w.start_ms);
        Ok((Self { windows }, stats))
    }

    /// Whether there are no windows.
    pub fn is_empty(&self) -> bool {
        self.windows.is_empty()
    }

    /// How many runs.
    pub fn len(&self) -> usize {
        self.windows.len()
    }

    /// The run whose window holds the instant `ms` (the latest-starting one when windows
    /// overlap).
    pub fn run_at(&self, ms: i64) -> Option<&str> {
        let after = self.windows.partition_point(|w| w.start_ms <= ms);
        self.windows[..after]
            .iter()
            .rev()
            .find(|w| ms <= w.end_ms)
            .map(|w| w.run_id.as_str())
    }
}

/// Milliseconds since the Unix epoch of an ISO-8601 / RFC 3339 timestamp such as
/// `2026-04-02T05:01:37.365Z` or `2026-04-02T07:01:37+02:00`.
pub fn parse_iso_ms(s: &str) -> Option<i64> {
    let b = s.trim().as_bytes();
    let num = |range: std::ops::Range<usize>| -> Option<i64> {
        let digits = b.get(range)?;
        if !digits.iter().all(u8::is_ascii_digit) {
            return None;
        }
        std::str::from_utf8(digits).ok()?.parse().ok()
    };
    let (year, month, day) = (num(0..4)?, num(5..7)?, num(8..10)?);
    if b.get(4) != Some(&b'-')
        || b.get(7) != Some(&b'-')
        || !matches!(b.get(10), Some(b'T' | b't' | b' '))
    {
        return None;
    }
    let (hour, minute, second) = (num(11..13)?, num(14..16)?, num(17..19)?);
    if !(1..=12).contains(&month)
        || !(1..=31).contains(&day)
        || hour > 23
        || minute > 59
        || second > 60
    {
        return None;
    }
    let mut i = 19;
    let mut millis = 0i64;
    if b.get(i) == Some(&b'.') {
        i += 1;
        let start = i;
        while b.get(i).is_some_and(u8::is_ascii_digit) {
            i += 1;
        }
        let frac = &b[start..i];
        for (k, d) in frac.iter().take(3).enumerate() {
            millis += i64::from(d - b'0') * [100, 10, 1][k];
        }
    }
    let offset_min = match b.get(i) {
        None => 0,
        Some(b'Z' | b'z') => 0,
        Some(sign @ (b'+' | b'-')) => {
            let h = num(i + 1..i + 3)?;
            let m = if b.get(i + 3) == Some(&b':') {
                num(i + 4..i + 6)?
            } else {
                num(i + 3..i + 5)?
            };
            let total = h * 60 + m;
            if *sign == b'+' {
                total
            } else {
                -total
            }
        }
        Some(_) => return None,
    };
    let days = days_from_civil(year, month, day);
    Some(((days * 24 + hour) * 60 + minute - offset_min) * 60_000 + second * 1000 + millis)
}

/// Days since 1970-01-01 of a proleptic Gregorian date (H. Hinnant's algorithm).
fn days_from_civil(y: i64, m: i64, d: i64) -> i64 {
    let y = if m <= 2 { y - 1 } else { y };
    let era = y.div_euclid(400);
    let yoe = y - era * 400;
    let mp = (m + 9) % 12;
    let doy = (153 * mp + 2) / 5 + d - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    era * 146_097 + doe - 719_468
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn iso_timestamps() {
        assert_eq!(parse_iso_ms("1970-01-01T00:00:00Z"), Some(0));
        assert_eq!(parse_iso_ms("1970-01-01T00:00:01.5Z"), Some(1500));
        assert_eq!(
            parse_iso_ms("2026-04-02T05:01:37.365Z"),
            Some(1_775_106_097_365)
        );
        assert_eq!(
            parse_iso_ms("2026-04-02T07:01:37.365+02:00"),
            parse_iso_ms("2026-04-02T05:01:37.365Z")
        );
        assert_eq!(parse_iso_ms("2000-02-29T00:00:00"), Some(951_782_400_000));
        for bad in [
            "",
            "2026-13-01T00:00:00Z",
            "2026-04-02",
            "x026-04-02T05:01:37Z",
            "2026-04-02T05:01:37Q",
        ] {
            assert_eq!(parse_iso_ms(bad), None, "{bad}");
        }
    }

    #[test]
    fn windows_from_a_sidecar() {
        let sidecar = concat!(
            r#"{"traceSchema":"openclaw-trajectory","type":"session.started","ts":"2026-05-04T06:00:00.000Z","runId":"r1"}"#,
            "\n",
            r#"{"traceSchema":"openclaw-trajectory","type":"model.completed","ts":"2026-05-04T06:00:01.000Z","runId":"r1","data":{}}"#,
            "\n",
            r#"{"traceSchema":"openclaw-trajectory","type":"session.ended","ts":"2026-05-04T06:01:00.000Z","runId":"r1"}"#,
            "\n",
            "\n",
            r#"{"traceSchema":"openclaw-trajectory","type":"session.started","ts":"2026-05-04T07:00:00.000Z","runId":"r2"}"#,
            "\n",
            r#"{"type":"session.started","ts":"#,
            "\n",
        );
        let (w, stats) = RunWindows::read(std::io::Cursor::new(sidecar.as_bytes())).unwrap();
        assert_eq!(w.len(), 2);
        assert_eq!(stats.lines, 6);
        let at = |s: &str| w.run_at(parse_iso_ms(s).unwrap());
        assert_eq!(at("2026-05-04T06:00:30Z"), Some("r1"));
        assert_eq!(at("2026-05-04T06:30:00Z"), None);
        assert_eq!(at("2026-05-04T05:00:00Z"), None);
        assert_eq!(at("2026-05-04T09:00:00Z"), Some("r2"));
    }
}
