//! The rules of SPEC §2, each checked on `serde_json` values and, through [`fp`], on the
//! same values as raw JSON text.

use super::*;
use crate::json::{Raw, Tape};
use serde_json::{json, Value};

/// The outcome print of a call's outcome, computed from values and from raw text; the
/// two must agree.
fn fp(tool: &str, args: Value, outcome: Outcome<'_>) -> OutcomePrint {
    let by_value = OutcomePrint::new(OutcomeRule::for_call(tool, &args), outcome);
    let (mut t1, mut t2) = (Tape::new(), Tape::new());
    let args_text = args.to_string();
    let args_doc = t1.parse(&args_text).unwrap();
    let rule = OutcomeRule::for_call(tool, args_doc);
    assert_eq!(rule, OutcomeRule::for_call(tool, &args));
    let text = match outcome {
        OutcomeOf::Result(v) | OutcomeOf::Error(v) => v.to_string(),
        OutcomeOf::Nothing => "null".into(),
    };
    let doc = t2.parse(&text).unwrap();
    let raw: RawOutcome<'_> = match outcome {
        OutcomeOf::Result(_) => OutcomeOf::Result(doc),
        OutcomeOf::Error(_) => OutcomeOf::Error(doc),
        OutcomeOf::Nothing => OutcomeOf::Nothing,
    };
    assert_eq!(
        OutcomePrint::new(rule, raw),
        by_value,
        "raw and value paths differ"
    );
    assert_eq!(
        args_fingerprint(tool, args_doc),
        args_fingerprint(tool, &args)
    );
    by_value
}

/// The fingerprint of raw JSON text.
fn raw_fp(text: &str) -> Fingerprint {
    let mut tape = Tape::new();
    let doc = tape.parse(text).unwrap();
    let root: Raw<'_> = doc;
    Fingerprint::of(root)
}

mod rules {
    use super::*;

    fn fp(tool: &str, args: Value, outcome: Outcome<'_>) -> OutcomePrint {
        super::fp(tool, args, outcome)
    }

    fn hash(tool: &str, args: Value, result: Value) -> Fingerprint {
        match fp(tool, args, Outcome::Result(&result)) {
            OutcomePrint::Hashed { fingerprint, .. } => fingerprint,
            other => panic!("expected a hash, got {other:?}"),
        }
    }

    fn err(e: Value) -> (Fingerprint, Option<String>) {
        match fp("read", json!({}), Outcome::Error(&e)) {
            OutcomePrint::Hashed {
                fingerprint,
                unknown_tool,
            } => (fingerprint, unknown_tool),
            other => panic!("expected a hash, got {other:?}"),
        }
    }

    #[test]
    fn display_is_32_hex_digits() {
        let f = Fingerprint::of(&json!({"a": 1}));
        let s = f.to_string();
        assert_eq!(s.len(), 32);
        assert!(s
            .chars()
            .all(|c| c.is_ascii_hexdigit() && !c.is_ascii_uppercase()));
    }

    #[test]
    fn signature_fast_path_equals_the_digest() {
        for tool in ["", "read", &"x".repeat(64), &"y".repeat(65)] {
            let fp = Fingerprint::from_u128(0x1234_5678_9abc_def0_1122_3344_5566_7788);
            let slow = crate::canonical::hash_with(|d| {
                d.str(tool);
                d.write(&fp.as_u128().to_le_bytes());
            });
            assert_eq!(Signature::new(tool, fp).as_u128(), slow, "{}", tool.len());
        }
    }

    #[test]
    fn signature_pairs_tool_and_args() {
        let a = CallPrint::new(" read ", &json!({"p": 1}));
        let b = CallPrint::new("read", &json!({"p": 1}));
        let c = CallPrint::new("list", &json!({"p": 1}));
        assert_eq!(a.tool, "read");
        assert_eq!(a.signature, b.signature);
        assert_eq!(a.args, c.args);
        assert_ne!(a.signature, c.signature);
    }

    #[test]
    fn rule1_error_forms_share_text() {
        let (a, _) = err(json!("boom"));
        assert_eq!(a, err(json!({"message": "boom", "name": "E"})).0);
        assert_eq!(a, err(json!({"message": "", "name": "boom"})).0);
        assert_ne!(a, err(json!({"message": "other"})).0);
        assert_eq!(err(json!(42)).0, err(json!("42")).0);
        assert_eq!(err(json!(42.0)).0, err(json!("42")).0);
        assert_eq!(err(json!(true)).0, err(json!("true")).0);
        assert_eq!(err(json!(null)).0, err(json!("null")).0);
        assert_eq!(err(json!({"code": 1})).0, err(json!("{\"code\":1}")).0);
        // Errors never collide with results of the same text.
        assert_ne!(a, hash("read", json!({}), json!("boom")));
    }

