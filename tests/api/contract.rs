//! The contract between the service and its OpenAPI document: on a service
//! populated through the API, every operation of the served document is
//! called, and every reply is checked against what the document says of that
//! operation — its status is documented, its content type is one documented
//! for that status, and its body validates against the documented schema, with
//! formats (`date-time`, ...) validated. Request bodies sent as valid input are
//! checked against the documented request schema too, every query
//! parameter used must be documented, and no JSON object may repeat a key.
//!
//! Besides the valid calls, sweeps over every operation send what any client
//! can get wrong (no token, a token without the scope, an unknown query
//! parameter, unknown and impossible path parameters, bodies that are not
//! JSON, malformed or too large); their answers are held to the same checks.
//!
//! All mismatches are collected and reported together at the end, so one run
//! shows everything; `--nocapture` also lists each (operation, status) seen.

use std::collections::{BTreeSet, HashMap, HashSet};
use std::fmt;
use std::sync::LazyLock;

use axum::Router;
use axum::body::Body;
use axum::http::{Method, Request, header};
use chrono::{DateTime, Duration, Utc};
use http_body_util::BodyExt;
use serde::de::{DeserializeSeed, Deserializer, Error as _, MapAccess, SeqAccess, Visitor};
use serde_json::{Value, json};
use tower::ServiceExt;

use joulecast::http::Settings;

use crate::support::TestApp;

const SACCT: &str = include_str!("../fixtures/sacct/cluster.txt");

/// What a call sends.
enum Payload {
    Empty,
    Json(Value),
    /// Bytes with a content type of their own (not necessarily valid).
    Raw(&'static str, String),
}

impl From<Value> for Payload {
    fn from(value: Value) -> Payload {
        Payload::Json(value)
    }
}

/// The service, its served document, and what the calls found.
struct Contract {
    app: TestApp,
    /// Where requests go: the app's router, or one with other settings.
    router: Router,
    spec: Value,
    /// (METHOD, path template) of every operation called.
    called: BTreeSet<(String, String)>,
    /// (METHOD path template, status) of every reply, for the summary.
    seen: BTreeSet<(String, u16)>,
    /// Compiled schemas by operation, status and content type.
    validators: HashMap<String, jsonschema::Validator>,
    mismatches: Vec<String>,
}

const METHODS: [&str; 8] = [
    "get", "put", "post", "delete", "patch", "head", "options", "trace",
];

fn media_type(content_type: &str) -> &str {
    content_type.split(';').next().unwrap_or_default().trim()
}

fn truncated(text: &str) -> String {
    const MAX: usize = 1500;
    if text.len() <= MAX {
        return text.to_owned();
    }
    let mut end = MAX;
    while !text.is_char_boundary(end) {
        end -= 1;
    }
    format!("{}... ({} bytes)", &text[..end], text.len())
}

impl Contract {
    fn new(app: TestApp, spec: Value) -> Contract {
        Contract {
            router: app.router.clone(),
            app,
            spec,
            called: BTreeSet::new(),
            seen: BTreeSet::new(),
            validators: HashMap::new(),
            mismatches: Vec::new(),
        }
    }

    /// Every (METHOD, path template) of the document.
    fn operations(&self) -> BTreeSet<(String, String)> {
        let mut operations = BTreeSet::new();
        for (path, item) in self.spec["paths"].as_object().expect("paths") {
            for method in METHODS {
                if item.get(method).is_some() {
                    operations.insert((method.to_uppercase(), path.clone()));
                }
            }
        }
        operations
    }

    /// The scope an operation documents (`security: [{"bearer": [scope]}]`).
    fn scope(&self, method: &str, template: &str) -> Option<&'static str> {
        let scope = self.spec["paths"][template][method.to_lowercase()]["security"][0]["bearer"][0]
            .as_str()?;
        ["read", "ingest", "schedule", "admin"]
            .into_iter()
            .find(|s| *s == scope)
    }

    /// The content type of an operation's documented request body.
    fn request_type(&self, method: &str, template: &str) -> Option<String> {
        self.spec["paths"][template][method.to_lowercase()]["requestBody"]["content"]
            .as_object()?
            .keys()
            .next()
            .cloned()
    }

    /// GET with valid input, expecting 200.
    async fn get(&mut self, template: &str, path: &str, token: Option<&str>) -> Value {
        self.ok(Method::GET, template, path, token, Payload::Empty, 200)
            .await
    }

    /// Call with valid input, expecting `expect`.
    async fn ok(
        &mut self,
        method: Method,
        template: &str,
        path: &str,
        token: Option<&str>,
        payload: impl Into<Payload>,
        expect: u16,
    ) -> Value {
        self.call(
            method,
            template,
            path,
            token,
            payload.into(),
            Some(expect),
            true,
        )
        .await
    }

    /// Call with deliberately bad input (or credentials), expecting `expect`.
    async fn bad(
        &mut self,
        method: Method,
        template: &str,
        path: &str,
        token: Option<&str>,
        payload: impl Into<Payload>,
        expect: u16,
    ) -> Value {
        self.call(
            method,
            template,
            path,
            token,
            payload.into(),
            Some(expect),
            false,
        )
        .await
    }

    #[allow(clippy::too_many_arguments)]
    async fn call(
        &mut self,
        method: Method,
        template: &str,
        path: &str,
        token: Option<&str>,
        payload: Payload,
        expect: Option<u16>,
        valid_input: bool,
    ) -> Value {
        let name = format!("{method} {template}");
        self.called
            .insert((method.as_str().to_owned(), template.to_owned()));
        let operation = self.spec["paths"][template][method.as_str().to_lowercase()].clone();
        if operation.is_null() {
            self.mismatches
                .push(format!("{name} [{path}]: no such operation in the spec"));
        }
        self.check_path(&name, template, path, &operation, valid_input);

        let mut request = Request::builder().method(method.clone()).uri(path);
        if let Some(token) = token {
            request = request.header(header::AUTHORIZATION, format!("Bearer {token}"));
        }
        let request = match &payload {
            Payload::Empty => request.body(Body::empty()),
            Payload::Json(body) => {
                if valid_input {
                    self.check_request(&name, path, &operation, body);
                }
                request
                    .header(header::CONTENT_TYPE, "application/json")
                    .body(Body::from(serde_json::to_vec(body).unwrap()))
            }
            Payload::Raw(content_type, body) => request
                .header(header::CONTENT_TYPE, *content_type)
                .body(Body::from(body.clone())),
        }
        .unwrap();
        let response = self.router.clone().oneshot(request).await.unwrap();
        let status = response.status().as_u16();
        let content_type = response
            .headers()
            .get(header::CONTENT_TYPE)
            .and_then(|v| v.to_str().ok())
            .unwrap_or_default()
            .to_owned();
        let bytes = response.into_body().collect().await.unwrap().to_bytes();
        let text = String::from_utf8_lossy(&bytes).into_owned();
        let parsed: Option<Value> = serde_json::from_slice(&bytes).ok();
        self.seen.insert((name.clone(), status));
        let at = format!("{name} [{path}] -> {status}");
        if let Some(expect) = expect.filter(|&e| e != status) {
            self.mismatches.push(format!(
                "{at}: expected status {expect}\n    body: {}",
                truncated(&text)
            ));
        }
        self.check_response(&at, &operation, status, &content_type, &text, &parsed);
        parsed.unwrap_or(Value::Null)
    }

