//! The shape of the repository: the project explains itself, and every
//! reference a reader follows stays inside it.

use std::path::{Path, PathBuf};

use crate::support::files_under;

fn root() -> &'static Path {
    Path::new(env!("CARGO_MANIFEST_DIR"))
}

/// Every text file under `dirs` (relative to the root) and the named
/// top-level files, skipping fixtures.
fn project_files(dirs: &[&str], top: &[&str]) -> Vec<PathBuf> {
    let text = [
        "rs", "md", "sql", "sh", "lua", "toml", "yml", "yaml", "json", "py",
    ];
    let mut files: Vec<PathBuf> = top.iter().map(|f| root().join(f)).collect();
    for dir in dirs {
        files.extend(files_under(&root().join(dir), &text));
    }
    files
}

/// The sections of docs/model.md, as cited: "2", "2.1", …
fn model_sections() -> Vec<String> {
    let text = std::fs::read_to_string(root().join("docs/model.md")).unwrap();
    text.lines()
        .filter_map(|line| {
            let heading = line.strip_prefix("### ").or(line.strip_prefix("## "))?;
            let number = heading.split_whitespace().next()?.trim_end_matches('.');
            number
                .chars()
                .all(|c| c.is_ascii_digit() || c == '.')
                .then(|| number.to_owned())
        })
        .collect()
}

/// Section numbers cited as `model.md §N` in `text`, the citation possibly
/// wrapped onto the next comment line.
fn cited_sections(text: &str) -> Vec<String> {
    let mut cited = Vec::new();
    let mut rest = text;
    while let Some(at) = rest.find("model.md") {
        rest = &rest[at + "model.md".len()..];
        let after = rest
            .trim_start_matches(|c: char| c.is_whitespace() || c == '/' || c == '!' || c == '-');
        if let Some(section) = after.strip_prefix('§') {
            let number: String = section
                .chars()
                .take_while(|c| c.is_ascii_digit() || *c == '.')
                .collect();
            cited.push(number.trim_end_matches('.').to_owned());
        }
    }
    cited
}

/// No file points outside the repository for the domain or the
/// mathematics, and every section cited from docs/model.md exists.
#[test]
fn every_reference_stays_inside_the_repository() {
    let sections = model_sections();
    assert!(
        [
            "1", "2", "2.1", "2.2", "3", "4", "5", "6.1", "6.2", "6.3", "7"
        ]
        .iter()
        .all(|s| sections.iter().any(|x| x == s)),
        "docs/model.md sections: {sections:?}"
    );
    let files = project_files(
        &[
            "src",
            "tests",
            "migrations",
            "docs",
            "deploy",
            "openapi",
            ".ci",
        ],
        &["README.md", "Cargo.toml", "docker-compose.yml"],
    );
    assert!(files.len() > 50, "{} files", files.len());
    let mut problems = Vec::new();
    let mut citations = 0;
    for file in &files {
        let Ok(text) = std::fs::read_to_string(file) else {
            continue;
        };
        let name = file.strip_prefix(root()).unwrap_or(file).display();
        // Spelled in two parts, so that this file does not name them.
        for outside in [concat!("design", ".md"), concat!("../", "shared/")] {
            if text.contains(outside) {
                problems.push(format!("{name} refers to {outside}"));
            }
        }
        if file.ends_with("tests/api/layout.rs") {
            continue;
        }
        for section in cited_sections(&text) {
            citations += 1;
            if !sections.contains(&section) {
                problems.push(format!(
                    "{name} cites docs/model.md §{section}, which does not exist"
                ));
            }
        }
    }
    assert!(citations > 50, "only {citations} citations found");
    assert!(problems.is_empty(), "{problems:#?}");
}

/// The crate modules a source file or directory under src/ names
/// (`crate::x`, or each item of `crate::{x, y::z}`, across lines), outside
/// comments.
fn crate_dependencies(path: &Path) -> std::collections::BTreeSet<String> {
    assert!(path.exists(), "{} does not exist", path.display());
    let mut found = std::collections::BTreeSet::new();
    let ident = |s: &str| -> String {
        s.trim_start()
            .chars()
            .take_while(|c| c.is_ascii_alphanumeric() || *c == '_')
            .collect()
    };
    for file in files_under(path, &["rs"]) {
        let text = std::fs::read_to_string(&file).unwrap();
        let code: Vec<&str> = text
            .lines()
            .map(|line| line.split("//").next().unwrap_or_default())
            .collect();
        let code = code.join("\n");
        let mut rest = code.as_str();
        while let Some(at) = rest.find("crate::") {
            rest = &rest[at + "crate::".len()..];
            let Some(inner) = rest.strip_prefix('{') else {
                found.insert(ident(rest));
                continue;
            };
            // The first segment of each item at the top level of the braces.
            let (mut depth, mut start) = (0, 0);
            for (i, c) in inner.char_indices() {
                match c {
                    '{' => depth += 1,
                    '}' if depth == 0 => {
                        found.insert(ident(&inner[start..i]));
                        break;
                    }
                    '}' => depth -= 1,
                    ',' if depth == 0 => {
                        found.insert(ident(&inner[start..i]));
                        start = i + 1;
                    }
                    _ => {}
                }
            }
        }
    }
    found.remove("");
    found
}

