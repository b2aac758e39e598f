//! Spend budgets: what a run, a session, an agent and a day may spend in tokens, money,
//! tool calls and time, and what a run may spend without making progress.
//!
//! The host reports what each model response used ([`Usage`]: a `usage` event on the
//! wire); the engine prices it ([`prices`]: the host's own figure when given, else the
//! price table), adds it up where it belongs, and judges every call against the limits of
//! the `loopguard.budgets` block ([`Budgets`]). A limit used up to `warnAt` (80 % by
//! default) warns the model, once per run, with what is left; a limit used up blocks the
//! next call and stops the run (a session's, an agent's or a day's limit stops every run it
//! covers, until the session is reset or the day turns). Shadow mode reports the same and
//! stops nothing.
//!
//! Where the spend is kept:
//!
//! - a run's own spend, its spend since its last progress, its warnings and its stop are in
//!   its [`RunState`](crate::RunState) (`RunLedger`);
//! - a session's spend, each of its agents', and the current day's are in the session's
//!   [`SessionState`], which every store keeps beside the session's runs and updates in the
//!   same atomic step as the run an event belongs to.
//!
//! **Progress** is what the guard already knows of a run: a call whose outcome is a success
//! and whose (tool, arguments, outcome) the run has not seen among its last
//! [`PROGRESS_KEPT`] distinct ones, or a success of a tool the policy classes `mutate`. Each
//! progress sets the run's spend "without progress" back to zero.

mod ledger;
pub mod prices;
mod session;

use std::fmt;

use serde::{Deserialize, Serialize};

pub use ledger::{Counted, PROGRESS_KEPT, USAGE_IDS_KEPT};
pub(crate) use ledger::{Judgement, RunLedger};
pub use session::{
    AgentSpend, DaySpend, SessionDecodeError, SessionState, MAX_AGENTS_PER_SESSION,
    SESSION_FORMAT_VERSION,
};

use crate::verdict::Detector;

/// Most tokens of one kind a single response may report (a hundred million: more than any
/// context window). More is refused as input that cannot be right.
pub const MAX_USAGE_TOKENS: u64 = 100_000_000;

/// Most US dollars a single response may report.
pub const MAX_USAGE_COST: f64 = 100_000.0;

/// Money, in pico-dollars (10⁻¹² US dollars): sums are exact integers, the same on every
/// replica whatever the order of floating-point rounding would have been.
#[derive(
    Clone, Copy, Debug, Default, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize,
)]
#[serde(transparent)]
pub struct Cost(u64);

impl Cost {
    /// Nothing.
    pub const ZERO: Self = Self(0);

    /// An amount in pico-dollars.
    pub const fn from_pico(pico: u64) -> Self {
        Self(pico)
    }

    /// The amount in pico-dollars.
    pub const fn pico(self) -> u64 {
        self.0
    }

    /// An amount of US dollars (rounded to the pico-dollar); `None` for a negative, a
    /// non-finite or an absurd amount.
    pub fn from_usd(usd: f64) -> Option<Self> {
        (usd.is_finite() && (0.0..=1e7).contains(&usd)).then(|| Self((usd * 1e12).round() as u64))
    }

    /// The amount in US dollars.
    pub fn usd(self) -> f64 {
        self.0 as f64 / 1e12
    }

    /// The sum, stopping at the largest amount.
    pub fn saturating_add(self, other: Self) -> Self {
        Self(self.0.saturating_add(other.0))
    }
}

impl fmt::Display for Cost {
    /// `$12.50`; below $10 to four decimals without trailing zeros (`$1.64`, `$0.0536`,
    /// `$0.0042`), so that small limits and what is left of them read apart.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let usd = self.usd();
        if usd >= 10.0 {
            return write!(f, "${usd:.2}");
        }
        let text = format!("{usd:.4}");
        let trimmed = text.trim_end_matches('0');
        let decimals = trimmed.len() - trimmed.find('.').map_or(trimmed.len(), |d| d + 1);
        match decimals {
            0..=2 => write!(f, "${usd:.2}"),
            _ => f.write_str(&format!("${trimmed}")),
        }
    }
}

