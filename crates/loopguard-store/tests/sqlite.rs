//! The SQLite store through its public API: restarts, two stores on one file, expiry,
//! failed transactions, and answers equal to the engine's replayer.

use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

mod common;

use common::{
    apply, blocked_by, budget_lines, compaction, loop_lines, replay_all, run_names, session_budget,
};
use loopguard::{ConfigSet, ManualClock, Millis};
use loopguard_events::{apply_event, parse_line, Answer};
use loopguard_store::{Limits, RunKey, SharedClock, SqliteOptions, SqliteStore, Store, StoreError};

fn open(path: &Path, clock: &ManualClock) -> SqliteStore {
    open_with(path, clock, Limits::default(), SqliteOptions::default())
}

fn open_with(
    path: &Path,
    clock: &ManualClock,
    limits: Limits,
    options: SqliteOptions,
) -> SqliteStore {
    let clock: SharedClock = Arc::new(clock.clone());
    SqliteStore::open(path, limits, clock, options).expect("open store")
}

#[tokio::test]
async fn state_survives_a_restart_and_answers_equal_an_uninterrupted_replay() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("nested/dir/loopguard.db");
    let clock = ManualClock::new(Millis::new(1_000));
    let config = ConfigSet::enabled_defaults();
    let lines = loop_lines("s", "r", 25);
    let want = replay_all(&config, &lines);

    let mut got = Vec::new();
    let store = open(&path, &clock);
    for (i, line) in lines.iter().enumerate().take(30) {
        got.push(apply(&store, &config, i as u64 + 1, line).await.unwrap());
    }
    drop(store); // no close: what was acknowledged must be on disk anyway
    let store = open(&path, &clock);
    assert_eq!(store.stats().runs, Some(1), "the run was reloaded");
    for (i, line) in lines.iter().enumerate().skip(30) {
        got.push(apply(&store, &config, i as u64 + 1, line).await.unwrap());
    }
    assert_eq!(got, want);
    assert!(
        got.iter()
            .any(|a| matches!(a.verdict(), Some(v) if !matches!(v, loopguard::Verdict::Allow))),
        "the stream reaches a warning, so state mattered"
    );
    store.close().await.unwrap();
    assert!(matches!(
        apply(&store, &config, 99, &lines[0]).await,
        Err(StoreError::Closed)
    ));

    #[cfg(unix)]
    {
        use std::os::unix::fs::PermissionsExt;
        let mode = std::fs::metadata(&path).unwrap().permissions().mode();
        assert_eq!(mode & 0o077, 0, "the database is private to its owner");
    }
}

#[tokio::test]
async fn batches_commit_together_and_answer_in_order() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("db");
    let clock = ManualClock::new(Millis::new(1_000));
    let config = ConfigSet::enabled_defaults();
    let lines = loop_lines("s", "r", 15);
    let want = replay_all(&config, &lines);
    let store = open(&path, &clock);
    let events: Vec<_> = lines
        .iter()
        .map(|l| parse_line(l.as_bytes()).unwrap())
        .collect();
    let ops: Vec<_> = events
        .iter()
        .enumerate()
        .map(|(i, event)| {
            let scope = event.as_ref().scope(None);
            let cfg = config.for_agent(scope.agent());
            let seq = i as u64 + 1;
            (
                RunKey::of(&scope),
                move |run: &mut loopguard::RunState, session: &mut loopguard::SessionState, now| {
                    apply_event(run, session, cfg, &scope, &event.as_ref(), now)
                        .into_answer(seq, &scope)
                },
            )
        })
        .collect();
    let got: Vec<Answer> = store
        .update_all(ops, None)
        .await
        .into_iter()
        .map(Result::unwrap)
        .collect();
    assert_eq!(got, want);
    let stats = store.stats();
    assert_eq!(stats.writes, 30);
    assert!(stats.commits < 30, "one batch, few commits: {stats:?}");
    drop(store);
    let store = open(&path, &clock);
    let runs = store.session("s").await.unwrap();
    assert_eq!(runs.len(), 1);
    assert_eq!(runs[0].state.history().len(), 15);
}