#[test]
fn dependencies_are_read_through_braces() {
    let dir = std::env::temp_dir().join(format!("joulecast-layout-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let file = dir.join("m.rs");
    std::fs::write(
        &file,
        "use crate::{http, store::{self, jobs}, service};\nuse crate::model::x; // crate::cache\n\
         use crate::{\n    db,\n    // crate::tokens\n    ingest::{self, Outcome},\n};\n",
    )
    .unwrap();
    let found = crate_dependencies(&dir);
    std::fs::remove_dir_all(&dir).unwrap();
    let expected: std::collections::BTreeSet<String> =
        ["http", "store", "service", "model", "db", "ingest"]
            .into_iter()
            .map(String::from)
            .collect();
    assert_eq!(found, expected);
}

/// The direction of dependencies, so that it cannot be broken unnoticed:
/// `http → service → {store, model, cache, …}`. Domain values and the
/// settings depend on nothing in the crate, the mathematics only on domain
/// values, the SQL on the mathematics' types and the settings, the use cases
/// (`service`) on everything below them but never on HTTP, and nothing
/// below the HTTP layer reaches up into it. Handlers reach the database
/// only through the service; those of admission, jobs, budgets and power
/// name nothing else of the crate. The
/// command line names `http` only to serve it (and print its OpenAPI
/// document): it creates tokens and searches models through the service.
#[test]
fn dependencies_point_one_way() {
    let src = root().join("src");
    let allowed: [(&str, &[&str]); 13] = [
        ("domain.rs", &[]),
        ("config.rs", &[]),
        ("model", &["domain", "model"]),
        ("store", &["store", "model", "config", "domain"]),
        ("hostlist.rs", &["hostlist", "validate"]),
        ("validate.rs", &["validate", "hostlist", "domain", "text"]),
        ("text.rs", &[]),
        (
            "service",
            &[
                "service", "store", "model", "domain", "config", "predict", "cache", "validate",
                "hostlist", "ingest", "import", "sacct", "tokens", "text",
            ],
        ),
        ("http/admission.rs", &["service"]),
        ("http/jobs.rs", &["service"]),
        ("http/budgets.rs", &["service", "validate"]),
        ("http/power.rs", &["service"]),
        (
            "cli",
            &[
                "accuracy",
                "cache",
                "config",
                "db",
                "extrap",
                "http",
                "import",
                "model",
                "sacct",
                "server",
                "service",
                "store",
                "telemetry",
                "tokens",
                "validate",
            ],
        ),
    ];
    let mut problems = Vec::new();
    for (module, may) in allowed {
        for used in crate_dependencies(&src.join(module)) {
            if !may.contains(&used.as_str()) {
                problems.push(format!("src/{module} depends on crate::{used}"));
            }
        }
    }
    let above_http = ["http", "cli", "server.rs", "lib.rs", "main.rs"];
    for entry in std::fs::read_dir(&src).unwrap().flatten() {
        let name = entry.file_name().to_string_lossy().into_owned();
        if !above_http.contains(&name.as_str())
            && crate_dependencies(&entry.path()).contains("http")
        {
            problems.push(format!("src/{name} reaches up into crate::http"));
        }
    }
    // Handlers reach the database, and the caches' invalidation, only
    // through the service.
    if crate_dependencies(&src.join("http")).contains("store") {
        problems.push("src/http depends on crate::store".into());
    }
    assert!(problems.is_empty(), "{problems:#?}");
    // The check sees dependencies where there are some.
    assert!(crate_dependencies(&src.join("store")).contains("model"));
    assert!(crate_dependencies(&src.join("http/jobs.rs")).contains("service"));
}

/// The README's module map names every file and directory under src/, so
/// that a new module cannot arrive unexplained.
#[test]
fn the_readme_maps_every_module() {
    let readme = std::fs::read_to_string(root().join("README.md")).unwrap();
    let mut missing = Vec::new();
    for entry in std::fs::read_dir(root().join("src")).unwrap().flatten() {
        let name = entry.file_name().to_string_lossy().into_owned();
        let shown = if entry.path().is_dir() {
            format!("`src/{name}/`")
        } else {
            format!("`src/{name}`")
        };
        if !readme.contains(&shown) {
            missing.push(shown);
        }
    }
    assert!(missing.is_empty(), "README.md's layout lacks {missing:?}");
}