/// What one model response used, as the host reports it (a `usage` event).
///
/// Token counts follow Anthropic's split: `input_tokens` are the input tokens *not* read
/// from or written to the prompt cache. A host whose provider counts cached tokens inside
/// its prompt tokens (OpenAI, Gemini) subtracts them.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct Usage<'a> {
    /// The model that answered, as the host names it.
    pub model: Option<&'a str>,
    /// Uncached input tokens.
    pub input_tokens: u64,
    /// Output tokens (reasoning included).
    pub output_tokens: u64,
    /// Input tokens read from the prompt cache.
    pub cache_read_tokens: u64,
    /// Input tokens written to the prompt cache.
    pub cache_write_tokens: u64,
    /// What the response cost in US dollars, when the host knows (it wins over the table).
    pub cost: Option<f64>,
    /// An id for the response: a usage event sent again with the same id counts once.
    pub id: Option<&'a str>,
}

impl<'a> Usage<'a> {
    /// A response of `input_tokens` in and `output_tokens` out, nothing else known.
    pub fn new(input_tokens: u64, output_tokens: u64) -> Self {
        Self {
            input_tokens,
            output_tokens,
            ..Self::default()
        }
    }

    /// The same usage by `model` (a blank name counts as none).
    pub fn with_model(mut self, model: Option<&'a str>) -> Self {
        self.model = model.and_then(crate::text::non_blank);
        self
    }

    /// The same usage with prompt-cache reads and writes.
    pub fn with_cache(mut self, read: u64, write: u64) -> Self {
        self.cache_read_tokens = read;
        self.cache_write_tokens = write;
        self
    }

    /// The same usage with the host's own cost in US dollars.
    pub fn with_cost(mut self, cost: Option<f64>) -> Self {
        self.cost = cost;
        self
    }

    /// The same usage with an id (a blank id counts as none).
    pub fn with_id(mut self, id: Option<&'a str>) -> Self {
        self.id = id.and_then(crate::text::non_blank);
        self
    }

    /// Every token of the response: input, output and cache.
    pub fn tokens(&self) -> u64 {
        self.input_tokens
            .saturating_add(self.output_tokens)
            .saturating_add(self.cache_read_tokens)
            .saturating_add(self.cache_write_tokens)
    }

    /// Whether the figures can be right: every count at most [`MAX_USAGE_TOKENS`], a cost
    /// finite, not negative, at most [`MAX_USAGE_COST`].
    pub fn check(&self) -> Result<(), UsageError> {
        for (field, n) in [
            ("input_tokens", self.input_tokens),
            ("output_tokens", self.output_tokens),
            ("cache_read_tokens", self.cache_read_tokens),
            ("cache_write_tokens", self.cache_write_tokens),
        ] {
            if n > MAX_USAGE_TOKENS {
                return Err(UsageError::TooManyTokens { field, n });
            }
        }
        match self.cost {
            Some(c) if !c.is_finite() || c < 0.0 => Err(UsageError::BadCost(c.to_string())),
            Some(c) if c > MAX_USAGE_COST => Err(UsageError::CostTooLarge(c)),
            _ => Ok(()),
        }
    }

    /// The cost of the response: the host's figure, else its tokens at the model's price
    /// (`overrides` first, then the built-in table); `None` when neither is known.
    pub fn priced(&self, overrides: &[(String, prices::Price)]) -> Option<Cost> {
        if let Some(cost) = self.cost {
            return Cost::from_usd(cost);
        }
        let price = prices::price_of(self.model?, overrides)?;
        Some(price.cost(
            self.input_tokens,
            self.output_tokens,
            self.cache_read_tokens,
            self.cache_write_tokens,
        ))
    }

