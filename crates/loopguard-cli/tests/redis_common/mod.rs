//! Helpers for the tests of `loopguard serve --store redis://…`: several replicas of the
//! real binary on one Redis (or a Redis Cluster) started by the test, and the metrics
//! they report. Redis processes come from `loopguard_store::redis::testing`; the event
//! streams and their checks are shared with the single-server tests (`serve_common`).
#![allow(dead_code)]

use std::path::Path;
use std::sync::atomic::{AtomicU64, Ordering};

#[allow(unused_imports)]
pub use loopguard_store::redis::testing::{require, RedisCluster, RedisServer};

use crate::serve_common::Server;

static NEXT: AtomicU64 = AtomicU64::new(0);

/// A key prefix of its own for one test (several tests share a Redis only through it).
pub fn prefix(name: &str) -> String {
    format!(
        "t-{name}-{}-{}:",
        std::process::id(),
        NEXT.fetch_add(1, Ordering::Relaxed)
    )
}

/// Store deadline of replicas whose test does not set one: the tests that are not about
/// faults run on a machine that may be busy compiling, where Redis can take longer than
/// the default second to answer; a fault test passes its own `--store-deadline`.
const UNHURRIED_DEADLINE: &str = "30s";

/// `n` replicas of `loopguard serve --store URL --redis-prefix PREFIX [--config C] EXTRA`,
/// with [`UNHURRIED_DEADLINE`] unless `extra` gives `--store-deadline`.
pub fn replicas(
    n: usize,
    url: &str,
    prefix: &str,
    config: Option<&Path>,
    extra: &[&str],
) -> Result<Vec<Server>, String> {
    let config = config.map(|c| c.display().to_string());
    let mut args = vec!["--store", url, "--redis-prefix", prefix];
    if let Some(c) = &config {
        args.extend(["--config", c.as_str()]);
    }
    if !extra.contains(&"--store-deadline") {
        args.extend(["--store-deadline", UNHURRIED_DEADLINE]);
    }
    args.extend_from_slice(extra);
    (0..n).map(|_| Server::try_start(&args, &[])).collect()
}

/// Reads `loopguard_NAME VALUE` from a metrics text.
pub fn metric(text: &str, series: &str) -> Option<f64> {
    text.lines()
        .find_map(|l| l.strip_prefix(series)?.strip_prefix(' ')?.parse().ok())
}
