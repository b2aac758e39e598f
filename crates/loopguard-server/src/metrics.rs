//! Prometheus metrics (text exposition format 0.0.4), kept in atomics: recording costs a
//! few relaxed increments, and all the series are fixed, so the output is bounded whatever
//! clients send.

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::sync::atomic::{AtomicI64, AtomicU64, Ordering};
use std::sync::Mutex;
use std::time::Duration;

use loopguard::{CallIdUse, Detector, Level, Verdict};
use loopguard_events::Answer;
use loopguard_store::StoreStats;

/// Route labels of the latency histogram; anything else is `other`.
pub const ROUTES: &[&str] = &[
    "/v1/events",
    "/v1/sessions/{session}",
    "/v1/runs/end",
    "/v1/admin/reload",
    "/healthz",
    "/readyz",
    "/metrics",
    "/openapi.json",
    "other",
];

/// Upper bounds of the latency buckets, in seconds.
const BUCKETS: &[f64] = &[
    0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5,
    5.0, 10.0,
];

/// Every detector has its series, whatever the config: the list is the engine's own.
const DETECTORS: [Detector; Detector::ALL.len()] = Detector::ALL;

const STATUSES: &[u16] = &[200, 400, 401, 403, 404, 405, 408, 413, 422, 429, 500, 503];

/// Why a connection closed.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[repr(u8)]
pub enum Closed {
    /// The client closed it, or asked to (or the server stopped).
    Done = 1,
    /// It waited longer than the idle timeout for its next request.
    IdleTimeout,
    /// Its request head did not arrive within the header timeout.
    HeaderTimeout,
    /// Closed while idle to make room at the connection limit.
    Evicted,
    /// An error on the connection (a malformed request, a reset).
    Error,
}

impl Closed {
    const ALL: [Self; 5] = [
        Self::Done,
        Self::IdleTimeout,
        Self::HeaderTimeout,
        Self::Evicted,
        Self::Error,
    ];

    pub(crate) fn from_u8(n: u8) -> Option<Self> {
        Self::ALL.into_iter().find(|c| *c as u8 == n)
    }

    fn as_str(self) -> &'static str {
        match self {
            Self::Done => "done",
            Self::IdleTimeout => "idle_timeout",
            Self::HeaderTimeout => "header_timeout",
            Self::Evicted => "evicted",
            Self::Error => "error",
        }
    }
}

#[derive(Default)]
struct Histogram {
    buckets: [AtomicU64; 16],
    overflow: AtomicU64,
    sum_nanos: AtomicU64,
}

impl Histogram {
    fn observe(&self, elapsed: Duration) {
        let secs = elapsed.as_secs_f64();
        match BUCKETS.iter().position(|&b| secs <= b) {
            Some(i) => self.buckets[i].fetch_add(1, Ordering::Relaxed),
            None => self.overflow.fetch_add(1, Ordering::Relaxed),
        };
        let nanos = u64::try_from(elapsed.as_nanos()).unwrap_or(u64::MAX);
        self.sum_nanos.fetch_add(nanos, Ordering::Relaxed);
    }

    fn render(&self, out: &mut String, name: &str, route: &str) {
        let mut cumulative = 0;
        for (bound, count) in BUCKETS.iter().zip(&self.buckets) {
            cumulative += count.load(Ordering::Relaxed);
            let _ = writeln!(
                out,
                "{name}_bucket{{route=\"{route}\",le=\"{bound}\"}} {cumulative}"
            );
        }
        cumulative += self.overflow.load(Ordering::Relaxed);
        let _ = writeln!(
            out,
            "{name}_bucket{{route=\"{route}\",le=\"+Inf\"}} {cumulative}"
        );
        let sum = self.sum_nanos.load(Ordering::Relaxed) as f64 / 1e9;
        let _ = writeln!(out, "{name}_sum{{route=\"{route}\"}} {sum}");
        let _ = writeln!(out, "{name}_count{{route=\"{route}\"}} {cumulative}");
    }
}

/// The `type` labels of `loopguard_events_total`, in the order of `Metrics::events`.
const EVENT_TYPES: [&str; 6] = [
    "call",
    "result",
    "compaction",
    "invalid",
    "usage",
    "message",
];
/// The `type` labels of `loopguard_degraded_answers_total` (every valid event type).
const DEGRADED_TYPES: [&str; 5] = ["call", "result", "compaction", "usage", "message"];