    /// A digest of the figures, to tell a retried event from another with the same id.
    pub(crate) fn figures(&self) -> u64 {
        let mut bytes = [0u8; 48];
        for (i, n) in [
            self.input_tokens,
            self.output_tokens,
            self.cache_read_tokens,
            self.cache_write_tokens,
            self.cost.map_or(u64::MAX, f64::to_bits),
            self.model
                .map_or(0, |m| xxhash_rust::xxh3::xxh3_64(m.as_bytes())),
        ]
        .into_iter()
        .enumerate()
        {
            bytes[i * 8..i * 8 + 8].copy_from_slice(&n.to_le_bytes());
        }
        xxhash_rust::xxh3::xxh3_64(&bytes)
    }
}

/// A usage report the engine refuses: nothing was counted.
#[derive(Clone, Debug, PartialEq, thiserror::Error)]
#[non_exhaustive]
pub enum UsageError {
    /// A token count beyond what one response can hold.
    #[error("{field} is {n}, more than one response can use (at most {MAX_USAGE_TOKENS})")]
    TooManyTokens {
        /// The field.
        field: &'static str,
        /// Its value.
        n: u64,
    },
    /// A cost that is negative or not a number.
    #[error("cost must be a finite number of US dollars, not negative, not {0}")]
    BadCost(String),
    /// A cost beyond what one response can cost.
    #[error("cost is {0} US dollars, more than one response can cost (at most {MAX_USAGE_COST})")]
    CostTooLarge(f64),
    /// The id was counted already, with other figures.
    #[error("this usage id was already counted with other figures")]
    Conflict,
}

/// What has been spent: tokens by kind, money, responses and tool calls.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Spend {
    /// Uncached input tokens.
    pub input_tokens: u64,
    /// Output tokens.
    pub output_tokens: u64,
    /// Prompt-cache reads.
    pub cache_read_tokens: u64,
    /// Prompt-cache writes.
    pub cache_write_tokens: u64,
    /// Money, for the responses whose cost is known.
    pub cost: Cost,
    /// Tokens of the responses whose cost is unknown (no host figure, no price).
    pub unpriced_tokens: u64,
    /// Model responses reported.
    pub responses: u64,
    /// Tool calls allowed to run.
    pub calls: u64,
}

impl Spend {
    /// Nothing spent.
    pub const ZERO: Self = Self {
        input_tokens: 0,
        output_tokens: 0,
        cache_read_tokens: 0,
        cache_write_tokens: 0,
        cost: Cost::ZERO,
        unpriced_tokens: 0,
        responses: 0,
        calls: 0,
    };

    /// Every token: input, output and cache.
    pub fn tokens(&self) -> u64 {
        self.input_tokens
            .saturating_add(self.output_tokens)
            .saturating_add(self.cache_read_tokens)
            .saturating_add(self.cache_write_tokens)
    }

    /// Adds a response, priced `cost` (`None`: unknown).
    pub fn add_usage(&mut self, usage: &Usage<'_>, cost: Option<Cost>) {
        self.input_tokens = self.input_tokens.saturating_add(usage.input_tokens);
        self.output_tokens = self.output_tokens.saturating_add(usage.output_tokens);
        self.cache_read_tokens = self
            .cache_read_tokens
            .saturating_add(usage.cache_read_tokens);
        self.cache_write_tokens = self
            .cache_write_tokens
            .saturating_add(usage.cache_write_tokens);
        match cost {
            Some(cost) => self.cost = self.cost.saturating_add(cost),
            None => self.unpriced_tokens = self.unpriced_tokens.saturating_add(usage.tokens()),
        }
        self.responses = self.responses.saturating_add(1);
    }

    /// Adds a tool call.
    pub fn add_call(&mut self) {
        self.calls = self.calls.saturating_add(1);
    }

