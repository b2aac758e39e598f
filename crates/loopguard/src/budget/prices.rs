//! What a model's tokens cost: the built-in price table, the one definition of it, and how
//! a model name finds its row.
//!
//! Every figure is US dollars per million tokens, as the providers publish them, for the
//! standard (not batch, not priority) tier, read on the date in its row from the source in
//! its row. The figures were taken from LiteLLM's `model_prices_and_context_window.json`
//! (BerriAI/litellm, the copy of 2026-07-24), which cites the provider's page given here,
//! and the Anthropic rows were checked against Anthropic's pricing page. A config extends
//! or overrides the table per model (`loopguard.prices`); `loopguard config explain` and
//! `docs/budgets.md` print it.
//!
//! A model name finds its row exactly, after the forms hosts add are taken off: a provider
//! prefix (`anthropic/`, `openrouter/openai/`), a Bedrock region and vendor (`us.anthropic.`)
//! and version (`-v1:0`), a Vertex `@date`, and a date suffix (`-20250929`, `-2024-08-06`).
//! Nothing else is guessed: `gpt-5-pro` is not `gpt-5` (it costs twelve times more), so a
//! model that is not in the table has no price, and its cost is unknown unless the host
//! sends one.

use serde::Serialize;

use super::Cost;

/// Rates of one price tier, in micro-dollars per million tokens (= pico-dollars per token):
/// exact integers, so sums never drift between replicas.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Rates {
    /// Uncached input tokens.
    #[serde(serialize_with = "per_million")]
    pub input: u64,
    /// Output tokens (reasoning included).
    #[serde(serialize_with = "per_million")]
    pub output: u64,
    /// Input tokens read from the provider's prompt cache.
    #[serde(serialize_with = "per_million")]
    pub cache_read: u64,
    /// Input tokens written to the prompt cache.
    #[serde(serialize_with = "per_million")]
    pub cache_write: u64,
}

fn per_million<S: serde::Serializer>(rate: &u64, s: S) -> Result<S::Ok, S::Error> {
    s.serialize_f64(*rate as f64 / 1e6)
}

/// The price of one model: its rates, and dearer rates for long prompts.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Price {
    /// Rates for prompts up to the first tier.
    #[serde(flatten)]
    pub rates: Rates,
    /// `(above, rates)`: the rates of a response whose prompt (input and cache tokens)
    /// holds more than `above` tokens, ascending; the last that applies wins.
    #[serde(skip_serializing_if = "<[_]>::is_empty")]
    pub tiers: &'static [(u64, Rates)],
}

impl Price {
    /// A price without tiers.
    pub const fn flat(rates: Rates) -> Self {
        Self { rates, tiers: &[] }
    }

    /// What one response costs.
    pub fn cost(&self, input: u64, output: u64, cache_read: u64, cache_write: u64) -> Cost {
        let prompt = input.saturating_add(cache_read).saturating_add(cache_write);
        let rates = self
            .tiers
            .iter()
            .rev()
            .find(|(above, _)| prompt > *above)
            .map_or(self.rates, |(_, r)| *r);
        let pico = u128::from(input) * u128::from(rates.input)
            + u128::from(output) * u128::from(rates.output)
            + u128::from(cache_read) * u128::from(rates.cache_read)
            + u128::from(cache_write) * u128::from(rates.cache_write);
        Cost::from_pico(u64::try_from(pico).unwrap_or(u64::MAX))
    }
}

/// One row of the built-in table.
#[derive(Clone, Copy, Debug, Serialize)]
pub struct Row {
    /// The model, as its provider names it (no date suffix).
    pub model: &'static str,
    /// Its price.
    #[serde(flatten)]
    pub price: Price,
    /// Where the figures come from.
    pub source: &'static str,
    /// When they were read.
    pub as_of: &'static str,
}

/// Dollars per million tokens, as micro-dollars per million (pico-dollars per token).
const fn m(dollars: f64) -> u64 {
    (dollars * 1e6 + 0.5) as u64
}

/// Rates with cache reads and writes priced as given.
const fn r(input: f64, output: f64, cache_read: f64, cache_write: f64) -> Rates {
    Rates {
        input: m(input),
        output: m(output),
        cache_read: m(cache_read),
        cache_write: m(cache_write),
    }
}

