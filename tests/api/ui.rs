//! The dashboard in a real browser (issue 16): Debian's Chromium, driven by
//! playwright-core (npm, pinned in tests/ui/package-lock.json), loads every
//! page of this build of the service populated with 1,000 applications and
//! 1,000 running jobs (`tests/ui/check.mjs`). It signs in, fails on any
//! console error or failed request, checks the numbers shown against the
//! API, reports how long every page takes (navigation start to the load
//! event; `UI_TIME_LIMIT_MS=1000` makes a slower page fail, as the
//! benchmark in docs/benchmarks.md runs it) and saves screenshots: to
//! `JOULECAST_UI_SCREENSHOTS` when set (the README's are made with
//! `JOULECAST_UI_SCREENSHOTS=$PWD/docs/img`), else under `target/`.
//!
//! Needs Node.js with npm (the registry reachable on the first run) and
//! Chromium, which is installed when missing (as root, or with passwordless
//! sudo).

use std::path::Path;
use std::process::Command;

use serde_json::{Value, json};

use crate::embedded::{Service, admin_token, data_dir, http};
use crate::support::{ensure_installed, run_ok};

const HERE: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/ui");
const APPS: usize = 1000;
const JOBS: usize = 1000;
/// Applications the running jobs belong to (each is fitted when its first
/// job starts).
const BUSY_APPS: usize = 40;
const ACCOUNTS: usize = 20;
const NODES: usize = 64;

/// tests/ui copied under target/ with its node_modules installed from the
/// lock file (again when the lock file changes).
fn checker() -> std::path::PathBuf {
    let dir = Path::new(env!("CARGO_TARGET_TMPDIR")).join("ui-check");
    std::fs::create_dir_all(&dir).unwrap();
    let lock = std::fs::read(Path::new(HERE).join("package-lock.json")).unwrap();
    let installed = std::fs::read(dir.join("package-lock.json")).ok();
    for file in ["package.json", "package-lock.json", "check.mjs"] {
        std::fs::copy(Path::new(HERE).join(file), dir.join(file)).unwrap();
    }
    if installed.as_deref() != Some(&lock[..]) || !dir.join("node_modules").exists() {
        run_ok(
            Command::new("npm")
                .args(["ci", "--no-audit", "--no-fund", "--loglevel=error"])
                .current_dir(&dir),
        );
    }
    dir
}

