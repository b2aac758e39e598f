//! Agent trees and run storms in a scan: the sessions the readers linked to a parent
//! (`parent_session`, `parent_run`: Claude Code subagents and sidechains, stream-json
//! `Task` calls) grouped under their root, with what each root and its descendants ran,
//! spent and were flagged for. Built from the session reports alone, without recursion:
//! parents are followed upwards a bounded number of steps, trees are walked with a stack.

use std::collections::{HashMap, HashSet};

use loopguard::{Detector, Level};
use loopguard_transcripts::{FileScan, Savings, SessionReport};
use serde::Serialize;

/// Parents followed upwards from one session at most (a longer chain is cut there).
const MAX_DEPTH: usize = 256;
/// Sessions a tree lists at most in `nodes` (its totals count them all).
pub const MAX_NODES: usize = 1000;
/// Sessions a repeated task or failure names at most.
const MAX_NAMED: usize = 20;

/// What a session, or every session of a tree, ran, spent and was flagged for.
#[derive(Clone, Copy, Debug, Default, Serialize)]
pub struct Totals {
    pub runs: u64,
    pub calls: u64,
    /// Results that count as failed.
    pub failed: u64,
    pub findings: u64,
    pub critical: u64,
    pub run_storms: u64,
    pub blocked_calls: u64,
    pub tokens: Option<u64>,
    pub cost: Option<f64>,
}

impl Totals {
    /// A session's (all zero for a session named as a parent but not scanned).
    fn of(s: Option<&SessionReport>) -> Self {
        let count = |level: Option<Level>, detector: Option<Detector>| {
            s.map_or(0, |s| {
                s.findings
                    .iter()
                    .filter(|f| level.is_none_or(|l| f.level >= l))
                    .filter(|f| detector.is_none_or(|d| f.detector == d))
                    .count() as u64
            })
        };
        Self {
            runs: s.map_or(0, |s| s.runs),
            calls: s.map_or(0, |s| s.calls),
            failed: s.map_or(0, |s| s.failed_outcomes),
            findings: count(None, None),
            critical: count(Some(Level::Critical), None),
            run_storms: count(None, Some(Detector::RunStorm)),
            blocked_calls: s.map_or(0, |s| s.blocked_calls),
            tokens: s.and_then(|s| s.usage).map(|u| u.tokens),
            cost: s.and_then(|s| s.usage).and_then(|u| u.cost),
        }
    }

    /// Adds `other`'s (tokens and cost stay unknown until some session knows them).
    fn add(&mut self, other: &Self) {
        self.runs += other.runs;
        self.calls += other.calls;
        self.failed += other.failed;
        self.findings += other.findings;
        self.critical += other.critical;
        self.run_storms += other.run_storms;
        self.blocked_calls += other.blocked_calls;
        add_spend((&mut self.tokens, &mut self.cost), other.tokens, other.cost);
    }
}

/// Adds `tokens` and `cost` to a total of each, which stays unknown (`None`) until a known
/// figure is added; cost is kept to the nano-dollar so that sums do not drift.
pub(crate) fn add_spend(
    (total_tokens, total_cost): (&mut Option<u64>, &mut Option<f64>),
    tokens: Option<u64>,
    cost: Option<f64>,
) {
    if let Some(tokens) = tokens {
        *total_tokens.get_or_insert(0) += tokens;
    }
    if let Some(c) = cost {
        let total = total_cost.get_or_insert(0.0);
        *total = ((*total + c) * 1e9).round() / 1e9;
    }
}

/// One session of a tree.
#[derive(Clone, Debug, Serialize)]
pub struct Node {
    /// The session id.
    pub session: String,
    /// The file it was read from (`None`: named as a parent, not scanned).
    pub file: Option<String>,
    /// Its parent session (`None` for the root).
    pub parent: Option<String>,
    /// The run of the parent that spawned it, when the transcript says.
    pub parent_run: Option<String>,
    /// 0 for the root, 1 for its children, ...
    pub depth: u32,
    /// What it ran, spent and was flagged for.
    #[serde(flatten)]
    pub totals: Totals,
    /// Its first prompt (shortened).
    pub task: Option<String>,
}

/// Children of one tree that did the same thing.
#[derive(Clone, Debug, Serialize)]
pub struct Repeat {
    /// The task (first prompt) or the failure (`tool args -> outcome` of its first loop).
    pub what: String,
    /// How many children.
    pub children: u64,
    /// Those children (the first [`MAX_NAMED`]).
    pub sessions: Vec<String>,
}

