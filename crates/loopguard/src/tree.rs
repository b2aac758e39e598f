//! `agent_tree`: the accounting of a tree of agents (sub-agents spawning sub-agents), kept
//! per **root session**, for the limits on children per parent run, depth from the root,
//! concurrent (unfinished) children, and a failed child task spawned again.
//!
//! Where it is kept: the root session's [`SessionState`] holds the tree's record
//! ([`TreePlace::record`]); each sub-agent's holds its link ([`TreePlace::link`]: its
//! root, what the tree said of its spawn). A sub-agent's first call takes three steps,
//! each on one session's state, so that a host holding its sessions apart (a store, the
//! hooks' database) can do them one at a time: the parent's state names the root
//! ([`TreePlace::root_or`]), the root's judges the spawn ([`SessionState::spawn_child`]),
//! the child's keeps the link ([`SessionState::link_to`]); its calls are then judged by the
//! link (warned once at a limit, every call blocked past one). A sub-agent whose call is
//! blocked failed: the root's record is told once ([`SessionState::take_failure`],
//! [`SessionState::child_ended`]), as it is told of a run that ends. [`Guard`](crate::Guard)
//! does all of it in memory.
//!
//! Definitions:
//! - A **child** is a session whose first event names a parent (`parent_session`, and
//!   `parent_run` when the parent has runs). The link only scopes state: it is never trusted
//!   for anything else, and a link to an unknown parent makes the child a new root's child
//!   at depth 1 (the parent is recorded as a root).
//! - The **depth** of the root is 0; a child's is its parent's plus one. Depth is stored with
//!   each node when it is spawned, so nothing walks the tree (no recursion, no loop
//!   controlled by input depth).
//! - A child's **task** is the hash of its agent id and the signature of its first call
//!   ([`crate::Signature`]): the same agent asked to do the same first thing.
//! - A child **failed the same way** as another when both ended with a failure of the same
//!   failure print (the signature of the failing call that ended it, or of the call a
//!   detector blocked).
//!
//! Verdicts, per spawn (the child's first call): warn when the spawn reaches a limit (the
//! `maxChildren`-th child of a parent run, a child at `maxDepth`, the `maxConcurrent`-th
//! unfinished child, a task spawned again after `respawn − 1` failures the same way);
//! block when it would go past one. A blocked spawn is not recorded as a child.
//!
//! The record is bounded ([`TREE_NODES_KEPT`] nodes, [`TREE_FAILURES_KEPT`] failed tasks):
//! a tree larger than that keeps its counts (the roll-up) but forgets its oldest finished
//! nodes.

use serde::{Deserialize, Serialize};

use crate::budget::SessionState;
use crate::clock::Millis;
use crate::fingerprint::Signature;
use crate::scope::Scope;

/// Nodes (sessions) a tree record keeps.
pub const TREE_NODES_KEPT: usize = 1024;
/// Failed tasks a tree record remembers for respawns.
pub const TREE_FAILURES_KEPT: usize = 64;

/// Effective `agentTree` settings (`loopguard.detectors.agentTree`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct AgentTree {
    /// Children one parent run may spawn.
    pub max_children: u32,
    /// Depth from the root (the root is 0).
    pub max_depth: u32,
    /// Unfinished children of one parent run at once.
    pub max_concurrent: u32,
    /// Failures the same way of one task after which spawning it again is blocked (warned
    /// one failure earlier; 0 turns the check off).
    pub respawn: u32,
}

impl Default for AgentTree {
    fn default() -> Self {
        crate::config::extensions::DEFAULT_AGENT_TREE
    }
}

/// Which limit a spawn met.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum TreeLimit {
    /// Children of one parent run.
    Children,
    /// Depth from the root.
    Depth,
    /// Unfinished children of one parent run.
    Concurrent,
    /// A task spawned again after it failed the same way.
    Respawn,
}

/// What the tree says of a spawn.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum Spawn {
    /// Within every limit (or the child was already known).
    Allowed,
    /// Recorded, at a limit: (the limit, the count that reached it).
    Warn(TreeLimit, u32),
    /// Not recorded, past a limit: (the limit, the count it would have reached).
    Block(TreeLimit, u32),
}