/// Two stores on one file (two processes, in effect): neither loses the other's updates.
#[tokio::test]
async fn two_stores_on_one_file_never_lose_an_update() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("shared.db");
    let clock = ManualClock::new(Millis::new(1_000));
    let config = ConfigSet::enabled_defaults();
    let a = open(&path, &clock);
    let b = open(&path, &clock);
    let lines = loop_lines("s", "r", 12);
    let want = replay_all(&config, &lines);
    let mut got = Vec::new();
    for (i, line) in lines.iter().enumerate() {
        // Alternate pairs of events between the two stores: each one's memory is stale
        // every time it gets the turn.
        let store = if (i / 2).is_multiple_of(2) { &a } else { &b };
        got.push(apply(store, &config, i as u64 + 1, line).await.unwrap());
    }
    assert_eq!(got, want, "answers as if one store had seen everything");
    assert!(a.stats().conflicts + b.stats().conflicts >= 10);
    drop((a, b));
    let c = open(&path, &clock);
    assert_eq!(c.session("s").await.unwrap()[0].state.history().len(), 12);
}

/// A session changed in the file by another process (`loopguard sessions reset`, a hook)
/// is read as the file has it at once, not as the map last saw it; alone on its file, the
/// store answers from the map.
#[tokio::test]
async fn sessions_read_what_other_processes_wrote() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("shared.db");
    let clock = ManualClock::new(Millis::new(1_000));
    let config = ConfigSet::enabled_defaults();
    let store = open(&path, &clock);
    for (i, line) in loop_lines("s", "r", 6).iter().enumerate() {
        apply(&store, &config, i as u64 + 1, line).await.unwrap();
    }
    for (i, line) in loop_lines("s", "other", 2).iter().enumerate() {
        apply(&store, &config, i as u64 + 1, line).await.unwrap();
    }
    assert_eq!(run_names(&store, "s").await, ["other", "r"]);

    // Another connection forgets run r, as `loopguard sessions reset s --run r` does.
    let other = rusqlite::Connection::open(&path).unwrap();
    loopguard_store::sqlite_file::fold_deltas(&other).unwrap();
    other
        .execute("DELETE FROM runs WHERE session = 's' AND run = 'r'", [])
        .unwrap();
    assert_eq!(run_names(&store, "s").await, ["other"]);
    // And the whole session.
    other
        .execute("DELETE FROM runs WHERE session = 's'", [])
        .unwrap();
    assert!(store.session("s").await.unwrap().is_empty());
    // Events go on from what the file holds: the run starts afresh.
    let answer = apply(&store, &config, 1, &loop_lines("s", "r", 1)[0])
        .await
        .unwrap();
    assert!(matches!(answer.verdict(), Some(loopguard::Verdict::Allow)));
    assert_eq!(
        store.session("s").await.unwrap()[0].state.history().len(),
        1
    );
    store.close().await.unwrap();
}

/// A session's spend (its budgets) survives a restart, counts a retried usage once, and
/// stops every run of the session once it is used up: the answers of one replay.
#[tokio::test]
async fn session_spend_survives_a_restart() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("db");
    let clock = ManualClock::new(Millis::new(1_000));
    let config = session_budget(1_000);
    let lines = budget_lines("s", &["r1", "r2"], 6);
    let want = replay_all(&config, &lines);
    assert!(blocked_by(&want, loopguard::Detector::SessionBudget));
    let mut got = Vec::new();
    let mut store = open(&path, &clock);
    for (i, line) in lines.iter().enumerate() {
        if i == lines.len() / 2 {
            drop(store);
            store = open(&path, &clock);
            let spent = store.session_state("s").await.unwrap().unwrap();
            assert_eq!(
                spent.spend().tokens(),
                600,
                "reloaded: 6 responses, retries once"
            );
        }
        got.push(apply(&store, &config, i as u64 + 1, line).await.unwrap());
    }
    assert_eq!(got, want);
    let spent = store.session_state("s").await.unwrap().unwrap();
    assert_eq!(spent.spend().tokens(), 1_200);
    assert_eq!(store.remove_session("s").await.unwrap(), 2);
    assert!(store.session_state("s").await.unwrap().is_none());
    drop(store);
    assert!(open(&path, &clock)
        .session_state("s")
        .await
        .unwrap()
        .is_none());
}

