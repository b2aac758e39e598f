//! The Redis store against real `redis-server` processes (started here, on free loopback
//! ports): answers equal the engine's replayer across stores, no update is lost under
//! concurrent writers, the session and run limits hold across stores, idle runs expire
//! (by the clock and by Redis TTLs), unreadable states start afresh, and an unreachable,
//! frozen or password-protected Redis is handled as documented.
#![cfg(feature = "redis")]

use std::sync::Arc;
use std::time::{Duration, Instant};

mod common;

use common::{
    apply, blocked_by, budget_lines, compaction, loop_lines, replay_all, run_names, session_budget,
};
use loopguard::{ConfigSet, ManualClock, Millis, SystemClock};
use loopguard_events::Answer;
use loopguard_store::redis::testing::{free_port, require, RedisCluster, RedisServer, Resp};
use loopguard_store::{
    ClientCert, Limits, RedisOptions, RedisStore, RedisTarget, RunKey, SharedClock, Store,
    StoreError,
};

async fn connect(
    url: &str,
    clock: SharedClock,
    limits: Limits,
    options: RedisOptions,
) -> RedisStore {
    RedisStore::connect(RedisTarget::parse(url).unwrap(), limits, clock, options)
        .await
        .expect("connect")
}

/// Options of the tests that are not about faults: a deadline long enough for a machine
/// busy compiling (the fault tests set their own, short one).
fn options(prefix: &str) -> RedisOptions {
    RedisOptions {
        prefix: prefix.into(),
        deadline: Duration::from_secs(30),
        health_interval: Duration::from_millis(100),
        ..RedisOptions::default()
    }
}

/// A store that holds one session at most, whose runs go idle after 60 s by `clock`.
async fn one_session_store(url: &str, clock: &ManualClock, prefix: &str) -> RedisStore {
    let limits = Limits {
        max_sessions: 1,
        idle_ttl: Duration::from_secs(60),
        ..Limits::default()
    };
    connect(url, Arc::new(clock.clone()), limits, options(prefix)).await
}

