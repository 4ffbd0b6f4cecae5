//! Every TOML snippet of the READMEs and the porting guide parses; a service file's reads
//! into `ResilienceConfig`, a manifest's names crates of this workspace with their features.

use tripline_policies::config::ResilienceConfig;

const DOCS: [(&str, &str); 6] = [
    ("README.md", include_str!("../../../README.md")),
    (
        "crates/tripline/README.md",
        include_str!("../../tripline/README.md"),
    ),
    (
        "crates/tripline-policies/README.md",
        include_str!("../../tripline-policies/README.md"),
    ),
    (
        "crates/tripline-redis/README.md",
        include_str!("../../tripline-redis/README.md"),
    ),
    (
        "crates/tripline-dashboard/README.md",
        include_str!("../../tripline-dashboard/README.md"),
    ),
    ("docs/porting.md", include_str!("../../../docs/porting.md")),
];

/// The fenced blocks of `text` tagged `lang`, with the line each starts at.
fn blocks(text: &str, lang: &str) -> Vec<(usize, String)> {
    let mut out = Vec::new();
    let mut current: Option<(usize, String)> = None;
    for (i, line) in text.lines().enumerate() {
        match &mut current {
            None if line.trim_start() == format!("```{lang}") => {
                current = Some((i + 2, String::new()))
            }
            Some(_) if line.trim_start() == "```" => out.push(current.take().unwrap()),
            Some((_, body)) => {
                body.push_str(line);
                body.push('\n');
            }
            None => {}
        }
    }
    out
}

#[test]
fn every_toml_snippet_parses_and_a_service_file_configures_a_service() {
    let mut seen = 0;
    for (file, text) in DOCS {
        for (line, body) in blocks(text, "toml") {
            let table: toml::Table =
                toml::from_str(&body).unwrap_or_else(|e| panic!("{file}:{line}: {e}"));
            if table.contains_key("registry") || table.contains_key("pipelines") {
                let config: ResilienceConfig =
                    toml::from_str(&body).unwrap_or_else(|e| panic!("{file}:{line}: {e}"));
                config.registry().unwrap();
                for name in config.pipelines().keys() {
                    config
                        .pipeline(name)
                        .unwrap_or_else(|e| panic!("{file}:{line}: {e}"));
                }
            }
            if let Some(deps) = table.get("dependencies").and_then(|d| d.as_table()) {
                for (name, dep) in deps.iter().filter(|(n, _)| n.starts_with("tripline")) {
                    let workspace = [
                        "tripline",
                        "tripline-policies",
                        "tripline-redis",
                        "tripline-dashboard",
                        "tripline-sim",
                    ];
                    assert!(workspace.contains(&name.as_str()), "{file}:{line}: {name}");
                    if let Some(features) = dep.get("features").and_then(|f| f.as_array()) {
                        let manifest = match name.as_str() {
                            "tripline" => include_str!("../../tripline/Cargo.toml"),
                            "tripline-policies" => {
                                include_str!("../../tripline-policies/Cargo.toml")
                            }
                            "tripline-redis" => include_str!("../../tripline-redis/Cargo.toml"),
                            _ => "",
                        };
                        let manifest: toml::Table = toml::from_str(manifest).unwrap();
                        let known = manifest["features"].as_table().unwrap();
                        for f in features {
                            let f = f.as_str().unwrap();
                            assert!(
                                known.contains_key(f),
                                "{file}:{line}: {name} has no feature {f}"
                            );
                        }
                    }
                }
            }
            seen += 1;
        }
    }
    assert!(seen >= 7, "{seen} TOML snippets");
}