/// A root session with its descendants, or a session with a run storm.
#[derive(Clone, Debug, Serialize)]
pub struct Tree {
    pub root: String,
    /// The root's file (`None`: the root was named by its children but not scanned).
    pub file: Option<String>,
    /// Sessions in the tree, the root included.
    pub sessions: u64,
    /// Descendants of the root.
    pub children: u64,
    /// The deepest descendant's depth (0: no children).
    pub depth: u32,
    /// Totals over the tree's sessions.
    #[serde(flatten)]
    pub totals: Totals,
    /// What blocking would have saved, over the tree.
    pub saved: Savings,
    /// Children given the same task, two or more times.
    pub repeated_tasks: Vec<Repeat>,
    /// Children whose first loop is the same call failing the same way.
    pub repeated_failures: Vec<Repeat>,
    /// The sessions, root first, each followed by its descendants (depth-first).
    pub nodes: Vec<Node>,
    /// Sessions left out of `nodes` (beyond [`MAX_NODES`]).
    pub nodes_left_out: u64,
}

fn node(file: Option<&FileScan>, s: Option<&SessionReport>, session: &str, depth: u32) -> Node {
    Node {
        session: session.to_owned(),
        file: file.map(|f| f.file.clone()),
        parent: s.and_then(|s| s.parent_session.clone()),
        parent_run: s.and_then(|s| s.parent_run.clone()),
        depth,
        totals: Totals::of(s),
        task: s.and_then(|s| s.task.clone()),
    }
}

/// The failure a session's first loop repeats: `tool args -> outcome`.
fn failure(s: &SessionReport) -> Option<String> {
    let l = s.loops.first()?;
    let outcome = l.outcome.as_deref()?;
    Some(format!(
        "{} {} -> {outcome}",
        l.tool,
        l.args.as_deref().unwrap_or("")
    ))
}

/// Groups of two or more children sharing `key`, largest first.
fn repeats<'a>(children: impl Iterator<Item = (&'a str, Option<String>)>) -> Vec<Repeat> {
    let mut groups: Vec<Repeat> = Vec::new();
    let mut index: HashMap<String, usize> = HashMap::new();
    for (session, key) in children {
        let Some(key) = key else { continue };
        let i = *index.entry(key.clone()).or_insert_with(|| {
            groups.push(Repeat {
                what: key,
                children: 0,
                sessions: Vec::new(),
            });
            groups.len() - 1
        });
        let group = &mut groups[i];
        group.children += 1;
        if group.sessions.len() < MAX_NAMED {
            group.sessions.push(session.to_owned());
        }
    }
    groups.retain(|g| g.children > 1);
    groups.sort_by(|a, b| b.children.cmp(&a.children).then(a.what.cmp(&b.what)));
    groups
}

/// The trees of a scan: every root with at least one child, and every session with a
/// run storm, in the order their roots were first read.
pub fn trees<'a>(sessions: impl Iterator<Item = (&'a FileScan, &'a SessionReport)>) -> Vec<Tree> {
    let sessions: Vec<_> = sessions.collect();
    // The first report of each session id (an id read twice keeps its first).
    let mut by_id: HashMap<&str, usize> = HashMap::new();
    for (i, (_, s)) in sessions.iter().enumerate() {
        by_id.entry(s.session.as_str()).or_insert(i);
    }
    let mut children: HashMap<&str, Vec<&str>> = HashMap::new();
    for (i, (_, s)) in sessions.iter().enumerate() {
        if by_id.get(s.session.as_str()) != Some(&i) {
            continue;
        }
        if let Some(parent) = s.parent_session.as_deref().filter(|p| *p != s.session) {
            children.entry(parent).or_default().push(&s.session);
        }
    }
    let parent_of = |id: &str| {
        by_id
            .get(id)
            .and_then(|&i| sessions[i].1.parent_session.as_deref())
    };
    // Each session's root: its parents followed upwards (a cycle or a chain past
    // MAX_DEPTH ends at the last session reached).
    let root_of = |id: &'a str| -> &'a str {
        let mut seen: HashSet<&str> = HashSet::from([id]);
        let mut at = id;
        for _ in 0..MAX_DEPTH {
            match parent_of(at) {
                Some(p) if seen.insert(p) => at = p,
                _ => break,
            }
        }
        at
    };
    let storms = |s: &SessionReport| s.findings.iter().any(|f| f.detector == Detector::RunStorm);
    let mut roots: Vec<&str> = Vec::new();
    let mut listed: HashSet<&str> = HashSet::new();
    for (i, (_, s)) in sessions.iter().enumerate() {
        if by_id.get(s.session.as_str()) != Some(&i) {
            continue;
        }
        if s.parent_session.is_some() || storms(s) || children.contains_key(s.session.as_str()) {
            let root = root_of(&s.session);
            let root_storms = by_id.get(root).is_some_and(|&r| storms(sessions[r].1));
            if (children.contains_key(root) || root_storms) && listed.insert(root) {
                roots.push(root);
            }
        }
    }
    // A cycle of parents gives each of its sessions as a root: the first one read keeps
    // them all.
    let mut covered: HashSet<String> = HashSet::new();
    let mut out = Vec::new();
    for root in roots {
        if covered.contains(root) {
            continue;
        }
        let t = tree(root, &sessions, &by_id, &children);
        covered.extend(t.nodes.iter().map(|n| n.session.clone()));
        out.push(t);
    }
    out
}