/// Two stores (two replicas) on one Redis, taking turns: the answers of one
/// uninterrupted replay, and the key layout of the docs.
async fn two_stores_take_turns(url: &str) {
    let clock: SharedClock = Arc::new(ManualClock::new(Millis::new(1_000)));
    let config = ConfigSet::enabled_defaults();
    let a = connect(url, clock.clone(), Limits::default(), options("t1:")).await;
    let b = connect(url, clock, Limits::default(), options("t1:")).await;
    let mut lines = loop_lines("s", "r", 25);
    lines.extend(loop_lines("other", "r", 3));
    lines.push(r#"{"type":"compaction","session":"s","run":"r"}"#.into());
    let want = replay_all(&config, &lines);
    let mut got = Vec::new();
    for (i, line) in lines.iter().enumerate() {
        let store = if i.is_multiple_of(2) { &a } else { &b };
        got.push(apply(store, &config, i as u64 + 1, line).await.unwrap());
    }
    assert_eq!(got, want);
    assert!(
        want.iter()
            .any(|w| matches!(w, Answer::Call { verdict, .. } if verdict.is_blocked())),
        "the loop was blocked"
    );
    let runs = b.session("s").await.unwrap();
    assert_eq!(runs.len(), 1);
    assert_eq!(runs[0].run.as_deref(), Some("r"));
    assert!(runs[0].state.history().len() >= 20);
    assert!(b.remove_run(RunKey::new("s", Some("r"))).await.unwrap());
    assert!(!a.remove_run(RunKey::new("s", Some("r"))).await.unwrap());
    assert!(a.session("s").await.unwrap().is_empty());
    assert_eq!(a.remove_session("other").await.unwrap(), 1);
    a.close().await.unwrap();
    assert!(a.check().is_err());
    assert!(apply(&a, &config, 1, &lines[0]).await.is_err());
}

#[tokio::test]
async fn two_stores_on_one_redis_answer_like_one_replay() {
    if !require("two_stores_on_one_redis_answer_like_one_replay") {
        return;
    }
    let redis = RedisServer::start().unwrap();
    two_stores_take_turns(&redis.url()).await;

    // The key layout: a string per run with the TTL, a sorted set per session, the
    // registry; the value is [layout version][etag][state].
    let clock: SharedClock = Arc::new(SystemClock);
    let store = connect(&redis.url(), clock, Limits::default(), options("lay:")).await;
    let config = ConfigSet::default();
    let line = r#"{"type":"compaction","session":"a}b","run":"r1"}"#;
    apply(&store, &config, 1, line).await.unwrap();
    let value = redis.command(&["GET", "lay:{a%7Db}:r:r1"]).unwrap();
    let Resp::Bulk(Some(bytes)) = value else {
        panic!("{value:?}")
    };
    assert_eq!(bytes[0], 1, "layout version");
    assert!(bytes.len() > 9);
    let ttl = redis
        .command(&["PTTL", "lay:{a%7Db}:r:r1"])
        .unwrap()
        .int()
        .unwrap();
    assert!(ttl > 86_000_000 && ttl <= 86_400_000, "{ttl}");
    let score = redis
        .command(&["ZSCORE", "lay:{a%7Db}:runs", "r1"])
        .unwrap()
        .int()
        .unwrap();
    assert!(score > 1_600_000_000_000, "last activity in ms: {score}");
    assert!(
        redis
            .command(&["PTTL", "lay:{a%7Db}:runs"])
            .unwrap()
            .int()
            .unwrap()
            > 0
    );
    assert_eq!(
        redis.command(&["ZCARD", "lay:{%}:sessions"]).unwrap().int(),
        Some(1)
    );
}

#[tokio::test]
async fn a_redis_cluster_serves_the_same_answers_and_spreads_sessions() {
    if !require("a_redis_cluster_serves_the_same_answers_and_spreads_sessions") {
        return;
    }
    let cluster = RedisCluster::start(3).unwrap();
    two_stores_take_turns(&cluster.url()).await;
    let clock: SharedClock = Arc::new(SystemClock);
    let store = connect(&cluster.url(), clock, Limits::default(), options("spread:")).await;
    let config = ConfigSet::default();
    for i in 0..60 {
        apply(&store, &config, 1, &compaction(&format!("s{i}"), "r"))
            .await
            .unwrap();
    }
    let used = cluster
        .nodes()
        .iter()
        .filter(|n| n.command(&["DBSIZE"]).unwrap().int().unwrap() > 0)
        .count();
    assert_eq!(used, 3, "60 sessions land on every shard");
    // 60 sessions x (run + index) + the registry.
    assert_eq!(cluster.keys().unwrap(), 121);
    store.expire_idle().await.unwrap();
    assert_eq!(
        store.stats().sessions,
        60,
        "the registry, on its own shard, counts them"
    );

    // The scripts that touch several keys of a session (evicting a run, ending a
    // session) run on the session's shard.
    let limits = Limits {
        max_runs_per_session: 2,
        ..Limits::default()
    };
    let clock: SharedClock = Arc::new(SystemClock);
    let store = connect(&cluster.url(), clock, limits, options("evict:")).await;
    for run in ["r1", "r2", "r3"] {
        apply(&store, &config, 1, &compaction("s", run))
            .await
            .unwrap();
        tokio::time::sleep(Duration::from_millis(2)).await;
    }
    let runs = run_names(&store, "s").await;
    assert_eq!(runs, ["r3", "r2"]);
    assert_eq!(store.remove_session("s").await.unwrap(), 2);
    assert!(store.session("s").await.unwrap().is_empty());
}

/// Many writers on one run at once, through two stores: every update lands exactly once.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn concurrent_writers_lose_no_update() {
    if !require("concurrent_writers_lose_no_update") {
        return;
    }
    let redis = RedisServer::start().unwrap();
    let clock: SharedClock = Arc::new(ManualClock::new(Millis::new(1_000)));
    // A window large enough to keep every call, and thresholds that never fire.
    let config = Arc::new(
        ConfigSet::parse(
            "{ tools: { loopDetection: { enabled: true, historySize: 400, warningThreshold: 1000, criticalThreshold: 1001, globalCircuitBreakerThreshold: 1002 } } }",
        )
        .unwrap(),
    );
    let stores = [
        Arc::new(
            connect(
                &redis.url(),
                clock.clone(),
                Limits::default(),
                options("cc:"),
            )
            .await,
        ),
        Arc::new(connect(&redis.url(), clock, Limits::default(), options("cc:")).await),
    ];
    let mut tasks = Vec::new();
    for t in 0..40 {
        let store = Arc::clone(&stores[t % 2]);
        let config = Arc::clone(&config);
        tasks.push(tokio::spawn(async move {
            for k in 0..5 {
                let line = format!(
                    r#"{{"type":"call","session":"hot","run":"r","call_id":"t{t}-{k}","tool":"read","args":{{"n":{k}}}}}"#
                );
                let answer = apply(&*store, &config, 1, &line).await.unwrap();
                assert!(matches!(answer, Answer::Call { .. }));
            }
        }));
    }
    for task in tasks {
        task.await.unwrap();
    }
    let runs = stores[0].session("hot").await.unwrap();
    assert_eq!(
        runs[0].state.history().len(),
        200,
        "every call recorded once"
    );
    let conflicts = stores[0].stats().conflicts + stores[1].stats().conflicts;
    assert!(conflicts > 0, "the writers did race");
    assert_eq!(stores[0].stats().writes + stores[1].stats().writes, 200);
}

