//! docker-compose.yml without Docker (no engine runs on this project's machines or in CI, so
//! the file is never started): it parses as YAML, every image it names is listed in
//! docs/operations.md's Docker section, every `IMGCAS_*` variable in it is one imgcas reads,
//! and every file it takes from the repository (bind mounts, the Dockerfile) exists. Whether
//! the images pull and the services come up healthy is not checked here.

use std::path::Path;

use yaml_rust2::yaml::Hash;
use yaml_rust2::{Yaml, YamlLoader};

fn repo() -> &'static Path {
    Path::new(env!("CARGO_MANIFEST_DIR"))
}

fn read(path: &str) -> String {
    std::fs::read_to_string(repo().join(path)).unwrap_or_else(|e| panic!("{path}: {e}"))
}

/// The text of a page's `## {title}` section, up to the next `## ` heading.
fn section(page: &str, title: &str) -> String {
    let heading = format!("## {title}");
    let mut lines = page.lines().skip_while(|l| l.trim_end() != heading);
    assert!(lines.next().is_some(), "no `{heading}` section");
    lines
        .take_while(|l| !l.starts_with("## "))
        .collect::<Vec<_>>()
        .join("\n")
}

/// `node` with YAML merge keys (`<<: *anchor`) applied, as Compose reads it: a mapping's own
/// keys win over the merged ones. The parser has already replaced each alias by a copy.
fn merged(node: &Yaml) -> Yaml {
    match node {
        Yaml::Hash(map) => {
            let merge_key = Yaml::String("<<".into());
            let mut out = Hash::new();
            for (key, value) in map.iter().filter(|(key, _)| **key != merge_key) {
                out.insert(key.clone(), merged(value));
            }
            let bases = match map.get(&merge_key) {
                Some(Yaml::Array(list)) => list.clone(),
                Some(one) => vec![one.clone()],
                None => Vec::new(),
            };
            for base in &bases {
                let Yaml::Hash(base) = merged(base) else {
                    continue;
                };
                for (key, value) in base {
                    if !out.contains_key(&key) {
                        out.insert(key, value);
                    }
                }
            }
            Yaml::Hash(out)
        }
        Yaml::Array(list) => Yaml::Array(list.iter().map(merged).collect()),
        other => other.clone(),
    }
}

/// Every `IMGCAS_*` name in the strings of `node`, keys included (an `environment:` mapping,
/// a `KEY=value` list, a command line).
fn variables(node: &Yaml, found: &mut Vec<String>) {
    match node {
        Yaml::String(text) => {
            let mut rest = text.as_str();
            while let Some(at) = rest.find("IMGCAS_") {
                let tail = &rest[at..];
                let end = tail
                    .find(|c: char| !(c.is_ascii_uppercase() || c.is_ascii_digit() || c == '_'))
                    .unwrap_or(tail.len());
                found.push(tail[..end].to_string());
                rest = &tail[end..];
            }
        }
        Yaml::Hash(map) => {
            for (key, value) in map {
                variables(key, found);
                variables(value, found);
            }
        }
        Yaml::Array(list) => list.iter().for_each(|item| variables(item, found)),
        _ => {}
    }
}

/// The repository paths a service takes: bind mounts (short `./src:/dst[:mode]` or long
/// `{type: bind, source}`), and its build's context and Dockerfile.
fn repository_paths(service: &Yaml) -> Vec<String> {
    let mut paths = Vec::new();
    for volume in service["volumes"].as_vec().into_iter().flatten() {
        let source = match volume {
            Yaml::String(short) => short.split(':').next().unwrap_or_default(),
            long if long["type"].as_str() == Some("bind") => {
                long["source"].as_str().unwrap_or_default()
            }
            _ => continue,
        };
        // A named volume has no slash; a bind mount is a path.
        if source.starts_with('.') || source.starts_with('/') {
            paths.push(source.to_string());
        }
    }
    let build = &service["build"];
    let context = build
        .as_str()
        .or_else(|| build["context"].as_str())
        .map(str::to_string);
    if let Some(context) = context {
        let dockerfile = build["dockerfile"].as_str().unwrap_or("Dockerfile");
        paths.push(format!("{}/{dockerfile}", context.trim_end_matches('/')));
        paths.push(context);
    }
    paths
}