    /// Everything of `other` added to this.
    pub fn add(&mut self, other: &Spend) {
        self.input_tokens = self.input_tokens.saturating_add(other.input_tokens);
        self.output_tokens = self.output_tokens.saturating_add(other.output_tokens);
        self.cache_read_tokens = self
            .cache_read_tokens
            .saturating_add(other.cache_read_tokens);
        self.cache_write_tokens = self
            .cache_write_tokens
            .saturating_add(other.cache_write_tokens);
        self.cost = self.cost.saturating_add(other.cost);
        self.unpriced_tokens = self.unpriced_tokens.saturating_add(other.unpriced_tokens);
        self.responses = self.responses.saturating_add(other.responses);
        self.calls = self.calls.saturating_add(other.calls);
    }

    /// Whether nothing was spent.
    pub fn is_empty(&self) -> bool {
        *self == Self::default()
    }
}

/// What a budget limits.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Measure {
    /// US dollars.
    Cost,
    /// Tokens.
    Tokens,
    /// Tool calls.
    Calls,
    /// Seconds of wall-clock time.
    WallSeconds,
}

impl Measure {
    /// Every measure, in the order a config writes them.
    pub const ALL: [Self; 4] = [Self::Tokens, Self::Cost, Self::Calls, Self::WallSeconds];

    /// The key a config writes.
    pub fn key(self) -> &'static str {
        match self {
            Self::Cost => "cost",
            Self::Tokens => "tokens",
            Self::Calls => "calls",
            Self::WallSeconds => "wallSeconds",
        }
    }

    /// An amount of this measure in words (`$1.64`, `12,400 tokens`, `8 calls`, `95 s`);
    /// `amount` is pico-dollars, tokens, calls or milliseconds.
    pub fn show(self, amount: u64) -> String {
        match self {
            Self::Cost => Cost::from_pico(amount).to_string(),
            Self::Tokens => format!("{} tokens", grouped(amount)),
            Self::Calls if amount == 1 => "1 call".to_owned(),
            Self::Calls => format!("{} calls", grouped(amount)),
            Self::WallSeconds => format!("{} s", grouped(amount / 1000)),
        }
    }
}

/// `1234567` as `1,234,567`.
fn grouped(n: u64) -> String {
    let digits = n.to_string();
    let mut out = String::with_capacity(digits.len() + digits.len() / 3);
    for (i, c) in digits.chars().enumerate() {
        if i > 0 && (digits.len() - i).is_multiple_of(3) {
            out.push(',');
        }
        out.push(c);
    }
    out
}

/// Whose spend a budget limits.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum BudgetScope {
    /// One run.
    Run,
    /// One run, since its last progress.
    WithoutProgress,
    /// One agent in a session.
    Agent,
    /// One session, all its runs and agents.
    Session,
    /// One session on one calendar day.
    Day,
}

impl BudgetScope {
    /// Every scope, in the order limits are judged.
    pub const ALL: [Self; 5] = [
        Self::Run,
        Self::WithoutProgress,
        Self::Agent,
        Self::Session,
        Self::Day,
    ];

    /// The detector that reports this scope's budget.
    pub fn detector(self) -> Detector {
        match self {
            Self::Run => Detector::RunBudget,
            Self::WithoutProgress => Detector::NoProgressBudget,
            Self::Agent => Detector::AgentBudget,
            Self::Session => Detector::SessionBudget,
            Self::Day => Detector::DayBudget,
        }
    }

    /// The key a config writes.
    pub fn key(self) -> &'static str {
        match self {
            Self::Run => "run",
            Self::WithoutProgress => "withoutProgress",
            Self::Agent => "agent",
            Self::Session => "session",
            Self::Day => "day",
        }
    }

    /// Whether the scope is one run's (its stop is kept with the run).
    pub fn is_run(self) -> bool {
        matches!(self, Self::Run | Self::WithoutProgress)
    }
}