/// Two replicas count the spend of one session from two of its runs, taking turns: the
/// answers of one replay (retried usage counted once, the session budget stopping both
/// runs), and the session's state under its own key.
#[tokio::test]
async fn replicas_share_a_session_spend() {
    if !require("replicas_share_a_session_spend") {
        return;
    }
    let redis = RedisServer::start().unwrap();
    let clock: SharedClock = Arc::new(ManualClock::new(Millis::new(1_000)));
    let config = session_budget(1_000);
    let a = connect(
        &redis.url(),
        clock.clone(),
        Limits::default(),
        options("sb:"),
    )
    .await;
    let b = connect(&redis.url(), clock, Limits::default(), options("sb:")).await;
    let lines = budget_lines("s", &["r1", "r2"], 6);
    let want = replay_all(&config, &lines);
    assert!(blocked_by(&want, loopguard::Detector::SessionBudget));
    let mut got = Vec::new();
    for (i, line) in lines.iter().enumerate() {
        let store = if (i / 3).is_multiple_of(2) { &a } else { &b };
        got.push(apply(store, &config, i as u64 + 1, line).await.unwrap());
    }
    assert_eq!(got, want);
    let spent = b.session_state("s").await.unwrap().unwrap();
    assert_eq!(spent.spend().tokens(), 1_200);
    let ttl = redis.command(&["PTTL", "sb:{s}:s"]).unwrap().int().unwrap();
    assert!(ttl > 0, "the session's state expires: {ttl}");
    assert_eq!(a.remove_session("s").await.unwrap(), 2);
    assert!(b.session_state("s").await.unwrap().is_none());
}

/// Many writers on two replicas report usage for runs of one session at once, each
/// event sent twice: every response is counted exactly once in the session.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn concurrent_usage_is_counted_once() {
    if !require("concurrent_usage_is_counted_once") {
        return;
    }
    let redis = RedisServer::start().unwrap();
    let clock: SharedClock = Arc::new(ManualClock::new(Millis::new(1_000)));
    let config = Arc::new(session_budget(1_000_000));
    let stores = [
        Arc::new(
            connect(
                &redis.url(),
                clock.clone(),
                Limits::default(),
                options("cu:"),
            )
            .await,
        ),
        Arc::new(connect(&redis.url(), clock, Limits::default(), options("cu:")).await),
    ];
    let mut tasks = Vec::new();
    for t in 0..20 {
        let config = Arc::clone(&config);
        let stores = stores.clone();
        tasks.push(tokio::spawn(async move {
            for k in 0..5 {
                let line = format!(
                    r#"{{"type":"usage","session":"hot","run":"r{}","id":"t{t}-{k}","input_tokens":7,"output_tokens":3}}"#,
                    t % 4
                );
                // The retry goes to the other replica, as after a failover.
                let first = apply(&*stores[t % 2], &config, 1, &line).await.unwrap();
                let again = apply(&*stores[(t + 1) % 2], &config, 1, &line).await.unwrap();
                assert_eq!(
                    serde_json::to_string(&first).unwrap(),
                    serde_json::to_string(&again).unwrap(),
                    "a retry gets the same answer"
                );
            }
        }));
    }
    for task in tasks {
        task.await.unwrap();
    }
    let spent = stores[0].session_state("hot").await.unwrap().unwrap();
    assert_eq!(
        spent.spend().tokens(),
        20 * 5 * 10,
        "every response counted once"
    );
    assert_eq!(spent.spend().responses, 100);
    let conflicts = stores[0].stats().conflicts + stores[1].stats().conflicts;
    assert!(conflicts > 0, "the writers did race");
}

