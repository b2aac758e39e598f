//! The proxy's decisions on each line, without any I/O: what goes to the server, what goes
//! back to the client, and what the engine is told.

use std::collections::{HashMap, HashSet};

use loopguard::{Call, ConfigSet, Guard, Scope, Verdict};
use serde_json::{Map, Value};

use crate::framing::{id_key, is_blank, kind, Kind};
use crate::outcome::{append_text, blocked_response, connection_closed, map_response};

/// A client request forwarded to the server and not answered yet.
#[derive(Clone, Debug)]
struct Open {
    id: Value,
    call: Option<PendingCall>,
}

/// A forwarded `tools/call`.
#[derive(Clone, Debug)]
struct PendingCall {
    tool: String,
    args: Value,
    /// The warning to append to its result.
    note: Option<String>,
}

/// A batch some of whose calls the proxy answered itself: those answers join the server's
/// response to the rest of the batch.
#[derive(Clone, Debug)]
struct BatchFix {
    ids: HashSet<String>,
    answers: Vec<Value>,
}

/// What to do with a line from the client.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct FromClient {
    /// Bytes for the server (one line, without its newline).
    pub to_server: Option<Vec<u8>>,
    /// Bytes for the client (one line, without its newline): the proxy's own answer.
    pub to_client: Option<Vec<u8>>,
    /// Diagnostics for stderr.
    pub log: Vec<String>,
}

/// What to do with a line from the server.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct FromServer {
    /// Bytes for the client (one line, without its newline).
    pub to_client: Option<Vec<u8>>,
    /// Diagnostics for stderr.
    pub log: Vec<String>,
}

/// The proxy's state: the engine, and the requests on their way.
#[derive(Debug)]
pub struct Relay {
    guard: Guard,
    session: String,
    agent: Option<String>,
    open: HashMap<String, Open>,
    batches: Vec<BatchFix>,
}

/// The screening of one `tools/call`.
enum Screened {
    Blocked(Value),
    Allowed(PendingCall),
}

impl Relay {
    /// A relay whose calls all belong to session `session` (run: none), under the config of
    /// `agent`.
    pub fn new(config: ConfigSet, session: String, agent: Option<String>) -> Self {
        Self {
            guard: Guard::new(config),
            session,
            agent,
            open: HashMap::new(),
            batches: Vec::new(),
        }
    }

    /// Requests forwarded to the server and not answered yet.
    pub fn open_requests(&self) -> usize {
        self.open.len()
    }

    /// Handles a line the client sent.
    pub fn from_client(&mut self, line: &[u8]) -> FromClient {
        let mut out = FromClient::default();
        if is_blank(line) {
            return out;
        }
        let Ok(message) = serde_json::from_slice::<Value>(line) else {
            // Not JSON: the server answers it (with a parse error), as it would without us.
            out.to_server = Some(line.to_vec());
            return out;
        };
        match message {
            Value::Array(items) => self.client_batch(line, items, &mut out),
            message => match self.client_message(&message, &mut out.log) {
                Some(answer) => out.to_client = Some(answer.to_string().into_bytes()),
                None => out.to_server = Some(line.to_vec()),
            },
        }
        out
    }

    /// Handles one message from the client; returns the proxy's own answer when the
    /// message must not be forwarded.
    fn client_message(&mut self, message: &Value, log: &mut Vec<String>) -> Option<Value> {
        match kind(message) {
            Kind::Request { id, method } => {
                let call = if method == "tools/call" {
                    match self.screen(id, message.get("params"), log) {
                        Some(Screened::Blocked(answer)) => return Some(answer),
                        Some(Screened::Allowed(call)) => Some(call),
                        None => None,
                    }
                } else {
                    None
                };
                self.open.insert(
                    id_key(id),
                    Open {
                        id: id.clone(),
                        call,
                    },
                );
            }
            Kind::Notification {
                method: "notifications/cancelled",
            } => {
                // The server need not answer a cancelled request; nothing of it is recorded.
                if let Some(id) = message.pointer("/params/requestId") {
                    self.open.remove(&id_key(id));
                }
            }
            _ => {}
        }
        None
    }