/// The limits of one scope; `None`: no limit.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct BudgetLimits {
    /// Tokens.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub tokens: Option<u64>,
    /// Money.
    #[serde(skip_serializing_if = "Option::is_none", serialize_with = "usd")]
    pub cost: Option<Cost>,
    /// Tool calls.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub calls: Option<u64>,
    /// Wall-clock seconds.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub wall_seconds: Option<u64>,
}

fn usd<S: serde::Serializer>(cost: &Option<Cost>, s: S) -> Result<S::Ok, S::Error> {
    match cost {
        Some(c) => s.serialize_f64(c.usd()),
        None => s.serialize_none(),
    }
}

impl BudgetLimits {
    /// The limit on `measure`, in pico-dollars, tokens, calls or milliseconds.
    pub fn get(&self, measure: Measure) -> Option<u64> {
        match measure {
            Measure::Cost => self.cost.map(Cost::pico),
            Measure::Tokens => self.tokens,
            Measure::Calls => self.calls,
            Measure::WallSeconds => self.wall_seconds.map(|s| s.saturating_mul(1000)),
        }
    }

    /// Whether any limit is set.
    pub fn any(&self) -> bool {
        Measure::ALL.iter().any(|m| self.get(*m).is_some())
    }
}

/// Default share of a limit at which the model is warned.
pub const DEFAULT_WARN_AT: f64 = 0.8;

/// Default `withoutProgress.calls`: tool calls a run may make since its last progress.
/// OpenClaw's own block point for a poll that repeats without progress
/// (`criticalThreshold`); on the project's two labelled corpora no healthy session goes
/// more than 6 calls in a row without progress (docs/budgets.md has the figures).
pub const DEFAULT_NO_PROGRESS_CALLS: u64 = 20;

/// The budgets in force for one agent (or globally): the `loopguard.budgets` block,
/// compiled.
#[derive(Clone, Debug, Default, PartialEq, Eq, Hash, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Budgets {
    /// One run.
    pub run: BudgetLimits,
    /// One session.
    pub session: BudgetLimits,
    /// One agent in a session.
    pub agent: BudgetLimits,
    /// One session per calendar day.
    pub day: BudgetLimits,
    /// One run since its last progress (no wall-clock limit).
    pub without_progress: BudgetLimits,
    /// Warn at this many millionths of a limit.
    #[serde(serialize_with = "fraction")]
    pub warn_at: u32,
    /// Where days begin: minutes east of UTC.
    pub utc_offset_minutes: i32,
}

fn fraction<S: serde::Serializer>(millionths: &u32, s: S) -> Result<S::Ok, S::Error> {
    s.serialize_f64(f64::from(*millionths) / 1e6)
}

impl Budgets {
    /// The limits of `scope`.
    pub fn limits(&self, scope: BudgetScope) -> &BudgetLimits {
        match scope {
            BudgetScope::Run => &self.run,
            BudgetScope::WithoutProgress => &self.without_progress,
            BudgetScope::Agent => &self.agent,
            BudgetScope::Session => &self.session,
            BudgetScope::Day => &self.day,
        }
    }

    /// Whether any limit is set.
    pub fn any(&self) -> bool {
        BudgetScope::ALL.iter().any(|s| self.limits(*s).any())
    }

    /// Whether progress is tracked (`withoutProgress` has a limit).
    pub fn tracks_progress(&self) -> bool {
        self.without_progress.any()
    }

    /// Whether calls are counted beyond the run: a session, agent or day limit on calls,
    /// or on time (whose clock starts at the scope's first event).
    pub fn counts_session_calls(&self) -> bool {
        [&self.session, &self.agent, &self.day]
            .iter()
            .any(|l| l.calls.is_some() || l.wall_seconds.is_some())
    }

    /// The calendar day of clock time `now` (days since 1970-01-01 where days begin).
    pub fn day_of(&self, now: crate::Millis) -> i64 {
        day_of(now, self.utc_offset_minutes)
    }

