//! Reading Redis replies defensively: a reply of an unexpected shape is an error of the
//! operation, never a panic.

use ::redis::Value;

use crate::StoreError;

/// A reply whose shape the store did not expect (a script of another version, say).
#[derive(Debug, thiserror::Error)]
#[error("unexpected reply from {0}")]
pub(super) struct Unexpected(&'static str);

pub(super) fn unexpected(what: &'static str) -> StoreError {
    StoreError::unavailable(Unexpected(what))
}

pub(super) fn array(v: Value) -> Result<Vec<Value>, StoreError> {
    match v {
        Value::Array(items) | Value::Set(items) => Ok(items),
        Value::Nil => Ok(Vec::new()),
        _ => Err(unexpected("a script")),
    }
}

pub(super) fn int(v: &Value) -> Option<i64> {
    match v {
        Value::Int(n) => Some(*n),
        Value::BulkString(b) => std::str::from_utf8(b).ok()?.parse().ok(),
        Value::SimpleString(s) => s.parse().ok(),
        _ => None,
    }
}

pub(super) fn bytes(v: &Value) -> Option<Vec<u8>> {
    match v {
        Value::BulkString(b) => Some(b.clone()),
        Value::SimpleString(s) => Some(s.clone().into_bytes()),
        _ => None,
    }
}

/// A sorted-set score as Redis prints it (`"1700000000000"`, or in exponent form).
pub(super) fn score_of(v: &Value) -> Option<u64> {
    let text = match v {
        Value::BulkString(b) => std::str::from_utf8(b).ok()?.to_owned(),
        Value::SimpleString(s) => s.clone(),
        Value::Int(n) => return u64::try_from(*n).ok(),
        Value::Double(d) => return (d.is_finite() && *d >= 0.0).then_some(*d as u64),
        _ => return None,
    };
    text.parse::<u64>().ok().or_else(|| {
        text.parse::<f64>()
            .ok()
            .filter(|d| d.is_finite() && *d >= 0.0)
            .map(|d| d as u64)
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn replies_are_read_defensively() {
        assert_eq!(
            score_of(&Value::BulkString(b"1700000000123".to_vec())),
            Some(1_700_000_000_123)
        );
        assert_eq!(score_of(&Value::BulkString(b"1.5e3".to_vec())), Some(1500));
        assert_eq!(score_of(&Value::BulkString(b"-1".to_vec())), None);
        assert_eq!(score_of(&Value::BulkString(b"nan".to_vec())), None);
        assert_eq!(score_of(&Value::Nil), None);
        assert_eq!(int(&Value::Int(2)), Some(2));
        assert!(array(Value::Okay).is_err());
    }
}
