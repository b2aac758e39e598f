//! The ceiling of the load benchmark: an axum server whose only work is to parse the
//! request body as JSON (the same bodies `loopguard serve` gets) and answer a constant
//! answer of the same shape. Same runtime, same TCP settings, same body limit.
//!
//! ```sh
//! cargo run --release -p loopguard-server --example ceiling -- 127.0.0.1:0
//! ```
//! prints `listening on http://ADDR` and serves until killed.

use std::io::Write;

use axum::body::Bytes;
use axum::extract::DefaultBodyLimit;
use axum::http::{header, StatusCode};
use axum::response::IntoResponse;
use axum::routing::post;
use axum::serve::ListenerExt;
use axum::Router;

const ANSWER: &str = r#"{"seq":1,"type":"call","session":"s","run":"r","verdict":"allow"}"#;

async fn parse_only(body: Bytes) -> impl IntoResponse {
    match serde_json::from_slice::<serde_json::Value>(&body) {
        Ok(value) => {
            std::hint::black_box(value);
            (
                StatusCode::OK,
                [(header::CONTENT_TYPE, "application/json")],
                ANSWER,
            )
        }
        Err(_) => (
            StatusCode::BAD_REQUEST,
            [(header::CONTENT_TYPE, "application/json")],
            r#"{"error":"invalid JSON"}"#,
        ),
    }
}

fn main() -> std::io::Result<()> {
    let addr = std::env::args()
        .nth(1)
        .unwrap_or_else(|| "127.0.0.1:0".into());
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()?;
    runtime.block_on(async {
        let listener = tokio::net::TcpListener::bind(&addr).await?;
        let local = listener.local_addr()?;
        let app = Router::new()
            .route("/v1/events", post(parse_only))
            .layer(DefaultBodyLimit::max(8 << 20));
        println!("listening on http://{local}");
        std::io::stdout().flush()?;
        let listener = listener.tap_io(|tcp| {
            let _ = tcp.set_nodelay(true);
        });
        axum::serve(listener, app).await
    })
}