/// Two stores on one file counting the spend of one session from two of its runs: each
/// one's session state is stale every time it gets the turn, and nothing is lost or
/// counted twice.
#[tokio::test]
async fn two_stores_on_one_file_share_a_session_spend() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("db");
    let clock = ManualClock::new(Millis::new(1_000));
    let config = session_budget(1_000);
    let lines = budget_lines("s", &["r1", "r2"], 6);
    let want = replay_all(&config, &lines);
    let (a, b) = (open(&path, &clock), open(&path, &clock));
    let mut got = Vec::new();
    for (i, line) in lines.iter().enumerate() {
        let store = if (i / 3).is_multiple_of(2) { &a } else { &b };
        got.push(apply(store, &config, i as u64 + 1, line).await.unwrap());
    }
    assert_eq!(got, want);
    assert!(a.stats().conflicts + b.stats().conflicts > 0);
    // Each reads the spend from the file they share, not from what it last wrote itself.
    for store in [&a, &b] {
        let spent = store.session_state("s").await.unwrap().unwrap();
        assert_eq!(spent.spend().tokens(), 1_200);
    }
}

#[tokio::test]
async fn a_failed_transaction_is_refused_and_leaves_no_trace() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("locked.db");
    let clock = ManualClock::new(Millis::new(1_000));
    let config = ConfigSet::enabled_defaults();
    let options = SqliteOptions {
        busy_timeout: Duration::from_millis(50),
        ..SqliteOptions::default()
    };
    let store = open_with(&path, &clock, Limits::default(), options);
    let lines = loop_lines("s", "r", 3);
    apply(&store, &config, 1, &lines[0]).await.unwrap();
    apply(&store, &config, 2, &lines[1]).await.unwrap();

    // Another process takes the write lock and keeps it.
    let other = rusqlite::Connection::open(&path).unwrap();
    other.execute_batch("BEGIN IMMEDIATE").unwrap();
    let refused = apply(&store, &config, 3, &lines[2]).await;
    assert!(
        matches!(&refused, Err(e @ StoreError::Unavailable { .. }) if e.to_string().contains("locked") || e.to_string().contains("busy")),
        "{refused:?}"
    );
    assert!(store.check().is_err(), "not ready after a failed commit");
    other.execute_batch("ROLLBACK").unwrap();

    // The refused call was not applied: the next one is the second call of the run.
    let answer = apply(&store, &config, 3, &lines[2]).await.unwrap();
    assert!(matches!(answer, Answer::Call { .. }));
    assert!(store.check().is_ok(), "ready again");
    let runs = store.session("s").await.unwrap();
    assert_eq!(runs[0].state.history().len(), 2);
    drop(store);
    let store = open(&path, &clock);
    assert_eq!(
        store.session("s").await.unwrap()[0].state.history().len(),
        2
    );
}

#[tokio::test]
async fn idle_runs_expire_from_memory_and_disk_without_sleeping() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("ttl.db");
    let clock = ManualClock::new(Millis::new(1_000_000));
    let config = ConfigSet::default();
    let limits = Limits {
        idle_ttl: Duration::from_secs(3600),
        ..Limits::default()
    };
    let store = open_with(&path, &clock, limits, SqliteOptions::default());
    apply(
        &store,
        &config,
        1,
        r#"{"type":"compaction","session":"old"}"#,
    )
    .await
    .unwrap();
    clock.advance(Duration::from_secs(1800));
    apply(&store, &config, 2, &compaction("new", "r"))
        .await
        .unwrap();
    clock.advance(Duration::from_secs(1801));
    assert_eq!(store.expire_idle().await.unwrap(), 1);
    assert_eq!(store.stats().sessions, 1);
    assert_eq!(store.stats().expired_runs, 1);
    assert!(store.session("old").await.unwrap().is_empty());
    drop(store);

    let rows: i64 = rusqlite::Connection::open(&path)
        .unwrap()
        .query_row("SELECT count(*) FROM runs", [], |r| r.get(0))
        .unwrap();
    assert_eq!(rows, 1, "the expired run is gone from disk too");

    // A store opened later does not load what expired meanwhile.
    clock.advance(Duration::from_secs(1800));
    let store = open_with(&path, &clock, limits, SqliteOptions::default());
    assert_eq!(store.stats().runs, Some(0));
}

#[tokio::test]
async fn ending_runs_and_sessions_is_durable() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("end.db");
    let clock = ManualClock::new(Millis::new(1_000));
    let config = ConfigSet::default();
    let store = open(&path, &clock);
    for (i, run) in ["r1", "r2", "r3"].iter().enumerate() {
        apply(&store, &config, i as u64 + 1, &compaction("s", run))
            .await
            .unwrap();
    }
    apply(&store, &config, 4, r#"{"type":"compaction","session":"t"}"#)
        .await
        .unwrap();
    assert!(store
        .remove_run(RunKey::new("s", Some("r2")))
        .await
        .unwrap());
    assert!(!store
        .remove_run(RunKey::new("s", Some("r2")))
        .await
        .unwrap());
    assert_eq!(store.remove_session("t").await.unwrap(), 1);
    drop(store);
    let store = open(&path, &clock);
    let runs = run_names(&store, "s").await;
    assert_eq!(runs.len(), 2);
    assert!(!runs.contains(&"r2".to_owned()));
    assert!(store.session("t").await.unwrap().is_empty());
}

