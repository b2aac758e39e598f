//! A run state of format version 3 as the build before objects were sorted by key prefixes
//! wrote it (three events, the last call blocked as a ping-pong), read by this build: it
//! reads, it equals the state this build makes of the same events (so every fingerprint
//! in it, signatures and outcomes, is the one this build computes), this build writes the
//! same fields (then those later format versions added after them), and the run goes on from
//! it exactly as from that state. Old states are read, never migrated: the fingerprint
//! version has not changed (`docs/decisions.md`).

use loopguard::config::ConfigSet;
use loopguard::json::Tape;
use loopguard::{
    Call, Millis, OutcomeOf, RunState, Scope, SessionState, Verdict, STATE_FORMAT_VERSION,
};

/// `RunState::to_bytes` after `EVENTS`, as written by the earlier build.
const WRITTEN_BEFORE: &str = "03031092bc284d40d3d067aec3999c2aeb33be1050aab6ec1ce72b8d1151b3efff5cd72cddf6edafece892ac6700ffffffff0f000101010000ff1008657b523a63fb8863955aa7ae002fb010592ee8aeaa5b6e3653e9258fef60284982aca5cdece4bfd38e0101ffffffff0f000202010000ff1092bc284d40d3d067aec3999c2aeb33be1000000000000000000000000000000000d585b3cdcdca9bc43000ffffffff0f020303020000ff02047265616402f29bcb8f95d488932c046772657001efc8c38bfacffd95b101000000000000b8170001d585b3cdcdca9bc43003ddf6edafece892ac67ae87e7e4a9e5fa99be0191a2cdfdfe9fd7eb2c0000ff020082aca5cdece4bfd38e01e3aaeabaea95c097b001d3d297f9f89d9894490000ff0200d585b3cdcdca9bc430ae87e7e4a9e5fa99be01000000ff0001010101020304726561640104677265709801435249544943414c3a20796f752061726520616c7465726e6174696e67206265747765656e207265616420616e64206772657020283320636f6e73656375746976652063616c6c732c20332074696d6573292077697468206e6f2070726f67726573732e20546869732063616c6c2077617320626c6f636b65643a207468652070696e672d706f6e67206c6f6f7020697320737475636b2e1092bc284d40d3d067aec3999c2aeb33be011008657b523a63fb8863955aa7ae002fb000000000000000000000";

/// Tool, arguments and result of each event, as JSON text (members in written order).
const EVENTS: [(&str, &str, &str); 3] = [
    (
        "read",
        r#"{"path":"/a.ts","offset":0,"limit":400}"#,
        r#"{"content":[{"type":"text","text":"same\n"}],"details":{"ok":true,"bytes":5,"truncated":false}}"#,
    ),
    (
        "grep",
        r#"{"pattern":"TODO","path":"/w","caseSensitive":false}"#,
        r#"{"content":[{"type":"text","text":"3 matches"}],"details":{"count":3}}"#,
    ),
    (
        "read",
        r#"{"limit":400,"offset":0,"path":"/a.ts"}"#,
        r#"{"details":{"truncated":false,"bytes":5,"ok":true},"content":[{"text":"same\n","type":"text"}]}"#,
    ),
];

fn config() -> ConfigSet {
    ConfigSet::parse(
        "{tools:{loopDetection:{enabled:true,warningThreshold:2,criticalThreshold:3,historySize:30}}}",
    )
    .expect("valid config")
}

/// Applies one event (call, then its result unless blocked) at second `i + 1`.
fn apply(
    state: &mut RunState,
    set: &ConfigSet,
    i: usize,
    (tool, args, result): (&str, &str, &str),
) -> Verdict {
    let cfg = set.global();
    let (mut args_tape, mut result_tape) = (Tape::new(), Tape::new());
    let args = args_tape.parse(args).expect("valid JSON");
    let id = format!("c{i}");
    let now = Millis::new(1_000 * (i as u64 + 1));
    let scope = Scope::new("s").with_run(Some("r"));
    let ticket = state.begin(
        &mut SessionState::default(),
        cfg,
        &scope,
        &Call::with_args(tool, args).with_id(Some(&id)),
        now,
    );
    let verdict = ticket.verdict().clone();
    let result = result_tape.parse(result).expect("valid JSON");
    state
        .finish(
            &mut SessionState::default(),
            cfg,
            ticket,
            OutcomeOf::Result(result),
            now,
        )
        .expect("a ticket from begin finishes");
    verdict
}