/// One session of the tree.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
struct Node {
    /// Its session id's hash.
    session: u64,
    /// The parent's session hash and run hash (`None`: the root).
    parent: Option<(u64, u64)>,
    /// Depth from the root.
    depth: u32,
    /// Its task (agent and first call).
    task: u64,
    /// Whether it ended.
    finished: bool,
}

/// A task's failures the same way.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
struct Failed {
    task: u64,
    failure: u128,
    times: u32,
}

/// What the root's sessions roll up.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct TreeCounts {
    /// Children ever spawned under the root.
    pub children: u32,
    /// Children that have not finished.
    pub running: u32,
    /// Deepest depth reached.
    pub depth: u32,
    /// Children that ended failed.
    pub failed: u32,
    /// Spawns warned.
    pub warned: u32,
    /// Spawns blocked.
    pub blocked: u32,
}

/// The record of one tree, kept by its root session.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Tree {
    nodes: Vec<Node>,
    failures: Vec<Failed>,
    counts: TreeCounts,
}

impl Tree {
    /// The counts rolled up to the root.
    pub fn counts(&self) -> TreeCounts {
        self.counts
    }

    fn node(&self, session: u64) -> Option<&Node> {
        self.nodes.iter().find(|n| n.session == session)
    }

    fn depth_of(&mut self, parent: u64) -> u32 {
        match self.node(parent) {
            Some(n) => n.depth,
            None => {
                self.push(Node {
                    session: parent,
                    parent: None,
                    depth: 0,
                    task: 0,
                    finished: false,
                });
                0
            }
        }
    }

    fn push(&mut self, node: Node) {
        if self.nodes.len() >= TREE_NODES_KEPT {
            let oldest = self.nodes.iter().position(|n| n.finished).unwrap_or(0);
            self.nodes.remove(oldest);
        }
        self.nodes.push(node);
    }

    /// The first event of `child`, spawned by run `parent_run` of `parent`, doing `task`.
    /// A child already known is [`Spawn::Allowed`] and changes nothing.
    pub fn spawn(
        &mut self,
        cfg: &AgentTree,
        child: u64,
        parent: u64,
        parent_run: u64,
        task: u64,
    ) -> Spawn {
        if self.node(child).is_some() {
            return Spawn::Allowed;
        }
        let depth = self.depth_of(parent).saturating_add(1);
        let link = Some((parent, parent_run));
        let (mut children, mut running) = (0u32, 0u32);
        for n in self.nodes.iter().filter(|n| n.parent == link) {
            children = children.saturating_add(1);
            running = running.saturating_add(u32::from(!n.finished));
        }
        let failed = if cfg.respawn == 0 {
            0
        } else {
            self.failures
                .iter()
                .filter(|f| f.task == task)
                .map(|f| f.times)
                .max()
                .unwrap_or(0)
        };
        let checks = [
            (TreeLimit::Depth, depth, cfg.max_depth),
            (TreeLimit::Children, children + 1, cfg.max_children),
            (
                TreeLimit::Concurrent,
                running + 1,
                off_at_zero(cfg.max_concurrent),
            ),
            (
                TreeLimit::Respawn,
                failed.saturating_add(1),
                off_at_zero(cfg.respawn),
            ),
        ];
        let mut verdict = Spawn::Allowed;
        for (limit, count, max) in checks {
            if count > max {
                self.counts.blocked = self.counts.blocked.saturating_add(1);
                return Spawn::Block(limit, count);
            }
            if count == max && verdict == Spawn::Allowed {
                verdict = Spawn::Warn(limit, count);
            }
        }
        if matches!(verdict, Spawn::Warn(..)) {
            self.counts.warned = self.counts.warned.saturating_add(1);
        }
        self.push(Node {
            session: child,
            parent: link,
            depth,
            task,
            finished: false,
        });
        let c = &mut self.counts;
        c.children = c.children.saturating_add(1);
        c.running = c.running.saturating_add(1);
        c.depth = c.depth.max(depth);
        verdict
    }

