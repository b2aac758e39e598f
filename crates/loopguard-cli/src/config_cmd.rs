//! `loopguard config check` and `loopguard config explain`.

use std::path::PathBuf;

use clap::{Args, Subcommand};
use loopguard::budget::prices::{Price, Rates, BUILTIN as BUILTIN_PRICES};
use loopguard::budget::Cost;
use loopguard::config::extensions::{Mode, Preset};
use loopguard::config::{ConfigSet, EffectiveConfig, Enabled};
use loopguard::masking::MASK_RULES;
use loopguard::policy::{SendMatch, BUILTIN};
use serde_json::{json, Value};

use crate::output::wants_json;
use crate::startup::{self, config_error, Loaded};
use crate::{EXIT_FATAL, EXIT_OK};

#[derive(Subcommand, Debug)]
pub enum ConfigCommand {
    /// Validate a config document and list every problem in it.
    ///
    /// Exit status: 0 when the document is valid (clamped or unreachable thresholds are
    /// reported as warnings), 1 when it is not (every problem is listed on stderr, each with
    /// file, line, column, path and what is wrong).
    #[command(after_help = "Example:\n  loopguard config check ~/.openclaw/openclaw.json")]
    Check {
        /// OpenClaw-style JSON5 config.
        #[arg(value_name = "FILE")]
        file: PathBuf,
    },
    /// Show the settings in force, and why.
    Explain(ExplainArgs),
}

/// Show the effective settings (after merge, defaults and clamping) globally and for each
/// agent, with a sentence for every clamp and every threshold the history size makes
/// unreachable, plus the built-in tool policy. A table on a terminal, JSON when piped or
/// with --json.
#[derive(Args, Debug)]
#[command(after_help = "Examples:\n  \
loopguard config explain openclaw.json5\n  \
loopguard config explain openclaw.json5 --agent worker --json")]
pub struct ExplainArgs {
    /// OpenClaw-style JSON5 config.
    #[arg(value_name = "FILE")]
    file: PathBuf,
    /// Only this agent's settings (the global ones when it has no block of its own).
    #[arg(long, value_name = "ID")]
    agent: Option<String>,
    /// Print JSON even on a terminal.
    #[arg(long)]
    json: bool,
}

pub fn run(cmd: ConfigCommand) -> u8 {
    match cmd {
        ConfigCommand::Check { file } => check(file),
        ConfigCommand::Explain(args) => explain(args),
    }
}

fn check(file: PathBuf) -> u8 {
    let set = match loopguard_config::read(&file) {
        Ok(set) => set,
        Err(e) => {
            let n = e.problems();
            eprintln!("{e}");
            eprintln!(
                "{}: {n} problem{} found; the config was not applied",
                file.display(),
                if n == 1 { "" } else { "s" }
            );
            return EXIT_FATAL;
        }
    };
    let mut warnings = 0;
    let origin = file.display().to_string();
    for warning in set.warnings() {
        warnings += 1;
        println!("warning: {}", warning.located(Some(&origin)));
    }
    for (label, cfg) in scopes(&set, None) {
        for clamp in cfg.clamps() {
            warnings += 1;
            println!("warning: {label}: {}", clamp.reason);
        }
        for u in cfg.unreachable() {
            warnings += 1;
            println!("warning: {label}: {}", u.reason);
        }
        for caveat in cfg.budget_caveats() {
            warnings += 1;
            println!("warning: {label}: {caveat}");
        }
    }
    println!(
        "{}: valid ({} agent block{}, {warnings} warning{})",
        file.display(),
        set.agents().count(),
        if set.agents().count() == 1 { "" } else { "s" },
        if warnings == 1 { "" } else { "s" },
    );
    // Valid is not the same as guarding: say whether the rolling detectors run.
    let loaded = Loaded {
        config: set,
        source: loopguard_config::Source::Flag(file),
    };
    match startup::detection_off_notice(&loaded) {
        Some(notice) => println!("note: {notice}"),
        None => println!(
            "{}: {}",
            loaded.source,
            startup::detection_summary(loaded.config.global())
        ),
    }
    EXIT_OK
}