/// Rates of a provider without a cache-write charge (writes cost plain input).
const fn rc(input: f64, output: f64, cache_read: f64) -> Rates {
    r(input, output, cache_read, input)
}

/// Rates without cache discounts (cache tokens cost plain input).
const fn ro(input: f64, output: f64) -> Rates {
    r(input, output, input, input)
}

const OPENAI: &str = "https://openai.com/api/pricing/";
const ANTHROPIC: &str = "https://docs.anthropic.com/en/docs/about-claude/pricing";
const GOOGLE: &str = "https://ai.google.dev/gemini-api/docs/pricing";
const DEEPSEEK: &str = "https://api-docs.deepseek.com/quick_start/pricing";
const QWEN: &str = "https://www.alibabacloud.com/help/en/model-studio/models";
const MISTRAL: &str = "https://mistral.ai/pricing";

/// The date the figures were read.
const AS_OF: &str = "2026-07-24";

const fn row(model: &'static str, rates: Rates, source: &'static str) -> Row {
    Row {
        model,
        price: Price::flat(rates),
        source,
        as_of: AS_OF,
    }
}

const fn tiered(
    model: &'static str,
    rates: Rates,
    tiers: &'static [(u64, Rates)],
    source: &'static str,
) -> Row {
    Row {
        model,
        price: Price { rates, tiers },
        source,
        as_of: AS_OF,
    }
}

/// Anthropic's long-context rates (prompts above 200k tokens) for Sonnet 4 and 4.5.
const SONNET_LONG: &[(u64, Rates)] = &[(200_000, r(6.0, 22.5, 0.6, 7.5))];
/// Gemini 2.5 Pro above 200k prompt tokens.
const GEMINI_25_PRO_LONG: &[(u64, Rates)] = &[(200_000, rc(2.5, 15.0, 0.25))];
/// Gemini 3 Pro (and 3.1 Pro) above 200k prompt tokens.
const GEMINI_3_PRO_LONG: &[(u64, Rates)] = &[(200_000, rc(4.0, 18.0, 0.4))];
/// Qwen3 Max: by prompt size, up to 32k, 128k, and beyond.
const QWEN3_MAX_TIERS: &[(u64, Rates)] = &[(32_000, ro(2.4, 12.0)), (128_000, ro(3.0, 15.0))];
/// Qwen3 Coder Plus: up to 32k, 128k, 256k, and beyond.
const QWEN3_CODER_PLUS_TIERS: &[(u64, Rates)] = &[
    (32_000, rc(1.8, 9.0, 0.18)),
    (128_000, rc(3.0, 15.0, 0.3)),
    (256_000, rc(6.0, 60.0, 0.6)),
];
/// Qwen3 Coder Flash: up to 32k, 128k, 256k, and beyond.
const QWEN3_CODER_FLASH_TIERS: &[(u64, Rates)] = &[
    (32_000, rc(0.5, 2.5, 0.12)),
    (128_000, rc(0.8, 4.0, 0.2)),
    (256_000, rc(1.6, 9.6, 0.4)),
];
/// Qwen Flash beyond 256k prompt tokens.
const QWEN_FLASH_LONG: &[(u64, Rates)] = &[(256_000, ro(0.25, 2.0))];
/// Qwen3.5 Plus beyond 256k prompt tokens.
const QWEN35_PLUS_LONG: &[(u64, Rates)] = &[(256_000, ro(0.5, 3.0))];

