//! What every command does first: load its config through the one loader
//! (`loopguard-config`), and say on stderr what it runs with.
//!
//! The defaults rule is stated once, in [`DEFAULTS`]: the commands that guard live calls
//! run with detection on at OpenClaw's documented thresholds when they are given no config
//! file, and `replay`, the contract's test harness, keeps SPEC §7's defaults. `loopguard
//! --help` prints the table from it ([`defaults_help`]) and a test checks README's copy.
//!
//! The startup line ([`startup_line`]) names the config source, whether detection is on and
//! at which thresholds, and where state lives. A config that leaves the rolling detectors
//! off (no `tools.loopDetection` block, or `enabled` unset: OpenClaw's own default) is
//! legal and means the same as it does in OpenClaw, so it is not refused; it is reported,
//! with the one line that turns detection on ([`detection_off_notice`]).

use std::fmt::Write as _;
use std::path::PathBuf;

use loopguard::config::{
    Enabled, DEFAULT_CRITICAL_THRESHOLD, DEFAULT_GLOBAL_CIRCUIT_BREAKER_THRESHOLD,
    DEFAULT_WARNING_THRESHOLD,
};
use loopguard::{ConfigSet, EffectiveConfig};
use loopguard_config::{Defaults, LoadError, Source};

use crate::EXIT_FATAL;

/// What each command runs with when given no config file (`--config` or
/// `LOOPGUARD_CONFIG`). `scan` asks what a live guard would have caught, so it uses what
/// the live commands use.
pub const DEFAULTS: [(&str, Defaults); 5] = [
    ("serve", Defaults::Live),
    ("hook", Defaults::Live),
    ("mcp-proxy", Defaults::Live),
    ("scan", Defaults::Live),
    ("replay", Defaults::Spec),
];

/// The defaults of `command` (one of [`DEFAULTS`]).
pub fn defaults_of(command: &str) -> Defaults {
    DEFAULTS
        .iter()
        .find(|(name, _)| *name == command)
        .map_or(Defaults::Live, |&(_, d)| d)
}

/// The line that turns the rolling detectors on, in a config document.
pub const TURN_ON: &str = "tools: { loopDetection: { enabled: true } }";

/// The rule as `loopguard --help` prints it.
pub fn defaults_help() -> String {
    let names = |wanted: Defaults| {
        DEFAULTS
            .iter()
            .filter(|(_, d)| *d == wanted)
            .map(|(n, _)| *n)
            .collect::<Vec<_>>()
            .join(", ")
    };
    format!(
        "Without a config file (--config FILE, or the LOOPGUARD_CONFIG variable):\n  \
{}: detection on at OpenClaw's documented thresholds (warn at {DEFAULT_WARNING_THRESHOLD} \
identical calls, block at {DEFAULT_CRITICAL_THRESHOLD}, stop the run at \
{DEFAULT_GLOBAL_CIRCUIT_BREAKER_THRESHOLD})\n  \
{}: SPEC §7 defaults (rolling detectors off, post-compaction guard on)\n\
A config without `enabled: true` leaves the rolling detectors off, as in OpenClaw; \
commands say so when they start. The line that turns them on:\n  {TURN_ON}",
        names(Defaults::Live),
        names(Defaults::Spec),
    )
}

/// A config and where it came from.
#[derive(Debug)]
pub struct Loaded {
    /// The config in force.
    pub config: ConfigSet,
    /// Where it came from.
    pub source: Source,
}

/// Loads the config of `command`: `--config`, else `LOOPGUARD_CONFIG`, else the command's
/// defaults.
pub fn load(command: &str, flag: Option<PathBuf>) -> Result<Loaded, LoadError> {
    let source = Source::resolve(flag, defaults_of(command));
    let config = source.load()?;
    Ok(Loaded { config, source })
}

/// Prints a config that cannot be used, one problem per line (each `FILE:LINE:COLUMN: …`
/// for problems in the document), then what happened; returns the fatal exit status.
pub fn config_error(error: &LoadError) -> u8 {
    let n = error.problems();
    match error {
        LoadError::Invalid(_) => {
            eprintln!("{error}");
            eprintln!(
                "loopguard: error: {n} problem{} in the config, so nothing was done",
                if n == 1 { "" } else { "s" }
            );
        }
        _ => eprintln!("loopguard: error: {error}"),
    }
    EXIT_FATAL
}