    #[test]
    fn rule1_unknown_tool_names() {
        let cases = [
            ("Tool exec not found", Some("exec")),
            ("Unknown tool: foo", Some("foo")),
            ("unknown tool 'Foo.Bar'", Some("foo.bar")),
            ("Unknown tool id: missing_b", Some("id")),
            ("tool \"x-y\" is not available", Some("x-y")),
            ("  UNKNOWN TOOL::: web_fetch2", Some("web_fetch2")),
            ("tool exec failed", None),
            ("no such tool", None),
            ("", None),
        ];
        for (text, want) in cases {
            assert_eq!(unknown_tool_name(text).as_deref(), want, "{text}");
        }
        assert_eq!(
            err(json!({"message": "Unknown tool: zed"})).1.as_deref(),
            Some("zed")
        );
        assert_eq!(
            err(json!({"detail": "Unknown tool: zed"})).1.as_deref(),
            Some("zed")
        );
    }

    #[test]
    fn rule2_non_objects_hash_by_value() {
        assert_eq!(
            hash("read", json!({}), json!("x")),
            Fingerprint::of(&json!("x"))
        );
        assert_eq!(
            hash("read", json!({}), json!([1])),
            Fingerprint::of(&json!([1]))
        );
        assert_ne!(
            hash("read", json!({}), json!(null)),
            hash("read", json!({}), json!("null"))
        );
    }

    #[test]
    fn rule3_text_is_joined_and_trimmed() {
        let a = hash(
            "read",
            json!({}),
            json!({"content": [{"type": "text", "text": "  a"}, {"type": "image"}, {"type": "text", "text": "b \n"}]}),
        );
        let b = hash(
            "read",
            json!({}),
            json!({"content": [{"type": "text", "text": "a\nb"}]}),
        );
        assert_eq!(a, b);
        let explicit = Fingerprint::of(&json!({"details": {}, "text": "a\nb"}));
        assert_eq!(a, explicit);
        // Elements without a string type do not count; blank texts vanish at the edges.
        let c = hash(
            "read",
            json!({}),
            json!({"content": [{"text": "zzz"}, {"type": "text", "text": " "}, {"type": "text", "text": "a\nb"}, {"type": "text", "text": "\n"}]}),
        );
        assert_eq!(c, b);
        let empty = hash("read", json!({}), json!({"content": "not an array"}));
        assert_eq!(empty, Fingerprint::of(&json!({"details": {}, "text": ""})));
    }

    #[test]
    fn rule4_loop_veto_has_no_fingerprint() {
        let veto = json!({"details": {"status": "blocked", "deniedReason": "tool-loop"}});
        assert_eq!(
            fp("read", json!({}), Outcome::Result(&veto)),
            OutcomePrint::Veto
        );
        let plugin = json!({"details": {"status": "blocked", "deniedReason": "plugin"}});
        assert!(matches!(
            fp("read", json!({}), Outcome::Result(&plugin)),
            OutcomePrint::Hashed { .. }
        ));
        assert_eq!(
            fp("read", json!({}), Outcome::Nothing),
            OutcomePrint::Nothing
        );
    }

    #[test]
    fn rule5_exec_ignores_volatile_fields() {
        let r = |details: Value, text: &str| {
            hash(
                "exec",
                json!({"command": "ls"}),
                json!({"details": details, "content": [{"type": "text", "text": text}]}),
            )
        };
        assert_eq!(
            r(
                json!({"status": "running", "tail": "x", "pid": 1, "sessionId": "a"}),
                "t1"
            ),
            r(
                json!({"status": "running", "tail": "x", "pid": 2, "sessionId": "b"}),
                "t2"
            )
        );
        assert_eq!(
            r(json!({"status": "running"}), "a"),
            Fingerprint::of(&json!({"status": "running", "tail": ""}))
        );
        assert_eq!(
            r(
                json!({"status": "completed", "exitCode": 0, "durationMs": 5, "cwd": "/a", "aggregated": " out "}),
                "x"
            ),
            Fingerprint::of(
                &json!({"status": "completed", "exitCode": 0, "timedOut": false, "output": "out"})
            )
        );
        assert_eq!(
            r(
                json!({"status": "failed", "exitCode": "1", "timedOut": "yes", "aggregated": "  "}),
                " text "
            ),
            Fingerprint::of(
                &json!({"status": "failed", "exitCode": null, "timedOut": false, "output": "text"})
            )
        );
        assert_eq!(
            r(
                json!({"status": "approval-pending", "reason": "r", "command": 5}),
                "x"
            ),
            Fingerprint::of(
                &json!({"status": "approval-pending", "reason": "r", "host": null, "command": "", "warningText": ""})
            )
        );
        // Unknown statuses fall through to the default rule.
        assert_eq!(
            r(json!({"status": "weird"}), "x"),
            Fingerprint::of(&json!({"details": {"status": "weird"}, "text": "x"}))
        );
    }

