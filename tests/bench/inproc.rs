//! `/healthz` against a warm prediction through the router in-process, with
//! no network: what the handler itself costs per request.
//!
//! `cargo bench --bench inproc` starts a PostgreSQL cluster of its own,
//! stores the HTTP benchmark's history, asks every node count 1…600 once (so
//! that the models are warm and their answers kept), then times 200,000
//! requests of each kind, twice, one after the other on one task: `/healthz`,
//! those 600 questions again, and the same questions written too many ways
//! for the service to keep their answers (see `support::with_nodes`).
//! Reported: µs per request, which includes building the request and reading
//! the answer (the same for all). `INPROC_ONLY=<name>` times one kind only,
//! for a profile of it (e.g. `INPROC_ONLY="pred, answer not kept"`).

mod support;
use axum::body::Body;
use axum::http::Request;
use http_body_util::BodyExt;
use std::time::Instant;
use tower::ServiceExt;

fn main() {
    if !support::benchmarking() {
        return;
    }
    let (dir, rt) = support::setup();
    let cluster = support::pg_cluster(&dir.path().join("pg"));
    rt.block_on(async {
        let connect = joulecast::db::embedded_options(cluster.layout()).database("postgres");
        let pool = joulecast::db::pool_options(8)
            .connect_with(connect)
            .await
            .unwrap();
        joulecast::db::migrate(&pool).await.unwrap();
        let token = joulecast::service::tokens::create(
            &pool,
            "b",
            &[joulecast::tokens::Scope::Admin],
            None,
        )
        .await
        .unwrap()
        .token;
        let router = joulecast::http::router(pool, Default::default());
        let call = |method: &str, path: String, body: Option<String>| {
            let router = router.clone();
            let token = token.clone();
            let method = method.to_owned();
            async move {
                let req = Request::builder()
                    .method(method.as_str())
                    .uri(path)
                    .header("authorization", format!("Bearer {token}"))
                    .header("content-type", "application/json")
                    .body(body.map(Body::from).unwrap_or_else(Body::empty))
                    .unwrap();
                let resp = router.oneshot(req).await.unwrap();
                let status = resp.status();
                let _ = resp.into_body().collect().await.unwrap();
                status
            }
        };
        let s = call(
            "POST",
            "/v1/runs/batch".into(),
            Some(support::history_body("bench")),
        )
        .await;
        assert_eq!(s, 200);
        for i in 0..600 {
            call(
                "GET",
                support::with_nodes("/v1/apps/bench/predictions?nodes={n}&metric=ets", i),
                None,
            )
            .await;
        }
        for (name, path) in [
            ("healthz", "/healthz"),
            ("pred", "/v1/apps/bench/predictions?nodes={n}&metric=ets"),
            (
                "pred, answer not kept",
                "/v1/apps/bench/predictions?nodes={u}&metric=ets",
            ),
            ("healthz", "/healthz"),
            ("pred", "/v1/apps/bench/predictions?nodes={n}&metric=ets"),
            (
                "pred, answer not kept",
                "/v1/apps/bench/predictions?nodes={u}&metric=ets",
            ),
        ] {
            if std::env::var("INPROC_ONLY").is_ok_and(|o| o != name) {
                continue;
            }
            let n = 200_000;
            let t = Instant::now();
            for i in 0..n {
                call("GET", support::with_nodes(path, i), None).await;
            }
            println!(
                "{name}: {:.2} µs/request",
                t.elapsed().as_secs_f64() * 1e6 / n as f64
            );
        }
    });
}
