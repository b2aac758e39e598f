//! Failure rules: how each format says that a tool call failed, as data.
//!
//! The engine reads a failure from the result shape SPEC §2 knows: an error, a result with
//! `isError: true`, `status: "error"` at the top or in `details`, an `exec` with a non-zero
//! `exitCode`. Most agents record failures their own way: SWE-agent only in the observation
//! text ("No such file or directory", a usage line, a traceback), OpenHands in
//! `metadata.exit_code`, mini-swe-agent in `returncode`, Gemini CLI in `status`. A reader
//! hands each result to the [`FailureRules`] of its format together with the record the
//! result came from (see [`FailureRules::BUILTIN`] for what "the record" is per format)
//! and its text; when a rule matches, the result is marked `isError: true`, which leaves
//! its fingerprint unchanged (SPEC's result hash reads only `content` and `details`) and
//! makes `error_cascade` and the other failure detectors see it.
//!
//! Rules are of two kinds:
//!
//! - a **field** rule: a JSON pointer into the record and a test (`true`, `nonzero`,
//!   `present`, or `equals` a string);
//! - a **text** rule: a regular expression searched in the first
//!   [`TEXT_WINDOW`] bytes of the result text (all text rules of a format run as one
//!   [`RegexSet`], one pass).
//!
//! The built-in table is [`FailureRules::BUILTIN`]; users add rules per format (or for
//! every format, `*`) with `loopguard scan --failure-rules FILE` or `--failure-text
//! FORMAT=REGEX` (`docs/scan.md`).

use std::borrow::Cow;
use std::collections::BTreeMap;
use std::sync::LazyLock;

use loopguard_events::OwnedOutcome;
use regex::{Regex, RegexSet};
use serde_json::Value;

use crate::detect::Format;
use crate::error::Error;
use crate::stats::ReadStats;

/// Bytes of a result's text that text rules look at: error messages come first, and a
/// bound keeps a 50 MB tool output from costing more than its first page.
pub const TEXT_WINDOW: usize = 64 << 10;

/// The test of a field rule.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum When {
    /// The value is `true`.
    True,
    /// The value is a number other than 0 (or a string holding one).
    NonZero,
    /// The value is there and not `null`, `false`, `0`, `""`, `[]` or `{}`.
    Present,
    /// The value is this string.
    Equals(Cow<'static, str>),
}

impl When {
    fn holds(&self, value: &Value) -> bool {
        match self {
            Self::True => value == &Value::Bool(true),
            Self::NonZero => match value {
                Value::Number(n) => n.as_f64().is_some_and(|n| n != 0.0),
                Value::String(s) => s.trim().parse::<f64>().is_ok_and(|n| n != 0.0),
                _ => false,
            },
            Self::Present => match value {
                Value::Null | Value::Bool(false) => false,
                Value::Number(n) => n.as_f64() != Some(0.0),
                Value::String(s) => !s.trim().is_empty(),
                Value::Array(a) => !a.is_empty(),
                Value::Object(o) => !o.is_empty(),
                Value::Bool(true) => true,
            },
            Self::Equals(text) => value.as_str() == Some(text),
        }
    }

    fn describe(&self) -> String {
        match self {
            Self::True => "true".into(),
            Self::NonZero => "nonzero".into(),
            Self::Present => "present".into(),
            Self::Equals(text) => format!("= {text:?}"),
        }
    }
}