#[tokio::test]
async fn the_session_limit_refuses_new_sessions_only() {
    let dir = tempfile::tempdir().unwrap();
    let clock = ManualClock::new(Millis::new(1_000));
    let config = ConfigSet::default();
    let limits = Limits {
        max_sessions: 2,
        ..Limits::default()
    };
    let store = open_with(
        &dir.path().join("cap.db"),
        &clock,
        limits,
        SqliteOptions::default(),
    );
    for s in ["a", "b"] {
        let line = format!(r#"{{"type":"compaction","session":"{s}"}}"#);
        apply(&store, &config, 1, &line).await.unwrap();
    }
    let refused = apply(&store, &config, 1, r#"{"type":"compaction","session":"c"}"#).await;
    assert!(matches!(
        refused.unwrap_err(),
        StoreError::SessionLimit { limit: 2 }
    ));
    apply(&store, &config, 1, &compaction("a", "x"))
        .await
        .expect("a live session can open runs");
}

#[tokio::test]
async fn concurrent_updates_share_commits() {
    let dir = tempfile::tempdir().unwrap();
    let clock = ManualClock::new(Millis::new(1_000));
    let store = Arc::new(open(&dir.path().join("group.db"), &clock));
    let config = Arc::new(ConfigSet::enabled_defaults());
    let mut tasks = Vec::new();
    for t in 0..32 {
        let store = Arc::clone(&store);
        let config = Arc::clone(&config);
        tasks.push(tokio::spawn(async move {
            let lines = loop_lines(&format!("s{t}"), "r", 10);
            let mut got = Vec::new();
            for (i, line) in lines.iter().enumerate() {
                got.push(apply(&*store, &config, i as u64 + 1, line).await.unwrap());
            }
            (got, replay_all(&config, &lines))
        }));
    }
    for task in tasks {
        let (got, want) = task.await.unwrap();
        assert_eq!(got, want);
    }
    let stats = store.stats();
    assert_eq!(stats.writes, 32 * 20);
    assert_eq!(stats.sessions, 32);
}

/// Rows this store never held (another process wrote them) are expired too, by the scan
/// of the whole table that runs once per TTL, and at open.
#[tokio::test]
async fn rows_of_other_processes_expire_too() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("foreign.db");
    let clock = ManualClock::new(Millis::new(1_000_000));
    let config = ConfigSet::default();
    let limits = Limits {
        idle_ttl: Duration::from_secs(60),
        ..Limits::default()
    };
    let mine = open_with(&path, &clock, limits, SqliteOptions::default());
    let other = open_with(&path, &clock, limits, SqliteOptions::default());
    apply(
        &other,
        &config,
        1,
        r#"{"type":"compaction","session":"theirs"}"#,
    )
    .await
    .unwrap();
    drop(other);
    let count = || -> i64 {
        rusqlite::Connection::open(&path)
            .unwrap()
            .query_row("SELECT count(*) FROM runs", [], |r| r.get(0))
            .unwrap()
    };
    clock.advance(Duration::from_secs(30));
    assert_eq!(mine.expire_idle().await.unwrap(), 0);
    assert_eq!(count(), 1, "still live");
    clock.advance(Duration::from_secs(31));
    assert_eq!(
        mine.expire_idle().await.unwrap(),
        0,
        "not in this store's memory"
    );
    assert_eq!(count(), 0, "but gone from the file");
}

/// Log rows in both tables of the change log.
fn log_rows(conn: &rusqlite::Connection) -> i64 {
    loopguard_store::sqlite_file::DELTA_TABLES
        .iter()
        .map(|t| {
            conn.query_row(&format!("SELECT count(*) FROM {t}"), [], |r| {
                r.get::<_, i64>(0)
            })
            .unwrap()
        })
        .sum()
}

/// Events interleaved over three runs, so that chains of several runs share the log.
fn interleaved(n: usize) -> Vec<String> {
    let runs = [
        loop_lines("a", "r", n),
        loop_lines("b", "r", n),
        loop_lines("c", "r2", n),
    ];
    (0..2 * n)
        .flat_map(|i| runs.iter().map(move |r| r[i].clone()))
        .collect()
}

/// The change log is what a crash leaves: a copy of the file taken while the store runs
/// (as a SIGKILL would leave it) holds deltas, across many switches of the log's two
/// tables, and a store opened on it answers the rest exactly as an uninterrupted replay.
#[tokio::test]
async fn a_crash_copy_with_a_change_log_resumes_exactly() {
    let dir = tempfile::tempdir().unwrap();
    let (path, copy) = (dir.path().join("live.db"), dir.path().join("copy.db"));
    let clock = ManualClock::new(Millis::new(1_000));
    let config = ConfigSet::enabled_defaults();
    let options = SqliteOptions {
        log_segment_rows: 8,
        ..SqliteOptions::default()
    };
    let lines = interleaved(40);
    let want = replay_all(&config, &lines);

    let store = open_with(&path, &clock, Limits::default(), options.clone());
    let reader = rusqlite::Connection::open(&path).unwrap();
    let mut got = Vec::new();
    let mut most = 0;
    // Cut after event 150 or the first later one that leaves deltas in the log (a table
    // is emptied when its last chain is folded).
    let mut cut = lines.len();
    for (i, line) in lines.iter().enumerate() {
        got.push(apply(&store, &config, i as u64 + 1, line).await.unwrap());
        let rows = log_rows(&reader);
        most = most.max(rows);
        if i >= 150 && rows > 0 {
            cut = i + 1;
            break;
        }
    }
    assert!(cut < lines.len());
    assert!(
        (1..=2 * 8).contains(&most),
        "the log is used and stays within two tables' worth: {most} rows at most"
    );
    let stats = store.stats();
    assert!(
        stats.deltas * 2 > stats.writes,
        "most writes are deltas: {stats:?}"
    );
    reader
        .execute("VACUUM INTO ?1", [copy.to_str().unwrap()])
        .unwrap();
    assert!(log_rows(&rusqlite::Connection::open(&copy).unwrap()) > 0);
    drop(store);

    let store = open_with(&copy, &clock, Limits::default(), options);
    assert_eq!(
        log_rows(&rusqlite::Connection::open(&copy).unwrap()),
        0,
        "folded at open"
    );
    for (i, line) in lines.iter().enumerate().skip(cut) {
        got.push(apply(&store, &config, i as u64 + 1, line).await.unwrap());
    }
    assert_eq!(got, want);
    store.close().await.unwrap();
}

/// Another process that writes a run's row whole (the agent hooks do) makes the store's
/// deltas of that run dead; the store sees the commit, folds its log, and applies its
/// next event to what the other process wrote.
#[tokio::test]
async fn a_whole_row_written_by_another_process_ends_the_chain() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("shared.db");
    let clock = ManualClock::new(Millis::new(1_000));
    let config = ConfigSet::enabled_defaults();
    let store = open(&path, &clock);
    let lines = loop_lines("s", "r", 12);
    for (i, line) in lines.iter().enumerate().take(16) {
        apply(&store, &config, i as u64 + 1, line).await.unwrap();
    }

    let mut other = rusqlite::Connection::open(&path).unwrap();
    let tx = other
        .transaction_with_behavior(rusqlite::TransactionBehavior::Immediate)
        .unwrap();
    let stored = loopguard_store::sqlite_file::read_run(&tx, "s", "r")
        .unwrap()
        .unwrap();
    assert!(stored.has_deltas(), "the store wrote deltas");
    let state = loopguard::RunState::from_bytes(&stored.state).unwrap();
    assert_eq!(
        state.history().len(),
        8,
        "the row and its deltas make the state"
    );
    tx.execute(
        "UPDATE runs SET etag = 4242, last_active = 1000, state = ?1 WHERE session = 's'",
        [loopguard::RunState::default().to_bytes()],
    )
    .unwrap();
    tx.commit().unwrap();

    // The rest is answered as a fresh run would be.
    let rest = &lines[16..];
    let want = replay_all(&config, rest);
    let mut got = Vec::new();
    for (i, line) in rest.iter().enumerate() {
        got.push(apply(&store, &config, i as u64 + 1, line).await.unwrap());
    }
    assert_eq!(got, want);
    assert!(store.stats().conflicts >= 1);
    store.close().await.unwrap();
    let stored = loopguard_store::sqlite_file::read_run(&other, "s", "r")
        .unwrap()
        .unwrap();
    assert!(!stored.has_deltas(), "closing folds the log");
    let state = loopguard::RunState::from_bytes(&stored.state).unwrap();
    assert_eq!(state.history().len(), 4);
}

