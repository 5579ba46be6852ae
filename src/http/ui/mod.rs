//! The dashboard at `/ui`: pages written on the server (maud), charts as
//! SVG written on the server, one stylesheet embedded in the binary. No
//! script, no build step, nothing fetched from elsewhere: it works offline,
//! behind any proxy, and a page is complete as it arrives.
//!
//! Read-only. Under `--public-read` anyone may look; otherwise a token with
//! the `read` scope is asked once by a login form and kept in an HttpOnly
//! cookie for the session (`Authorization: Bearer` works too). The numbers
//! come from the same service calls as the API's answers.

use axum::Router;
use axum::extract::{Form, FromRequestParts, State};
use axum::http::request::Parts;
use axum::http::{HeaderMap, HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Redirect, Response};
use axum::routing::{get, post};
use maud::{DOCTYPE, Markup, html};
use serde::Deserialize;

use super::AppState;
use super::auth;
use super::error::ApiError;
use crate::service;
use crate::tokens::Scope;

mod apps;
mod chart;
mod format;
mod nodes;
mod operations;

const COOKIE: &str = "joulecast_token";
/// How long a login lasts, s.
const SESSION_S: u32 = 12 * 3600;
const STYLESHEET: &str = include_str!("joulecast.css");
const FAVICON: &str = include_str!("favicon.svg");
/// Nothing but this origin's stylesheet and images; no script at all.
const CSP: &str = "default-src 'none'; style-src 'self'; img-src 'self'; \
                   form-action 'self'; frame-ancestors 'none'; base-uri 'none'";

/// The dashboard's routes, under `/ui`.
pub fn routes() -> Router<AppState> {
    Router::new()
        .route("/ui", get(|| async { Redirect::to("/ui/apps") }))
        .route("/ui/", get(|| async { Redirect::to("/ui/apps") }))
        .route("/ui/login", get(login_form).post(login))
        .route("/ui/logout", post(logout))
        .route("/ui/assets/joulecast.css", get(stylesheet))
        .route("/ui/assets/favicon.svg", get(favicon))
        .route("/ui/apps", get(apps::list))
        .route("/ui/apps/{app}", get(apps::detail))
        .route("/ui/power", get(operations::power))
        .route("/ui/budgets", get(operations::budgets))
        .route("/ui/budgets/{account}", get(operations::budget))
        .route("/ui/nodes", get(nodes::show))
}

/// Someone allowed to read: a token with the `read` scope (from the
/// session cookie or the Authorization header), or anyone under
/// `--public-read`. Without, pages send the browser to the login form.
pub struct Viewer {
    /// Whether a token was given (a logout button is shown).
    signed_in: bool,
}

impl FromRequestParts<AppState> for Viewer {
    type Rejection = Response;

    async fn from_request_parts(parts: &mut Parts, state: &AppState) -> Result<Self, Response> {
        // A malformed Authorization header counts as none: the cookie, or
        // the sign-in form.
        let bearer = auth::bearer(&parts.headers)
            .and_then(Result::ok)
            .map(str::to_owned);
        let Some(secret) = bearer.or_else(|| cookie(&parts.headers, COOKIE)) else {
            if state.settings.public_read {
                return Ok(Viewer { signed_in: false });
            }
            return Err(to_login(parts));
        };
        let token = service::tokens::authenticate(state, &secret).await;
        match token.and_then(|t| auth::authorized::<auth::Read>(&t)) {
            Ok(_) => Ok(Viewer { signed_in: true }),
            Err(ApiError::Unauthorized(_)) if state.settings.public_read => {
                Ok(Viewer { signed_in: false })
            }
            Err(ApiError::Unauthorized(_)) => Err(to_login(parts)),
            Err(e) => Err(error_page(e, false)),
        }
    }
}

/// A page's query, parsed; a malformed one is answered with an error page
/// (400), as the rest of the dashboard's errors are.
pub struct PageQuery<T>(pub T);

impl<T: serde::de::DeserializeOwned, S: Sync> FromRequestParts<S> for PageQuery<T> {
    type Rejection = Response;

    async fn from_request_parts(parts: &mut Parts, _: &S) -> Result<Self, Response> {
        serde_urlencoded::from_str(parts.uri.query().unwrap_or_default())
            .map(PageQuery)
            .map_err(|e| error_page(ApiError::bad_request("query", e.to_string()), false))
    }
}

