//! Differential: for any bytes `serde_json` parses into a `Value`, the fingerprints the raw
//! path computes from the text equal those of the `Value` path: the value, the args of a
//! few tools (policy tables and plan shape included), and the outcome print of the value
//! as a result and as an error under each rule, with SPEC's config and with masking and a
//! tool policy on; the result also as event readers tokenize it, with only what the
//! outcome rules read ([`RESULT_READ`]). The first byte picks the tool.
#![no_main]

use std::sync::OnceLock;

use libfuzzer_sys::fuzz_target;
use loopguard::config::ConfigSet;
use loopguard::fingerprint::{
    failure_of, is_failure, Fingerprint, OutcomeOf, OutcomePrint, RESULT_READ,
};
use loopguard::json::{Read, Tape};
use loopguard::CallPrint;

const TOOLS: [&str; 8] = [
    "read",
    "exec",
    "process",
    "message",
    "telegram",
    "update_plan",
    "notify_x",
    "fetch",
];

fn configs() -> &'static [ConfigSet; 2] {
    static CONFIGS: OnceLock<[ConfigSet; 2]> = OnceLock::new();
    CONFIGS.get_or_init(|| {
        [
            ConfigSet::default(),
            ConfigSet::parse(
                r#"{ tools: { loopDetection: { enabled: true } }, loopguard: {
                    masking: {}, detectors: { targetThrash: {} },
                    policy: { tools: [
                        { match: "read", ignoreResult: ["details.a", "b", "details.*.c"], ignoreArgs: ["a.b", "c"] },
                        { match: "notify_*", class: "send" },
                        { match: "fetch", mask: true, ignoreResult: ["text"] },
                    ] } } }"#,
            )
            .expect("valid config"),
        ]
    })
}

fuzz_target!(|data: &[u8]| {
    let Some((&pick, rest)) = data.split_first() else {
        return;
    };
    let Ok(text) = std::str::from_utf8(rest) else {
        return;
    };
    let Ok(value) = serde_json::from_str::<serde_json::Value>(text) else {
        return;
    };
    static RESULT: Read = RESULT_READ;
    let mut tape = Tape::new();
    let raw = tape
        .parse(text)
        .expect("the tape reads what serde_json reads");
    let mut read_tape = Tape::new();
    let read = read_tape
        .parse_read(text, &RESULT)
        .expect("the tape reads what serde_json reads");
    assert_eq!(Fingerprint::of(raw), Fingerprint::of(&value), "{text}");
    let tool = TOOLS[usize::from(pick) % TOOLS.len()];
    for config in configs() {
        let cfg = config.global();
        let a = CallPrint::for_config(tool, &value, cfg);
        let b = CallPrint::for_config(tool, raw, cfg);
        assert_eq!(
            (a.signature, a.rule, a.known_poll, a.target),
            (b.signature, b.rule, b.known_poll, b.target)
        );
        for (v, r) in [
            (OutcomeOf::Result(&value), OutcomeOf::Result(raw)),
            (OutcomeOf::Error(&value), OutcomeOf::Error(raw)),
        ] {
            assert_eq!(
                OutcomePrint::for_config(a.rule, v, cfg),
                OutcomePrint::for_config(b.rule, r, cfg),
                "{tool}: {text}"
            );
            assert_eq!(is_failure(tool, v), is_failure(tool, r));
            assert_eq!(failure_of(tool, v), failure_of(tool, r));
        }
        let (v, r) = (OutcomeOf::Result(&value), OutcomeOf::Result(read));
        assert_eq!(
            OutcomePrint::for_config(a.rule, v, cfg),
            OutcomePrint::for_config(b.rule, r, cfg),
            "{tool}: {text} (as read)"
        );
        assert_eq!(is_failure(tool, v), is_failure(tool, r));
        assert_eq!(failure_of(tool, v), failure_of(tool, r));
    }
});
