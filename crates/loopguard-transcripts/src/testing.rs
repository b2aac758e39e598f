//! Test helpers: the shared corpus (read in place, never copied) and in-memory reading.

use std::io::Cursor;
use std::path::PathBuf;

use crate::{read, Format, Item, Pos, ReadOptions, ReadStats};

/// A file of the shared corpus (`LOOPGUARD_SHARED_DIR`, else `../shared` beside the
/// repository), or `None` after printing a SKIPPED line when the corpus is absent.
pub fn corpus(relative: &str) -> Option<PathBuf> {
    shared_file("corpus", relative)
}

/// A file of one of the shared corpora (`corpus`, `corpus2`), as [`corpus`] finds it.
pub fn shared_file(set: &str, relative: &str) -> Option<PathBuf> {
    let shared = std::env::var_os("LOOPGUARD_SHARED_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../../shared"));
    let path = shared.join(set).join(relative);
    if path.is_file() {
        Some(path)
    } else {
        eprintln!("SKIPPED: corpus file {relative} not found (set LOOPGUARD_SHARED_DIR to the shared folder)");
        None
    }
}

/// What a reader made of some bytes.
pub struct Read {
    pub items: Vec<(Pos, Item)>,
    pub stats: ReadStats,
}

impl Read {
    pub fn calls(&self) -> usize {
        self.count(|e| matches!(e, loopguard_events::Event::Call { .. }))
    }

    pub fn results(&self) -> usize {
        self.count(|e| matches!(e, loopguard_events::Event::Result { .. }))
    }

    pub fn compactions(&self) -> usize {
        self.count(|e| matches!(e, loopguard_events::Event::Compaction { .. }))
    }

    fn count(&self, f: impl Fn(&loopguard_events::Event) -> bool) -> usize {
        self.items
            .iter()
            .filter(|(_, i)| matches!(i, Item::Event(e) if f(e)))
            .count()
    }

    /// (call id, tool, args) of every call, in order.
    pub fn call_list(&self) -> Vec<(String, String, serde_json::Value)> {
        self.items
            .iter()
            .filter_map(|(_, i)| match i {
                Item::Event(loopguard_events::Event::Call {
                    call_id,
                    tool,
                    args,
                    ..
                }) => Some((
                    call_id.clone().unwrap_or_default(),
                    tool.clone(),
                    args.clone(),
                )),
                _ => None,
            })
            .collect()
    }

    /// The outcome of every result, in order.
    pub fn outcomes(&self) -> Vec<&loopguard_events::OwnedOutcome> {
        self.items
            .iter()
            .filter_map(|(_, i)| match i {
                Item::Event(loopguard_events::Event::Result { outcome, .. }) => Some(outcome),
                _ => None,
            })
            .collect()
    }

    /// Every result, in order: the id of its call, and whether it failed (an error, or a
    /// result marked `isError`).
    pub fn result_list(&self) -> Vec<(String, bool)> {
        use loopguard_events::{Event, OwnedOutcome};
        self.items
            .iter()
            .filter_map(|(_, i)| match i {
                Item::Event(Event::Result {
                    call_id, outcome, ..
                }) => Some((
                    call_id.clone().unwrap_or_default(),
                    match outcome {
                        OwnedOutcome::Error(_) => true,
                        OwnedOutcome::Result(v) => v["isError"] == true,
                        OwnedOutcome::Nothing => false,
                    },
                )),
                _ => None,
            })
            .collect()
    }

    /// The 1-based numbers (in call order) of the calls whose result failed: an error, or
    /// a result marked `isError`.
    pub fn failed_calls(&self) -> Vec<usize> {
        use loopguard_events::{Event, OwnedOutcome};
        let ids: Vec<String> = self.call_list().into_iter().map(|(id, _, _)| id).collect();
        let mut out: Vec<usize> = self
            .items
            .iter()
            .filter_map(|(_, i)| match i {
                Item::Event(Event::Result {
                    call_id, outcome, ..
                }) => {
                    let failed = match outcome {
                        OwnedOutcome::Error(_) => true,
                        OwnedOutcome::Result(v) => v["isError"] == true,
                        OwnedOutcome::Nothing => false,
                    };
                    let id = call_id.as_ref()?;
                    failed.then(|| ids.iter().position(|c| c == id).map(|n| n + 1))?
                }
                _ => None,
            })
            .collect();
        out.sort_unstable();
        out
    }

    /// Every message, in order: its role, text, reasoning and whether it carried calls.
    pub fn messages(&self) -> Vec<(loopguard::Role, &str, Option<&str>, Option<bool>)> {
        self.items
            .iter()
            .filter_map(|(_, i)| match i {
                Item::Event(loopguard_events::Event::Message { message: m, .. }) => Some((
                    m.role,
                    m.text.as_str(),
                    m.reasoning.as_deref(),
                    m.has_tool_calls,
                )),
                _ => None,
            })
            .collect()
    }

    /// The messages of `role`, their text only.
    pub fn said(&self, role: loopguard::Role) -> Vec<&str> {
        self.messages()
            .into_iter()
            .filter(|m| m.0 == role)
            .map(|m| m.1)
            .collect()
    }

    /// Distinct runs of the calls, results and compactions, in order of first appearance.
    pub fn runs(&self) -> Vec<(String, Option<String>)> {
        let mut out: Vec<(String, Option<String>)> = Vec::new();
        for (_, item) in &self.items {
            if let Item::Event(e) = item {
                if matches!(e, loopguard_events::Event::Message { .. }) {
                    continue;
                }
                let key = (e.ids().session.clone(), e.ids().run.clone());
                if !out.contains(&key) {
                    out.push(key);
                }
            }
        }
        out
    }
}

/// Reads `bytes` as `format`.
pub fn read_bytes(format: Format, bytes: &[u8], session_hint: &str) -> Read {
    let mut items = Vec::new();
    let stats = read(
        format,
        Cursor::new(bytes),
        &ReadOptions::new(session_hint),
        &mut items,
    )
    .expect("in-memory reads do not fail");
    Read { items, stats }
}

/// Reads a corpus file as `format`.
pub fn read_corpus(format: Format, relative: &str) -> Option<Read> {
    let path = corpus(relative)?;
    let bytes = std::fs::read(&path).unwrap();
    Some(read_bytes(format, &bytes, "corpus"))
}

/// Reads a file of the second corpus (`corpus2`) as `format`.
pub fn read_corpus2(format: Format, relative: &str) -> Option<Read> {
    let path = shared_file("corpus2", relative)?;
    let bytes = std::fs::read(&path).unwrap();
    Some(read_bytes(format, &bytes, "corpus2"))
}
