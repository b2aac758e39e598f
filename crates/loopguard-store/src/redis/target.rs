//! Where the Redis store connects: one server or a Redis Cluster, parsed from a URL.

use std::fmt;

/// A Redis deployment to connect to, parsed from a URL:
///
/// - `redis://[[USER]:PASSWORD@]HOST[:PORT][/DB]`: one server (a primary, or a proxy in
///   front of one); `rediss://…` with TLS;
/// - `redis-cluster://[[USER]:PASSWORD@]HOST:PORT[,HOST:PORT…]`: a Redis Cluster, from
///   one or more of its nodes (the others are discovered); `rediss-cluster://…` with TLS.
///
/// The user and password may be percent-encoded. [`RedisTarget`]'s `Display` never shows
/// the password.
#[derive(Clone, PartialEq, Eq)]
pub struct RedisTarget {
    kind: Kind,
    tls: bool,
    /// `user:password@` as given (percent-encoded), or empty.
    userinfo: String,
    /// The user, percent-decoded (for showing).
    user: Option<String>,
    has_password: bool,
}

#[derive(Clone, Debug, PartialEq, Eq)]
enum Kind {
    /// `host[:port][/db]`.
    Single(String),
    /// `host:port` of each seed node.
    Cluster(Vec<String>),
}

impl fmt::Debug for RedisTarget {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "RedisTarget({self})")
    }
}

impl fmt::Display for RedisTarget {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let scheme = match (&self.kind, self.tls) {
            (Kind::Single(_), false) => "redis",
            (Kind::Single(_), true) => "rediss",
            (Kind::Cluster(_), false) => "redis-cluster",
            (Kind::Cluster(_), true) => "rediss-cluster",
        };
        write!(f, "{scheme}://")?;
        match (&self.user, self.has_password) {
            (Some(user), true) => write!(f, "{user}:***@")?,
            (Some(user), false) => write!(f, "{user}@")?,
            (None, true) => f.write_str(":***@")?,
            (None, false) => {}
        }
        match &self.kind {
            Kind::Single(host) => f.write_str(host),
            Kind::Cluster(nodes) => f.write_str(&nodes.join(",")),
        }
    }
}

/// Why a Redis URL was refused. No variant carries the password.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum TargetError {
    /// Not `SCHEME://…`.
    #[error("a Redis store is a URL: redis://HOST:PORT, rediss://HOST:PORT, redis-cluster://HOST:PORT,HOST:PORT,… or rediss-cluster://…")]
    NotAUrl,
    /// A scheme other than the four known ones.
    #[error("unknown Redis URL scheme {0:?}: use redis, rediss, redis-cluster or rediss-cluster")]
    UnknownScheme(String),
    /// `?…` or `#…` in the URL.
    #[error("query strings and fragments are not supported in Redis URLs; give the key prefix with --redis-prefix and a CA with --redis-ca-file")]
    QueryOrFragment,
    /// A host that is empty or holds characters a host cannot.
    #[error("{0:?} is not a host name or address")]
    BadHost(String),
    /// `[` without `]`.
    #[error("{0:?}: unclosed '['")]
    UnclosedBracket(String),
    /// `[]`.
    #[error("{0:?}: empty address")]
    EmptyAddress(String),
    /// A port that is not 1 to 65535.
    #[error("{host:?}: {port:?} is not a port number")]
    BadPort {
        /// The host as given.
        host: String,
        /// The port as given.
        port: String,
    },
    /// A cluster node without its port.
    #[error("{0:?}: cluster nodes are given as HOST:PORT")]
    PortRequired(String),
    /// The `/DB` part is not a number.
    #[error("{0:?} is not a database number")]
    BadDatabase(String),
    /// The user name is not valid percent-encoded UTF-8.
    #[error("the user name is not valid percent-encoded UTF-8")]
    BadUser,
}

