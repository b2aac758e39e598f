//! Bearer tokens: where they come from, and the constant-time check of every request.

use std::path::{Path, PathBuf};

use axum::http::{header, HeaderMap, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use sha2::{Digest, Sha256};
use subtle::ConstantTimeEq;

use crate::error::ApiError;

/// Longest token accepted (bytes).
pub const MAX_TOKEN_BYTES: usize = 4096;

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
    pub fn load(&self) -> Result<Option<Token>, String> {
        match self {
            Self::None => Ok(None),
            Self::Value(v) => Token::new(v).map(Some),
            Self::File(path) => read_token_file(path).map(Some),
        }
    }
}

fn read_token_file(path: &Path) -> Result<Token, String> {
    let text = std::fs::read_to_string(path)
        .map_err(|e| format!("cannot read token file {}: {e}", path.display()))?;
    Token::new(&text).map_err(|e| format!("token file {}: {e}", path.display()))
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
    pub fn new(text: &str) -> Result<Self, String> {
        let text = text.trim();
        if text.is_empty() {
            return Err("the token is empty".into());
        }
        if text.len() > MAX_TOKEN_BYTES {
            return Err(format!("the token is longer than {MAX_TOKEN_BYTES} bytes"));
        }
        if !text.bytes().all(|b| b.is_ascii_graphic()) {
            return Err("the token must be visible ASCII characters, without spaces".into());
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
        unauthorized(&self.to_string())
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

fn unauthorized(message: &str) -> Response {
    let mut response = ApiError::new(StatusCode::UNAUTHORIZED, message).into_response();
    response.headers_mut().insert(
        header::WWW_AUTHENTICATE,
        HeaderValue::from_static("Bearer realm=\"loopguard\""),
    );
    response
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
        assert!(Token::new("  \n").is_err());
        assert!(Token::new("two words").is_err());
        assert!(Token::new(&"x".repeat(MAX_TOKEN_BYTES + 1)).is_err());
        assert!(format!("{:?}", Token::new("abc").unwrap()).contains(".."));
    }

    #[test]
    fn token_files_are_read_and_trimmed() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("token");
        std::fs::write(&path, "abc123\n").unwrap();
        let token = TokenSource::File(path.clone()).load().unwrap().unwrap();
        assert!(token.matches(b"abc123"));
        assert!(TokenSource::File(dir.path().join("missing"))
            .load()
            .unwrap_err()
            .contains("cannot read token file"));
        assert!(TokenSource::None.load().unwrap().is_none());
    }
}
