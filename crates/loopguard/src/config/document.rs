//! Reading an OpenClaw-style JSON5 document into `loopDetection` blocks, with every problem
//! collected (not just the first) and placed at its line and column.

use std::fmt;

use serde::de::{Deserialize, Deserializer, MapAccess, SeqAccess, Visitor};

use super::locate::{locate, too_deep, Position, Segment};
use super::{ConfigError, ConfigIssue, IssueKind, LoopDetectionBlock};

/// Deepest nesting accepted in a config document. The JSON5 parser recurses per level, so
/// deeper documents are refused before parsing.
pub const MAX_DEPTH: usize = 128;

/// Largest accepted `historySize` and `postCompactionGuard.windowSize`: memory per run
/// grows with them.
pub const MAX_WINDOW: u64 = 1_000_000;

/// Largest accepted threshold.
pub const MAX_THRESHOLD: u64 = 1_000_000_000;

/// A parsed JSON5 value that keeps member order and duplicate keys, so that validation
/// can report them.
#[derive(Debug, Clone, PartialEq)]
pub(crate) enum Node {
    Null,
    Bool(bool),
    Int(i128),
    Float(f64),
    Str(String),
    Array(Vec<Node>),
    Object(Vec<(String, Node)>),
}

impl Node {
    fn describe(&self) -> String {
        match self {
            Node::Null => "null".into(),
            Node::Bool(b) => format!("the boolean {b}"),
            Node::Int(i) => format!("the number {i}"),
            Node::Float(f) => format!("the number {f}"),
            Node::Str(s) => {
                let short: String = s.chars().take(40).collect();
                format!("the string {short:?}")
            }
            Node::Array(_) => "an array".into(),
            Node::Object(_) => "an object".into(),
        }
    }

    /// The last member named `key` (JSON5 documents, like JavaScript objects, keep the
    /// last of duplicate keys outside the blocks loopguard validates).
    fn get(&self, key: &str) -> Option<&Node> {
        match self {
            Node::Object(members) => members.iter().rev().find(|(k, _)| k == key).map(|(_, v)| v),
            _ => None,
        }
    }
}

impl<'de> Deserialize<'de> for Node {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        deserializer.deserialize_any(NodeVisitor)
    }
}

struct NodeVisitor;

impl<'de> Visitor<'de> for NodeVisitor {
    type Value = Node;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("a JSON5 value")
    }
    fn visit_unit<E>(self) -> Result<Node, E> {
        Ok(Node::Null)
    }
    fn visit_none<E>(self) -> Result<Node, E> {
        Ok(Node::Null)
    }
    fn visit_some<D: Deserializer<'de>>(self, d: D) -> Result<Node, D::Error> {
        Node::deserialize(d)
    }
    fn visit_bool<E>(self, b: bool) -> Result<Node, E> {
        Ok(Node::Bool(b))
    }
    fn visit_i64<E>(self, i: i64) -> Result<Node, E> {
        Ok(Node::Int(i.into()))
    }
    fn visit_u64<E>(self, u: u64) -> Result<Node, E> {
        Ok(Node::Int(u.into()))
    }
    fn visit_i128<E>(self, i: i128) -> Result<Node, E> {
        Ok(Node::Int(i))
    }
    fn visit_u128<E>(self, u: u128) -> Result<Node, E> {
        Ok(i128::try_from(u).map_or(Node::Float(u as f64), Node::Int))
    }
    fn visit_f64<E>(self, f: f64) -> Result<Node, E> {
        Ok(Node::Float(f))
    }
    fn visit_str<E>(self, s: &str) -> Result<Node, E> {
        Ok(Node::Str(s.to_owned()))
    }
    fn visit_string<E>(self, s: String) -> Result<Node, E> {
        Ok(Node::Str(s))
    }
    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Node, A::Error> {
        let mut items = Vec::new();
        while let Some(item) = seq.next_element()? {
            items.push(item);
        }
        Ok(Node::Array(items))
    }
    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Node, A::Error> {
        let mut members = Vec::new();
        while let Some((k, v)) = map.next_entry::<String, Node>()? {
            members.push((k, v));
        }
        Ok(Node::Object(members))
    }
}

/// The blocks a document holds.
#[derive(Debug, Default)]
pub(crate) struct Blocks {
    pub global: LoopDetectionBlock,
    pub agents: Vec<(String, LoopDetectionBlock)>,
}

/// Collects problems while walking the document.
struct Checker<'t> {
    text: &'t str,
    issues: Vec<ConfigIssue>,
}

impl Checker<'_> {
    fn issue(&mut self, path: &[Segment], kind: IssueKind) {
        self.issues.push(ConfigIssue {
            path: render_path(path),
            position: locate(self.text, path),
            kind,
        });
    }
}

