//! SWE-agent trajectories (`.traj`, FORMATS §9): one pretty-printed JSON document,
//! `{environment, trajectory: [step], history, info}`, read as a stream (one step in
//! memory at a time; `history` and the per-step `messages` copies are skipped unbuilt
//! where possible).
//!
//! The file is one session (named after the file) and one run. Each `trajectory[i]` is a
//! [`Item::Turn`], the model's answer (its `thought`, with a call), and a call with id
//! `step-<i+1>`: the tool is the first word of `action`
//! and the args are `{"args": <the rest of the command>}`; its result is
//! `{content: [observation]}`, failed when its text says so (a missing file, an unknown
//! command, a usage line, a traceback, the edit linter's syntax errors: see
//! [`FailureRules`]). SWE-agent records no error flag, no usage per
//! step and no compactions. The step SWE-agent writes when it stops (cost or context
//! limit: an empty action and an empty observation) is no call; other steps with an empty
//! action are counted as skipped.

use std::io::{self, BufRead, Seek};

use loopguard_events::{Ids, OwnedOutcome};
use serde_json::{json, Value};

use crate::detect::Format;
use crate::failures::FailureRules;
use crate::item::{self, Item, Pos, Sink};
use crate::readers::walk::{self, Seg, Walker, Want};
use crate::stats::{ReadStats, SkipReason};
use crate::ReadOptions;

/// Reads a SWE-agent trajectory.
pub fn read<R: BufRead + Seek>(
    input: R,
    options: &ReadOptions<'_>,
    sink: &mut dyn Sink,
) -> io::Result<ReadStats> {
    let mut walker = Steps {
        ids: item::ids(options.session_hint, Some("run")),
        rules: options.failures,
        stats: ReadStats::default(),
        sink,
        action: None,
        observation: None,
        thought: None,
    };
    let mut stats = ReadStats::default();
    walk::walk(input, &mut walker, &mut stats)?;
    stats.absorb(walker.stats);
    Ok(stats)
}

struct Steps<'a> {
    ids: Ids,
    rules: &'a FailureRules,
    stats: ReadStats,
    sink: &'a mut dyn Sink,
    /// The step being read: its action, observation and thought, in whatever order they
    /// come.
    action: Option<(Pos, Value)>,
    observation: Option<(Pos, Value)>,
    thought: Option<String>,
}

impl Walker for Steps<'_> {
    fn want(&mut self, path: &[Seg]) -> Want {
        match path {
            [] => Want::Descend,
            [Seg::Key(k)] if k == "trajectory" => Want::Descend,
            [Seg::Key(k), Seg::Index(_)] if k == "trajectory" => Want::Descend,
            [Seg::Key(k), Seg::Index(_), Seg::Key(field)] if k == "trajectory" => {
                if matches!(field.as_str(), "action" | "observation" | "thought") {
                    Want::Whole
                } else {
                    Want::Skip
                }
            }
            _ => Want::Skip,
        }
    }

    fn whole(&mut self, path: &[Seg], pos: Pos, value: Value) {
        match path {
            [_, Seg::Index(_), Seg::Key(field)] if field == "action" => {
                self.action = Some((pos, value));
            }
            [_, Seg::Index(_), Seg::Key(field)] if field == "thought" => {
                self.thought = value.as_str().map(str::to_owned);
            }
            [_, Seg::Index(_), Seg::Key(_)] => self.observation = Some((pos, value)),
            // `trajectory` elements that are not objects.
            _ => self.stats.skip(SkipReason::NotAnObject, pos.line, || {
                "trajectory step that is not an object".into()
            }),
        }
    }

    fn end(&mut self, path: &[Seg]) {
        if let [Seg::Key(k), Seg::Index(i)] = path {
            if k == "trajectory" {
                self.step(*i);
            }
        }
    }
}