/// Random event streams over several runs, with restarts and crash copies at random
/// points and tiny log tables (so that they switch and fold all the time): the answers
/// always equal one uninterrupted replay.
#[tokio::test]
async fn random_streams_with_restarts_and_crashes_equal_a_replay() {
    let config = ConfigSet::enabled_defaults();
    let mut copies_with_deltas = 0;
    for seed in 1..=12u64 {
        let mut x = seed.wrapping_mul(0x9e37_79b9_7f4a_7c15) | 1;
        let mut next = move |n: u64| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x % n
        };
        let keys = [("a", "r1"), ("a", "r2"), ("b", "r1"), ("c", "")];
        let mut lines = Vec::new();
        for i in 0..240 {
            let (session, run) = keys[next(4) as usize];
            let path = next(3);
            let result = next(2);
            let run = if run.is_empty() {
                String::new()
            } else {
                format!(r#","run":"{run}""#)
            };
            lines.push(format!(
                r#"{{"type":"call","session":"{session}"{run},"call_id":"c{i}","tool":"read","args":{{"path":"/p{path}"}}}}"#
            ));
            lines.push(format!(
                r#"{{"type":"result","session":"{session}"{run},"call_id":"c{i}","result":"r{result}"}}"#
            ));
        }
        let want = replay_all(&config, &lines);

        let dir = tempfile::tempdir().unwrap();
        let clock = ManualClock::new(Millis::new(1_000));
        let options = SqliteOptions {
            log_segment_rows: 1 + next(6),
            ..SqliteOptions::default()
        };
        let mut path = dir.path().join("0.db");
        let mut store = open_with(&path, &clock, Limits::default(), options.clone());
        let mut got = Vec::new();
        for (i, line) in lines.iter().enumerate() {
            got.push(apply(&store, &config, i as u64 + 1, line).await.unwrap());
            match next(40) {
                0 => {
                    drop(store);
                    store = open_with(&path, &clock, Limits::default(), options.clone());
                }
                1 => {
                    // What a SIGKILL leaves: the file as it is now, log and all.
                    let copy = dir.path().join(format!("{i}.db"));
                    rusqlite::Connection::open(&path)
                        .unwrap()
                        .execute("VACUUM INTO ?1", [copy.to_str().unwrap()])
                        .unwrap();
                    if log_rows(&rusqlite::Connection::open(&copy).unwrap()) > 0 {
                        copies_with_deltas += 1;
                    }
                    let crashed = std::mem::replace(
                        &mut store,
                        open_with(&copy, &clock, Limits::default(), options.clone()),
                    );
                    drop(crashed);
                    path = copy;
                }
                _ => {}
            }
        }
        assert_eq!(got, want, "seed {seed}");
        store.close().await.unwrap();
    }
    assert!(
        copies_with_deltas >= 10,
        "only {copies_with_deltas} crash copies held a change log"
    );
}