/// Every metric the server exports.
#[derive(Default)]
pub struct Metrics {
    /// Per type in [`EVENT_TYPES`].
    events: [AtomicU64; EVENT_TYPES.len()],
    allowed: AtomicU64,
    /// Per detector, [warning, critical].
    verdicts: [[AtomicU64; 2]; Detector::ALL.len()],
    aborts: AtomicU64,
    /// Calls answered as retries (their verdict counted once, under the first).
    call_retries: AtomicU64,
    /// Calls counted anew under an id the host seems to reuse.
    reused_call_ids: AtomicU64,
    latency: [Histogram; 9],
    /// Per status in [`STATUSES`], then "other".
    responses: [AtomicU64; STATUSES.len() + 1],
    connections_open: AtomicI64,
    /// Per reason in [`Closed::ALL`].
    connections_closed: [AtomicU64; Closed::ALL.len()],
    reloads_ok: AtomicU64,
    reloads_failed: AtomicU64,
    /// Fail-open answers given without the store, per type in [`DEGRADED_TYPES`].
    degraded: [AtomicU64; DEGRADED_TYPES.len()],
    /// What usage events counted, per (agent, model) label pair: bounded, since both
    /// labels come from the config (see [`Metrics::usage`]).
    usage: Mutex<BTreeMap<(String, String), Spent>>,
    /// Usage that used a budget up, per detector.
    budget_stops: [AtomicU64; Detector::ALL.len()],
}

/// Tokens and money counted under one pair of labels.
#[derive(Clone, Copy, Default)]
struct Spent {
    tokens: u64,
    pico: u64,
    unpriced_tokens: u64,
}

/// The `agent` label of a usage event: an agent the config has a block for, `none` for an
/// event without agent, `other` for any other (so a client cannot grow the series).
pub fn agent_label(config: &loopguard::ConfigSet, agent: Option<&str>) -> String {
    match agent {
        None => "none".to_owned(),
        Some(a) if config.agents().any(|(id, _, _)| id == a) => a.to_owned(),
        Some(_) => "other".to_owned(),
    }
}

/// The `model` label: a model of the price table (the built-in rows, or the config's own
/// prices), normalized; `none` without a model, `other` for any other.
pub fn model_label(cfg: &loopguard::EffectiveConfig, model: Option<&str>) -> String {
    use loopguard::budget::prices;
    let Some(model) = model else {
        return "none".to_owned();
    };
    let name = prices::normalize(model);
    let known = prices::builtin(&name).is_some() || cfg.prices().iter().any(|(m, _)| *m == *name);
    if known {
        name.into_owned()
    } else {
        "other".to_owned()
    }
}

/// A label value as the exposition format writes it.
fn escaped(value: &str) -> String {
    value
        .replace('\\', "\\\\")
        .replace('"', "\\\"")
        .replace('\n', "\\n")
}

impl std::fmt::Debug for Metrics {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Metrics")
    }
}

impl Metrics {
    /// Counts an answer: its event type, verdict, abort.
    pub fn answer(&self, answer: &Answer) {
        let kind = match answer {
            Answer::Call {
                verdict, id_use, ..
            } => {
                if id_use.is_retry() {
                    // Its verdict was counted when the call was first answered.
                    self.call_retries.fetch_add(1, Ordering::Relaxed);
                } else {
                    self.verdict(verdict);
                }
                if matches!(id_use, CallIdUse::Reused { .. }) {
                    self.reused_call_ids.fetch_add(1, Ordering::Relaxed);
                }
                0
            }
            Answer::Result { recorded, .. } => {
                if recorded.abort.is_some() {
                    self.aborts.fetch_add(1, Ordering::Relaxed);
                    self.detection(Detector::CompactionLoopPersisted, Level::Critical);
                }
                1
            }
            Answer::Compaction { .. } => 2,
            Answer::Invalid { .. } => 3,
            Answer::Usage { .. } => 4,
            Answer::Message { verdict, .. } => {
                self.verdict(verdict);
                5
            }
        };
        self.events[kind].fetch_add(1, Ordering::Relaxed);
    }

