//! Reading an OpenClaw-style JSON5 document into `loopDetection` blocks, with every problem
//! collected (not just the first) and placed at its line and column.

use std::fmt;

use serde::de::{Deserialize, Deserializer, MapAccess, SeqAccess, Visitor};

use super::block::{Block, Field, CLASSES, EXTENSIONS, EXT_DETECTORS, MODES, POLICY, TOOL_RULE};
use super::extensions::{ExtensionsBlock, Mode, PolicyBlock, Preset, ToolMask, ToolRuleBlock};
use super::locate::{locate, too_deep, Position, Segment};
use super::{ConfigError, ConfigIssue, IssueKind, ScopeBlocks};
use crate::policy::ToolClass;

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
    pub global: ScopeBlocks,
    pub agents: Vec<(String, ScopeBlocks)>,
}

/// Collects problems while walking the document.
pub(crate) struct Checker<'t> {
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
    blocks.global = scope_blocks(root, &[], checker).unwrap_or_default();
    let mut seen: Vec<(String, Vec<Segment>)> = Vec::new();
    let mut add_agent =
        |id: &str, path: Vec<Segment>, scope: ScopeBlocks, checker: &mut Checker<'_>| {
            if crate::text::is_blank(id) {
                checker.issue(&path, IssueKind::MissingAgentId);
                return;
            }
            let id = crate::text::trim(id).to_owned();
            if let Some((_, first)) = seen.iter().find(|(seen_id, _)| *seen_id == id) {
                let first = render_path(first);
                checker.issue(&path, IssueKind::DuplicateAgent { id, first });
            } else {
                seen.push((id.clone(), path));
                blocks.agents.push((id, scope));
            }
        };
    let agents = root.get("agents");
    if let Some(Node::Array(list)) = agents.and_then(|a| a.get("list")) {
        for (i, agent) in list.iter().enumerate() {
            let base = vec![key("agents"), key("list"), Segment::Index(i)];
            let Some(scope) = scope_blocks(agent, &base, checker) else {
                continue;
            };
            match agent.get("id") {
                Some(Node::Str(id)) => add_agent(id, base, scope, checker),
                _ => checker.issue(&base, IssueKind::MissingAgentId),
            }
        }
    }
    if let Some(Node::Object(entries)) = agents.and_then(|a| a.get("entries")) {
        for (id, agent) in entries {
            let base = vec![key("agents"), key("entries"), key(id)];
            if let Some(scope) = scope_blocks(agent, &base, checker) {
                add_agent(id, base, scope, checker);
            }
        }
    }
    blocks
}

/// The `tools.loopDetection` and `loopguard` blocks of the object at `base` (the document
/// root or an agent), or `None` when it has neither.
fn scope_blocks(node: &Node, base: &[Segment], checker: &mut Checker<'_>) -> Option<ScopeBlocks> {
    let at = |tail: &[&str]| -> Vec<Segment> {
        base.iter()
            .cloned()
            .chain(tail.iter().map(|k| key(k)))
            .collect()
    };
    let detection = node.get("tools").and_then(|t| t.get("loopDetection"));
    let extensions = node.get("loopguard");
    if detection.is_none() && extensions.is_none() {
        return None;
    }
    Some(ScopeBlocks {
        detection: detection
            .map(|b| parse_block(b, &at(&["tools", "loopDetection"]), checker))
            .unwrap_or_default(),
        extensions: extensions.map(|b| parse_extensions(b, &at(&["loopguard"]), checker)),
    })
}

/// Parses a `loopguard` block.
fn parse_extensions(node: &Node, path: &[Segment], checker: &mut Checker<'_>) -> ExtensionsBlock {
    let mut block = ExtensionsBlock::default();
    for (k, v) in members(node, path, checker) {
        let p = child(path, k);
        match k.as_str() {
            "preset" => {
                let names: Vec<&str> = Preset::ALL.iter().map(|(name, _)| *name).collect();
                block.preset = one_of(v, &p, &names, checker).and_then(|name| {
                    Preset::ALL
                        .iter()
                        .find(|(n, _)| *n == name)
                        .map(|(_, preset)| *preset)
                });
            }
            "mode" => {
                block.mode = one_of(v, &p, MODES, checker).map(|m| match m {
                    "shadow" => Mode::Shadow,
                    _ => Mode::Enforce,
                })
            }
            "masking" => block.masking = Some(parse_block(v, &p, checker)),
            "policy" => block.policy = parse_policy(v, &p, checker),
            "detectors" => {
                for (dk, dv) in members(v, &p, checker) {
                    let dp = child(&p, dk);
                    match dk.as_str() {
                        "consecutiveRepeat" => {
                            block.consecutive_repeat = Some(parse_block(dv, &dp, checker))
                        }
                        "cycle" => block.cycle = Some(parse_block(dv, &dp, checker)),
                        "errorCascade" => block.error_cascade = Some(parse_block(dv, &dp, checker)),
                        "staleRepeat" => block.stale_repeat = Some(parse_block(dv, &dp, checker)),
                        "targetThrash" => block.target_thrash = Some(parse_block(dv, &dp, checker)),
                        "escalation" => block.escalation = Some(parse_block(dv, &dp, checker)),
                        "batchDuplicates" => {
                            block.batch_duplicates = Some(parse_block(dv, &dp, checker))
                        }
                        _ => unknown(dk, &dp, EXT_DETECTORS, checker),
                    }
                }
            }
            _ => unknown(k, &p, EXTENSIONS, checker),
        }
    }
    block
}