/// The configs to show: global then each agent, or just the one asked for.
fn scopes<'a>(set: &'a ConfigSet, agent: Option<&str>) -> Vec<(String, &'a EffectiveConfig)> {
    match agent {
        Some(id) => {
            let has_block = set.agents().any(|(a, _, _)| a == id);
            let label = if has_block {
                format!("agent {id}")
            } else {
                format!("agent {id} (no block of its own: global settings)")
            };
            vec![(label, set.for_agent(Some(id)))]
        }
        None => std::iter::once(("global".to_owned(), set.global()))
            .chain(set.agents().map(|(id, _, e)| (format!("agent {id}"), e)))
            .collect(),
    }
}

fn explain(args: ExplainArgs) -> u8 {
    let set = match loopguard_config::read(&args.file) {
        Ok(set) => set,
        Err(e) => return config_error(&e),
    };
    let scopes = scopes(&set, args.agent.as_deref());
    if wants_json(args.json) {
        let doc = json!({
            "file": args.file.display().to_string(),
            "fingerprintVersion": loopguard::fingerprint::FINGERPRINT_VERSION,
            "configs": scopes.iter().map(|(label, cfg)| json!({
                "scope": label,
                "effective": cfg,
                "explanations": explanations(cfg),
            })).collect::<Vec<_>>(),
            "policy": policy_json(),
            "prices": prices_json(),
        });
        println!("{}", serde_json::to_string_pretty(&doc).unwrap_or_default());
    } else {
        println!("{}", args.file.display());
        for (label, cfg) in &scopes {
            println!();
            print_table(label, cfg);
        }
        println!();
        print_policy();
    }
    EXIT_OK
}

fn enabled_text(e: Enabled) -> &'static str {
    match e {
        Enabled::On => "true: rolling detectors on, post-compaction guard on",
        Enabled::Unset => "unset: rolling detectors off, post-compaction guard on",
        Enabled::Off => "false: rolling detectors off, post-compaction guard off",
    }
}

/// One sentence per setting worth a remark.
fn explanations(cfg: &EffectiveConfig) -> Vec<String> {
    let mut out = vec![format!("enabled is {}.", enabled_text(cfg.enabled()))];
    out.extend(cfg.clamps().iter().map(|c| format!("{}.", c.reason)));
    out.extend(cfg.unreachable().iter().map(|u| format!("{}.", u.reason)));
    out.extend(cfg.budget_caveats().into_iter().map(|c| format!("{c}.")));
    out.extend(
        extension_lines(cfg)
            .into_iter()
            .map(|(k, v)| format!("{k}: {v}.")),
    );
    out
}