impl std::str::FromStr for RedisTarget {
    type Err = TargetError;
    fn from_str(s: &str) -> Result<Self, TargetError> {
        Self::parse(s)
    }
}

impl RedisTarget {
    /// Parses a URL of one of the forms above; the error says what is wrong, without
    /// repeating the password.
    pub fn parse(url: &str) -> Result<Self, TargetError> {
        let url = url.trim();
        let (scheme, rest) = url.split_once("://").ok_or(TargetError::NotAUrl)?;
        let (cluster, tls) = match scheme.to_ascii_lowercase().as_str() {
            "redis" => (false, false),
            "rediss" => (false, true),
            "redis-cluster" => (true, false),
            "rediss-cluster" => (true, true),
            other => return Err(TargetError::UnknownScheme(other.to_owned())),
        };
        if rest.contains(['?', '#']) {
            return Err(TargetError::QueryOrFragment);
        }
        let (userinfo, hosts) = match rest.rsplit_once('@') {
            Some((info, hosts)) => (info, hosts),
            None => ("", rest),
        };
        let (user, has_password) = match userinfo.split_once(':') {
            Some((user, password)) => (user, !password.is_empty()),
            None => (userinfo, false),
        };
        let user = (!user.is_empty())
            .then(|| percent_decode(user))
            .transpose()?;
        let kind = if cluster {
            let nodes: Vec<String> = hosts
                .trim_end_matches('/')
                .split(',')
                .map(str::trim)
                .map(str::to_owned)
                .collect();
            for node in &nodes {
                check_host(node, true)?;
            }
            Kind::Cluster(nodes)
        } else {
            let (host, db) = match hosts.split_once('/') {
                Some((host, db)) => (host, db),
                None => (hosts, ""),
            };
            check_host(host, false)?;
            if !db.is_empty() && db.parse::<u16>().is_err() {
                return Err(TargetError::BadDatabase(db.to_owned()));
            }
            Kind::Single(hosts.trim_end_matches('/').to_owned())
        };
        Ok(Self {
            kind,
            tls,
            userinfo: userinfo.to_owned(),
            user,
            has_password,
        })
    }

    /// Whether this is a Redis Cluster.
    pub fn is_cluster(&self) -> bool {
        matches!(self.kind, Kind::Cluster(_))
    }

    /// Whether connections use TLS.
    pub fn is_tls(&self) -> bool {
        self.tls
    }

    /// Whether the URL carries a password.
    pub fn has_password(&self) -> bool {
        self.has_password
    }

    /// The URL of each node for the `redis` crate (`redis://` or `rediss://`, with the
    /// credentials): one for a single server, the seeds of a cluster.
    pub(crate) fn node_urls(&self) -> Vec<String> {
        let scheme = if self.tls { "rediss" } else { "redis" };
        let at = if self.userinfo.is_empty() { "" } else { "@" };
        let hosts: Vec<&str> = match &self.kind {
            Kind::Single(host) => vec![host.as_str()],
            Kind::Cluster(nodes) => nodes.iter().map(String::as_str).collect(),
        };
        hosts
            .into_iter()
            .map(|host| format!("{scheme}://{}{at}{host}", self.userinfo))
            .collect()
    }
}

/// `host[:port]` (cluster nodes need the port); IPv6 addresses in brackets.
fn check_host(host: &str, port_required: bool) -> Result<(), TargetError> {
    let (name, port) = if let Some(rest) = host.strip_prefix('[') {
        let (addr, after) = rest
            .split_once(']')
            .ok_or_else(|| TargetError::UnclosedBracket(host.to_owned()))?;
        if addr.is_empty() {
            return Err(TargetError::EmptyAddress(host.to_owned()));
        }
        (addr, after.strip_prefix(':'))
    } else {
        match host.rsplit_once(':') {
            Some((name, port)) => (name, Some(port)),
            None => (host, None),
        }
    };
    if name.is_empty() || name.contains(['/', ' ', '@', ',']) {
        return Err(TargetError::BadHost(host.to_owned()));
    }
    match port {
        Some(port) => match port.parse::<u16>() {
            Ok(p) if p > 0 => Ok(()),
            _ => Err(TargetError::BadPort {
                host: host.to_owned(),
                port: port.to_owned(),
            }),
        },
        None if port_required => Err(TargetError::PortRequired(host.to_owned())),
        None => Ok(()),
    }
}

