//! `deploy/slurm` end to end under real Slurm daemons (issue 14): runs
//! `tests/slurm/run.sh`, which starts munge, MariaDB, slurmdbd, slurmctld and
//! four slurmd on loopback, this build of the service, installs deploy/slurm
//! as its README says and submits real jobs (about 3 minutes).
//!
//! It needs root or passwordless sudo, and installs Debian's Slurm packages
//! when missing. `JOULECAST_SKIP_SLURM=1` leaves it out, saying so.

use std::process::Command;

#[test]
fn deploy_slurm_works_under_real_slurm_daemons() {
    if std::env::var_os("JOULECAST_SKIP_SLURM").is_some() {
        eprintln!("JOULECAST_SKIP_SLURM is set: the Slurm end-to-end test did not run");
        return;
    }
    let output = Command::new("bash")
        .arg("tests/slurm/run.sh")
        .current_dir(env!("CARGO_MANIFEST_DIR"))
        .env("JOULECAST_BIN", env!("CARGO_BIN_EXE_joulecast"))
        .output()
        .expect("run tests/slurm/run.sh");
    let report = String::from_utf8_lossy(&output.stdout);
    assert!(
        output.status.success(),
        "{report}\n{}",
        String::from_utf8_lossy(&output.stderr)
    );
    assert!(report.contains(" 0 failed"), "{report}");
    assert!(!report.contains("FAILED"), "{report}");
}