    /// What the budgets cannot enforce, each with why: a cost limit counts only the
    /// responses whose cost is known (the host's own figure, or a model of the price
    /// table: `config_prices` of the config's own, then the built-in rows); a response of
    /// any other model counts its tokens and its calls, not its cost, so a cost limit alone
    /// lets it through. Replay's clock stands still, so `wallSeconds` never runs out there.
    pub fn caveats(&self, config_prices: usize) -> Vec<String> {
        let costs: Vec<String> = BudgetScope::ALL
            .into_iter()
            .filter(|s| self.limits(*s).cost.is_some())
            .map(|s| format!("budgets.{}.cost", s.key()))
            .collect();
        let mut out = Vec::new();
        if !costs.is_empty() {
            let guarded = BudgetScope::ALL
                .into_iter()
                .any(|s| self.limits(s).tokens.is_some());
            out.push(format!(
                "{} cannot be enforced for models without a price: only responses with the host's own cost or a model of the price table ({} built in, {config_prices} in loopguard.prices) count; {}",
                costs.join(", "),
                prices::BUILTIN.len(),
                match guarded {
                    true => "the token budgets still hold for the others",
                    false => "set a token budget too, or price the models you use in loopguard.prices",
                }
            ));
        }
        if BudgetScope::ALL
            .into_iter()
            .any(|s| self.limits(s).wall_seconds.is_some())
        {
            out.push(
                "wallSeconds runs on the host's clock: loopguard replay and scan, whose clock stands still, never reach it".to_owned(),
            );
        }
        out
    }

    /// The limits in words, one `(key, limits)` pair per scope that has any:
    /// `("budgets.run", "tokens 2,000,000, cost $5")`.
    pub fn describe(&self) -> Vec<(String, String)> {
        BudgetScope::ALL
            .into_iter()
            .filter_map(|scope| {
                let limits = self.limits(scope);
                let words: Vec<String> = Measure::ALL
                    .into_iter()
                    .filter_map(|m| limits.get(m).map(|n| m.show(n)))
                    .collect();
                (!words.is_empty()).then(|| (format!("budgets.{}", scope.key()), words.join(", ")))
            })
            .collect()
    }
}

/// Days since 1970-01-01 at `offset_minutes` east of UTC.
pub fn day_of(now: crate::Millis, offset_minutes: i32) -> i64 {
    let ms = i128::from(now.get()) + i128::from(offset_minutes) * 60_000;
    ms.div_euclid(86_400_000) as i64
}

/// `2026-07-25` for a day number ([`day_of`]).
pub fn date_of(day: i64) -> String {
    // Howard Hinnant's civil_from_days.
    let z = day + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = doy - (153 * mp + 2) / 5 + 1;
    let m = if mp < 10 { mp + 3 } else { mp - 9 };
    let y = yoe + era * 400 + i64::from(m <= 2);
    format!("{y:04}-{m:02}-{d:02}")
}

/// Whose spend a reading is, in words: `this run`, `agent coder in this session`, `this
/// session today (UTC)`. (No date: an answer must not depend on when it is given, so that
/// a replay and a live server answer one stream alike.)
pub fn whose(scope: BudgetScope, agent: Option<&str>, utc_offset_minutes: i32) -> String {
    match scope {
        BudgetScope::Run | BudgetScope::WithoutProgress => "this run".to_owned(),
        BudgetScope::Session => "this session".to_owned(),
        BudgetScope::Agent => match agent {
            Some(agent) => format!("agent {agent} in this session"),
            None => "this agent in this session".to_owned(),
        },
        BudgetScope::Day => format!("this session today ({})", zone(utc_offset_minutes)),
    }
}

/// `UTC`, `UTC+02:00`, `UTC-05:30`.
pub fn zone(minutes: i32) -> String {
    if minutes == 0 {
        return "UTC".to_owned();
    }
    let sign = if minutes < 0 { '-' } else { '+' };
    let m = minutes.unsigned_abs();
    format!("UTC{sign}{:02}:{:02}", m / 60, m % 60)
}