/// The value of cookie `name`.
fn cookie(headers: &HeaderMap, name: &str) -> Option<String> {
    headers
        .get_all(header::COOKIE)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(';'))
        .filter_map(|pair| pair.trim().split_once('='))
        .find(|(k, _)| *k == name)
        .map(|(_, v)| v.to_owned())
        .filter(|v| !v.is_empty())
}

fn to_login(parts: &Parts) -> Response {
    let next = parts
        .uri
        .path_and_query()
        .map_or("/ui/apps", |pq| pq.as_str());
    let query: String = form_urlencoded::Serializer::new(String::new())
        .append_pair("next", next)
        .finish();
    Redirect::to(&format!("/ui/login?{query}")).into_response()
}

/// Where to go after logging in: a dashboard page, nowhere else (no dot
/// segment or encoded character that a browser could resolve outside
/// `/ui/`).
fn safe_next(next: Option<&str>) -> &str {
    next.filter(|n| {
        let path = n.split(['?', '#']).next().unwrap_or_default();
        n.starts_with("/ui/")
            && !n.starts_with("/ui//")
            && !n.contains('\\')
            && !path.contains('%')
            && !path
                .split('/')
                .any(|segment| segment == "." || segment == "..")
            && !n.chars().any(char::is_control)
    })
    .unwrap_or("/ui/apps")
}

#[derive(Deserialize)]
pub struct LoginQuery {
    next: Option<String>,
}

async fn login_form(PageQuery(q): PageQuery<LoginQuery>) -> Response {
    login_page(safe_next(q.next.as_deref()), None, StatusCode::OK)
}

fn login_page(next: &str, problem: Option<&str>, status: StatusCode) -> Response {
    let body = html! {
        section.login {
            h1 { "Sign in" }
            p { "Paste an API token with the " code { "read" } " scope. It is kept in this browser for "
                (SESSION_S / 3600) " hours, sent only to this service." }
            @if let Some(problem) = problem { p.problem role="alert" { (problem) } }
            form method="post" action="/ui/login" {
                input type="hidden" name="next" value=(next);
                label for="token" { "Token" }
                input #token type="password" name="token" autocomplete="current-password"
                    required placeholder="jc_…";
                button type="submit" { "Sign in" }
            }
            p.hint { "Create one with " code { "joulecast token create --scope read --name dashboard" } "." }
        }
    };
    page_with_status("Sign in", None, false, body, status)
}

#[derive(Deserialize)]
pub struct LoginForm {
    token: String,
    next: Option<String>,
}

/// Whether a form was posted from another site (cross-site request
/// forgery: signing the victim in with the attacker's token, or out): the
/// browser says where the request comes from (`Sec-Fetch-Site`), or at
/// least its `Origin`. Clients that send neither are no browser carrying
/// someone else's cookie.
fn cross_site(headers: &HeaderMap) -> bool {
    if let Some(site) = headers.get("sec-fetch-site") {
        return !matches!(site.as_bytes(), b"same-origin" | b"none");
    }
    let Some(origin) = headers.get(header::ORIGIN) else {
        return false;
    };
    let host = headers
        .get("x-forwarded-host")
        .or_else(|| headers.get(header::HOST))
        .and_then(|h| h.to_str().ok());
    let from = origin
        .to_str()
        .ok()
        .and_then(|o| o.split_once("://"))
        .map(|(_, authority)| authority);
    from.is_none() || from != host
}

fn refuse_cross_site() -> Response {
    let body = html! {
        section.error {
            h1 { "Forbidden" }
            p { "This form was sent from another site. Sign in and out from the dashboard's own pages." }
            p { a href="/ui/login" { "Sign in" } }
        }
    };
    page_with_status("Forbidden", None, false, body, StatusCode::FORBIDDEN)
}