/// The built-in table, by provider. Names are lower case, as matched.
pub static BUILTIN: &[Row] = &[
    // OpenAI: cached input is discounted; there is no cache-write charge.
    row("gpt-4o", rc(2.5, 10.0, 1.25), OPENAI),
    row("gpt-4o-mini", rc(0.15, 0.6, 0.075), OPENAI),
    row("gpt-4.1", rc(2.0, 8.0, 0.5), OPENAI),
    row("gpt-4.1-mini", rc(0.4, 1.6, 0.1), OPENAI),
    row("gpt-4.1-nano", rc(0.1, 0.4, 0.025), OPENAI),
    row("o1", rc(15.0, 60.0, 7.5), OPENAI),
    row("o3", rc(2.0, 8.0, 0.5), OPENAI),
    row("o3-mini", rc(1.1, 4.4, 0.55), OPENAI),
    row("o4-mini", rc(1.1, 4.4, 0.275), OPENAI),
    row("gpt-5", rc(1.25, 10.0, 0.125), OPENAI),
    row("gpt-5-mini", rc(0.25, 2.0, 0.025), OPENAI),
    row("gpt-5-nano", rc(0.05, 0.4, 0.005), OPENAI),
    row("gpt-5-codex", rc(1.25, 10.0, 0.125), OPENAI),
    row("gpt-5.1", rc(1.25, 10.0, 0.125), OPENAI),
    row("gpt-5.1-codex", rc(1.25, 10.0, 0.125), OPENAI),
    row("gpt-5.1-codex-max", rc(1.25, 10.0, 0.125), OPENAI),
    row("gpt-5.1-codex-mini", rc(0.25, 2.0, 0.025), OPENAI),
    row("gpt-5.2", rc(1.75, 14.0, 0.175), OPENAI),
    row("gpt-5.2-codex", rc(1.75, 14.0, 0.175), OPENAI),
    row("gpt-5.3-codex", rc(1.75, 14.0, 0.175), OPENAI),
    row("gpt-5.4", rc(2.5, 15.0, 0.25), OPENAI),
    row("gpt-5.4-mini", rc(0.75, 4.5, 0.075), OPENAI),
    row("gpt-5.4-nano", rc(0.2, 1.25, 0.02), OPENAI),
    row("gpt-5.5", rc(5.0, 30.0, 0.5), OPENAI),
    // Anthropic: cache reads at a tenth of input, 5-minute cache writes at 1.25 times.
    row("claude-opus-4-7", r(5.0, 25.0, 0.5, 6.25), ANTHROPIC),
    row("claude-opus-4-6", r(5.0, 25.0, 0.5, 6.25), ANTHROPIC),
    row("claude-opus-4-5", r(5.0, 25.0, 0.5, 6.25), ANTHROPIC),
    row("claude-opus-4-1", r(15.0, 75.0, 1.5, 18.75), ANTHROPIC),
    row("claude-opus-4", r(15.0, 75.0, 1.5, 18.75), ANTHROPIC),
    row("claude-sonnet-4-6", r(3.0, 15.0, 0.3, 3.75), ANTHROPIC),
    tiered(
        "claude-sonnet-4-5",
        r(3.0, 15.0, 0.3, 3.75),
        SONNET_LONG,
        ANTHROPIC,
    ),
    tiered(
        "claude-sonnet-4",
        r(3.0, 15.0, 0.3, 3.75),
        SONNET_LONG,
        ANTHROPIC,
    ),
    row("claude-3-7-sonnet", r(3.0, 15.0, 0.3, 3.75), ANTHROPIC),
    row("claude-haiku-4-5", r(1.0, 5.0, 0.1, 1.25), ANTHROPIC),
    row("claude-3-5-haiku", r(0.8, 4.0, 0.08, 1.0), ANTHROPIC),
    row("claude-3-haiku", r(0.25, 1.25, 0.03, 0.3), ANTHROPIC),
    // Google (Gemini API, paid tier): context caching priced as cache reads.
    tiered(
        "gemini-3.1-pro-preview",
        rc(2.0, 12.0, 0.2),
        GEMINI_3_PRO_LONG,
        GOOGLE,
    ),
    tiered(
        "gemini-3-pro-preview",
        rc(2.0, 12.0, 0.2),
        GEMINI_3_PRO_LONG,
        GOOGLE,
    ),
    row("gemini-3-flash-preview", rc(0.5, 3.0, 0.05), GOOGLE),
    tiered(
        "gemini-2.5-pro",
        rc(1.25, 10.0, 0.125),
        GEMINI_25_PRO_LONG,
        GOOGLE,
    ),
    row("gemini-2.5-flash", rc(0.3, 2.5, 0.03), GOOGLE),
    row("gemini-2.5-flash-lite", rc(0.1, 0.4, 0.01), GOOGLE),
    row("gemini-2.0-flash", rc(0.1, 0.4, 0.025), GOOGLE),
    row("gemini-2.0-flash-lite", rc(0.075, 0.3, 0.01875), GOOGLE),
    // DeepSeek: cache hits discounted, misses at the input rate.
    row("deepseek-chat", rc(0.28, 0.42, 0.028), DEEPSEEK),
    row("deepseek-reasoner", rc(0.28, 0.42, 0.028), DEEPSEEK),
    row("deepseek-v4-pro", rc(0.435, 0.87, 0.003625), DEEPSEEK),
    row("deepseek-v4-flash", rc(0.14, 0.28, 0.0028), DEEPSEEK),
    // Qwen (Alibaba Cloud Model Studio, international): tiered by prompt size.
    row("qwen-max", ro(1.6, 6.4), QWEN),
    row("qwen-plus", ro(0.4, 1.2), QWEN),
    row("qwen-turbo", ro(0.05, 0.2), QWEN),
    tiered("qwen-flash", ro(0.05, 0.4), QWEN_FLASH_LONG, QWEN),
    tiered("qwen3-max", ro(1.2, 6.0), QWEN3_MAX_TIERS, QWEN),
    tiered("qwen3.5-plus", ro(0.4, 2.4), QWEN35_PLUS_LONG, QWEN),
    tiered(
        "qwen3-coder-plus",
        rc(1.0, 5.0, 0.1),
        QWEN3_CODER_PLUS_TIERS,
        QWEN,
    ),
    tiered(
        "qwen3-coder-flash",
        rc(0.3, 1.5, 0.08),
        QWEN3_CODER_FLASH_TIERS,
        QWEN,
    ),
    row("qwq-plus", ro(0.8, 2.4), QWEN),
    // Mistral.
    row("mistral-large-latest", ro(0.5, 1.5), MISTRAL),
    row("mistral-medium-latest", ro(1.5, 7.5), MISTRAL),
    row("mistral-small-latest", ro(0.06, 0.18), MISTRAL),
    row("codestral-2508", ro(0.3, 0.9), MISTRAL),
    row("devstral-medium-latest", ro(0.4, 2.0), MISTRAL),
    row("devstral-small-latest", ro(0.1, 0.3), MISTRAL),
    row("magistral-medium-latest", ro(2.0, 5.0), MISTRAL),
    row("magistral-small-latest", ro(0.5, 1.5), MISTRAL),
];

