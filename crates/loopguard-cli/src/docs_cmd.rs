//! `loopguard completions SHELL` and `loopguard man`: generated from the clap definitions,
//! so they never drift from the command line.

use std::path::PathBuf;

use clap::Args;
use clap_complete::Shell;

use crate::output::fatal;
use crate::EXIT_OK;

/// Print a shell completion script.
///
/// Install it where your shell looks, e.g. bash:
/// `loopguard completions bash > ~/.local/share/bash-completion/completions/loopguard`;
/// zsh: `loopguard completions zsh > ~/.zfunc/_loopguard` (with ~/.zfunc in fpath);
/// fish: `loopguard completions fish > ~/.config/fish/completions/loopguard.fish`.
#[derive(Args, Debug)]
pub struct CompletionsArgs {
    /// The shell.
    #[arg(value_enum)]
    shell: Shell,
}

/// Print the manual page (roff), or write one page per command.
///
/// `loopguard man | man -l -` reads it now; `loopguard man --dir
/// ~/.local/share/man/man1` installs loopguard.1 and a page per subcommand
/// (loopguard-serve.1, loopguard-hook-install.1, …) for `man loopguard`.
#[derive(Args, Debug)]
pub struct ManArgs {
    /// Write loopguard.1 and one page per subcommand into this directory.
    #[arg(long, value_name = "DIR")]
    dir: Option<PathBuf>,
}

pub fn completions(args: CompletionsArgs) -> u8 {
    let mut cmd = crate::command();
    clap_complete::generate(args.shell, &mut cmd, "loopguard", &mut std::io::stdout());
    EXIT_OK
}

pub fn man(args: ManArgs) -> u8 {
    let mut cmd = crate::command();
    cmd.build();
    let cmd = usage_synopses(cmd);
    let result = match &args.dir {
        Some(dir) => std::fs::create_dir_all(dir).and_then(|()| clap_mangen::generate_to(cmd, dir)),
        None => clap_mangen::Man::new(cmd).render(&mut std::io::stdout()),
    };
    match result {
        Ok(()) => EXIT_OK,
        Err(e) if e.kind() == std::io::ErrorKind::BrokenPipe => EXIT_OK,
        Err(e) => fatal(&format!("cannot write the manual: {e}")),
    }
}

/// clap_mangen writes a positional that takes several values as `[PATH]`, where the usage
/// line of `--help` says `[PATH]...`: such commands (and their subcommands) get that usage
/// line as their synopsis. `cmd` is built, so that each knows its full name.
fn usage_synopses(mut cmd: clap::Command) -> clap::Command {
    let names: Vec<String> = cmd
        .get_subcommands()
        .map(|sub| sub.get_name().to_owned())
        .collect();
    for name in names {
        cmd = cmd.mut_subcommand(name, usage_synopses);
    }
    let several = cmd
        .get_positionals()
        .any(|arg| arg.get_num_args().is_some_and(|n| n.max_values() > 1));
    if several && cmd.get_overridden_usage().is_none() {
        let usage = cmd.render_usage().to_string();
        let usage = usage.strip_prefix("Usage: ").unwrap_or(&usage).to_owned();
        cmd = cmd.override_usage(usage);
    }
    cmd
}