fn parse_policy(node: &Node, path: &[Segment], checker: &mut Checker<'_>) -> PolicyBlock {
    let mut policy = PolicyBlock::default();
    for (k, v) in members(node, path, checker) {
        let p = child(path, k);
        match k.as_str() {
            "builtin" => policy.builtin = boolean(v, &p, checker),
            "tools" => {
                let Node::Array(items) = v else {
                    checker.issue(
                        &p,
                        IssueKind::NotArray {
                            found: v.describe(),
                        },
                    );
                    continue;
                };
                for (i, item) in items.iter().enumerate() {
                    if let Some(rule) = parse_tool_rule(item, &child_index(&p, i), checker) {
                        policy.tools.push(rule);
                    }
                }
                if policy.tools.len() > crate::policy::MAX_TOOL_RULES {
                    checker.issue(
                        &p,
                        IssueKind::TooLarge {
                            max: crate::policy::MAX_TOOL_RULES as u64,
                        },
                    );
                }
            }
            _ => unknown(k, &p, POLICY, checker),
        }
    }
    policy
}

fn parse_tool_rule(
    node: &Node,
    path: &[Segment],
    checker: &mut Checker<'_>,
) -> Option<ToolRuleBlock> {
    let mut rule = ToolRuleBlock::default();
    let mut pattern = None;
    for (k, v) in members(node, path, checker) {
        let p = child(path, k);
        match k.as_str() {
            "match" => match v {
                Node::Str(s) if !crate::text::is_blank(s) => {
                    if crate::policy::valid_glob(s.trim()) {
                        pattern = Some(s.trim().to_owned());
                    } else {
                        checker.issue(
                            &p,
                            IssueKind::InvalidPattern {
                                reason: format!("`{s}` is not a valid glob"),
                            },
                        );
                    }
                }
                other => checker.issue(
                    &p,
                    IssueKind::NotString {
                        found: other.describe(),
                    },
                ),
            },
            "class" => {
                rule.class = one_of(v, &p, CLASSES, checker).map(|c| match c {
                    "poll" => ToolClass::Poll,
                    "send" => ToolClass::Send,
                    "read" => ToolClass::Read,
                    _ => ToolClass::Mutate,
                })
            }
            "ignoreArgs" | "ignoreResult" => {
                let paths: Vec<String> = strings(v, &p, checker)
                    .into_iter()
                    .filter(|(i, path_text)| {
                        match crate::canonical::PathSet::parse([path_text.as_str()]) {
                            Ok(_) => true,
                            Err(reason) => {
                                checker.issue(
                                    &child_index(&p, *i),
                                    IssueKind::InvalidPattern { reason },
                                );
                                false
                            }
                        }
                    })
                    .map(|(_, s)| s)
                    .collect();
                if k == "ignoreArgs" {
                    rule.ignore_args = paths;
                } else {
                    rule.ignore_result = paths;
                }
            }
            "mask" => {
                rule.mask = match v {
                    Node::Bool(true) => Some(ToolMask::On),
                    Node::Bool(false) => Some(ToolMask::Off),
                    Node::Array(_) => Some(ToolMask::Rules(mask_rules(v, &p, checker))),
                    other => {
                        checker.issue(
                            &p,
                            IssueKind::UnknownValue {
                                value: other.describe(),
                                expected: "true, false, or a list of masking rule names".into(),
                            },
                        );
                        None
                    }
                }
            }
            "target" => {
                rule.target = Some(
                    strings(v, &p, checker)
                        .into_iter()
                        .map(|(_, s)| s)
                        .collect(),
                )
            }
            "warningThreshold" => rule.warning_threshold = count(v, &p, MAX_THRESHOLD, checker),
            "criticalThreshold" => rule.critical_threshold = count(v, &p, MAX_THRESHOLD, checker),
            _ => unknown(k, &p, TOOL_RULE, checker),
        }
    }
    match pattern {
        Some(pattern) => {
            rule.pattern = pattern;
            Some(rule)
        }
        None => {
            if matches!(node, Node::Object(_)) && node.get("match").is_none() {
                checker.issue(path, IssueKind::MissingKey { key: "match" });
            }
            None
        }
    }
}