async fn login(
    State(state): State<AppState>,
    headers: HeaderMap,
    Form(form): Form<LoginForm>,
) -> Response {
    if cross_site(&headers) {
        return refuse_cross_site();
    }
    let next = safe_next(form.next.as_deref()).to_owned();
    let secret = form.token.trim();
    // The browser keeps the token: only one that can do no more than read.
    let problem = match service::tokens::authenticate(&state, secret).await {
        Ok(token) if !token.scopes.iter().any(|s| s.grants(Scope::Read)) => {
            Some("This token cannot read: sign in with a token of the read scope alone.")
        }
        Ok(token) if token.scopes.iter().any(|s| *s != Scope::Read) => Some(
            "Sign in with a read-only token: this one can also write, and the dashboard \
             keeps it in the browser.",
        ),
        Ok(_) => None,
        Err(ApiError::Unauthorized(_)) => {
            Some("This token is not valid: unknown, revoked or expired.")
        }
        Err(e) => return error_page(e, false),
    };
    if let Some(problem) = problem {
        return login_page(&next, Some(problem), StatusCode::UNAUTHORIZED);
    }
    // Tokens are URL-safe; anything else never reaches here (it would not
    // authenticate).
    let secure = headers
        .get("x-forwarded-proto")
        .is_some_and(|v| v.as_bytes().eq_ignore_ascii_case(b"https"));
    let cookie = format!(
        "{COOKIE}={secret}; Path=/ui; Max-Age={SESSION_S}; HttpOnly; SameSite=Strict{}",
        if secure { "; Secure" } else { "" }
    );
    let mut response = Redirect::to(&next).into_response();
    if let Ok(value) = HeaderValue::from_str(&cookie) {
        response.headers_mut().insert(header::SET_COOKIE, value);
    }
    response
}

async fn logout(headers: HeaderMap) -> Response {
    if cross_site(&headers) {
        return refuse_cross_site();
    }
    let mut response = Redirect::to("/ui/login").into_response();
    response.headers_mut().insert(
        header::SET_COOKIE,
        HeaderValue::from_static(
            "joulecast_token=; Path=/ui; Max-Age=0; HttpOnly; SameSite=Strict",
        ),
    );
    response
}

async fn stylesheet() -> Response {
    asset("text/css; charset=utf-8", STYLESHEET)
}

async fn favicon() -> Response {
    asset("image/svg+xml", FAVICON)
}

fn asset(content_type: &'static str, body: &'static str) -> Response {
    (
        [
            (header::CONTENT_TYPE, content_type),
            (header::CACHE_CONTROL, "public, max-age=3600"),
        ],
        body,
    )
        .into_response()
}

/// The pages of the navigation bar: path and name.
const PAGES: [(&str, &str); 4] = [
    ("/ui/apps", "Applications"),
    ("/ui/power", "Power"),
    ("/ui/budgets", "Budgets"),
    ("/ui/nodes", "Nodes"),
];

/// A whole page: `title`, the navigation with `current` marked, `body`.
pub fn page(title: &str, current: Option<&str>, viewer: &Viewer, body: Markup) -> Response {
    page_with_status(title, current, viewer.signed_in, body, StatusCode::OK)
}

fn page_with_status(
    title: &str,
    current: Option<&str>,
    signed_in: bool,
    body: Markup,
    status: StatusCode,
) -> Response {
    let markup = html! {
        (DOCTYPE)
        html lang="en" {
            head {
                meta charset="utf-8";
                meta name="viewport" content="width=device-width, initial-scale=1";
                title { (title) " · Joulecast" }
                link rel="stylesheet" href="/ui/assets/joulecast.css";
                link rel="icon" href="/ui/assets/favicon.svg" type="image/svg+xml";
            }
            body {
                header {
                    nav aria-label="Dashboard" {
                        a.brand href="/ui/apps" { "Joulecast" }
                        @for (path, name) in PAGES {
                            @if current == Some(path) {
                                a href=(path) aria-current="page" { (name) }
                            } @else {
                                a href=(path) { (name) }
                            }
                        }
                        span.spacer {}
                        a href="/docs/" { "API" }
                        @if signed_in {
                            form.logout method="post" action="/ui/logout" {
                                button type="submit" { "Sign out" }
                            }
                        }
                    }
                }
                main { (body) }
            }
        }
    };
    let mut response = (status, markup.into_string()).into_response();
    let headers = response.headers_mut();
    headers.insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("text/html; charset=utf-8"),
    );
    headers.insert(
        header::CONTENT_SECURITY_POLICY,
        HeaderValue::from_static(CSP),
    );
    headers.insert(header::CACHE_CONTROL, HeaderValue::from_static("no-store"));
    headers.insert(
        header::X_CONTENT_TYPE_OPTIONS,
        HeaderValue::from_static("nosniff"),
    );
    response
}

