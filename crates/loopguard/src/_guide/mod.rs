//! A host's guide to the engine, one chapter per step; every example runs as a test.
//!
//! 1. [`host_loop`]: ask before a call, report its outcome, act on the verdict.
//! 2. [`configs`]: OpenClaw's `tools.loopDetection`, per-agent overrides, clamps, errors.
//! 3. [`durable_state`]: keep a run's state outside the process and continue it.
//! 4. [`shadow_and_extensions`]: try loopguard's own detectors without blocking anything.
//! 5. [`fingerprints`]: what makes two calls or two outcomes "identical".

pub mod configs;
pub mod durable_state;
pub mod fingerprints;
pub mod host_loop;
pub mod shadow_and_extensions;