/// How far one limit is used: by whom, of what, how much of how much.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Reading {
    /// Whose spend.
    pub scope: BudgetScope,
    /// Of what.
    pub measure: Measure,
    /// Spent (pico-dollars, tokens, calls or milliseconds).
    pub used: u64,
    /// The limit, in the same unit.
    pub limit: u64,
}

impl Reading {
    /// Whether the limit is used up.
    pub fn is_spent(&self) -> bool {
        self.used >= self.limit
    }

    /// The share used, in whole percent (at least 100 when used up).
    pub fn percent(&self) -> u32 {
        let p = u128::from(self.used) * 100 / u128::from(self.limit.max(1));
        u32::try_from(p).unwrap_or(u32::MAX)
    }

    /// Whether the share used has reached `warn_at` millionths.
    pub fn reaches(&self, warn_at: u32) -> bool {
        u128::from(self.used) * 1_000_000 >= u128::from(self.limit) * u128::from(warn_at)
    }

    /// What is left, in the limit's unit.
    pub fn left(&self) -> u64 {
        self.limit.saturating_sub(self.used)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn money_is_exact_and_shown_in_dollars() {
        assert_eq!(Cost::from_usd(1.64).unwrap().pico(), 1_640_000_000_000);
        assert_eq!(Cost::from_usd(1.64).unwrap().to_string(), "$1.64");
        assert_eq!(Cost::from_usd(0.0042).unwrap().to_string(), "$0.0042");
        assert_eq!(Cost::ZERO.to_string(), "$0.00");
        assert_eq!(Cost::from_usd(0.05355).unwrap().to_string(), "$0.0536");
        assert_eq!(Cost::from_usd(0.05).unwrap().to_string(), "$0.05");
        assert_eq!(Cost::from_usd(12.345).unwrap().to_string(), "$12.35");
        for bad in [-0.01, f64::NAN, f64::INFINITY] {
            assert!(Cost::from_usd(bad).is_none(), "{bad}");
        }
    }

    #[test]
    fn usage_checks_its_figures() {
        assert!(Usage::new(10, 5).check().is_ok());
        let too_many = Usage::new(MAX_USAGE_TOKENS + 1, 0);
        assert!(matches!(
            too_many.check(),
            Err(UsageError::TooManyTokens {
                field: "input_tokens",
                ..
            })
        ));
        for cost in [-1.0, f64::NAN, f64::INFINITY] {
            assert!(Usage::new(1, 1).with_cost(Some(cost)).check().is_err());
        }
        assert!(Usage::new(1, 1)
            .with_cost(Some(MAX_USAGE_COST * 2.0))
            .check()
            .is_err());
        assert_ne!(
            Usage::new(1, 2).figures(),
            Usage::new(2, 1).figures(),
            "figures tell fields apart"
        );
    }

    #[test]
    fn days_and_dates() {
        assert_eq!(date_of(0), "1970-01-01");
        let t = crate::Millis::new(1_785_024_000_000); // 2026-07-26T00:00:00Z
        assert_eq!(date_of(day_of(t, 0)), "2026-07-26");
        assert_eq!(date_of(day_of(t, -60)), "2026-07-25");
        assert_eq!(date_of(day_of(t, 14 * 60)), "2026-07-26");
        assert_eq!(date_of(-1), "1969-12-31");
        assert_eq!(date_of(11_016), "2000-02-29");
    }

    #[test]
    fn readings_round_down_and_warn_at_the_share() {
        let r = Reading {
            scope: BudgetScope::Run,
            measure: Measure::Calls,
            used: 8,
            limit: 10,
        };
        assert_eq!(r.percent(), 80);
        assert!(r.reaches(800_000) && !r.reaches(800_001));
        assert!(!r.is_spent());
        assert_eq!(Measure::Tokens.show(1_234_567), "1,234,567 tokens");
        assert_eq!(Measure::WallSeconds.show(95_400), "95 s");
    }
}