/// An error as a page, with the API's status and explanation.
pub fn error_page(error: ApiError, signed_in: bool) -> Response {
    let problem = error.into_problem();
    let status = StatusCode::from_u16(problem.status).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
    let body = html! {
        section.error {
            h1 { (problem.title) }
            p { (problem.detail) }
            @if !problem.errors.is_empty() {
                ul { @for e in &problem.errors { li { code { (e.field) } ": " (e.reason) } } }
            }
            p { a href="/ui/apps" { "Back to the applications" } }
        }
    };
    page_with_status(&problem.title, None, signed_in, body, status)
}

/// An error's page (boxed: a response is large, and most answers are not
/// errors).
pub struct ErrorPage(Box<Response>);

impl IntoResponse for ErrorPage {
    fn into_response(self) -> Response {
        *self.0
    }
}

/// A page's answer: the page, or the error's page.
pub type PageResult = Result<Response, ErrorPage>;

/// `error` as a page for `viewer`.
pub fn fail(error: ApiError, viewer: &Viewer) -> ErrorPage {
    ErrorPage(Box::new(error_page(error, viewer.signed_in)))
}

/// `result`, or its error as a page.
pub fn or_error_page<T>(result: Result<T, ApiError>, viewer: &Viewer) -> Result<T, ErrorPage> {
    result.map_err(|e| fail(e, viewer))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_dashboard_pages_are_returned_to_after_login() {
        assert_eq!(safe_next(Some("/ui/power")), "/ui/power");
        assert_eq!(safe_next(Some("/ui/apps?q=lam")), "/ui/apps?q=lam");
        assert_eq!(safe_next(Some("/ui/apps?q=a%20b")), "/ui/apps?q=a%20b");
        assert_eq!(safe_next(Some("/ui/apps/a..b")), "/ui/apps/a..b");
        for elsewhere in [
            "https://evil.example",
            "//evil.example",
            "/ui//evil",
            "/v1/tokens",
            "/ui\\x",
            "/ui/apps\nSet-Cookie: x=1",
            // Dot segments a browser resolves outside the dashboard (a
            // black-box test of 2026-11-29), written out or encoded.
            "/ui/../v1/tokens",
            "/ui/./../v1",
            "/ui/..%2f..%2fv1/tokens",
            "/ui/%2e%2e/v1/tokens",
        ] {
            assert_eq!(safe_next(Some(elsewhere)), "/ui/apps", "{elsewhere}");
        }
        assert_eq!(safe_next(None), "/ui/apps");
    }

    #[test]
    fn forms_posted_from_other_sites_are_told_apart() {
        let headers = |pairs: &[(&'static str, &'static str)]| {
            let mut h = HeaderMap::new();
            for (k, v) in pairs {
                h.insert(*k, HeaderValue::from_static(v));
            }
            h
        };
        // Browsers that say where the request comes from.
        assert!(!cross_site(&headers(&[("sec-fetch-site", "same-origin")])));
        assert!(!cross_site(&headers(&[("sec-fetch-site", "none")])));
        assert!(cross_site(&headers(&[("sec-fetch-site", "cross-site")])));
        assert!(cross_site(&headers(&[("sec-fetch-site", "same-site")])));
        // Older ones: the Origin against the host asked.
        let host = ("host", "127.0.0.1:8080");
        assert!(!cross_site(&headers(&[
            ("origin", "http://127.0.0.1:8080"),
            host
        ])));
        assert!(cross_site(&headers(&[
            ("origin", "http://localhost:8081"),
            host
        ])));
        assert!(cross_site(&headers(&[("origin", "null"), host])));
        // Behind a proxy: the host the browser asked for.
        assert!(!cross_site(&headers(&[
            ("origin", "https://energy.example.org"),
            ("x-forwarded-host", "energy.example.org"),
            host
        ])));
        // Neither: not a browser.
        assert!(!cross_site(&headers(&[host])));
    }

    #[test]
    fn the_session_cookie_is_found_among_others() {
        let mut headers = HeaderMap::new();
        headers.insert(
            header::COOKIE,
            HeaderValue::from_static("a=1; joulecast_token=jc_x; b=2"),
        );
        assert_eq!(cookie(&headers, COOKIE).as_deref(), Some("jc_x"));
        headers.insert(header::COOKIE, HeaderValue::from_static("joulecast_token="));
        assert_eq!(cookie(&headers, COOKIE), None);
    }
}