/// `tools.loopDetection`, `agents.list[0].id`, `agents.entries["my agent"]`.
pub(crate) fn render_path(path: &[Segment]) -> String {
    let mut out = String::new();
    for seg in path {
        match seg {
            Segment::Key(k) => {
                let plain = !k.is_empty()
                    && k.chars()
                        .all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '-');
                if plain {
                    if !out.is_empty() {
                        out.push('.');
                    }
                    out.push_str(k);
                } else {
                    out.push_str(&format!("[{k:?}]"));
                }
            }
            Segment::Index(i) => out.push_str(&format!("[{i}]")),
        }
    }
    out
}

fn key(k: &str) -> Segment {
    Segment::Key(k.to_owned())
}

/// Parses a document and extracts its blocks, or every problem found.
pub(crate) fn read(text: &str, origin: Option<&str>) -> Result<Blocks, ConfigError> {
    let fail = |issues| ConfigError {
        origin: origin.map(str::to_owned),
        issues,
    };
    if let Some(position) = too_deep(text, MAX_DEPTH) {
        return Err(fail(vec![ConfigIssue {
            path: String::new(),
            position: Some(position),
            kind: IssueKind::TooDeep { limit: MAX_DEPTH },
        }]));
    }
    let root: Node = json5::from_str(text).map_err(|e| {
        let position = e.position().map(|p| Position {
            line: p.line + 1,
            column: p.column + 1,
        });
        let mut message = e.to_string();
        // json5 appends its own 0-based location; ours is reported separately.
        if let Some(i) = message.find(" at line ") {
            message.truncate(i);
        }
        fail(vec![ConfigIssue {
            path: String::new(),
            position,
            kind: IssueKind::Syntax { message },
        }])
    })?;
    let mut checker = Checker {
        text,
        issues: Vec::new(),
    };
    let blocks = extract(&root, &mut checker);
    if checker.issues.is_empty() {
        Ok(blocks)
    } else {
        Err(fail(checker.issues))
    }
}

fn extract(root: &Node, checker: &mut Checker<'_>) -> Blocks {
    let mut blocks = Blocks::default();
    if !matches!(root, Node::Object(_)) {
        checker.issue(
            &[],
            IssueKind::NotObject {
                found: root.describe(),
            },
        );
        return blocks;
    }
    if let Some(block) = root.get("tools").and_then(|t| t.get("loopDetection")) {
        blocks.global = parse_block(block, &[key("tools"), key("loopDetection")], checker);
    }
    let mut seen: Vec<(String, Vec<Segment>)> = Vec::new();
    let mut add_agent =
        |id: String, path: Vec<Segment>, block: LoopDetectionBlock, checker: &mut Checker<'_>| {
            if let Some((_, first)) = seen.iter().find(|(seen_id, _)| *seen_id == id) {
                let first = render_path(first);
                checker.issue(
                    &path,
                    IssueKind::DuplicateAgent {
                        id: id.clone(),
                        first,
                    },
                );
            } else {
                seen.push((id.clone(), path));
                blocks.agents.push((id, block));
            }
        };
    let agents = root.get("agents");
    if let Some(Node::Array(list)) = agents.and_then(|a| a.get("list")) {
        for (i, agent) in list.iter().enumerate() {
            let Some(block) = agent.get("tools").and_then(|t| t.get("loopDetection")) else {
                continue;
            };
            let base = vec![key("agents"), key("list"), Segment::Index(i)];
            let block_path: Vec<Segment> = base
                .iter()
                .cloned()
                .chain([key("tools"), key("loopDetection")])
                .collect();
            let parsed = parse_block(block, &block_path, checker);
            match agent.get("id") {
                Some(Node::Str(id)) if !crate::text::is_blank(id) => {
                    add_agent(crate::text::trim(id).to_owned(), base, parsed, checker)
                }
                _ => checker.issue(&base, IssueKind::MissingAgentId),
            }
        }
    }
    if let Some(Node::Object(entries)) = agents.and_then(|a| a.get("entries")) {
        for (id, agent) in entries {
            let Some(block) = agent.get("tools").and_then(|t| t.get("loopDetection")) else {
                continue;
            };
            let base = vec![key("agents"), key("entries"), key(id)];
            let block_path: Vec<Segment> = base
                .iter()
                .cloned()
                .chain([key("tools"), key("loopDetection")])
                .collect();
            let parsed = parse_block(block, &block_path, checker);
            if crate::text::is_blank(id) {
                checker.issue(&base, IssueKind::MissingAgentId);
            } else {
                add_agent(crate::text::trim(id).to_owned(), base, parsed, checker);
            }
        }
    }
    blocks
}

/// Known keys of a block, of its `detectors`, and of its `postCompactionGuard`.
pub(crate) const BLOCK_KEYS: &[&str] = &[
    "enabled",
    "historySize",
    "warningThreshold",
    "criticalThreshold",
    "unknownToolThreshold",
    "globalCircuitBreakerThreshold",
    "detectors",
    "postCompactionGuard",
];
pub(crate) const DETECTOR_KEYS: &[&str] = &["genericRepeat", "knownPollNoProgress", "pingPong"];
pub(crate) const GUARD_KEYS: &[&str] = &["windowSize"];

