//! The OpenAPI document's frame: info, security scheme, tags. The paths come
//! from the handlers' `#[utoipa::path]` attributes.

use utoipa::openapi::security::{HttpAuthScheme, HttpBuilder, SecurityScheme};
use utoipa::{Modify, OpenApi};

use super::error::responses::*;

#[derive(OpenApi)]
#[openapi(
    info(
        title = "Joulecast",
        description = "Energy (EtS), power (APC) and time (TtS) history and predictions for HPC \
                       applications.\n\nAll values are SI with a unit suffix: `energy_j`, \
                       `avg_power_w`, `duration_s`. Errors are RFC 7807 \
                       `application/problem+json` documents naming the fields at fault.\n\n\
                       Authentication: `Authorization: Bearer <token>`. Scopes: `read`, \
                       `ingest`, `schedule` (includes `read`), `admin` (includes all).",
        license(name = "Proprietary")
    ),
    components(responses(
        Unauthorized, Unavailable, NeedsRead, NeedsIngest, NeedsSchedule, NeedsAdmin, NotJson,
        TooLarge, MalformedJson, UnknownApp, BadQuery, BadParameter, FitsBusy, HeavyBusy, NoRuns,
    )),
    modifiers(&BearerAuth),
    tags(
        (name = "runs", description = "Energy and power history of application runs"),
        (name = "apps", description = "Applications (energy tags) and their metadata"),
        (name = "predictions", description = "EtS, APC and TtS predictions (A2EP2)"),
        (name = "capacity", description = "Largest node count under a power limit, optimal node counts, Pareto front"),
        (name = "power", description = "Power caps and headroom"),
        (name = "budgets", description = "Energy budgets per account"),
        (name = "jobs", description = "Jobs in flight: start, finish, cancel"),
        (name = "scalability", description = "Empirical scaling models, expectations, efficiency factors"),
        (name = "nodes", description = "Node registry, power samples and power classification"),
        (name = "tokens", description = "API tokens (admin)"),
        (name = "health", description = "Liveness and readiness"),
    )
)]
pub struct ApiDoc;

struct BearerAuth;

impl Modify for BearerAuth {
    fn modify(&self, openapi: &mut utoipa::openapi::OpenApi) {
        let components = openapi.components.get_or_insert_with(Default::default);
        components.add_security_scheme(
            "bearer",
            SecurityScheme::Http(HttpBuilder::new().scheme(HttpAuthScheme::Bearer).build()),
        );
    }
}