    /// `child` ended, failed with `failure` (a print) or not. Unknown children and a second
    /// end change nothing; says whether anything changed.
    pub fn finish(&mut self, child: u64, failure: Option<u128>) -> bool {
        let Some(node) = self
            .nodes
            .iter_mut()
            .find(|n| n.session == child && n.parent.is_some() && !n.finished)
        else {
            return false;
        };
        node.finished = true;
        let task = node.task;
        self.counts.running = self.counts.running.saturating_sub(1);
        let Some(failure) = failure else {
            // Success: the task's failures are forgiven.
            self.failures.retain(|f| f.task != task);
            return true;
        };
        self.counts.failed = self.counts.failed.saturating_add(1);
        match self.failures.iter_mut().find(|f| f.task == task) {
            Some(f) if f.failure == failure => f.times = f.times.saturating_add(1),
            Some(f) => {
                f.failure = failure;
                f.times = 1;
            }
            None => {
                if self.failures.len() >= TREE_FAILURES_KEPT {
                    self.failures.remove(0);
                }
                self.failures.push(Failed {
                    task,
                    failure,
                    times: 1,
                });
            }
        }
        true
    }
}

/// A session id's (or a run id's) key in a tree record.
fn key(id: &str) -> u64 {
    xxhash_rust::xxh3::xxh3_64(id.as_bytes())
}

/// A sub-agent's task: its agent and the signature of its first call.
pub fn task(agent: Option<&str>, first_call: Signature) -> u64 {
    let mut bytes = first_call.as_u128().to_le_bytes().to_vec();
    bytes.extend_from_slice(agent.unwrap_or("").as_bytes());
    xxhash_rust::xxh3::xxh3_64(&bytes)
}

/// A sub-agent's link to its tree.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Link {
    /// The tree's root session.
    pub root: Box<str>,
    /// What the tree said of the sub-agent's spawn.
    pub spawn: Spawn,
    /// Whether the spawn's warning was given (to the first call).
    warned: bool,
    /// Whether the root's record was told that the sub-agent failed.
    failed: bool,
}

/// A session's place in a tree of agents, kept in its [`SessionState`].
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct TreePlace {
    /// A sub-agent's link, from its first call.
    link: Option<Box<Link>>,
    /// A root's record of its tree, from its first child's spawn.
    record: Option<Box<Tree>>,
}

impl TreePlace {
    /// No place in any tree.
    pub const EMPTY: Self = Self {
        link: None,
        record: None,
    };

    /// A sub-agent's link to its tree.
    pub fn link(&self) -> Option<&Link> {
        self.link.as_deref()
    }

    /// A root's record of its tree.
    pub fn record(&self) -> Option<&Tree> {
        self.record.as_deref()
    }

    /// The root of the tree a session whose id is `own` is in: its link's, or itself.
    pub fn root_or<'a>(&'a self, own: &'a str) -> &'a str {
        self.link.as_ref().map_or(own, |l| &l.root)
    }

    /// Approximate heap bytes held.
    pub(crate) fn heap_bytes(&self) -> usize {
        self.link
            .as_ref()
            .map_or(0, |l| std::mem::size_of::<Link>() + l.root.len())
            + self.record.as_ref().map_or(0, |t| {
                std::mem::size_of::<Tree>()
                    + t.nodes.len() * std::mem::size_of::<Node>()
                    + t.failures.len() * std::mem::size_of::<Failed>()
            })
    }
}

/// What the tree says of a sub-agent's call.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum TreeCall {
    /// Nothing.
    Quiet,
    /// The first call of a sub-agent spawned at a limit.
    Warn(TreeLimit, u32),
    /// A call of a sub-agent spawned past a limit.
    Block(TreeLimit, u32),
}

impl SessionState {
    /// On the root's state: judges the spawn of the sub-agent of `child` (a scope naming
    /// its parent) whose task is `task`, and records it when it is not blocked. A child
    /// already recorded is [`Spawn::Allowed`] and changes nothing.
    pub fn spawn_child(
        &mut self,
        cfg: &AgentTree,
        child: &Scope<'_>,
        task: u64,
        now: Millis,
    ) -> Spawn {
        let parent = key(child.parent_session().unwrap_or(""));
        let parent_run = key(child.parent_run().unwrap_or(""));
        self.with_tree(now, |place, changed| {
            let record = place.record.get_or_insert_with(Box::default);
            let before = record.counts;
            let spawn = record.spawn(cfg, key(child.session()), parent, parent_run, task);
            *changed = record.counts != before;
            spawn
        })
    }

