//! The server-side (Lua) scripts of the Redis store. Each runs atomically on the shard
//! that holds its keys, all of which share one hash tag. They are sent by SHA-1
//! (`EVALSHA`) and loaded on `NOSCRIPT` (after a Redis restart, on a new cluster node).
//!
//! Times (`now`, `cutoff`) come from the store's clock, not from Redis' `TIME`, so that
//! every replica applies the same idle rule as the engine, and tests can move the clock.

use ::redis::Script;

/// Compare-and-swap of one run's state and its session's, and the bookkeeping of its
/// session.
///
/// KEYS: run key, session index, session state key. ARGV: expected tag (empty: no value),
/// new value, TTL (ms), score (the state's last activity), cutoff (oldest live activity),
/// most runs per session, the run's member, `1` if the session is registered (else a new
/// session is refused until it is), the run key prefix (for evicted runs), the session
/// state's expected tag (empty: no value), its new value (empty: unchanged).
///
/// Replies `{1, the run's previous activity, or 0 for a new run of a live session, or
/// false for the first run of a session}` when stored, `{0, current value or false,
/// current session state or false}` when either tag differs (the caller applies its event
/// again to those values), `{2}` when the session is new and must first be registered.
///
/// An event of a known run costs five commands (`GETRANGE`, `ZSCORE`, `SET`, `ZADD`,
/// `PEXPIRE`); the index is pruned of idle runs, and the session's run limit enforced, only
/// when a run starts.
///
/// The first write is always the `SET`: Redis refuses a write that needs memory beyond
/// `maxmemory` only when it is the script's first write (a script is not stopped half
/// way), so a pruning `ZREMRANGEBYSCORE` before it would let a full Redis take new runs.
/// Counting live runs with `ZCOUNT` reads instead.
const CAS: &str = r#"
local tag = redis.call('GETRANGE', KEYS[1], 1, 8)
local session_tag = redis.call('GETRANGE', KEYS[3], 1, 8)
if tag ~= ARGV[1] or session_tag ~= ARGV[10] then
  return {0, redis.call('GET', KEYS[1]), redis.call('GET', KEYS[3])}
end
local previous = redis.call('ZSCORE', KEYS[2], ARGV[7])
local new_run = not previous
local n = 0
if new_run then
  n = redis.call('ZCOUNT', KEYS[2], ARGV[5], '+inf')
  if n == 0 then
    if ARGV[8] ~= '1' then
      return {2}
    end
    previous = false
  else
    previous = '0'
  end
end
redis.call('SET', KEYS[1], ARGV[2], 'PX', ARGV[3])
if ARGV[11] ~= '' then
  redis.call('SET', KEYS[3], ARGV[11], 'PX', ARGV[3])
end
if new_run then
  redis.call('ZREMRANGEBYSCORE', KEYS[2], '-inf', '(' .. ARGV[5])
  local max = tonumber(ARGV[6])
  while n >= max and n > 0 do
    local oldest = redis.call('ZPOPMIN', KEYS[2])
    redis.call('DEL', ARGV[9] .. oldest[1])
    n = n - 1
  end
end
redis.call('ZADD', KEYS[2], ARGV[4], ARGV[7])
redis.call('PEXPIRE', KEYS[2], ARGV[3])
return {1, previous}
"#;

/// Registers (or refreshes) a session in the registry of live sessions.
///
/// KEYS: registry. ARGV: session member, now, stale-before (entries refreshed before it
/// are dropped), most sessions, `1` to add even beyond the limit (a refresh of a session
/// that exists), registry TTL (ms).
///
/// Replies `{1 if registered else 0, live sessions}`.
///
/// As in [`CAS`], the `ZADD` is the first write, so that a Redis at `maxmemory` refuses
/// new sessions (the error fails the event: 503) instead of letting them in through an
/// earlier pruning write.
const REGISTER: &str = r#"
local n = redis.call('ZCOUNT', KEYS[1], ARGV[3], '+inf')
local known = redis.call('ZSCORE', KEYS[1], ARGV[1])
if known and tonumber(known) < tonumber(ARGV[3]) then
  known = false
end
if not known then
  if ARGV[5] ~= '1' and n >= tonumber(ARGV[4]) then
    return {0, n}
  end
  n = n + 1
end
redis.call('ZADD', KEYS[1], ARGV[2], ARGV[1])
redis.call('ZREMRANGEBYSCORE', KEYS[1], '-inf', '(' .. ARGV[3])
redis.call('PEXPIRE', KEYS[1], ARGV[6])
return {1, n}
"#;

/// Forgets one run. KEYS: run key, session index. ARGV: member, cutoff.
///
/// Replies `{1 if the run was live else 0, runs left in the session}`.
const REMOVE_RUN: &str = r#"
local existed = redis.call('DEL', KEYS[1])
local score = redis.call('ZSCORE', KEYS[2], ARGV[1])
redis.call('ZREM', KEYS[2], ARGV[1])
local live = 0
if existed == 1 and score and tonumber(score) >= tonumber(ARGV[2]) then
  live = 1
end
return {live, redis.call('ZCARD', KEYS[2])}
"#;

/// Forgets a session. KEYS: session index, session state key. ARGV: run key prefix, cutoff.
///
/// Replies the number of live runs removed.
const REMOVE_SESSION: &str = r#"
redis.call('DEL', KEYS[2])
local runs = redis.call('ZRANGE', KEYS[1], 0, -1, 'WITHSCORES')
local live = 0
for i = 1, #runs, 2 do
  local existed = redis.call('DEL', ARGV[1] .. runs[i])
  if existed == 1 and tonumber(runs[i + 1]) >= tonumber(ARGV[2]) then
    live = live + 1
  end
end
redis.call('DEL', KEYS[1])
return live
"#;

/// The live runs of a session. KEYS: session index. ARGV: run key prefix, cutoff.
///
/// Replies `{member, value or false, ...}` for every run active since the cutoff.
const SESSION: &str = r#"
local runs = redis.call('ZRANGEBYSCORE', KEYS[1], ARGV[2], '+inf')
local out = {}
for i, run in ipairs(runs) do
  out[2 * i - 1] = run
  out[2 * i] = redis.call('GET', ARGV[1] .. run)
end
return out
"#;

/// The scripts, hashed once.
pub(crate) struct Scripts {
    pub cas: Script,
    pub register: Script,
    pub remove_run: Script,
    pub remove_session: Script,
    pub session: Script,
}

impl Scripts {
    pub(crate) fn new() -> Self {
        Self {
            cas: Script::new(CAS),
            register: Script::new(REGISTER),
            remove_run: Script::new(REMOVE_RUN),
            remove_session: Script::new(REMOVE_SESSION),
            session: Script::new(SESSION),
        }
    }
}