#[test]
fn every_dashboard_page_renders_in_chromium_and_shows_what_the_api_says() {
    ensure_installed("chromium", &["chromium"]);
    let checker = checker();
    let (_dir, data, _) = data_dir();
    let service = Service::start(&data);
    let (port, admin) = (service.port, admin_token(&data));
    let call = |method: &str, path: &str, body: Value| -> Value {
        let (status, reply) = http(port, method, path, Some(&admin), Some(&body));
        assert!(
            (200..300).contains(&status),
            "{method} {path}: {status} {reply}"
        );
        serde_json::from_str(&reply).unwrap_or(Value::Null)
    };

    // Nodes in two partitions, with idle powers and samples of the
    // reference workload (one of them drawing far more).
    for i in 1..=NODES {
        let partition = if i <= 48 { "batch" } else { "gpu" };
        call(
            "PUT",
            &format!("/v1/nodes/cn{i:02}"),
            json!({"partition": partition, "idle_power_w": 90.0 + (i % 7) as f64}),
        );
    }
    let now = chrono::Utc::now().to_rfc3339();
    let samples: Vec<Value> = (1..=NODES)
        .map(|i| {
            let power = 400.0 + ((i * 37) % 23) as f64 + if i == 13 { 120.0 } else { 0.0 };
            json!({"node": format!("cn{i:02}"), "workload": "reference", "avg_power_w": power,
                   "measured_at": now})
        })
        .collect();
    let stored = call("POST", "/v1/nodes/samples", json!({"samples": samples}));
    assert_eq!(stored["created"], json!(NODES), "{stored:#}");
    call("PUT", "/v1/power-caps/site", json!({"limit_w": 2.0e6}));
    call(
        "PUT",
        "/v1/power-caps/batch",
        json!({"limit_w": 1.5e6, "partition": "batch"}),
    );
    for a in 1..=ACCOUNTS {
        call(
            "PUT",
            &format!("/v1/budgets/proj-{a:02}"),
            json!({"limit_j": 5.0e9 * a as f64, "period": "month"}),
        );
    }
    // 1,000 applications measured at 1, 4 and 16 nodes, and one measured
    // three times at six counts.
    let mut runs = Vec::new();
    for i in 1..=APPS {
        for (k, nodes) in [1u32, 4, 16].into_iter().enumerate() {
            let n = f64::from(nodes);
            let tts = 3600.0 * n.powf(-0.8 - 0.1 * (i % 3) as f64);
            runs.push(json!({"app": format!("app-{i:04}"), "source": "cluster",
                             "job_id": format!("a{i}-{k}"), "nodes": nodes,
                             "account": format!("proj-{:02}", 1 + i % ACCOUNTS),
                             "duration_s": tts, "avg_power_w": 350.0 * n + (i % 50) as f64}));
        }
    }
    for (k, nodes) in [1u32, 2, 4, 8, 16, 32].into_iter().enumerate() {
        for r in 0..3 {
            let n = f64::from(nodes);
            runs.push(
                json!({"app": "lammps", "source": "cluster", "job_id": format!("l{k}-{r}"),
                             "nodes": nodes, "account": "proj-01",
                             "duration_s": 1000.0 * n.powf(-0.85) * (1.0 + 0.02 * f64::from(r)),
                             "avg_power_w": 350.0 * n + 10.0 * f64::from(r)}),
            );
        }
    }
    let stored = call("POST", "/v1/runs/batch", json!({"runs": runs}));
    assert_eq!(stored["created"], json!(runs.len()), "{stored:#}");
    // The longest description, with no space to break at: the page must
    // still fit a phone's screen (check.mjs).
    call(
        "PUT",
        "/v1/apps/lammps",
        json!({"description": "x".repeat(4096)}),
    );
    // 1,000 running jobs, from four clients at once.
    std::thread::scope(|scope| {
        for t in 0..4 {
            let call = &call;
            scope.spawn(move || {
                for j in (t..JOBS).step_by(4) {
                    let partition = if j % 3 == 0 { "gpu" } else { "batch" };
                    call(
                        "POST",
                        "/v1/jobs",
                        json!({"source": "cluster", "job_id": format!("J{j}"),
                               "app": format!("app-{:04}", 1 + j % BUSY_APPS),
                               "nodes": 1 + j % 4, "partition": partition,
                               "account": format!("proj-{:02}", 1 + j % ACCOUNTS)}),
                    );
                }
            });
        }
    });
    let read = call(
        "POST",
        "/v1/tokens",
        json!({"name": "dashboard", "scopes": ["read"]}),
    )["token"]
        .as_str()
        .unwrap()
        .to_owned();

    let shots = std::env::var_os("JOULECAST_UI_SCREENSHOTS")
        .map(std::path::PathBuf::from)
        .unwrap_or_else(|| Path::new(env!("CARGO_TARGET_TMPDIR")).join("ui-screenshots"));
    let output = Command::new("node")
        .arg(checker.join("check.mjs"))
        .args([
            &format!("http://127.0.0.1:{port}"),
            &read,
            shots.to_str().unwrap(),
            "lammps",
            "proj-01",
        ])
        .current_dir(&checker)
        .output()
        .expect("run node (Node.js is needed for the browser test)");
    let report = String::from_utf8_lossy(&output.stdout);
    eprintln!("{report}");
    assert!(
        output.status.success(),
        "{report}\n{}",
        String::from_utf8_lossy(&output.stderr)
    );
    let report: Value = serde_json::from_str(&report).unwrap();
    assert_eq!(report["problems"], json!([]));
    assert!(
        report["values_checked"].as_u64().unwrap() > 300,
        "{report:#}"
    );
    for page in [
        "applications",
        "application",
        "power",
        "budgets",
        "budget",
        "nodes",
    ] {
        assert!(report["timings_ms"][page].is_number(), "{page} not timed");
    }
    drop(service);
}