    /// On the sub-agent's state: keeps its link to the tree rooted at `root`, where its
    /// spawn was judged `spawn`. A session already linked keeps its link.
    pub fn link_to(&mut self, root: &str, spawn: Spawn, now: Millis) {
        self.with_tree(now, |place, changed| {
            if place.link.is_none() {
                place.link = Some(Box::new(Link {
                    root: root.into(),
                    spawn,
                    warned: false,
                    failed: false,
                }));
                *changed = true;
            }
        });
    }

    /// On the sub-agent's state: what its link says of a call now (a spawn at a limit
    /// warns the first call; one past a limit blocks every call).
    pub(crate) fn tree_call(&mut self, now: Millis) -> TreeCall {
        match self.tree().link().map(|l| (l.spawn, l.warned)) {
            Some((Spawn::Block(limit, n), _)) => TreeCall::Block(limit, n),
            Some((Spawn::Warn(limit, n), false)) => self.with_tree(now, |place, changed| {
                if let Some(link) = place.link.as_mut() {
                    link.warned = true;
                    *changed = true;
                }
                TreeCall::Warn(limit, n)
            }),
            _ => TreeCall::Quiet,
        }
    }

    /// On the sub-agent's state, when one of its calls was blocked: the root it must tell
    /// that it failed, the first time only (a sub-agent whose spawn was blocked was never
    /// recorded, so has nothing to tell).
    pub fn take_failure(&mut self, now: Millis) -> Option<Box<str>> {
        let link = self.tree().link()?;
        if link.failed || matches!(link.spawn, Spawn::Block(..)) {
            return None;
        }
        let root = link.root.clone();
        self.with_tree(now, |place, changed| {
            if let Some(link) = place.link.as_mut() {
                link.failed = true;
                *changed = true;
            }
        });
        Some(root)
    }

    /// On the root's state: the sub-agent of session `child` ended, failed the way
    /// `failure` says (the print of the call blocked) or not.
    pub fn child_ended(&mut self, child: &str, failure: Option<Signature>, now: Millis) {
        if self.tree().record().is_none() {
            return;
        }
        self.with_tree(now, |place, changed| {
            if let Some(record) = place.record.as_mut() {
                *changed = record.finish(key(child), failure.map(|s| s.as_u128()));
            }
        });
    }
}

/// A host's sessions' states, reached one at a time: what the agent tree's steps need.
/// [`Guard`](crate::Guard) holds them in memory; a store or the hooks' database reads and
/// writes each in turn.
pub trait SessionStates {
    /// What reaching a state may fail with.
    type Error;
    /// `f` of the state of `session` (`None` when it has none).
    fn read_state<R>(
        &mut self,
        session: &str,
        f: impl FnOnce(Option<&SessionState>) -> R,
    ) -> Result<R, Self::Error>;
    /// Applies `f` to the state of `session` (a fresh one when it has none) and keeps it.
    fn update_state<R>(
        &mut self,
        session: &str,
        f: impl FnOnce(&mut SessionState) -> R,
    ) -> Result<R, Self::Error>;
}

/// What linking a sub-agent's session into its tree takes: the root whose record judges
/// the spawn, and the sub-agent's task. `None` for a session naming no parent, or one
/// already linked (`child` is its state, `parent` its parent's). `signature` gives the
/// print of the sub-agent's first call, computed only when it is needed.
pub fn plan_link(
    scope: &Scope<'_>,
    signature: impl FnOnce() -> Signature,
    child: Option<&SessionState>,
    parent: Option<&SessionState>,
) -> Option<(Box<str>, u64)> {
    let parent_id = scope.parent_session()?;
    if child.is_some_and(is_linked) {
        return None;
    }
    let root = parent.map_or(parent_id, |p| p.tree().root_or(parent_id));
    Some((root.into(), task(scope.agent(), signature())))
}

