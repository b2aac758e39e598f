//! aider chat histories (`.aider.chat.history.md`, `docs/formats.md` §1): Markdown that
//! aider appends to as it runs (`aider/io.py`: `user_input`, `ai_output`,
//! `append_chat_history`), read one line at a time.
//!
//! | lines | item |
//! |---|---|
//! | `# aider chat started at <date time>` | a new session, named by that date and time |
//! | `#### <text>` (one or more lines) | the user's message: a new run (commands such as `/add` included), and its prompt |
//! | any other line | the model's answer: a [`Item::Turn`], the answer's text (with calls when it holds edits), then one `edit` call per SEARCH/REPLACE block (`<<<<<<< SEARCH` … `=======` … `>>>>>>> REPLACE`, the file named on the line before its fence), args `{path, search, replace}`, all in one batch |
//! | `> <text>` (one or more lines) | aider's own output: the outcome of those edits, token usage, commands it ran, lint errors |
//!
//! Outcomes, from aider's messages (`aider/coders/base_coder.py` `apply_updates`,
//! `aider/coders/editblock_coder.py` `apply_edits`):
//!
//! - `Applied edit to <path>`: the edits of that file succeeded;
//! - `# N SEARCH/REPLACE block(s) failed to match!` with a `## SearchReplaceNoExactMatch: …
//!   in <path>` section per failed block: those blocks failed (an error with the section),
//!   the others succeeded when aider says so;
//! - `The LLM did not conform to the edit format.` without such sections: every edit of
//!   the answer failed;
//! - `Running <command>` (a shell command aider ran after asking): a `shell` call; aider
//!   does not write its output into the history, so the call has no result;
//! - `# Fix any errors below, if possible.` then `## Running: <command>`: aider's linter
//!   found errors after an edit: a `lint` call whose result is that error report;
//! - `Tokens: N sent, M received. Cost: $X message/request …`: the answer's usage.

use std::io::{self, BufRead, Seek};

use loopguard::Role;
use loopguard_events::{Ids, OwnedOutcome};
use serde_json::{json, Value};

use crate::item::{self, Item, Pos, Sink, Usage};
use crate::readers::lines::Lines;
use crate::readers::ReadOptions;
use crate::stats::ReadStats;

/// The line that starts a session (`aider/io.py`).
pub const SESSION_HEADER: &str = "# aider chat started at ";

/// Reads an aider chat history.
pub fn read<R: BufRead + Seek>(
    input: R,
    options: &ReadOptions<'_>,
    sink: &mut dyn Sink,
) -> io::Result<ReadStats> {
    let mut stats = ReadStats::default();
    let mut lines = Lines::with_options(input, options)?;
    let mut history = History {
        ids: item::ids(options.session_hint, Some("run-0")),
        sessions: Vec::new(),
        runs: 0,
        part: None,
        pending: Vec::new(),
        calls: 0,
        stats: ReadStats::default(),
    };
    while let Some(line) = lines.next_line(&mut stats)? {
        let text = String::from_utf8_lossy(line.bytes);
        // aider ends its lines with two spaces (a Markdown line break).
        let text = text.trim_end();
        history.line(line.pos, text, sink);
    }
    history.flush(sink);
    stats.absorb(history.stats);
    Ok(stats)
}

#[derive(Clone, Copy, PartialEq, Eq)]
enum Kind {
    User,
    Answer,
    Output,
}

/// A run of lines of one kind, with where it starts.
struct Part {
    kind: Kind,
    pos: Pos,
    /// Line number of its last line.
    last: u64,
    lines: Vec<String>,
}

/// An edit call waiting for its outcome.
struct Pending {
    id: String,
    path: String,
    search: String,
}

struct History {
    ids: Ids,
    /// Session names seen, to keep two sessions started in one second apart.
    sessions: Vec<String>,
    runs: u64,
    part: Option<Part>,
    pending: Vec<Pending>,
    /// Calls made in the file (names synthesized call ids).
    calls: u64,
    stats: ReadStats,
}