mod access {
    //! Who may see the dashboard, in process: no browser needed.

    use axum::body::Body;
    use axum::http::{Method, Request, StatusCode, header};
    use joulecast::http::{self, Settings};

    use crate::support::{TestApp, fresh_pool, run};

    async fn get(app: &TestApp, path: &str, cookie: Option<&str>) -> crate::support::Reply {
        let mut request = Request::builder().method(Method::GET).uri(path);
        if let Some(cookie) = cookie {
            request = request.header(header::COOKIE, format!("joulecast_token={cookie}"));
        }
        app.send(request.body(Body::empty()).unwrap()).await
    }

    async fn sign_in(app: &TestApp, token: &str) -> crate::support::Reply {
        let form = format!("token={token}&next=%2Fui%2Fpower");
        let request = Request::builder()
            .method(Method::POST)
            .uri("/ui/login")
            .header(header::CONTENT_TYPE, "application/x-www-form-urlencoded")
            .body(Body::from(form))
            .unwrap();
        app.send(request).await
    }

    #[tokio::test]
    async fn pages_need_a_read_token_kept_by_the_sign_in_form() {
        let app = TestApp::new().await;
        app.ingest(&run("lin", "1", 1)).await;
        // No token: to the sign-in form, remembering the page.
        let reply = get(&app, "/ui/apps?q=l", None).await;
        assert_eq!(reply.status, StatusCode::SEE_OTHER);
        assert_eq!(
            reply.headers[header::LOCATION],
            "/ui/login?next=%2Fui%2Fapps%3Fq%3Dl"
        );
        // A token that can write is refused: the browser would keep it.
        let reply = sign_in(&app, &app.admin).await;
        assert_eq!(reply.status, StatusCode::UNAUTHORIZED);
        assert!(reply.headers.get(header::SET_COOKIE).is_none());
        let reply = sign_in(&app, "jc_not-a-token").await;
        assert_eq!(reply.status, StatusCode::UNAUTHORIZED);
        // A read token: a session cookie, back to the page asked for.
        let reply = sign_in(&app, &app.read).await;
        assert_eq!(reply.status, StatusCode::SEE_OTHER, "{:?}", reply.body);
        assert_eq!(reply.headers[header::LOCATION], "/ui/power");
        let cookie = reply.headers[header::SET_COOKIE].to_str().unwrap();
        assert!(cookie.starts_with(&format!("joulecast_token={};", app.read)));
        for attribute in ["HttpOnly", "SameSite=Strict", "Path=/ui"] {
            assert!(cookie.contains(attribute), "{cookie}");
        }
        let page = get(&app, "/ui/apps", Some(&app.read)).await;
        assert_eq!(page.status, StatusCode::OK);
        assert!(page.content_type().starts_with("text/html"));
        let csp = page.headers[header::CONTENT_SECURITY_POLICY]
            .to_str()
            .unwrap();
        assert!(csp.starts_with("default-src 'none'"), "{csp}");
        let serde_json::Value::String(html) = page.body else {
            panic!("HTML expected")
        };
        assert!(html.contains("data-app=\"lin\""), "{html}");
        // A revoked or wrong cookie: back to the form.
        let reply = get(&app, "/ui/apps", Some("jc_wrong")).await;
        assert_eq!(reply.status, StatusCode::SEE_OTHER);
        // A malformed query too.
        let reply = get(&app, "/ui/apps?q=a&q=b", Some(&app.read)).await;
        assert_eq!(reply.status, StatusCode::BAD_REQUEST);
        assert!(reply.content_type().starts_with("text/html"));
        // An unknown application is a page, not a problem document.
        let reply = get(&app, "/ui/apps/nothing-here", Some(&app.read)).await;
        assert_eq!(reply.status, StatusCode::NOT_FOUND);
        assert!(reply.content_type().starts_with("text/html"));
    }

