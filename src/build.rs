// `sqlx::migrate!` embeds migrations/ at compile time; without this, adding
// a migration does not rebuild the crate (as `sqlx migrate build-script`
// writes it).
fn main() {
    println!("cargo:rerun-if-changed=migrations");
}