impl History {
    fn line(&mut self, pos: Pos, text: &str, sink: &mut dyn Sink) {
        if let Some(started) = text.strip_prefix(SESSION_HEADER) {
            self.flush(sink);
            self.stats.record();
            self.start_session(started.trim());
            return;
        }
        let (kind, body) = if let Some(rest) = text.strip_prefix("####") {
            (Kind::User, rest.strip_prefix(' ').unwrap_or(rest))
        } else if text == ">" {
            (Kind::Output, "")
        } else if let Some(rest) = text.strip_prefix("> ") {
            // Not `>>>>>>> REPLACE`, which ends a block of the answer.
            (Kind::Output, rest)
        } else {
            (Kind::Answer, text)
        };
        if self.part.as_ref().is_some_and(|p| p.kind != kind) {
            self.flush(sink);
        }
        let part = self.part.get_or_insert_with(|| Part {
            kind,
            pos,
            last: pos.line,
            lines: Vec::new(),
        });
        // The line reader passes blank lines over: put them back inside a part, where
        // they belong to the text of an edit.
        for _ in part.last + 1..pos.line {
            part.lines.push(String::new());
        }
        part.last = pos.line;
        part.lines.push(body.to_owned());
    }

    fn start_session(&mut self, started: &str) {
        let name = if started.is_empty() {
            "aider".to_owned()
        } else {
            started.to_owned()
        };
        let seen = self.sessions.iter().filter(|s| **s == name).count();
        self.sessions.push(name.clone());
        let name = match seen {
            0 => name,
            n => format!("{name}#{}", n + 1),
        };
        self.ids = item::ids(&name, Some("run-0"));
        self.runs = 0;
        self.pending.clear();
    }

    fn flush(&mut self, sink: &mut dyn Sink) {
        let Some(part) = self.part.take() else {
            return;
        };
        self.stats.record();
        match part.kind {
            Kind::User => {
                self.runs += 1;
                self.ids.run = Some(format!("run-{}", self.runs));
                self.pending.clear();
                let prompt = item::said(&self.ids, Role::User, part.lines.join("\n"));
                sink.push(part.pos, prompt);
            }
            Kind::Answer => self.answer(&part, sink),
            Kind::Output => self.output(&part, sink),
        }
    }

    fn answer(&mut self, part: &Part, sink: &mut dyn Sink) {
        self.pending.clear();
        sink.push(
            part.pos,
            Item::Turn {
                ids: self.ids.clone(),
                usage: None,
            },
        );
        let batch = format!("answer-line-{}", part.pos.line);
        let mut last_path: Option<String> = None;
        let edits = edit_blocks(&part.lines);
        let text = part.lines.join("\n");
        sink.push(
            part.pos,
            item::answer(&self.ids, text, None, !edits.is_empty()),
        );
        for edit in edits {
            let path = edit
                .path
                .or_else(|| last_path.clone())
                .unwrap_or_else(|| "(no file named)".to_owned());
            last_path = Some(path.clone());
            self.calls += 1;
            let id = format!("edit-{}", self.calls);
            let args = json!({ "path": path, "search": edit.search, "replace": edit.replace });
            if let Some(call) =
                item::call_in_batch(&self.ids, Some(&id), "edit", args, Some(batch.clone()))
            {
                sink.push(part.pos, call);
                self.pending.push(Pending {
                    id,
                    path,
                    search: squeeze(&edit.search),
                });
            }
        }
    }

    fn output(&mut self, part: &Part, sink: &mut dyn Sink) {
        let lines = &part.lines;
        let pos = part.pos;
        for line in lines {
            if let Some(usage) = usage(line) {
                sink.push(
                    pos,
                    Item::Usage {
                        ids: self.ids.clone(),
                        usage,
                    },
                );
            }
            if let Some(command) = line.strip_prefix("Running ") {
                // A shell command aider ran; its output stays out of the history.
                self.calls += 1;
                let id = format!("shell-{}", self.calls);
                let args = json!({ "command": command.trim() });
                if let Some(call) = item::call(&self.ids, Some(&id), "shell", args) {
                    sink.push(pos, call);
                }
            }
        }
        self.edit_outcomes(lines, pos, sink);
        self.lint_reports(lines, pos, sink);
    }

