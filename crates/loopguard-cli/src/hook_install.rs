//! `loopguard hook install|uninstall AGENT`: loopguard's hook entries in an agent's
//! settings file, merged in and taken out by `loopguard_hooks::install`.
//!
//! This module decides which file (user or project scope, or `--settings`), which binary
//! the agent will run, and writes safely: nothing is written unless the loopguard config
//! loads and the edited file parses as the agent parses it; the new file replaces the old
//! one in one rename, with the old file's permissions. `install` keeps the file as it was
//! before loopguard's entries went in beside it (`FILE.loopguard-backup`, when there was a
//! file); `uninstall`, which gives that file back, removes the backup. The binary is the one running, by absolute path, and never one
//! inside a Cargo build directory (`target/release/loopguard` disappears with `cargo
//! clean`, and every hook would then fail).

use std::fmt::Write as _;
use std::io::Write;
use std::path::{Path, PathBuf};

use clap::Args;
use loopguard_hooks::install::{self, Change, Edit, Format, Scope};
use loopguard_hooks::Agent;

use crate::hook_line::{checked_config, hook_command, AgentName, HookSettings};
use crate::startup;
use crate::{EXIT_FATAL, EXIT_OK};

/// Largest settings file read (16 MiB): settings are a few kilobytes.
const MAX_SETTINGS_BYTES: u64 = 16 << 20;

/// Where the entries go.
#[derive(Args, Debug)]
pub struct Target {
    /// The agent: claude-code, codex or gemini.
    #[arg(value_enum)]
    agent: AgentName,
    /// The settings of one project (DIR/.claude, DIR/.codex or DIR/.gemini; DIR defaults
    /// to the current directory) instead of the user's (~/.claude, ~/.codex, ~/.gemini).
    #[arg(long, value_name = "DIR", num_args = 0..=1, default_missing_value = ".")]
    project: Option<PathBuf>,
    /// This settings file instead (TOML when it ends in .toml, like Codex's config.toml).
    #[arg(long, value_name = "FILE", conflicts_with = "project")]
    settings: Option<PathBuf>,
    /// Print the edited file on stdout instead of writing it.
    #[arg(long)]
    dry_run: bool,
}

/// Merge loopguard's hook entries into an agent's settings file.
///
/// Adds one entry per hook event loopguard handles, running this binary (by absolute
/// path) with the --config, --db, --agent and --sync given here. Everything else in the
/// file stays as it was, byte for byte: other hooks, permissions, comments, key order,
/// indentation. Idempotent: run it again and nothing changes; run it with another config
/// or from another binary and loopguard's entries are updated in place. The file as it
/// was before loopguard's entries went in is kept as FILE.loopguard-backup (when there was
/// one); `hook uninstall` removes that backup.
///
/// Refuses (exit 1, nothing written) when the config does not load, when it leaves the
/// rolling detectors off (unless --allow-detection-off), when the settings file is not
/// what the agent can read, and when this binary sits in a Cargo build directory.
#[derive(Args, Debug)]
#[command(after_help = "Examples:\n  \
loopguard hook install claude-code                    # ~/.claude/settings.json\n  \
loopguard hook install codex --project                # ./.codex/hooks.json\n  \
loopguard hook install gemini --config ~/.openclaw/openclaw.json\n  \
loopguard hook install claude-code --dry-run | less\n\n\
User settings honour CLAUDE_CONFIG_DIR and CODEX_HOME. Codex: when config.toml already \
keeps [hooks] tables and there is no hooks.json, the entries go into config.toml.")]
pub struct InstallArgs {
    #[command(flatten)]
    target: Target,
    /// The --config, --db, --agent and --sync the hook runs with (paths made absolute).
    #[command(flatten)]
    settings: HookSettings,
    /// The loopguard binary the agent runs (default: this one).
    #[arg(long, value_name = "PATH")]
    binary: Option<PathBuf>,
    /// Install even when the config leaves the rolling detectors off.
    #[arg(long)]
    allow_detection_off: bool,
}

/// Remove loopguard's hook entries from an agent's settings file.
///
/// Removes every hook handler that runs `loopguard hook AGENT` (whatever its path and
/// flags), and the matcher groups, event lists and "hooks" object left empty by that;
/// nothing else changes. After `hook install` into a file, `hook uninstall` gives the file
/// back byte for byte, and removes the FILE.loopguard-backup `hook install` kept.
#[derive(Args, Debug)]
pub struct UninstallArgs {
    #[command(flatten)]
    target: Target,
}

