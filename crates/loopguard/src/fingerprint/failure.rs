//! Failures: whether an outcome failed (an error, or a result the policy's failure table
//! says failed), whether a retry may help, and its signature: the error line that says
//! what went wrong, normalised and hashed, so that the same failure met by different calls
//! is recognised (`docs/extensions.md`, "Failures").

use std::sync::LazyLock;

use regex::Regex;

use super::error_text::error_text;
use super::OutcomeOf;
use crate::json::{Json, Object, Str};
use crate::masking::{mask, MaskSet};
use crate::policy::{FailureClass, BUILTIN};

/// Bytes of a failure's text searched for its error line: the end (where tracebacks and
/// build logs say what failed), else the beginning.
const WINDOW: usize = 2048;

/// Longest normalised error line kept; longer lines are cut (the start says what failed).
const MAX_LINE: usize = 200;

/// Shortest normalised error line that makes a signature: shorter texts (`1`, `boom`, an
/// empty output) say too little to tell two failures apart.
pub const MIN_SIGNATURE_BYTES: usize = 5;

/// Words that mark the line of a text that says what failed (matched ignoring case).
const ERROR_WORDS: &[&str] = &[
    "error",
    "exception",
    "denied",
    "not found",
    "no such",
    "cannot",
    "can't",
    "could not",
    "couldn't",
    "failed",
    "failure",
    "fatal",
    "invalid",
    "refused",
    "timed out",
    "timeout",
    "unknown",
    "missing",
    "required",
    "forbidden",
    "unable",
    "not allowed",
    "not permitted",
    "does not exist",
    "doesn't exist",
    "no module",
    "abort",
    "enoent",
    "eacces",
    "usage:",
];

static ERROR_LINE: LazyLock<Regex> = LazyLock::new(|| {
    let words: Vec<String> = ERROR_WORDS.iter().map(|w| regex::escape(w)).collect();
    Regex::new(&format!("(?i){}", words.join("|"))).expect("valid pattern")
});

/// A failed outcome, as the failure detectors see it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Failure {
    /// Whether a retry may help.
    pub class: FailureClass,
    /// Hash of the normalised error line; 0 when the failure says too little to have one.
    pub signature: u64,
}

/// Whether an outcome of a `tool` call is a failure: an error, or a result for which a rule
/// of the built-in failure table holds ([`crate::policy::Policy::failures`]).
pub fn is_failure<'a, J: Json<'a>>(tool: &str, outcome: OutcomeOf<J>) -> bool {
    match outcome {
        OutcomeOf::Error(_) => true,
        OutcomeOf::Nothing => false,
        OutcomeOf::Result(result) => BUILTIN.failed_result(tool, result).is_some(),
    }
}

/// The failure an outcome of a `tool` call is, if it is one: its class and signature.
pub fn failure_of<'a, J: Json<'a>>(tool: &str, outcome: OutcomeOf<J>) -> Option<Failure> {
    let (structured_retry, line) = match outcome {
        OutcomeOf::Nothing => return None,
        OutcomeOf::Error(error) => {
            let text = error_text(error);
            (false, error_line_of(text.as_string()))
        }
        OutcomeOf::Result(result) => {
            let rule = BUILTIN.failed_result(tool, result)?;
            (rule.retryable, result_error_line(result))
        }
    };
    let normalised = line.as_deref().map(normalise).unwrap_or_default();
    // Read on the line as written: normalising masks the status codes (`503`).
    let retryable = structured_retry || line.as_deref().is_some_and(|l| BUILTIN.retryable_line(l));
    let signature = if normalised.len() >= MIN_SIGNATURE_BYTES {
        xxhash_rust::xxh3::xxh3_64(normalised.as_bytes()).max(1)
    } else {
        0
    };
    Some(Failure {
        class: if retryable {
            FailureClass::Retryable
        } else {
            FailureClass::Permanent
        },
        signature,
    })
}

/// The error line of a failed result: its `error` (in `details` or at the top) when it is
/// a string, else the line of its text that says what failed.
fn result_error_line<'a, J: Json<'a>>(result: J) -> Option<String> {
    let Some(object) = result.as_object() else {
        return result.as_string().and_then(error_line_of);
    };
    let details = object.get("details").and_then(Json::as_object);
    let error = details
        .and_then(|d| d.get("error"))
        .or_else(|| object.get("error"))
        .and_then(Json::as_string)
        .and_then(Str::non_blank);
    if let Some(error) = error {
        return error_line_of(error);
    }
    // The text blocks: the last marked line of any block, else the first line.
    let mut marked = None;
    let mut first = None;
    for item in object
        .get("content")
        .and_then(Json::as_array)
        .into_iter()
        .flatten()
    {
        let Some(text) = item.get("text").and_then(Json::as_string) else {
            continue;
        };
        let text = lossy(text);
        if let Some(line) = marked_line(&text) {
            marked = Some(line.to_owned());
        } else if first.is_none() {
            first = first_line(&text).map(str::to_owned);
        }
    }
    marked.or(first)
}

