//! Where a call belongs: a session, an optional run, the agent whose config applies, and
//! the run that spawned the session when it is a sub-agent's.

use crate::text::non_blank;

/// The session used when none is given.
pub const DEFAULT_SESSION: &str = "default";

/// The (session, run) a call belongs to, and the agent whose config applies. Ids are
/// trimmed; a blank session is [`DEFAULT_SESSION`], a blank run or agent is absent.
///
/// A sub-agent's session names its parent: the session (and run) that spawned it; a
/// parent run without a parent session is dropped.
///
/// Ids only scope state: they are never trusted for anything else.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Scope<'a> {
    session: &'a str,
    run: Option<&'a str>,
    agent: Option<&'a str>,
    parent_session: Option<&'a str>,
    parent_run: Option<&'a str>,
}

impl<'a> Scope<'a> {
    /// A scope in `session`, with no run and no agent.
    pub fn new(session: &'a str) -> Self {
        Self {
            session: non_blank(session).unwrap_or(DEFAULT_SESSION),
            run: None,
            agent: None,
            parent_session: None,
            parent_run: None,
        }
    }

    /// A scope from ids already normalized (those of another scope), taken as they are.
    pub(crate) fn from_normalized(
        session: &'a str,
        run: Option<&'a str>,
        agent: Option<&'a str>,
    ) -> Self {
        Self {
            session,
            run,
            agent,
            parent_session: None,
            parent_run: None,
        }
    }

    /// The same scope inside run `run` (records without a run form their own scope).
    pub fn with_run(mut self, run: Option<&'a str>) -> Self {
        self.run = run.and_then(non_blank);
        self
    }

    /// The same scope with the config of `agent`.
    pub fn with_agent(mut self, agent: Option<&'a str>) -> Self {
        self.agent = agent.and_then(non_blank);
        self
    }

    /// The same scope spawned by run `run` of session `session` (a sub-agent's scope).
    pub fn with_parent(mut self, session: Option<&'a str>, run: Option<&'a str>) -> Self {
        self.parent_session = session.and_then(non_blank);
        self.parent_run = self.parent_session.and(run.and_then(non_blank));
        self
    }

    /// The session id.
    pub fn session(&self) -> &'a str {
        self.session
    }

    /// The run id, if any.
    pub fn run(&self) -> Option<&'a str> {
        self.run
    }

    /// The agent id, if any.
    pub fn agent(&self) -> Option<&'a str> {
        self.agent
    }

    /// The session that spawned this one, if any.
    pub fn parent_session(&self) -> Option<&'a str> {
        self.parent_session
    }

    /// The run of [`Scope::parent_session`] that spawned this session, if named.
    pub fn parent_run(&self) -> Option<&'a str> {
        self.parent_run
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn normalizes_ids() {
        let s = Scope::new("  ").with_run(Some(" r1 ")).with_agent(Some(""));
        assert_eq!(s.session(), DEFAULT_SESSION);
        assert_eq!(s.run(), Some("r1"));
        assert_eq!(s.agent(), None);
        assert_eq!(Scope::new("s").with_run(Some(" ")).run(), None);
        let child = Scope::new("c").with_parent(Some(" p "), Some(" r "));
        assert_eq!(
            (child.parent_session(), child.parent_run()),
            (Some("p"), Some("r"))
        );
        let orphan = Scope::new("c").with_parent(Some(" "), Some("r"));
        assert_eq!((orphan.parent_session(), orphan.parent_run()), (None, None));
    }
}