pub fn install(args: InstallArgs) -> u8 {
    let agent = args.target.agent.agent();
    let name = format!("hook install {}", agent.name());
    let loaded = match checked_config(
        &name,
        args.settings.config.clone(),
        args.allow_detection_off,
    ) {
        Ok(loaded) => loaded,
        Err(code) => return code,
    };
    let exe = match installed_binary(args.binary.as_deref()) {
        Ok(exe) => exe,
        Err(message) => return fail(&name, &message),
    };
    let command = hook_command(&exe, agent, &loaded, &args.settings.view());
    let store = match args
        .settings
        .db
        .clone()
        .map_or_else(loopguard_store::default_db_path, Ok)
    {
        Ok(db) => format!("sqlite {}", db.display()),
        Err(_) => "sqlite (no default location: give --db)".to_owned(),
    };
    edit_settings(&name, agent, &args.target, Backup::Keep, |format, text| {
        install::install(agent, format, text, &command)
    })
    .map_or_else(
        |code| code,
        |outcome| {
            if let Some((path, edit, backup)) = outcome {
                report(&name, &path, &edit, &backup);
                eprintln!(
                    "{}",
                    startup::startup_line(&format!("hook {}", agent.name()), &loaded, &store)
                );
                eprintln!("{}", next_step(agent));
            }
            EXIT_OK
        },
    )
}

pub fn uninstall(args: UninstallArgs) -> u8 {
    let agent = args.target.agent.agent();
    let name = format!("hook uninstall {}", agent.name());
    edit_settings(
        &name,
        agent,
        &args.target,
        Backup::Remove,
        |format, text| install::uninstall(agent, format, text),
    )
    .map_or_else(
        |code| code,
        |outcome| {
            if let Some((path, edit, backup)) = outcome {
                report(&name, &path, &edit, &backup);
            }
            EXIT_OK
        },
    )
}

/// What an edit does with `FILE.loopguard-backup`.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Backup {
    /// Keep the file as it was before loopguard's entries went in (install).
    Keep,
    /// Remove the one install kept (uninstall, which gives that file back).
    Remove,
}

/// What became of the backup.
enum Kept {
    /// The previous file was copied there.
    Made(PathBuf),
    /// An earlier one, the file before loopguard's entries, was left as it was.
    Earlier(PathBuf),
    /// There was no file before: nothing to keep.
    NewFile,
    /// Install's backup was removed.
    Removed(PathBuf),
    /// There was none to remove.
    None,
}

/// Reads the settings file, edits it, and writes it (or prints it, or says there is
/// nothing to do). `Ok(Some(..))` when a file was written.
fn edit_settings(
    name: &str,
    agent: Agent,
    target: &Target,
    backup: Backup,
    edit: impl FnOnce(Format, &str) -> Result<Edit, install::InstallError>,
) -> Result<Option<(PathBuf, Edit, Kept)>, u8> {
    let (path, format) = settings_path(agent, target).map_err(|m| fail(name, &m))?;
    let text = match read_settings(&path) {
        Ok(text) => text,
        Err(message) => return Err(fail(name, &message)),
    };
    let edit = edit(format, text.as_deref().unwrap_or_default()).map_err(|e| {
        fail(
            name,
            &format!("{}: {e}; nothing was written", path.display()),
        )
    })?;
    if target.dry_run {
        let _ = std::io::stdout().write_all(edit.text.as_bytes());
        eprintln!(
            "loopguard {name}: {} (dry run: nothing written)",
            describe(&edit, &path)
        );
        return Ok(None);
    }
    if !edit.changed() {
        let mut said = format!("{}: {}", path.display(), describe(&edit, &path));
        if backup == Backup::Remove {
            // Entries gone already (taken out by hand): the backup is still ours to remove.
            if let Kept::Removed(old) = remove_backup(&path).map_err(|m| fail(name, &m))? {
                let _ = write!(said, " (removed the backup {})", old.display());
            }
        }
        eprintln!("loopguard {name}: {said}");
        return Ok(None);
    }
    let kept = match (backup, &text) {
        (Backup::Keep, None) => Kept::NewFile,
        (Backup::Keep, Some(_)) => {
            // A file that had loopguard's entries already is not the one to go back to:
            // an earlier backup, made before they went in, stays.
            let fresh = edit.events.iter().all(|(_, c)| *c == Change::Added);
            let backup = backup_path(&path);
            if fresh || !backup.exists() {
                std::fs::copy(&path, &backup).map_err(|e| {
                    fail(
                        name,
                        &format!("cannot keep a backup at {}: {e}", backup.display()),
                    )
                })?;
                Kept::Made(backup)
            } else {
                Kept::Earlier(backup)
            }
        }
        (Backup::Remove, _) => Kept::None,
    };
    write_settings(&path, text.is_some(), &edit.text).map_err(|m| fail(name, &m))?;
    let kept = match backup {
        Backup::Remove => remove_backup(&path).map_err(|m| fail(name, &m))?,
        Backup::Keep => kept,
    };
    Ok(Some((path, edit, kept)))
}

