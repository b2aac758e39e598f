//! # loopguard-config
//!
//! One loader for the config files of every loopguard front end: the commands of the CLI,
//! the agent hooks (which read the file at every event) and the server (at start and at
//! every reload). The engine parses documents ([`ConfigSet::parse_named`]) but does no I/O;
//! everything between a command line and that parser is here, once:
//!
//! - **Which file** ([`Source::resolve`]): `--config FILE` wins, else the
//!   `LOOPGUARD_CONFIG` variable ([`ENV`]), else none.
//! - **Without a file, the defaults rule** ([`Defaults`]): what guards live calls (`serve`,
//!   `hook`, `mcp-proxy`, and `scan`, which asks what they would have caught) runs with
//!   detection on at OpenClaw's documented thresholds; `replay`, the contract's test harness,
//!   runs SPEC §7's defaults (the document `{}`: rolling detectors off, post-compaction
//!   guard on).
//! - **Reading** ([`read`]): a regular file ([`read_capped`]: a FIFO or a device is
//!   refused, never waited on), at most [`MAX_CONFIG_BYTES`], UTF-8, then the engine's
//!   parser.
//!   Every failure is a [`LoadError`]; its `Display` puts one problem on each line, each
//!   `FILE:LINE:COLUMN: …`, so that editors and terminals can jump to it.
//!
//! ```
//! use loopguard_config::{Defaults, Source};
//!
//! // No --config and no LOOPGUARD_CONFIG: the defaults of a live guard.
//! let source = Source::resolve_from(None, None, Defaults::Live);
//! let config = source.load()?;
//! assert!(config.global().detectors_enabled());
//! assert_eq!(source.to_string(), "no config file (live defaults)");
//! # Ok::<(), loopguard_config::LoadError>(())
//! ```

#![forbid(unsafe_code)]
#![warn(missing_docs)]

use std::ffi::OsString;
use std::fmt;
use std::path::{Path, PathBuf};

use loopguard::{ConfigError, ConfigSet};

mod file;

pub use file::{read_capped, ReadError};

/// The environment variable naming the config file when `--config` is not given.
pub const ENV: &str = "LOOPGUARD_CONFIG";

/// Largest config file read (4 MiB). A loop-detection document is a few hundred bytes and a
/// whole OpenClaw gateway config a few dozen kilobytes; anything this large is the wrong
/// file (a log, a transcript), and reading it whole would only cost memory.
pub const MAX_CONFIG_BYTES: u64 = 4 << 20;

/// What applies when no config file is given.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub enum Defaults {
    /// Detection on at OpenClaw's documented thresholds, as if the document were
    /// `{ tools: { loopDetection: { enabled: true } } }`: whoever puts a guard in front of
    /// live calls wants it to guard. The default of a host.
    #[default]
    Live,
    /// SPEC §7: the document `{}`, `enabled` unset (rolling detectors off, post-compaction
    /// guard on), so that `replay` answers exactly what the conformance vectors expect.
    Spec,
}

impl Defaults {
    /// The config these defaults stand for.
    pub fn config(self) -> ConfigSet {
        match self {
            Self::Live => ConfigSet::enabled_defaults(),
            Self::Spec => ConfigSet::default(),
        }
    }

    /// `live defaults` or `SPEC §7 defaults`.
    pub fn name(self) -> &'static str {
        match self {
            Self::Live => "live defaults",
            Self::Spec => "SPEC §7 defaults",
        }
    }
}

/// Where the config in force comes from.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub enum Source {
    /// `--config FILE`.
    Flag(PathBuf),
    /// The [`ENV`] variable.
    Env(PathBuf),
    /// No file: the defaults.
    Defaults(Defaults),
}

impl Source {
    /// The flag's file, else the one [`ENV`] names, else `defaults`.
    pub fn resolve(flag: Option<PathBuf>, defaults: Defaults) -> Self {
        Self::resolve_from(flag, std::env::var_os(ENV), defaults)
    }

    /// [`Source::resolve`] with the variable's value given (an empty value counts as
    /// unset, as `LOOPGUARD_CONFIG= loopguard …` means "no file").
    pub fn resolve_from(flag: Option<PathBuf>, env: Option<OsString>, defaults: Defaults) -> Self {
        match (flag, env) {
            (Some(path), _) => Self::Flag(path),
            (None, Some(value)) if !value.is_empty() => Self::Env(PathBuf::from(value)),
            (None, _) => Self::Defaults(defaults),
        }
    }