    /// Counts an event answered without the store (fail-open): `kind` is its type.
    pub fn degraded(&self, kind: &str) {
        if let Some(i) = DEGRADED_TYPES.iter().position(|&k| k == kind) {
            self.degraded[i].fetch_add(1, Ordering::Relaxed);
        }
        if let Some(i) = EVENT_TYPES.iter().position(|&k| k == kind) {
            self.events[i].fetch_add(1, Ordering::Relaxed);
        }
    }

    /// Counts what a usage event counted (not a retry: its answer says so) under the
    /// labels `agent_label` and `model_label` give.
    pub fn usage(&self, agent: String, model: String, tokens: u64, counted: &loopguard::Counted) {
        if counted.repeat {
            return;
        }
        if let Some(d) = counted
            .detector()
            .and_then(|d| DETECTORS.iter().position(|&x| x == d))
        {
            self.budget_stops[d].fetch_add(1, Ordering::Relaxed);
        }
        let mut usage = self.usage.lock().unwrap_or_else(|p| p.into_inner());
        let spent = usage.entry((agent, model)).or_default();
        spent.tokens = spent.tokens.saturating_add(tokens);
        match counted.cost {
            Some(cost) => spent.pico = spent.pico.saturating_add(cost.pico()),
            None => spent.unpriced_tokens = spent.unpriced_tokens.saturating_add(tokens),
        }
    }

    /// Counts an event refused before it reached the engine.
    pub fn invalid(&self) {
        self.events[3].fetch_add(1, Ordering::Relaxed);
    }

    /// A verdict with a detection (a warning, a block, or what would have fired in shadow
    /// mode) counts under its detector and level; one without counts as allowed.
    fn verdict(&self, verdict: &Verdict) {
        match verdict.detection() {
            Some(detection) => self.detection(detection.detector, detection.level),
            None => {
                self.allowed.fetch_add(1, Ordering::Relaxed);
            }
        }
    }

    fn detection(&self, detector: Detector, level: Level) {
        if let Some(d) = DETECTORS.iter().position(|&x| x == detector) {
            let l = usize::from(level == Level::Critical);
            self.verdicts[d][l].fetch_add(1, Ordering::Relaxed);
        }
    }

    /// Records a request: its route template, status and time.
    pub fn request(&self, route: &str, status: u16, elapsed: Duration) {
        let r = ROUTES
            .iter()
            .position(|&x| x == route)
            .unwrap_or(ROUTES.len() - 1);
        self.latency[r].observe(elapsed);
        let s = STATUSES
            .iter()
            .position(|&x| x == status)
            .unwrap_or(STATUSES.len());
        self.responses[s].fetch_add(1, Ordering::Relaxed);
    }

    /// Counts a connection accepted.
    pub fn connection_opened(&self) {
        self.connections_open.fetch_add(1, Ordering::Relaxed);
    }

    /// Counts a connection closed, and why.
    pub fn connection_closed(&self, why: Closed) {
        self.connections_open.fetch_sub(1, Ordering::Relaxed);
        let i = Closed::ALL.iter().position(|&c| c == why).unwrap_or(0);
        self.connections_closed[i].fetch_add(1, Ordering::Relaxed);
    }

    /// Connections open now.
    pub fn connections_open(&self) -> i64 {
        self.connections_open.load(Ordering::Relaxed)
    }

    /// Records a config reload.
    pub fn reload(&self, ok: bool) {
        if ok {
            self.reloads_ok.fetch_add(1, Ordering::Relaxed);
        } else {
            self.reloads_failed.fetch_add(1, Ordering::Relaxed);
        }
    }

