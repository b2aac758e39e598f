//! Fingerprints of calls and outcomes (SPEC §2).
//!
//! A [`Fingerprint`] is XXH3-128 over the [`canonical`](crate::canonical) `lg1` encoding of
//! a JSON value. Calls get a [`Signature`] (tool name + args fingerprint, `call`);
//! outcomes are reduced by the first matching rule of SPEC §2 before they are hashed
//! (`outcome`, with the text of errors in `error_text`), so that volatile fields
//! (durations, pids, message ids) never look like progress.
//!
//! Every rule is written once against the [`crate::json::Json`] view, so it reads a
//! `serde_json::Value` and raw JSON text ([`crate::json::Raw`]) alike.

mod call;
mod error_text;
mod failure;
mod outcome;

use std::fmt;

use serde::{Deserialize, Serialize};

use crate::canonical::hash_with;
use crate::json::Json;

pub use call::{args_fingerprint, CallPrint, OutcomeRule};
pub use error_text::{error_text, unknown_tool_name, ErrorText};
pub use failure::{failure_of, is_failure, Failure, MIN_SIGNATURE_BYTES};
pub use outcome::{Outcome, OutcomeOf, OutcomePrint, RawOutcome, RESULT_READ};

/// Version of the canonical encoding and of the outcome rules. Persisted fingerprints
/// from another version must not be compared with these.
pub const FINGERPRINT_VERSION: &str = "lg1";

/// A 128-bit digest of a canonically encoded JSON value, shown as 32 lowercase hex digits.
/// Serialized as that hex string in human-readable formats, as 16 raw bytes otherwise.
#[derive(Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Fingerprint(u128);

impl Fingerprint {
    /// Wraps a raw digest.
    pub const fn from_u128(raw: u128) -> Self {
        Self(raw)
    }

    /// The raw digest.
    pub const fn as_u128(self) -> u128 {
        self.0
    }

    /// The fingerprint of any JSON value.
    pub fn of<'a, J: Json<'a>>(value: J) -> Self {
        Self(crate::canonical::digest(value))
    }
}

/// What stands for a JSON text a front end will not read into values because reading it
/// could take too much memory (its cap: `loopguard_events::MAX_PART_COST`): the string
/// `lg1-bytes:LENGTH:DIGEST`, the digest the XXH3-128 of the text's bytes. Fingerprinted as
/// that string, the call still counts: the same bytes give the same stand-in (the same
/// value written otherwise, its members in another order, gives another), and no stand-in
/// equals a text the engine read.
pub fn bytes_stand_in(text: &[u8]) -> String {
    format!(
        "lg1-bytes:{}:{:032x}",
        text.len(),
        xxhash_rust::xxh3::xxh3_128(text)
    )
}

impl fmt::Display for Fingerprint {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{:032x}", self.0)
    }
}

impl fmt::Debug for Fingerprint {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Fingerprint({self})")
    }
}

/// What identifies a call pattern: the tool name and the args fingerprint, hashed together.
/// Two calls have the same signature iff they have the same tool and args fingerprint.
/// Serialized like a [`Fingerprint`].
#[derive(Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Signature(u128);

/// Serde for 128-bit digests: hex in human-readable formats, 16 little-endian bytes in
/// binary ones (states are stored per event; variable-length integers would only cost time).
macro_rules! digest_serde {
    ($t:ident) => {
        impl Serialize for $t {
            fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
                if s.is_human_readable() {
                    s.collect_str(self)
                } else {
                    s.serialize_bytes(&self.0.to_le_bytes())
                }
            }
        }

        impl<'de> Deserialize<'de> for $t {
            fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
                struct V;
                impl<'de> serde::de::Visitor<'de> for V {
                    type Value = u128;
                    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                        f.write_str("16 bytes or 32 hex digits")
                    }
                    fn visit_bytes<E: serde::de::Error>(self, b: &[u8]) -> Result<u128, E> {
                        let raw: [u8; 16] = b
                            .try_into()
                            .map_err(|_| E::invalid_length(b.len(), &self))?;
                        Ok(u128::from_le_bytes(raw))
                    }
                    fn visit_str<E: serde::de::Error>(self, s: &str) -> Result<u128, E> {
                        u128::from_str_radix(s, 16).map_err(E::custom)
                    }
                }
                let raw = if d.is_human_readable() {
                    d.deserialize_str(V)?
                } else {
                    d.deserialize_bytes(V)?
                };
                Ok(Self(raw))
            }
        }
    };
}

digest_serde!(Fingerprint);
digest_serde!(Signature);

impl Signature {
    /// No signature (what a ticket resumed by an unknown id holds: it records nothing).
    pub(crate) const NONE: Self = Self(0);

    /// A signature of the engine's own, by its raw digest (no tool is named so).
    pub(crate) const fn from_raw(raw: u128) -> Self {
        Self(raw)
    }

    /// The signature of `tool` (already trimmed) called with arguments of fingerprint `args`.
    pub fn new(tool: &str, args: Fingerprint) -> Self {
        // The lg1 string of the tool, then the args digest; short names skip the digest
        // machinery (same bytes, same hash).
        let name = tool.as_bytes();
        if name.len() <= 64 {
            let mut buf = [0u8; 9 + 64 + 16];
            buf[0] = b's';
            buf[1..9].copy_from_slice(&(name.len() as u64).to_le_bytes());
            buf[9..9 + name.len()].copy_from_slice(name);
            buf[9 + name.len()..25 + name.len()].copy_from_slice(&args.as_u128().to_le_bytes());
            return Self(xxhash_rust::xxh3::xxh3_128(&buf[..25 + name.len()]));
        }
        Self(hash_with(|d| {
            d.str(tool);
            d.write(&args.as_u128().to_le_bytes());
        }))
    }

    /// The raw digest.
    pub const fn as_u128(self) -> u128 {
        self.0
    }
}

impl fmt::Display for Signature {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{:032x}", self.0)
    }
}

impl fmt::Debug for Signature {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Signature({self})")
    }
}

#[cfg(test)]
mod tests;
