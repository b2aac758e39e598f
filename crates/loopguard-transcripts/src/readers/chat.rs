//! Containers of plain API message arrays, shared by the OpenAI and Anthropic readers: a
//! JSON array of messages, an array of conversations (arrays, or objects holding
//! `messages` or `traj` as tau-bench writes them), an object with `messages`, or JSON
//! Lines of messages or of conversations. The dialects map single messages.

use std::collections::VecDeque;
use std::io::{self, BufRead, Seek, SeekFrom};

use loopguard_events::Ids;
use serde_json::Value;

use crate::item::{self, Pos, Sink};
use crate::readers::lines::{self, Lines};
use crate::readers::walk::{self, Seg, Walker, Want};
use crate::stats::{ReadStats, SkipReason};
use crate::ReadOptions;

/// How one dialect maps one message.
pub(crate) trait Dialect {
    /// Maps `message` of `conversation`, found at `pos`.
    fn message(
        &mut self,
        conversation: &mut Conversation,
        pos: Pos,
        message: &Value,
        stats: &mut ReadStats,
        sink: &mut dyn Sink,
    );
}

/// One conversation: a session of its own, split into runs at user prompts.
pub(crate) struct Conversation {
    /// Session and current run.
    pub ids: Ids,
    runs: u64,
    /// Call ids of the latest calls still waiting for a result, oldest first: results
    /// without an id answer them in order.
    pub unanswered: VecDeque<String>,
    synthesized: u64,
    /// Model messages seen: names the batch of a message's parallel calls.
    messages: u64,
}

impl Conversation {
    fn new(session: &str) -> Self {
        Self {
            ids: item::ids(session, Some("turn-0")),
            runs: 0,
            unanswered: VecDeque::new(),
            synthesized: 0,
            messages: 0,
        }
    }

    /// A new model message: the name of the batch its tool calls form.
    pub fn next_batch(&mut self) -> String {
        self.messages += 1;
        format!("message-{}", self.messages)
    }

    /// A user prompt: a new run.
    pub fn start_run(&mut self) {
        self.runs += 1;
        self.ids.run = Some(format!("turn-{}", self.runs));
        self.unanswered.clear();
    }

    /// A call id for a call that has none.
    pub fn synthesize_id(&mut self) -> String {
        self.synthesized += 1;
        format!("call-{}", self.synthesized)
    }

    /// Records a call waiting for its result.
    pub fn expect(&mut self, id: &str) {
        if self.unanswered.len() >= 1024 {
            self.unanswered.pop_front();
        }
        self.unanswered.push_back(id.to_owned());
    }

    /// The id a result answers: its own when it has one (which is then no longer
    /// waiting), else the oldest waiting call's.
    pub fn answer(&mut self, id: Option<&str>) -> Option<String> {
        match id.and_then(loopguard::text::non_blank) {
            Some(id) => {
                if let Some(i) = self.unanswered.iter().position(|w| w == id) {
                    self.unanswered.remove(i);
                }
                Some(id.to_owned())
            }
            None => self.unanswered.pop_front(),
        }
    }
}

/// Reads message arrays in any of the containers, mapping messages with `dialect`.
pub(crate) fn read<R: BufRead + Seek>(
    mut input: R,
    options: &ReadOptions<'_>,
    dialect: &mut impl Dialect,
    sink: &mut dyn Sink,
) -> io::Result<ReadStats> {
    let start = input.stream_position()?;
    let jsonl = lines::is_json_lines(&mut input, options.max_line)?;
    input.seek(SeekFrom::Start(start))?;
    let mut walker = ChatWalker {
        dialect,
        hint: options.session_hint,
        root: None,
        conversations: 0,
        stats: ReadStats::default(),
        sink,
    };
    if jsonl {
        let mut stats = ReadStats::default();
        let mut lines = Lines::with_options(input, options)?;
        while let Some(line) = lines.next_line(&mut stats)? {
            let mut scratch = None;
            match lines::parse::<Value>(line.bytes, &mut scratch) {
                Ok((value, repaired)) => {
                    walker.stats.repaired += u64::from(repaired);
                    walker.element(line.pos, value);
                }
                Err(e) => lines::skip_unparsable(&mut walker.stats, &line, &e, false),
            }
        }
        let mut out = walker.stats;
        out.lines = stats.lines;
        out.bytes = stats.bytes;
        out.absorb(stats);
        Ok(out)
    } else {
        let mut stats = ReadStats::default();
        walk::walk(input, &mut walker, &mut stats)?;
        let mut out = walker.stats;
        out.lines = stats.lines;
        out.bytes = stats.bytes;
        out.absorb(stats);
        Ok(out)
    }
}

struct ChatWalker<'a, D> {
    dialect: &'a mut D,
    hint: &'a str,
    /// The conversation of messages found directly in the root container.
    root: Option<Conversation>,
    conversations: u64,
    stats: ReadStats,
    sink: &'a mut dyn Sink,
}

impl<D: Dialect> ChatWalker<'_, D> {
    /// A top-level element: a message of the root conversation, or a conversation.
    fn element(&mut self, pos: Pos, value: Value) {
        match value {
            Value::Object(ref map) if map.contains_key("role") => {
                let hint = self.hint;
                let conversation = self.root.get_or_insert_with(|| Conversation::new(hint));
                self.dialect
                    .message(conversation, pos, &value, &mut self.stats, self.sink);
            }
            Value::Array(messages) => self.conversation(pos, &messages),
            Value::Object(mut map) => {
                let messages =
                    ["messages", "traj", "trajectory"]
                        .iter()
                        .find_map(|k| match map.remove(*k) {
                            Some(Value::Array(m)) => Some(m),
                            _ => None,
                        });
                match messages {
                    Some(messages) => self.conversation(pos, &messages),
                    None => self.stats.skip(SkipReason::MalformedEntry, pos.line, || {
                        "object without role, messages or traj".into()
                    }),
                }
            }
            _ => self.stats.skip(SkipReason::NotAnObject, pos.line, || {
                "not a message or a conversation".into()
            }),
        }
    }

    fn conversation(&mut self, pos: Pos, messages: &[Value]) {
        let session = format!("{}#{}", self.hint, self.conversations);
        self.conversations += 1;
        let mut conversation = Conversation::new(&session);
        for message in messages {
            if message.is_object() {
                self.dialect
                    .message(&mut conversation, pos, message, &mut self.stats, self.sink);
            } else {
                self.stats.skip(SkipReason::NotAnObject, pos.line, || {
                    "message that is not an object".into()
                });
            }
        }
    }
}

impl<D: Dialect> Walker for ChatWalker<'_, D> {
    fn want(&mut self, path: &[Seg]) -> Want {
        match path {
            [] => Want::Descend,
            [Seg::Index(_)] => Want::Whole,
            [Seg::Key(k)] if matches!(k.as_str(), "messages" | "traj") => Want::Descend,
            [Seg::Key(_)] => Want::Skip,
            [Seg::Key(_), Seg::Index(_)] => Want::Whole,
            _ => Want::Skip,
        }
    }

    fn whole(&mut self, path: &[Seg], pos: Pos, value: Value) {
        match path {
            [Seg::Index(_)] => self.element(pos, value),
            [Seg::Key(_), Seg::Index(_)] if value.is_object() => self.element(pos, value),
            _ => self.stats.skip(SkipReason::NotAnObject, pos.line, || {
                "message that is not an object".into()
            }),
        }
    }
}

/// The text of a message or result content: a string, or the `text` of its text parts.
pub(crate) fn content_text(content: &Value) -> String {
    crate::json_ref::joined_text(content)
}
