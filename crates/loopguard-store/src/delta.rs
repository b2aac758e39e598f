//! Byte deltas between two encodings of a run's state, so that the SQLite store can log a
//! few dozen bytes per event instead of rewriting the whole state (see
//! [`sqlite_file`](crate::sqlite_file) for where they are kept).
//!
//! An event changes a state in a few places: a record is appended to the history (and,
//! when the window is full, the oldest dropped, which shifts everything after it), an
//! outcome is filled in, a counter and a time move. [`diff`] finds the long runs of the
//! new encoding that the old one already holds, at whatever offset, and writes the new
//! encoding as copies from the old one and literal bytes; [`apply`] rebuilds it.
//!
//! A general compressor given the old state as a dictionary finds the same copies (zstd
//! at level 1 gives deltas of the same size) but spends about 3 µs per delta loading the
//! dictionary; this takes well under one (see the `delta` benchmark of this crate).
//!
//! ## Format
//!
//! `varint(new length)`, then operations until the end: `varint(len << 1)` followed by
//! `varint(offset)` copies `len` bytes of the old encoding from `offset`;
//! `varint(len << 1 | 1)` followed by `len` bytes adds them. Varints are LEB128.

/// Bytes compared to find where a copy starts.
const ANCHOR: usize = 8;
/// Positions of the new encoding probed for an anchor after a miss: the step starts here
/// and doubles with each miss in a row (new bytes, a fresh record, come in runs), up to
/// [`MAX_STRIDE`]; a copy found after a long step is extended backwards.
const STRIDE: usize = 4;
/// The longest step between probes.
const MAX_STRIDE: usize = 32;
/// Searches of the whole old encoding allowed per delta: a new encoding that shares
/// little with the old one costs a bounded amount of work, then is written whole.
const MAX_SEARCHES: usize = 96;
/// The largest encoding [`apply`] builds: bad bytes cannot make it allocate more.
pub const MAX_LEN: usize = 64 << 20;

/// Why a delta cannot be applied.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum DeltaError {
    /// The delta ends inside a number or an operation.
    #[error("the delta is truncated")]
    Truncated,
    /// A copy reaches outside the old encoding.
    #[error("a copy reaches outside the base state")]
    OutOfBounds,
    /// The delta builds more or fewer bytes than it announces, or more than [`MAX_LEN`].
    #[error("the delta's length does not add up")]
    Length,
}

/// A delta that turns `old` into `new`, or `None` when it would not be much smaller than
/// `new` itself (more than half its size): write `new` whole then.
pub fn diff(old: &[u8], new: &[u8]) -> Option<Vec<u8>> {
    let budget = new.len() / 2;
    let mut out = Vec::with_capacity(64);
    put_varint(&mut out, new.len() as u64);
    let mut searches = 0;
    // `shift` is where the last copy ended in `old` minus where it ended in `new`: edits
    // keep the rest of the encoding in place, or shifted by what was removed.
    let mut shift: isize = 0;
    let (mut i, mut literal, mut stride) = (0, 0, STRIDE);
    while i + ANCHOR <= new.len() {
        let anchor = &new[i..i + ANCHOR];
        let at = i as isize + shift;
        let aligned = (at >= 0 && old.get(at as usize..at as usize + ANCHOR) == Some(anchor))
            .then_some(at as usize);
        let found = aligned.or_else(|| {
            (searches < MAX_SEARCHES).then(|| {
                searches += 1;
                memchr::memmem::find(old, anchor)
            })?
        });
        let Some(mut j) = found else {
            i += stride;
            stride = (stride * 2).min(MAX_STRIDE);
            if out.len() + (i - literal) > budget {
                return None;
            }
            continue;
        };
        // Take back the literal bytes just before that match too.
        while i > literal && j > 0 && old[j - 1] == new[i - 1] {
            i -= 1;
            j -= 1;
        }
        stride = STRIDE;
        let len = common_prefix(&old[j..], &new[i..]);
        put_add(&mut out, &new[literal..i]);
        put_varint(&mut out, (len as u64) << 1);
        put_varint(&mut out, j as u64);
        i += len;
        literal = i;
        shift = j as isize - (i - len) as isize;
        if out.len() > budget {
            return None;
        }
    }
    put_add(&mut out, &new[literal..]);
    (out.len() <= budget).then_some(out)
}

/// Rebuilds the new encoding from `old` and a [`diff`] of it.
pub fn apply(old: &[u8], delta: &[u8]) -> Result<Vec<u8>, DeltaError> {
    let mut rest = delta;
    let len = usize::try_from(take_varint(&mut rest)?).map_err(|_| DeltaError::Length)?;
    if len > MAX_LEN {
        return Err(DeltaError::Length);
    }
    let mut out = Vec::with_capacity(len);
    while !rest.is_empty() {
        let op = take_varint(&mut rest)?;
        let n = usize::try_from(op >> 1).map_err(|_| DeltaError::Length)?;
        if n > len - out.len() {
            return Err(DeltaError::Length);
        }
        if op & 1 == 1 {
            let bytes = rest.get(..n).ok_or(DeltaError::Truncated)?;
            out.extend_from_slice(bytes);
            rest = &rest[n..];
        } else {
            let from =
                usize::try_from(take_varint(&mut rest)?).map_err(|_| DeltaError::OutOfBounds)?;
            let bytes = from
                .checked_add(n)
                .and_then(|end| old.get(from..end))
                .ok_or(DeltaError::OutOfBounds)?;
            out.extend_from_slice(bytes);
        }
    }
    if out.len() != len {
        return Err(DeltaError::Length);
    }
    Ok(out)
}