/// What is wrong with a compose file's text, given the docs section that lists its images and
/// the directory it sits in: one line per problem.
fn problems(compose: &str, images_doc: &str, dir: &Path) -> Vec<String> {
    let docs = match YamlLoader::load_from_str(compose) {
        Ok(docs) => docs,
        Err(e) => return vec![format!("not YAML: {e}")],
    };
    let [doc] = docs.as_slice() else {
        return vec![format!("{} YAML documents, not one", docs.len())];
    };
    let doc = merged(doc);
    let Some(services) = doc["services"].as_hash().filter(|s| !s.is_empty()) else {
        return vec!["no services".into()];
    };
    let settings: Vec<&str> = imgcas::config::ENVIRONMENT
        .iter()
        .map(|row| row.var)
        .collect();
    let logger = [imgcas::log::FILTER_VAR, imgcas::log::FORMAT_VAR];
    let mut problems = Vec::new();
    for (name, service) in services {
        let name = name.as_str().unwrap_or("?");
        match &service["image"] {
            Yaml::String(image) if !images_doc.contains(&format!("`{image}`")) => problems.push(
                format!("{name}: image {image} is not listed in docs/operations.md#docker"),
            ),
            Yaml::String(_) => {}
            Yaml::BadValue if !service["build"].is_badvalue() => {}
            _ => problems.push(format!("{name}: neither an image nor a build")),
        }
        for path in repository_paths(service) {
            if !dir.join(&path).exists() {
                problems.push(format!("{name}: {path} does not exist"));
            }
        }
    }
    let mut found = Vec::new();
    variables(&doc, &mut found);
    found.sort();
    found.dedup();
    for var in found {
        if !settings.contains(&var.as_str()) && !logger.contains(&var.as_str()) {
            problems.push(format!(
                "{var} is not a setting (docs/configuration.md) nor the log's variable"
            ));
        }
    }
    problems
}

fn images_doc() -> String {
    section(&read("docs/operations.md"), "Docker")
}

#[test]
fn the_compose_file_parses_and_names_documented_images_known_settings_and_present_files() {
    let problems = problems(&read("docker-compose.yml"), &images_doc(), repo());
    assert!(
        problems.is_empty(),
        "docker-compose.yml:\n{}",
        problems.join("\n")
    );
    // The log's variables are read apart from the configuration; its page says so.
    let page = read("docs/configuration.md");
    for var in [imgcas::log::FILTER_VAR, imgcas::log::FORMAT_VAR] {
        assert!(
            page.contains(&format!("`{var}")),
            "{var} not on configuration.md"
        );
    }
}

/// The check fails for what it is there to catch: an image the docs do not list (MinIO's,
/// whose repository is gone), a variable imgcas does not read, a mounted file that is not in
/// the repository, and text that is not YAML.
#[test]
fn the_compose_check_catches_an_undocumented_image_an_unknown_variable_and_a_missing_file() {
    let compose = read("docker-compose.yml");
    let image = compose
        .lines()
        .find_map(|l| l.trim().strip_prefix("image: chrislusf/seaweedfs:"))
        .map(|tag| format!("chrislusf/seaweedfs:{tag}"))
        .expect("the compose file runs SeaweedFS");
    let broken = compose
        .replacen(&format!("image: {image}"), "image: minio/minio:latest", 1)
        .replacen(
            "IMGCAS_STORAGE: s3",
            "IMGCAS_STORAGE: s3\n      IMGCAS_S3_SECRET: imgcas-s3-secret",
            1,
        )
        .replacen("./deploy/nginx-cluster.conf:", "./deploy/nginx.conf:", 1);
    let found = problems(&broken, &images_doc(), repo());
    let expected = [
        "seaweedfs: image minio/minio:latest is not listed in docs/operations.md#docker",
        "balancer: ./deploy/nginx.conf does not exist",
        "IMGCAS_S3_SECRET is not a setting (docs/configuration.md) nor the log's variable",
    ];
    assert_eq!(found, expected);

    let not_yaml = problems("services:\n  a: [\n", &images_doc(), repo());
    assert!(
        not_yaml.len() == 1 && not_yaml[0].starts_with("not YAML"),
        "{not_yaml:?}"
    );
}