    /// The exposition text; `store_up` is whether the store takes writes now (its
    /// readiness check).
    pub fn render(&self, store: &StoreStats, store_up: bool) -> String {
        let mut out = String::with_capacity(8192);
        let load = |a: &AtomicU64| a.load(Ordering::Relaxed);

        head(
            &mut out,
            "loopguard_events_total",
            "counter",
            "Events answered, by type (invalid: refused or answered with an error).",
        );
        for (kind, n) in EVENT_TYPES.iter().zip(&self.events) {
            let _ = writeln!(out, "loopguard_events_total{{type=\"{kind}\"}} {}", load(n));
        }

        head(
            &mut out,
            "loopguard_verdicts_total",
            "counter",
            "Verdicts on calls, and aborts, by detector and level (allow: no detector fired).",
        );
        let _ = writeln!(
            out,
            "loopguard_verdicts_total{{detector=\"none\",level=\"allow\"}} {}",
            load(&self.allowed)
        );
        for (detector, levels) in DETECTORS.iter().zip(&self.verdicts) {
            for (level, n) in ["warning", "critical"].iter().zip(levels) {
                let _ = writeln!(
                    out,
                    "loopguard_verdicts_total{{detector=\"{}\",level=\"{level}\"}} {}",
                    detector.as_str(),
                    load(n)
                );
            }
        }

        head(
            &mut out,
            "loopguard_aborts_total",
            "counter",
            "Runs aborted by the post-compaction guard.",
        );
        let _ = writeln!(out, "loopguard_aborts_total {}", load(&self.aborts));

        head(
            &mut out,
            "loopguard_call_retries_total",
            "counter",
            "Calls answered as retries of a call already answered (same call_id, tool and arguments, no result yet): answered again, counted once.",
        );
        let _ = writeln!(
            out,
            "loopguard_call_retries_total {}",
            load(&self.call_retries)
        );
        head(
            &mut out,
            "loopguard_reused_call_ids_total",
            "counter",
            "Calls counted as new although their call_id came with the same tool and arguments and no result more often than a retry would (the host reuses ids).",
        );
        let _ = writeln!(
            out,
            "loopguard_reused_call_ids_total {}",
            load(&self.reused_call_ids)
        );

        head(
            &mut out,
            "loopguard_live_sessions",
            "gauge",
            "Sessions held.",
        );
        let _ = writeln!(out, "loopguard_live_sessions {}", store.sessions);
        // Left out rather than reported as 0 when the store cannot count its runs.
        if let Some(runs) = store.runs {
            head(&mut out, "loopguard_live_runs", "gauge", "Runs held.");
            let _ = writeln!(out, "loopguard_live_runs {runs}");
        }
        head(
            &mut out,
            "loopguard_expired_runs_total",
            "counter",
            "Runs removed because they were idle.",
        );
        let _ = writeln!(out, "loopguard_expired_runs_total {}", store.expired_runs);

        head(
            &mut out,
            "loopguard_store_commits_total",
            "counter",
            "Transactions committed by the store.",
        );
        let _ = writeln!(out, "loopguard_store_commits_total {}", store.commits);
        head(
            &mut out,
            "loopguard_store_writes_total",
            "counter",
            "Run states written by the store.",
        );
        let _ = writeln!(out, "loopguard_store_writes_total {}", store.writes);
        head(
            &mut out,
            "loopguard_store_deltas_total",
            "counter",
            "Run states written as a delta to the change log instead of whole (SQLite).",
        );
        let _ = writeln!(out, "loopguard_store_deltas_total {}", store.deltas);
        head(
            &mut out,
            "loopguard_store_conflicts_total",
            "counter",
            "Updates applied again after another writer changed the run.",
        );
        let _ = writeln!(out, "loopguard_store_conflicts_total {}", store.conflicts);
        head(
            &mut out,
            "loopguard_store_failures_total",
            "counter",
            "Store transactions that failed.",
        );
        let _ = writeln!(out, "loopguard_store_failures_total {}", store.failures);
        head(
            &mut out,
            "loopguard_store_commit_seconds_total",
            "counter",
            "Time spent committing.",
        );
        let _ = writeln!(
            out,
            "loopguard_store_commit_seconds_total {}",
            store.commit_micros as f64 / 1e6
        );

        head(
            &mut out,
            "loopguard_store_up",
            "gauge",
            "1 when the store takes writes (its readiness check passes), 0 when it cannot be used.",
        );
        let _ = writeln!(out, "loopguard_store_up {}", u8::from(store_up));
        head(
            &mut out,
            "loopguard_degraded_answers_total",
            "counter",
            "Events answered without the store because it failed (fail-open), by type.",
        );
        for (kind, n) in DEGRADED_TYPES.iter().zip(&self.degraded) {
            let _ = writeln!(
                out,
                "loopguard_degraded_answers_total{{type=\"{kind}\"}} {}",
                load(n)
            );
        }

        head(
            &mut out,
            "loopguard_http_responses_total",
            "counter",
            "HTTP responses by status code.",
        );
        for (code, n) in STATUSES.iter().zip(&self.responses) {
            let _ = writeln!(
                out,
                "loopguard_http_responses_total{{code=\"{code}\"}} {}",
                load(n)
            );
        }
        let _ = writeln!(
            out,
            "loopguard_http_responses_total{{code=\"other\"}} {}",
            load(&self.responses[STATUSES.len()])
        );

        head(
            &mut out,
            "loopguard_http_connections_open",
            "gauge",
            "HTTP connections open.",
        );
        let _ = writeln!(
            out,
            "loopguard_http_connections_open {}",
            self.connections_open.load(Ordering::Relaxed)
        );
        head(
            &mut out,
            "loopguard_http_connections_closed_total",
            "counter",
            "HTTP connections closed, by reason (idle_timeout, header_timeout, evicted: closed by the server).",
        );
        for (why, n) in Closed::ALL.iter().zip(&self.connections_closed) {
            let _ = writeln!(
                out,
                "loopguard_http_connections_closed_total{{reason=\"{}\"}} {}",
                why.as_str(),
                load(n)
            );
        }

        head(
            &mut out,
            "loopguard_http_request_duration_seconds",
            "histogram",
            "Time from request to response, by route.",
        );
        for (route, h) in ROUTES.iter().zip(&self.latency) {
            h.render(&mut out, "loopguard_http_request_duration_seconds", route);
        }

        head(
            &mut out,
            "loopguard_usage_tokens_total",
            "counter",
            "Tokens of model responses reported in usage events, by agent (the config's agents; none, other) and model (the price table's; none, other).",
        );
        let usage: Vec<((String, String), Spent)> = self
            .usage
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .iter()
            .map(|(k, v)| (k.clone(), *v))
            .collect();
        for ((agent, model), spent) in &usage {
            let _ = writeln!(
                out,
                "loopguard_usage_tokens_total{{agent=\"{}\",model=\"{}\"}} {}",
                escaped(agent),
                escaped(model),
                spent.tokens
            );
        }
        head(
            &mut out,
            "loopguard_usage_cost_usd_total",
            "counter",
            "US dollars of the model responses whose cost is known (the host's figure, or the price table's), by agent and model.",
        );
        for ((agent, model), spent) in &usage {
            let _ = writeln!(
                out,
                "loopguard_usage_cost_usd_total{{agent=\"{}\",model=\"{}\"}} {}",
                escaped(agent),
                escaped(model),
                spent.pico as f64 / 1e12
            );
        }
        head(
            &mut out,
            "loopguard_usage_unpriced_tokens_total",
            "counter",
            "Tokens of model responses whose cost is unknown (no host figure, no price): cost budgets do not count them.",
        );
        for ((agent, model), spent) in &usage {
            let _ = writeln!(
                out,
                "loopguard_usage_unpriced_tokens_total{{agent=\"{}\",model=\"{}\"}} {}",
                escaped(agent),
                escaped(model),
                spent.unpriced_tokens
            );
        }
        head(
            &mut out,
            "loopguard_budget_stops_total",
            "counter",
            "Usage events that used a budget up, by the budget's detector (the blocked calls that follow count in loopguard_verdicts_total).",
        );
        for (detector, n) in DETECTORS.iter().zip(&self.budget_stops) {
            if detector.is_budget() {
                let _ = writeln!(
                    out,
                    "loopguard_budget_stops_total{{detector=\"{}\"}} {}",
                    detector.as_str(),
                    load(n)
                );
            }
        }

        head(
            &mut out,
            "loopguard_config_reloads_total",
            "counter",
            "Config reloads, by result.",
        );
        let _ = writeln!(
            out,
            "loopguard_config_reloads_total{{result=\"ok\"}} {}",
            load(&self.reloads_ok)
        );
        let _ = writeln!(
            out,
            "loopguard_config_reloads_total{{result=\"failed\"}} {}",
            load(&self.reloads_failed)
        );
        out
    }
}