    /// The concrete path fits the template, and its query parameters are
    /// documented.
    fn check_path(
        &mut self,
        name: &str,
        template: &str,
        path: &str,
        operation: &Value,
        valid_input: bool,
    ) {
        let (route, query) = path.split_once('?').unwrap_or((path, ""));
        let concrete: Vec<&str> = route.split('/').collect();
        let declared: Vec<&str> = template.split('/').collect();
        let fits = concrete.len() == declared.len()
            && concrete
                .iter()
                .zip(&declared)
                .all(|(c, d)| (d.starts_with('{') && d.ends_with('}') && !c.is_empty()) || c == d);
        if !fits {
            self.mismatches
                .push(format!("{name}: the path {path} does not fit the template"));
        }
        let documented: Vec<&str> = operation["parameters"]
            .as_array()
            .map(|ps| {
                ps.iter()
                    .filter(|p| p["in"] == "query")
                    .filter_map(|p| p["name"].as_str())
                    .collect()
            })
            .unwrap_or_default();
        for (key, _) in form_urlencoded::parse(query.as_bytes()) {
            if valid_input && !documented.contains(&key.as_ref()) {
                self.mismatches.push(format!(
                    "{name} [{path}]: query parameter `{key}` is not documented \
                     (documented: {documented:?})"
                ));
            }
        }
    }

    /// A valid request body validates against the documented request schema.
    fn check_request(&mut self, name: &str, path: &str, operation: &Value, body: &Value) {
        let Some(schema) = operation["requestBody"]["content"]["application/json"].get("schema")
        else {
            self.mismatches.push(format!(
                "{name} [{path}]: sent a JSON body, but no application/json request body \
                 is documented"
            ));
            return;
        };
        let key = format!("{name} request");
        let errors = self.validate(&key, schema, body);
        if !errors.is_empty() {
            self.mismatches.push(format!(
                "{name} [{path}]: the (valid) request body does not validate against the \
                 documented request schema:\n    {}\n    body: {}",
                errors.join("\n    "),
                truncated(&body.to_string())
            ));
        }
    }

    fn check_response(
        &mut self,
        at: &str,
        operation: &Value,
        status: u16,
        content_type: &str,
        text: &str,
        parsed: &Option<Value>,
    ) {
        let responses = &operation["responses"];
        let Some(documented) = responses
            .get(status.to_string())
            .or_else(|| responses.get("default"))
        else {
            let known: Vec<&String> = responses
                .as_object()
                .map(|r| r.keys().collect())
                .unwrap_or_default();
            self.mismatches.push(format!(
                "{at}: status {status} is not documented (documented: {known:?})\n    body: {}",
                truncated(text)
            ));
            return;
        };
        // A named response (`$ref: #/components/responses/...`) stands for
        // the component it names.
        let documented = match documented["$ref"].as_str() {
            Some(reference) => reference
                .strip_prefix("#/components/responses/")
                .map_or(&Value::Null, |name| {
                    &self.spec["components"]["responses"][name]
                }),
            None => documented,
        };
        let content = documented["content"].as_object().filter(|c| !c.is_empty());
        let Some(content) = content else {
            if !text.is_empty() {
                self.mismatches.push(format!(
                    "{at}: documented without a body, but answered one ({content_type}): {}",
                    truncated(text)
                ));
            }
            return;
        };
        let key = content
            .keys()
            .find(|k| k.as_str() == content_type)
            .or_else(|| {
                content
                    .keys()
                    .find(|k| media_type(k) == media_type(content_type))
            })
            .cloned();
        let Some(key) = key else {
            let known: Vec<&String> = content.keys().collect();
            self.mismatches.push(format!(
                "{at}: content type `{content_type}` is not documented (documented: {known:?})\n    \
                 body: {}",
                truncated(text)
            ));
            return;
        };
        let Some(schema) = content[&key].get("schema").cloned() else {
            return;
        };
        let instance = if media_type(&key).ends_with("json") {
            // A repeated key would be read as its last value only.
            if let Err(e) =
                NoRepeatedKeys.deserialize(&mut serde_json::Deserializer::from_str(text))
                && parsed.is_some()
            {
                self.mismatches
                    .push(format!("{at}: {e}\n    body: {}", truncated(text)));
            }
            match parsed {
                Some(value) => value.clone(),
                None => {
                    self.mismatches.push(format!(
                        "{at}: documented as {key}, but the body is not JSON: {}",
                        truncated(text)
                    ));
                    return;
                }
            }
        } else {
            Value::String(text.to_owned())
        };
        let errors = self.validate(&format!("{at} {key}"), &schema, &instance);
        if !errors.is_empty() {
            self.mismatches.push(format!(
                "{at}: the body does not validate against the documented schema of {status} \
                 {key} ({}):\n    {}\n    body: {}",
                schema,
                errors.join("\n    "),
                truncated(text)
            ));
        }
    }

    /// Validate `instance` against `schema`, whose `$ref`s point into the
    /// document's components.
    fn validate(&mut self, key: &str, schema: &Value, instance: &Value) -> Vec<String> {
        let key = format!("{key} {schema}");
        if !self.validators.contains_key(&key) {
            match compile(schema, &self.spec["components"]) {
                Ok(validator) => self.validators.insert(key.clone(), validator),
                Err(e) => return vec![format!("the documented schema does not compile: {e}")],
            };
        }
        self.validators[&key]
            .iter_errors(instance)
            .map(|e| {
                format!(
                    "{} (at `{}`, schema `{}`)",
                    truncated(&e.to_string()),
                    e.instance_path(),
                    e.schema_path()
                )
            })
            .collect()
    }

    /// Record a failed expectation about content (an empty list where the
    /// population should have given one).
    fn expect_items(&mut self, what: &str, value: &Value) {
        if value.as_array().is_none_or(|a| a.is_empty()) {
            self.mismatches
                .push(format!("{what}: expected a non-empty list, got {value}"));
        }
    }
}

/// `schema` as a validator with formats checked, its `$ref`s resolved in
/// `components`, set at its root (2020-12 ignores the unknown keyword).
fn compile(schema: &Value, components: &Value) -> Result<jsonschema::Validator, String> {
    let mut root = schema.clone();
    match root.as_object_mut() {
        Some(object) => {
            object.insert("components".into(), components.clone());
        }
        None => root = json!({"allOf": [schema], "components": components}),
    }
    jsonschema::options()
        .with_draft(jsonschema::Draft::Draft202012)
        .should_validate_formats(true)
        .build(&root)
        .map_err(|e| e.to_string())
}

