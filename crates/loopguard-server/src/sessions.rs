//! Reading and ending sessions and runs:
//! `GET /v1/sessions/{session}`, `DELETE /v1/sessions/{session}`, `POST /v1/runs/end`.

use std::collections::BTreeMap;
use std::sync::Arc;

use axum::extract::rejection::PathRejection;
use axum::extract::{Path, State};
use axum::http::StatusCode;
use loopguard::Scope;
use loopguard_store::{bounded, Deadline, RunKey, RunSnapshot, Store};
use serde::{Deserialize, Serialize};

use crate::app::App;
use crate::error::ApiError;
use crate::extract::AppJson;

/// The state of one session, as `GET /v1/sessions/{session}` shows it.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct SessionView {
    /// The session id.
    pub session: String,
    /// What the session spent (every run, every agent), when anything was counted.
    pub spend: Option<SpendView>,
    /// Its run storm (`run_storm`), when its last runs ended the same way.
    pub storm: Option<StormView>,
    /// Its place in a tree of agents (`agent_tree`): a sub-agent's root and spawn, a
    /// root's counts rolled up from its sub-agents.
    pub tree: Option<TreeView>,
    /// Its live runs, most recently active first.
    pub runs: Vec<RunView>,
}

/// A session's run storm.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct StormView {
    /// Its runs in a row that ended the same way without progress.
    pub runs: u32,
    /// Whether `run_storm` stopped the session.
    pub stopped: bool,
    /// When the stop ends (clock milliseconds); `null`: when the session is reset.
    pub until_ms: Option<u64>,
}

impl StormView {
    /// The view of a session's storm; `None` when there is none.
    pub fn of(state: &loopguard::SessionState) -> Option<Self> {
        let stop = state.storm_stop();
        (state.storm_row() > 0 || stop.is_some()).then(|| Self {
            runs: state.storm_row(),
            stopped: stop.is_some(),
            until_ms: stop.and_then(|s| s.until).map(|m| m.get()),
        })
    }
}

/// A session's place in a tree of agents.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct TreeView {
    /// For a sub-agent: the root session of its tree.
    pub root: Option<String>,
    /// For a sub-agent: what its spawn was judged (`allowed`, `warn` or `block`) and the
    /// limit it met (`children`, `depth`, `concurrent`, `respawn`), with the count.
    pub spawn: Option<SpawnView>,
    /// For a root: what its sub-agents add up to.
    pub counts: Option<loopguard::tree::TreeCounts>,
}

/// What the tree said of a sub-agent's spawn.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct SpawnView {
    /// `allowed`, `warn` or `block`.
    pub verdict: &'static str,
    /// The limit met, when one was.
    pub limit: Option<loopguard::tree::TreeLimit>,
    /// The count that met it.
    pub count: Option<u32>,
}

impl TreeView {
    /// The view of a session's place in its tree; `None` when it has none.
    pub fn of(state: &loopguard::SessionState) -> Option<Self> {
        use loopguard::tree::Spawn;
        let place = state.tree();
        let spawn = place.link().map(|l| match l.spawn {
            Spawn::Allowed => ("allowed", None, None),
            Spawn::Warn(limit, n) => ("warn", Some(limit), Some(n)),
            Spawn::Block(limit, n) => ("block", Some(limit), Some(n)),
        });
        (place.link().is_some() || place.record().is_some()).then(|| Self {
            root: place.link().map(|l| l.root.to_string()),
            spawn: spawn.map(|(verdict, limit, count)| SpawnView {
                verdict,
                limit,
                count,
            }),
            counts: place.record().map(|t| t.counts()),
        })
    }
}

/// What a session or a run spent: model responses reported in usage events, and tool calls
/// (counted while a budget is set).
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct SpendView {
    /// Every token: input, output and cache.
    pub tokens: u64,
    /// Uncached input tokens.
    pub input_tokens: u64,
    /// Output tokens.
    pub output_tokens: u64,
    /// Prompt-cache reads.
    pub cache_read_tokens: u64,
    /// Prompt-cache writes.
    pub cache_write_tokens: u64,
    /// US dollars, for the responses whose cost is known.
    pub cost_usd: f64,
    /// Tokens of the responses whose cost is unknown (no host figure, no price).
    pub unpriced_tokens: u64,
    /// Model responses reported.
    pub responses: u64,
    /// Tool calls counted.
    pub calls: u64,
}

