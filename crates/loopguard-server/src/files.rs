//! Reading the files the server is pointed at (config, token) with a size cap, so that a
//! wrong path (a device, a huge log) costs an error rather than the process' memory.

use std::io::Read;
use std::path::Path;

/// Why a capped read failed.
#[derive(Debug, thiserror::Error)]
pub(crate) enum ReadError {
    /// The file cannot be opened or read.
    #[error("{0}")]
    Io(#[from] std::io::Error),
    /// It holds more than the cap.
    #[error("larger than {limit} bytes")]
    TooLarge {
        /// The cap.
        limit: u64,
    },
}

/// The whole contents of `path`, refused once it passes `limit` bytes: at most `limit + 1`
/// bytes are ever read, whatever the file claims to be (`/dev/zero` included).
pub(crate) fn read_capped(path: &Path, limit: u64) -> Result<Vec<u8>, ReadError> {
    let file = std::fs::File::open(path)?;
    let hint = file.metadata().map(|m| m.len().min(limit)).unwrap_or(0);
    let mut bytes = Vec::with_capacity(usize::try_from(hint).unwrap_or(0) + 1);
    file.take(limit.saturating_add(1)).read_to_end(&mut bytes)?;
    if bytes.len() as u64 > limit {
        return Err(ReadError::TooLarge { limit });
    }
    Ok(bytes)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_up_to_the_cap() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("f");
        std::fs::write(&path, b"12345").unwrap();
        assert_eq!(read_capped(&path, 5).unwrap(), b"12345");
        assert!(matches!(
            read_capped(&path, 4),
            Err(ReadError::TooLarge { limit: 4 })
        ));
        assert!(matches!(
            read_capped(&dir.path().join("nope"), 4),
            Err(ReadError::Io(_))
        ));
        #[cfg(unix)]
        assert!(matches!(
            read_capped(Path::new("/dev/zero"), 1 << 20),
            Err(ReadError::TooLarge { .. })
        ));
    }
}