/// A config that cannot be used, on one line as SPEC §7 requires of `replay` (its stderr is
/// part of the contract): the first problem, `FILE:LINE:COLUMN: …`, and how many more
/// `config check` would list. Returns the fatal exit status.
pub fn config_error_one_line(error: &LoadError) -> u8 {
    let text = error.to_string();
    let first = text.lines().next().unwrap_or_default();
    match (error, error.problems()) {
        (LoadError::Invalid(_), n) if n > 1 => {
            let file = error_file(error);
            eprintln!(
                "{first} (and {} more: loopguard config check {file} lists them all)",
                n - 1
            );
        }
        (LoadError::Invalid(_), _) => eprintln!("{first}"),
        _ => eprintln!("loopguard: error: {first}"),
    }
    EXIT_FATAL
}

fn error_file(error: &LoadError) -> String {
    match error {
        LoadError::Invalid(e) => e.origin.clone().unwrap_or_default(),
        _ => String::new(),
    }
}

/// `detection on (warn at 3, block at 5, …)` or why it is off.
pub fn detection_summary(cfg: &EffectiveConfig) -> String {
    let mut out = match cfg.enabled() {
        Enabled::On => format!(
            "detection on (warn at {}, block at {}, unknown tool {}, breaker {}, history {})",
            cfg.warning_threshold(),
            cfg.critical_threshold(),
            cfg.unknown_tool_threshold(),
            cfg.global_circuit_breaker_threshold(),
            cfg.history_size(),
        ),
        Enabled::Unset => {
            "detection off (enabled unset: rolling detectors off, post-compaction guard on)".into()
        }
        Enabled::Off => "detection off (enabled: false: every detector and the guard off)".into(),
    };
    if cfg.is_shadow() {
        out.push_str(", shadow mode (reports, never blocks)");
    }
    if let Some(budgets) = cfg.budgets() {
        let limits: Vec<String> = budgets
            .describe()
            .into_iter()
            .map(|(scope, limits)| format!("{} {limits}", scope.trim_start_matches("budgets.")))
            .collect();
        out.push_str(&format!(", budgets {}", limits.join("; ")));
        if cfg.budget_caveats().iter().any(|c| c.contains(".cost")) {
            out.push_str(" (cost counts priced responses only: loopguard config check says more)");
        }
    }
    out
}

/// One line: `loopguard COMMAND: config …; detection …; [agents …;] store …`.
pub fn startup_line(command: &str, loaded: &Loaded, store: &str) -> String {
    let source = match loaded.source.path() {
        Some(_) => format!("config {}", loaded.source),
        None => loaded.source.to_string(),
    };
    let mut line = format!(
        "loopguard {command}: {source}; {}",
        detection_summary(loaded.config.global())
    );
    let agents: Vec<String> = loaded
        .config
        .agents()
        .map(|(id, _, cfg)| {
            let state = match cfg.enabled() {
                Enabled::On => {
                    format!(
                        "on at {}/{}",
                        cfg.warning_threshold(),
                        cfg.critical_threshold()
                    )
                }
                Enabled::Unset | Enabled::Off => "off".into(),
            };
            format!("{id} {state}")
        })
        .collect();
    if !agents.is_empty() {
        let _ = write!(line, "; agents: {}", agents.join(", "));
    }
    let _ = write!(line, "; store {store}");
    line
}

/// The config's warnings, one line each (`warning: FILE:LINE:COLUMN: …`): keys that look
/// like a misspelt block name, which nothing reads.
pub fn config_warnings(loaded: &Loaded) -> Vec<String> {
    let origin = loaded.source.path().map(|p| p.display().to_string());
    loaded
        .config
        .warnings()
        .iter()
        .map(|w| format!("warning: {}", w.located(origin.as_deref())))
        .collect()
}

