//! Where the database lives by default.

use std::ffi::OsString;
use std::path::PathBuf;

/// The default database file: `$XDG_DATA_HOME/loopguard/loopguard.db`, or
/// `$HOME/.local/share/loopguard/loopguard.db` when `XDG_DATA_HOME` is unset, empty or not
/// an absolute path (as the XDG Base Directory specification says). An error when neither
/// variable gives a directory.
pub fn default_db_path() -> Result<PathBuf, String> {
    default_db_path_from(|name| std::env::var_os(name))
}

/// [`default_db_path`] with the environment given as a function (for tests).
pub fn default_db_path_from(env: impl Fn(&str) -> Option<OsString>) -> Result<PathBuf, String> {
    let absolute = |name: &str| env(name).map(PathBuf::from).filter(|p| p.is_absolute());
    let base = absolute("XDG_DATA_HOME")
        .or_else(|| absolute("HOME").map(|home| home.join(".local/share")))
        .ok_or_else(|| {
            "no default database location: neither XDG_DATA_HOME nor HOME is an absolute path; \
             give --db PATH (or LOOPGUARD_DB), or --memory"
                .to_owned()
        })?;
    Ok(base.join("loopguard").join("loopguard.db"))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn path(vars: &[(&str, &str)]) -> Result<PathBuf, String> {
        default_db_path_from(|name| {
            vars.iter()
                .find(|(k, _)| *k == name)
                .map(|(_, v)| OsString::from(v))
        })
    }

    #[test]
    fn follows_xdg_then_home() {
        assert_eq!(
            path(&[("XDG_DATA_HOME", "/data"), ("HOME", "/home/u")]).unwrap(),
            PathBuf::from("/data/loopguard/loopguard.db")
        );
        assert_eq!(
            path(&[("XDG_DATA_HOME", "relative"), ("HOME", "/home/u")]).unwrap(),
            PathBuf::from("/home/u/.local/share/loopguard/loopguard.db")
        );
        assert_eq!(
            path(&[("HOME", "/home/u")]).unwrap(),
            PathBuf::from("/home/u/.local/share/loopguard/loopguard.db")
        );
        assert!(path(&[]).unwrap_err().contains("--db"));
    }
}