/// Reads any JSON value, refusing an object that repeats a key (which
/// `serde_json::Value` would silently read as its last value).
struct NoRepeatedKeys;

impl<'de> DeserializeSeed<'de> for NoRepeatedKeys {
    type Value = ();

    fn deserialize<D: Deserializer<'de>>(self, deserializer: D) -> Result<(), D::Error> {
        deserializer.deserialize_any(self)
    }
}

impl<'de> Visitor<'de> for NoRepeatedKeys {
    type Value = ();

    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str("a JSON value")
    }

    fn visit_bool<E>(self, _: bool) -> Result<(), E> {
        Ok(())
    }

    fn visit_i64<E>(self, _: i64) -> Result<(), E> {
        Ok(())
    }

    fn visit_u64<E>(self, _: u64) -> Result<(), E> {
        Ok(())
    }

    fn visit_f64<E>(self, _: f64) -> Result<(), E> {
        Ok(())
    }

    fn visit_str<E>(self, _: &str) -> Result<(), E> {
        Ok(())
    }

    fn visit_unit<E>(self) -> Result<(), E> {
        Ok(())
    }

    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<(), A::Error> {
        while seq.next_element_seed(NoRepeatedKeys)?.is_some() {}
        Ok(())
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<(), A::Error> {
        let mut keys = HashSet::new();
        while let Some(key) = map.next_key::<String>()? {
            if !keys.insert(key.clone()) {
                return Err(A::Error::custom(format!(
                    "an object repeats the key `{key}`"
                )));
            }
            map.next_value_seed(NoRepeatedKeys)?;
        }
        Ok(())
    }
}

/// A run of `app` on `nodes` nodes: `power_w` for `duration_s`, ended two
/// hours ago.
fn run(app: &str, job: &str, nodes: i64, power_w: f64, duration_s: f64) -> Value {
    // One time for all runs, so that a run sent again is the same run.
    static ENDED: LazyLock<DateTime<Utc>> = LazyLock::new(|| Utc::now() - Duration::hours(2));
    let end = *ENDED;
    let start = end - Duration::milliseconds((duration_s * 1000.0) as i64);
    json!({
        "app": app, "source": "clusterA", "job_id": job, "nodes": nodes,
        "energy_j": power_w * duration_s, "avg_power_w": power_w, "duration_s": duration_s,
        "account": "proj", "started_at": start.to_rfc3339(), "ended_at": end.to_rfc3339(),
    })
}

fn node(i: usize) -> String {
    format!("c{i:02}")
}

