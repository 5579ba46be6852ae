//! deploy/k8s (issue 16): every manifest validated by `kubernetes-validate`
//! (from PyPI, pinned) against the JSON schemas of a pinned Kubernetes
//! version, strictly (an unknown field fails), and the references between
//! the resources checked (`tests/k8s/validate.py`).
//!
//! Needs `python3` with `venv`; the first run installs kubernetes-validate
//! into a virtual environment under `target/` (a few seconds).

use std::path::Path;
use std::process::Command;

use crate::support::run_ok;

const VALIDATOR: &str = "1.37.0";
/// The Kubernetes version the manifests are written for.
const KUBERNETES: &str = "1.31.0";

#[test]
fn the_kubernetes_manifests_validate_against_a_pinned_version() {
    let venv =
        Path::new(env!("CARGO_TARGET_TMPDIR")).join(format!("kubernetes-validate-{VALIDATOR}"));
    let python = venv.join("bin/python");
    if !python.exists() {
        run_ok(Command::new("python3").args(["-m", "venv", venv.to_str().unwrap()]));
        let package = format!("kubernetes-validate=={VALIDATOR}");
        run_ok(Command::new(&python).args(["-m", "pip", "install", "-q", &package]));
    }
    let script = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/k8s/validate.py");
    let report = run_ok(Command::new(&python).args([script, KUBERNETES]));
    for kind in [
        "Deployment",
        "Service",
        "PodDisruptionBudget",
        "Secret",
        "Namespace",
    ] {
        assert!(
            report.contains(&format!(": {kind}/")),
            "{kind} not validated:\n{report}"
        );
    }
    assert!(report.contains(" 0 problems"), "{report}");
}
