//! Paths a tool policy leaves out of a fingerprint (`ignoreArgs`, `ignoreResult`).

/// One step of the path from the root to the value being encoded.
#[derive(Clone, Copy, Debug)]
pub(super) enum Step<'a> {
    Key(&'a [u8]),
    Index,
}

/// The path of an object being filtered: the walk's prefix, then its steps.
pub(super) struct Here<'h, 'a> {
    pub prefix: &'h [&'h str],
    pub path: &'h [Step<'a>],
}

/// Paths to leave out of a fingerprint: bare names at any depth, dotted paths anchored at
/// the root (`details.meta.requestId`, `details.items.*.ts`; `*` is any key or index, a
/// leading `$.` is allowed).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct PathSet {
    anywhere: Vec<Box<str>>,
    anchored: Vec<Vec<Option<Box<str>>>>,
    /// The paths as written, for reports.
    written: Vec<Box<str>>,
}

impl PathSet {
    /// Compiles paths; an empty one is an error.
    pub fn parse<'s>(paths: impl IntoIterator<Item = &'s str>) -> Result<Self, String> {
        let mut set = Self::default();
        for raw in paths {
            set.written.push(raw.into());
            let path = raw.strip_prefix("$.").unwrap_or(raw).replace("[*]", ".*");
            if path.is_empty() || path.split('.').any(str::is_empty) {
                return Err(format!("`{raw}` is not a key or a dotted path"));
            }
            if !path.contains('.') {
                set.anywhere.push(path.into());
            } else {
                set.anchored.push(
                    path.split('.')
                        .map(|seg| (seg != "*").then(|| seg.into()))
                        .collect(),
                );
            }
        }
        Ok(set)
    }

    /// The paths as written.
    pub(crate) fn written(&self) -> impl Iterator<Item = &str> {
        self.written.iter().map(|p| &**p)
    }

    /// Whether the set is empty.
    pub fn is_empty(&self) -> bool {
        self.anywhere.is_empty() && self.anchored.is_empty()
    }

    pub(super) fn has_anchored(&self) -> bool {
        !self.anchored.is_empty()
    }

    /// Whether a root-level member named `key` is left out (used for `text`).
    pub(crate) fn drops_root(&self, key: &str) -> bool {
        self.anywhere.iter().any(|k| &**k == key)
            || self
                .anchored
                .iter()
                .any(|p| p.len() == 1 && p[0].as_deref().is_none_or(|s| s == key))
    }

    pub(super) fn drops(&self, here: &Here<'_, '_>, key: &[u8]) -> bool {
        if self.anywhere.iter().any(|k| k.as_bytes() == key) {
            return true;
        }
        let depth = here.prefix.len() + here.path.len() + 1;
        self.anchored.iter().any(|pattern| {
            pattern.len() == depth
                && pattern
                    .last()
                    .is_some_and(|s| s.as_deref().is_none_or(|s| s.as_bytes() == key))
                && pattern[..depth - 1].iter().enumerate().all(|(i, seg)| {
                    let Some(want) = seg.as_deref() else {
                        return true;
                    };
                    if i < here.prefix.len() {
                        here.prefix[i] == want
                    } else {
                        matches!(here.path[i - here.prefix.len()], Step::Key(k) if k == want.as_bytes())
                    }
                })
        })
    }
}