/// `--db` pointed at another application's database: refused with an error that says so
/// (a setting to change, not an outage), and the file keeps exactly its own tables.
#[tokio::test]
async fn another_applications_database_is_refused_and_left_alone() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("app.db");
    let other = rusqlite::Connection::open(&path).unwrap();
    other
        .execute_batch(
            "CREATE TABLE runs (id INTEGER PRIMARY KEY, started TEXT NOT NULL);
             INSERT INTO runs (started) VALUES ('yesterday');",
        )
        .unwrap();
    let clock: SharedClock = Arc::new(ManualClock::new(Millis::ZERO));
    let refused =
        SqliteStore::open(&path, Limits::default(), clock, SqliteOptions::default()).unwrap_err();
    assert!(
        matches!(refused, StoreError::InvalidSettings { .. }),
        "{refused:?}"
    );
    let message = refused.to_string();
    assert!(
        message.contains("app.db")
            && message.contains("not a loopguard database")
            && message.contains("(runs)"),
        "{message}"
    );
    let tables: Vec<String> = other
        .prepare("SELECT name FROM sqlite_master WHERE type = 'table' ORDER BY name")
        .unwrap()
        .query_map([], |r| r.get(0))
        .unwrap()
        .map(Result::unwrap)
        .collect();
    assert_eq!(tables, ["runs"]);
    let mode: String = other
        .query_row("PRAGMA journal_mode", [], |r| r.get(0))
        .unwrap();
    assert_eq!(mode, "delete", "its journal mode was left alone too");
}