/// One rule, before it is compiled.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Rule {
    /// The record's field at this JSON pointer passes the test.
    Field(Cow<'static, str>, When),
    /// The result text matches this regular expression.
    Text(Cow<'static, str>),
}

impl Rule {
    /// How reports name the rule: `/extra/returncode nonzero`, `text /Traceback/`.
    pub fn name(&self) -> String {
        match self {
            Self::Field(pointer, when) => format!("{pointer} {}", when.describe()),
            Self::Text(pattern) => format!("text /{pattern}/"),
        }
    }
}

const fn field(pointer: &'static str, when: When) -> Rule {
    Rule::Field(Cow::Borrowed(pointer), when)
}

const fn text(pattern: &'static str) -> Rule {
    Rule::Text(Cow::Borrowed(pattern))
}

const fn equals(value: &'static str) -> When {
    When::Equals(Cow::Borrowed(value))
}

/// A non-zero exit code written as text (a macro, so that patterns can `concat!` it).
macro_rules! nonzero {
    () => {
        r"(?:-[1-9][0-9]*|[1-9][0-9]*)"
    };
}

/// The rules of one format, compiled.
#[derive(Clone, Debug, Default)]
struct Compiled {
    fields: Vec<(String, When, String)>,
    texts: Option<RegexSet>,
    text_names: Vec<String>,
    text_sources: Vec<String>,
}

impl Compiled {
    fn is_empty(&self) -> bool {
        self.fields.is_empty() && self.texts.is_none()
    }

    fn add(&mut self, rule: &Rule) -> Result<(), regex::Error> {
        match rule {
            Rule::Field(pointer, when) => {
                self.fields
                    .push((pointer.to_string(), when.clone(), rule.name()))
            }
            Rule::Text(pattern) => {
                Regex::new(pattern)?;
                self.text_sources.push(pattern.to_string());
                self.text_names.push(rule.name());
                self.texts = Some(RegexSet::new(&self.text_sources)?);
            }
        }
        Ok(())
    }

    /// The name of the first rule that matches.
    fn first_match(&self, record: &Value, text: &str) -> Option<&str> {
        for (pointer, when, name) in &self.fields {
            if record.pointer(pointer).is_some_and(|v| when.holds(v)) {
                return Some(name);
            }
        }
        let set = self.texts.as_ref()?;
        let window = prefix(text, TEXT_WINDOW);
        let first = set.matches(window).into_iter().next()?;
        Some(&self.text_names[first])
    }
}

/// `text` cut to at most `max` bytes, at a character boundary.
fn prefix(text: &str, max: usize) -> &str {
    if text.len() <= max {
        return text;
    }
    let mut end = max;
    while !text.is_char_boundary(end) {
        end -= 1;
    }
    &text[..end]
}

/// The failure rules of every format.
#[derive(Clone, Debug)]
pub struct FailureRules {
    by_format: BTreeMap<Format, Compiled>,
    /// Every rule, as given, for listings.
    listing: Vec<(Option<Format>, Rule, bool)>,
}

impl Default for FailureRules {
    /// The built-in rules.
    fn default() -> Self {
        BUILTIN_RULES.clone()
    }
}

static BUILTIN_RULES: LazyLock<FailureRules> = LazyLock::new(|| {
    let mut rules = FailureRules::none();
    for (format, rule) in FailureRules::BUILTIN {
        rules
            .insert(Some(*format), rule.clone(), true)
            .expect("built-in failure rules compile");
    }
    rules
});

impl FailureRules {
    /// The built-in table: per format, the signals of a failed tool result, and what the
    /// record is that field rules point into.
    ///
    /// | format | record | signals |
    /// |---|---|---|
    /// | `mini-swe-agent` | the `tool` message (text mode: the `user` message with the output) | `extra.returncode` ≠ 0, `extra.exception_info`, `<returncode>N</returncode>` or `"returncode": N` ≠ 0, a timeout |
    /// | `swe-agent` | the step (only its text is read) | missing files, unknown commands, usage lines, tracebacks, syntax errors from the edit linter, `Error:`/`ERROR:` lines, editor refusals |
    /// | `openhands` | V1: the `ObservationEvent`; V0: the observation event | `observation.error`, `observation.is_error`, an exit code ≠ 0 (`exit_code`, `metadata.exit_code`, V0 `extras.exit_code`), V0 `observation: "error"`, text starting `ERROR:` |
    /// | `gemini-cli` | the `toolCalls[]` entry | `status` `error` or `cancelled` |
    /// | `codex-rollout` | the output, parsed when it is a JSON object | `metadata.exit_code` ≠ 0, `Process exited with code N` ≠ 0, `exec_command failed` |
    /// | `codex-exec` | the item | `exit_code` ≠ 0, `status: "failed"`, `error` |
    /// | `claude-code` | the `tool_result` block | `<tool_use_error>` without `is_error` |
    ///
    /// Formats whose results carry an error flag SPEC reads (OpenClaw `isError`, Claude
    /// Code and Anthropic `is_error`, the derived call streams' `isError`, loopguard's own
    /// events) map it to an error outcome in the reader; they need no rule.
    pub const BUILTIN: &'static [(Format, Rule)] = &[
        (
            Format::MiniSweAgent,
            field("/extra/returncode", When::NonZero),
        ),
        (
            Format::MiniSweAgent,
            field("/extra/exception_info", When::Present),
        ),
        (
            Format::MiniSweAgent,
            text(concat!(
                r"\A\s*(?:<exception>|<returncode>",
                nonzero!(),
                r"</returncode>|\{\s*.returncode.:\s*",
                nonzero!(),
                r"\b)"
            )),
        ),
        (
            Format::MiniSweAgent,
            text(r"\AThe last command <command>.*</command> timed out"),
        ),
        (Format::SweAgent, text(r"No such file or directory")),
        (Format::SweAgent, text(r"(?m)(?:^|: )command not found$")),
        (Format::SweAgent, text(r"(?m)^\s*[Uu]sage: ")),
        (
            Format::SweAgent,
            text(r"Traceback \(most recent call last\)"),
        ),
        (
            Format::SweAgent,
            text(r"Your proposed edit has introduced new syntax error"),
        ),
        (Format::SweAgent, text(r"(?m)\A\s*(?:ERROR|Error):")),
        (Format::SweAgent, text(r"\AInvalid `view_range`")),
        (Format::SweAgent, text(r"\AThe path \S+ does not exist")),
        (Format::SweAgent, text(r"\ANo replacement was performed")),
        (Format::SweAgent, text(r"(?m)^File \S+ not found$")),
        (
            Format::OpenHands,
            field("/observation/error", When::Present),
        ),
        (
            Format::OpenHands,
            field("/observation/is_error", When::True),
        ),
        (
            Format::OpenHands,
            field("/observation/exit_code", When::NonZero),
        ),
        (
            Format::OpenHands,
            field("/observation/metadata/exit_code", When::NonZero),
        ),
        (Format::OpenHands, field("/observation", equals("error"))),
        (Format::OpenHands, field("/extras/exit_code", When::NonZero)),
        (
            Format::OpenHands,
            field("/extras/metadata/exit_code", When::NonZero),
        ),
        (Format::OpenHands, text(r"\A\s*ERROR:")),
        (Format::GeminiCli, field("/status", equals("error"))),
        (Format::GeminiCli, field("/status", equals("cancelled"))),
        (
            Format::CodexRollout,
            field("/metadata/exit_code", When::NonZero),
        ),
        (
            Format::CodexRollout,
            text(concat!(r"(?m)^Process exited with code ", nonzero!(), "$")),
        ),
        (Format::CodexRollout, text(r"\Aexec_command failed")),
        (Format::CodexExec, field("/exit_code", When::NonZero)),
        (Format::CodexExec, field("/status", equals("failed"))),
        (Format::CodexExec, field("/error", When::Present)),
        (Format::ClaudeCode, text(r"\A\s*<tool_use_error>")),
        (
            Format::Cline,
            text(r"(?m)^The tool execution failed with the following error:"),
        ),
        (Format::Cline, text(r"(?m)^The user denied this operation")),
        (
            Format::Cline,
            text(r"Missing value for required parameter '"),
        ),
        (
            Format::Cline,
            text(r"is blocked by the \.(?:cline|roo)ignore file settings"),
        ),
        (
            Format::Cline,
            text(r"(?m)^This tool cannot be used in PLAN MODE"),
        ),
        (
            Format::Cline,
            text(r"SEARCH block content doesn't match exactly"),
        ),
        (
            Format::Cline,
            text(concat!(r"(?m)Exit code: ", nonzero!(), r"\b")),
        ),
        (
            Format::ClineUi,
            text(concat!(r"(?m)Exit code: ", nonzero!(), r"\b")),
        ),
        (Format::Continue, text(r"\A\w+ failed with the message: ")),
        (Format::Continue, text(r"\AError executing tool ")),
        (
            Format::OpenCode,
            field("/state/metadata/exit", When::NonZero),
        ),
    ];

    /// The built-in rules ([`FailureRules::BUILTIN`]), shared.
    pub fn builtin() -> &'static Self {
        &BUILTIN_RULES
    }

    /// No rules at all.
    pub fn none() -> Self {
        Self {
            by_format: BTreeMap::new(),
            listing: Vec::new(),
        }
    }

    /// Adds a rule for `format` (every format when `None`).
    pub fn add(&mut self, format: Option<Format>, rule: Rule) -> Result<(), Error> {
        self.insert(format, rule, false)
    }

    fn insert(&mut self, format: Option<Format>, rule: Rule, builtin: bool) -> Result<(), Error> {
        let formats: Vec<Format> = match format {
            Some(f) => vec![f],
            None => Format::ALL.to_vec(),
        };
        for f in formats {
            self.by_format
                .entry(f)
                .or_default()
                .add(&rule)
                .map_err(|e| Error::FailureRule {
                    rule: rule.name(),
                    reason: e.to_string(),
                })?;
        }
        self.listing.push((format, rule, builtin));
        Ok(())
    }

    /// Adds the rules of a rules document: a JSON object from format names (or `*`) to
    /// lists of rules, each a string (a text rule) or `{"field": POINTER, "when":
    /// "true"|"nonzero"|"present"|{"equals": TEXT}}`.
    pub fn add_document(&mut self, text: &str) -> Result<(), Error> {
        let bad = |reason: String| Error::FailureRule {
            rule: "(document)".into(),
            reason,
        };
        let doc: Value = serde_json::from_str(text).map_err(|e| bad(e.to_string()))?;
        let Value::Object(map) = doc else {
            return Err(bad(
                "expected an object from format names to lists of rules".into(),
            ));
        };
        for (name, rules) in map {
            let format = match name.as_str() {
                "*" => None,
                other => Some(other.parse::<Format>()?),
            };
            let Value::Array(rules) = rules else {
                return Err(bad(format!("{name}: expected a list of rules")));
            };
            for rule in rules {
                self.add(
                    format,
                    parse_rule(&rule).map_err(|r| bad(format!("{name}: {r}")))?,
                )?;
            }
        }
        Ok(())
    }

    /// Adds a text rule given as `FORMAT=REGEX` (`*=REGEX` for every format).
    pub fn add_text_flag(&mut self, flag: &str) -> Result<(), Error> {
        let Some((name, pattern)) = flag.split_once('=') else {
            return Err(Error::FailureRule {
                rule: flag.to_owned(),
                reason: "expected FORMAT=REGEX (FORMAT may be *)".into(),
            });
        };
        let format = match name.trim() {
            "*" => None,
            other => Some(other.parse::<Format>()?),
        };
        self.add(format, Rule::Text(Cow::Owned(pattern.to_owned())))
    }

    /// Whether `format` has any rule (readers skip the work when not).
    pub fn applies_to(&self, format: Format) -> bool {
        self.by_format.get(&format).is_some_and(|c| !c.is_empty())
    }

    /// The name of the first rule of `format` that says the result failed.
    pub fn failed(&self, format: Format, record: &Value, text: &str) -> Option<&str> {
        self.by_format.get(&format)?.first_match(record, text)
    }

    /// Marks `outcome` as failed when a rule of `format` matches (see the module docs),
    /// and counts it in `stats`. Outcomes that are errors already are left alone.
    pub(crate) fn judge(
        &self,
        format: Format,
        record: &Value,
        text: &str,
        outcome: &mut OwnedOutcome,
        stats: &mut ReadStats,
    ) {
        let OwnedOutcome::Result(Value::Object(result)) = outcome else {
            return;
        };
        if let Some(rule) = self.failed(format, record, text) {
            stats.failure(rule);
            result.insert("isError".into(), Value::Bool(true));
        }
    }

    /// Every rule: its format (`None`: every format), the rule, and whether it is built in.
    pub fn rules(&self) -> impl Iterator<Item = (Option<Format>, &Rule, bool)> {
        self.listing.iter().map(|(f, r, b)| (*f, r, *b))
    }
}

