//! What reading a file cost and what it could not use: every line is either used or
//! counted here with a reason, so no input is ever dropped silently.

use std::collections::BTreeMap;
use std::fmt;

use serde::Serialize;

/// Why a line (or a JSON element) was not used.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize)]
#[serde(rename_all = "snake_case")]
#[non_exhaustive]
pub enum SkipReason {
    /// Not JSON (a corrupt line).
    InvalidJson,
    /// The last line of the file is cut off: the transcript was being written.
    TruncatedLastLine,
    /// Longer than the reader's line limit; skipped without being buffered.
    LineTooLong,
    /// Parsing it could take more memory than the scan's live budget
    /// (`ScanOptions::live_memory`); skipped, its size and cost said.
    LineTooCostly,
    /// JSON, but not the object the format has on every line.
    NotAnObject,
    /// An entry type the reader does not know.
    UnknownEntryType,
    /// A known entry type without the fields it needs (a call without a tool name, …).
    MalformedEntry,
    /// OpenClaw: an entry that is not on the active branch (abandoned or rewritten history).
    OffBranch,
    /// OpenClaw's database: a compressed entry that does not decompress to the size stored
    /// with it.
    Undecodable,
}

impl SkipReason {
    /// The snake_case name used in reports.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::InvalidJson => "invalid_json",
            Self::TruncatedLastLine => "truncated_last_line",
            Self::LineTooLong => "line_too_long",
            Self::LineTooCostly => "line_too_costly",
            Self::NotAnObject => "not_an_object",
            Self::UnknownEntryType => "unknown_entry_type",
            Self::MalformedEntry => "malformed_entry",
            Self::OffBranch => "off_branch",
            Self::Undecodable => "undecodable",
        }
    }

    /// A short explanation for people.
    pub fn describe(self) -> &'static str {
        match self {
            Self::InvalidJson => "not valid JSON",
            Self::TruncatedLastLine => "last line cut off (file still being written?)",
            Self::LineTooLong => "line longer than the limit",
            Self::LineTooCostly => "line whose parsing could pass the live memory budget",
            Self::NotAnObject => "not a JSON object",
            Self::UnknownEntryType => "unknown entry type",
            Self::MalformedEntry => "entry without the fields it needs",
            Self::OffBranch => "not on the active branch",
            Self::Undecodable => "compressed entry that does not decompress",
        }
    }
}

impl fmt::Display for SkipReason {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// Lines skipped for one reason.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct Skip {
    /// Why.
    pub reason: SkipReason,
    /// How many lines (or elements).
    pub count: u64,
    /// The first one.
    pub first_line: u64,
    /// What the first one looked like (an error message or an entry type), shortened.
    pub example: Option<String>,
}

/// The account of reading one file.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize)]
pub struct ReadStats {
    /// Bytes read (the last pass, for readers that make two).
    pub bytes: u64,
    /// Physical lines read.
    pub lines: u64,
    /// Lines (or elements) not used, by reason, in the order reasons were first met.
    pub skipped: Vec<Skip>,
    /// Lines parsed only after repairing them: invalid UTF-8 bytes or escaped lone
    /// surrogates replaced by U+FFFD.
    pub repaired: u64,
    /// Tool results the transcript itself had shortened (OpenClaw's "middle content
    /// omitted" marker): their fingerprints may differ from the ones the runtime saw.
    pub truncated_results: u64,
    /// Records the reader recognised (an entry, a message, an event, a step), whether or
    /// not they held a call: a file with records and no calls is a transcript without tool
    /// calls, a file without any is one the reader could not read.
    pub records: u64,
    /// Tool results read as failed, by the signal that said so (the format's error flag,
    /// or the [`FailureRules`](crate::FailureRules) rule that matched).
    pub failures: BTreeMap<String, u64>,
}

/// Longest example kept in a [`Skip`].
const EXAMPLE_CHARS: usize = 120;

impl ReadStats {
    /// Counts a skipped line.
    pub fn skip(&mut self, reason: SkipReason, line: u64, example: impl FnOnce() -> String) {
        if let Some(s) = self.skipped.iter_mut().find(|s| s.reason == reason) {
            s.count += 1;
            return;
        }
        let mut text = example();
        if text.chars().count() > EXAMPLE_CHARS {
            text = text.chars().take(EXAMPLE_CHARS).collect::<String>() + "…";
        }
        self.skipped.push(Skip {
            reason,
            count: 1,
            first_line: line,
            example: (!text.is_empty()).then_some(text),
        });
    }

    /// Counts a recognised record.
    pub(crate) fn record(&mut self) {
        self.records += 1;
    }

    /// Counts a result read as failed because of `signal`.
    pub(crate) fn failure(&mut self, signal: &str) {
        match self.failures.get_mut(signal) {
            Some(n) => *n += 1,
            None => {
                self.failures.insert(signal.to_owned(), 1);
            }
        }
    }

    /// Results read as failed, all signals together.
    pub fn failed_results(&self) -> u64 {
        self.failures.values().sum()
    }

    /// Lines skipped, all reasons together.
    pub fn skipped_lines(&self) -> u64 {
        self.skipped.iter().map(|s| s.count).sum()
    }

    /// Adds the skips, records and failures of `other` (its line and byte counts are left
    /// out).
    pub(crate) fn absorb(&mut self, other: ReadStats) {
        for skip in other.skipped {
            match self.skipped.iter_mut().find(|s| s.reason == skip.reason) {
                Some(s) => {
                    s.count += skip.count;
                    if skip.first_line < s.first_line {
                        s.first_line = skip.first_line;
                        s.example = skip.example;
                    }
                }
                None => self.skipped.push(skip),
            }
        }
        self.repaired += other.repaired;
        self.truncated_results += other.truncated_results;
        self.records += other.records;
        for (signal, n) in other.failures {
            *self.failures.entry(signal).or_insert(0) += n;
        }
    }

    /// Lines skipped for `reason`.
    pub fn skipped_for(&self, reason: SkipReason) -> u64 {
        self.skipped
            .iter()
            .filter(|s| s.reason == reason)
            .map(|s| s.count)
            .sum()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn counts_by_reason_and_keeps_the_first_example() {
        let mut s = ReadStats::default();
        s.skip(SkipReason::InvalidJson, 3, || "first".into());
        s.skip(SkipReason::UnknownEntryType, 4, || "x".repeat(500));
        s.skip(SkipReason::InvalidJson, 9, || unreachable!());
        assert_eq!(s.skipped_lines(), 3);
        assert_eq!(s.skipped_for(SkipReason::InvalidJson), 2);
        assert_eq!(s.skipped[0].first_line, 3);
        assert_eq!(s.skipped[0].example.as_deref(), Some("first"));
        assert_eq!(s.skipped[1].example.as_ref().unwrap().chars().count(), 121);
    }
}