/// The line of `text` that says what failed.
fn error_line_of(text: Str<'_>) -> Option<String> {
    let text = lossy(text);
    marked_line(&text)
        .or_else(|| first_line(&text))
        .map(str::to_owned)
}

fn lossy(text: Str<'_>) -> std::borrow::Cow<'_, str> {
    match text {
        Str::Text(t) => std::borrow::Cow::Borrowed(t),
        Str::Wtf8(b) => String::from_utf8_lossy(b),
    }
}

/// The last line of the end of `text` with an error word, traceback frames skipped.
fn marked_line(text: &str) -> Option<&str> {
    tail(text, WINDOW)
        .lines()
        .rev()
        .map(str::trim)
        .find(|line| {
            !line.starts_with("File \"") && !line.starts_with("at ") && ERROR_LINE.is_match(line)
        })
}

/// The first non-blank line of the beginning of `text`.
fn first_line(text: &str) -> Option<&str> {
    head(text, WINDOW)
        .lines()
        .map(str::trim)
        .find(|line| !line.is_empty())
}

fn head(text: &str, max: usize) -> &str {
    if text.len() <= max {
        return text;
    }
    let mut end = max;
    while !text.is_char_boundary(end) {
        end -= 1;
    }
    &text[..end]
}

fn tail(text: &str, max: usize) -> &str {
    if text.len() <= max {
        return text;
    }
    let mut start = text.len() - max;
    while !text.is_char_boundary(start) {
        start += 1;
    }
    &text[start..]
}

/// Every run of digits and every volatile token masked (`docs/extensions.md`), white space
/// collapsed, cut to [`MAX_LINE`] bytes.
fn normalise(line: &str) -> String {
    static EVERY_RULE: LazyLock<MaskSet> = LazyLock::new(|| {
        MaskSet::ALL.union(MaskSet::from_names(["digits"]).unwrap_or(MaskSet::NONE))
    });
    let masked = mask(line, *EVERY_RULE);
    let mut out = String::with_capacity(masked.len().min(MAX_LINE));
    for word in masked.split_whitespace() {
        if !out.is_empty() {
            out.push(' ');
        }
        out.push_str(word);
        if out.len() >= MAX_LINE {
            break;
        }
    }
    head(&out, MAX_LINE).to_owned()
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn failure(tool: &str, outcome: OutcomeOf<&serde_json::Value>) -> Option<Failure> {
        failure_of(tool, outcome)
    }

    #[test]
    fn the_error_line_is_the_last_marked_line_of_the_end() {
        let traceback = "Traceback (most recent call last):\n  File \"<string>\", line 1, in <module>\n  File \"/testbed/astropy/__init__.py\", line 41\nModuleNotFoundError: No module named 'erfa'\n";
        assert_eq!(
            error_line_of(Str::Text(traceback)).as_deref(),
            Some("ModuleNotFoundError: No module named 'erfa'")
        );
        // No error word: the first line.
        assert_eq!(
            error_line_of(Str::Text("\n  Exit code 3\nwhich: no teams in (/usr/bin)")).as_deref(),
            Some("Exit code 3")
        );
        assert_eq!(error_line_of(Str::Text("  \n ")), None);
    }

    #[test]
    fn signatures_ignore_numbers_and_volatile_tokens_and_keep_names() {
        let sig = |text: &str| {
            let v = json!(text);
            failure("exec", OutcomeOf::Error(&v)).unwrap().signature
        };
        assert_eq!(
            sig("File \"a.py\", line 3\nSyntaxError: invalid syntax (line 12)"),
            sig("File \"b.py\", line 9\nSyntaxError: invalid syntax (line 40)")
        );
        assert_eq!(
            sig("request 1f0e7a52-1c1d-4a4e-9c2b-0d1e2f3a4b5c failed at 2026-03-01T10:00:00Z"),
            sig("request 6b7c8d9e-0f1a-4b2c-8d3e-4f5a6b7c8d9e failed at 2026-03-02T11:30:00Z")
        );
        // Different missing modules are different failures: an agent installing one
        // missing module after another is making progress.
        assert_ne!(
            sig("ModuleNotFoundError: No module named 'erfa'"),
            sig("ModuleNotFoundError: No module named 'numpy'")
        );
        // Too short to tell failures apart.
        assert_eq!(sig("boom"), 0);
        assert_eq!(sig("42"), 0);
        assert_ne!(sig("ENOENT"), 0);
    }

    #[test]
    fn openclaw_results_that_failed() {
        let cases = [
            // pi-tool-definition-adapter.ts: a thrown error.
            (
                "edit",
                json!({"content": [{"type": "text", "text": "{}"}], "details": {"status": "error", "tool": "edit", "error": "Missing required parameter: newText"}}),
                true,
            ),
            // bash-tools.process.ts failText.
            (
                "process",
                json!({"content": [{"type": "text", "text": "No session found for mild-river"}], "details": {"status": "failed"}}),
                true,
            ),
            // A kill that worked, labelled failed by older builds.
            (
                "process",
                json!({"content": [{"type": "text", "text": "Killed session mild-river."}], "details": {"status": "failed", "name": "x"}}),
                false,
            ),
            (
                "process",
                json!({"content": [{"type": "text", "text": "(no new output)\n\nProcess still running."}], "details": {"status": "running"}}),
                false,
            ),
            (
                "exec",
                json!({"content": [{"type": "text", "text": "boom"}], "details": {"status": "completed", "exitCode": 2}}),
                true,
            ),
            (
                "exec",
                json!({"content": [{"type": "text", "text": "ok"}], "details": {"status": "completed", "exitCode": 0}}),
                false,
            ),
            (
                "web_fetch",
                json!({"content": [{"type": "text", "text": "{}"}], "details": {"status": 404, "url": "u"}}),
                true,
            ),
            (
                "web_fetch",
                json!({"content": [{"type": "text", "text": "{}"}], "details": {"status": 200, "url": "u"}}),
                false,
            ),
            (
                "web_search",
                json!({"content": [{"type": "text", "text": "{}"}], "details": {"error": "missing_brave_api_key", "message": "needs a key"}}),
                true,
            ),
            (
                "browser",
                json!({"content": [{"type": "text", "text": "{}"}], "details": {"ok": false, "error": "tab not found"}}),
                true,
            ),
            (
                "session_status",
                json!({"content": [{"type": "text", "text": "ok"}], "details": {"ok": true}}),
                false,
            ),
            (
                "sessions_send",
                json!({"content": [{"type": "text", "text": "{}"}], "details": {"status": "forbidden", "error": "denied"}}),
                true,
            ),
            (
                "sessions_send",
                json!({"content": [{"type": "text", "text": "{}"}], "details": {"status": "ok", "reply": "hi"}}),
                false,
            ),
            (
                "read",
                json!({"content": [{"type": "text", "text": "x"}], "isError": true}),
                true,
            ),
            (
                "read",
                json!({"content": [{"type": "text", "text": "x"}], "details": {"error": ""}}),
                false,
            ),
        ];
        for (tool, result, failed) in cases {
            assert_eq!(
                is_failure(tool, OutcomeOf::Result(&result)),
                failed,
                "{tool} {result}"
            );
            assert_eq!(failure(tool, OutcomeOf::Result(&result)).is_some(), failed);
        }
    }

    #[test]
    fn retryable_failures() {
        let class =
            |tool: &str, v: serde_json::Value| failure(tool, OutcomeOf::Result(&v)).unwrap().class;
        assert_eq!(
            class(
                "sessions_send",
                json!({"details": {"status": "timeout", "error": "no reply in 30s"}})
            ),
            FailureClass::Retryable
        );
        assert_eq!(
            class(
                "exec",
                json!({"details": {"status": "failed", "timedOut": true, "exitCode": null}})
            ),
            FailureClass::Retryable
        );
        assert_eq!(
            class(
                "web_fetch",
                json!({"details": {"status": "error", "error": "Web fetch failed (503): Service Unavailable"}})
            ),
            FailureClass::Retryable
        );
        assert_eq!(
            class(
                "web_fetch",
                json!({"details": {"status": "error", "error": "Web fetch failed (404): Not Found"}})
            ),
            FailureClass::Permanent
        );
        // Status codes count as whole numbers only.
        let bare = json!("HTTP 429 from upstream");
        assert_eq!(
            failure("fetch", OutcomeOf::Error(&bare)).unwrap().class,
            FailureClass::Retryable
        );
        let line = json!("error at line 4290: unexpected token");
        assert_eq!(
            failure("fetch", OutcomeOf::Error(&line)).unwrap().class,
            FailureClass::Permanent
        );
        let cancelled = json!(
            "<tool_use_error>Cancelled: parallel tool call Bash(ls) errored</tool_use_error>"
        );
        assert_eq!(
            failure("Bash", OutcomeOf::Error(&cancelled)).unwrap().class,
            FailureClass::Retryable
        );
    }
}
