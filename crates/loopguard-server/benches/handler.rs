//! Micro benchmarks of one request through the router in process (no sockets): what the
//! server adds to the engine, per request.
//!
//! ```sh
//! cargo bench -p loopguard-server --bench handler
//! ```

use std::sync::Arc;

use axum::body::Body;
use axum::http::{header, Request};
use criterion::{criterion_group, criterion_main, Criterion};
use http_body_util::BodyExt;
use loopguard::{ManualClock, Millis};
use loopguard_server::{router, App, Options};
use loopguard_store::{Limits, MemoryStore};
use tower::ServiceExt;

fn requests(c: &mut Criterion) {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .build()
        .unwrap();
    let store = MemoryStore::new(
        Limits::default(),
        Arc::new(ManualClock::new(Millis::new(1000))),
    );
    let app = Arc::new(App::new(store, Options::default()).unwrap());
    let router = router(app);
    let text =
        "fn handle(request: &Request) -> Response { respond(request.id, Status::Ok) }\n".repeat(13);
    let mut group = c.benchmark_group("request");
    let mut i = 0u64;
    group.bench_function("call then result (~1 KiB), JSON, memory store", |b| {
        b.iter(|| {
            i += 1;
            let session = format!("s{}", i % 1024);
            let call = serde_json::json!({"type":"call","session":session,"run":"r","call_id":format!("c{i}"),
                "tool":"read","args":{"path":format!("/src/module_{}/handler.rs", i % 7)}});
            let result = serde_json::json!({"type":"result","session":session,"run":"r","call_id":format!("c{i}"),
                "result":{"content":[{"type":"text","text":text}]}});
            for body in [call, result] {
                let request = Request::post("/v1/events")
                    .header(header::CONTENT_TYPE, "application/json")
                    .body(Body::from(body.to_string()))
                    .unwrap();
                let router = router.clone();
                runtime.block_on(async move {
                    let response = router.oneshot(request).await.unwrap();
                    assert!(response.status().is_success());
                    response.into_body().collect().await.unwrap().to_bytes()
                });
            }
        })
    });
    group.finish();
}

criterion_group!(benches, requests);
criterion_main!(benches);