/// The `loopguard` block in force, as (setting, value) lines; empty without the block.
fn extension_lines(cfg: &EffectiveConfig) -> Vec<(String, String)> {
    let Some(ext) = cfg.extensions() else {
        return Vec::new();
    };
    let on_off = |levels: Option<String>| levels.unwrap_or_else(|| "off".into());
    let mut lines = vec![
        (
            "loopguard.preset".to_owned(),
            match Preset::ALL.iter().find(|(_, p)| Some(*p) == ext.preset) {
                Some((name, _)) => format!("{name} (the block's own keys override it)"),
                None => "none".to_owned(),
            },
        ),
        (
            "loopguard.mode".to_owned(),
            match ext.mode {
                Mode::Enforce => "enforce (verdicts are enforced)".to_owned(),
                Mode::Shadow => "shadow (everything is reported, every call is allowed)".to_owned(),
            },
        ),
        (
            "loopguard.masking".to_owned(),
            if ext.masking.is_empty() {
                "off (tools with mask: true use every rule)".to_owned()
            } else {
                ext.masking
                    .rules()
                    .map(|r| r.name)
                    .collect::<Vec<_>>()
                    .join(", ")
            },
        ),
        (
            "detectors.consecutiveRepeat".to_owned(),
            on_off(
                ext.consecutive_repeat
                    .map(|l| format!("warning {}, critical {}", l.warning, l.critical)),
            ),
        ),
        (
            "detectors.cycle".to_owned(),
            on_off(ext.cycle.map(|c| {
                format!(
                    "periods {}..={} (at most historySize), warning at {} repetitions, critical at {} with stable outcomes",
                    c.min_length, c.max_length, c.warning_repeats, c.critical_repeats
                )
            })),
        ),
        (
            "detectors.errorCascade".to_owned(),
            on_off(ext.error_cascade.map(|c| {
                format!(
                    "warning {}, critical {}, at most {} successes between two failures",
                    c.levels.warning, c.levels.critical, c.max_gap
                )
            })),
        ),
        (
            "detectors.staleRepeat".to_owned(),
            on_off(ext.stale_repeat.map(|l| {
                format!(
                    "warning {}, critical {} (identical failures: {})",
                    l.levels.warning, l.levels.critical, l.failure_critical
                )
            })),
        ),
        (
            "detectors.targetThrash".to_owned(),
            on_off(
                ext.target_thrash
                    .map(|l| format!("warning {}, critical {}", l.warning, l.critical)),
            ),
        ),
        (
            "detectors.escalation".to_owned(),
            on_off(
                ext.escalation
                    .map(|n| format!("a blocked loop continued {n} times stops the run")),
            ),
        ),
        (
            "detectors.batchDuplicates".to_owned(),
            if ext.batch_duplicates { "on" } else { "off" }.to_owned(),
        ),
        (
            "policy.builtin".to_owned(),
            if ext.policy.builtin {
                "SPEC tables apply to tools no rule classifies"
            } else {
                "off: only the rules below"
            }
            .to_owned(),
        ),
    ];
    for (i, rule) in ext.policy.rules.iter().enumerate() {
        lines.push((format!("policy.tools[{i}]"), rule.to_string()));
    }
    match cfg.budgets() {
        None => lines.push(("budgets".to_owned(), "off".to_owned())),
        Some(b) => {
            lines.extend(b.describe());
            lines.push((
                "budgets.warnAt".to_owned(),
                format!("{}% of a limit", f64::from(b.warn_at) / 1e4),
            ));
            lines.push((
                "budgets.timeZone".to_owned(),
                format!(
                    "{} (where the calendar days of budgets.day begin)",
                    loopguard::budget::zone(b.utc_offset_minutes)
                ),
            ));
        }
    }
    for (model, price) in cfg.prices() {
        lines.push((format!("prices.{model}"), price_text(price)));
    }
    lines
}

/// `$3 in, $15 out, $0.30 cache read, $3.75 cache write per million tokens`, and the
/// long-prompt tiers.
fn price_text(price: &Price) -> String {
    let usd = |rate: u64| Cost::from_pico(rate.saturating_mul(1_000_000)).to_string();
    let rates = |r: &Rates| {
        format!(
            "{} in, {} out, {} cache read, {} cache write",
            usd(r.input),
            usd(r.output),
            usd(r.cache_read),
            usd(r.cache_write)
        )
    };
    let mut out = format!("{} per million tokens", rates(&price.rates));
    for (above, tier) in price.tiers {
        out.push_str(&format!("; prompts above {above} tokens: {}", rates(tier)));
    }
    out
}

