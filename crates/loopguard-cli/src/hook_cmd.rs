//! `loopguard hook AGENT`: the agent's hook protocol on stdin and stdout.

use std::io::{IsTerminal, Read, Write};
use std::path::PathBuf;

use clap::{Args, Parser, Subcommand};
use loopguard::{Clock, SystemClock};
use loopguard_config::Source;
use loopguard_hooks::store::{DbOptions, Synchronous};
use loopguard_hooks::{handle, Agent, Options, EXIT_FAILED, MAX_INPUT_BYTES};
use loopguard_store::default_db_path;

use crate::hook_install;
use crate::hook_line::{checked_config, hook_command, AgentName, HookSettings, SyncMode};
use crate::startup::{self, Loaded};
use crate::EXIT_OK;

/// Speak a coding agent's hook protocol: stop its tool-call loops.
///
/// The agent runs this command at each hook event with the event as JSON on stdin; the
/// decision goes to stdout (and the exit status), as that agent documents it. Tool calls
/// are checked before they run (a loop is warned about, then blocked: the model reads
/// why), outcomes are recorded after, a user prompt starts a new run and a compaction
/// arms the post-compaction guard. State lives in the SQLite database that `loopguard
/// serve` uses, one short transaction per invocation, safe with hooks running at once.
///
/// `loopguard hook install AGENT` puts the hook into the agent's settings file;
/// `--print-config` prints the snippet instead.
///
/// Without a config file (--config or LOOPGUARD_CONFIG), detection is on with the default
/// thresholds. Failures (unreadable input, unusable config or database) exit 1 with the
/// problem on stderr, which the agents treat as a non-blocking error: the call goes ahead.
#[derive(Args, Debug)]
#[command(
    args_conflicts_with_subcommands = true,
    subcommand_negates_reqs = true,
    after_help = "Examples:\n  \
loopguard hook install claude-code          # into ~/.claude/settings.json\n  \
loopguard hook install codex --project      # into ./.codex/hooks.json\n  \
loopguard hook uninstall gemini\n  \
loopguard hook claude-code --print-config   # the snippet, to merge by hand\n  \
echo '{\"session_id\":\"s\",\"hook_event_name\":\"PreToolUse\",\"tool_name\":\"Read\",\"tool_input\":{}}' | loopguard hook claude-code\n\n\
The database defaults to $XDG_DATA_HOME/loopguard/loopguard.db, else \
~/.local/share/loopguard/loopguard.db."
)]
pub struct HookArgs {
    #[command(subcommand)]
    action: Option<HookAction>,
    /// The agent whose hook protocol to speak.
    #[arg(value_enum, required = true)]
    agent: Option<AgentName>,
    #[command(flatten)]
    settings: HookSettings,
    /// Print the snippet to merge into the agent's settings file, and exit (`hook install`
    /// merges it for you).
    #[arg(long)]
    print_config: bool,
    /// With --print-config: print it even when the config leaves the rolling detectors off.
    #[arg(long, requires = "print_config")]
    allow_detection_off: bool,
}

#[derive(Subcommand, Debug)]
enum HookAction {
    Install(hook_install::InstallArgs),
    Uninstall(hook_install::UninstallArgs),
}

pub fn run(args: HookArgs) -> u8 {
    let agent = match (args.action, args.agent) {
        (Some(HookAction::Install(a)), _) => return hook_install::install(a),
        (Some(HookAction::Uninstall(a)), _) => return hook_install::uninstall(a),
        (None, Some(agent)) => agent.agent(),
        // clap requires the agent when there is no subcommand.
        (None, None) => {
            return crate::output::fatal("name the agent: claude-code, codex or gemini")
        }
    };
    if args.print_config {
        return print_config(agent, &args.settings, args.allow_detection_off);
    }
    run_hook(agent, args.settings)
}

/// `loopguard-hook`: the hook alone (`loopguard hook AGENT`, without install, uninstall and
/// --print-config), with the same flags.
#[derive(Parser, Debug)]
#[command(
    name = "loopguard-hook",
    version,
    about = "Speak a coding agent's hook protocol: stop its tool-call loops",
    long_about = "The same as `loopguard hook AGENT`, in a binary that links only what the hook \
uses, so that it starts faster: agents run it at every tool call and wait for it. \
`loopguard hook install AGENT` points the agent's settings at it when it is installed next \
to `loopguard`."
)]
struct HookOnly {
    /// The agent whose hook protocol to speak.
    #[arg(value_enum)]
    agent: AgentName,
    #[command(flatten)]
    settings: HookSettings,
}