fn common_prefix(a: &[u8], b: &[u8]) -> usize {
    // Eight bytes at a time, then the rest one by one.
    let mut n = 0;
    for (x, y) in a.chunks_exact(8).zip(b.chunks_exact(8)) {
        if x != y {
            break;
        }
        n += 8;
    }
    n + a[n..]
        .iter()
        .zip(&b[n..])
        .take_while(|(x, y)| x == y)
        .count()
}

fn put_add(out: &mut Vec<u8>, bytes: &[u8]) {
    if !bytes.is_empty() {
        put_varint(out, (bytes.len() as u64) << 1 | 1);
        out.extend_from_slice(bytes);
    }
}

fn put_varint(out: &mut Vec<u8>, mut v: u64) {
    while v >= 0x80 {
        out.push(v as u8 | 0x80);
        v >>= 7;
    }
    out.push(v as u8);
}

fn take_varint(rest: &mut &[u8]) -> Result<u64, DeltaError> {
    let mut v = 0u64;
    for shift in (0..64).step_by(7) {
        let (&b, tail) = rest.split_first().ok_or(DeltaError::Truncated)?;
        *rest = tail;
        v |= u64::from(b & 0x7f) << shift;
        if b & 0x80 == 0 {
            return Ok(v);
        }
    }
    Err(DeltaError::Length)
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    /// Bytes that look like a history: `n` records of 48 bytes, mostly random.
    fn records(seed: u64, n: usize) -> Vec<u8> {
        let mut x = seed | 1;
        (0..n * 48)
            .map(|_| {
                x ^= x << 13;
                x ^= x >> 7;
                x ^= x << 17;
                x as u8
            })
            .collect()
    }

    #[test]
    fn a_shifted_window_costs_one_record() {
        // [header][r0 .. r29][trailer] → [header'][r1 .. r30][trailer']
        let all = records(7, 31);
        let old = [&[2, 30][..], &all[..30 * 48], b"trailer-1234"].concat();
        let new = [&[2, 30][..], &all[48..], b"trailer-1235"].concat();
        let delta = diff(&old, &new).expect("small");
        assert!(delta.len() < 48 + 24, "{} bytes", delta.len());
        assert_eq!(apply(&old, &delta).unwrap(), new);
    }

    #[test]
    fn an_edit_in_place_costs_the_edit() {
        let old = records(3, 30);
        let mut new = old.clone();
        new[700..716].copy_from_slice(&[9; 16]);
        let delta = diff(&old, &new).expect("small");
        assert!(delta.len() < 40, "{} bytes", delta.len());
        assert_eq!(apply(&old, &delta).unwrap(), new);
    }

    #[test]
    fn unrelated_bytes_are_written_whole() {
        assert_eq!(diff(&records(1, 30), &records(2, 30)), None);
        assert_eq!(diff(b"", b"short"), None);
    }

    #[test]
    fn bad_deltas_are_refused() {
        let old = b"0123456789";
        assert_eq!(apply(old, b""), Err(DeltaError::Truncated));
        // Announces 4 bytes, copies 4 from offset 8 of a 10-byte base.
        assert_eq!(apply(old, &[4, 8, 8]), Err(DeltaError::OutOfBounds));
        // Announces 4, adds 2.
        assert_eq!(apply(old, &[4, 5, b'a', b'b']), Err(DeltaError::Length));
        // Adds more than announced.
        assert_eq!(apply(old, &[1, 5, b'a', b'b']), Err(DeltaError::Length));
        assert_eq!(apply(old, &[2, 5, b'a']), Err(DeltaError::Truncated));
        // A length beyond the cap allocates nothing.
        let mut huge = Vec::new();
        put_varint(&mut huge, u64::MAX);
        assert_eq!(apply(old, &huge), Err(DeltaError::Length));
        assert_eq!(apply(old, &[0xff; 11]), Err(DeltaError::Length));
    }

    proptest! {
        #[test]
        fn any_delta_rebuilds_the_new_bytes(
            old in proptest::collection::vec(any::<u8>(), 0..600),
            new in proptest::collection::vec(any::<u8>(), 0..600),
        ) {
            if let Some(delta) = diff(&old, &new) {
                prop_assert_eq!(apply(&old, &delta).unwrap(), new);
            }
        }

        #[test]
        fn edits_give_small_deltas_that_rebuild(
            seed in 1u64..,
            edits in proptest::collection::vec((0usize..1440, 0usize..24, proptest::collection::vec(any::<u8>(), 0..24)), 0..4),
        ) {
            let old = records(seed, 30);
            let mut new = old.clone();
            for (at, removed, inserted) in &edits {
                let at = (*at).min(new.len());
                let end = (at + removed).min(new.len());
                new.splice(at..end, inserted.iter().copied());
            }
            let delta = diff(&old, &new);
            prop_assert!(delta.is_some(), "{} edits gave no delta", edits.len());
            prop_assert_eq!(apply(&old, &delta.unwrap()).unwrap(), new);
        }

        #[test]
        fn garbage_never_panics(
            old in proptest::collection::vec(any::<u8>(), 0..64),
            delta in proptest::collection::vec(any::<u8>(), 0..64),
        ) {
            let _ = apply(&old, &delta);
        }
    }
}