    /// The outcomes of the pending edits, when this output gives them.
    fn edit_outcomes(&mut self, lines: &[String], pos: Pos, sink: &mut dyn Sink) {
        if self.pending.is_empty() {
            return;
        }
        let failed = failed_blocks(lines);
        let malformed = lines
            .iter()
            .any(|l| l.starts_with("The LLM did not conform to the edit format"));
        let applied: Vec<&str> = lines
            .iter()
            .filter_map(|l| l.strip_prefix("Applied edit to "))
            .map(str::trim)
            .collect();
        let others_applied = lines
            .iter()
            .any(|l| l.starts_with("# The other ") && l.contains("were applied successfully"));
        if failed.is_empty() && !malformed && applied.is_empty() {
            return;
        }
        let report = lines.join("\n");
        for edit in std::mem::take(&mut self.pending) {
            let failure = failed
                .iter()
                .find(|f| f.path == edit.path && f.search == edit.search)
                .map(|f| f.text.clone())
                .or_else(|| {
                    // Blocks aider could not even parse, or whose quoted text differs
                    // from the answer's: the whole answer failed unless aider says the
                    // others went through.
                    let unmatched = failed.is_empty() || !others_applied;
                    let this_file_applied = applied.iter().any(|p| *p == edit.path);
                    (malformed && unmatched && !this_file_applied).then(|| report.clone())
                });
            let outcome = match failure {
                Some(text) => OwnedOutcome::Error(Value::String(text)),
                None => OwnedOutcome::Result(item::text_result(
                    &format!("Applied edit to {}", edit.path),
                    None,
                )),
            };
            sink.push(pos, item::result(&self.ids, &edit.id, outcome));
        }
    }

    /// `# Fix any errors below` reports: a `lint` call and its failed result.
    fn lint_reports(&mut self, lines: &[String], pos: Pos, sink: &mut dyn Sink) {
        let mut i = 0;
        while i < lines.len() {
            let Some(command) = lines[i].strip_prefix("## Running: ") else {
                i += 1;
                continue;
            };
            let end = lines[i + 1..]
                .iter()
                .position(|l| l.starts_with("## Running: ") || l.starts_with("Attempt to fix"))
                .map_or(lines.len(), |n| i + 1 + n);
            self.calls += 1;
            let id = format!("lint-{}", self.calls);
            let args = json!({ "command": command.trim() });
            if let Some(call) = item::call(&self.ids, Some(&id), "lint", args) {
                sink.push(pos, call);
                let report = lines[i + 1..end].join("\n");
                let report = report.trim();
                let text = if report.is_empty() {
                    format!("lint errors from {}", command.trim())
                } else {
                    report.to_owned()
                };
                let outcome = OwnedOutcome::Error(Value::String(text));
                sink.push(pos, item::result(&self.ids, &id, outcome));
            }
            i = end;
        }
    }
}

/// One SEARCH/REPLACE block of an answer.
struct EditBlock {
    path: Option<String>,
    search: String,
    replace: String,
}

/// The SEARCH/REPLACE blocks of an answer, with the file each names (aider's
/// `find_original_update_blocks`: the line before the opening fence).
fn edit_blocks(lines: &[String]) -> Vec<EditBlock> {
    let mut blocks = Vec::new();
    let mut i = 0;
    while i < lines.len() {
        if !is_marker(&lines[i], '<', "SEARCH") {
            i += 1;
            continue;
        }
        let path = block_path(&lines[..i]);
        let Some(divider) = lines[i + 1..]
            .iter()
            .position(|l| is_divider(l))
            .map(|n| i + 1 + n)
        else {
            break;
        };
        let Some(end) = lines[divider + 1..]
            .iter()
            .position(|l| is_marker(l, '>', "REPLACE"))
            .map(|n| divider + 1 + n)
        else {
            break;
        };
        blocks.push(EditBlock {
            path,
            search: lines[i + 1..divider].join("\n"),
            replace: lines[divider + 1..end].join("\n"),
        });
        i = end + 1;
    }
    blocks
}