/// When the rolling detectors are off because `enabled` is not set (a config file with no
/// block at all or a block without it, or SPEC §7's defaults), the sentence that says so
/// and gives the line that turns them on. `None` when they are on or explicitly off.
pub fn detection_off_notice(loaded: &Loaded) -> Option<String> {
    let Some(path) = loaded.source.path() else {
        return (loaded.config.global().enabled() == Enabled::Unset).then(|| {
            format!(
                "no config file: SPEC §7's defaults leave the rolling detectors off (only the \
post-compaction guard runs). To turn them on, give --config FILE holding: {{ {TURN_ON} }}"
            )
        });
    };
    let off_agents: Vec<&str> = loaded
        .config
        .agents()
        .filter(|(_, _, cfg)| cfg.enabled() == Enabled::Unset)
        .map(|(id, _, _)| id)
        .collect();
    let global_off = loaded.config.global().enabled() == Enabled::Unset;
    if !global_off && off_agents.is_empty() {
        return None;
    }
    let scope = if global_off {
        "the rolling detectors are off".to_owned()
    } else {
        format!(
            "the rolling detectors are off for agent{} {}",
            if off_agents.len() == 1 { "" } else { "s" },
            off_agents.join(", ")
        )
    };
    Some(format!(
        "{}: {scope}: tools.loopDetection.enabled is not set (OpenClaw's default is off; only the post-compaction guard runs). To turn them on, add to it: {TURN_ON}",
        path.display()
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn loaded(text: &str) -> Loaded {
        Loaded {
            config: ConfigSet::parse(text).unwrap(),
            source: Source::Flag("openclaw.json".into()),
        }
    }

    #[test]
    fn the_rule() {
        assert_eq!(defaults_of("serve"), Defaults::Live);
        assert_eq!(defaults_of("hook"), Defaults::Live);
        assert_eq!(defaults_of("mcp-proxy"), Defaults::Live);
        assert_eq!(defaults_of("replay"), Defaults::Spec);
        let help = defaults_help();
        assert!(
            help.contains("serve, hook, mcp-proxy, scan: detection on"),
            "{help}"
        );
        assert!(help.contains("replay: SPEC §7 defaults"), "{help}");
        assert!(help.contains("warn at 10 identical calls, block at 20, stop the run at 30"));
    }

    #[test]
    fn startup_lines() {
        let live = Loaded {
            config: Defaults::Live.config(),
            source: Source::Defaults(Defaults::Live),
        };
        assert_eq!(
            startup_line("serve", &live, "sqlite /tmp/x.db"),
            "loopguard serve: no config file (live defaults); detection on (warn at 10, \
block at 20, unknown tool 10, breaker 30, history 30); store sqlite /tmp/x.db"
        );
        let l = loaded(
            "{ tools: { loopDetection: { enabled: true, warningThreshold: 3, criticalThreshold: 5 } },
               agents: { list: [{ id: 'w', tools: { loopDetection: { enabled: false } } }] } }",
        );
        let line = startup_line("mcp-proxy", &l, "memory");
        assert!(
            line.starts_with(
                "loopguard mcp-proxy: config openclaw.json; detection on (warn at 3, block at 5,"
            ),
            "{line}"
        );
        assert!(line.ends_with("; agents: w off; store memory"), "{line}");
        assert_eq!(detection_off_notice(&l), None);
    }

    #[test]
    fn a_config_without_enabled_is_reported_with_the_line_that_turns_it_on() {
        // A real OpenClaw config has other blocks and no tools.loopDetection.
        let l = loaded("{ gateway: { port: 18789 }, agents: { defaults: { model: 'x' } } }");
        assert!(detection_summary(l.config.global()).starts_with("detection off (enabled unset"));
        let notice = detection_off_notice(&l).unwrap();
        assert!(
            notice.starts_with("openclaw.json: the rolling detectors are off"),
            "{notice}"
        );
        assert!(notice.ends_with(TURN_ON), "{notice}");
        // A block without `enabled` is the same.
        let l = loaded("{ tools: { loopDetection: { warningThreshold: 4 } } }");
        assert!(detection_off_notice(&l).is_some());
        // An agent of its own with it on still leaves the others off.
        let l = loaded(
            "{ agents: { list: [{ id: 'a', tools: { loopDetection: { enabled: true } } }, { id: 'b', tools: { loopDetection: { historySize: 40 } } }] } }",
        );
        let notice = detection_off_notice(&l).unwrap();
        assert!(
            notice.contains("the rolling detectors are off:"),
            "{notice}"
        );
        // Explicitly off is a choice, not a trap.
        assert_eq!(
            detection_off_notice(&loaded("{ tools: { loopDetection: { enabled: false } } }")),
            None
        );
        // SPEC §7's defaults (replay's) are off too, and say how to turn them on.
        let spec = Loaded {
            config: Defaults::Spec.config(),
            source: Source::Defaults(Defaults::Spec),
        };
        let notice = detection_off_notice(&spec).unwrap();
        assert!(
            notice.starts_with("no config file: SPEC §7's defaults leave"),
            "{notice}"
        );
        assert!(notice.contains(TURN_ON), "{notice}");
        let live = Loaded {
            config: Defaults::Live.config(),
            source: Source::Defaults(Defaults::Live),
        };
        assert_eq!(detection_off_notice(&live), None);
    }
}