/// Before the call of `scope` whose print is `signature` is judged: a sub-agent's session
/// (one naming a parent) is linked into its tree at its first call, the root's record
/// judging the spawn ([`plan_link`], [`SessionState::spawn_child`],
/// [`SessionState::link_to`]). Nothing happens for other sessions or linked ones.
pub fn link_child<S: SessionStates>(
    states: &mut S,
    cfg: &AgentTree,
    scope: &Scope<'_>,
    signature: impl FnOnce() -> Signature,
    now: Millis,
) -> Result<(), S::Error> {
    let Some(parent) = scope.parent_session() else {
        return Ok(());
    };
    if states.read_state(scope.session(), |c| c.is_some_and(is_linked))? {
        return Ok(());
    }
    let plan = states.read_state(parent, |p| plan_link(scope, signature, None, p))?;
    let Some((root, task)) = plan else {
        return Ok(());
    };
    let spawn = states.update_state(&root, |s| s.spawn_child(cfg, scope, task, now))?;
    states.update_state(scope.session(), |s| s.link_to(&root, spawn, now))
}

/// Whether a session's state links it into a tree.
pub fn is_linked(state: &SessionState) -> bool {
    state.tree().link().is_some()
}

/// After a call of `scope` was blocked: a sub-agent failed, and its root's record is told
/// once, with the print of the call blocked.
pub fn child_blocked<S: SessionStates>(
    states: &mut S,
    scope: &Scope<'_>,
    signature: Signature,
    now: Millis,
) -> Result<(), S::Error> {
    if !states.read_state(scope.session(), |s| s.is_some_and(is_linked))? {
        return Ok(());
    }
    match states.update_state(scope.session(), |s| s.take_failure(now))? {
        Some(root) => states.update_state(&root, |s| {
            s.child_ended(scope.session(), Some(signature), now)
        }),
        None => Ok(()),
    }
}

/// A run of `session` ended: a sub-agent's tells its root that it finished.
pub fn run_ended<S: SessionStates>(
    states: &mut S,
    session: &str,
    now: Millis,
) -> Result<(), S::Error> {
    let root = states.read_state(session, |s| {
        s.and_then(|s| s.tree().link()).map(|l| l.root.clone())
    })?;
    match root {
        Some(root) => states.update_state(&root, |s| s.child_ended(session, None, now)),
        None => Ok(()),
    }
}