/// `<<<<<<< SEARCH` / `>>>>>>> REPLACE`: 5 to 9 of `c`, then the word.
fn is_marker(line: &str, c: char, word: &str) -> bool {
    let rest = line.trim_start_matches(c);
    let n = line.len() - rest.len();
    (5..=9).contains(&n) && rest.trim() == word
}

/// `=======`: 5 to 9 equal signs alone.
fn is_divider(line: &str) -> bool {
    let t = line.trim();
    (5..=9).contains(&t.len()) && t.chars().all(|c| c == '=')
}

/// The file a block names: the line before its opening fence (or before the marker when
/// there is no fence), stripped of Markdown decoration; `None` when that is not a name.
fn block_path(before: &[String]) -> Option<String> {
    let mut back = before.iter().rev();
    let mut line = back.next()?;
    if line.trim_start().starts_with("```") {
        line = back.next()?;
    }
    let name = line
        .trim()
        .trim_matches(|c: char| matches!(c, '`' | '*' | '#' | ':'))
        .trim();
    let plausible = !name.is_empty() && !name.contains(char::is_whitespace);
    plausible.then(|| name.to_owned())
}

/// A failed block as aider quotes it back.
struct Failed {
    path: String,
    search: String,
    text: String,
}

/// The `## SearchReplaceNoExactMatch` sections of a failure report.
fn failed_blocks(lines: &[String]) -> Vec<Failed> {
    const HEADER: &str =
        "## SearchReplaceNoExactMatch: This SEARCH block failed to exactly match lines in ";
    let mut failed = Vec::new();
    for (i, line) in lines.iter().enumerate() {
        let Some(path) = line.strip_prefix(HEADER) else {
            continue;
        };
        let rest = &lines[i + 1..];
        let search = rest
            .iter()
            .position(|l| is_marker(l, '<', "SEARCH"))
            .and_then(|s| {
                rest[s + 1..]
                    .iter()
                    .position(|l| is_divider(l))
                    .map(|d| squeeze(&rest[s + 1..s + 1 + d].join("\n")))
            })
            .unwrap_or_default();
        let end = rest
            .iter()
            .position(|l| l.starts_with("## SearchReplaceNoExactMatch"))
            .unwrap_or(rest.len());
        let mut text = vec![line.clone()];
        text.extend(rest[..end].iter().cloned());
        failed.push(Failed {
            path: path.trim().to_owned(),
            search,
            text: text.join("\n").trim().to_owned(),
        });
    }
    failed
}

/// Text with trailing spaces and empty lines dropped: how a block's SEARCH text compares
/// with aider's quote of it (the history drops neither consistently).
fn squeeze(text: &str) -> String {
    text.lines()
        .map(str::trim_end)
        .filter(|l| !l.is_empty())
        .collect::<Vec<_>>()
        .join("\n")
}