    #[test]
    fn rule6_process_poll_and_log() {
        let poll = hash(
            "process",
            json!({"action": "poll"}),
            json!({"details": {"status": "running", "aggregated": "a", "pid": 9}, "content": [{"type": "text", "text": "t"}]}),
        );
        assert_eq!(
            poll,
            Fingerprint::of(
                &json!({"action": "poll", "status": "running", "exitCode": null, "exitSignal": null, "aggregated": "a", "text": "t"})
            )
        );
        let log = hash(
            "process",
            json!({"action": "log"}),
            json!({"details": {"totalLines": 3}}),
        );
        assert_eq!(
            log,
            Fingerprint::of(
                &json!({"action": "log", "status": null, "totalLines": 3, "totalChars": null, "truncated": null, "exitCode": null, "exitSignal": null, "text": ""})
            )
        );
        // Other process actions hash fully.
        let kill = hash(
            "process",
            json!({"action": "kill"}),
            json!({"details": {"pid": 1}}),
        );
        assert_eq!(
            kill,
            Fingerprint::of(&json!({"details": {"pid": 1}, "text": ""}))
        );
    }

    #[test]
    fn rule7_sends_strip_volatile_ids() {
        let a = hash(
            "message",
            json!({"action": "send", "text": "hi"}),
            json!({"details": {"ok": true, "messageId": "1", "results": [{"receipt": 1, "to": "x"}], "msg": {"id": "m1", "text": "hi", "direction": "out"}, "conversation": {"id": "c1"}}, "content": [{"type": "text", "text": "sent 1"}]}),
        );
        let b = hash(
            "message",
            json!({"action": "send", "text": "hi"}),
            json!({"details": {"ok": true, "messageId": "2", "results": [{"receipt": 2, "to": "x"}], "msg": {"id": "m2", "text": "hi", "direction": "out"}, "conversation": {"id": "c1"}}, "content": [{"type": "text", "text": "sent 2"}]}),
        );
        assert_eq!(a, b);
        assert_eq!(
            a,
            Fingerprint::of(
                &json!({"ok": true, "results": [{"to": "x"}], "msg": {"text": "hi", "direction": "out"}, "conversation": {"id": "c1"}})
            )
        );
        let other_room = hash(
            "message",
            json!({"action": "send", "text": "hi"}),
            json!({"details": {"ok": true, "conversation": {"id": "c2"}}}),
        );
        assert_ne!(a, other_room);
        // A read is not a send: ids are progress.
        let r1 = hash(
            "message",
            json!({"action": "read"}),
            json!({"details": {"messageId": "1"}}),
        );
        let r2 = hash(
            "message",
            json!({"action": "read"}),
            json!({"details": {"messageId": "2"}}),
        );
        assert_ne!(r1, r2);
    }

    /// Which members a send leaves out is found while they are counted, and kept as bits
    /// for the first 64: members beyond those are asked again, alike.
    #[test]
    fn rule7_sends_strip_volatile_ids_past_the_64th_member() {
        // 70 members from `n00` on: the volatile keys before `n` are left out among the
        // first 64 members, those after it (`receipt`, `sentAt`, `ts`, ...) past them.
        let details = |id: &str, volatile: bool| {
            let mut details = serde_json::Map::new();
            for i in 0..70 {
                details.insert(format!("n{i:02}"), json!(i));
            }
            details.insert("ok".to_owned(), json!(true));
            details.insert(
                "zz".to_owned(),
                json!({"id": id, "text": "hi", "direction": "out"}),
            );
            if volatile {
                for key in crate::policy::BUILTIN.volatile_send_keys {
                    details.insert((*key).to_owned(), json!(id));
                }
            }
            Value::Object(details)
        };
        let send = json!({"action": "send", "text": "hi"});
        let a = hash(
            "message",
            send.clone(),
            json!({"details": details("1", true)}),
        );
        assert_eq!(
            a,
            hash("message", send, json!({"details": details("2", true)}))
        );
        let mut kept = details("", false);
        kept["zz"] = json!({"text": "hi", "direction": "out"});
        assert_eq!(a, Fingerprint::of(&kept));
    }

