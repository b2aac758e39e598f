#![doc = include_str!("../../../../docs/fingerprints.md")]