#[test]
fn a_state_the_previous_build_wrote_reads_and_goes_on_alike() {
    let bytes: Vec<u8> = (0..WRITTEN_BEFORE.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(&WRITTEN_BEFORE[i..i + 2], 16).expect("hex"))
        .collect();
    assert_eq!(bytes[0], 3, "a state of format version 3");
    let mut read = RunState::from_bytes(&bytes).expect("the state reads");
    let set = config();
    let mut made = RunState::default();
    let verdicts: Vec<Verdict> = EVENTS
        .iter()
        .enumerate()
        .map(|(i, &event)| apply(&mut made, &set, i, event))
        .collect();
    assert!(verdicts[2].is_blocked(), "{verdicts:?}");
    assert_eq!(
        read, made,
        "every fingerprint in the old state is this build's"
    );
    let written = made.to_bytes();
    assert_eq!(written[0], STATE_FORMAT_VERSION);
    assert!(
        written[1..].starts_with(&bytes[1..]),
        "and this build writes the same bytes, then the fields later versions added"
    );
    // The run goes on alike: the same read, its members in yet another order.
    let again = (
        "read",
        r#"{"offset":0,"path":"/a.ts","limit":400}"#,
        EVENTS[0].2,
    );
    let (a, b) = (
        apply(&mut read, &set, 3, again),
        apply(&mut made, &set, 3, again),
    );
    assert_eq!(a, b);
    // A repeat of the read the old state recorded: its signature is this build's.
    let detection = a.detection().expect("a warning");
    assert_eq!(
        (detection.count, detection.tool.as_str()),
        (2, "read"),
        "{a:?}"
    );
}

