//! Shared plumbing of the commands: reading files, reporting fatal errors, choosing between human and
//! JSON output.

use std::io::IsTerminal;
use std::path::Path;

use crate::EXIT_FATAL;

/// A file's text, with an error a user can act on.
pub fn read_text(path: &Path) -> Result<String, String> {
    let bytes = std::fs::read(path).map_err(|e| format!("cannot read {}: {e}", path.display()))?;
    String::from_utf8(bytes).map_err(|e| {
        format!(
            "{}: not valid UTF-8 (invalid byte at offset {})",
            path.display(),
            e.utf8_error().valid_up_to()
        )
    })
}

/// Prints `loopguard: error: MESSAGE` on stderr; returns the fatal exit status.
pub fn fatal(message: &str) -> u8 {
    eprintln!("loopguard: error: {message}");
    EXIT_FATAL
}

/// Whether to print JSON: asked for, or stdout is not a terminal.
pub fn wants_json(flag: bool) -> bool {
    flag || !std::io::stdout().is_terminal()
}
