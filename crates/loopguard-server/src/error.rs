//! Errors as HTTP answers: a status and `{"error": "..."}` that says what is wrong; and the
//! status of each store failure.

use axum::http::{header, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use loopguard_events::Answer;
use loopguard_store::StoreError;
use serde::Serialize;

/// An error answer. Its body is always a JSON object with an `error` string; an invalid
/// event also carries its `seq`, so the body is exactly what `loopguard replay` prints for
/// that line.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ApiError {
    status: StatusCode,
    message: String,
    seq: Option<u64>,
}

/// The body of an [`ApiError`] that is not about one event.
#[derive(Serialize)]
struct ErrorBody<'a> {
    error: &'a str,
}

impl ApiError {
    /// An error with a status and a message.
    pub fn new(status: StatusCode, message: impl Into<String>) -> Self {
        Self {
            status,
            message: message.into(),
            seq: None,
        }
    }

    /// 400: the request is malformed.
    pub fn bad_request(message: impl Into<String>) -> Self {
        Self::new(StatusCode::BAD_REQUEST, message)
    }

    /// 400 for one event of the request, numbered `seq`.
    pub fn invalid_event(seq: u64, message: impl Into<String>) -> Self {
        Self {
            seq: Some(seq),
            ..Self::bad_request(message)
        }
    }

    /// The status.
    pub fn status(&self) -> StatusCode {
        self.status
    }

    /// The message.
    pub fn message(&self) -> &str {
        &self.message
    }
}

/// The status a store failure is answered with: 429 for the session limit (the guard is
/// full), 500 for settings the store refuses (the server is misconfigured), 503 for
/// everything else (the store failed for now, or is closing).
pub(crate) fn status_of(e: &StoreError) -> StatusCode {
    match e {
        StoreError::SessionLimit { .. } => StatusCode::TOO_MANY_REQUESTS,
        StoreError::InvalidSettings { .. } => StatusCode::INTERNAL_SERVER_ERROR,
        _ => StatusCode::SERVICE_UNAVAILABLE,
    }
}

impl From<StoreError> for ApiError {
    fn from(e: StoreError) -> Self {
        Self::new(status_of(&e), e.to_string())
    }
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        // An invalid event is answered with the very line `replay` prints for it (the same
        // serializer, so the same key order: `seq` first).
        let body = match self.seq {
            Some(seq) => serde_json::to_vec(&Answer::Invalid {
                seq,
                error: self.message,
            }),
            None => serde_json::to_vec(&ErrorBody {
                error: &self.message,
            }),
        };
        // Serializing strings and a number cannot fail.
        let mut response = json_response(self.status, body.unwrap_or_default());
        if matches!(
            self.status,
            StatusCode::SERVICE_UNAVAILABLE | StatusCode::TOO_MANY_REQUESTS
        ) {
            response
                .headers_mut()
                .insert(header::RETRY_AFTER, HeaderValue::from_static("1"));
        }
        if self.status == StatusCode::REQUEST_TIMEOUT {
            // The rest of the body may still come: this connection is done.
            response
                .headers_mut()
                .insert(header::CONNECTION, HeaderValue::from_static("close"));
        }
        response
    }
}

/// A response with a JSON body already serialized.
pub(crate) fn json_response(status: StatusCode, body: Vec<u8>) -> Response {
    let mut response = (status, body).into_response();
    response.headers_mut().insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("application/json"),
    );
    response
}

#[cfg(test)]
mod tests {
    use super::*;
    use http_body_util::BodyExt;

    async fn bytes(r: Response) -> Vec<u8> {
        r.into_body().collect().await.unwrap().to_bytes().to_vec()
    }

    async fn body(r: Response) -> serde_json::Value {
        serde_json::from_slice(&bytes(r).await).unwrap()
    }

    #[tokio::test]
    async fn errors_are_json_objects() {
        let r = ApiError::invalid_event(3, "call without tool").into_response();
        assert_eq!(r.status(), StatusCode::BAD_REQUEST);
        assert_eq!(r.headers()[header::CONTENT_TYPE], "application/json");
        // Byte for byte the line `loopguard replay` prints for an invalid line 3.
        let mut replayed = Vec::new();
        let mut replayer = loopguard_events::Replayer::new(loopguard::ConfigSet::default(), None);
        let input = "\n\n{\"type\":\"call\",\"session\":\"s\"}\n";
        loopguard_events::replay(&mut replayer, input.as_bytes(), &mut replayed, 1 << 20).unwrap();
        let line = String::from_utf8(replayed).unwrap();
        assert_eq!(line, "{\"seq\":3,\"error\":\"call without tool\"}\n");
        assert_eq!(String::from_utf8(bytes(r).await).unwrap(), line.trim_end());
        let r = ApiError::from(StoreError::SessionLimit { limit: 5 }).into_response();
        assert_eq!(r.status(), StatusCode::TOO_MANY_REQUESTS);
        assert_eq!(r.headers()[header::RETRY_AFTER], "1");
        assert!(body(r).await["error"]
            .as_str()
            .unwrap()
            .contains("session limit"));
    }

    #[test]
    fn store_failures_map_to_statuses() {
        assert_eq!(
            status_of(&StoreError::SessionLimit { limit: 1 }),
            StatusCode::TOO_MANY_REQUESTS
        );
        for unavailable in [
            StoreError::unavailable("disk full"),
            StoreError::Closed,
            StoreError::Contention { attempts: 3 },
            StoreError::NotAttempted,
            StoreError::Deadline {
                limit: std::time::Duration::from_secs(1),
            },
        ] {
            assert_eq!(status_of(&unavailable), StatusCode::SERVICE_UNAVAILABLE);
        }
        assert_eq!(
            status_of(&StoreError::invalid("bad prefix")),
            StatusCode::INTERNAL_SERVER_ERROR
        );
    }
}
