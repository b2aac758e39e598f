//! [`RedisStore`]: run states in Redis, shared by every replica of `loopguard serve`
//! (`--store redis://HOST:PORT`, `rediss://…`, `redis-cluster://H1:P1,H2:P2,…`).
//!
//! ## Key layout
//!
//! With the prefix `P` ([`RedisOptions::prefix`], default `loopguard:`) and the session
//! id `S`:
//!
//! | key | type | holds |
//! |---|---|---|
//! | `P{S}:r:RUN` | string | one run: `[layout version 1][etag: 8 bytes][RunState::to_bytes()]`, expiring after the idle TTL |
//! | `P{S}:runs` | sorted set | the session's runs: member = run id (empty for calls outside any run), score = last activity (ms); same TTL |
//! | `P{%}:sessions` | sorted set | live sessions, for the session limit: member = `S`, score = last refresh (ms) |
//!
//! All keys of a session share the hash tag `{S}`, so a session lives on one shard of a
//! Redis Cluster. Inside the tag, `%`, `{` and `}` of the session id are escaped as `%25`,
//! `%7B` and `%7D` (and an empty id is `%00`), so the tag is never empty, always ends
//! where the layout ends it, and never equals the registry's `%`.
//!
//! ## How an event is applied
//!
//! Optimistic concurrency with a server-side compare-and-swap:
//!
//! 1. `GET` the run's value; decode it (missing, unreadable or idle past the TTL: a fresh
//!    state);
//! 2. apply the event to it in Rust (the closure given to [`Store::update`](crate::Store::update), which is
//!    `loopguard_events::apply_event` in the server);
//! 3. `EVALSHA` the compare-and-swap script with the tag read in 1: if the run still holds
//!    that tag, the script stores the new value (with the idle TTL), updates the session's
//!    run index (evicting its least recently active run beyond the per-session limit) and
//!    answers; if another replica wrote in between, it answers with the value it holds
//!    now, and the store goes back to 2 with that value (no second `GET`).
//!
//! So an event costs two round trips to Redis when nobody else writes the run, and one
//! more per lost race. Within one replica, updates of one run take turns (a lock striped
//! by key), so races happen only between replicas. Two replicas that apply events of one run at the same moment give
//! the answers of some sequential order of those events, each computed from the state the
//! previous one left: what a sequential replay gives.
//!
//! Why a script rather than `WATCH`/`MULTI`/`EXEC`: a `WATCH` belongs to a connection, so
//! every update in flight would need a connection of its own (the multiplexed connection
//! that all requests of a replica share cannot carry it), and the transaction takes four
//! round trips (`WATCH`, `GET`, `MULTI`…`EXEC`) where the script takes two. A script runs
//! atomically on the shard that holds the session (all its keys share a hash tag), and
//! costs Redis about as much as the few commands inside it.
//!
//! ## Sessions, limits and expiry across replicas
//!
//! - Every key of a run and its session index expire through Redis TTLs: a session idle
//!   for the TTL disappears from Redis by itself. A run idle past the TTL inside a live
//!   session starts afresh at its next event (the engine's rule), and the scripts drop it
//!   from the index.
//! - `max_runs_per_session`: the compare-and-swap script evicts the least recently active
//!   run of the session when a new one would exceed it.
//! - `max_sessions`: a sorted set of live sessions (the registry), on one shard of its own.
//!   A new session is registered (or refused, 429) before its first state is written; a
//!   live session refreshes its entry at most once per quarter of the TTL, and entries
//!   older than the TTL plus that quarter are dropped. So the count may include a session
//!   idle for up to 1.25 times the TTL, never one that is live.
//!
//! ## Failures
//!
//! Every operation is bounded by [`RedisOptions::deadline`] (retries included) and fails
//! with [`StoreError::Unavailable`](crate::StoreError::Unavailable) when Redis cannot be reached, refuses the command, or
//! does not answer in time. The connection reconnects by itself with exponential backoff
//! (50 ms doubling up to 1 s, with jitter). Once the link has failed (connection refused
//! or lost, no answer within the deadline), operations fail at once instead of each
//! waiting for the deadline, until a background `PING` (every 100 ms while down, every
//! [`RedisOptions::health_interval`] otherwise) gets through; [`Store::check`](crate::Store::check)
//! (readiness) follows the same flag. An error Redis answers with (out of memory, say)
//! fails only its operation. Nothing here panics or blocks the runtime.

mod connect;
mod keys;
mod registry;
mod reply;
mod scripts;
mod store;
mod target;
#[cfg(feature = "testing")]
pub mod testing;
mod value;

pub use connect::{ClientCert, RedisOptions};
pub use store::RedisStore;
pub use target::{RedisTarget, TargetError};
