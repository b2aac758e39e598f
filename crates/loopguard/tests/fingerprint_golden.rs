//! `lg1` is a persisted contract: stores keep fingerprints across versions of the program
//! and compare them with new ones. These vectors pin it. Each was computed by the build
//! before objects were sorted by key prefixes and event readers left unread members out,
//! and must come out the same from the text (the tape, and for results the tape as event
//! readers read it) and from the parsed value; so must the call signatures and outcome
//! fingerprints below. A change here is a new fingerprint version (`docs/fingerprints.md`),
//! never an edit of the expected values.

use loopguard::fingerprint::{Fingerprint, OutcomeOf, OutcomePrint, OutcomeRule, RESULT_READ};
use loopguard::json::{Read, Tape};
use loopguard::CallPrint;
use serde_json::Value;

/// JSON texts and their fingerprints: every tag of the encoding, number spellings, escapes,
/// member order, repeated keys, keys sharing their first eight bytes, an object too large
/// to be ordered on the stack.
const VALUES: &[(&str, &str)] = &[
    ("null", "c311d21b3583875acbaa0f6724ae8b0a"),
    ("true", "190e8fcdd645bb7c76033e85f0acf92d"),
    ("false", "b3b2b50bf19ad7d533c155909ff3ba9a"),
    ("0", "3e56ac4c92225fe585dde81128245bab"),
    ("-1", "e21c4a0f33219743cc74fa0ab622fdbf"),
    ("1.0", "fcae2173da6f665389689cbd5f7a696a"),
    ("1e0", "fcae2173da6f665389689cbd5f7a696a"),
    ("-0.0", "3e56ac4c92225fe585dde81128245bab"),
    ("1.5", "09c491c215af230b1785800ec2df59d9"),
    ("18446744073709551615", "384766ce2a80fea5a5af3c1182b52ab2"),
    ("-9223372036854775808", "b387eec595de1fa7eea0dfee5657d71d"),
    ("9007199254740993", "962813362302af9000cc51482a7f10e1"),
    ("1e300", "e4ff31b44189e10fbb32a83bb0f37446"),
    ("2.5e-8", "67d35cf18ebf4f38e458c1d467e540ec"),
    ("1e999", "e8103140d28885387a18acdb920fe6b9"),
    ("\"\"", "85fefc6f12f345b396720846b631026c"),
    ("\"loop\"", "a6410ce5e572b0100308121436f68dbd"),
    ("\"é\\n\\\"\\\\\\/\\u00e9\\ud83d\\ude00\"", "2a64e156204060d45b0f143cfccd5c71"),
    ("\"\\ud800\"", "9017e9f2b0b83bc5284ebf1508a3faa7"),
    ("[]", "fd9065b8bc74010c4871d24ba9b0e935"),
    ("{}", "3de1eca911083d431ab03da80c29abef"),
    ("[1,[2,[3,{}]],{\"a\":[]}]", "da94ff615a30b0af595e050043185b89"),
    ("{\"a\":1,\"b\":{\"x\":[1,2],\"y\":null}}", "bbaf01e838e8a244607db731ce763740"),
    ("{\"b\":{\"y\":null,\"x\":[1,2]},\"a\":1}", "bbaf01e838e8a244607db731ce763740"),
    ("{\"path\":\"/workspace/project/src/module_07/component_0257.ts\",\"offset\":80,\"limit\":400,\"encoding\":\"utf-8\",\"why\":\"step 7 of the current task\"}", "dd62e93efa6b46b79b48bfe2d188590d"),
    ("{\"timeout_seconds\":30,\"timeout_ms\":5000,\"timeout\":1,\"time\":2}", "dea605042cf83400ad35e1397ed3bdd3"),
    ("{\"b\":1,\"a\":2,\"b\":3}", "4b12f374d0854c9fdf1ab53e5d4ca3da"),
    ("{\"\\u0061\":1,\"a\\u0000\":2,\"a\":3}", "ca9dabfe444b3058ea3d5e163cef960e"),
    ("{\"zz\":{\"yy\":{\"xx\":[{\"b\":1,\"a\":0}]}},\"aa\":[true,false,null]}", "ff5709b53e3ed44773b1b624542efe51"),
    ("{\"k01\":1,\"k02\":2,\"k03\":3,\"k04\":4,\"k05\":5,\"k06\":6,\"k07\":7,\"k08\":8,\"k09\":9,\"k10\":10,\"k11\":11,\"k12\":12,\"k13\":13,\"k14\":14,\"k15\":15,\"k16\":16,\"k17\":17,\"k00\":0}", "4fa80c042cfd2aad7d7acabf913e0409"),
];

