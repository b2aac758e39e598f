//! SWE-agent trajectories (`.traj`, FORMATS §9): one pretty-printed JSON document,
//! `{environment, trajectory: [step], history, info}`, read as a stream (one step in
//! memory at a time; `history` and the per-step `messages` copies are skipped unbuilt
//! where possible).
//!
//! The file is one session (named after the file) and one run. Each `trajectory[i]` is a
//! [`Item::Turn`] and a call with id `step-<i+1>`: the tool is the first word of `action`
//! and the args are `{"args": <the rest of the command>}`; its result is
//! `{content: [observation]}`. SWE-agent records no error flag, no usage per step and no
//! compactions. Steps with an empty action are counted as skipped (with their
//! observation).

use std::io::{self, BufRead, Seek};

use loopguard_events::{Ids, OwnedOutcome};
use serde_json::{json, Value};

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
        stats: ReadStats::default(),
        sink,
        action: None,
        observation: None,
    };
    let mut stats = ReadStats::default();
    walk::walk(input, &mut walker, &mut stats)?;
    stats.absorb_skips(walker.stats);
    Ok(stats)
}

struct Steps<'a> {
    ids: Ids,
    stats: ReadStats,
    sink: &'a mut dyn Sink,
    /// The step being read: its action and observation, in whatever order they come.
    action: Option<(Pos, Value)>,
    observation: Option<(Pos, Value)>,
}

impl Walker for Steps<'_> {
    fn want(&mut self, path: &[Seg]) -> Want {
        match path {
            [] => Want::Descend,
            [Seg::Key(k)] if k == "trajectory" => Want::Descend,
            [Seg::Key(k), Seg::Index(_)] if k == "trajectory" => Want::Descend,
            [Seg::Key(k), Seg::Index(_), Seg::Key(field)] if k == "trajectory" => {
                if matches!(field.as_str(), "action" | "observation") {
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
        let Some((pos, action)) = action else {
            return;
        };
        let action = action.as_str().unwrap_or("").trim();
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
            Some(call) => self.sink.push(pos, call),
            None => {
                self.stats.skip(SkipReason::MalformedEntry, pos.line, || {
                    format!("trajectory step {} has an empty action", index + 1)
                });
                return;
            }
        }
        if let Some((pos, observation)) = observation {
            let text = match observation {
                Value::String(s) => s,
                Value::Null => String::new(),
                other => other.to_string(),
            };
            let outcome = OwnedOutcome::Result(item::text_result(&text, None));
            self.sink.push(pos, item::result(&self.ids, &id, outcome));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testing::{read_bytes, read_corpus};
    use crate::Format;
    use loopguard_events::Event;

    #[test]
    fn maps_steps() {
        let doc = r#"{
  "environment": "swe",
  "trajectory": [
    {"action": "grep -n foo x.py", "observation": "", "thought": "t", "messages": [{"role": "system"}]},
    {"thought": "t", "observation": "3:foo", "action": "grep -n foo x.py"},
    {"action": "", "observation": ""}
  ],
  "history": [{"role": "user", "content": "big"}],
  "info": {"exit_status": "exit_cost"}
}"#;
        let r = read_bytes(Format::SweAgent, doc.as_bytes(), "inst");
        assert_eq!((r.calls(), r.results()), (2, 2));
        match &r.items[1] {
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
        assert_eq!(r.stats.lines, 10);
    }

    /// SOURCES.md: 76 steps; step 75 has an empty action.
    #[test]
    fn corpus_seaborn_loop() {
        let Some(r) = read_corpus(Format::SweAgent, "swe-agent/mwaskom__seaborn-3187.traj") else {
            return;
        };
        assert_eq!((r.calls(), r.results(), r.compactions()), (75, 75, 0));
        assert_eq!(r.stats.skipped_for(SkipReason::MalformedEntry), 1);
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
}
