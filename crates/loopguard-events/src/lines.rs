//! Reading JSON Lines with a length cap, shared by `replay` and the transcript readers.
//!
//! A line longer than the cap is reported and skipped. From a file, it is skipped without
//! being held: a line that grows past [`PROBE_BYTES`] is measured first (read on without
//! being kept, up to its newline), and only a line that turns out to fit is read again
//! into memory. From a pipe, which cannot be read twice, a line is held until it passes
//! the cap; so the cap bounds what one line costs there.

use std::io::{self, BufRead, Seek, SeekFrom};

/// A line longer than this is measured before it is held (when the input can seek), so
/// that one over the cap costs at most this much memory.
pub const PROBE_BYTES: usize = 1 << 20;

/// One line read.
#[derive(Debug, PartialEq, Eq)]
pub enum Line<'a> {
    /// A line within the cap (without its `\n`).
    Text {
        /// Its bytes.
        bytes: &'a [u8],
        /// 1-based line number.
        number: u64,
        /// Byte offset of its first byte.
        offset: u64,
        /// Whether a newline ended it (false: the input ended first).
        terminated: bool,
    },
    /// A line longer than the cap, skipped.
    TooLong {
        /// 1-based line number.
        number: u64,
        /// Byte offset of its first byte.
        offset: u64,
        /// Its length in bytes (without the `\n`).
        len: u64,
    },
}

/// Reads lines of at most `max` bytes.
pub struct LineReader<R> {
    input: R,
    max: usize,
    /// Lines longer than this are measured before they are held (seekable inputs).
    probe: usize,
    /// Seeks the input back to an offset, when it can.
    rewind: Option<fn(&mut R, u64) -> io::Result<()>>,
    buf: Vec<u8>,
    /// The last line was lent from the input's buffer, this long (plus its newline, which
    /// is consumed with it when the next line is read); `None`: it is in `buf`.
    lent: Option<usize>,
    line: u64,
    offset: u64,
}

impl<R> std::fmt::Debug for LineReader<R> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("LineReader")
            .field("max", &self.max)
            .field("seekable", &self.rewind.is_some())
            .field("line", &self.line)
            .field("offset", &self.offset)
            .finish_non_exhaustive()
    }
}

fn rewind_to<R: Seek>(input: &mut R, offset: u64) -> io::Result<()> {
    input.seek(SeekFrom::Start(offset)).map(drop)
}

impl<R: BufRead> LineReader<R> {
    /// Lines of a stream that cannot seek (a pipe): a line is held until it passes `max`.
    pub fn new(input: R, max: usize) -> Self {
        Self {
            input,
            max,
            probe: PROBE_BYTES,
            rewind: None,
            buf: Vec::with_capacity(1 << 12),
            lent: None,
            line: 0,
            offset: 0,
        }
    }

    /// Lines of an input that can seek (a file), read from where it stands: a line over
    /// `max` is never held.
    pub fn seekable(mut input: R, max: usize) -> io::Result<Self>
    where
        R: Seek,
    {
        let offset = input.stream_position()?;
        Ok(Self {
            offset,
            rewind: Some(rewind_to::<R>),
            ..Self::new(input, max)
        })
    }

    /// Measures lines longer than `probe` bytes before holding them (seekable inputs;
    /// default [`PROBE_BYTES`]): the most an over-long line costs.
    pub fn with_probe(mut self, probe: usize) -> Self {
        self.probe = probe.max(1);
        self
    }

    /// The bytes of the last [`Line::Text`] read.
    pub fn text(&mut self) -> io::Result<&[u8]> {
        match self.lent {
            // Still at the front of the input's buffer: nothing was consumed since.
            Some(len) => Ok(&self.input.fill_buf()?[..len]),
            None => Ok(&self.buf),
        }
    }

    /// The longest line read.
    pub fn max(&self) -> usize {
        self.max
    }

    /// Physical lines read so far.
    pub fn lines(&self) -> u64 {
        self.line
    }