    fn client_batch(&mut self, line: &[u8], items: Vec<Value>, out: &mut FromClient) {
        let mut kept = Vec::with_capacity(items.len());
        let mut answers = Vec::new();
        for item in items {
            match self.client_message(&item, &mut out.log) {
                Some(answer) => answers.push(answer),
                None => kept.push(item),
            }
        }
        if answers.is_empty() {
            out.to_server = Some(line.to_vec());
            return;
        }
        let requests: HashSet<String> = kept
            .iter()
            .filter_map(|m| match kind(m) {
                Kind::Request { id, .. } => Some(id_key(id)),
                _ => None,
            })
            .collect();
        if !kept.is_empty() {
            out.to_server = Some(Value::Array(kept).to_string().into_bytes());
        }
        if requests.is_empty() {
            // No response from the server will carry these: answer now, as a batch.
            out.to_client = Some(Value::Array(answers).to_string().into_bytes());
        } else {
            self.batches.push(BatchFix {
                ids: requests,
                answers,
            });
        }
    }

    /// Asks the engine about a `tools/call`; `None` when its params name no tool (the
    /// server will refuse it).
    fn screen(
        &mut self,
        id: &Value,
        params: Option<&Value>,
        log: &mut Vec<String>,
    ) -> Option<Screened> {
        let tool = params?.get("name")?.as_str()?.to_owned();
        let args = match params.and_then(|p| p.get("arguments")) {
            None | Some(Value::Null) => Value::Object(Map::new()),
            Some(args) => args.clone(),
        };
        let key = id_key(id);
        let scope = Scope::new(&self.session).with_agent(self.agent.as_deref());
        let verdict = self
            .guard
            .before_call(&scope, &Call::new(&tool, &args).with_id(Some(&key)));
        match &verdict {
            Verdict::Block {
                detection,
                terminal,
            } => {
                log.push(format!(
                    "blocked tools/call {tool} ({}, {}{})",
                    detection.detector,
                    detection.count,
                    if *terminal { ", run stopped" } else { "" }
                ));
                Some(Screened::Blocked(blocked_response(id, &detection.message)))
            }
            _ => {
                let note = verdict.warning_note();
                if let Some(note) = &note {
                    log.push(format!("warned tools/call {tool}: {note}"));
                }
                Some(Screened::Allowed(PendingCall { tool, args, note }))
            }
        }
    }

    /// Handles a line the server sent.
    pub fn from_server(&mut self, line: &[u8]) -> FromServer {
        let mut out = FromServer::default();
        if is_blank(line) {
            return out;
        }
        let Ok(message) = serde_json::from_slice::<Value>(line) else {
            // A server must write only MCP messages on stdout; passing anything else on
            // would break the client's reader.
            out.log.push(format!(
                "dropped a line from the server that is not JSON: {}",
                preview(line)
            ));
            return out;
        };
        match message {
            Value::Array(mut items) => {
                let mut changed = false;
                let mut ids = HashSet::new();
                for item in &mut items {
                    if let Kind::Response { id } = kind(item) {
                        ids.insert(id_key(id));
                    }
                    changed |= self.server_message(item, &mut out.log);
                }
                if let Some(at) = self.batches.iter().position(|b| !b.ids.is_disjoint(&ids)) {
                    items.extend(self.batches.swap_remove(at).answers);
                    changed = true;
                }
                out.to_client = Some(if changed {
                    Value::Array(items).to_string().into_bytes()
                } else {
                    line.to_vec()
                });
            }
            mut message => {
                out.to_client = Some(if self.server_message(&mut message, &mut out.log) {
                    message.to_string().into_bytes()
                } else {
                    line.to_vec()
                });
            }
        }
        out
    }

    /// Handles one message from the server; returns whether it was changed.
    fn server_message(&mut self, message: &mut Value, log: &mut Vec<String>) -> bool {
        let Kind::Response { id } = kind(message) else {
            return false;
        };
        let key = id_key(id);
        let Some(Open {
            call: Some(call), ..
        }) = self.open.remove(&key)
        else {
            return false;
        };
        let Some(response) = message.as_object_mut() else {
            return false;
        };
        let outcome = map_response(response);
        let scope = Scope::new(&self.session).with_agent(self.agent.as_deref());
        let recorded = self.guard.after_call(
            &scope,
            &Call::new(&call.tool, &call.args).with_id(Some(&key)),
            outcome.as_outcome(),
        );
        let mut changed = false;
        for text in call
            .note
            .iter()
            .chain(recorded.abort.as_ref().map(|a| &a.message))
        {
            changed |= append_text(response, text);
        }
        if let Some(abort) = &recorded.abort {
            log.push(format!(
                "run stopped after tools/call {}: {}",
                call.tool, abort.message
            ));
        }
        changed
    }