/// `loopguard-hook`'s `main`.
pub fn hook_main() -> std::process::ExitCode {
    let args = HookOnly::parse();
    std::process::ExitCode::from(run_hook(args.agent.agent(), args.settings))
}

/// Runs one hook invocation: the payload on stdin, the decision on stdout.
fn run_hook(agent: Agent, settings: HookSettings) -> u8 {
    let db = match settings.db.clone().map_or_else(default_db_path, Ok) {
        Ok(db) => db,
        Err(_) => {
            return fail(
                agent,
                "no default database location: neither XDG_DATA_HOME nor HOME is an absolute path; give --db PATH (or LOOPGUARD_DB)",
            )
        }
    };
    let source = Source::resolve(settings.config.clone(), startup::defaults_of("hook"));
    if std::io::stdin().is_terminal() {
        // Agents pipe the payload; a person at a terminal is told what is awaited.
        if let Ok(loaded) = source.load().map(|config| Loaded {
            config,
            source: source.clone(),
        }) {
            eprintln!(
                "{}",
                startup::startup_line(
                    &format!("hook {}", agent.name()),
                    &loaded,
                    &format!("sqlite {}", db.display())
                )
            );
            for warning in startup::config_warnings(&loaded) {
                eprintln!("loopguard hook {}: {warning}", agent.name());
            }
        }
        eprintln!(
            "loopguard hook {}: waiting for one hook payload (JSON) on stdin, as the agent \
sends it (Ctrl-D ends). Agents run this command themselves: see loopguard hook install --help",
            agent.name()
        );
    }
    let mut input = Vec::new();
    let read = std::io::stdin()
        .lock()
        .take(MAX_INPUT_BYTES + 1)
        .read_to_end(&mut input);
    if let Err(e) = read {
        return fail(agent, &format!("cannot read stdin: {e}"));
    }
    if input.len() as u64 > MAX_INPUT_BYTES {
        return fail(
            agent,
            &format!("the payload on stdin is larger than {MAX_INPUT_BYTES} bytes"),
        );
    }
    let options = Options {
        db,
        config: source.path().map(ToOwned::to_owned),
        agent: settings.config_agent,
        db_options: db_options(settings.sync),
    };
    let response = handle(agent, &input, &options, SystemClock.now_ms());
    response.deliver(std::io::stdout().lock(), std::io::stderr().lock())
}

fn db_options(sync: SyncMode) -> DbOptions {
    DbOptions {
        synchronous: match sync {
            SyncMode::Normal => Synchronous::Normal,
            SyncMode::Full => Synchronous::Full,
        },
        ..DbOptions::default()
    }
}

fn fail(agent: Agent, message: &str) -> u8 {
    eprintln!("loopguard hook {}: {message}", agent.name());
    EXIT_FAILED
}

/// Prints the settings snippet: the command is this very binary (by absolute path), with
/// the --config, --db and --agent given here.
fn print_config(agent: Agent, settings: &HookSettings, allow_detection_off: bool) -> u8 {
    let command = format!("hook {} --print-config", agent.name());
    let loaded = match checked_config(&command, settings.config.clone(), allow_detection_off) {
        Ok(loaded) => loaded,
        Err(code) => return code,
    };
    let exe = std::env::current_exe()
        .ok()
        .and_then(|p| p.canonicalize().ok())
        .unwrap_or_else(|| PathBuf::from("loopguard"));
    if let Some(tree) = hook_install::build_tree(&exe) {
        eprintln!(
            "loopguard {command}: warning: {} is inside a Cargo build directory ({}), which \
`cargo clean` or the next build removes or replaces; install loopguard first (cargo install \
--locked --profile dist --path crates/loopguard-cli) and run the installed binary",
            exe.display(),
            tree.display()
        );
    }
    let snippet = agent.settings_snippet(&hook_command(&exe, agent, &loaded, &settings.view()));
    let mut stdout = std::io::stdout().lock();
    let _ = stdout.write_all(snippet.as_bytes());
    let _ = stdout.flush();
    eprintln!(
        "loopguard: merge this into {} (its \"hooks\" object), or let `loopguard hook install {}` do it",
        agent.settings_file(),
        agent.name()
    );
    EXIT_OK
}
