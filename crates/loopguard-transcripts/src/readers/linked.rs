//! Files read for what they say about other transcripts (a Claude Code parent's
//! spawns, OpenClaw's session store): read once while unchanged, however many
//! transcripts beside them ask.

use std::any::Any;
use std::collections::HashMap;
use std::fs::File;
use std::io::{self, BufReader};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::SystemTime;

/// A file read: its path, size and modification time, and what it said.
type Entry = (PathBuf, u64, Option<SystemTime>, Arc<dyn Any + Send + Sync>);

/// Files remembered at once (the oldest is forgotten first).
const MAX_FILES: usize = 32;

/// What `read` makes of the file at `path`, read once while the file is unchanged
/// (`None`: it cannot be opened or read).
pub(crate) fn cached<T: Any + Send + Sync>(
    path: &Path,
    read: impl FnOnce(BufReader<File>) -> io::Result<T>,
) -> Option<Arc<T>> {
    static CACHE: Mutex<Vec<Entry>> = Mutex::new(Vec::new());
    let meta = std::fs::metadata(path).ok()?;
    let (len, modified) = (meta.len(), meta.modified().ok());
    let found = CACHE
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .iter()
        .find(|(p, l, m, _)| p == path && *l == len && *m == modified)
        .map(|(.., v)| Arc::clone(v));
    if let Some(found) = found.and_then(|v| v.downcast::<T>().ok()) {
        return Some(found);
    }
    let value = Arc::new(read(BufReader::new(File::open(path).ok()?)).ok()?);
    let mut cache = CACHE.lock().unwrap_or_else(|e| e.into_inner());
    cache.retain(|(p, ..)| p != path);
    if cache.len() >= MAX_FILES {
        cache.remove(0);
    }
    let any: Arc<dyn Any + Send + Sync> = value.clone();
    cache.push((path.to_owned(), len, modified, any));
    Some(value)
}

/// Which run of a parent session spawned each of its sub-agents, read from the parent's
/// transcript: the sub-agent's name there (a Claude Code agent id without its `agent-`
/// prefix, an OpenClaw session key) to the run id, the parent's runs numbered as a read of
/// it numbers them ([`claude_code::spawns_of`](super::claude_code::spawns_of),
/// [`openclaw::spawns_of`](super::openclaw::spawns_of)).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Spawns {
    runs: HashMap<String, String>,
}

/// Sub-agents of one parent remembered at most.
const MAX_SPAWNS: usize = 1 << 16;

impl Spawns {
    /// Records that `run` spawned `child` (the first spawn of a name counts).
    pub(crate) fn insert(&mut self, child: String, run: String) {
        if self.runs.len() < MAX_SPAWNS {
            self.runs.entry(child).or_insert(run);
        }
    }

    /// The run that spawned `child`.
    pub fn run_of(&self, child: &str) -> Option<&str> {
        self.runs.get(child).map(String::as_str)
    }

    /// How many sub-agents are named.
    pub fn len(&self) -> usize {
        self.runs.len()
    }

    /// Whether none is.
    pub fn is_empty(&self) -> bool {
        self.runs.is_empty()
    }
}