    /// The answers owed to the client for every request still open, when the server can
    /// no longer answer (`why` says what happened); forgets them.
    pub fn close(&mut self, why: &str) -> Vec<Vec<u8>> {
        let mut open: Vec<Open> = self.open.drain().map(|(_, o)| o).collect();
        open.sort_by_key(|o| o.id.to_string());
        self.batches.clear();
        open.iter()
            .map(|o| connection_closed(&o.id, why).to_string().into_bytes())
            .collect()
    }
}

fn preview(line: &[u8]) -> String {
    let text = String::from_utf8_lossy(&line[..line.len().min(200)]);
    let text = text.escape_debug().to_string();
    if line.len() > 200 {
        format!("{text}…")
    } else {
        text
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    const LOW: &str = "{ tools: { loopDetection: { enabled: true, warningThreshold: 2, criticalThreshold: 3 } } }";

    fn relay() -> Relay {
        Relay::new(ConfigSet::parse(LOW).unwrap(), "s".into(), None)
    }

    fn call(id: u64) -> Vec<u8> {
        json!({"jsonrpc": "2.0", "id": id, "method": "tools/call", "params": {"name": "read", "arguments": {"path": "/x"}}})
            .to_string()
            .into_bytes()
    }

    fn result(id: u64) -> Vec<u8> {
        json!({"jsonrpc": "2.0", "id": id, "result": {"content": [{"type": "text", "text": "same"}], "isError": false}})
            .to_string()
            .into_bytes()
    }

    fn parse(bytes: &[u8]) -> Value {
        serde_json::from_slice(bytes).unwrap()
    }

    #[test]
    fn a_loop_is_warned_then_blocked_without_reaching_the_server() {
        let mut r = relay();
        let mut outcomes = Vec::new();
        for id in 1..=4 {
            let c = r.from_client(&call(id));
            if let Some(answer) = c.to_client {
                assert!(c.to_server.is_none());
                outcomes.push(("blocked", parse(&answer)));
                continue;
            }
            assert_eq!(
                c.to_server.as_deref(),
                Some(&call(id)[..]),
                "forwarded unchanged"
            );
            let s = r.from_server(&result(id));
            outcomes.push(("answered", parse(&s.to_client.unwrap())));
        }
        // Calls 1 and 2 pass unchanged; call 3 is warned (note appended); call 4 blocked.
        assert_eq!(outcomes[0].1, parse(&result(1)));
        assert_eq!(outcomes[1].1, parse(&result(2)));
        let warned = &outcomes[2].1["result"]["content"];
        assert_eq!(warned.as_array().unwrap().len(), 2);
        assert!(warned[1]["text"]
            .as_str()
            .unwrap()
            .starts_with("[loopguard] WARNING"));
        assert_eq!(outcomes[3].0, "blocked");
        assert_eq!(outcomes[3].1["id"], 4);
        assert_eq!(outcomes[3].1["result"]["isError"], true);
        assert!(outcomes[3].1["result"]["content"][0]["text"]
            .as_str()
            .unwrap()
            .starts_with("CRITICAL"));
        assert_eq!(r.open_requests(), 0);
    }

    #[test]
    fn everything_else_passes_through_unchanged() {
        let mut r = relay();
        for line in [
            &br#"{"jsonrpc":"2.0","id":0,"method":"initialize","params":{"protocolVersion":"2025-11-25"}}"#[..],
            br#"{"jsonrpc":"2.0","method":"notifications/initialized"}"#,
            br#"{"jsonrpc":"2.0","id":"srv-1","result":{"roots":[]}}"#,
            br#"not json at all"#,
        ] {
            let c = r.from_client(line);
            assert_eq!((c.to_server.as_deref(), c.to_client), (Some(line), None));
        }
        for line in [
            &br#"{"jsonrpc":"2.0","id":0,"result":{"protocolVersion":"2025-11-25","capabilities":{}}}"#[..],
            br#"{"jsonrpc":"2.0","method":"notifications/progress","params":{"progressToken":1,"progress":0.5}}"#,
            br#"{"jsonrpc":"2.0","id":"srv-1","method":"roots/list"}"#,
            br#"{"jsonrpc":"2.0","id":99,"result":{}}"#,
        ] {
            assert_eq!(r.from_server(line).to_client.as_deref(), Some(line));
        }
        assert!(r.from_client(b"  ").to_server.is_none());
    }

    #[test]
    fn garbage_from_the_server_is_dropped_and_logged() {
        let mut r = relay();
        let s = r.from_server(b"DEBUG: starting up");
        assert_eq!(s.to_client, None);
        assert!(s.log[0].contains("DEBUG: starting up"));
    }

    #[test]
    fn cancelled_calls_are_forgotten() {
        let mut r = relay();
        r.from_client(&call(1));
        assert_eq!(r.open_requests(), 1);
        let cancel = json!({"jsonrpc": "2.0", "method": "notifications/cancelled", "params": {"requestId": 1}}).to_string();
        let c = r.from_client(cancel.as_bytes());
        assert_eq!(c.to_server.as_deref(), Some(cancel.as_bytes()));
        assert_eq!(r.open_requests(), 0);
        // A late answer still reaches the client, untouched.
        assert_eq!(r.from_server(&result(1)).to_client, Some(result(1)));
    }

    #[test]
    fn batches_keep_blocked_answers_with_the_servers_response() {
        let mut r = relay();
        for id in 1..=3 {
            r.from_client(&call(id));
            r.from_server(&result(id));
        }
        // Call 10 is blocked; the ping goes on; the answer to the batch carries both.
        let batch = format!(
            "[{},{}]",
            String::from_utf8(call(10)).unwrap(),
            r#"{"jsonrpc":"2.0","id":11,"method":"ping"}"#
        );
        let c = r.from_client(batch.as_bytes());
        assert_eq!(c.to_client, None);
        assert_eq!(
            parse(&c.to_server.unwrap()),
            json!([{"jsonrpc": "2.0", "id": 11, "method": "ping"}])
        );
        let s = r.from_server(br#"[{"jsonrpc":"2.0","id":11,"result":{}}]"#);
        let answer = parse(&s.to_client.unwrap());
        assert_eq!(answer[0], json!({"jsonrpc": "2.0", "id": 11, "result": {}}));
        assert_eq!(answer[1]["id"], 10);
        assert_eq!(answer[1]["result"]["isError"], true);
        // A batch of blocked calls and notifications only is answered at once.
        let c = r.from_client(format!("[{}]", String::from_utf8(call(12)).unwrap()).as_bytes());
        assert!(c.to_server.is_none());
        assert_eq!(parse(&c.to_client.unwrap())[0]["id"], 12);
    }

    #[test]
    fn closing_answers_every_open_request() {
        let mut r = relay();
        r.from_client(&call(1));
        r.from_client(br#"{"jsonrpc":"2.0","id":"x","method":"resources/list"}"#);
        r.from_client(br#"{"jsonrpc":"2.0","method":"notifications/initialized"}"#);
        let answers: Vec<Value> = r
            .close("the server exited")
            .iter()
            .map(|a| parse(a))
            .collect();
        assert_eq!(answers.len(), 2);
        for a in &answers {
            assert_eq!(a["error"]["code"], -32000);
            assert!(a["error"]["message"]
                .as_str()
                .unwrap()
                .contains("the server exited"));
        }
        assert_eq!(r.open_requests(), 0);
    }

    #[test]
    fn malformed_calls_are_left_to_the_server() {
        let mut r = relay();
        let no_name = br#"{"jsonrpc":"2.0","id":5,"method":"tools/call","params":{}}"#;
        assert_eq!(
            r.from_client(no_name).to_server.as_deref(),
            Some(&no_name[..])
        );
        let s = r.from_server(
            br#"{"jsonrpc":"2.0","id":5,"error":{"code":-32602,"message":"missing name"}}"#,
        );
        assert!(s.to_client.is_some());
    }

    #[test]
    fn unknown_tools_are_blocked_after_repeated_failures() {
        let mut r = Relay::new(
            ConfigSet::parse(
                "{ tools: { loopDetection: { enabled: true, unknownToolThreshold: 2 } } }",
            )
            .unwrap(),
            "s".into(),
            None,
        );
        let call = |id: u64| {
            json!({"jsonrpc": "2.0", "id": id, "method": "tools/call", "params": {"name": "nope"}})
                .to_string()
                .into_bytes()
        };
        let err = |id: u64| {
            json!({"jsonrpc": "2.0", "id": id, "error": {"code": -32602, "message": "Unknown tool: nope"}}).to_string().into_bytes()
        };
        for id in 1..=2 {
            assert!(r.from_client(&call(id)).to_server.is_some());
            r.from_server(&err(id));
        }
        let c = r.from_client(&call(3));
        let answer = parse(&c.to_client.expect("blocked"));
        assert!(answer["result"]["content"][0]["text"]
            .as_str()
            .unwrap()
            .contains("nope"));
    }
}