/// `Tokens: 5,094 sent, 222 received. Cost: $0.02 message, $0.02 session.` (older builds
/// say `request`): the answer's tokens and cost.
fn usage(line: &str) -> Option<Usage> {
    let rest = line.strip_prefix("Tokens: ")?;
    let number = |text: &str| -> Option<f64> {
        let digits: String = text
            .trim()
            .chars()
            .take_while(|c| c.is_ascii_digit() || matches!(c, ',' | '.' | 'k'))
            .filter(|c| *c != ',')
            .collect();
        match digits.strip_suffix('k') {
            Some(k) => k.parse::<f64>().ok().map(|n| n * 1000.0),
            None => digits.parse().ok(),
        }
    };
    let (sent, rest) = rest.split_once(" sent")?;
    let received = rest
        .trim_start_matches(',')
        .split_once(" received")
        .and_then(|(r, _)| number(r));
    let tokens = number(sent)? + received.unwrap_or(0.0);
    let cost = line
        .split_once("Cost: $")
        .and_then(|(_, c)| c.split_whitespace().next())
        .and_then(|c| c.parse::<f64>().ok());
    Some(Usage {
        tokens: tokens as u64,
        cost,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testing::read_bytes;
    use crate::Format;

    const HISTORY: &str = "
# aider chat started at 2024-08-07 13:24:55

> Aider v0.48.2-dev  
> Added aider/repo.py to the chat.  

#### make SuitableRepoNotFound class  

Here's how:

aider/repo.py
```python
<<<<<<< SEARCH
class GitRepo:
=======
class SuitableRepoNotFound(Exception):
    pass


class GitRepo:
>>>>>>> REPLACE
```

> Tokens: 5,094 sent, 222 received. Cost: $0.02 request, $0.02 session.  
> Applied edit to aider/repo.py  
>  
> # Fix any errors below, if possible.  
>  
> ## Running: /tmp/lint.sh aider/main.py  
>  
> aider/main.py:487:16: F821 undefined name 'SuitableRepoNotFound'  
>  
> Attempt to fix lint errors? y  

aider/main.py
```python
<<<<<<< SEARCH
from aider.repo import GitRepo
=======
from aider.repo import GitRepo, SuitableRepoNotFound
>>>>>>> REPLACE
```

> Tokens: 10,853 sent, 118 received. Cost: $0.03 request, $0.09 session.  
> The LLM did not conform to the edit format.  
> https://aider.chat/docs/troubleshooting/edit-errors.html  
> # 1 SEARCH/REPLACE block failed to match!  
>   
> ## SearchReplaceNoExactMatch: This SEARCH block failed to exactly match lines in aider/main.py  
> <<<<<<< SEARCH  
> from aider.repo import GitRepo  
> =======  
> from aider.repo import GitRepo, SuitableRepoNotFound  
> >>>>>>> REPLACE  
>   
> The SEARCH section must exactly match an existing block of lines including all white space, comments, indentation, docstrings, etc  

#### /run pytest  

> Running pytest  

# aider chat started at 2024-08-07 13:30:00

#### hello  

Hi!
";

    #[test]
    fn maps_edits_lint_and_commands() {
        let r = read_bytes(Format::Aider, HISTORY.as_bytes(), "history");
        let calls = r.call_list();
        let tools: Vec<&str> = calls.iter().map(|(_, t, _)| t.as_str()).collect();
        assert_eq!(tools, ["edit", "lint", "edit", "shell"]);
        assert_eq!(calls[0].2["path"], "aider/repo.py");
        assert_eq!(calls[1].2["command"], "/tmp/lint.sh aider/main.py");
        assert_eq!(calls[2].2["search"], "from aider.repo import GitRepo");
        let outcomes = r.result_list();
        assert_eq!(
            outcomes,
            [
                ("edit-1".to_owned(), false),
                ("lint-2".to_owned(), true),
                ("edit-3".to_owned(), true)
            ]
        );
        let runs = r.runs();
        assert_eq!(
            runs,
            [
                ("2024-08-07 13:24:55".to_owned(), Some("run-1".to_owned())),
                ("2024-08-07 13:24:55".to_owned(), Some("run-2".to_owned())),
            ]
        );
        let usage: Vec<u64> = r
            .items
            .iter()
            .filter_map(|(_, i)| match i {
                Item::Usage { usage, .. } => Some(usage.tokens),
                _ => None,
            })
            .collect();
        assert_eq!(usage, [5316, 10971]);
        assert!(r.stats.skipped.is_empty(), "{:?}", r.stats.skipped);
    }

    #[test]
    fn markers_and_paths() {
        assert!(is_marker("<<<<<<< SEARCH", '<', "SEARCH"));
        assert!(!is_marker("<<<< SEARCH", '<', "SEARCH"));
        assert!(is_divider("======="));
        assert!(!is_divider("=== x"));
        let lines = |v: &[&str]| v.iter().map(|s| s.to_string()).collect::<Vec<_>>();
        assert_eq!(
            block_path(&lines(&["**src/a.py**", "```python"])).as_deref(),
            Some("src/a.py")
        );
        assert_eq!(block_path(&lines(&["Here is the change:", "```"])), None);
        assert_eq!(block_path(&[]), None);
        assert_eq!(
            usage("Tokens: 2.5k sent, 1 received.").unwrap().tokens,
            2501
        );
        assert!(usage("Tokens: none").is_none());
    }
}