/// The members of an object node, reporting duplicates and non-objects.
fn members<'n>(
    node: &'n Node,
    path: &[Segment],
    checker: &mut Checker<'_>,
) -> &'n [(String, Node)] {
    let Node::Object(members) = node else {
        checker.issue(
            path,
            IssueKind::NotObject {
                found: node.describe(),
            },
        );
        return &[];
    };
    for (i, (k, _)) in members.iter().enumerate() {
        if members[..i].iter().any(|(earlier, _)| earlier == k) {
            let mut p = path.to_vec();
            p.push(key(k));
            checker.issue(&p, IssueKind::DuplicateKey { key: k.clone() });
        }
    }
    members
}

fn parse_block(node: &Node, path: &[Segment], checker: &mut Checker<'_>) -> LoopDetectionBlock {
    let mut block = LoopDetectionBlock::default();
    for (k, v) in members(node, path, checker) {
        let mut p = path.to_vec();
        p.push(key(k));
        match k.as_str() {
            "enabled" => block.enabled = boolean(v, &p, checker),
            "historySize" => block.history_size = count(v, &p, MAX_WINDOW, checker),
            "warningThreshold" => block.warning_threshold = count(v, &p, MAX_THRESHOLD, checker),
            "criticalThreshold" => block.critical_threshold = count(v, &p, MAX_THRESHOLD, checker),
            "unknownToolThreshold" => {
                block.unknown_tool_threshold = count(v, &p, MAX_THRESHOLD, checker)
            }
            "globalCircuitBreakerThreshold" => {
                block.global_circuit_breaker_threshold = count(v, &p, MAX_THRESHOLD, checker)
            }
            "detectors" => {
                for (dk, dv) in members(v, &p, checker) {
                    let mut dp = p.clone();
                    dp.push(key(dk));
                    match dk.as_str() {
                        "genericRepeat" => {
                            block.detectors.generic_repeat = boolean(dv, &dp, checker)
                        }
                        "knownPollNoProgress" => {
                            block.detectors.known_poll_no_progress = boolean(dv, &dp, checker)
                        }
                        "pingPong" => block.detectors.ping_pong = boolean(dv, &dp, checker),
                        _ => unknown(dk, &dp, DETECTOR_KEYS, checker),
                    }
                }
            }
            "postCompactionGuard" => {
                for (gk, gv) in members(v, &p, checker) {
                    let mut gp = p.clone();
                    gp.push(key(gk));
                    match gk.as_str() {
                        "windowSize" => {
                            block.post_compaction_guard.window_size =
                                count(gv, &gp, MAX_WINDOW, checker)
                        }
                        _ => unknown(gk, &gp, GUARD_KEYS, checker),
                    }
                }
            }
            _ => unknown(k, &p, BLOCK_KEYS, checker),
        }
    }
    block
}

fn unknown(k: &str, path: &[Segment], known: &'static [&'static str], checker: &mut Checker<'_>) {
    checker.issue(
        path,
        IssueKind::UnknownKey {
            key: k.to_owned(),
            closest: closest(k, known),
        },
    );
}

/// The known key most similar to `k`.
pub(crate) fn closest(k: &str, known: &'static [&'static str]) -> &'static str {
    let lower = k.to_ascii_lowercase();
    known
        .iter()
        .copied()
        .max_by(|a, b| {
            let sa = strsim::jaro_winkler(&lower, &a.to_ascii_lowercase());
            let sb = strsim::jaro_winkler(&lower, &b.to_ascii_lowercase());
            sa.total_cmp(&sb)
        })
        .unwrap_or(known[0])
}

fn boolean(v: &Node, path: &[Segment], checker: &mut Checker<'_>) -> Option<bool> {
    match v {
        Node::Bool(b) => Some(*b),
        other => {
            checker.issue(
                path,
                IssueKind::NotBoolean {
                    found: other.describe(),
                },
            );
            None
        }
    }
}

fn count(v: &Node, path: &[Segment], max: u64, checker: &mut Checker<'_>) -> Option<u32> {
    let value = match v {
        Node::Int(i) if *i >= 1 => Some(*i),
        // 10.0 is the integer 10, as in JavaScript.
        Node::Float(f) if f.is_finite() && f.fract() == 0.0 && *f >= 1.0 => {
            Some(if *f > 1e30 { i128::MAX } else { *f as i128 })
        }
        _ => None,
    };
    match value {
        Some(n) if n <= max as i128 => Some(n as u32),
        Some(_) => {
            checker.issue(path, IssueKind::TooLarge { max });
            None
        }
        None => {
            checker.issue(
                path,
                IssueKind::NotPositiveInteger {
                    found: v.describe(),
                },
            );
            None
        }
    }
}