    /// Bytes consumed so far (from where reading started, for a seekable input its
    /// position).
    pub fn offset(&self) -> u64 {
        self.offset
    }

    /// The next line; `None` at the end of the input. A trailing `\r` is kept.
    pub fn next_line(&mut self) -> io::Result<Option<Line<'_>>> {
        if let Some(len) = self.lent.take() {
            self.input.consume(len + 1);
        }
        self.buf.clear();
        let start = self.offset;
        let hold = match self.rewind {
            Some(_) => self.max.min(self.probe),
            None => self.max,
        };
        // The common case: the whole line is in the input's buffer, and is lent from
        // there, uncopied.
        let whole = loop {
            match self.input.fill_buf() {
                Ok(chunk) => break memchr::memchr(b'\n', chunk).filter(|&len| len <= hold),
                Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                Err(e) => return Err(e),
            }
        };
        if let Some(len) = whole {
            self.line += 1;
            self.offset = start + len as u64 + 1;
            self.lent = Some(len);
            let number = self.line;
            return Ok(Some(Line::Text {
                bytes: self.text()?,
                number,
                offset: start,
                terminated: true,
            }));
        }
        let Some((len, terminated)) = self.read_raw(hold)? else {
            return Ok(None);
        };
        self.line += 1;
        self.offset = start + len as u64 + u64::from(terminated);
        if len > self.max {
            self.buf = Vec::with_capacity(1 << 12);
            return Ok(Some(Line::TooLong {
                number: self.line,
                offset: start,
                len: len as u64,
            }));
        }
        if len > hold {
            // Measured, and it fits: read it again, into memory this time.
            if let Some(rewind) = self.rewind {
                rewind(&mut self.input, start)?;
                self.buf.clear();
                self.buf.reserve_exact(len);
                let got = self.read_raw(len)?.map_or(0, |(n, _)| n);
                if got != len {
                    return Err(io::Error::new(
                        io::ErrorKind::UnexpectedEof,
                        "the input changed while a line was read twice",
                    ));
                }
            }
        }
        Ok(Some(Line::Text {
            bytes: &self.buf,
            number: self.line,
            offset: start,
            terminated,
        }))
    }

    /// Reads one physical line, keeping at most `hold` bytes of it in `buf`. Returns its
    /// length and whether a newline ended it, or `None` at the end of the input.
    fn read_raw(&mut self, hold: usize) -> io::Result<Option<(usize, bool)>> {
        let mut total = 0usize;
        let mut any = false;
        loop {
            let chunk = match self.input.fill_buf() {
                Ok(c) => c,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                Err(e) => return Err(e),
            };
            if chunk.is_empty() {
                return Ok(any.then_some((total, false)));
            }
            any = true;
            let (part, found) = match memchr::memchr(b'\n', chunk) {
                Some(i) => (&chunk[..i], true),
                None => (chunk, false),
            };
            let before = total;
            total += part.len();
            if total <= hold {
                self.buf.extend_from_slice(part);
            } else if before <= hold {
                // Past what may be held: let go of the part held, keep only counting.
                self.buf = Vec::new();
            }
            let used = part.len() + usize::from(found);
            self.input.consume(used);
            if found {
                return Ok(Some((total, true)));
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::{BufReader, Cursor, Read};

    /// A reader that counts the most bytes any one `Vec` of the line reader could hold:
    /// here, the capacity of its buffer after each line.
    fn lines(input: &[u8], max: usize, seekable: bool) -> Vec<(String, u64, bool)> {
        let cursor = BufReader::with_capacity(64, Cursor::new(input.to_vec()));
        let mut reader = if seekable {
            LineReader::seekable(cursor, max).unwrap()
        } else {
            LineReader::new(cursor, max)
        };
        let mut out = Vec::new();
        while let Some(line) = reader.next_line().unwrap() {
            out.push(match line {
                Line::Text {
                    bytes,
                    offset,
                    terminated,
                    ..
                } => (
                    String::from_utf8_lossy(bytes).into_owned(),
                    offset,
                    terminated,
                ),
                Line::TooLong { len, offset, .. } => (format!("<{len} bytes>"), offset, true),
            });
        }
        out
    }

    #[test]
    fn lines_offsets_and_the_last_line() {
        for seekable in [false, true] {
            assert_eq!(
                lines(b"a\r\n\nbb\nccc", 100, seekable),
                [
                    ("a\r".into(), 0, true),
                    ("".into(), 3, true),
                    ("bb".into(), 4, true),
                    ("ccc".into(), 7, false)
                ]
            );
        }
    }

    #[test]
    fn long_lines_are_reported_with_their_length() {
        let mut input = b"x\n".to_vec();
        input.extend(std::iter::repeat_n(b'y', 5000));
        input.extend(b"\nz");
        for seekable in [false, true] {
            let got = lines(&input, 100, seekable);
            assert_eq!(got[1], ("<5000 bytes>".into(), 2, true));
            assert_eq!(got[2], ("z".into(), 5003, false));
        }
    }

    /// From a file, a line past the probe that fits the cap is read again; one over the
    /// cap is never held: the buffer never grows past the probe.
    #[test]
    fn from_a_file_over_long_lines_are_never_held() {
        let big = PROBE_BYTES * 3;
        let mut input = Vec::new();
        input.extend(std::iter::repeat_n(b'a', PROBE_BYTES * 2));
        input.push(b'\n');
        input.extend(std::iter::repeat_n(b'b', big + 1));
        input.extend(b"\nend\n");
        let mut reader =
            LineReader::seekable(BufReader::new(Cursor::new(input.clone())), big).unwrap();
        match reader.next_line().unwrap().unwrap() {
            Line::Text { bytes, .. } => assert_eq!(bytes.len(), PROBE_BYTES * 2),
            other => panic!("{other:?}"),
        }
        match reader.next_line().unwrap().unwrap() {
            Line::TooLong { len, .. } => assert_eq!(len as usize, big + 1),
            other => panic!("{other:?}"),
        }
        assert!(
            reader.buf.capacity() <= PROBE_BYTES + (8 << 10),
            "held {} bytes of the over-long line",
            reader.buf.capacity()
        );
        assert!(matches!(
            reader.next_line().unwrap().unwrap(),
            Line::Text { bytes: b"end", .. }
        ));
        assert!(reader.next_line().unwrap().is_none());
        let mut rest = Vec::new();
        reader.input.read_to_end(&mut rest).unwrap();
        assert!(rest.is_empty());
    }

    /// A small probe: every line past it is measured, then read again; the lines are
    /// the same as from a pipe.
    #[test]
    fn measured_lines_are_the_lines_a_pipe_gives() {
        let input = b"short\na line longer than the probe\nx\n\nanother long line here\ntail";
        for max in [1, 5, 12, 30, 100] {
            let mut piped = LineReader::new(&input[..], max);
            let mut measured = LineReader::seekable(Cursor::new(&input[..]), max)
                .unwrap()
                .with_probe(4);
            loop {
                let a = piped.next_line().unwrap().map(|l| format!("{l:?}"));
                let b = measured.next_line().unwrap().map(|l| format!("{l:?}"));
                assert_eq!(a, b, "max {max}");
                if a.is_none() {
                    break;
                }
            }
        }
    }

    #[test]
    fn a_seekable_reader_starts_where_the_input_stands() {
        let mut cursor = Cursor::new(b"skip\nline\n".to_vec());
        cursor.set_position(5);
        let mut reader = LineReader::seekable(cursor, 100).unwrap();
        match reader.next_line().unwrap().unwrap() {
            Line::Text { bytes, offset, .. } => assert_eq!((bytes, offset), (&b"line"[..], 5)),
            other => panic!("{other:?}"),
        }
    }
}