    /// The file, if there is one.
    pub fn path(&self) -> Option<&Path> {
        match self {
            Self::Flag(path) | Self::Env(path) => Some(path),
            Self::Defaults(_) => None,
        }
    }

    /// Reads the file, or builds the defaults.
    pub fn load(&self) -> Result<ConfigSet, LoadError> {
        match self {
            Self::Flag(path) | Self::Env(path) => read(path),
            Self::Defaults(defaults) => Ok(defaults.config()),
        }
    }
}

impl fmt::Display for Source {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Flag(path) => write!(f, "{}", path.display()),
            Self::Env(path) => write!(f, "{} (from {ENV})", path.display()),
            Self::Defaults(defaults) => write!(f, "no config file ({})", defaults.name()),
        }
    }
}

/// Reads `path` when given, else builds `defaults`: for hosts that keep the path of their
/// file (the hooks, the server's reload).
pub fn load(path: Option<&Path>, defaults: Defaults) -> Result<ConfigSet, LoadError> {
    match path {
        Some(path) => read(path),
        None => Ok(defaults.config()),
    }
}

/// Reads and parses one config file.
pub fn read(path: &Path) -> Result<ConfigSet, LoadError> {
    let text = read_text(path)?;
    Ok(ConfigSet::parse_named(
        &text,
        Some(&path.display().to_string()),
    )?)
}

/// A config file's text: a regular file of at most [`MAX_CONFIG_BYTES`], UTF-8.
pub fn read_text(path: &Path) -> Result<String, LoadError> {
    let bytes = read_capped(path, MAX_CONFIG_BYTES).map_err(|e| match e {
        ReadError::TooLarge { limit } => LoadError::TooLarge {
            path: path.to_owned(),
            limit,
        },
        ReadError::Io(source) => LoadError::Read {
            path: path.to_owned(),
            source,
        },
    })?;
    String::from_utf8(bytes).map_err(|e| LoadError::NotUtf8 {
        path: path.to_owned(),
        offset: e.utf8_error().valid_up_to(),
    })
}

/// Why a config could not be loaded. `Display` gives one problem per line.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum LoadError {
    /// The file cannot be opened or read, or is not a regular file.
    #[error("cannot read {}: {source}", path.display())]
    Read {
        /// The file.
        path: PathBuf,
        /// What the system said.
        source: std::io::Error,
    },
    /// The file is larger than [`MAX_CONFIG_BYTES`].
    #[error("{}: larger than {limit} bytes, which no config document is (is it the right file?)", path.display())]
    TooLarge {
        /// The file.
        path: PathBuf,
        /// The cap.
        limit: u64,
    },
    /// The file is not UTF-8 text.
    #[error("{}: not valid UTF-8 (invalid byte at offset {offset})", path.display())]
    NotUtf8 {
        /// The file.
        path: PathBuf,
        /// Where the first invalid byte is.
        offset: usize,
    },
    /// The document has problems: every one, each on its own line with file, line and
    /// column.
    #[error(transparent)]
    Invalid(#[from] ConfigError),
}