    /// Forms posted from another site are refused (they would sign the
    /// victim in with someone else's token, or out); a token that cannot
    /// read is told so; a count beyond the measured ones is said to be
    /// extrapolated.
    #[tokio::test]
    async fn forms_from_other_sites_are_refused_and_pages_say_what_they_extrapolate() {
        let app = TestApp::new().await;
        let post = |path: &'static str, body: String, headers: &[(&'static str, &'static str)]| {
            let mut request = Request::builder()
                .method(Method::POST)
                .uri(path)
                .header(header::HOST, "127.0.0.1:8080")
                .header(header::CONTENT_TYPE, "application/x-www-form-urlencoded");
            for (k, v) in headers {
                request = request.header(*k, *v);
            }
            app.send(request.body(Body::from(body)).unwrap())
        };
        let form = format!("token={}", app.read);
        for headers in [
            &[("sec-fetch-site", "cross-site")][..],
            &[("origin", "http://localhost:8081")][..],
        ] {
            let reply = post("/ui/login", form.clone(), headers).await;
            assert_eq!(reply.status, StatusCode::FORBIDDEN, "{headers:?}");
            assert!(reply.headers.get(header::SET_COOKIE).is_none());
            let reply = post("/ui/logout", String::new(), headers).await;
            assert_eq!(reply.status, StatusCode::FORBIDDEN, "{headers:?}");
            assert!(reply.headers.get(header::SET_COOKIE).is_none());
        }
        let same = [
            ("sec-fetch-site", "same-origin"),
            ("origin", "http://127.0.0.1:8080"),
        ];
        let reply = post("/ui/login", form, &same).await;
        assert_eq!(reply.status, StatusCode::SEE_OTHER, "{:?}", reply.body);
        let reply = post("/ui/logout", String::new(), &same).await;
        assert_eq!(reply.status, StatusCode::SEE_OTHER, "{:?}", reply.body);

        let reply = sign_in(&app, &app.ingest).await;
        assert_eq!(reply.status, StatusCode::UNAUTHORIZED);
        let serde_json::Value::String(html) = reply.body else {
            panic!("HTML expected")
        };
        assert!(html.contains("cannot read"), "{html}");

        // Time falling as 1/n up to 8 nodes: the fastest count searched is
        // beyond them.
        for n in [1, 2, 4, 8] {
            let mut r = run("fast", &format!("f{n}"), n);
            r["energy_j"] = serde_json::json!(1000.0 * 600.0);
            app.ingest(&r).await;
        }
        let page = get(&app, "/ui/apps/fast", Some(&app.read)).await;
        assert_eq!(page.status, StatusCode::OK);
        let serde_json::Value::String(html) = page.body else {
            panic!("HTML expected")
        };
        assert!(html.contains("data-check=\"extrapolated\""), "{html}");
        assert!(
            html.contains("beyond the largest measured count (8)"),
            "{html}"
        );
        // Past the last page: said so, not "no application yet".
        let page = get(&app, "/ui/apps?after=zzzz", Some(&app.read)).await;
        let serde_json::Value::String(html) = page.body else {
            panic!("HTML expected")
        };
        assert!(html.contains("No application after this one"), "{html}");
    }

    #[tokio::test]
    async fn under_public_read_anyone_may_look() {
        let settings = Settings {
            public_read: true,
            ..Settings::default()
        };
        let pool = fresh_pool().await;
        let app = TestApp::with_router(pool.clone(), http::router(pool, settings)).await;
        for page in ["/ui/apps", "/ui/power", "/ui/budgets", "/ui/nodes"] {
            let reply = get(&app, page, None).await;
            assert_eq!(reply.status, StatusCode::OK, "{page}: {:?}", reply.body);
            assert!(reply.content_type().starts_with("text/html"));
        }
        // Nothing to sign out of.
        let serde_json::Value::String(html) = get(&app, "/ui/power", None).await.body else {
            panic!("HTML expected")
        };
        assert!(!html.contains("Sign out"));
    }
}