impl SpendView {
    /// The view of `spend`; `None` when nothing was spent.
    pub fn of(spend: &loopguard::Spend) -> Option<Self> {
        (!spend.is_empty()).then(|| Self {
            tokens: spend.tokens(),
            input_tokens: spend.input_tokens,
            output_tokens: spend.output_tokens,
            cache_read_tokens: spend.cache_read_tokens,
            cache_write_tokens: spend.cache_write_tokens,
            cost_usd: spend.cost.usd(),
            unpriced_tokens: spend.unpriced_tokens,
            responses: spend.responses,
            calls: spend.calls,
        })
    }
}

impl Eq for SpendView {}

/// One run of a [`SessionView`].
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct RunView {
    /// The run id; `null` for calls outside any run.
    pub run: Option<String>,
    /// When the run last saw an event (Unix milliseconds).
    pub last_active_ms: u64,
    /// The rolling history.
    pub history: HistoryView,
    /// The post-compaction guard.
    pub guard: GuardView,
    /// Why the run stopped, when it did: every later call of it is blocked.
    pub stopped: Option<StopView>,
    /// What the run spent, when anything was counted.
    pub spend: Option<SpendView>,
    /// The last calls, newest first, with what the guard did (at most [`RECENT_CALLS`]).
    pub recent: Vec<RecentCall>,
}

/// Calls a [`RunView`] lists in `recent`.
pub const RECENT_CALLS: usize = 10;

/// One of the last calls of a run.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct RecentCall {
    /// The tool.
    pub tool: String,
    /// Whether the guard blocked it (otherwise it was allowed, perhaps with a warning).
    pub blocked: bool,
    /// `pending` (no outcome yet), `result`, `error` (failures are told apart when the
    /// `loopguard` block is on), or `none` (a blocked call never ran).
    pub outcome: &'static str,
    /// Calls with the same tool and arguments in the history, this one included.
    pub repeats: u32,
}

/// Summary of a run's rolling history.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct HistoryView {
    /// Records kept.
    pub records: usize,
    /// Calls waiting for their outcome.
    pub pending: usize,
    /// Calls with an outcome.
    pub completed: usize,
    /// Calls the guard blocked.
    pub vetoes: usize,
    /// Records per tool.
    pub tools: BTreeMap<String, usize>,
}

/// The post-compaction guard of a run.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct GuardView {
    /// Whether it is watching outcomes now.
    pub armed: bool,
    /// Outcomes it still watches.
    pub remaining: u32,
}

/// Why a run stopped.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct StopView {
    /// `global_circuit_breaker`, `compaction_loop_persisted`, `escalation` or a budget's
    /// detector.
    pub detector: String,
    /// The count that stopped it.
    pub count: u32,
    /// The tool whose loop stopped it.
    pub tool: String,
}

impl SessionView {
    /// The view of `session` from its stored runs (most recently active first), as
    /// `GET /v1/sessions/{session}` shows it; also for tools that read a store directly.
    /// A blank record without a run ([`RunState::is_blank`](loopguard::RunState::is_blank):
    /// the one an agent tree's steps went through) is left out.
    pub fn new(session: String, runs: &[RunSnapshot]) -> Self {
        Self {
            runs: runs
                .iter()
                .filter(|r| r.run.is_some() || !r.state.is_blank())
                .map(RunView::of)
                .collect(),
            spend: None,
            storm: None,
            tree: None,
            session,
        }
    }

    /// The same view with the session's own state (its spend).
    pub fn with_session_state(mut self, state: Option<&loopguard::SessionState>) -> Self {
        self.spend = state.and_then(|s| SpendView::of(s.spend()));
        self.storm = state.and_then(StormView::of);
        self.tree = state.and_then(TreeView::of);
        self
    }
}

impl RunView {
    /// The view of one stored run.
    pub fn of(snapshot: &RunSnapshot) -> Self {
        let state = &snapshot.state;
        let history = state.history();
        let mut view = HistoryView {
            records: history.len(),
            pending: 0,
            completed: 0,
            vetoes: 0,
            tools: BTreeMap::new(),
        };
        for record in history.records() {
            if record.is_pending() {
                view.pending += 1;
            } else if record.is_veto() {
                view.vetoes += 1;
            } else {
                view.completed += 1;
            }
            let tool = history.names().get(record.tool());
            *view.tools.entry(tool.to_owned()).or_default() += 1;
        }
        let recent = history
            .records()
            .iter()
            .rev()
            .take(RECENT_CALLS)
            .map(|record| RecentCall {
                tool: history.names().get(record.tool()).to_owned(),
                blocked: record.is_veto(),
                outcome: if record.is_veto() {
                    "none"
                } else if record.is_pending() {
                    "pending"
                } else if record.failed() {
                    "error"
                } else {
                    "result"
                },
                repeats: history.count_of(record.signature()),
            })
            .collect();
        let remaining = state.compaction_guard().remaining();
        Self {
            run: snapshot.run.clone(),
            last_active_ms: state.last_active().get(),
            history: view,
            guard: GuardView {
                armed: remaining > 0,
                remaining,
            },
            stopped: state.stop().map(|s| StopView {
                detector: s.detector.as_str().to_owned(),
                count: s.count,
                tool: s.tool.clone(),
            }),
            spend: SpendView::of(state.spend()),
            recent,
        }
    }
}