#[tokio::test]
async fn limits_hold_across_stores() {
    if !require("limits_hold_across_stores") {
        return;
    }
    let redis = RedisServer::start().unwrap();
    let clock = ManualClock::new(Millis::new(1_000));
    let shared: SharedClock = Arc::new(clock.clone());
    let limits = Limits {
        max_sessions: 2,
        max_runs_per_session: 2,
        ..Limits::default()
    };
    let a = connect(&redis.url(), shared.clone(), limits, options("lim:")).await;
    let b = connect(&redis.url(), shared, limits, options("lim:")).await;
    let config = ConfigSet::default();
    for (i, run) in ["r1", "r2", "r3"].iter().enumerate() {
        clock.advance(Duration::from_millis(10));
        let store = if i.is_multiple_of(2) { &a } else { &b };
        apply(store, &config, 1, &compaction("s1", run))
            .await
            .unwrap();
    }
    let runs = run_names(&a, "s1").await;
    assert_eq!(runs, ["r3", "r2"], "r1 was the least recently active");
    assert_eq!(
        redis.command(&["EXISTS", "lim:{s1}:r:r1"]).unwrap().int(),
        Some(0),
        "its state is gone from Redis"
    );
    apply(&b, &config, 1, &compaction("s2", "r")).await.unwrap();
    let refused = apply(&a, &config, 1, &compaction("s3", "r")).await;
    assert!(matches!(
        refused.unwrap_err(),
        StoreError::SessionLimit { limit: 2 }
    ));
    assert_eq!(
        redis.command(&["EXISTS", "lim:{s3}:runs"]).unwrap().int(),
        Some(0),
        "a refused session writes nothing"
    );
    // Events of live sessions are still taken.
    apply(&a, &config, 1, &compaction("s2", "r")).await.unwrap();
    assert_eq!(b.remove_session("s2").await.unwrap(), 1);
    apply(&a, &config, 1, &compaction("s3", "r")).await.unwrap();
    // Ending a session's last run frees its place too.
    assert!(a.remove_run(RunKey::new("s3", Some("r"))).await.unwrap());
    apply(&b, &config, 1, &compaction("s4", "r")).await.unwrap();
    assert_eq!(a.stats().sessions.max(b.stats().sessions), 2);
}

#[tokio::test]
async fn idle_runs_start_afresh_and_redis_expires_them() {
    if !require("idle_runs_start_afresh_and_redis_expires_them") {
        return;
    }
    let redis = RedisServer::start().unwrap();
    let clock = ManualClock::new(Millis::new(1_000_000));
    let store = one_session_store(&redis.url(), &clock, "idle:").await;
    let config = ConfigSet::default();
    let armed = |answer: Answer| match answer {
        Answer::Compaction { armed, .. } => armed,
        other => panic!("{other:?}"),
    };
    let line = r#"{"type":"compaction","session":"s","run":"r"}"#;
    let call = r#"{"type":"call","session":"s","run":"r","call_id":"c","tool":"read"}"#;
    assert_eq!(armed(apply(&store, &config, 1, line).await.unwrap()), 3);
    apply(&store, &config, 2, call).await.unwrap();
    clock.advance(Duration::from_secs(61));
    assert!(
        store.session("s").await.unwrap().is_empty(),
        "idle past the TTL"
    );
    // The next event starts the run afresh: the guard armed before is gone.
    let fresh = apply(
        &store,
        &config,
        3,
        r#"{"type":"result","session":"s","run":"r","call_id":"c","result":1}"#,
    )
    .await
    .unwrap();
    assert!(
        matches!(fresh, Answer::Invalid { .. }),
        "the pending call was forgotten: {fresh:?}"
    );
    // The registry forgets an idle session after 1.25 TTL, making room for another.
    clock.advance(Duration::from_secs(76));
    store.expire_idle().await.unwrap();
    assert_eq!(store.stats().sessions, 0);
    apply(&store, &config, 1, &compaction("t", "r"))
        .await
        .unwrap();

    // Redis expires the keys by itself (real time).
    let quick = Limits {
        idle_ttl: Duration::from_millis(300),
        ..Limits::default()
    };
    let store = connect(&redis.url(), Arc::new(SystemClock), quick, options("ttl:")).await;
    apply(&store, &config, 1, line).await.unwrap();
    assert_eq!(
        redis
            .command(&["EXISTS", "ttl:{s}:r:r", "ttl:{s}:runs"])
            .unwrap()
            .int(),
        Some(2)
    );
    tokio::time::sleep(Duration::from_millis(700)).await;
    assert_eq!(
        redis
            .command(&["EXISTS", "ttl:{s}:r:r", "ttl:{s}:runs"])
            .unwrap()
            .int(),
        Some(0)
    );
}