/// A list of masking rule names, each checked.
pub(super) fn mask_rules(v: &Node, path: &[Segment], checker: &mut Checker<'_>) -> Vec<String> {
    let names: Vec<&str> = crate::masking::MASK_RULES.iter().map(|r| r.name).collect();
    strings(v, path, checker)
        .into_iter()
        .filter(|(i, name)| {
            let known = names.contains(&name.as_str());
            if !known {
                checker.issue(
                    &child_index(path, *i),
                    IssueKind::UnknownValue {
                        value: name.clone(),
                        expected: names.join(", "),
                    },
                );
            }
            known
        })
        .map(|(_, name)| name)
        .collect()
}

fn child(path: &[Segment], k: &str) -> Vec<Segment> {
    let mut p = path.to_vec();
    p.push(key(k));
    p
}

fn child_index(path: &[Segment], i: usize) -> Vec<Segment> {
    let mut p = path.to_vec();
    p.push(Segment::Index(i));
    p
}

/// One of `allowed` strings.
fn one_of<'a>(
    v: &Node,
    path: &[Segment],
    allowed: &[&'a str],
    checker: &mut Checker<'_>,
) -> Option<&'a str> {
    match v {
        Node::Str(s) => match allowed.iter().find(|a| **a == s.trim()) {
            Some(a) => Some(a),
            None => {
                checker.issue(
                    path,
                    IssueKind::UnknownValue {
                        value: s.clone(),
                        expected: allowed.join(", "),
                    },
                );
                None
            }
        },
        other => {
            checker.issue(
                path,
                IssueKind::NotString {
                    found: other.describe(),
                },
            );
            None
        }
    }
}

/// An array of strings, with their indices.
fn strings(v: &Node, path: &[Segment], checker: &mut Checker<'_>) -> Vec<(usize, String)> {
    let Node::Array(items) = v else {
        checker.issue(
            path,
            IssueKind::NotArray {
                found: v.describe(),
            },
        );
        return Vec::new();
    };
    items
        .iter()
        .enumerate()
        .filter_map(|(i, item)| match item {
            Node::Str(s) => Some((i, s.trim().to_owned())),
            other => {
                checker.issue(
                    &child_index(path, i),
                    IssueKind::NotString {
                        found: other.describe(),
                    },
                );
                None
            }
        })
        .collect()
}

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

/// Parses a block of the table ([`Block`]), reporting every key it does not know.
pub(super) fn parse_block<B: Block>(node: &Node, path: &[Segment], checker: &mut Checker<'_>) -> B {
    let mut block = B::default();
    for (k, v) in members(node, path, checker) {
        let p = child(path, k);
        if !block.read(k, v, &p, checker) {
            unknown(k, &p, B::FIELDS, checker);
        }
    }
    block
}

fn unknown(k: &str, path: &[Segment], known: &'static [Field], checker: &mut Checker<'_>) {
    checker.issue(
        path,
        IssueKind::UnknownKey {
            key: k.to_owned(),
            closest: closest(k, known),
        },
    );
}

/// The known key most similar to `k`.
pub(crate) fn closest(k: &str, known: &'static [Field]) -> &'static str {
    let lower = k.to_ascii_lowercase();
    known
        .iter()
        .map(|f| f.key)
        .max_by(|a, b| {
            let sa = strsim::jaro_winkler(&lower, &a.to_ascii_lowercase());
            let sb = strsim::jaro_winkler(&lower, &b.to_ascii_lowercase());
            sa.total_cmp(&sb)
        })
        .unwrap_or(known[0].key)
}

pub(super) fn boolean(v: &Node, path: &[Segment], checker: &mut Checker<'_>) -> Option<bool> {
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

pub(super) fn count(
    v: &Node,
    path: &[Segment],
    max: u64,
    checker: &mut Checker<'_>,
) -> Option<u32> {
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

/// A count that may be 0 (`errorCascade.maxGap`: failures strictly in a row).
pub(super) fn gap(v: &Node, path: &[Segment], max: u64, checker: &mut Checker<'_>) -> Option<u32> {
    match v {
        Node::Int(0) => Some(0),
        Node::Float(f) if *f == 0.0 => Some(0),
        _ => count(v, path, max, checker),
    }
}

/// A count in `min..=max` (a cycle's period): too large for any count, or outside the
/// range, is a problem.
pub(super) fn period(
    v: &Node,
    path: &[Segment],
    min: u32,
    max: u32,
    checker: &mut Checker<'_>,
) -> Option<u32> {
    let n = count(v, path, MAX_THRESHOLD, checker);
    let range = min..=max;
    if let Some(n) = n.filter(|n| !range.contains(n)) {
        checker.issue(path, IssueKind::OutOfRange { value: n, min, max });
    }
    n.filter(|n| range.contains(n))
}