/// The name a model is looked up by: lower case, without the prefixes and suffixes hosts
/// add (see the module docs). Borrowed when nothing changes.
pub fn normalize(model: &str) -> std::borrow::Cow<'_, str> {
    let trimmed = crate::text::trim(model);
    let mut name = trimmed.rsplit('/').next().unwrap_or(trimmed);
    // Vertex: `claude-sonnet-4-5@20250929`.
    if let Some((base, _)) = name.split_once('@') {
        name = base;
    }
    // Bedrock: `us.anthropic.claude-sonnet-4-5-20250929-v1:0`.
    if let Some(i) = name.find("anthropic.") {
        name = &name[i + "anthropic.".len()..];
        if let Some(v) = name.rfind("-v") {
            let version = &name[v + 2..];
            if !version.is_empty() && version.bytes().all(|b| b.is_ascii_digit() || b == b':') {
                name = &name[..v];
            }
        }
    }
    let name = strip_date(name);
    if name.bytes().any(|b| b.is_ascii_uppercase()) {
        std::borrow::Cow::Owned(name.to_ascii_lowercase())
    } else {
        std::borrow::Cow::Borrowed(name)
    }
}

/// `name` without a trailing `-YYYYMMDD` or `-YYYY-MM-DD`.
fn strip_date(name: &str) -> &str {
    let digits = |s: &str| !s.is_empty() && s.bytes().all(|b| b.is_ascii_digit());
    let b = name.as_bytes();
    if b.len() > 9 && b[b.len() - 9] == b'-' && digits(&name[b.len() - 8..]) {
        return &name[..b.len() - 9];
    }
    if b.len() > 11 {
        let tail = &name[b.len() - 11..];
        let t = tail.as_bytes();
        if t[0] == b'-'
            && t[5] == b'-'
            && t[8] == b'-'
            && digits(&tail[1..5])
            && digits(&tail[6..8])
            && digits(&tail[9..11])
        {
            return &name[..b.len() - 11];
        }
    }
    name
}