    #[test]
    fn rule8_update_plan_shape() {
        let a = hash(
            "update_plan",
            json!({}),
            json!({"details": {"plan": [{"step": "a", "status": "done"}, "x"], "explanation": "e"}, "content": [{"type": "text", "text": "ack"}]}),
        );
        let b = hash(
            "update_plan",
            json!({}),
            json!({"details": {"plan": [{"step": "reworded", "status": "done"}, 7], "explanation": "other"}}),
        );
        assert_eq!(a, b);
        assert_eq!(
            a,
            Fingerprint::of(
                &json!({"details": {"planLength": 2, "statuses": ["done", null], "stepPresence": [true, false], "hasExplanation": true}, "text": ""})
            )
        );
        let args1 = args_fingerprint(
            "update_plan",
            &json!({"plan": [{"step": "x", "status": "pending"}]}),
        );
        let args2 = args_fingerprint(
            "update_plan",
            &json!({"plan": [{"step": "y", "status": "pending"}]}),
        );
        let args3 = args_fingerprint(
            "update_plan",
            &json!({"plan": [{"step": "y", "status": "completed"}]}),
        );
        assert_eq!(args1, args2);
        assert_ne!(args2, args3);
        assert_eq!(
            args_fingerprint("update_plan", &json!([1])),
            Fingerprint::of(&json!([1]))
        );
    }

    #[test]
    fn rule9_default() {
        let a = hash(
            "read",
            json!({}),
            json!({"details": {"x": 1}, "content": [{"type": "text", "text": "t"}], "extra": 5}),
        );
        assert_eq!(
            a,
            Fingerprint::of(&json!({"details": {"x": 1}, "text": "t"}))
        );
        let no_details = hash("read", json!({}), json!({"details": [1]}));
        assert_eq!(
            no_details,
            Fingerprint::of(&json!({"details": {}, "text": ""}))
        );
    }
}

#[test]
fn raw_text_hashes_like_values() {
    for text in [
        r#"{"b":[1,2.0,"x"],"a":{"d":null,"c":true}}"#,
        r#"{"a":1,"a":2}"#,
        r#""\u00e9\ud83d\ude00""#,
        "[]",
        "-0.0",
    ] {
        let v: Value = serde_json::from_str(text).unwrap();
        assert_eq!(raw_fp(text), Fingerprint::of(&v), "{text}");
    }
}

#[test]
fn what_a_value_cannot_hold_still_repeats() {
    // Identical calls stay identical, and differ from their neighbours.
    let shapes = [
        r#"{"n":1e999}"#,
        r#"{"s":"\ud800"}"#,
        &format!(r#"{{"deep":{}{}}}"#, "[".repeat(300), "]".repeat(300)),
    ];
    for text in shapes {
        assert_eq!(raw_fp(text), raw_fp(text));
        let mut tape = Tape::new();
        let doc = tape.parse(text).unwrap();
        let a = CallPrint::new("read", doc);
        let mut tape2 = Tape::new();
        let doc2 = tape2.parse(text).unwrap();
        let b = CallPrint::new("read", doc2);
        assert_eq!(a.signature, b.signature);
    }
    assert_ne!(raw_fp(r#"{"n":1e999}"#), raw_fp(r#"{"n":1e998}"#));
    assert_ne!(raw_fp(r#"{"s":"\ud800"}"#), raw_fp(r#"{"s":"\ud801"}"#));
    // An error text with a lone surrogate, and one beyond the double range.
    let mut tape = Tape::new();
    let doc = tape.parse(r#""Unknown tool: x\ud800""#).unwrap();
    let print = OutcomePrint::new(
        OutcomeRule::for_call("t", &json!({})),
        OutcomeOf::Error(doc),
    );
    assert!(matches!(print, OutcomePrint::Hashed { unknown_tool: Some(ref t), .. } if t == "x"));
    let doc = tape.parse("1e999").unwrap();
    let big = OutcomePrint::new(
        OutcomeRule::for_call("t", &json!({})),
        OutcomeOf::Error(doc),
    );
    let same = OutcomePrint::new(
        OutcomeRule::for_call("t", &json!({})),
        OutcomeOf::Error(&json!("1e999")),
    );
    assert_eq!(big, same, "an error is hashed by its text");
}