/// Percent-decodes a user name (for display only: the `redis` crate decodes it again
/// from the URL).
fn percent_decode(text: &str) -> Result<String, TargetError> {
    let bytes = text.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        if bytes[i] == b'%' {
            let hex = bytes
                .get(i + 1..i + 3)
                .and_then(|h| std::str::from_utf8(h).ok())
                .and_then(|h| u8::from_str_radix(h, 16).ok())
                .ok_or(TargetError::BadUser)?;
            out.push(hex);
            i += 3;
        } else {
            out.push(bytes[i]);
            i += 1;
        }
    }
    String::from_utf8(out).map_err(|_| TargetError::BadUser)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn single_servers() {
        let t = RedisTarget::parse("redis://127.0.0.1:6380").unwrap();
        assert!(!t.is_cluster() && !t.is_tls() && !t.has_password());
        assert_eq!(t.node_urls(), ["redis://127.0.0.1:6380"]);
        assert_eq!(t.to_string(), "redis://127.0.0.1:6380");

        let t = RedisTarget::parse("rediss://app:s%40cret@cache.internal:6379/2").unwrap();
        assert!(t.is_tls() && t.has_password());
        assert_eq!(
            t.node_urls(),
            ["rediss://app:s%40cret@cache.internal:6379/2"]
        );
        assert_eq!(t.to_string(), "rediss://app:***@cache.internal:6379/2");
        assert!(!format!("{t:?}").contains("cret"));

        let t = RedisTarget::parse("redis://:pw@localhost").unwrap();
        assert_eq!(t.to_string(), "redis://:***@localhost");
        let t = RedisTarget::parse("redis://[::1]:7000/").unwrap();
        assert_eq!(t.node_urls(), ["redis://[::1]:7000"]);
    }

    #[test]
    fn clusters() {
        let t = RedisTarget::parse("redis-cluster://a:7000, b:7001,c:7002").unwrap();
        assert!(t.is_cluster());
        assert_eq!(
            t.node_urls(),
            ["redis://a:7000", "redis://b:7001", "redis://c:7002"]
        );
        assert_eq!(t.to_string(), "redis-cluster://a:7000,b:7001,c:7002");
        let t = RedisTarget::parse("rediss-cluster://u:p@a:7000").unwrap();
        assert_eq!(t.node_urls(), ["rediss://u:p@a:7000"]);
        assert_eq!(t.to_string(), "rediss-cluster://u:***@a:7000");
    }

    #[test]
    fn refusals_say_why_and_hide_the_password() {
        for (url, why) in [
            ("localhost:6379", "a Redis store is a URL"),
            ("http://x", "unknown Redis URL scheme"),
            ("redis://", "not a host name"),
            ("redis://h:0", "not a port"),
            ("redis://h:99999", "not a port"),
            ("redis://h/x", "not a database number"),
            ("redis-cluster://a", "HOST:PORT"),
            ("redis-cluster://a:1,,b:2", "not a host name"),
            ("redis://h?prefix=x", "--redis-prefix"),
            ("redis://[::1:7000", "unclosed"),
        ] {
            let e = RedisTarget::parse(url).unwrap_err().to_string();
            assert!(e.contains(why), "{url}: {e}");
        }
        let e = RedisTarget::parse("redis://u:hunter2@h:notaport").unwrap_err();
        assert_eq!(
            e,
            TargetError::BadPort {
                host: "h:notaport".into(),
                port: "notaport".into()
            }
        );
        assert!(!e.to_string().contains("hunter2"), "{e}");
    }
}
