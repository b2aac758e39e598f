//! Bearer tokens: where they come from, and the constant-time check of every request.

use std::path::{Path, PathBuf};

use axum::http::{header, HeaderMap, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use loopguard_config::{read_capped, ReadError};
use sha2::{Digest, Sha256};
use subtle::ConstantTimeEq;

use crate::error::ApiError;

/// Longest token accepted (bytes).
pub const MAX_TOKEN_BYTES: usize = 4096;

/// Longest token file read (bytes): a token and room for surrounding whitespace. A file
/// beyond it (a log file given by mistake) is refused without being read whole; what is
/// not a regular file (a FIFO, a device) is refused without being read at all.
pub const MAX_TOKEN_FILE_BYTES: u64 = 64 << 10;

/// Where the token comes from.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub enum TokenSource {
    /// No token: requests are not authenticated (fine on loopback).
    #[default]
    None,
    /// A file holding the token (surrounding whitespace ignored); re-read on reload.
    File(PathBuf),
    /// The token itself (for example from `LOOPGUARD_TOKEN`).
    Value(String),
}

impl TokenSource {
    /// Reads the token; `Ok(None)` when there is none to read.
    pub fn load(&self) -> Result<Option<Token>, TokenError> {
        match self {
            Self::None => Ok(None),
            Self::Value(v) => Token::new(v).map(Some),
            Self::File(path) => read_token_file(path).map(Some),
        }
    }
}

fn read_token_file(path: &Path) -> Result<Token, TokenError> {
    let in_file = |problem: TokenProblem| TokenError::File {
        path: path.to_owned(),
        problem,
    };
    let bytes = read_capped(path, MAX_TOKEN_FILE_BYTES).map_err(|e| match e {
        ReadError::Io(source) => TokenError::Unreadable {
            path: path.to_owned(),
            source,
        },
        ReadError::TooLarge { limit } => in_file(TokenProblem::FileTooLarge { limit }),
    })?;
    let text = String::from_utf8(bytes).map_err(|_| in_file(TokenProblem::NotVisibleAscii))?;
    Token::new(&text).map_err(|e| match e {
        TokenError::Invalid(problem) => in_file(problem),
        other => other,
    })
}

/// What is wrong with a token.
#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum TokenProblem {
    /// Nothing but whitespace.
    #[error("the token is empty")]
    Empty,
    /// Longer than [`MAX_TOKEN_BYTES`].
    #[error("the token is longer than {MAX_TOKEN_BYTES} bytes")]
    TooLong,
    /// Characters that cannot travel in a header.
    #[error("the token must be visible ASCII characters, without spaces")]
    NotVisibleAscii,
    /// A token file larger than [`MAX_TOKEN_FILE_BYTES`].
    #[error("the file is larger than {limit} bytes, too large for a token")]
    FileTooLarge {
        /// The limit.
        limit: u64,
    },
}

/// Why a token could not be loaded.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum TokenError {
    /// The token given is not usable.
    #[error(transparent)]
    Invalid(TokenProblem),
    /// The token file cannot be read.
    #[error("cannot read token file {}: {source}", path.display())]
    Unreadable {
        /// The file.
        path: PathBuf,
        /// Why.
        source: std::io::Error,
    },
    /// The token file holds no usable token.
    #[error("token file {}: {problem}", path.display())]
    File {
        /// The file.
        path: PathBuf,
        /// What is wrong.
        problem: TokenProblem,
    },
}

/// A bearer token, kept as its SHA-256 digest so that comparing it takes the same time
/// whatever the length and content of the candidate.
#[derive(Clone)]
pub struct Token {
    digest: [u8; 32],
}

impl std::fmt::Debug for Token {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Token(..)")
    }
}

impl Token {
    /// A token from its text (surrounding whitespace ignored). It must be non-empty, at
    /// most [`MAX_TOKEN_BYTES`] long, and made of visible ASCII (it travels in a header).
    pub fn new(text: &str) -> Result<Self, TokenError> {
        let text = text.trim();
        let problem = if text.is_empty() {
            Some(TokenProblem::Empty)
        } else if text.len() > MAX_TOKEN_BYTES {
            Some(TokenProblem::TooLong)
        } else if !text.bytes().all(|b| b.is_ascii_graphic()) {
            Some(TokenProblem::NotVisibleAscii)
        } else {
            None
        };
        if let Some(problem) = problem {
            return Err(TokenError::Invalid(problem));
        }
        Ok(Self {
            digest: Sha256::digest(text.as_bytes()).into(),
        })
    }

    /// Whether `candidate` is this token, in constant time.
    pub fn matches(&self, candidate: &[u8]) -> bool {
        let digest: [u8; 32] = Sha256::digest(candidate).into();
        self.digest.ct_eq(&digest).into()
    }