impl LoadError {
    /// How many problems there are (one, unless the document itself has several).
    pub fn problems(&self) -> usize {
        match self {
            Self::Invalid(e) => e.issues.len().max(1),
            _ => 1,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use loopguard::config::Enabled;

    fn write(dir: &tempfile::TempDir, name: &str, bytes: &[u8]) -> PathBuf {
        let path = dir.path().join(name);
        std::fs::write(&path, bytes).unwrap();
        path
    }

    #[test]
    fn the_flag_wins_then_the_variable_then_the_defaults() {
        let flag = Some(PathBuf::from("a.json5"));
        let env = Some(OsString::from("b.json5"));
        assert_eq!(
            Source::resolve_from(flag.clone(), env.clone(), Defaults::Spec),
            Source::Flag("a.json5".into())
        );
        assert_eq!(
            Source::resolve_from(None, env, Defaults::Spec),
            Source::Env("b.json5".into())
        );
        assert_eq!(
            Source::resolve_from(None, Some(OsString::new()), Defaults::Spec),
            Source::Defaults(Defaults::Spec)
        );
        assert_eq!(
            Source::resolve_from(None, None, Defaults::Live),
            Source::Defaults(Defaults::Live)
        );
    }

    #[test]
    fn the_two_defaults() {
        let live = Defaults::Live.config();
        assert_eq!(live.global().enabled(), Enabled::On);
        assert_eq!(
            live,
            ConfigSet::parse("{ tools: { loopDetection: { enabled: true } } }").unwrap()
        );
        let spec = Defaults::Spec.config();
        assert_eq!(spec.global().enabled(), Enabled::Unset);
        assert_eq!(spec, ConfigSet::parse("{}").unwrap());
        // Same thresholds either way: only the switch differs.
        assert_eq!(
            (
                live.global().warning_threshold(),
                live.global().critical_threshold()
            ),
            (
                spec.global().warning_threshold(),
                spec.global().critical_threshold()
            )
        );
    }

    #[test]
    fn sources_say_where_the_config_came_from() {
        assert_eq!(Source::Flag("c.json5".into()).to_string(), "c.json5");
        assert_eq!(
            Source::Env("c.json5".into()).to_string(),
            "c.json5 (from LOOPGUARD_CONFIG)"
        );
        assert_eq!(
            Source::Defaults(Defaults::Spec).to_string(),
            "no config file (SPEC §7 defaults)"
        );
    }

    #[test]
    fn reads_a_file() {
        let dir = tempfile::tempdir().unwrap();
        let path = write(
            &dir,
            "c.json5",
            b"{ tools: { loopDetection: { enabled: true, warningThreshold: 3 } } }",
        );
        let set = Source::Flag(path.clone()).load().unwrap();
        assert_eq!(set.global().warning_threshold(), 3);
        assert_eq!(load(Some(&path), Defaults::Spec).unwrap(), set);
        assert_eq!(load(None, Defaults::Spec).unwrap(), ConfigSet::default());
    }

    #[test]
    fn every_problem_on_its_own_line_with_its_position() {
        let dir = tempfile::tempdir().unwrap();
        let path = write(
            &dir,
            "bad.json5",
            b"{ tools: { loopDetection: {\n  warningThreshold: -1,\n  repeatThreshold: 3,\n} } }",
        );
        let e = read(&path).unwrap_err();
        assert!(matches!(e, LoadError::Invalid(_)));
        assert_eq!(e.problems(), 2);
        let text = e.to_string();
        let lines: Vec<&str> = text.lines().collect();
        let name = path.display().to_string();
        assert_eq!(lines.len(), 2, "{text}");
        assert!(lines[0].starts_with(&format!("{name}:2:")), "{text}");
        assert!(lines[0].contains("warningThreshold"), "{text}");
        assert!(lines[1].starts_with(&format!("{name}:3:")), "{text}");
        assert!(lines[1].contains("did you mean"), "{text}");
    }

    #[test]
    fn unreadable_huge_and_binary_files_are_typed_errors() {
        let dir = tempfile::tempdir().unwrap();
        let missing = dir.path().join("missing.json5");
        let e = read(&missing).unwrap_err();
        assert!(matches!(&e, LoadError::Read { path, .. } if *path == missing));
        assert!(e.to_string().starts_with("cannot read "), "{e}");

        let huge = write(
            &dir,
            "huge.json5",
            &vec![b' '; MAX_CONFIG_BYTES as usize + 1],
        );
        let e = read(&huge).unwrap_err();
        assert!(
            matches!(
                e,
                LoadError::TooLarge {
                    limit: MAX_CONFIG_BYTES,
                    ..
                }
            ),
            "{e}"
        );
        // Exactly at the cap is read (and is then a syntax error: all blanks).
        let at_cap = write(&dir, "cap.json5", &vec![b' '; MAX_CONFIG_BYTES as usize]);
        assert!(matches!(read(&at_cap), Err(LoadError::Invalid(_))));

        let binary = write(&dir, "bin.json5", b"{ \xff }");
        let e = read(&binary).unwrap_err();
        assert!(matches!(e, LoadError::NotUtf8 { offset: 2, .. }), "{e}");

        let e = read(dir.path()).unwrap_err();
        assert!(matches!(e, LoadError::Read { .. }), "a directory: {e}");
    }
}
