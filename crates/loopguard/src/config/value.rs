//! The values of a parsed config document and how each kind is read: the [`Node`] tree,
//! the [`Checker`] that collects every problem with its place, the description of what a
//! key accepts ([`Field`], [`Kind`]), a table block's reader ([`Block`], [`parse_block`]),
//! the readers of plain values (switches, counts, periods, strings, masking rules), and
//! the limits they enforce. The block table (`block.rs`) and the document's walk
//! (`document.rs`) are written on top of this module, which knows neither.

use std::fmt;

use serde::de::{Deserialize, Deserializer, MapAccess, SeqAccess, Visitor};

use super::locate::{locate, Segment};
use super::{ConfigIssue, IssueKind};

/// Largest accepted `historySize` and `postCompactionGuard.windowSize`: memory per run
/// grows with them.
pub const MAX_WINDOW: u64 = 1_000_000;

/// Largest accepted threshold.
pub const MAX_THRESHOLD: u64 = 1_000_000_000;

/// Largest token budget accepted (a thousand billion).
pub const MAX_BUDGET_TOKENS: u64 = 1_000_000_000_000;

/// Largest money budget accepted, in US dollars.
pub const MAX_BUDGET_COST: u64 = 10_000_000;

/// Largest `runStorm.windowMinutes` and `cooldownMinutes` accepted (a year).
pub const MAX_STORM_MINUTES: u64 = 366 * 24 * 60;

/// Largest `wallSeconds` accepted (a year).
pub const MAX_WALL_SECONDS: u64 = 366 * 24 * 60 * 60;

/// Largest price accepted, in US dollars per million tokens.
pub const MAX_PRICE: u64 = 100_000;

/// Most models a config may price (`loopguard.prices`).
pub const MAX_PRICES: usize = 1024;

/// Longest `cycle.maxLength` accepted (at run time it is also capped at `historySize`).
pub const MAX_CYCLE_LENGTH: u32 = 1000;

/// One key of a block: its name as written and what it accepts.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Field {
    /// The key as written (`historySize`).
    pub key: &'static str,
    /// What its value must be.
    pub kind: Kind,
}