    /// Checks the `Authorization` header of a request.
    pub fn check(&self, headers: &HeaderMap) -> Result<(), AuthError> {
        let value = headers
            .get(header::AUTHORIZATION)
            .ok_or(AuthError::Missing)?;
        let candidate = strip_bearer(value.as_bytes()).ok_or(AuthError::Malformed)?;
        if self.matches(candidate) {
            Ok(())
        } else {
            Err(AuthError::Invalid)
        }
    }
}

/// Why a request was not let in; answered with 401 and `WWW-Authenticate: Bearer`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum AuthError {
    /// No `Authorization` header.
    #[error("missing bearer token: send the header Authorization: Bearer <token>")]
    Missing,
    /// An `Authorization` header that is not `Bearer <token>`.
    #[error("the Authorization header must be of the form: Bearer <token>")]
    Malformed,
    /// The wrong token.
    #[error("invalid bearer token")]
    Invalid,
}

impl IntoResponse for AuthError {
    fn into_response(self) -> Response {
        let mut response =
            ApiError::new(StatusCode::UNAUTHORIZED, self.to_string()).into_response();
        response.headers_mut().insert(
            header::WWW_AUTHENTICATE,
            HeaderValue::from_static("Bearer realm=\"loopguard\""),
        );
        response
    }
}

/// The token of a `Bearer <token>` header value (scheme case-insensitive).
fn strip_bearer(value: &[u8]) -> Option<&[u8]> {
    let (scheme, rest) = value.split_at_checked(6)?;
    if !scheme.eq_ignore_ascii_case(b"bearer") {
        return None;
    }
    let token = rest.trim_ascii();
    (rest.first() == Some(&b' ') && !token.is_empty()).then_some(token)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn headers(value: &str) -> HeaderMap {
        let mut h = HeaderMap::new();
        h.insert(header::AUTHORIZATION, HeaderValue::from_str(value).unwrap());
        h
    }

    #[test]
    fn checks_the_bearer_header() {
        let token = Token::new(" s3cret\n").unwrap();
        assert!(token.check(&headers("Bearer s3cret")).is_ok());
        assert!(token.check(&headers("bearer s3cret")).is_ok());
        assert!(token.check(&headers("Bearer  s3cret ")).is_ok());
        for bad in [
            "Bearer s3cre",
            "Bearer s3cret2",
            "Basic s3cret",
            "Bearers3cret",
            "Bearer",
        ] {
            let r = token.check(&headers(bad)).unwrap_err().into_response();
            assert_eq!(r.status(), StatusCode::UNAUTHORIZED, "{bad}");
            assert!(r.headers().contains_key(header::WWW_AUTHENTICATE));
        }
        assert_eq!(token.check(&HeaderMap::new()), Err(AuthError::Missing));
        assert_eq!(token.check(&headers("Basic x")), Err(AuthError::Malformed));
        assert_eq!(
            token.check(&headers("Bearer nope")),
            Err(AuthError::Invalid)
        );
    }

    #[test]
    fn rejects_unusable_tokens() {
        let problem = |text: &str| match Token::new(text) {
            Err(TokenError::Invalid(p)) => p,
            other => panic!("{other:?}"),
        };
        assert_eq!(problem("  \n"), TokenProblem::Empty);
        assert_eq!(problem("two words"), TokenProblem::NotVisibleAscii);
        assert_eq!(
            problem(&"x".repeat(MAX_TOKEN_BYTES + 1)),
            TokenProblem::TooLong
        );
        assert!(format!("{:?}", Token::new("abc").unwrap()).contains(".."));
    }

    #[test]
    fn token_files_are_read_trimmed_and_capped() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("token");
        std::fs::write(&path, "abc123\n").unwrap();
        let token = TokenSource::File(path.clone()).load().unwrap().unwrap();
        assert!(token.matches(b"abc123"));
        let missing = TokenSource::File(dir.path().join("missing"))
            .load()
            .unwrap_err();
        assert!(matches!(missing, TokenError::Unreadable { .. }));
        assert!(missing.to_string().contains("cannot read token file"));
        assert!(TokenSource::None.load().unwrap().is_none());
        std::fs::write(&path, "\n").unwrap();
        let empty = TokenSource::File(path.clone()).load().unwrap_err();
        assert!(empty.to_string().ends_with("the token is empty"), "{empty}");
        // A file far beyond any token is not read whole; a device is not read at all.
        std::fs::write(&path, "x".repeat(MAX_TOKEN_FILE_BYTES as usize + 1)).unwrap();
        let large = TokenSource::File(path).load().unwrap_err();
        assert!(
            matches!(
                large,
                TokenError::File {
                    problem: TokenProblem::FileTooLarge { .. },
                    ..
                }
            ),
            "{large}"
        );
        #[cfg(unix)]
        {
            let endless = TokenSource::File("/dev/zero".into()).load().unwrap_err();
            assert!(
                endless.to_string().ends_with("not a regular file"),
                "{endless}"
            );
        }
    }
}