/// Removes the backup `hook install` kept beside `path`, if there is one.
fn remove_backup(path: &Path) -> Result<Kept, String> {
    let backup = backup_path(path);
    match std::fs::remove_file(&backup) {
        Ok(()) => Ok(Kept::Removed(backup)),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(Kept::None),
        Err(e) => Err(format!("cannot remove {}: {e}", backup.display())),
    }
}

fn describe(edit: &Edit, path: &Path) -> String {
    if edit.events.is_empty() {
        return format!("no loopguard entries in {}", path.display());
    }
    let list = |want: Change| {
        edit.events
            .iter()
            .filter(|(_, c)| *c == want)
            .map(|(e, _)| e.as_str())
            .collect::<Vec<_>>()
    };
    let mut parts = Vec::new();
    for (change, word) in [
        (Change::Added, "added"),
        (Change::Updated, "updated"),
        (Change::Removed, "removed"),
        (Change::Unchanged, "already there"),
    ] {
        let events = list(change);
        if !events.is_empty() {
            parts.push(format!("{word}: {}", events.join(", ")));
        }
    }
    parts.join("; ")
}

fn report(name: &str, path: &Path, edit: &Edit, kept: &Kept) {
    let backup = match kept {
        Kept::Made(b) => format!(" (previous file kept as {})", b.display()),
        Kept::Earlier(b) => format!(
            " (the file as it was before loopguard's entries is still kept as {})",
            b.display()
        ),
        Kept::NewFile => " (a new file: there was nothing to keep)".to_owned(),
        Kept::Removed(b) => format!(" (removed the backup {})", b.display()),
        Kept::None => String::new(),
    };
    eprintln!(
        "loopguard {name}: {}: {}{backup}",
        path.display(),
        describe(edit, path),
    );
}

fn next_step(agent: Agent) -> &'static str {
    match agent {
        Agent::ClaudeCode => "Claude Code reads its settings at start: restart it, and /hooks lists the loopguard entries.",
        Agent::Codex => "Codex runs hooks you have not reviewed only once you trust them: open /hooks in Codex and trust the loopguard entries.",
        Agent::Gemini => "Gemini CLI reads its settings at start: restart it, and /hooks lists the loopguard entries.",
        _ => "Restart the agent.",
    }
}

fn fail(name: &str, message: &str) -> u8 {
    eprintln!("loopguard {name}: error: {message}");
    EXIT_FATAL
}

fn settings_path(agent: Agent, target: &Target) -> Result<(PathBuf, Format), String> {
    let absolute = |p: &Path| std::path::absolute(p).map_err(|e| format!("{}: {e}", p.display()));
    if let Some(file) = &target.settings {
        return Ok((absolute(file)?, install::format_of(agent, file)));
    }
    let (scope, project) = match &target.project {
        Some(dir) => (Scope::Project, absolute(dir)?),
        None => (Scope::User, PathBuf::new()),
    };
    let home = std::env::var_os("HOME")
        .map(PathBuf::from)
        .filter(|h| h.is_absolute());
    let home = match (scope, home) {
        (_, Some(home)) => home,
        (Scope::Project, None) => PathBuf::new(),
        (Scope::User, None) => {
            return Err("HOME is not an absolute path: give --settings FILE or --project".into())
        }
    };
    let dir = install::settings_dir(agent, scope, &home, &project, |v| std::env::var_os(v));
    Ok(install::settings_file(agent, &dir))
}

/// The file's text, `None` when it does not exist yet.
fn read_settings(path: &Path) -> Result<Option<String>, String> {
    use std::io::Read;
    let file = match std::fs::File::open(path) {
        Ok(file) => file,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
        Err(e) => return Err(format!("cannot read {}: {e}", path.display())),
    };
    let mut bytes = Vec::new();
    file.take(MAX_SETTINGS_BYTES + 1)
        .read_to_end(&mut bytes)
        .map_err(|e| format!("cannot read {}: {e}", path.display()))?;
    if bytes.len() as u64 > MAX_SETTINGS_BYTES {
        return Err(format!(
            "{}: larger than {MAX_SETTINGS_BYTES} bytes; not a settings file",
            path.display()
        ));
    }
    String::from_utf8(bytes).map(Some).map_err(|e| {
        format!(
            "{}: not valid UTF-8 (invalid byte at offset {})",
            path.display(),
            e.utf8_error().valid_up_to()
        )
    })
}