/// A limit where 0 means "not counted".
fn off_at_zero(limit: u32) -> u32 {
    if limit == 0 {
        u32::MAX
    } else {
        limit
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const ROOT: u64 = 1;
    const RUN: u64 = 100;

    fn cfg() -> AgentTree {
        AgentTree {
            max_children: 3,
            max_depth: 2,
            max_concurrent: 2,
            respawn: 2,
        }
    }

    /// Children `c` then `c + 1` of the root's run: the first warned at `count`, the
    /// second blocked past it.
    fn warns_then_blocks(t: &mut Tree, cfg: &AgentTree, c: u64, limit: TreeLimit, count: u32) {
        assert_eq!(t.spawn(cfg, c, ROOT, RUN, c), Spawn::Warn(limit, count));
        assert_eq!(
            t.spawn(cfg, c + 1, ROOT, RUN, c + 1),
            Spawn::Block(limit, count + 1)
        );
    }

    #[test]
    fn children_warn_at_the_limit_and_block_past_it() {
        let cfg = AgentTree {
            max_concurrent: 10,
            ..cfg()
        };
        let mut t = Tree::default();
        assert_eq!(t.spawn(&cfg, 10, ROOT, RUN, 1), Spawn::Allowed);
        assert_eq!(t.spawn(&cfg, 11, ROOT, RUN, 2), Spawn::Allowed);
        warns_then_blocks(&mut t, &cfg, 12, TreeLimit::Children, 3);
        // Another run of the same parent has its own count; a known child is not counted.
        assert_eq!(t.spawn(&cfg, 14, ROOT, RUN + 1, 4), Spawn::Allowed);
        assert_eq!(t.spawn(&cfg, 10, ROOT, RUN, 1), Spawn::Allowed);
        let c = t.counts();
        assert_eq!((c.children, c.running, c.warned, c.blocked), (4, 4, 1, 1));
    }

    #[test]
    fn depth_is_counted_from_the_root() {
        let mut t = Tree::default();
        assert_eq!(t.spawn(&cfg(), 10, ROOT, RUN, 1), Spawn::Allowed);
        assert_eq!(
            t.spawn(&cfg(), 20, 10, RUN, 1),
            Spawn::Warn(TreeLimit::Depth, 2)
        );
        assert_eq!(
            t.spawn(&cfg(), 30, 20, RUN, 1),
            Spawn::Block(TreeLimit::Depth, 3)
        );
        assert_eq!(t.counts().depth, 2);
    }

    #[test]
    fn concurrent_children_free_their_place_when_they_finish() {
        let cfg = AgentTree {
            max_children: 10,
            ..cfg()
        };
        let mut t = Tree::default();
        assert_eq!(t.spawn(&cfg, 10, ROOT, RUN, 1), Spawn::Allowed);
        warns_then_blocks(&mut t, &cfg, 11, TreeLimit::Concurrent, 2);
        t.finish(10, None);
        t.finish(10, None);
        assert_eq!(t.counts().running, 1);
        assert_eq!(
            t.spawn(&cfg, 12, ROOT, RUN, 3),
            Spawn::Warn(TreeLimit::Concurrent, 2)
        );
    }

    #[test]
    fn a_task_failing_the_same_way_is_not_spawned_again() {
        let cfg = AgentTree {
            max_children: 10,
            max_concurrent: 10,
            ..cfg()
        };
        let mut t = Tree::default();
        assert_eq!(t.spawn(&cfg, 10, ROOT, RUN, 7), Spawn::Allowed);
        t.finish(10, Some(0xbad));
        assert_eq!(
            t.spawn(&cfg, 11, ROOT, RUN, 7),
            Spawn::Warn(TreeLimit::Respawn, 2)
        );
        t.finish(11, Some(0xbad));
        assert_eq!(
            t.spawn(&cfg, 12, ROOT, RUN, 7),
            Spawn::Block(TreeLimit::Respawn, 3)
        );
        // Another task is not concerned; another failure starts the count again.
        assert_eq!(t.spawn(&cfg, 13, ROOT, RUN, 8), Spawn::Allowed);
        t.finish(13, Some(1));
        t.finish(13, Some(1));
        assert_eq!(t.counts().failed, 3);
    }

    #[test]
    fn success_forgives_a_task_and_respawn_zero_turns_the_check_off() {
        let mut t = Tree::default();
        let cfg = AgentTree {
            max_children: 10,
            max_concurrent: 10,
            ..cfg()
        };
        t.spawn(&cfg, 10, ROOT, RUN, 7);
        t.finish(10, Some(5));
        t.spawn(&cfg, 11, ROOT, RUN, 7);
        t.finish(11, None);
        assert_eq!(t.spawn(&cfg, 12, ROOT, RUN, 7), Spawn::Allowed);
        t.finish(12, Some(5));
        t.spawn(&cfg, 13, ROOT, RUN, 7);
        t.finish(13, Some(5));
        let off = AgentTree { respawn: 0, ..cfg };
        assert_eq!(t.spawn(&off, 14, ROOT, RUN, 7), Spawn::Allowed);
    }

    #[test]
    fn the_record_stays_bounded() {
        let cfg = AgentTree {
            max_children: u32::MAX,
            max_concurrent: u32::MAX,
            ..cfg()
        };
        let mut t = Tree::default();
        for i in 0..(TREE_NODES_KEPT as u64 * 2) {
            t.spawn(&cfg, 1000 + i, ROOT, RUN + i, i);
            t.finish(1000 + i, Some(u128::from(i)));
        }
        assert!(t.nodes.len() <= TREE_NODES_KEPT);
        assert!(t.failures.len() <= TREE_FAILURES_KEPT);
        assert_eq!(t.counts().children, TREE_NODES_KEPT as u32 * 2);
    }

    #[test]
    fn round_trips_through_postcard() {
        let mut t = Tree::default();
        t.spawn(&cfg(), 10, ROOT, RUN, 1);
        t.finish(10, Some(9));
        let bytes = postcard::to_allocvec(&t).unwrap();
        assert_eq!(postcard::from_bytes::<Tree>(&bytes).unwrap(), t);
    }
}
