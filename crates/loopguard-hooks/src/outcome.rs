//! What a tool returned, as the agents report it, reshaped into the result value the engine
//! fingerprints.
//!
//! SPEC §2 hashes a result object by its `details` object and the text of its `content`
//! blocks; anything else of the object is ignored. Agents report tool responses in shapes
//! of their own (Claude Code's `Bash` gives `{stdout, stderr, interrupted, isImage}`, its
//! `Read` a `{type, file}` object, Gemini CLI `{llmContent, returnDisplay}`), so a response
//! passed as it is would hash as `{details: {}, text: ""}`: every result equal, and every
//! repeated call a loop. [`normalize`] maps a response onto the engine's shape:
//!
//! | response | result value |
//! |---|---|
//! | a string | `{content: [{type: "text", text}]}` |
//! | an array of content blocks | text blocks in `content`; other blocks in `details.blocks` |
//! | an object with a `content` array (MCP-style) | its text blocks in `content`, its `isError` kept beside them; the other keys (and non-text blocks) in `details` |
//! | any other object | `{details: object}` |
//! | a number, boolean or null | itself (hashed as it is) |
//!
//! Keys that agents add about the call rather than its result (durations, token usage,
//! timestamps; see [`VOLATILE_KEYS`]) are removed from `details` at any depth, so that the
//! same output with a different timing counts as the same outcome.

use serde_json::{json, Map, Value};

/// Keys removed from `details` at any depth: measurements of the call, not its result.
pub const VOLATILE_KEYS: &[&str] = &[
    "duration",
    "durationMs",
    "duration_ms",
    "durationSeconds",
    "totalDurationMs",
    "elapsed",
    "elapsedMs",
    "elapsed_ms",
    "wall_time",
    "wallTime",
    "timestamp",
    "usage",
    "totalTokens",
    "total_tokens",
    "totalToolUseCount",
];

/// The engine's result value for a tool response, as described in the module docs.
pub fn normalize(response: &Value) -> Value {
    match response {
        Value::String(text) => text_result(text),
        Value::Array(items) => from_blocks(items, Map::new()),
        Value::Object(map) => match map.get("content") {
            Some(Value::Array(items)) => {
                let rest: Map<String, Value> = map
                    .iter()
                    .filter(|(k, _)| !matches!(k.as_str(), "content" | "_meta" | "isError"))
                    .map(|(k, v)| (k.clone(), v.clone()))
                    .collect();
                let mut result = from_blocks(items, rest);
                // An MCP tool's own failure flag says the call failed: kept where the
                // engine reads it.
                if let Some(flag) = map.get("isError") {
                    result["isError"] = flag.clone();
                }
                result
            }
            _ => json!({ "details": strip_volatile(response) }),
        },
        other => other.clone(),
    }
}

/// `{content: [{type: "text", text}]}`.
pub fn text_result(text: &str) -> Value {
    json!({ "content": [{ "type": "text", "text": text }] })
}

/// Splits content blocks into text blocks (kept in `content`) and the others (moved into
/// `details.blocks`, where they are hashed too).
fn from_blocks(items: &[Value], mut details: Map<String, Value>) -> Value {
    let mut content = Vec::new();
    let mut other = Vec::new();
    for item in items {
        if is_text_block(item) {
            content.push(item.clone());
        } else {
            other.push(item.clone());
        }
    }
    if !other.is_empty() {
        details.insert("blocks".into(), Value::Array(other));
    }
    let details = strip_volatile(&Value::Object(details));
    json!({ "content": content, "details": details })
}

fn is_text_block(item: &Value) -> bool {
    item.get("type").and_then(Value::as_str).is_some()
        && item.get("text").and_then(Value::as_str).is_some()
}

/// A copy of `value` without [`VOLATILE_KEYS`] at any depth. Iterative: no recursion
/// limit on deep values.
pub fn strip_volatile(value: &Value) -> Value {
    enum Step<'a> {
        Visit(&'a Value),
        Object(Vec<String>),
        Array(usize),
    }
    let mut steps = vec![Step::Visit(value)];
    let mut built: Vec<Value> = Vec::new();
    while let Some(step) = steps.pop() {
        match step {
            Step::Visit(Value::Object(map)) => {
                let keys: Vec<String> = map
                    .keys()
                    .filter(|k| !VOLATILE_KEYS.contains(&k.as_str()))
                    .cloned()
                    .collect();
                let children: Vec<&Value> = keys.iter().map(|k| &map[k]).collect();
                steps.push(Step::Object(keys));
                for child in children.into_iter().rev() {
                    steps.push(Step::Visit(child));
                }
            }
            Step::Visit(Value::Array(items)) => {
                steps.push(Step::Array(items.len()));
                for child in items.iter().rev() {
                    steps.push(Step::Visit(child));
                }
            }
            Step::Visit(leaf) => built.push(leaf.clone()),
            Step::Object(keys) => {
                let values = built.split_off(built.len() - keys.len());
                built.push(Value::Object(keys.into_iter().zip(values).collect()));
            }
            Step::Array(n) => {
                let values = built.split_off(built.len() - n);
                built.push(Value::Array(values));
            }
        }
    }
    built.pop().unwrap_or(Value::Null)
}