/// What a key accepts.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum Kind {
    /// `true` or `false`.
    Switch,
    /// An integer in `min..=max` (an integral float such as `10.0` is one).
    Count {
        /// Smallest accepted.
        min: u64,
        /// Largest accepted.
        max: u64,
    },
    /// An object with these keys.
    Block(&'static [Field]),
    /// An array of at most `max` objects with these keys.
    List(&'static [Field], usize),
    /// One of these strings.
    OneOf(&'static [&'static str]),
    /// One of the names of [`Preset::ALL`](super::extensions::Preset::ALL).
    Preset,
    /// A non-blank string (a tool name glob).
    Pattern,
    /// An array of strings.
    Strings,
    /// An array of masking rule names ([`crate::masking::MASK_RULES`]).
    MaskRules,
    /// `true`, `false` or an array of masking rule names.
    Mask,
    /// A decimal number from 0 (excluded when `positive`) to `max` (a price, an amount of
    /// money, a fraction).
    Decimal {
        /// Whether 0 is refused.
        positive: bool,
        /// Largest accepted.
        max: u64,
    },
    /// A UTC offset: `"UTC"`, or `"+HH:MM"` / `"-HH:MM"` up to 14 hours.
    UtcOffset,
    /// An object whose keys are names chosen by the writer (model names), each holding an
    /// object with these keys; at most `max` of them.
    Map(&'static [Field], usize),
}

/// A block of the table: parsed key by key, laid over another of its kind.
pub(crate) trait Block: Default {
    /// Its keys, in table order.
    const FIELDS: &'static [Field];

    /// Reads the member `key` into `self`; `false` when the block has no such key.
    fn read(
        &mut self,
        key: &str,
        value: &Node,
        path: &[Segment],
        checker: &mut Checker<'_>,
    ) -> bool;
}

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
    pub(crate) fn describe(&self) -> String {
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
    pub(crate) fn get(&self, key: &str) -> Option<&Node> {
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

/// Collects problems while walking the document: errors, which refuse it, and warnings
/// (keys that do nothing, such as a misspelt block name), which do not.
pub(crate) struct Checker<'t> {
    text: &'t str,
    issues: Vec<ConfigIssue>,
    warnings: Vec<ConfigIssue>,
}

impl<'t> Checker<'t> {
    /// A checker of the document `text`, with no problem found yet.
    pub(crate) fn new(text: &'t str) -> Self {
        Self {
            text,
            issues: Vec::new(),
            warnings: Vec::new(),
        }
    }

    /// The problems found: the errors, then the warnings.
    pub(crate) fn into_issues(self) -> (Vec<ConfigIssue>, Vec<ConfigIssue>) {
        (self.issues, self.warnings)
    }

    fn at(&self, path: &[Segment], kind: IssueKind) -> ConfigIssue {
        ConfigIssue {
            path: render_path(path),
            position: locate(self.text, path),
            kind,
        }
    }

    pub(crate) fn issue(&mut self, path: &[Segment], kind: IssueKind) {
        let issue = self.at(path, kind);
        self.issues.push(issue);
    }

    pub(crate) fn warn(&mut self, path: &[Segment], kind: IssueKind) {
        let warning = self.at(path, kind);
        self.warnings.push(warning);
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

pub(crate) fn key(k: &str) -> Segment {
    Segment::Key(k.to_owned())
}

/// A list of masking rule names, each checked.
pub(crate) fn mask_rules(v: &Node, path: &[Segment], checker: &mut Checker<'_>) -> Vec<String> {
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

pub(crate) fn child(path: &[Segment], k: &str) -> Vec<Segment> {
    let mut p = path.to_vec();
    p.push(key(k));
    p
}

pub(crate) fn child_index(path: &[Segment], i: usize) -> Vec<Segment> {
    let mut p = path.to_vec();
    p.push(Segment::Index(i));
    p
}

/// One of `allowed` strings.
pub(crate) fn one_of<'a>(
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
pub(crate) fn strings(
    v: &Node,
    path: &[Segment],
    checker: &mut Checker<'_>,
) -> Vec<(usize, String)> {
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
pub(crate) fn members<'n>(
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
pub(crate) fn parse_block<B: Block>(node: &Node, path: &[Segment], checker: &mut Checker<'_>) -> B {
    let mut block = B::default();
    for (k, v) in members(node, path, checker) {
        let p = child(path, k);
        if !block.read(k, v, &p, checker) {
            unknown(k, &p, B::FIELDS, checker);
        }
    }
    block
}

pub(crate) fn unknown(
    k: &str,
    path: &[Segment],
    known: &'static [Field],
    checker: &mut Checker<'_>,
) {
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

pub(crate) fn boolean(v: &Node, path: &[Segment], checker: &mut Checker<'_>) -> Option<bool> {
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

pub(crate) fn count(
    v: &Node,
    path: &[Segment],
    max: u64,
    checker: &mut Checker<'_>,
) -> Option<u32> {
    // Every `max` a field gives a count fits 32 bits.
    big_count(v, path, max, checker).map(|n| u32::try_from(n).unwrap_or(u32::MAX))
}

/// A count from 1 to `max`, beyond 32 bits when `max` is (a token budget).
pub(crate) fn big_count(
    v: &Node,
    path: &[Segment],
    max: u64,
    checker: &mut Checker<'_>,
) -> Option<u64> {
    let value = match v {
        Node::Int(i) if *i >= 1 => Some(*i),
        // 10.0 is the integer 10, as in JavaScript.
        Node::Float(f) if f.is_finite() && f.fract() == 0.0 && *f >= 1.0 => {
            Some(if *f > 1e30 { i128::MAX } else { *f as i128 })
        }
        _ => None,
    };
    match value {
        Some(n) if n <= max as i128 => Some(n as u64),
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

/// A decimal number kept exactly to the millionth: written `0.8`, `2`, `0.075`, it is
/// compared, summed and serialized without binary rounding.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Decimal(u64);

impl Decimal {
    /// The value in millionths.
    pub const fn millionths(self) -> u64 {
        self.0
    }

    /// A value given in millionths.
    pub const fn from_millionths(millionths: u64) -> Self {
        Self(millionths)
    }

    /// The value as a float (for display).
    pub fn as_f64(self) -> f64 {
        self.0 as f64 / 1e6
    }
}

impl serde::Serialize for Decimal {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_f64(self.as_f64())
    }
}

/// A decimal from 0 (excluded when `positive`) to `max`, rounded to the millionth.
pub(crate) fn decimal(
    v: &Node,
    path: &[Segment],
    positive: bool,
    max: u64,
    checker: &mut Checker<'_>,
) -> Option<Decimal> {
    let x = match v {
        Node::Int(i) => *i as f64,
        Node::Float(f) => *f,
        other => {
            checker.issue(
                path,
                IssueKind::NotNumber {
                    found: other.describe(),
                },
            );
            return None;
        }
    };
    if !x.is_finite() || x < 0.0 || (positive && x == 0.0) {
        checker.issue(
            path,
            IssueKind::NotNumber {
                found: v.describe(),
            },
        );
        return None;
    }
    if x > max as f64 {
        checker.issue(path, IssueKind::TooLarge { max });
        return None;
    }
    let millionths = (x * 1e6).round() as u64;
    if positive && millionths == 0 {
        // Below a millionth: a limit nothing could stay under.
        checker.issue(
            path,
            IssueKind::NotNumber {
                found: v.describe(),
            },
        );
        return None;
    }
    Some(Decimal(millionths))
}

/// A UTC offset in minutes east of UTC, as written: `"+02:00"`, `"-05:30"`, `"UTC"`.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub struct UtcOffset(i32);

impl UtcOffset {
    /// Minutes east of UTC.
    pub const fn minutes(self) -> i32 {
        self.0
    }

    /// An offset of `minutes` east of UTC.
    pub const fn from_minutes(minutes: i32) -> Self {
        Self(minutes)
    }

    /// Reads `"UTC"`, `"Z"`, `"+HH:MM"` or `"-HH:MM"` (at most 14 hours).
    pub fn parse(text: &str) -> Option<Self> {
        let t = text.trim();
        if t.eq_ignore_ascii_case("utc") || t == "Z" {
            return Some(Self(0));
        }
        let t = t
            .strip_prefix("UTC")
            .or_else(|| t.strip_prefix("utc"))
            .unwrap_or(t);
        let (sign, rest) = match t.as_bytes().first() {
            Some(b'+') => (1, &t[1..]),
            Some(b'-') => (-1, &t[1..]),
            _ => return None,
        };
        let (h, m) = rest.split_once(':')?;
        if h.len() != 2 || m.len() != 2 {
            return None;
        }
        let (h, m): (i32, i32) = (h.parse().ok()?, m.parse().ok()?);
        (h <= 14 && m < 60 && h * 60 + m <= 14 * 60).then_some(Self(sign * (h * 60 + m)))
    }
}

impl std::fmt::Display for UtcOffset {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        if self.0 == 0 {
            return f.write_str("UTC");
        }
        let sign = if self.0 < 0 { '-' } else { '+' };
        let m = self.0.unsigned_abs();
        write!(f, "UTC{sign}{:02}:{:02}", m / 60, m % 60)
    }
}

impl serde::Serialize for UtcOffset {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.collect_str(self)
    }
}

/// A UTC offset (`budgets.timeZone`).
pub(crate) fn utc_offset(
    v: &Node,
    path: &[Segment],
    checker: &mut Checker<'_>,
) -> Option<UtcOffset> {
    match v {
        Node::Str(s) => {
            let offset = UtcOffset::parse(s);
            if offset.is_none() {
                checker.issue(
                    path,
                    IssueKind::UnknownValue {
                        value: s.clone(),
                        expected: "\"UTC\" or an offset such as \"+02:00\" or \"-05:30\"".into(),
                    },
                );
            }
            offset
        }
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

/// A count that may be 0 (`errorCascade.maxGap`: failures strictly in a row).
pub(crate) fn gap(v: &Node, path: &[Segment], max: u64, checker: &mut Checker<'_>) -> Option<u32> {
    match v {
        Node::Int(0) => Some(0),
        Node::Float(f) if *f == 0.0 => Some(0),
        _ => count(v, path, max, checker),
    }
}

/// A count in `min..=max` (a cycle's period): too large for any count, or outside the
/// range, is a problem.
pub(crate) fn period(
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
