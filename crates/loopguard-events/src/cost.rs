//! What parsing a JSON text into `serde_json` values may cost in memory, bounded from the
//! text in one pass before it is parsed: the server reserves it from its memory budget for
//! each request body, `scan` refuses a line whose parse would pass its live budget.

/// The most [`parse_cost`] can be per byte of text (JSON such as `[{"a":0},…]`, an object
/// per 8 bytes); the measured cost of that shape is about 88 bytes per byte.
pub const MAX_COST_PER_BODY_BYTE: usize = 128;

/// Texts up to this size are not scanned: they reserve [`MAX_COST_PER_BODY_BYTE`] times
/// their size, a few megabytes at most, which saves the scan on the common small request.
const SCAN_ABOVE: usize = 64 << 10;

/// Most memory reading one part of a call (its arguments, its result, its error) into
/// values may take in a front end that reads calls from its host's JSON (the hooks,
/// `mcp-proxy`): a part whose reading could take more ([`value_tree_cost`]: from about 3
/// times its size for text to 128 times for arrays of small objects) is known by its
/// bytes instead ([`loopguard::fingerprint::bytes_stand_in`]), so that the memory of a call
/// stays a small multiple of its size however large and however shaped its JSON is.
pub const MAX_PART_COST: usize = 32 << 20;

/// Whether the JSON text of a part of a call is read into values, or known by its bytes
/// ([`MAX_PART_COST`]). Only texts between 256 KiB (always read) and a third of the cap
/// (never: reading any JSON costs at least three times its size) are scanned.
pub fn is_readable_part(text: &[u8]) -> bool {
    let len = text.len();
    if len.saturating_mul(MAX_COST_PER_BODY_BYTE) <= MAX_PART_COST {
        return true;
    }
    len.saturating_mul(3) <= MAX_PART_COST && value_tree_cost(text) <= MAX_PART_COST
}

/// An upper bound, in bytes, of the memory parsing `body` into `serde_json` values takes,
/// the body included ([`value_tree_cost`]); bodies of at most 64 KiB are not scanned and
/// count [`MAX_COST_PER_BODY_BYTE`] per byte.
pub fn parse_cost(body: &[u8]) -> usize {
    if body.len() <= SCAN_ABOVE {
        return body.len().saturating_mul(MAX_COST_PER_BODY_BYTE);
    }
    value_tree_cost(body)
}

/// An upper bound, in bytes, of the memory parsing `text` into `serde_json` values takes,
/// the text included: a slot per value (with room for arrays to have doubled), a share of
/// a B-tree node per object entry (nodes are at least 5/11 full), a whole node per object,
/// and each string's allocation; at most [`MAX_COST_PER_BODY_BYTE`] per byte. A single
/// pass over the bytes, without parsing; for texts that are not JSON it still bounds what
/// the parser could build before failing.
pub fn value_tree_cost(text: &[u8]) -> usize {
    let (mut values, mut entries, mut objects, mut strings, mut string_bytes) =
        (1usize, 0usize, 0usize, 0usize, 0usize);
    let mut in_string = false;
    let mut escaped = false;
    for &b in text {
        if in_string {
            match (escaped, b) {
                (true, _) => escaped = false,
                (false, b'\\') => escaped = true,
                (false, b'"') => in_string = false,
                _ => string_bytes += 1,
            }
            continue;
        }
        match b {
            b'"' => {
                in_string = true;
                strings += 1;
            }
            b'{' => {
                objects += 1;
                values += 1;
            }
            b'[' => values += 1,
            b',' => values += 1,
            b':' => {
                entries += 1;
                values += 1;
            }
            _ => {}
        }
    }
    let tree = 64 * values + 128 * entries + 640 * objects + 32 * strings + string_bytes;
    // The text itself, a copy while it is assembled (from a request's frames), and as much
    // again for the parser's and the engine's scratch (strings with escapes, key orders).
    tree.saturating_add(3 * text.len())
        .min(text.len().saturating_mul(MAX_COST_PER_BODY_BYTE))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The bound holds the measured worst shapes (see the reliability suite for the
    /// measurements): it is at least what each shape costs per byte, and no more than
    /// [`MAX_COST_PER_BODY_BYTE`].
    #[test]
    fn parts_are_read_up_to_their_cost() {
        assert!(is_readable_part(&vec![b'1'; 256 << 10]));
        let text = format!("\"{}\"", "x".repeat(4 << 20));
        assert!(
            is_readable_part(text.as_bytes()),
            "text costs about its size"
        );
        let text = format!("\"{}\"", "x".repeat(12 << 20));
        assert!(
            !is_readable_part(text.as_bytes()),
            "beyond a third of the cap"
        );
        let objects = format!("[{}]", vec![r#"{"a":0}"#; 64 << 10].join(","));
        assert!(
            !is_readable_part(objects.as_bytes()),
            "512 KiB of small objects"
        );
        // Never less than three times the text: the shortcut is the scan's own answer.
        assert!(value_tree_cost(&[b' '; 1 << 20]) >= 3 << 20);
    }

    #[test]
    fn parse_costs_bound_the_shapes_that_cost_most() {
        let n = 1 << 20;
        let wrap = |items: &str, count: usize| -> Vec<u8> {
            let mut body = b"{\"type\":\"call\",\"tool\":\"t\",\"args\":[".to_vec();
            for i in 0..count {
                if i > 0 {
                    body.push(b',');
                }
                body.extend_from_slice(items.as_bytes());
            }
            body.extend_from_slice(b"]}");
            body
        };
        for (shape, measured_per_byte) in [
            ("0", 18.4),
            ("{\"a\":0}", 88.0),
            ("\"a\"", 16.0),
            ("[]", 12.7),
        ] {
            let body = wrap(shape, n / (shape.len() + 1));
            let per_byte = parse_cost(&body) as f64 / body.len() as f64;
            assert!(
                per_byte >= measured_per_byte && per_byte <= MAX_COST_PER_BODY_BYTE as f64,
                "{shape}: {per_byte}"
            );
        }
        // Text costs little more than itself.
        let text = format!("{{\"type\":\"result\",\"result\":\"{}\"}}", "x".repeat(n));
        assert!(parse_cost(text.as_bytes()) < 5 * text.len());
        // Small bodies are not scanned.
        assert_eq!(parse_cost(b"{}"), 2 * MAX_COST_PER_BODY_BYTE);
    }
}
