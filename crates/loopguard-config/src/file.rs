//! Reading a file a front end is pointed at (a config, a token, a certificate): a regular
//! file only, and at most a cap. A FIFO would block the reader until some other process
//! writes to it (a reload that never ends, a shutdown that waits for it), a device such as
//! `/dev/zero` never ends, a directory is no document: each is refused with what it is,
//! before a byte is read.

use std::fs::{File, Metadata};
use std::io::{self, Read};
use std::path::Path;

/// Why a capped read failed.
#[derive(Debug, thiserror::Error)]
pub enum ReadError {
    /// The file cannot be opened or read, or is not a regular file (the message says what
    /// it is).
    #[error("{0}")]
    Io(#[from] io::Error),
    /// It holds more than the cap.
    #[error("larger than {limit} bytes")]
    TooLarge {
        /// The cap.
        limit: u64,
    },
}

/// The whole contents of the regular file at `path`, refused once it passes `limit`
/// bytes: at most `limit + 1` bytes are ever read. Anything but a regular file (after
/// symbolic links) is refused without waiting on it: the file is opened non-blocking, so
/// that opening a FIFO with no writer returns at once, and its type is checked on the
/// open descriptor (no window between a check and the open).
pub fn read_capped(path: &Path, limit: u64) -> Result<Vec<u8>, ReadError> {
    let file = open_regular(path)?;
    let hint = file.metadata().map(|m| m.len().min(limit)).unwrap_or(0);
    let mut bytes = Vec::with_capacity(usize::try_from(hint).unwrap_or(0).saturating_add(1));
    // `take` rather than the length the file claims: it may grow while it is read.
    file.take(limit.saturating_add(1)).read_to_end(&mut bytes)?;
    if bytes.len() as u64 > limit {
        return Err(ReadError::TooLarge { limit });
    }
    Ok(bytes)
}

fn open_regular(path: &Path) -> io::Result<File> {
    let mut options = std::fs::OpenOptions::new();
    options.read(true);
    #[cfg(unix)]
    {
        use std::os::unix::fs::OpenOptionsExt;
        // Non-blocking only matters to the open of a FIFO or a device; reads of a regular
        // file ignore the flag.
        let nonblocking = rustix::fs::OFlags::NONBLOCK.bits();
        options.custom_flags(i32::try_from(nonblocking).unwrap_or(0));
    }
    let file = options.open(path)?;
    match not_regular(&file.metadata()?) {
        None => Ok(file),
        Some(what) => Err(io::Error::new(
            io::ErrorKind::InvalidInput,
            format!("is {what}, not a regular file"),
        )),
    }
}

/// What a file that is not a regular file is, in words; `None` for a regular file.
fn not_regular(meta: &Metadata) -> Option<&'static str> {
    let kind = meta.file_type();
    if kind.is_file() {
        return None;
    }
    if kind.is_dir() {
        return Some("a directory");
    }
    #[cfg(unix)]
    {
        use std::os::unix::fs::FileTypeExt;
        if kind.is_fifo() {
            return Some("a FIFO (named pipe)");
        }
        if kind.is_char_device() {
            return Some("a character device");
        }
        if kind.is_block_device() {
            return Some("a block device");
        }
        if kind.is_socket() {
            return Some("a socket");
        }
    }
    Some("not a file")
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
        let e = read_capped(dir.path(), 4).unwrap_err();
        assert_eq!(e.to_string(), "is a directory, not a regular file");
    }

    #[cfg(unix)]
    #[test]
    fn fifos_and_devices_are_refused_without_waiting() {
        let dir = tempfile::tempdir().unwrap();
        let fifo = dir.path().join("fifo");
        let made = std::process::Command::new("mkfifo")
            .arg(&fifo)
            .status()
            .expect("mkfifo");
        assert!(made.success());
        // No writer ever opens it: a blocking open would never return.
        let started = std::time::Instant::now();
        let e = read_capped(&fifo, 1 << 20).unwrap_err();
        assert_eq!(e.to_string(), "is a FIFO (named pipe), not a regular file");
        assert!(started.elapsed() < std::time::Duration::from_secs(5));
        let e = read_capped(Path::new("/dev/zero"), 1 << 20).unwrap_err();
        assert_eq!(e.to_string(), "is a character device, not a regular file");
        // A link to a regular file is followed.
        let target = dir.path().join("target");
        std::fs::write(&target, b"ok").unwrap();
        let link = dir.path().join("link");
        std::os::unix::fs::symlink(&target, &link).unwrap();
        assert_eq!(read_capped(&link, 2).unwrap(), b"ok");
    }
}