fn parse_rule(rule: &Value) -> Result<Rule, String> {
    match rule {
        Value::String(pattern) => Ok(Rule::Text(Cow::Owned(pattern.clone()))),
        Value::Object(map) => {
            let pointer = map
                .get("field")
                .and_then(Value::as_str)
                .ok_or("a rule object needs \"field\": a JSON pointer such as \"/exit_code\"")?;
            if !(pointer.is_empty() || pointer.starts_with('/')) {
                return Err(format!(
                    "field {pointer:?} is not a JSON pointer (start it with /)"
                ));
            }
            let when = match map.get("when") {
                None => When::Present,
                Some(Value::String(w)) => match w.as_str() {
                    "true" => When::True,
                    "nonzero" => When::NonZero,
                    "present" => When::Present,
                    other => {
                        return Err(format!(
                            "unknown test {other:?} (known: true, nonzero, present, {{\"equals\": TEXT}})"
                        ))
                    }
                },
                Some(Value::Object(o)) => match o.get("equals").and_then(Value::as_str) {
                    Some(text) => When::Equals(Cow::Owned(text.to_owned())),
                    None => return Err("expected {\"equals\": TEXT}".into()),
                },
                Some(other) => return Err(format!("unknown test {other}")),
            };
            let keys_ok = map.keys().all(|k| k == "field" || k == "when");
            if !keys_ok {
                return Err("a rule object has only \"field\" and \"when\"".into());
            }
            Ok(Rule::Field(Cow::Owned(pointer.to_owned()), when))
        }
        other => Err(format!(
            "a rule is a regex string or a field object, not {other}"
        )),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn rules() -> FailureRules {
        FailureRules::default()
    }

    #[test]
    fn builtin_rules_compile_and_cover_the_formats_that_need_them() {
        let r = rules();
        for f in [
            Format::MiniSweAgent,
            Format::SweAgent,
            Format::OpenHands,
            Format::GeminiCli,
            Format::CodexRollout,
            Format::CodexExec,
            Format::ClaudeCode,
        ] {
            assert!(r.applies_to(f), "{f}");
        }
        assert!(
            !r.applies_to(Format::OpenClaw),
            "OpenClaw needs no rule: zero cost"
        );
    }

    #[test]
    fn field_rules() {
        let r = rules();
        let record = json!({"observation": {"exit_code": null, "error": false, "metadata": {"exit_code": 1}}});
        assert_eq!(
            r.failed(Format::OpenHands, &record, "cp: cannot stat"),
            Some("/observation/metadata/exit_code nonzero")
        );
        let ok = json!({"observation": {"exit_code": null, "error": false, "metadata": {"exit_code": 0}}});
        assert_eq!(r.failed(Format::OpenHands, &ok, "fine"), None);
        assert_eq!(
            r.failed(Format::GeminiCli, &json!({"status": "cancelled"}), ""),
            Some("/status = \"cancelled\"")
        );
        assert_eq!(
            r.failed(Format::GeminiCli, &json!({"status": "success"}), ""),
            None
        );
        assert_eq!(
            r.failed(
                Format::MiniSweAgent,
                &json!({"extra": {"returncode": "2"}}),
                ""
            ),
            Some("/extra/returncode nonzero")
        );
    }

    #[test]
    fn text_rules() {
        let r = rules();
        let none = json!({});
        for (format, text, expected) in [
            (
                Format::SweAgent,
                "ls: cannot access 'x': No such file or directory",
                true,
            ),
            (Format::SweAgent, "bash: foo: command not found", true),
            (
                Format::SweAgent,
                "Usage: edit <start_line>:<end_line>",
                true,
            ),
            (
                Format::SweAgent,
                "x\nTraceback (most recent call last):\n  File",
                true,
            ),
            (
                Format::SweAgent,
                "Your proposed edit has introduced new syntax error(s).",
                true,
            ),
            (Format::SweAgent, "Invalid `view_range`: [1, 2]", true),
            (
                Format::SweAgent,
                "Here's the result of running `cat -n`",
                false,
            ),
            (
                Format::MiniSweAgent,
                "<returncode>1</returncode>\n<output>",
                true,
            ),
            (
                Format::MiniSweAgent,
                "<returncode>0</returncode>\n<output>",
                false,
            ),
            (
                Format::MiniSweAgent,
                "{\n  \"returncode\": 127,\n  \"output\": \"\"}",
                true,
            ),
            (
                Format::MiniSweAgent,
                "{\n  \"returncode\": 0,\n  \"output\": \"\"}",
                false,
            ),
            (
                Format::CodexRollout,
                "Chunk ID: 1\nProcess exited with code 1\nOutput:",
                true,
            ),
            (
                Format::CodexRollout,
                "Chunk ID: 1\nProcess exited with code 0\nOutput:",
                false,
            ),
            (Format::OpenHands, "ERROR:\nInvalid `path` parameter", true),
            (
                Format::ClaudeCode,
                "<tool_use_error>Cancelled: parallel tool call</tool_use_error>",
                true,
            ),
        ] {
            assert_eq!(
                r.failed(format, &none, text).is_some(),
                expected,
                "{format}: {text}"
            );
        }
        // Only the first TEXT_WINDOW bytes are read.
        let late = format!("{}No such file or directory", "x".repeat(TEXT_WINDOW));
        assert_eq!(r.failed(Format::SweAgent, &none, &late), None);
        let cut = format!("{}é", "x".repeat(TEXT_WINDOW - 1));
        assert_eq!(r.failed(Format::SweAgent, &none, &cut), None);
    }

    #[test]
    fn users_extend_the_table() {
        let mut r = rules();
        r.add_text_flag("swe-agent=Permission denied").unwrap();
        r.add_text_flag("*=FATAL").unwrap();
        r.add_document(r#"{"openai-chat": ["^oops", {"field": "/code", "when": {"equals": "E1"}}], "loopguard": [{"field": "/x"}]}"#)
            .unwrap();
        let none = json!({});
        assert!(r
            .failed(Format::SweAgent, &none, "cp: Permission denied")
            .is_some());
        assert!(r.failed(Format::OpenClaw, &none, "FATAL: x").is_some());
        assert!(r.failed(Format::OpenaiChat, &none, "oops").is_some());
        assert!(r
            .failed(Format::OpenaiChat, &json!({"code": "E1"}), "")
            .is_some());
        assert!(r
            .failed(Format::Loopguard, &json!({"x": [1]}), "")
            .is_some());
        assert!(r
            .rules()
            .any(|(f, rule, builtin)| f.is_none() && !builtin && rule.name() == "text /FATAL/"));
        for bad in ["nope", "swe-agent=(", "sweagent=x"] {
            assert!(r.add_text_flag(bad).is_err(), "{bad}");
        }
        for bad in [
            "[]",
            r#"{"swe-agent": "x"}"#,
            r#"{"swe-agent": [1]}"#,
            r#"{"swe-agent": [{"field": "x"}]}"#,
            r#"{"swe-agent": [{"field": "/x", "when": "maybe"}]}"#,
            r#"{"swe-agent": [{"field": "/x", "other": 1}]}"#,
        ] {
            let e = r.add_document(bad).unwrap_err();
            assert_eq!(e.kind(), crate::ErrorKind::FailureRule, "{bad}: {e}");
        }
        let e = r.add_document(r#"{"nope": []}"#).unwrap_err();
        assert_eq!(e.kind(), crate::ErrorKind::UnknownFormat);
    }

    #[test]
    fn judging_marks_results_and_counts_them() {
        let r = rules();
        let mut stats = ReadStats::default();
        let mut outcome = OwnedOutcome::Result(json!({"content": [{"type": "text", "text": "x"}]}));
        r.judge(
            Format::GeminiCli,
            &json!({"status": "error"}),
            "x",
            &mut outcome,
            &mut stats,
        );
        assert_eq!(
            outcome,
            OwnedOutcome::Result(
                json!({"content": [{"type": "text", "text": "x"}], "isError": true})
            )
        );
        assert_eq!(stats.failed_results(), 1);
        let mut error = OwnedOutcome::Error(json!("boom"));
        r.judge(
            Format::GeminiCli,
            &json!({"status": "error"}),
            "x",
            &mut error,
            &mut stats,
        );
        assert_eq!(error, OwnedOutcome::Error(json!("boom")));
        assert_eq!(stats.failed_results(), 1);
    }

    /// docs/scan.md lists the built-in rules: one row per format at least, and every
    /// format with rules in the code has rows (the table is written for people, so only
    /// the formats and the count are checked).
    #[test]
    fn the_documented_table_names_every_format_with_rules() {
        let doc = include_str!("../../../docs/scan.md");
        let table = doc
            .split("<!-- failure-rules:begin -->")
            .nth(1)
            .and_then(|rest| rest.split("<!-- failure-rules:end -->").next())
            .expect("docs/scan.md has the failure rules table");
        let documented: std::collections::BTreeSet<&str> = table
            .lines()
            .filter_map(|l| l.strip_prefix("| `"))
            .filter_map(|l| l.split('`').next())
            .collect();
        let coded: std::collections::BTreeSet<&str> = FailureRules::BUILTIN
            .iter()
            .map(|(f, _)| f.as_str())
            .collect();
        assert_eq!(documented, coded);
        for (format, rule) in FailureRules::BUILTIN {
            if let Rule::Field(pointer, _) = rule {
                assert!(
                    table.contains(&format!("`{pointer} ")),
                    "{format}: {pointer}"
                );
            }
        }
    }
}