/// The built-in price of a model name already [`normalize`]d.
pub fn builtin(normalized: &str) -> Option<&'static Row> {
    BUILTIN.iter().find(|row| row.model == normalized)
}

/// The price of `model`: a config's own prices (`overrides`, names normalized) first, then
/// the built-in table.
pub fn price_of(model: &str, overrides: &[(String, Price)]) -> Option<Price> {
    let name = normalize(model);
    overrides
        .iter()
        .find(|(m, _)| *m == *name)
        .map(|(_, p)| *p)
        .or_else(|| builtin(&name).map(|row| row.price))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_lose_what_hosts_add_and_nothing_else() {
        for (given, want) in [
            ("claude-sonnet-4-5-20250929", "claude-sonnet-4-5"),
            ("anthropic/claude-opus-4-6", "claude-opus-4-6"),
            ("openrouter/openai/gpt-4o-2024-08-06", "gpt-4o"),
            (
                "us.anthropic.claude-sonnet-4-5-20250929-v1:0",
                "claude-sonnet-4-5",
            ),
            ("claude-sonnet-4-5@20250929", "claude-sonnet-4-5"),
            ("GPT-4.1-Mini", "gpt-4.1-mini"),
            (" gemini-2.5-pro ", "gemini-2.5-pro"),
            ("gpt-5-pro", "gpt-5-pro"),
            ("qwen-max-0428", "qwen-max-0428"),
        ] {
            assert_eq!(normalize(given), want, "{given}");
        }
        assert!(price_of("gpt-5-pro", &[]).is_none(), "no guessing");
        assert!(price_of("claude-3-5-haiku-20241022", &[]).is_some());
    }

    #[test]
    fn the_table_has_one_row_per_model_and_sane_rates() {
        let mut seen = std::collections::BTreeSet::new();
        for row in BUILTIN {
            assert!(seen.insert(row.model), "{} twice", row.model);
            assert_eq!(
                normalize(row.model),
                row.model,
                "{} is not normalized",
                row.model
            );
            let rates = row.price.rates;
            assert!(
                rates.input > 0 && rates.output >= rates.input,
                "{}",
                row.model
            );
            assert!(rates.cache_read <= rates.input, "{}", row.model);
            let mut above = 0;
            for (threshold, tier) in row.price.tiers {
                assert!(
                    *threshold > above && tier.input >= rates.input,
                    "{}",
                    row.model
                );
                above = *threshold;
            }
            assert!(row.source.starts_with("https://") && row.as_of.len() == 10);
        }
        for provider in [
            "gpt-",
            "claude-",
            "gemini-",
            "deepseek-",
            "qwen",
            "mistral-",
        ] {
            assert!(
                BUILTIN.iter().any(|r| r.model.starts_with(provider)),
                "{provider}"
            );
        }
    }

    #[test]
    fn costs_are_exact_and_tiers_follow_the_prompt() {
        let sonnet = price_of("claude-sonnet-4-5", &[]).unwrap();
        // 50k input, output, cache reads and cache writes at 3 + 15 + 0.30 + 3.75 per M.
        let cost = sonnet.cost(50_000, 50_000, 50_000, 50_000);
        assert_eq!(cost, Cost::from_pico(1_102_500_000_000));
        // A prompt above 200k tokens is billed at the long-context rates.
        assert_eq!(
            sonnet.cost(200_001, 0, 0, 0),
            Cost::from_pico(200_001 * 6_000_000)
        );
        assert_eq!(
            sonnet.cost(200_000, 0, 0, 0),
            Cost::from_pico(200_000 * 3_000_000)
        );
        let overrides = vec![("my-model".to_owned(), Price::flat(ro(1.0, 2.0)))];
        let mine = price_of("vendor/My-Model", &overrides).unwrap();
        assert_eq!(mine.cost(1000, 1000, 0, 0), Cost::from_pico(3_000_000_000));
    }
}