/// A session id from the path: trimmed, blank meaning `default`, length-checked.
fn session_id<S: Store>(
    app: &App<S>,
    path: Result<Path<String>, PathRejection>,
) -> Result<String, ApiError> {
    let Path(raw) = path.map_err(|e| ApiError::bad_request(format!("bad session id: {e}")))?;
    let id = Scope::new(&raw).session().to_owned();
    check_len("session", &id, app.limits().max_id_bytes)?;
    Ok(id)
}

fn check_len(name: &str, value: &str, max: usize) -> Result<(), ApiError> {
    if value.len() > max {
        return Err(ApiError::bad_request(format!(
            "{name} is {} bytes long, more than the limit of {max}",
            value.len()
        )));
    }
    Ok(())
}

/// The store deadline of a request that starts now.
fn deadline<S: Store>(app: &App<S>) -> Option<Deadline> {
    app.options().store_deadline.map(Deadline::after)
}

pub(crate) async fn get_session<S: Store>(
    State(app): State<Arc<App<S>>>,
    path: Result<Path<String>, PathRejection>,
) -> Result<AppJson<SessionView>, ApiError> {
    let session = session_id(&app, path)?;
    let runs = bounded(deadline(&app), app.store().session(&session)).await?;
    if runs.is_empty() {
        return Err(ApiError::new(
            StatusCode::NOT_FOUND,
            format!("no live session {session:?}"),
        ));
    }
    let state = bounded(deadline(&app), app.store().session_state(&session)).await?;
    Ok(AppJson(
        SessionView::new(session, &runs).with_session_state(state.as_ref()),
    ))
}

/// Answer of `DELETE /v1/sessions/{session}`.
#[derive(Serialize)]
pub(crate) struct SessionEnded {
    session: String,
    ended_runs: usize,
}

pub(crate) async fn end_session<S: Store>(
    State(app): State<Arc<App<S>>>,
    path: Result<Path<String>, PathRejection>,
) -> Result<AppJson<SessionEnded>, ApiError> {
    let session = session_id(&app, path)?;
    let ended_runs = bounded(deadline(&app), app.store().remove_session(&session)).await?;
    Ok(AppJson(SessionEnded {
        session,
        ended_runs,
    }))
}

/// Body of `POST /v1/runs/end`.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct EndRun {
    session: Option<String>,
    run: Option<String>,
}

/// Answer of `POST /v1/runs/end`.
#[derive(Serialize)]
pub(crate) struct RunEnded {
    session: String,
    run: Option<String>,
    ended: bool,
}

pub(crate) async fn end_run<S: Store>(
    State(app): State<Arc<App<S>>>,
    AppJson(EndRun { session, run }): AppJson<EndRun>,
) -> Result<AppJson<RunEnded>, ApiError> {
    let session = session.unwrap_or_default();
    let scope = Scope::new(&session).with_run(run.as_deref());
    let max = app.limits().max_id_bytes;
    check_len("session", scope.session(), max)?;
    check_len("run", scope.run().unwrap_or(""), max)?;
    // A sub-agent's run that ends tells its tree's root that the sub-agent finished.
    let state = bounded(deadline(&app), app.store().session_state(scope.session())).await?;
    if let Some(root) = state
        .as_ref()
        .and_then(|s| s.tree().link())
        .map(|l| l.root.clone())
    {
        let child = scope.session();
        let finished = app
            .store()
            .update_session(&root, |s, now| s.child_ended(child, None, now));
        bounded(deadline(&app), finished).await?;
    }
    let ended = bounded(deadline(&app), app.store().remove_run(RunKey::of(&scope))).await?;
    Ok(AppJson(RunEnded {
        session: scope.session().to_owned(),
        run: scope.run().map(str::to_owned),
        ended,
    }))
}
