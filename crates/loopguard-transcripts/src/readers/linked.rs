//! Files read for what they say about other transcripts (a Claude Code parent's
//! spawns, OpenClaw's session store): read once while unchanged, however many
//! transcripts beside them ask.

use std::any::Any;
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