impl Steps<'_> {
    fn step(&mut self, index: usize) {
        let id = format!("step-{}", index + 1);
        let action = self.action.take();
        let observation = self.observation.take();
        let thought = self.thought.take();
        let Some((pos, action)) = action else {
            return;
        };
        let action = action.as_str().unwrap_or("").trim();
        let observation = observation.map(|(pos, value)| {
            let text = match value {
                Value::String(s) => s,
                Value::Null => String::new(),
                other => other.to_string(),
            };
            (pos, text)
        });
        if action.is_empty() && observation.as_ref().is_none_or(|(_, o)| o.is_empty()) {
            // The exit step (`Exit due to cost limit`).
            self.stats.record();
            return;
        }
        let (tool, rest) = action
            .split_once(char::is_whitespace)
            .map_or((action, ""), |(t, r)| (t, r.trim()));
        self.sink.push(
            pos,
            Item::Turn {
                ids: self.ids.clone(),
                usage: None,
            },
        );
        match item::call(&self.ids, Some(&id), tool, json!({ "args": rest })) {
            Some(call) => {
                self.stats.record();
                let thought = thought.unwrap_or_default();
                self.sink
                    .push(pos, item::answer(&self.ids, thought, None, true));
                self.sink.push(pos, call);
            }
            None => {
                self.stats.skip(SkipReason::MalformedEntry, pos.line, || {
                    format!("trajectory step {} has an empty action", index + 1)
                });
                return;
            }
        }
        if let Some((pos, text)) = observation {
            let mut outcome = OwnedOutcome::Result(item::text_result(&text, None));
            self.rules.judge(
                Format::SweAgent,
                &Value::Null,
                &text,
                &mut outcome,
                &mut self.stats,
            );
            self.sink.push(pos, item::result(&self.ids, &id, outcome));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testing::{read_bytes, read_corpus};
    use loopguard_events::Event;

    #[test]
    fn maps_steps() {
        let doc = r#"{
  "environment": "swe",
  "trajectory": [
    {"action": "grep -n foo x.py", "observation": "", "thought": "t", "messages": [{"role": "system"}]},
    {"thought": "t", "observation": "3:foo", "action": "grep -n foo x.py"},
    {"action": "", "observation": "bash: syntax error"},
    {"action": "", "observation": ""}
  ],
  "history": [{"role": "user", "content": "big"}],
  "info": {"exit_status": "exit_cost"}
}"#;
        let r = read_bytes(Format::SweAgent, doc.as_bytes(), "inst");
        assert_eq!((r.calls(), r.results()), (2, 2));
        assert_eq!(
            r.messages(),
            [
                (loopguard::Role::Assistant, "t", None, Some(true)),
                (loopguard::Role::Assistant, "t", None, Some(true)),
            ]
        );
        match &r.items[2] {
            (
                pos,
                Item::Event(Event::Call {
                    tool,
                    args,
                    call_id,
                    ..
                }),
            ) => {
                assert_eq!(tool, "grep");
                assert_eq!(args, &json!({"args": "-n foo x.py"}));
                assert_eq!(call_id.as_deref(), Some("step-1"));
                assert_eq!(pos.line, 4);
            }
            other => panic!("{other:?}"),
        }
        assert_eq!(r.stats.skipped_for(SkipReason::MalformedEntry), 1);
        assert_eq!(r.stats.records, 3, "two calls and the exit step");
        assert_eq!(r.stats.lines, 11);
    }

    /// SOURCES.md: 76 steps; the last is the exit step.
    #[test]
    fn corpus_seaborn_loop() {
        let Some(r) = read_corpus(Format::SweAgent, "swe-agent/mwaskom__seaborn-3187.traj") else {
            return;
        };
        assert_eq!((r.calls(), r.results(), r.compactions()), (75, 75, 0));
        assert!(r.stats.skipped.is_empty(), "{:?}", r.stats.skipped);
        let greps = r
            .items
            .iter()
            .filter(|(_, i)| {
                matches!(i, Item::Event(Event::Call { tool, args, .. })
                    if tool == "grep" && args["args"] == "-n \"get_legend_data\" /testbed/seaborn/_core/scales.py")
            })
            .count();
        assert_eq!(greps, 64);
    }

    /// The function-calling demonstration: 11 steps, all paired.
    #[test]
    fn corpus_marshmallow_function_calling() {
        let Some(r) = read_corpus(
            Format::SweAgent,
            "swe-agent/marshmallow-code__marshmallow-1867.function_calling_replace.traj",
        ) else {
            return;
        };
        assert_eq!((r.calls(), r.results(), r.compactions()), (11, 11, 0));
        assert!(r.stats.skipped.is_empty(), "{:?}", r.stats.skipped);
    }

    /// The labelled long-period cycles (labels.json): from the first labelled step on,
    /// step `n + p` repeats step `n` (same command, same observation) up to the last step.
    #[test]
    fn corpus_long_period_cycles() {
        for (file, first, period) in [
            ("swe-agent-more/matplotlib__matplotlib-25479.traj", 5, 14),
            ("swe-agent-more/sympy__sympy-21596.traj", 9, 17),
            ("swe-agent-more/django__django-13346.traj", 26, 7),
        ] {
            let Some(r) = read_corpus(Format::SweAgent, file) else {
                return;
            };
            assert_eq!(r.calls(), 75, "{file}");
            let steps: Vec<(String, Value)> = r
                .items
                .iter()
                .filter_map(|(_, i)| match i {
                    Item::Event(Event::Call { tool, args, .. }) => {
                        Some((tool.clone(), args.clone()))
                    }
                    _ => None,
                })
                .collect();
            let results: Vec<&loopguard_events::OwnedOutcome> = r
                .items
                .iter()
                .filter_map(|(_, i)| match i {
                    Item::Event(Event::Result { outcome, .. }) => Some(outcome),
                    _ => None,
                })
                .collect();
            let repeats = (first..=75 - period)
                .filter(|&n| {
                    steps[n - 1] == steps[n - 1 + period]
                        && results[n - 1] == results[n - 1 + period]
                })
                .count();
            // A cycle whose period is exact over most of the range (the last rounds may be
            // cut short or shift by a step).
            assert!(
                repeats * 10 >= (75 - period + 1 - first) * 8,
                "{file}: {repeats} of {} steps repeat at period {period}",
                75 - period + 1 - first
            );
        }
    }
}