fn head(out: &mut String, name: &str, kind: &str, help: &str) {
    let _ = writeln!(out, "# HELP {name} {help}");
    let _ = writeln!(out, "# TYPE {name} {kind}");
}

#[cfg(test)]
mod tests {
    use super::*;
    use loopguard_events::parse_line;

    #[test]
    fn counts_answers_and_renders_every_series() {
        let m = Metrics::default();
        let mut replayer = loopguard_events::Replayer::new(loopguard::ConfigSet::default(), None);
        let event = parse_line(br#"{"type":"call","tool":"read"}"#).unwrap();
        m.answer(&replayer.apply(1, &event.as_ref()));
        m.invalid();
        m.request("/v1/events", 200, Duration::from_micros(300));
        m.request("/nope", 404, Duration::from_secs(20));
        m.reload(false);
        m.degraded("result");
        let budgets = loopguard::ConfigSet::parse(
            "{ loopguard: { budgets: { run: { tokens: 100 } } }, agents: { list: [ { id: 'coder', loopguard: { mode: 'enforce' } } ] } }",
        )
        .unwrap();
        let mut budgeted = loopguard_events::Replayer::new(budgets.clone(), None);
        for line in [
            r#"{"type":"usage","agent":"coder","id":"u1","model":"gpt-4o-2024-08-06","input_tokens":60,"output_tokens":10}"#,
            r#"{"type":"usage","agent":"coder","id":"u1","model":"gpt-4o-2024-08-06","input_tokens":60,"output_tokens":10}"#,
            r#"{"type":"usage","agent":"other one","model":"my \"model\"","input_tokens":40,"output_tokens":0}"#,
        ] {
            let event = parse_line(line.as_bytes()).unwrap();
            let answer = budgeted.apply(1, &event.as_ref());
            let (
                loopguard_events::Event::Usage { ids, usage },
                loopguard_events::Answer::Usage { counted, .. },
            ) = (&event, &answer)
            else {
                panic!("{answer:?}");
            };
            let cfg = budgets.for_agent(ids.agent.as_deref());
            m.usage(
                agent_label(&budgets, ids.agent.as_deref()),
                model_label(cfg, usage.model.as_deref()),
                usage.as_usage().tokens(),
                counted,
            );
        }
        let text = m.render(
            &StoreStats {
                sessions: 2,
                runs: Some(3),
                writes: 5,
                deltas: 4,
                ..StoreStats::default()
            },
            false,
        );
        for line in [
            "loopguard_events_total{type=\"call\"} 1",
            "loopguard_events_total{type=\"invalid\"} 1",
            "loopguard_verdicts_total{detector=\"none\",level=\"allow\"} 1",
            "loopguard_verdicts_total{detector=\"ping_pong\",level=\"critical\"} 0",
            "loopguard_live_sessions 2",
            "loopguard_live_runs 3",
            "loopguard_store_writes_total 5",
            "loopguard_store_deltas_total 4",
            "loopguard_http_request_duration_seconds_bucket{route=\"/v1/events\",le=\"0.0005\"} 1",
            "loopguard_http_request_duration_seconds_bucket{route=\"/v1/events\",le=\"0.00025\"} 0",
            "loopguard_http_request_duration_seconds_bucket{route=\"other\",le=\"+Inf\"} 1",
            "loopguard_http_request_duration_seconds_count{route=\"other\"} 1",
            "loopguard_http_responses_total{code=\"404\"} 1",
            "loopguard_config_reloads_total{result=\"failed\"} 1",
            "loopguard_store_up 0",
            "loopguard_degraded_answers_total{type=\"result\"} 1",
            "loopguard_degraded_answers_total{type=\"call\"} 0",
            "loopguard_events_total{type=\"result\"} 1",
            "loopguard_usage_tokens_total{agent=\"coder\",model=\"gpt-4o\"} 70",
            "loopguard_usage_cost_usd_total{agent=\"coder\",model=\"gpt-4o\"} 0.00025",
            "loopguard_usage_tokens_total{agent=\"other\",model=\"other\"} 40",
            "loopguard_usage_unpriced_tokens_total{agent=\"other\",model=\"other\"} 40",
            "loopguard_budget_stops_total{detector=\"run_budget\"} 1",
            "loopguard_budget_stops_total{detector=\"day_budget\"} 0",
        ] {
            assert!(
                text.lines().any(|l| l == line),
                "missing {line:?} in\n{text}"
            );
        }
        // Every sample line is `name{labels} value` with a numeric value.
        for l in text.lines().filter(|l| !l.starts_with('#')) {
            let value = l.rsplit(' ').next().unwrap();
            assert!(value.parse::<f64>().is_ok(), "{l}");
        }
        // A store that cannot count its runs (Redis) gets no runs gauge rather than 0.
        let uncounted = m.render(&StoreStats::default(), true);
        assert!(!uncounted.contains("loopguard_live_runs"), "{uncounted}");
        assert!(
            uncounted.contains("loopguard_live_sessions 0\n"),
            "{uncounted}"
        );
    }
}
