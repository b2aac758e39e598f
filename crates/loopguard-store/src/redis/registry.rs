//! The registry of live sessions (`P{%}:sessions`), which enforces
//! [`Limits::max_sessions`](crate::Limits::max_sessions) across replicas: registering a new
//! session, refreshing a live one now and then, forgetting an ended one.

use std::sync::atomic::Ordering;
use std::sync::Arc;

use ::redis::Value;

use super::connect::{Conn, Shared};
use super::keys;
use super::reply::{array, int, unexpected};
use super::scripts::Scripts;
use super::RedisStore;
use crate::StoreError;

impl RedisStore {
    /// Quarter of the TTL: how often a live session refreshes its registry entry.
    pub(super) fn epoch_ms(&self) -> u64 {
        (self.limits.ttl_ms() / 4).max(1)
    }

    /// Registry entries refreshed before this are dropped.
    pub(super) fn stale_before(&self, now: u64) -> u64 {
        now.saturating_sub(self.limits.ttl_ms().saturating_add(self.epoch_ms()))
    }

    pub(super) fn ttl_arg(&self) -> u64 {
        self.limits.ttl_ms().max(1)
    }

    /// Adds (or refreshes, with `force`) a session in the registry; `false` when the
    /// session limit refuses it.
    pub(super) async fn register(
        &self,
        member: &[u8],
        now: u64,
        force: bool,
    ) -> Result<bool, StoreError> {
        register(
            self.conn.clone(),
            &self.scripts,
            &self.registry,
            RegisterArgs {
                member,
                now,
                stale_before: self.stale_before(now),
                max: self.limits.max_sessions,
                force,
                ttl: self.ttl_arg().saturating_add(self.epoch_ms()),
            },
            &self.shared,
        )
        .await
    }

    /// Refreshes a live session's registry entry in the background.
    pub(super) fn refresh(&self, session: &str, now: u64) {
        let conn = self.conn.clone();
        let scripts = Arc::clone(&self.scripts);
        let registry = self.registry.clone();
        let shared = Arc::clone(&self.shared);
        let member = keys::escape(session);
        let args = (
            now,
            self.stale_before(now),
            self.limits.max_sessions,
            self.ttl_arg().saturating_add(self.epoch_ms()),
        );
        let deadline = self.options.deadline;
        tokio::spawn(async move {
            let (now, stale_before, max, ttl) = args;
            let refreshed = register(
                conn,
                &scripts,
                &registry,
                RegisterArgs {
                    member: &member,
                    now,
                    stale_before,
                    max,
                    force: true,
                    ttl,
                },
                &shared,
            );
            if let Ok(Err(e)) | Err(e) = tokio::time::timeout(deadline, refreshed)
                .await
                .map_err(|_| StoreError::Deadline { limit: deadline })
            {
                tracing::debug!(target: "loopguard::store", error = %e, "refreshing a session in the registry failed");
            }
        });
    }

    pub(super) async fn unregister(&self, member: &[u8]) -> Result<(), StoreError> {
        let mut c = self.conn.clone();
        ::redis::cmd("ZREM")
            .arg(&self.registry)
            .arg(member)
            .query_async::<Value>(&mut c)
            .await
            .map(drop)
            .map_err(|e| self.shared.fail(&e))
    }
}

pub(super) struct RegisterArgs<'a> {
    member: &'a [u8],
    now: u64,
    stale_before: u64,
    max: usize,
    force: bool,
    ttl: u64,
}

pub(super) async fn register(
    mut conn: Conn,
    scripts: &Scripts,
    registry: &[u8],
    args: RegisterArgs<'_>,
    shared: &Shared,
) -> Result<bool, StoreError> {
    let reply: Value = scripts
        .register
        .key(registry)
        .arg(args.member)
        .arg(args.now)
        .arg(args.stale_before)
        .arg(args.max)
        .arg(if args.force { "1" } else { "0" })
        .arg(args.ttl.max(1))
        .invoke_async(&mut conn)
        .await
        .map_err(|e| shared.fail(&e))?;
    let items = array(reply)?;
    let (Some(ok), Some(live)) = (items.first().and_then(int), items.get(1).and_then(int)) else {
        return Err(unexpected("the registry script"));
    };
    shared
        .sessions
        .store(u64::try_from(live).unwrap_or(0), Ordering::Relaxed);
    Ok(ok == 1)
}