/// The tree under `root`, walked depth-first with a stack.
fn tree(
    root: &str,
    sessions: &[(&FileScan, &SessionReport)],
    by_id: &HashMap<&str, usize>,
    children: &HashMap<&str, Vec<&str>>,
) -> Tree {
    let found = |id: &str| by_id.get(id).map(|&i| sessions[i]);
    let mut t = Tree {
        root: root.to_owned(),
        file: found(root).map(|(f, _)| f.file.clone()),
        sessions: 0,
        children: 0,
        depth: 0,
        totals: Totals::default(),
        saved: Savings::default(),
        repeated_tasks: Vec::new(),
        repeated_failures: Vec::new(),
        nodes: Vec::new(),
        nodes_left_out: 0,
    };
    let mut seen: HashSet<&str> = HashSet::from([root]);
    let mut stack: Vec<(&str, u32)> = vec![(root, 0)];
    let mut descendants: Vec<&SessionReport> = Vec::new();
    while let Some((id, depth)) = stack.pop() {
        let (file, s) = match found(id) {
            Some((f, s)) => (Some(f), Some(s)),
            None => (None, None),
        };
        let n = node(file, s, id, depth);
        t.sessions += 1;
        t.depth = t.depth.max(depth);
        t.totals.add(&n.totals);
        if let Some(s) = s {
            t.saved.add(&s.saved);
            if depth > 0 {
                descendants.push(s);
            }
        }
        if t.nodes.len() < MAX_NODES {
            t.nodes.push(n);
        } else {
            t.nodes_left_out += 1;
        }
        // Children pushed in reverse, so that they come out in the order they were read.
        for child in children.get(id).into_iter().flatten().rev() {
            if (depth as usize) < MAX_DEPTH && seen.insert(child) {
                stack.push((child, depth + 1));
            }
        }
    }
    t.children = t.sessions - 1;
    t.repeated_tasks = repeats(
        descendants
            .iter()
            .map(|s| (s.session.as_str(), s.task.clone())),
    );
    t.repeated_failures = repeats(descendants.iter().map(|s| (s.session.as_str(), failure(s))));
    t
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use loopguard_transcripts::{scan_bytes, ScanOptions};
    use serde_json::json;

    use crate::scan_report::{ConfigSource, Report};

    /// `claude -p --output-format stream-json` of a session that spawns `children`
    /// subagents in one run, all given the same task, each running `cargo build` 12 times
    /// into the same error.
    pub(crate) fn fan_out(children: usize) -> String {
        let mut lines = vec![json!({"type": "system", "subtype": "init", "session_id": "storm"})];
        let line = |kind: &str, message: serde_json::Value, parent: Option<&str>| json!({"type": kind, "message": message, "parent_tool_use_id": parent, "session_id": "storm"});
        lines.push(line(
            "user",
            json!({"role": "user", "content": "fix the build"}),
            None,
        ));
        for k in 1..=children {
            let task = format!("t{k}");
            lines.push(line(
                "assistant",
                json!({"id": format!("m{k}"), "role": "assistant", "content": [
                    {"type": "tool_use", "id": task, "name": "Task", "input": {"prompt": "Make cargo build pass"}}
                ]}),
                None,
            ));
            lines.push(line(
                "user",
                json!({"role": "user", "content": "Make cargo build pass"}),
                Some(&task),
            ));
            for j in 1..=12 {
                let id = format!("c{k}-{j}");
                lines.push(line(
                    "assistant",
                    json!({"id": format!("r{k}-{j}"), "role": "assistant", "content": [
                        {"type": "tool_use", "id": id, "name": "Bash", "input": {"command": "cargo build"}}
                    ]}),
                    Some(&task),
                ));
                lines.push(line(
                    "user",
                    json!({"role": "user", "content": [
                        {"type": "tool_result", "tool_use_id": id, "is_error": true, "content": "error: could not compile `app`"}
                    ]}),
                    Some(&task),
                ));
            }
            lines.push(line(
                "user",
                json!({"role": "user", "content": [
                    {"type": "tool_result", "tool_use_id": task, "content": "the build still fails"}
                ]}),
                None,
            ));
        }
        lines.iter().map(|l| format!("{l}\n")).collect()
    }

    pub(crate) fn report_of(text: &str) -> Report {
        let options = ScanOptions::default();
        let scan = scan_bytes(text.as_bytes(), None, "storm.jsonl", &options).unwrap();
        Report::new(
            vec![scan],
            0,
            ConfigSource::Defaults,
            &options,
            Duration::from_millis(1),
        )
    }

    #[test]
    fn a_fan_out_of_one_failing_task_is_one_tree_with_its_repeats() {
        let report = report_of(&fan_out(6));
        assert_eq!(report.trees.len(), 1);
        let t = &report.trees[0];
        assert_eq!(
            (t.root.as_str(), t.sessions, t.children, t.depth),
            ("storm", 7, 6, 1)
        );
        assert_eq!(t.totals.calls, 6 * 13);
        assert_eq!(
            t.totals.findings, 6,
            "each child's build loop is flagged once"
        );
        assert_eq!(t.repeated_tasks.len(), 1);
        assert_eq!(t.repeated_tasks[0].children, 6);
        assert_eq!(t.repeated_tasks[0].what, "Make cargo build pass");
        assert_eq!(t.repeated_failures.len(), 1);
        assert_eq!(t.repeated_failures[0].children, 6);
        assert!(
            t.repeated_failures[0].what.starts_with("Bash "),
            "{:?}",
            t.repeated_failures
        );
        // Children in the order they were spawned, each naming the run that spawned it.
        let children: Vec<_> = t.nodes[1..]
            .iter()
            .map(|n| (n.session.as_str(), n.parent_run.as_deref(), n.depth))
            .collect();
        assert_eq!(children[0], ("storm/agent-t1", Some("turn-1"), 1));
        assert_eq!(children[5], ("storm/agent-t6", Some("turn-1"), 1));
        assert_eq!(report.summary.trees, 1);
        assert_eq!(report.summary.subagent_sessions, 6);

        let mut out = Vec::new();
        report.write_human(&mut out, None).unwrap();
        let text = String::from_utf8(out).unwrap();
        assert!(text.contains("Agent trees and run storms"), "{text}");
        assert!(
            text.contains("└ storm/agent-t1 (from turn-1): 1 run, 12 calls (12 failed), 1 finding"),
            "{text}"
        );
        assert!(
            text.contains("6 children given the same task: Make cargo build pass"),
            "{text}"
        );
        assert!(
            text.contains("6 children failing the same way: Bash"),
            "{text}"
        );

        let html = crate::scan_html::render(&report);
        assert!(html.contains("<h2>Agent trees and run storms</h2>"));
        let tree = &html[html.find("class=\"tree\"").unwrap()..];
        assert!(tree.starts_with("class=\"tree\"><h3>storm</h3>"), "{tree}");
        let list = &tree[..tree.find("</div>").unwrap()];
        assert_eq!(list.matches("<li").count(), 7);
        assert_eq!(list.matches("<ul>").count(), list.matches("</ul>").count());
    }

    #[test]
    fn a_session_without_children_or_storms_is_no_tree() {
        let report = report_of(&fan_out(0));
        assert!(report.trees.is_empty());
        assert_eq!(report.summary.trees, 0);
    }

    /// Parents that name each other (a malformed link) end the walk, they do not loop.
    #[test]
    fn a_cycle_of_parents_ends() {
        use loopguard_transcripts::{FileScan, SessionReport};
        let file = FileScan::not_scanned("f", loopguard_transcripts::FileStatus::Scanned, 0);
        let session = |id: &str, parent: &str| SessionReport {
            session: id.into(),
            parent_session: Some(parent.into()),
            ..SessionReport::default()
        };
        let a = session("a", "b");
        let b = session("b", "a");
        let c = session("c", "c");
        let trees = super::trees([(&file, &a), (&file, &b), (&file, &c)].into_iter());
        assert_eq!(trees.len(), 1);
        assert_eq!(trees[0].sessions, 2);
    }
}