#[tokio::test]
async fn every_operation_answers_as_its_document_says() {
    use Method as M;
    let app = TestApp::new().await;
    let served = app.call(M::GET, "/openapi.json", None, None).await;
    assert_eq!(served.status, 200, "{:#}", served.body);
    let (read, ingest, schedule, admin) = (
        app.read.clone(),
        app.ingest.clone(),
        app.schedule.clone(),
        app.admin.clone(),
    );
    let (read, ingest, schedule, admin) = (
        Some(read.as_str()),
        Some(ingest.as_str()),
        Some(schedule.as_str()),
        Some(admin.as_str()),
    );
    let mut c = Contract::new(app, served.body);
    let operations = c.operations();
    let now = Utc::now();
    let at = |d: Duration| (now + d).to_rfc3339();

    // Health.
    c.ok(M::GET, "/healthz", "/healthz", None, Payload::Empty, 200)
        .await;
    c.ok(M::GET, "/readyz", "/readyz", None, Payload::Empty, 200)
        .await;

    // Applications: created, then replaced.
    let t = "/v1/apps/{app}";
    let body = json!({"scaling_mode": "strong", "description": "linear power, ten minutes",
                      "allowed_rmse_pct": 5.0});
    c.ok(M::PUT, t, "/v1/apps/lin", admin, body.clone(), 201)
        .await;
    c.ok(M::PUT, t, "/v1/apps/lin", admin, body, 200).await;

    // Nodes c01–c04 in `batch`, c05–c08 in `gpu`, with power samples of the
    // reference workload (the one predictions take their bounds from).
    for i in 1..=8 {
        let partition = if i <= 4 { "batch" } else { "gpu" };
        c.ok(
            M::PUT,
            "/v1/nodes/{node}",
            &format!("/v1/nodes/{}", node(i)),
            admin,
            json!({"partition": partition, "hardware_model": "XC-2",
                   "idle_power_w": 100.0, "peak_power_w": 700.0}),
            201,
        )
        .await;
    }
    c.ok(
        M::PUT,
        "/v1/nodes/{node}",
        "/v1/nodes/c01",
        admin,
        json!({"partition": "batch", "hardware_model": "XC-2", "idle_power_w": 95.0,
               "peak_power_w": 700.0}),
        200,
    )
    .await;
    // A node with nothing known but its partition, and no samples.
    c.ok(
        M::PUT,
        "/v1/nodes/{node}",
        "/v1/nodes/c09",
        admin,
        json!({"partition": "gpu"}),
        201,
    )
    .await;
    let mut samples = Vec::new();
    for i in 1..=8 {
        let base = [180.0, 182.0, 200.0, 201.0, 203.0, 230.0, 232.0, 320.0][i - 1];
        for (minutes, delta) in [(30, -1.0), (20, 1.0)] {
            samples.push(json!({"node": node(i), "workload": "reference",
                                "avg_power_w": base + delta,
                                "measured_at": at(-Duration::minutes(minutes))}));
        }
    }
    // One rejected item: a sample of an unknown node.
    samples.push(
        json!({"node": "ghost", "workload": "reference", "avg_power_w": 200.0,
                        "measured_at": at(-Duration::minutes(5))}),
    );
    let reply = c
        .ok(
            M::POST,
            "/v1/nodes/samples",
            "/v1/nodes/samples",
            ingest,
            json!({"samples": samples}),
            200,
        )
        .await;
    c.expect_items("samples", &reply["items"]);

    // History: `lin` (APC 1000·n W, ten minutes; on named nodes up to 8),
    // `amd` (Amdahl time, energy growing with n).
    let mut lin_run = 0;
    for n in [1, 2, 4, 8, 16] {
        let mut r = run("lin", &format!("lin-{n}"), n, 1000.0 * n as f64, 600.0);
        if n <= 8 {
            r["node_list"] = json!((1..=n as usize).map(node).collect::<Vec<_>>());
        }
        let reply = c.ok(M::POST, "/v1/runs", "/v1/runs", ingest, r, 201).await;
        if n == 2 {
            lin_run = reply["run"]["id"].as_i64().unwrap_or_default();
        }
    }
    for n in [1, 2, 4, 8, 16] {
        let x = n as f64;
        let time = 3600.0 * (0.1 + 0.9 / x);
        let energy = 1e6 * (1.0 + 0.1 * (x - 1.0));
        c.ok(
            M::POST,
            "/v1/runs",
            "/v1/runs",
            ingest,
            run("amd", &format!("amd-{n}"), n, energy / time, time),
            201,
        )
        .await;
    }
    // Runs with less known: no power (time and energy), no duration or times
    // (energy and power), one run only of `solo`.
    let time = 3600.0 * (0.1 + 0.9 / 32.0);
    let mut r = run("amd", "amd-32", 32, 4.1e6 / time, time);
    r.as_object_mut().unwrap().remove("avg_power_w");
    c.ok(M::POST, "/v1/runs", "/v1/runs", ingest, r, 201).await;
    let mut r = run("solo", "solo-1", 4, 4000.0, 600.0);
    for field in ["duration_s", "started_at", "ended_at", "account"] {
        r.as_object_mut().unwrap().remove(field);
    }
    c.ok(M::POST, "/v1/runs", "/v1/runs", ingest, r, 201).await;
    // The same run again: a duplicate; changed: a conflict.
    c.ok(
        M::POST,
        "/v1/runs",
        "/v1/runs",
        ingest,
        run("amd", "amd-1", 1, 1e6 / 3600.0, 3600.0),
        200,
    )
    .await;
    c.ok(
        M::POST,
        "/v1/runs",
        "/v1/runs",
        ingest,
        run("amd", "amd-1", 1, 2e6 / 3600.0, 3600.0),
        409,
    )
    .await;
    // `cfd` in a batch (strong scaling, 300 W a node), with a duplicate item
    // and a rejected one.
    let mut batch: Vec<Value> = [1, 2, 4, 8, 16, 32]
        .iter()
        .map(|&n| {
            let x = n as f64;
            run(
                "cfd",
                &format!("cfd-{n}"),
                n,
                300.0 * x,
                100.0 * (0.05 + 0.95 / x),
            )
        })
        .collect();
    batch.push(batch[0].clone());
    let mut rejected = run("cfd", "cfd-bad", 2, 600.0, 10.0);
    rejected["nodes"] = json!(0);
    let reply = c
        .ok(
            M::POST,
            "/v1/runs/batch",
            "/v1/runs/batch",
            ingest,
            json!({"runs": batch}),
            200,
        )
        .await;
    c.expect_items("batch items", &reply["items"]);
    // An item the schema refuses is answered item by item: not valid input,
    // but a 200.
    c.bad(
        M::POST,
        "/v1/runs/batch",
        "/v1/runs/batch",
        ingest,
        json!({"runs": [run("cfd", "cfd-64", 64, 300.0 * 64.0, 100.0 * (0.05 + 0.95 / 64.0)),
                        rejected]}),
        200,
    )
    .await;
    // Slurm accounting: eleven jobs of four applications.
    let reply = c
        .ok(
            M::POST,
            "/v1/import/sacct",
            "/v1/import/sacct?states=COMPLETED,TIMEOUT&source=hawk",
            ingest,
            Payload::Raw("text/plain", SACCT.to_owned()),
            200,
        )
        .await;
    c.expect_items("sacct skipped", &reply["skipped"]);

    // Efficiency factors of `lulesh`.
    let lb = |p: f64| 1.0 / (0.99 + 0.01 * p);
    let measurements: Vec<Value> = [1, 2, 4, 8]
        .iter()
        .map(|&p| {
            json!({"region": "solver", "processes": p, "load_balance": lb(f64::from(p)),
                   "serialization": 0.9, "transfer": 0.97})
        })
        .collect();
    let t = "/v1/apps/{app}/efficiency";
    c.ok(
        M::POST,
        t,
        "/v1/apps/lulesh/efficiency",
        ingest,
        json!({"measurements": measurements}),
        201,
    )
    .await;
    c.ok(
        M::POST,
        t,
        "/v1/apps/lulesh/efficiency",
        ingest,
        json!({"measurements": measurements}),
        200,
    )
    .await;

    // Power caps: the site's, the gpu partition's (tight), a maintenance
    // window tomorrow.
    let t = "/v1/power-caps/{name}";
    c.ok(
        M::PUT,
        t,
        "/v1/power-caps/site",
        admin,
        json!({"limit_w": 2.0e6}),
        201,
    )
    .await;
    c.ok(
        M::PUT,
        t,
        "/v1/power-caps/site",
        admin,
        json!({"limit_w": 1.0e6, "description": "the site"}),
        200,
    )
    .await;
    c.ok(
        M::PUT,
        t,
        "/v1/power-caps/gpu",
        admin,
        json!({"limit_w": 1500.0, "partition": "gpu"}),
        201,
    )
    .await;
    c.ok(
        M::PUT,
        t,
        "/v1/power-caps/maintenance",
        admin,
        json!({"limit_w": 5.0e5, "starts_at": at(Duration::hours(24)),
               "ends_at": at(Duration::hours(30)), "description": "chiller 2"}),
        201,
    )
    .await;

    // The budget of `proj`: a month, then a custom period around now.
    let t = "/v1/budgets/{account}";
    c.ok(
        M::PUT,
        t,
        "/v1/budgets/proj",
        admin,
        json!({"limit_j": 1.0e9, "period": "month"}),
        201,
    )
    .await;
    c.ok(
        M::PUT,
        t,
        "/v1/budgets/proj",
        admin,
        json!({"limit_j": 5.0e8, "period": "custom", "starts_at": at(-Duration::days(10)),
               "ends_at": at(Duration::days(20))}),
        200,
    )
    .await;

    // Admission questions: with history and a budget; without history.
    c.ok(
        M::POST,
        "/v1/admission",
        "/v1/admission",
        schedule,
        json!({"app": "lin", "nodes": 2, "account": "proj", "partition": "batch"}),
        200,
    )
    .await;
    c.ok(
        M::POST,
        "/v1/admission",
        "/v1/admission",
        schedule,
        json!({"app": "unseen", "node_list": "c[05-06]", "partition": "gpu",
               "start_at": at(Duration::hours(25)), "time_limit_s": 3600.0}),
        200,
    )
    .await;

    // Jobs: running (one stale), reported twice, finished, cancelled, refused.
    let t = "/v1/jobs";
    let j1 = json!({"source": "slurm", "job_id": "1", "app": "lin", "node_list": "c[01-02]",
                    "partition": "batch", "account": "proj"});
    c.ok(M::POST, t, t, schedule, j1.clone(), 201).await;
    c.ok(M::POST, t, t, schedule, j1, 200).await;
    c.ok(
        M::POST,
        t,
        t,
        schedule,
        json!({"source": "slurm", "job_id": "2", "app": "lin", "nodes": 3, "account": "proj",
               "started_at": at(-Duration::hours(3))}),
        201,
    )
    .await;
    c.ok(
        M::POST,
        t,
        t,
        schedule,
        json!({"source": "slurm", "job_id": "3", "app": "amd", "nodes": 4, "account": "proj",
               "time_limit_s": 7200.0}),
        201,
    )
    .await;
    c.ok(
        M::POST,
        t,
        t,
        schedule,
        json!({"source": "slurm", "job_id": "4", "app": "brand-new", "nodes": 1}),
        201,
    )
    .await;
    c.ok(
        M::POST,
        t,
        t,
        schedule,
        json!({"source": "slurm", "job_id": "6", "app": "solo", "nodes": 2,
               "partition": "gpu", "force": true}),
        201,
    )
    .await;
    // Jobs that ran unreserved while the service was unreachable: counted
    // once, then recognised.
    let unreserved = "/v1/jobs/unreserved";
    let body = json!({"source": "slurm", "jobs": [
        {"job_id": "u1", "started_at": at(-Duration::minutes(5))},
        {"job_id": "u2", "started_at": at(-Duration::minutes(4))}]});
    let reply = c
        .ok(M::POST, unreserved, unreserved, schedule, body.clone(), 200)
        .await;
    assert_eq!(
        reply["counted"], 2,
        "two unreserved jobs counted: {reply:#}"
    );
    let reply = c
        .ok(M::POST, unreserved, unreserved, schedule, body, 200)
        .await;
    assert_eq!(reply["already_counted"], 2, "counted once: {reply:#}");
    let finish = "/v1/jobs/{source}/{job_id}/finish";
    let measured = json!({"avg_power_w": 2200.0, "duration_s": 1500.0});
    c.ok(
        M::POST,
        finish,
        "/v1/jobs/slurm/3/finish",
        schedule,
        measured.clone(),
        200,
    )
    .await;
    c.ok(
        M::POST,
        finish,
        "/v1/jobs/slurm/3/finish",
        schedule,
        measured,
        200,
    )
    .await;
    // Started again after it finished: refused, without an admission.
    c.ok(
        M::POST,
        t,
        t,
        schedule,
        json!({"source": "slurm", "job_id": "3", "app": "amd", "nodes": 4}),
        409,
    )
    .await;
    // Over the gpu partition's cap: refused, with the admission.
    c.ok(
        M::POST,
        t,
        t,
        schedule,
        json!({"source": "slurm", "job_id": "5", "app": "lin", "nodes": 4, "partition": "gpu"}),
        409,
    )
    .await;
    c.ok(
        M::DELETE,
        "/v1/jobs/{source}/{job_id}",
        "/v1/jobs/slurm/4",
        schedule,
        Payload::Empty,
        204,
    )
    .await;

    // Tokens: created, used, listed, revoked.
    let reply = c
        .ok(
            M::POST,
            "/v1/tokens",
            "/v1/tokens",
            admin,
            json!({"name": "dashboard", "scopes": ["read"], "expires_at": at(Duration::days(30))}),
            201,
        )
        .await;
    let token_id = reply["id"].as_i64().unwrap_or_default();
    let dashboard = reply["token"].as_str().unwrap_or_default().to_owned();
    let reply = c
        .get("/v1/apps", "/v1/apps?limit=3", Some(&dashboard))
        .await;
    c.expect_items("apps", &reply["items"]);
    let cursor = reply["next_cursor"].as_str().unwrap_or_default().to_owned();
    let reply = c
        .get(
            "/v1/apps",
            &format!("/v1/apps?limit=3&cursor={cursor}"),
            read,
        )
        .await;
    c.expect_items("apps, second page", &reply["items"]);
    let reply = c.get("/v1/tokens", "/v1/tokens", admin).await;
    c.expect_items("tokens", &reply["items"]);
    c.ok(
        M::DELETE,
        "/v1/tokens/{id}",
        &format!("/v1/tokens/{token_id}"),
        admin,
        Payload::Empty,
        200,
    )
    .await;

    // Applications and their runs.
    c.get("/v1/apps/{app}", "/v1/apps/lin", read).await;
    let t = "/v1/apps/{app}/runs";
    let reply = c
        .get(
            t,
            "/v1/apps/lin/runs?min_nodes=1&max_nodes=16&limit=2",
            read,
        )
        .await;
    c.expect_items("runs", &reply["items"]);
    let cursor = reply["next_cursor"].as_str().unwrap_or_default().to_owned();
    let from = at(-Duration::days(1)).replace('+', "%2B");
    let reply = c
        .get(
            t,
            &format!("/v1/apps/lin/runs?limit=2&cursor={cursor}&from={from}"),
            read,
        )
        .await;
    c.expect_items("runs, second page", &reply["items"]);
    c.get("/v1/apps/{app}", "/v1/apps/solo", read).await;
    c.get(t, "/v1/apps/lammps/runs", read).await;
    c.get(t, "/v1/apps/lin/runs?nodes=2", read).await;
    c.get(
        "/v1/runs/{id}",
        &format!("/v1/runs/{lin_run}?workload=reference"),
        read,
    )
    .await;

    // Predictions, models, capacity.
    let t = "/v1/apps/{app}/predictions";
    let reply = c
        .get(
            t,
            "/v1/apps/lin/predictions?nodes=3&workload=reference",
            read,
        )
        .await;
    c.expect_items("predictions", &reply["predictions"]);
    // One run only; imported runs.
    c.get(t, "/v1/apps/solo/predictions?nodes=8&metric=ets", read)
        .await;
    c.get(t, "/v1/apps/lammps/predictions?nodes=16", read).await;
    c.ok(
        M::GET,
        t,
        "/v1/apps/lin/predictions?node_list=c%5B03-04%5D&workload=reference&metric=apc\
         &partition=batch&aggregate=max&allowed_rmse_pct=10",
        read,
        Payload::Empty,
        200,
    )
    .await;
    // A query the schema refuses (0 nodes) fails alone: not valid input, but
    // a 200.
    let reply = c
        .bad(
            M::POST,
            "/v1/predictions",
            "/v1/predictions",
            schedule,
            json!({"queries": [
                {"app": "lin", "nodes": 12},
                {"app": "nothing", "nodes": 4},
                {"app": "lin", "nodes": 0},
                {"app": "lin", "nodes": 8, "metric": "ets", "aggregate": "max"},
                {"app": "lin", "node_list": "c[01-02]", "workload": "reference"},
            ]}),
            200,
        )
        .await;
    c.expect_items("prediction answers", &reply["answers"]);
    let reply = c
        .get(
            "/v1/apps/{app}/curve",
            "/v1/apps/lin/curve?metric=apc&from=1&to=32&points=8",
            read,
        )
        .await;
    c.expect_items("curve", &reply["curve"]);
    c.get(
        "/v1/apps/{app}/model",
        "/v1/apps/lin/model?metric=ets",
        read,
    )
    .await;
    c.get(
        "/v1/apps/{app}/model",
        "/v1/apps/amd/model?metric=tts",
        read,
    )
    .await;
    let t = "/v1/apps/{app}/max-nodes";
    c.get(t, "/v1/apps/lin/max-nodes?power_limit_w=5000", read)
        .await;
    c.ok(
        M::GET,
        t,
        "/v1/apps/lin/max-nodes?power_limit_w=5000&bound=worst&workload=reference\
         &partition=batch&max_nodes=64",
        read,
        Payload::Empty,
        200,
    )
    .await;
    c.get(
        "/v1/apps/{app}/optimal-nodes",
        "/v1/apps/amd/optimal-nodes?objective=energy&deadline_s=1000",
        read,
    )
    .await;
    c.get(
        "/v1/apps/{app}/optimal-nodes",
        "/v1/apps/amd/optimal-nodes?objective=time&energy_budget_j=1.5e6",
        read,
    )
    .await;
    let reply = c
        .get(
            "/v1/apps/{app}/pareto",
            "/v1/apps/amd/pareto?min_nodes=1&max_nodes=16",
            read,
        )
        .await;
    c.expect_items("pareto front", &reply["front"]);

    // Scalability.
    c.get(
        "/v1/apps/{app}/scaling-model",
        "/v1/apps/cfd/scaling-model?metric=tts&targets=64,512&expectation=O(1)",
        read,
    )
    .await;
    c.get(
        "/v1/apps/{app}/scaling-model",
        "/v1/apps/cfd/scaling-model?metric=apc",
        read,
    )
    .await;
    let points: Vec<Value> = [4.0, 8.0, 16.0, 32.0, 64.0]
        .iter()
        .map(|&p: &f64| {
            let y = 10.0 + 2.5 * p;
            json!({"p": p, "values": [y * 0.99, y, y * 1.01]})
        })
        .collect();
    let reply = c
        .ok(
            M::POST,
            "/v1/models/search",
            "/v1/models/search",
            read,
            json!({"points": points, "targets": [128, 1024], "expectation": "O(p log p)"}),
            200,
        )
        .await;
    c.expect_items("models", &reply["models"]);
    let operand = |app: &str| json!({"app": app, "metric": "tts"});
    c.ok(
        M::POST,
        "/v1/scaling-rules",
        "/v1/scaling-rules",
        read,
        json!({"rules": [
            {"name": "cfd beats lin", "left": operand("cfd"), "relation": "<=",
             "right": [operand("lin"), operand("amd")]},
            {"left": operand("amd"), "relation": ">=", "right": [operand("cfd")]},
        ]}),
        200,
    )
    .await;
    let reply = c
        .get(
            "/v1/apps/{app}/efficiency",
            "/v1/apps/lulesh/efficiency?region=solver",
            read,
        )
        .await;
    c.expect_items("efficiency measurements", &reply["measurements"]);
    let reply = c
        .get(
            "/v1/apps/{app}/scalability",
            "/v1/apps/lulesh/scalability?targets=8,16,64&region=solver",
            read,
        )
        .await;
    c.expect_items("scalability regions", &reply["regions"]);

    // Nodes.
    let reply = c
        .get("/v1/nodes", "/v1/nodes?partition=batch&limit=3", read)
        .await;
    c.expect_items("nodes", &reply["items"]);
    c.get("/v1/nodes/{node}", "/v1/nodes/c01", read).await;
    c.get("/v1/nodes/{node}", "/v1/nodes/c09", read).await;
    c.get("/v1/nodes", "/v1/nodes", read).await;
    let reply = c
        .get(
            "/v1/nodes/classification",
            "/v1/nodes/classification?workload=reference&classes=3&bins=10",
            read,
        )
        .await;
    c.expect_items("classified nodes", &reply["nodes"]);
    c.get(
        "/v1/nodes/classification",
        "/v1/nodes/classification?workload=reference&partition=gpu",
        read,
    )
    .await;

    // Power: caps, headroom.
    let reply = c.get("/v1/power-caps", "/v1/power-caps", read).await;
    c.expect_items("caps", &reply["items"]);
    let tomorrow = at(Duration::hours(25)).replace('+', "%2B");
    c.get(
        "/v1/power-caps",
        &format!("/v1/power-caps?partition=gpu&at={tomorrow}"),
        read,
    )
    .await;
    c.get("/v1/power-caps/{name}", "/v1/power-caps/site", read)
        .await;
    c.ok(
        M::DELETE,
        "/v1/power-caps/{name}",
        "/v1/power-caps/maintenance",
        admin,
        Payload::Empty,
        204,
    )
    .await;
    let reply = c
        .get(
            "/v1/power/headroom",
            "/v1/power/headroom?partition=batch",
            read,
        )
        .await;
    c.expect_items("headroom jobs", &reply["jobs"]);
    c.get(
        "/v1/power/headroom",
        &format!("/v1/power/headroom?at={tomorrow}"),
        read,
    )
    .await;
    c.get(
        "/v1/power/headroom",
        "/v1/power/headroom?partition=none",
        read,
    )
    .await;

    // Jobs and budgets.
    let reply = c.get("/v1/jobs", "/v1/jobs", read).await;
    c.expect_items("jobs", &reply["items"]);
    c.get("/v1/jobs", "/v1/jobs?partition=batch&account=proj", read)
        .await;
    let page = c.get("/v1/jobs", "/v1/jobs?limit=1", read).await;
    let cursor = page["next_cursor"]
        .as_str()
        .expect("more than one job: a cursor");
    c.get(
        "/v1/jobs",
        &format!("/v1/jobs?limit=1&cursor={cursor}"),
        read,
    )
    .await;
    c.get("/v1/budgets/{account}", "/v1/budgets/proj", read)
        .await;

    // Extremes within the documented bounds: far extrapolations, limits no
    // node count meets, times far away.
    for (template, path) in [
        (
            "/v1/apps/{app}/curve",
            "/v1/apps/amd/curve?metric=ets&from=1&to=1000000&points=1000",
        ),
        (
            "/v1/apps/{app}/curve",
            "/v1/apps/cfd/curve?metric=tts&from=1&to=1000000&points=1000",
        ),
        (
            "/v1/apps/{app}/curve",
            "/v1/apps/lin/curve?metric=apc&from=1000000&to=1000000&points=2",
        ),
        (
            "/v1/apps/{app}/predictions",
            "/v1/apps/amd/predictions?nodes=1000000",
        ),
        (
            "/v1/apps/{app}/predictions",
            "/v1/apps/cfd/predictions?nodes=1000000&aggregate=max",
        ),
        (
            "/v1/apps/{app}/model",
            "/v1/apps/cfd/model?metric=tts&allowed_rmse_pct=100",
        ),
        (
            "/v1/apps/{app}/max-nodes",
            "/v1/apps/lin/max-nodes?power_limit_w=1e100",
        ),
        (
            "/v1/apps/{app}/max-nodes",
            "/v1/apps/lin/max-nodes?power_limit_w=1e-100",
        ),
        (
            "/v1/apps/{app}/optimal-nodes",
            "/v1/apps/amd/optimal-nodes?objective=time&energy_budget_j=1e-100",
        ),
        (
            "/v1/apps/{app}/optimal-nodes",
            "/v1/apps/amd/optimal-nodes?objective=energy&deadline_s=1e100",
        ),
        (
            "/v1/apps/{app}/pareto",
            "/v1/apps/cfd/pareto?min_nodes=1&max_nodes=10000",
        ),
        (
            "/v1/apps/{app}/scaling-model",
            "/v1/apps/amd/scaling-model?metric=ets&targets=1000000000",
        ),
        (
            "/v1/apps/{app}/scalability",
            "/v1/apps/lulesh/scalability?targets=10000000",
        ),
        (
            "/v1/power/headroom",
            "/v1/power/headroom?at=9999-12-31T23:59:59Z",
        ),
        ("/v1/power-caps", "/v1/power-caps?at=0001-01-01T00:00:00Z"),
    ] {
        c.get(template, path, read).await;
    }
    let cubic: Vec<Value> = [1.0, 2.0, 4.0, 8.0, 16.0]
        .iter()
        .map(|&p: &f64| json!({"p": p, "values": [p.powi(3) * 1e96]}))
        .collect();
    c.ok(
        M::POST,
        "/v1/models/search",
        "/v1/models/search",
        read,
        json!({"points": cubic, "targets": [1e9]}),
        200,
    )
    .await;
    // Powers beyond a node's plausible draw are refused (within the
    // schema's range: the bound is per node, which it cannot state).
    let huge = json!({"app": "huge", "source": "clusterA", "job_id": "huge-1", "nodes": 1,
                      "energy_j": 1e100, "avg_power_w": 1e96});
    c.ok(M::POST, "/v1/runs", "/v1/runs", ingest, huge, 422)
        .await;
    for (template, path, body) in [
        (
            "/v1/budgets/{account}",
            "/v1/budgets/big",
            json!({"limit_j": 1e100, "period": "month"}),
        ),
        (
            "/v1/power-caps/{name}",
            "/v1/power-caps/big",
            json!({"limit_w": 1e100}),
        ),
    ] {
        c.ok(M::PUT, template, path, admin, body, 201).await;
    }
    c.get("/v1/budgets/{account}", "/v1/budgets/big", read)
        .await;
    let nothing = || Payload::Empty;
    // Beyond the documented range (1e-100 to 1e100): refused, by name.
    for path in [
        "/v1/apps/lin/max-nodes?power_limit_w=1e300",
        "/v1/apps/lin/max-nodes?power_limit_w=1e-300",
    ] {
        c.bad(
            M::GET,
            "/v1/apps/{app}/max-nodes",
            path,
            read,
            nothing(),
            400,
        )
        .await;
    }
    for (template, path, body) in [
        (
            "/v1/budgets/{account}",
            "/v1/budgets/bigger",
            json!({"limit_j": 1e308, "period": "month"}),
        ),
        (
            "/v1/power-caps/{name}",
            "/v1/power-caps/bigger",
            json!({"limit_w": 1e-300}),
        ),
    ] {
        c.bad(M::PUT, template, path, admin, body, 422).await;
    }

    // Bad input: each problem validates against its documented schema.
    c.bad(M::GET, "/v1/apps", "/v1/apps", None, nothing(), 401)
        .await;
    c.bad(M::GET, "/v1/apps", "/v1/apps?limit=0", read, nothing(), 400)
        .await;
    c.bad(
        M::GET,
        "/v1/apps/{app}",
        "/v1/apps/nope",
        read,
        nothing(),
        404,
    )
    .await;
    c.bad(
        M::GET,
        "/v1/apps/{app}/runs",
        "/v1/apps/nope/runs",
        read,
        nothing(),
        404,
    )
    .await;
    c.bad(
        M::GET,
        "/v1/apps/{app}/predictions",
        "/v1/apps/nope/predictions?nodes=2",
        read,
        nothing(),
        404,
    )
    .await;
    c.bad(
        M::GET,
        "/v1/apps/{app}/predictions",
        "/v1/apps/lin/predictions?node_list=c%5B01-02%5D,c99&workload=reference",
        read,
        nothing(),
        422,
    )
    .await;
    c.bad(
        M::PUT,
        "/v1/apps/{app}",
        "/v1/apps/lin",
        admin,
        json!({"scaling_mode": "sideways"}),
        422,
    )
    .await;
    c.bad(
        M::PUT,
        "/v1/apps/{app}",
        "/v1/apps/lin",
        read,
        json!({"scaling_mode": "strong"}),
        403,
    )
    .await;
    let mut zero = run("lin", "zero", 1, 1000.0, 600.0);
    zero["nodes"] = json!(0);
    c.bad(M::POST, "/v1/runs", "/v1/runs", ingest, zero, 422)
        .await;
    c.bad(
        M::POST,
        "/v1/runs",
        "/v1/runs",
        ingest,
        Payload::Raw("application/json", "{\"app\":".into()),
        400,
    )
    .await;
    c.bad(
        M::POST,
        "/v1/runs",
        "/v1/runs",
        ingest,
        Payload::Raw("text/plain", "app=lin".into()),
        415,
    )
    .await;
    c.bad(
        M::GET,
        "/v1/runs/{id}",
        "/v1/runs/987654",
        read,
        nothing(),
        404,
    )
    .await;
    c.bad(
        M::GET,
        "/v1/apps/{app}/scaling-model",
        "/v1/apps/cfd/scaling-model?metric=joules",
        read,
        nothing(),
        400,
    )
    .await;
    c.bad(
        M::GET,
        "/v1/apps/{app}/max-nodes",
        "/v1/apps/lin/max-nodes?power_limit_w=10&min_nodes=8&max_nodes=4",
        read,
        nothing(),
        400,
    )
    .await;
    c.bad(
        M::GET,
        "/v1/budgets/{account}",
        "/v1/budgets/nobody",
        read,
        nothing(),
        404,
    )
    .await;
    c.bad(
        M::PUT,
        "/v1/budgets/{account}",
        "/v1/budgets/proj",
        admin,
        json!({"limit_j": 0, "period": "month"}),
        422,
    )
    .await;
    c.bad(
        M::POST,
        "/v1/jobs/{source}/{job_id}/finish",
        "/v1/jobs/slurm/none/finish",
        schedule,
        json!({}),
        404,
    )
    .await;
    c.bad(
        M::DELETE,
        "/v1/jobs/{source}/{job_id}",
        "/v1/jobs/slurm/none",
        schedule,
        nothing(),
        404,
    )
    .await;
    c.bad(
        M::POST,
        "/v1/jobs",
        "/v1/jobs",
        schedule,
        json!({"source": "s", "job_id": "x", "app": "lin", "nodes": 0}),
        422,
    )
    .await;
    c.bad(
        M::GET,
        "/v1/nodes/{node}",
        "/v1/nodes/c99",
        read,
        nothing(),
        404,
    )
    .await;
    c.bad(
        M::GET,
        "/v1/nodes/classification",
        "/v1/nodes/classification?workload=idle",
        read,
        nothing(),
        404,
    )
    .await;
    c.bad(
        M::POST,
        "/v1/nodes/samples",
        "/v1/nodes/samples",
        ingest,
        json!({"samples": []}),
        422,
    )
    .await;
    c.bad(
        M::GET,
        "/v1/power-caps/{name}",
        "/v1/power-caps/maintenance",
        read,
        nothing(),
        404,
    )
    .await;
    c.bad(
        M::PUT,
        "/v1/power-caps/{name}",
        "/v1/power-caps/x",
        admin,
        json!({"limit_w": 0}),
        422,
    )
    .await;
    c.bad(
        M::POST,
        "/v1/tokens",
        "/v1/tokens",
        admin,
        json!({"name": "x", "scopes": []}),
        422,
    )
    .await;
    c.bad(
        M::DELETE,
        "/v1/tokens/{id}",
        "/v1/tokens/987654",
        admin,
        nothing(),
        404,
    )
    .await;
    c.bad(
        M::POST,
        "/v1/import/sacct",
        "/v1/import/sacct?app_from=title",
        ingest,
        Payload::Raw("text/plain", SACCT.to_owned()),
        400,
    )
    .await;
    c.bad(
        M::POST,
        "/v1/models/search",
        "/v1/models/search",
        read,
        json!({"points": [{"p": 1, "values": [1]}]}),
        422,
    )
    .await;
    c.bad(
        M::POST,
        "/v1/predictions",
        "/v1/predictions",
        read,
        json!({"queries": []}),
        422,
    )
    .await;

    // Sweeps over every operation, of what any client can get wrong: no
    // token, a token without the scope, an unknown query parameter, paths
    // naming nothing or nothing possible, bodies that are not JSON, malformed,
    // or too large. Each answer must be documented and validate.
    let token = |scope: &str| match scope {
        "read" => read,
        "ingest" => ingest,
        "schedule" => schedule,
        _ => admin,
    };
    // A token of another scope, that does not include this one.
    let weaker = |scope: &str| match scope {
        "read" | "schedule" => ingest,
        "ingest" => read,
        _ => schedule,
    };
    let fill = |template: &str, values: [&str; 7]| {
        let mut path = template.to_owned();
        for (name, value) in ["app", "node", "name", "account", "source", "job_id", "id"]
            .iter()
            .zip(values)
        {
            path = path.replace(&format!("{{{name}}}"), value);
        }
        path
    };
    let id = lin_run.to_string();
    let existing = ["lin", "c01", "site", "proj", "slurm", "1", id.as_str()];
    let unknown = ["nope", "nope", "nope", "nobody", "nope", "nope", "987654"];
    let impossible = ["bad%20name"; 7];
    let small = joulecast::http::router(
        c.app.pool.clone(),
        Settings {
            max_body_bytes: 1024,
            ..Settings::default()
        },
    );
    for (method, template) in &operations {
        let Some(scope) = c.scope(method, template) else {
            continue;
        };
        let m: Method = method.parse().unwrap();
        let path = fill(template, existing);
        let body = c.request_type(method, template);
        let payload = || match body.as_deref() {
            Some("application/json") => Payload::Json(json!({})),
            Some(content_type) if content_type.starts_with("text/plain") => {
                Payload::Raw("text/plain", SACCT.to_owned())
            }
            Some(_) | None => Payload::Empty,
        };
        let t = template.as_str();
        c.call(m.clone(), t, &path, None, payload(), Some(401), false)
            .await;
        c.call(
            m.clone(),
            t,
            &path,
            weaker(scope),
            payload(),
            Some(403),
            false,
        )
        .await;
        // An unknown query parameter is refused by every operation, also by
        // those that take none (the review of 2026-11-28 found
        // `GET /v1/budgets?limit=5` answered as if it were a page size).
        let queried = format!("{path}?colour=red");
        c.call(
            m.clone(),
            t,
            &queried,
            token(scope),
            payload(),
            Some(400),
            false,
        )
        .await;
        if m == M::GET && template.contains('{') {
            let path = fill(template, unknown);
            c.call(m.clone(), t, &path, token(scope), payload(), None, false)
                .await;
        }
        if template.contains('{') {
            let path = fill(template, impossible);
            c.call(m.clone(), t, &path, token(scope), payload(), None, false)
                .await;
        }
        let Some(body) = body else {
            continue;
        };
        if body == "application/json" {
            let not_json = Payload::Raw("text/plain", "{}".into());
            c.call(
                m.clone(),
                t,
                &path,
                token(scope),
                not_json,
                Some(415),
                false,
            )
            .await;
            let malformed = Payload::Raw("application/json", "{".into());
            c.call(
                m.clone(),
                t,
                &path,
                token(scope),
                malformed,
                Some(400),
                false,
            )
            .await;
        }
        let large = Payload::Raw(
            if body == "application/json" {
                "application/json"
            } else {
                "text/plain"
            },
            format!("{{\"pad\": \"{}\"}}", "x".repeat(4096)),
        );
        c.router = small.clone();
        c.call(m.clone(), t, &path, token(scope), large, Some(413), false)
            .await;
        c.router = c.app.router.clone();
    }

    // Last, so that it has every route's counters.
    c.ok(M::GET, "/metrics", "/metrics", None, Payload::Empty, 200)
        .await;

    // What was seen (shown with --nocapture).
    for (operation, status) in &c.seen {
        println!("{status} {operation}");
    }

    // Every operation of the document was called, and nothing else.
    let called = c.called.clone();
    for (method, path) in operations.difference(&called) {
        c.mismatches.push(format!(
            "{method} {path}: in the spec, but the contract test does not call it"
        ));
    }
    for (method, path) in called.difference(&operations) {
        c.mismatches
            .push(format!("{method} {path}: called, but not in the spec"));
    }
    assert!(
        c.mismatches.is_empty(),
        "{} contract mismatch(es) over {} operations:\n\n{}",
        c.mismatches.len(),
        operations.len(),
        c.mismatches.join("\n\n")
    );
}

/// The checks themselves can fail: formats are validated, references
/// resolve, repeated keys are found.
#[test]
fn the_checks_find_what_they_look_for() {
    let components = json!({"schemas": {"At": {
        "type": "object", "required": ["at"],
        "properties": {"at": {"type": "string", "format": "date-time"}},
    }}});
    let at = compile(&json!({"$ref": "#/components/schemas/At"}), &components).unwrap();
    assert!(at.is_valid(&json!({"at": "2026-11-23T15:16:11.273447Z"})));
    assert!(!at.is_valid(&json!({"at": "+10000-01-01T00:00:00Z"})));
    assert!(!at.is_valid(&json!({"at": null})));
    assert!(!at.is_valid(&json!({})));
    let repeated = |text: &str| {
        NoRepeatedKeys
            .deserialize(&mut serde_json::Deserializer::from_str(text))
            .is_err()
    };
    assert!(!repeated(
        r#"{"a": [1, {"b": null, "c": "x"}], "b": 2.5, "d": true}"#
    ));
    assert!(repeated(r#"{"a": [{"metric": "tts", "metric": null}]}"#));
}