/// Each run `r{i}` of session `s` in `runs`: a response of 300 tokens, then one call that
/// fails the same way (at minute `i`). Returns each call's verdict.
fn session_events(
    set: &ConfigSet,
    session: &mut SessionState,
    runs: std::ops::Range<usize>,
) -> Vec<Verdict> {
    let cfg = set.global();
    let (mut args_tape, mut error_tape) = (Tape::new(), Tape::new());
    let args = args_tape.parse(r#"{"command":"deploy --prod"}"#).unwrap();
    let error = error_tape.parse(r#""permission denied""#).unwrap();
    runs.map(|i| {
        let run = format!("r{i}");
        let scope = Scope::new("s").with_run(Some(&run));
        let now = Millis::new(60_000 * (i as u64 + 1));
        let mut state = RunState::default();
        let usage = loopguard::Usage::new(200, 100).with_id(Some("u"));
        state.usage(session, cfg, &scope, &usage, now).unwrap();
        let ticket = state.begin(session, cfg, &scope, &Call::with_args("exec", args), now);
        let verdict = ticket.verdict().clone();
        state
            .finish(session, cfg, ticket, OutcomeOf::Error(error), now)
            .unwrap();
        verdict
    })
    .collect()
}

/// `SessionState::to_bytes` after `session_events(0..2)` with a session budget, as format
/// version 1 wrote it (a version byte, then the spend fields; version 2 appends
/// `run_storm`'s state after them and left those fields as they were).
const SESSION_WRITTEN_BEFORE: &str = "019003c801000000d804020001e0d40301009003c801000000d8040200e0d4030101009003c801000000d8040200e0d403c0a907";

#[test]
fn a_version_1_session_state_reads_and_goes_on_into_a_storm() {
    let bytes: Vec<u8> = (0..SESSION_WRITTEN_BEFORE.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(&SESSION_WRITTEN_BEFORE[i..i + 2], 16).expect("hex"))
        .collect();
    assert_eq!(bytes[0], 1, "a session state of format version 1");
    let mut read = SessionState::from_bytes(&bytes).expect("the state reads");
    let budget =
        ConfigSet::parse("{ loopguard: { budgets: { session: { tokens: 100000 } } } }").unwrap();
    let mut made = SessionState::default();
    session_events(&budget, &mut made, 0..2);
    assert_eq!(read.spend(), made.spend());
    assert_eq!(read.agents(), made.agents());
    assert_eq!(
        read.to_bytes(),
        made.to_bytes(),
        "the same fields, written as this build's version"
    );
    assert_eq!(
        read.to_bytes()[0],
        loopguard::budget::SESSION_FORMAT_VERSION
    );
    // The session goes on with `run_storm` on: runs 2 to 4 fail the same way.
    let storm = ConfigSet::parse(
        "{ loopguard: { budgets: { session: { tokens: 100000 } }, detectors: { runStorm: { cooldownMinutes: 0 } } } }",
    )
    .unwrap();
    let said: Vec<String> = session_events(&storm, &mut read, 2..6)
        .iter()
        .map(|v| match v.detection() {
            Some(d) => format!("{} {}", d.detector, d.level),
            None => "allow".into(),
        })
        .collect();
    assert_eq!(
        said,
        [
            "allow",
            "run_storm warning",
            "run_storm critical",
            "run_storm critical"
        ]
    );
    let stop = read.storm_stop().expect("the session stopped");
    assert_eq!((stop.runs, stop.until), (3, None));
    let again = SessionState::from_bytes(&read.to_bytes()).unwrap();
    assert_eq!(again.storm_stop(), read.storm_stop());
    assert_eq!(again.spend(), read.spend());
}

/// `SessionState::to_bytes` after `session_events(0..4)` with `run_storm` on, as format
/// version 2 wrote it: the spend fields, then `run_storm`'s state (version 3 appends the
/// session's place in a tree of agents after them and left those fields as they were).
const SESSION_V2_WRITTEN_BEFORE: &str = "02a0069003000000b009040001e0d4030100a0069003000000b0090400e0d403010100a0069003000000b0090400e0d40380d30e01a5a9bad6d5e699e2a50100000001c4bea0fafeb9e9ae959ad1ebb0a9d5821b03c0a907a0fe0a80d30e03e4d9fbbea5e8d0a7d401d3cec5e0a3e4bfc1c001afa5ac94becc85891900010300";

#[test]
fn a_version_2_session_state_reads_and_joins_a_tree() {
    let storm =
        ConfigSet::parse("{ loopguard: { detectors: { runStorm: { cooldownMinutes: 0 } } } }")
            .unwrap();
    let mut made = SessionState::default();
    session_events(&storm, &mut made, 0..4);
    let now = made.to_bytes();
    let bytes: Vec<u8> = (0..SESSION_V2_WRITTEN_BEFORE.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(&SESSION_V2_WRITTEN_BEFORE[i..i + 2], 16).expect("hex"))
        .collect();
    assert_eq!(bytes[0], 2, "a session state of format version 2");
    let mut read = SessionState::from_bytes(&bytes).expect("the state reads");
    assert_eq!(read.spend(), made.spend());
    assert_eq!(read.storm_row(), made.storm_row());
    assert_eq!(
        read.to_bytes(),
        now,
        "the same fields, written as version 3"
    );
    assert!(read.tree().link().is_none() && read.tree().record().is_none());
    // The session goes on as the root of a tree: its first sub-agent's spawn is recorded.
    let tree = loopguard::tree::AgentTree::default();
    let child = Scope::new("s/agent-1").with_parent(Some("s"), Some("r4"));
    let spawn = read.spawn_child(&tree, &child, 7, Millis::new(1));
    assert_eq!(spawn, loopguard::tree::Spawn::Allowed);
    let again = SessionState::from_bytes(&read.to_bytes()).unwrap();
    assert_eq!(again.tree().record().map(|t| t.counts().children), Some(1));
    assert_eq!(again.storm_row(), made.storm_row());
}
