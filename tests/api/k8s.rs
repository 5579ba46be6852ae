//! deploy/k8s (issue 16): every manifest validated by `kubernetes-validate`
//! (from PyPI, pinned) against the JSON schemas of a pinned Kubernetes
//! version, strictly (an unknown field fails), and the references between
//! the resources checked (`tests/k8s/validate.py`).
//!
//! Needs `python3` with `venv`; the first run installs kubernetes-validate
//! into a virtual environment under `target/` (a few seconds).

use std::path::Path;
use std::process::Command;

const VALIDATOR: &str = "1.37.0";
/// The Kubernetes version the manifests are written for.
const KUBERNETES: &str = "1.31.0";

fn run(program: &Path, args: &[&str]) -> String {
    let output = Command::new(program)
        .args(args)
        .output()
        .unwrap_or_else(|e| panic!("cannot run {program:?}: {e} (needs python3 with venv)"));
    let stdout = String::from_utf8_lossy(&output.stdout).into_owned();
    assert!(
        output.status.success(),
        "{program:?} {args:?} failed:\n{stdout}\n{}",
        String::from_utf8_lossy(&output.stderr)
    );
    stdout
}

#[test]
fn the_kubernetes_manifests_validate_against_a_pinned_version() {
    let venv =
        Path::new(env!("CARGO_TARGET_TMPDIR")).join(format!("kubernetes-validate-{VALIDATOR}"));
    let python = venv.join("bin/python");
    if !python.exists() {
        run(
            Path::new("python3"),
            &["-m", "venv", venv.to_str().unwrap()],
        );
        let package = format!("kubernetes-validate=={VALIDATOR}");
        run(&python, &["-m", "pip", "install", "-q", &package]);
    }
    let script = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/k8s/validate.py");
    let report = run(&python, &[script, KUBERNETES]);
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