/// The text of a Gemini CLI `llmContent` (a string, a part, or a list of parts): text
/// parts joined by newlines; other parts are returned apart.
pub fn gemini_parts(llm_content: &Value) -> (String, Vec<Value>) {
    let parts: Vec<&Value> = match llm_content {
        Value::String(s) => return (s.clone(), Vec::new()),
        Value::Array(items) => items.iter().collect(),
        Value::Null => Vec::new(),
        other => vec![other],
    };
    let mut text = Vec::new();
    let mut other = Vec::new();
    for part in parts {
        match part {
            Value::String(s) => text.push(s.clone()),
            Value::Object(p) if p.get("text").is_some_and(Value::is_string) && p.len() == 1 => {
                text.push(p["text"].as_str().unwrap_or_default().to_owned());
            }
            p => other.push(p.clone()),
        }
    }
    (text.join("\n"), other)
}

#[cfg(test)]
mod tests {
    use super::*;
    use loopguard::fingerprint::{OutcomePrint, OutcomeRule};
    use loopguard::Outcome;

    fn print(tool: &str, value: &Value) -> OutcomePrint {
        let rule = OutcomeRule::for_call(tool, &json!({}));
        OutcomePrint::new(rule, Outcome::Result(value))
    }

    #[test]
    fn strings_become_text_content() {
        assert_eq!(
            normalize(&json!("hello")),
            json!({"content": [{"type": "text", "text": "hello"}]})
        );
    }

    #[test]
    fn objects_become_details_without_timings() {
        let a = normalize(
            &json!({"stdout": "ok", "stderr": "", "durationMs": 12, "nested": {"usage": {"x": 1}, "k": 1}}),
        );
        assert_eq!(
            a,
            json!({"details": {"stdout": "ok", "stderr": "", "nested": {"k": 1}}})
        );
    }

    #[test]
    fn an_mcp_tools_error_flag_stays_a_failure() {
        let v = normalize(&json!({"content": [{"type": "text", "text": "503"}], "isError": true}));
        assert_eq!(
            v,
            json!({"content": [{"type": "text", "text": "503"}], "details": {}, "isError": true})
        );
        assert!(
            loopguard::fingerprint::is_failure("mcp__api__fetch", Outcome::Result(&v)),
            "{v}"
        );
    }

    #[test]
    fn content_blocks_keep_text_and_move_the_rest_to_details() {
        let v = normalize(&json!({
            "content": [{"type": "text", "text": "a"}, {"type": "image", "data": "xx", "mimeType": "image/png"}],
            "totalDurationMs": 5, "status": "done", "_meta": {"id": 1}
        }));
        assert_eq!(
            v,
            json!({
                "content": [{"type": "text", "text": "a"}],
                "details": {"status": "done", "blocks": [{"type": "image", "data": "xx", "mimeType": "image/png"}]}
            })
        );
        let arr = normalize(&json!([{"type": "text", "text": "b"}]));
        assert_eq!(
            arr,
            json!({"content": [{"type": "text", "text": "b"}], "details": {}})
        );
    }

    #[test]
    fn scalars_pass_through() {
        assert_eq!(normalize(&json!(3)), json!(3));
        assert_eq!(normalize(&Value::Null), Value::Null);
    }

    #[test]
    fn different_outputs_hash_differently_and_timings_do_not_matter() {
        let a = print("Bash", &normalize(&json!({"stdout": "1", "durationMs": 1})));
        let b = print("Bash", &normalize(&json!({"stdout": "1", "durationMs": 9})));
        let c = print("Bash", &normalize(&json!({"stdout": "2", "durationMs": 1})));
        assert_eq!(a, b);
        assert_ne!(a, c);
        // Without normalization every object would be one outcome: that is the bug this
        // module exists for.
        assert_eq!(
            print("Bash", &json!({"stdout": "1"})),
            print("Bash", &json!({"stdout": "2"}))
        );
    }

    #[test]
    fn stripping_is_iterative_on_deep_values() {
        let mut v = json!({"durationMs": 1, "leaf": true});
        for _ in 0..50_000 {
            // Not `json!`, which would serialize `v` recursively.
            let mut m = Map::new();
            m.insert("x".into(), v);
            v = Value::Object(m);
        }
        let out = strip_volatile(&v);
        let mut cur = &out;
        while let Some(next) = cur.get("x") {
            cur = next;
        }
        assert_eq!(cur, &json!({"leaf": true}));
        // Dropping a 50,000-level value recursively would overflow the stack: leak both.
        std::mem::forget(out);
        std::mem::forget(v);
    }

    #[test]
    fn gemini_parts_join_text() {
        assert_eq!(gemini_parts(&json!("x")), ("x".into(), vec![]));
        let (text, other) =
            gemini_parts(&json!([{"text": "a"}, "b", {"inlineData": {"data": "z"}}]));
        assert_eq!(text, "a\nb");
        assert_eq!(other, vec![json!({"inlineData": {"data": "z"}})]);
        assert_eq!(gemini_parts(&Value::Null), (String::new(), vec![]));
    }
}