/// Calls and what they returned (`true`: as an error): the call's signature and the
/// outcome's fingerprint, for the outcome rules of SPEC §2.
const CALLS: &[(&str, &str, &str, bool, &str, &str)] = &[
    ("read", "{\"path\":\"/a.ts\",\"offset\":0,\"limit\":400}", "{\"content\":[{\"type\":\"text\",\"text\":\"  one\\ntwo \"}],\"details\":{\"ok\":true,\"bytes\":9,\"truncated\":false,\"source\":\"read\"}}", false, "be33eb2a9c99c3ae67d0d3404d28bc92", "5f2dfb0b0683824f7b026009431c5047"),
    ("exec", "{\"command\":\"npm test\",\"cwd\":\"/w\",\"timeoutMs\":120000}", "{\"content\":[{\"type\":\"text\",\"text\":\"done\"}],\"details\":{\"status\":\"completed\",\"exitCode\":1,\"durationMs\":1200,\"cwd\":\"/w\",\"aggregated\":\"FAIL 3 tests\"}}", false, "f52d0ce6c7876a77dd1104b15591b9b0", "e57ab5b7133cc6c7125275db6f0fbba3"),
    ("exec", "{\"command\":\"npm run build\"}", "{\"details\":{\"status\":\"running\",\"tail\":\"compiling 3/9\",\"pid\":4242}}", false, "e098f3f9f5231e309271bef4ef48f358", "12896fa8b25b5ecb5cb68fa65dfe1bf4"),
    ("process", "{\"action\":\"poll\",\"sessionId\":\"proc-007\"}", "{\"content\":[{\"type\":\"text\",\"text\":\"still running\"}],\"details\":{\"status\":\"running\",\"aggregated\":\"x\",\"exitCode\":null}}", false, "a69d9a23c5377f23416ef9f8c6311e47", "c27c02dcacf2f3b85579ee220aaebf52"),
    ("message", "{\"action\":\"send\",\"target\":\"chat:1\",\"text\":\"hi\"}", "{\"details\":{\"ok\":true,\"channel\":\"feishu\",\"messageId\":\"om_1\",\"runId\":\"run_1\",\"receipt\":{\"platformMessageId\":\"p_1\"},\"route\":{\"id\":\"conv-main\"}}}", false, "59c8a69e924cebc29a07d011192dd5c8", "5eb7ee9186fde3795c4b22c933257412"),
    ("update_plan", "{\"plan\":[{\"step\":\"a\",\"status\":\"completed\"},{\"step\":\" \",\"status\":\"pending\"}],\"explanation\":\"x\"}", "{\"content\":[{\"type\":\"text\",\"text\":\"ok\"}],\"details\":{\"plan\":[]}}", false, "789ddebc161e5f262a9b2011ff80b51c", "fbf69c1727b7ad2026326a70426fdab3"),
    ("web_fetch", "{\"url\":\"https://example.com/a\",\"maxChars\":2000}", "\"Tool web_fetch not found\"", true, "272c3c20d24724bf0959bf30cac7c226", "c2b2a65f416de1bae798e7f840bf5340"),
    ("grep", "{\"pattern\":\"TODO\",\"path\":\"/w\"}", "{\"name\":\"Error\",\"code\":7}", true, "e66132c9ff9440dec5741509ac358fef", "74f586a2116ff38fdfb4dbfa0e0915f6"),
];

/// What event readers keep of a result.
static RESULT: Read = RESULT_READ;

#[test]
fn values_keep_their_fingerprints() {
    let mut tape = Tape::new();
    for (text, want) in VALUES {
        let raw = tape.parse(text).expect("valid JSON");
        assert_eq!(Fingerprint::of(raw).to_string(), *want, "{text}");
        if let Ok(value) = serde_json::from_str::<Value>(text) {
            assert_eq!(
                Fingerprint::of(&value).to_string(),
                *want,
                "{text} as a value"
            );
        }
    }
}

#[test]
fn calls_and_outcomes_keep_their_fingerprints() {
    let (mut args_tape, mut result_tape) = (Tape::new(), Tape::new());
    for (tool, args_text, result_text, error, signature, outcome) in CALLS {
        let args: Value = serde_json::from_str(args_text).expect("valid JSON");
        let result: Value = serde_json::from_str(result_text).expect("valid JSON");
        let raw_args = args_tape.parse(args_text).expect("valid JSON");
        let print = CallPrint::new(tool, &args);
        assert_eq!(
            print.signature.to_string(),
            *signature,
            "{tool} {args_text}"
        );
        assert_eq!(CallPrint::new(tool, raw_args).signature, print.signature);
        let rule = OutcomeRule::for_call(tool, &args);
        let hashed = |p: OutcomePrint| match p {
            OutcomePrint::Hashed { fingerprint, .. } => fingerprint.to_string(),
            other => format!("{other:?}"),
        };
        let (by_value, by_text) = if *error {
            let raw = result_tape.parse(result_text).expect("valid JSON");
            (
                OutcomePrint::new(rule, OutcomeOf::Error(&result)),
                OutcomePrint::new(rule, OutcomeOf::Error(raw)),
            )
        } else {
            let raw = result_tape
                .parse_read(result_text, &RESULT)
                .expect("valid JSON");
            (
                OutcomePrint::new(rule, OutcomeOf::Result(&result)),
                OutcomePrint::new(rule, OutcomeOf::Result(raw)),
            )
        };
        assert_eq!(hashed(by_value), *outcome, "{tool} -> {result_text}");
        assert_eq!(
            hashed(by_text),
            *outcome,
            "{tool} -> {result_text} from text"
        );
    }
}
