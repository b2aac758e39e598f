//! Reading an OpenClaw-style JSON5 document into `loopDetection` blocks, with every problem
//! collected (not just the first) and placed at its line and column.

use super::block::{CLASSES, EXTENSIONS, EXT_DETECTORS, MODES, POLICY, TOOL_RULE};
use super::extensions::{
    ExtensionsBlock, Mode, PolicyBlock, Preset, PriceBlock, ToolMask, ToolRuleBlock,
};
use super::locate::{too_deep, Position, Segment};
use super::value::{
    boolean, child, child_index, count, key, mask_rules, members, one_of, parse_block, render_path,
    strings, unknown, Checker, Node, MAX_PRICES, MAX_THRESHOLD,
};
use super::{ConfigError, ConfigIssue, IssueKind, ScopeBlocks};
use crate::policy::ToolClass;

/// Deepest nesting accepted in a config document. The JSON5 parser recurses per level, so
/// deeper documents are refused before parsing.
pub const MAX_DEPTH: usize = 128;

/// The blocks a document holds.
#[derive(Debug, Default)]
pub(crate) struct Blocks {
    pub global: ScopeBlocks,
    pub agents: Vec<(String, ScopeBlocks)>,
    /// Keys that look like a misspelt block name ([`IssueKind::MisspeltBlock`]).
    pub warnings: Vec<ConfigIssue>,
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
    let mut checker = Checker::new(text);
    let mut blocks = extract(&root, &mut checker);
    let (issues, warnings) = checker.into_issues();
    if issues.is_empty() {
        blocks.warnings = warnings;
        Ok(blocks)
    } else {
        Err(fail(issues))
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
    misspelt_blocks(node, base, checker);
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

/// Warns of the keys of the object at `base` that look like a misspelt block name:
/// `tools.loopdetection`, `loop_guard`, or `tool` holding a `loopDetection`. Neither
/// loopguard nor OpenClaw reads them, so without a warning the block would silently do
/// nothing (a config document has many other keys, so unknown keys here are no error).
fn misspelt_blocks(node: &Node, base: &[Segment], checker: &mut Checker<'_>) {
    let Node::Object(members) = node else {
        return;
    };
    let holds_detection = |v: &Node| matches!(v, Node::Object(m) if m.iter().any(|(k, _)| near_miss(k, DETECTION).is_some()));
    for (k, v) in members {
        let meant = if near_miss(k, "loopguard") == Some(false) {
            Some("loopguard")
        } else if near_miss(k, "tools") == Some(false) && holds_detection(v) {
            Some("tools")
        } else {
            None
        };
        if let Some(meant) = meant {
            let kind = IssueKind::MisspeltBlock {
                key: k.clone(),
                meant,
            };
            checker.warn(&child(base, k), kind);
        }
    }
    if let Some(Node::Object(tools)) = node.get("tools") {
        let at = child(base, "tools");
        for (k, _) in tools {
            if near_miss(k, DETECTION) == Some(false) {
                let kind = IssueKind::MisspeltBlock {
                    key: k.clone(),
                    meant: DETECTION,
                };
                checker.warn(&child(&at, k), kind);
            }
        }
    }
}

/// OpenClaw's block name.
const DETECTION: &str = "loopDetection";

/// `Some(true)` when `key` is `name`, `Some(false)` when it looks like a misspelling of it
/// (the same letters in another case or with separators, `loopdetection`,
/// `loop_detection`; or a typo or two away, `loopDetecton`, and one for a short name,
/// `tool`), `None` otherwise.
fn near_miss(key: &str, name: &str) -> Option<bool> {
    if key == name {
        return Some(true);
    }
    let fold = |s: &str| -> String {
        s.chars()
            .filter(|c| !matches!(c, '_' | '-' | ' ' | '.'))
            .flat_map(char::to_lowercase)
            .collect()
    };
    let (key, name) = (fold(key), fold(name));
    let typos = if name.len() >= 8 { 2 } else { 1 };
    (strsim::damerau_levenshtein(&key, &name) <= typos).then_some(false)
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
                        "repeatedMessage" => {
                            block.repeated_message = Some(parse_block(dv, &dp, checker))
                        }
                        "contentChanting" => {
                            block.content_chanting = Some(parse_block(dv, &dp, checker))
                        }
                        "noToolTurns" => block.no_tool_turns = Some(parse_block(dv, &dp, checker)),
                        "runStorm" => block.run_storm = Some(parse_block(dv, &dp, checker)),
                        "agentTree" => block.agent_tree = Some(parse_block(dv, &dp, checker)),
                        _ => unknown(dk, &dp, EXT_DETECTORS, checker),
                    }
                }
            }
            "budgets" => block.budgets = Some(parse_block(v, &p, checker)),
            "prices" => block.prices = parse_prices(v, &p, checker),
            _ => unknown(k, &p, EXTENSIONS, checker),
        }
    }
    block
}

/// Parses `loopguard.prices`: model name → price, `input` and `output` required.
fn parse_prices(
    node: &Node,
    path: &[Segment],
    checker: &mut Checker<'_>,
) -> Vec<(String, PriceBlock)> {
    let members = members(node, path, checker);
    if members.len() > MAX_PRICES {
        checker.issue(
            path,
            IssueKind::TooLarge {
                max: MAX_PRICES as u64,
            },
        );
        return Vec::new();
    }
    let mut out = Vec::with_capacity(members.len());
    for (model, v) in members {
        let p = child(path, model);
        if crate::text::is_blank(model) {
            checker.issue(&p, IssueKind::MissingKey { key: "model name" });
            continue;
        }
        let price: PriceBlock = parse_block(v, &p, checker);
        let mut complete = true;
        for (key, given) in [("input", price.input), ("output", price.output)] {
            if given.is_none() && matches!(v, Node::Object(_)) && v.get(key).is_none() {
                checker.issue(&p, IssueKind::MissingKey { key });
                complete = false;
            }
        }
        if complete {
            out.push((crate::text::trim(model).to_owned(), price));
        }
    }
    out
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
