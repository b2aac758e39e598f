//! `agent_tree`: the accounting of a tree of agents (sub-agents spawning sub-agents), kept
//! per **root session**, for the limits on children per parent run, depth from the root,
//! concurrent (unfinished) children, and a failed child task spawned again.
//!
//! This module is the engine's pure tree record; it is not yet reached from
//! [`Guard`](crate::Guard) or the event protocol (see the notes at the end).
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
        Self {
            max_children: 10,
            max_depth: 3,
            max_concurrent: 5,
            respawn: 2,
        }
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
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
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
            (TreeLimit::Concurrent, running + 1, cfg.max_concurrent),
            (
                TreeLimit::Respawn,
                failed.saturating_add(1),
                if cfg.respawn == 0 {
                    u32::MAX
                } else {
                    cfg.respawn
                },
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
    /// end change nothing.
    pub fn finish(&mut self, child: u64, failure: Option<u128>) {
        let Some(node) = self
            .nodes
            .iter_mut()
            .find(|n| n.session == child && n.parent.is_some() && !n.finished)
        else {
            return;
        };
        node.finished = true;
        let task = node.task;
        self.counts.running = self.counts.running.saturating_sub(1);
        let Some(failure) = failure else {
            // Success: the task's failures are forgiven.
            self.failures.retain(|f| f.task != task);
            return;
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