fn print_table(label: &str, cfg: &EffectiveConfig) {
    let on = |b: bool| if b { "on" } else { "off" };
    let clamped = |field: &str| {
        cfg.clamps()
            .iter()
            .find(|c| c.field == field)
            .map(|c| format!("  (clamped from {})", c.configured))
            .unwrap_or_default()
    };
    println!("{label}");
    let rows: Vec<(&str, String)> = vec![
        ("enabled", enabled_text(cfg.enabled()).to_owned()),
        ("historySize", cfg.history_size().to_string()),
        ("warningThreshold", cfg.warning_threshold().to_string()),
        (
            "criticalThreshold",
            format!(
                "{}{}",
                cfg.critical_threshold(),
                clamped("criticalThreshold")
            ),
        ),
        (
            "unknownToolThreshold",
            cfg.unknown_tool_threshold().to_string(),
        ),
        (
            "globalCircuitBreakerThreshold",
            format!(
                "{}{}",
                cfg.global_circuit_breaker_threshold(),
                clamped("globalCircuitBreakerThreshold")
            ),
        ),
        (
            "detectors.genericRepeat",
            on(cfg.detectors().generic_repeat).into(),
        ),
        (
            "detectors.knownPollNoProgress",
            on(cfg.detectors().known_poll_no_progress).into(),
        ),
        ("detectors.pingPong", on(cfg.detectors().ping_pong).into()),
        (
            "postCompactionGuard.windowSize",
            cfg.post_compaction_window().to_string(),
        ),
    ];
    for (k, v) in rows {
        println!("  {k:<32} {v}");
    }
    for (k, v) in extension_lines(cfg) {
        println!("  {k:<32} {v}");
    }
    for c in cfg.clamps() {
        println!("  note: {}", c.reason);
    }
    for u in cfg.unreachable() {
        println!("  warning: {}", u.reason);
    }
}

fn policy_json() -> Value {
    json!({
        "knownPolls": BUILTIN.polls.iter().map(|p| json!({"tool": p.tool, "actions": p.actions})).collect::<Vec<_>>(),
        "sends": BUILTIN.sends.iter().map(|s| json!({"tool": s.tool, "when": send_when(s.matches)})).collect::<Vec<_>>(),
        "volatileSendKeys": BUILTIN.volatile_send_keys,
        "maskingRules": MASK_RULES.iter().map(|r| json!({
            "name": r.name,
            "placeholder": r.placeholder,
            "description": r.description,
            "example": {"input": r.example.0, "masked": r.example.1},
        })).collect::<Vec<_>>(),
    })
}

/// The built-in price table, for `config explain --json`.
fn prices_json() -> Value {
    BUILTIN_PRICES
        .iter()
        .map(|row| {
            json!({
                "model": row.model,
                "price": row.price,
                "source": row.source,
                "asOf": row.as_of,
            })
        })
        .collect()
}

fn send_when(m: SendMatch) -> String {
    match m {
        SendMatch::Always => "always".into(),
        SendMatch::ActionIn(actions) => format!("action in {}", actions.join(", ")),
        SendMatch::NonBlankArg(arg) => format!("`{arg}` is a non-blank string"),
    }
}

fn print_policy() {
    println!(
        "built-in tool policy (fingerprint {})",
        loopguard::fingerprint::FINGERPRINT_VERSION
    );
    for p in BUILTIN.polls {
        match p.actions {
            None => println!("  known poll   {}", p.tool),
            Some(a) => println!(
                "  known poll   {} when action is {}",
                p.tool,
                a.join(" or ")
            ),
        }
    }
    for s in BUILTIN.sends {
        println!("  send         {} when {}", s.tool, send_when(s.matches));
    }
    println!(
        "  volatile send result keys (ignored): {}",
        BUILTIN.volatile_send_keys.join(", ")
    );
    println!();
    println!("masking rules (loopguard.masking; every rule needs a digit in the token)");
    for r in MASK_RULES {
        println!(
            "  {:<11} {:<13} {}  e.g. {:?} → {:?}",
            r.name, r.placeholder, r.description, r.example.0, r.example.1
        );
    }
    println!();
    println!(
        "built-in prices (loopguard.prices overrides or adds a model; names match without provider prefixes and date suffixes)"
    );
    for row in BUILTIN_PRICES {
        println!(
            "  {:<24} {}  ({}, {})",
            row.model,
            price_text(&row.price),
            row.source,
            row.as_of
        );
    }
}