#[tokio::test]
async fn unreadable_states_start_afresh() {
    if !require("unreadable_states_start_afresh") {
        return;
    }
    let redis = RedisServer::start().unwrap();
    let store = connect(
        &redis.url(),
        Arc::new(ManualClock::new(Millis::new(1_000))),
        Limits::default(),
        options("bad:"),
    )
    .await;
    let config = ConfigSet::default();
    let line = r#"{"type":"compaction","session":"s","run":"r"}"#;
    for garbage in [
        &b"\x01\x00\x00\x00\x00\x00\x00\x00\x07garbage"[..],
        b"\x09v9",
        b"",
        b"x",
    ] {
        redis
            .command_bytes(&[b"SET", b"bad:{s}:r:r", garbage])
            .unwrap();
        let answer = apply(&store, &config, 1, line).await.unwrap();
        assert!(matches!(answer, Answer::Compaction { armed: 3, .. }));
        let Resp::Bulk(Some(now)) = redis.command(&["GET", "bad:{s}:r:r"]).unwrap() else {
            panic!()
        };
        assert_eq!(now[0], 1, "overwritten with a readable state");
    }
}

/// Redis down at start, then up: the store starts unavailable, refuses updates within
/// the deadline, and recovers by itself once Redis answers.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_unreachable_redis_fails_fast_and_recovers() {
    if !require("an_unreachable_redis_fails_fast_and_recovers") {
        return;
    }
    let port = free_port().unwrap();
    let url = format!("redis://127.0.0.1:{port}");
    let opts = RedisOptions {
        deadline: Duration::from_millis(300),
        ..options("down:")
    };
    let store = connect(&url, Arc::new(SystemClock), Limits::default(), opts).await;
    assert!(store.check().is_err());
    let config = ConfigSet::default();
    let line = r#"{"type":"compaction","session":"s","run":"r"}"#;
    let started = Instant::now();
    let refused = apply(&store, &config, 1, line).await.unwrap_err();
    assert!(
        matches!(refused, StoreError::Unavailable { .. }),
        "{refused:?}"
    );
    assert!(refused.is_transient());
    assert!(
        started.elapsed() < Duration::from_millis(1500),
        "{:?}",
        started.elapsed()
    );

    let _redis = RedisServer::start_on(Some(port), &[]).unwrap();
    let started = Instant::now();
    while store.check().is_err() {
        assert!(
            started.elapsed() < Duration::from_secs(10),
            "never recovered"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let mut answered = None;
    while answered.is_none() && started.elapsed() < Duration::from_secs(10) {
        answered = apply(&store, &config, 1, line).await.ok();
    }
    assert!(matches!(
        answered,
        Some(Answer::Compaction { armed: 3, .. })
    ));
    assert!(store.stats().failures > 0);
}

/// A Redis that accepts connections but does not answer (SIGSTOP): every operation ends
/// at the deadline; once it answers again, so does the store.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_frozen_redis_is_bounded_by_the_deadline() {
    if !require("a_frozen_redis_is_bounded_by_the_deadline") {
        return;
    }
    let redis = RedisServer::start().unwrap();
    let opts = RedisOptions {
        deadline: Duration::from_millis(250),
        ..options("slow:")
    };
    let store = connect(&redis.url(), Arc::new(SystemClock), Limits::default(), opts).await;
    let config = ConfigSet::default();
    let line = r#"{"type":"compaction","session":"s","run":"r"}"#;
    apply(&store, &config, 1, line).await.unwrap();
    redis.freeze(true).unwrap();
    for attempt in 0..3 {
        let started = Instant::now();
        let refused = apply(&store, &config, 1, line).await.unwrap_err();
        let took = started.elapsed();
        assert!(refused.is_transient(), "{refused:?}");
        assert!(took < Duration::from_millis(800), "{took:?}");
        if attempt == 0 {
            assert!(
                took >= Duration::from_millis(200),
                "waited for the deadline: {took:?}"
            );
        } else {
            // Known down: fails at once until a health ping gets through.
            assert!(took < Duration::from_millis(50), "{took:?}");
            assert!(refused.to_string().contains("failing fast"), "{refused}");
        }
        let started = Instant::now();
        assert!(store.session("s").await.is_err());
        assert!(started.elapsed() < Duration::from_millis(800));
    }
    assert!(store.check().is_err());
    redis.freeze(false).unwrap();
    let started = Instant::now();
    loop {
        if let Ok(answer) = apply(&store, &config, 1, line).await {
            assert!(matches!(answer, Answer::Compaction { .. }));
            break;
        }
        assert!(
            started.elapsed() < Duration::from_secs(10),
            "never recovered"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

#[tokio::test]
async fn passwords_and_bad_settings() {
    if !require("passwords_and_bad_settings") {
        return;
    }
    let redis = RedisServer::start_with(&["--requirepass", "s3cret"]).unwrap();
    let port = redis.port();
    let limits = Limits::default();
    let clock: SharedClock = Arc::new(SystemClock);
    let wrong = RedisStore::connect(
        RedisTarget::parse(&format!("redis://:nope@127.0.0.1:{port}")).unwrap(),
        limits,
        clock.clone(),
        options("pw:"),
    )
    .await
    .map(|s| format!("{:?} {:?}", s, s.check()))
    .unwrap_err();
    assert!(
        wrong.to_string().contains("refused the credentials"),
        "{wrong}"
    );
    assert!(!wrong.to_string().contains("nope"), "{wrong}");
    let store = connect(
        &format!("redis://127.0.0.1:{port}"),
        clock.clone(),
        limits,
        RedisOptions {
            password: Some("s3cret".into()),
            ..options("pw:")
        },
    )
    .await;
    let answer = apply(
        &store,
        &ConfigSet::default(),
        1,
        r#"{"type":"compaction","session":"s"}"#,
    )
    .await
    .unwrap();
    assert!(matches!(answer, Answer::Compaction { armed: 3, .. }));
    let braces = RedisStore::connect(
        RedisTarget::parse(&format!("redis://127.0.0.1:{port}")).unwrap(),
        limits,
        clock,
        options("a{b}:"),
    )
    .await
    .unwrap_err();
    assert!(braces.to_string().contains("braces"));
    assert!(matches!(braces, StoreError::InvalidSettings { .. }));
    // No password where one is needed: refused at once, not retried.
    let missing = RedisStore::connect(
        RedisTarget::parse(&format!("redis://127.0.0.1:{port}")).unwrap(),
        limits,
        Arc::new(SystemClock),
        options("pw:"),
    )
    .await
    .unwrap_err();
    assert!(
        matches!(&missing, StoreError::InvalidSettings { .. })
            && missing.to_string().contains("refused the credentials"),
        "{missing}"
    );
}

/// A database number the server does not have is a setting to fix: the store refuses to
/// start (rather than starting unavailable and retrying for ever), and says why.
#[tokio::test]
async fn a_database_number_out_of_range_is_refused_at_connect() {
    if !require("a_database_number_out_of_range_is_refused_at_connect") {
        return;
    }
    let redis = RedisServer::start().unwrap();
    let started = Instant::now();
    let refused = RedisStore::connect(
        RedisTarget::parse(&format!("{}/99", redis.url())).unwrap(),
        Limits::default(),
        Arc::new(SystemClock),
        options("db:"),
    )
    .await
    .unwrap_err();
    assert!(
        matches!(refused, StoreError::InvalidSettings { .. }),
        "{refused:?}"
    );
    let message = refused.to_string();
    assert!(
        message.contains("refused the connection settings") && message.contains("out of range"),
        "{message}"
    );
    assert!(started.elapsed() < Duration::from_secs(2));
    // A database it has works.
    let store = connect(
        &format!("{}/3", redis.url()),
        Arc::new(SystemClock),
        Limits::default(),
        options("db:"),
    )
    .await;
    assert!(store.check().is_ok());
}

/// A session that stays active for many TTLs keeps its place in the registry (it is
/// refreshed once per quarter TTL), so the session limit keeps counting it; once idle it
/// leaves after 1.25 TTL.
#[tokio::test]
async fn live_sessions_keep_their_place_in_the_registry() {
    if !require("live_sessions_keep_their_place_in_the_registry") {
        return;
    }
    let redis = RedisServer::start().unwrap();
    let clock = ManualClock::new(Millis::new(1_000_000));
    let store = one_session_store(&redis.url(), &clock, "reg:").await;
    let config = ConfigSet::default();
    apply(&store, &config, 1, &compaction("s1", "a"))
        .await
        .unwrap();
    for step in 0..12 {
        clock.advance(Duration::from_secs(20));
        // A new run now and then: its first event refreshes the entry too.
        let run = if step % 4 == 3 {
            format!("b{step}")
        } else {
            "a".into()
        };
        apply(&store, &config, 1, &compaction("s1", &run))
            .await
            .unwrap();
        // The refresh runs in the background.
        tokio::time::sleep(Duration::from_millis(30)).await;
        store.expire_idle().await.unwrap();
        assert_eq!(store.stats().sessions, 1, "step {step}");
        let refused = apply(&store, &config, 1, &compaction("s2", "a")).await;
        assert!(
            matches!(refused, Err(StoreError::SessionLimit { limit: 1 })),
            "step {step}: s1 is live for {} s",
            (step + 1) * 20
        );
    }
    clock.advance(Duration::from_secs(76));
    store.expire_idle().await.unwrap();
    assert_eq!(store.stats().sessions, 0);
    apply(&store, &config, 1, &compaction("s2", "a"))
        .await
        .unwrap();
}

/// A private certificate authority in `dir` (`ca.crt`), and certificates it signed for the
/// server (`server.crt`, for 127.0.0.1 and localhost) and for a client (`client.crt`), with
/// their keys (`*.key`).
fn tls_material(dir: &std::path::Path) {
    let run = |args: &[&str]| {
        let out = std::process::Command::new("openssl")
            .args(args)
            .current_dir(dir)
            .output();
        match out {
            Ok(out) if out.status.success() => {}
            Ok(out) => panic!("openssl {args:?}: {}", String::from_utf8_lossy(&out.stderr)),
            Err(e) => {
                panic!("openssl is needed for this test (scripts/setup/redis.sh installs it): {e}")
            }
        }
    };
    let ec = [
        "-newkey",
        "ec",
        "-pkeyopt",
        "ec_paramgen_curve:prime256v1",
        "-nodes",
    ];
    run(&[
        &["req", "-x509"][..],
        &ec,
        &[
            "-keyout",
            "ca.key",
            "-out",
            "ca.crt",
            "-subj",
            "/CN=loopguard-test-ca",
            "-days",
            "2",
        ],
    ]
    .concat());
    std::fs::write(
        dir.join("server.cnf"),
        "subjectAltName=IP:127.0.0.1,DNS:localhost\n",
    )
    .unwrap();
    std::fs::write(dir.join("client.cnf"), "extendedKeyUsage=clientAuth\n").unwrap();
    for (name, subject) in [
        ("server", "/CN=localhost"),
        ("client", "/CN=loopguard-replica"),
    ] {
        let (key, csr, crt, ext) = (
            format!("{name}.key"),
            format!("{name}.csr"),
            format!("{name}.crt"),
            format!("{name}.cnf"),
        );
        run(&[
            &["req"][..],
            &ec,
            &["-keyout", &key, "-out", &csr, "-subj", subject],
        ]
        .concat());
        run(&[
            "x509",
            "-req",
            "-in",
            &csr,
            "-CA",
            "ca.crt",
            "-CAkey",
            "ca.key",
            "-CAcreateserial",
            "-out",
            &crt,
            "-days",
            "2",
            "-extfile",
            &ext,
        ]);
    }
}

/// A Redis serving TLS only, with the certificates of [`tls_material`] made in `dir`;
/// `auth_clients` is its `tls-auth-clients` (`yes`: clients need a certificate). Returns
/// it and its `rediss://` URL.
fn tls_redis(dir: &std::path::Path, auth_clients: &str) -> (RedisServer, String) {
    tls_material(dir);
    let path = |name: &str| dir.join(name).display().to_string();
    let tls_port = free_port().unwrap();
    let redis = RedisServer::start_with(&[
        "--tls-port",
        &tls_port.to_string(),
        "--tls-cert-file",
        &path("server.crt"),
        "--tls-key-file",
        &path("server.key"),
        "--tls-ca-cert-file",
        &path("ca.crt"),
        "--tls-auth-clients",
        auth_clients,
    ])
    .unwrap();
    (redis, format!("rediss://127.0.0.1:{tls_port}"))
}

/// `rediss://`: TLS with a private certificate authority given as a PEM file; without it
/// the server's certificate is not trusted and the store serves as unavailable.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tls_with_a_private_authority() {
    if !require("tls_with_a_private_authority") {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let (redis, url) = tls_redis(dir.path(), "no");
    let path = |name: &str| dir.path().join(name).display().to_string();
    let clock: SharedClock = Arc::new(SystemClock);
    let config = ConfigSet::default();
    let line = r#"{"type":"compaction","session":"s","run":"r"}"#;
    let store = connect(
        &url,
        clock.clone(),
        Limits::default(),
        RedisOptions {
            ca_pem: Some(std::fs::read(path("ca.crt")).unwrap()),
            ..options("tls:")
        },
    )
    .await;
    assert!(store.check().is_ok());
    let answer = apply(&store, &config, 1, line).await.unwrap();
    assert!(matches!(answer, Answer::Compaction { armed: 3, .. }));
    assert_eq!(
        redis.command(&["EXISTS", "tls:{s}:r:r"]).unwrap().int(),
        Some(1),
        "written over TLS"
    );
    // The system's roots do not know this authority.
    let untrusted = connect(&url, clock, Limits::default(), options("tls:")).await;
    assert!(untrusted.check().is_err());
    assert!(apply(&untrusted, &config, 1, line).await.is_err());
}

/// A Redis that checks client certificates (`tls-auth-clients yes`) serves a store that
/// presents one its authority signed, and refuses one that presents none.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tls_with_a_client_certificate() {
    if !require("tls_with_a_client_certificate") {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let (redis, url) = tls_redis(dir.path(), "yes");
    let read = |name: &str| std::fs::read(dir.path().join(name)).unwrap();
    let clock: SharedClock = Arc::new(SystemClock);
    let config = ConfigSet::default();
    let line = r#"{"type":"compaction","session":"s","run":"r"}"#;
    let with_cert = connect(
        &url,
        clock.clone(),
        Limits::default(),
        RedisOptions {
            ca_pem: Some(read("ca.crt")),
            client_cert: Some(ClientCert {
                cert_pem: read("client.crt"),
                key_pem: read("client.key"),
            }),
            ..options("mtls:")
        },
    )
    .await;
    assert!(with_cert.check().is_ok());
    apply(&with_cert, &config, 1, line).await.unwrap();
    assert_eq!(
        redis.command(&["EXISTS", "mtls:{s}:r:r"]).unwrap().int(),
        Some(1),
        "written over mutual TLS"
    );
    let without = connect(
        &url,
        clock,
        Limits::default(),
        RedisOptions {
            ca_pem: Some(read("ca.crt")),
            ..options("mtls:")
        },
    )
    .await;
    assert!(
        without.check().is_err(),
        "no client certificate, no service"
    );
    assert!(apply(&without, &config, 1, line).await.is_err());
    // The key never shows in the options' debug output.
    let shown = format!(
        "{:?}",
        ClientCert {
            cert_pem: read("client.crt"),
            key_pem: read("client.key"),
        }
    );
    assert!(!shown.contains("PRIVATE KEY"), "{shown}");
}

/// A Redis at `maxmemory` with `noeviction` refuses new sessions as it refuses new events
/// of live ones (a script's pruning write used to come first and let them in): every event
/// that would add data fails (503 in the server), nothing is half-written, and once Redis
/// has room again new sessions are taken.
#[tokio::test]
async fn a_full_redis_refuses_new_sessions_too() {
    if !require("a_full_redis_refuses_new_sessions_too") {
        return;
    }
    let redis =
        RedisServer::start_with(&["--maxmemory", "3mb", "--maxmemory-policy", "noeviction"])
            .unwrap();
    let store = connect(
        &redis.url(),
        Arc::new(SystemClock),
        Limits::default(),
        options("full:"),
    )
    .await;
    let config = ConfigSet::default();
    let event = |session: &str| {
        format!(
            r#"{{"type":"call","session":"{session}","call_id":"c1","tool":"read","args":{{"pad":"{}"}}}}"#,
            "x".repeat(200)
        )
    };
    let mut accepted = 0;
    let first_refusal = loop {
        match apply(&store, &config, 1, &event(&format!("s{accepted}"))).await {
            Ok(_) => accepted += 1,
            Err(e) => break e,
        }
        assert!(accepted < 100_000, "Redis never filled up");
    };
    assert!(first_refusal.is_transient(), "{first_refusal:?}");
    assert!(first_refusal.to_string().contains("OOM"), "{first_refusal}");
    let mut let_in = 0;
    for k in 0..2_000 {
        if apply(&store, &config, 1, &event(&format!("late-{k}")))
            .await
            .is_ok()
        {
            let_in += 1;
        }
    }
    let live = apply(&store, &config, 1, &event("s0")).await;
    println!(
        "{accepted} sessions taken before Redis was full; then {let_in} of 2,000 new sessions let in; a live session's next event: {}",
        match &live {
            Ok(_) => "taken".to_owned(),
            Err(e) => e.to_string(),
        }
    );
    assert_eq!(let_in, 0, "new sessions are refused once Redis is full");
    assert!(live.is_err(), "and so are events of live sessions");
    assert!(
        store.check().is_ok(),
        "refused writes do not take the link down"
    );
    redis.command(&["CONFIG", "SET", "maxmemory", "0"]).unwrap();
    apply(&store, &config, 1, &event("after")).await.unwrap();
}