fn backup_path(path: &Path) -> PathBuf {
    let mut name = path.file_name().unwrap_or_default().to_owned();
    name.push(".loopguard-backup");
    path.with_file_name(name)
}

/// Writes `text` to `path` through a temporary file in the same directory and one rename,
/// keeping the old file's permissions.
fn write_settings(path: &Path, existed: bool, text: &str) -> Result<(), String> {
    let dir = path.parent().unwrap_or(Path::new("."));
    std::fs::create_dir_all(dir).map_err(|e| format!("cannot create {}: {e}", dir.display()))?;
    let mut tmp = tempfile::NamedTempFile::new_in(dir)
        .map_err(|e| format!("cannot write in {}: {e}", dir.display()))?;
    if existed {
        let permissions = std::fs::metadata(path)
            .map_err(|e| format!("{}: {e}", path.display()))?
            .permissions();
        tmp.as_file()
            .set_permissions(permissions)
            .map_err(|e| format!("{}: {e}", path.display()))?;
    }
    tmp.write_all(text.as_bytes())
        .and_then(|()| tmp.as_file().sync_all())
        .map_err(|e| format!("cannot write {}: {e}", path.display()))?;
    tmp.persist(path)
        .map_err(|e| format!("cannot replace {}: {}", path.display(), e.error))?;
    Ok(())
}

/// The binary the agent will run: `explicit`, else this one, by absolute path; refused
/// when it sits in a Cargo build directory or does not run as loopguard.
fn installed_binary(explicit: Option<&Path>) -> Result<PathBuf, String> {
    let exe = match explicit {
        Some(path) => path
            .canonicalize()
            .map_err(|e| format!("--binary {}: {e}", path.display()))?,
        None => std::env::current_exe()
            .and_then(|p| p.canonicalize())
            .map_err(|e| format!("cannot tell where this binary is: {e}; give --binary PATH"))?,
    };
    if let Some(tree) = build_tree(&exe) {
        return Err(format!(
            "{} is inside a Cargo build directory ({}): `cargo clean` or the next build \
removes or replaces it, and every hook would then fail. Install loopguard first:\n  \
cargo install --locked --profile dist --path crates/loopguard-cli\n\
then run the installed binary (~/.cargo/bin/loopguard hook install ...), or name one with --binary PATH",
            exe.display(),
            tree.display()
        ));
    }
    if explicit.is_some() {
        let out = std::process::Command::new(&exe)
            .arg("--version")
            .output()
            .map_err(|e| format!("--binary {}: cannot run it: {e}", exe.display()))?;
        if !out.status.success() || !String::from_utf8_lossy(&out.stdout).starts_with("loopguard ")
        {
            return Err(format!(
                "--binary {}: `--version` does not answer as loopguard",
                exe.display()
            ));
        }
    }
    Ok(exe)
}

/// The Cargo build directory `exe` sits in (`target/`, with its `CACHEDIR.TAG`), if any:
/// `target/release/loopguard`, `target/debug/deps/loopguard-…`,
/// `target/x86_64-unknown-linux-gnu/release/loopguard`.
pub fn build_tree(exe: &Path) -> Option<PathBuf> {
    exe.ancestors().skip(1).take(4).find_map(|dir| {
        let tag = std::fs::read_to_string(dir.join("CACHEDIR.TAG")).ok()?;
        tag.contains("cargo").then(|| dir.to_owned())
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn build_trees_are_recognized() {
        let dir = tempfile::tempdir().unwrap();
        let target = dir.path().join("target");
        std::fs::create_dir_all(target.join("release/deps")).unwrap();
        std::fs::write(
            target.join("CACHEDIR.TAG"),
            "Signature: 8a477f597d28d172789f06886806bc55\n# This file is a cache directory tag created by cargo.\n",
        )
        .unwrap();
        assert_eq!(
            build_tree(&target.join("release/loopguard")),
            Some(target.clone())
        );
        assert_eq!(
            build_tree(&target.join("release/deps/loopguard-0f3a")),
            Some(target)
        );
        assert_eq!(build_tree(&dir.path().join("bin/loopguard")), None);
        // The test binary itself runs from the workspace's build directory.
        let me = std::env::current_exe().unwrap();
        assert!(build_tree(&me).is_some(), "{}", me.display());
    }

    #[test]
    fn backups_sit_beside_the_file() {
        assert_eq!(
            backup_path(Path::new("/h/.claude/settings.json")),
            PathBuf::from("/h/.claude/settings.json.loopguard-backup")
        );
    }
}
