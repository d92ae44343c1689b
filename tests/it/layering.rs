//! The house rule, checked on every `cargo test`: a module of the library imports only modules
//! of lower layers (its own subtree aside), so a request walks down and nothing reaches back
//! up. The check parses every file under `src/` (the binary's `main.rs` and `cli/` aside) and
//! resolves each `crate::`, `super::` and `self::` path — in `use` trees, in expressions and
//! types, and in macro bodies — to the top-level module it names.
//!
//! `LADDER` is the rule: a new module must be placed on it, and an arrow that points up
//! fails with the file and the path. The committed fixture `tests/fixtures/upward-import`
//! proves the check catches a grouped `use crate::{…}`, a `super::super::`, an expression
//! path and a path inside a macro.

use std::path::{Path, PathBuf};

use syn::visit_mut::{self, VisitMut};

/// Top-level modules of the library and their layer: an import must point to a lower layer.
const LADDER: &[(&str, u32)] = &[
    ("hash", 0),
    ("config", 1),
    ("log", 1),
    ("s3", 1),
    ("blob", 2),
    ("maps", 2),
    ("fetch", 2),
    ("coalesce", 2),
    ("admission", 2),
    ("signing", 2),
    ("stats", 2),
    ("hot", 3),
    ("negative", 3),
    ("metrics", 3),
    ("error", 3),
    ("wire", 4),
    ("pipeline", 5),
    ("ingest", 6),
    ("http", 7),
    ("app", 8),
];

fn layer(module: &str) -> Option<u32> {
    LADDER.iter().find(|(m, _)| *m == module).map(|(_, l)| *l)
}

/// One arrow that breaks the rule.
#[derive(Debug)]
struct Violation {
    file: PathBuf,
    from: String,
    to: String,
    path: String,
}

impl std::fmt::Display for Violation {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "{}: `{}` (layer {:?}) imports `{}` (layer {:?}) through `{}`",
            self.file.display(),
            self.from,
            layer(&self.from),
            self.to,
            layer(&self.to),
            self.path
        )
    }
}

/// Walks one file, resolving paths against the module they are written in.
struct Imports {
    /// The module being walked, from the crate root (`["maps", "redb", "variants"]`).
    module: Vec<String>,
    /// (top-level module named, the path as written).
    found: Vec<(String, String)>,
    /// Every path named, from the crate root (`crate::maps::redb::open` from anywhere), for
    /// the check of circles among files.
    absolute: Vec<Vec<String>>,
}

impl Imports {
    /// The top-level module an absolute-or-relative path names, if it leaves its own module
    /// by `crate`, `super` or `self`.
    fn resolve(&mut self, segments: &[String]) {
        let Some(first) = segments.first() else {
            return;
        };
        let mut here = self.module.clone();
        let rest = match first.as_str() {
            "crate" => {
                here.clear();
                &segments[1..]
            }
            "super" => {
                let supers = segments.iter().take_while(|s| *s == "super").count();
                for _ in 0..supers {
                    here.pop();
                }
                &segments[supers..]
            }
            "self" => &segments[1..],
            _ => return,
        };
        let top = here.first().or(rest.first());
        if let Some(top) = top {
            self.found.push((top.clone(), segments.join("::")));
        }
        self.absolute
            .push(here.iter().chain(rest).cloned().collect::<Vec<_>>());
    }

    fn use_tree(&mut self, prefix: &mut Vec<String>, tree: &syn::UseTree) {
        match tree {
            syn::UseTree::Path(p) => {
                prefix.push(p.ident.to_string());
                self.use_tree(prefix, &p.tree);
                prefix.pop();
            }
            syn::UseTree::Name(n) => {
                prefix.push(n.ident.to_string());
                let path = prefix.clone();
                self.resolve(&path);
                prefix.pop();
            }
            syn::UseTree::Rename(r) => {
                prefix.push(r.ident.to_string());
                let path = prefix.clone();
                self.resolve(&path);
                prefix.pop();
            }
            syn::UseTree::Glob(_) => {
                let path = prefix.clone();
                self.resolve(&path);
            }
            syn::UseTree::Group(g) => {
                for item in &g.items {
                    self.use_tree(prefix, item);
                }
            }
        }
    }
}

impl VisitMut for Imports {
    fn visit_item_use_mut(&mut self, item: &mut syn::ItemUse) {
        self.use_tree(&mut Vec::new(), &item.tree);
    }

    fn visit_path_mut(&mut self, path: &mut syn::Path) {
        let segments: Vec<String> = path.segments.iter().map(|s| s.ident.to_string()).collect();
        if segments.len() > 1 {
            self.resolve(&segments);
        }
        visit_mut::visit_path_mut(self, path);
    }

    fn visit_macro_mut(&mut self, mac: &mut syn::Macro) {
        // Macro bodies are tokens, not syntax: read the paths in them that start with
        // `crate`, `super` or `self` (`a :: b :: c` in the tokens' text).
        let text = mac.tokens.to_string();
        let tokens: Vec<&str> = text.split_whitespace().collect();
        let mut i = 0;
        while i < tokens.len() {
            if matches!(tokens[i], "crate" | "super" | "self") && tokens.get(i + 1) == Some(&"::") {
                let mut path = vec![tokens[i].to_string()];
                i += 1;
                while tokens.get(i) == Some(&"::") {
                    match tokens.get(i + 1) {
                        Some(name) if name.chars().all(|c| c.is_alphanumeric() || c == '_') => {
                            path.push(name.to_string());
                            i += 2;
                        }
                        _ => break,
                    }
                }
                self.resolve(&path);
            } else {
                i += 1;
            }
        }
        visit_mut::visit_macro_mut(self, mac);
    }

    fn visit_item_mod_mut(&mut self, item: &mut syn::ItemMod) {
        self.module.push(item.ident.to_string());
        visit_mut::visit_item_mod_mut(self, item);
        self.module.pop();
    }
}

/// The module path of a file under `src` (`maps/redb/mod.rs` → `["maps", "redb"]`).
fn module_of(src: &Path, file: &Path) -> Vec<String> {
    let rel = file.strip_prefix(src).unwrap_or(file);
    let mut parts: Vec<String> = rel
        .iter()
        .map(|p| p.to_string_lossy().trim_end_matches(".rs").to_string())
        .collect();
    if parts.last().is_some_and(|p| p == "mod") {
        parts.pop();
    }
    parts
}

fn rust_files(dir: &Path, out: &mut Vec<PathBuf>) {
    let mut entries: Vec<_> = std::fs::read_dir(dir)
        .unwrap_or_else(|e| panic!("{}: {e}", dir.display()))
        .map(|e| e.expect("directory entry").path())
        .collect();
    entries.sort();
    for path in entries {
        if path.is_dir() {
            rust_files(&path, out);
        } else if path.extension().is_some_and(|e| e == "rs") {
            out.push(path);
        }
    }
}

/// Every upward (or unplaced) arrow among the library's modules under `src`.
fn check(src: &Path) -> Vec<Violation> {
    let mut files = Vec::new();
    rust_files(src, &mut files);
    let mut violations = Vec::new();
    for file in files {
        let module = module_of(src, &file);
        let Some(top) = module.first().cloned() else {
            continue;
        };
        // The crate root only declares modules; the binary's files are another crate.
        if top == "lib" || top == "main" || top == "cli" {
            continue;
        }
        let text = std::fs::read_to_string(&file).expect("readable source");
        let mut ast = syn::parse_file(&text)
            .unwrap_or_else(|e| panic!("{}: does not parse: {e}", file.display()));
        let mut imports = Imports {
            module,
            found: Vec::new(),
            absolute: Vec::new(),
        };
        imports.visit_file_mut(&mut ast);
        for (to, path) in imports.found {
            if to == top {
                continue;
            }
            let allowed = matches!((layer(&top), layer(&to)), (Some(a), Some(b)) if b < a);
            if !allowed {
                violations.push(Violation {
                    file: file.clone(),
                    from: top.clone(),
                    to,
                    path,
                });
            }
        }
    }
    violations
}

/// The import circles among the files of a crate's `src`: for each folder, the arrows between
/// its files and subfolders (a path into `b/c.rs` from `a.rs` is an arrow `a → b`), read
/// from every `crate::`, `super::` and `self::` path; a file's arrows to the folders it stands
/// in (its parents' `mod.rs`, which declare it) and to its own children are not counted.
/// Each circle is given as its folder and the rooms in it.
fn circles(src: &Path) -> Vec<String> {
    use std::collections::{BTreeMap, BTreeSet};
    let mut files = Vec::new();
    rust_files(src, &mut files);
    let mut modules: Vec<(Vec<String>, PathBuf)> = files
        .into_iter()
        .map(|file| (module_of(src, &file), file))
        .filter(|(m, _)| {
            !matches!(
                m.first().map(String::as_str),
                None | Some("lib" | "main" | "cli")
            )
        })
        .collect();
    modules.sort();
    let known: BTreeSet<Vec<String>> = modules.iter().map(|(m, _)| m.clone()).collect();
    // folder → (room → rooms it imports)
    let mut arrows: BTreeMap<Vec<String>, BTreeMap<String, BTreeSet<String>>> = BTreeMap::new();
    for (module, file) in &modules {
        let text = std::fs::read_to_string(file).expect("readable source");
        let mut ast = syn::parse_file(&text)
            .unwrap_or_else(|e| panic!("{}: does not parse: {e}", file.display()));
        let mut imports = Imports {
            module: module.clone(),
            found: Vec::new(),
            absolute: Vec::new(),
        };
        imports.visit_file_mut(&mut ast);
        for path in imports.absolute {
            // The file the path lands in: its longest prefix that is a module of a file.
            let Some(target) = (1..=path.len())
                .rev()
                .map(|n| path[..n].to_vec())
                .find(|prefix| known.contains(prefix))
            else {
                continue;
            };
            if target.starts_with(module) || module.starts_with(&target) {
                continue;
            }
            let shared = module
                .iter()
                .zip(&target)
                .take_while(|(a, b)| a == b)
                .count();
            arrows
                .entry(module[..shared].to_vec())
                .or_default()
                .entry(module[shared].clone())
                .or_default()
                .insert(target[shared].clone());
        }
    }
    let mut found = Vec::new();
    for (folder, graph) in &arrows {
        // A room is in a circle when it reaches itself; the circle is every room it reaches
        // that reaches it back.
        let reach = |from: &String| {
            let mut seen = BTreeSet::new();
            let mut todo = vec![from.clone()];
            while let Some(room) = todo.pop() {
                for next in graph.get(&room).into_iter().flatten() {
                    if seen.insert(next.clone()) {
                        todo.push(next.clone());
                    }
                }
            }
            seen
        };
        let mut reported = BTreeSet::new();
        for room in graph.keys() {
            let from_here = reach(room);
            if !from_here.contains(room) || reported.contains(room) {
                continue;
            }
            let circle: BTreeSet<String> = from_here
                .into_iter()
                .filter(|other| reach(other).contains(room))
                .collect();
            reported.extend(circle.iter().cloned());
            let rooms: Vec<&str> = circle.iter().map(String::as_str).collect();
            found.push(format!("{}/: {}", folder.join("/"), rooms.join(" ↔ ")));
        }
    }
    found
}

#[test]
fn no_files_of_either_crate_import_each_other_in_a_circle() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    for crate_src in ["src", "processors/src"] {
        let found = circles(&root.join(crate_src));
        assert!(
            found.is_empty(),
            "import circles in {crate_src}:\n{}",
            found.join("\n")
        );
    }
}

#[test]
fn the_circle_check_finds_a_circle_between_siblings() {
    let fixture = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/file-circle/src");
    let found = circles(&fixture);
    assert_eq!(
        found,
        vec!["http/: dialects ↔ fallback ↔ image".to_string()]
    );
}

/// The modules `lib.rs` declares.
fn declared_modules(lib: &Path) -> Vec<String> {
    let text = std::fs::read_to_string(lib).expect("lib.rs");
    let ast = syn::parse_file(&text).expect("lib.rs parses");
    ast.items
        .iter()
        .filter_map(|item| match item {
            syn::Item::Mod(m) => Some(m.ident.to_string()),
            _ => None,
        })
        .collect()
}

#[test]
fn no_module_of_the_library_imports_upward() {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let violations = check(&src);
    let listed: Vec<String> = violations.iter().map(ToString::to_string).collect();
    assert!(listed.is_empty(), "upward imports:\n{}", listed.join("\n"));
}

#[test]
fn every_module_of_the_library_stands_on_the_ladder_and_cli_is_not_one() {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let mut declared = declared_modules(&src.join("lib.rs"));
    declared.sort();
    let mut ladder: Vec<String> = LADDER.iter().map(|(m, _)| m.to_string()).collect();
    ladder.sort();
    assert_eq!(declared, ladder, "lib.rs's modules and LADDER differ");
    assert!(!declared.contains(&"cli".to_string()));
}

#[test]
fn the_check_catches_upward_imports_however_they_are_spelled() {
    let fixture = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/upward-import/src");
    let violations = check(&fixture);
    let arrows: Vec<(String, String, String)> = violations
        .iter()
        .map(|v| (v.from.clone(), v.to.clone(), v.path.clone()))
        .collect();
    for expected in [
        ("maps", "http", "crate::http::Service"),
        ("maps", "http", "super::super::http::router"),
        ("hash", "app", "crate::app::running"),
        ("hash", "http", "super::http::router"),
    ] {
        assert!(
            arrows
                .iter()
                .any(|(f, t, p)| (f.as_str(), t.as_str(), p.as_str()) == expected),
            "{expected:?} not caught in {arrows:?}"
        );
    }
    // Downward arrows in the fixture (http → maps, maps → hash, app → http) pass.
    assert_eq!(violations.len(), 4, "{arrows:?}");
}

/// docs/architecture.md names every source file of `src/` and `processors/src/`: by its path
/// under the crate's source folder (`http/front.rs`), or by its file name; a `mod.rs` is named
/// by its folder (`maps/`, or `ingest/` for `cli/ingest/`). A file added without a line there fails here.
#[test]
fn the_architecture_page_names_every_source_file() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let page = std::fs::read_to_string(root.join("docs/architecture.md")).unwrap();
    let mut unnamed = Vec::new();
    for crate_src in ["src", "processors/src"] {
        let dir = root.join(crate_src);
        let mut files = Vec::new();
        rust_files(&dir, &mut files);
        for file in files {
            let relative = file.strip_prefix(&dir).unwrap();
            let path = relative.to_string_lossy().replace('\\', "/");
            let name = relative.file_name().unwrap().to_string_lossy().to_string();
            let named = if name == "mod.rs" {
                let folder = path.trim_end_matches("mod.rs");
                let last = folder
                    .trim_end_matches('/')
                    .rsplit('/')
                    .next()
                    .unwrap_or_default();
                page.contains(&format!("`{folder}`")) || page.contains(&format!("`{last}/`"))
            } else {
                page.contains(&format!("`{path}`")) || page.contains(&format!("`{name}`"))
            };
            if !named {
                unnamed.push(format!("{crate_src}/{path}"));
            }
        }
    }
    assert!(
        unnamed.is_empty(),
        "not named in docs/architecture.md: {unnamed:?}"
    );
}

/// Takedowns and the blocklist are decided in one place (issue 51, item 5): outside
/// `pipeline/moderation/gate.rs` no file reads either list to decide, and only the files that keep a
/// list (`removal.rs`, `blocklist.rs`) change this node's memory of it. The questions asked
/// elsewhere: canonical mode's `is_taken_down` of a new picture's near-duplicates, and a
/// takedown's own of the originals merged into the one it takes down.
#[test]
fn takedowns_and_the_blocklist_are_decided_in_the_gate() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let src = root.join("src");
    let decisions = [
        (
            "refuse_blocked(",
            &[
                "pipeline/moderation/gate.rs",
                "pipeline/moderation/blocklist.rs",
            ][..],
        ),
        ("listed_now", &["pipeline/moderation/gate.rs"][..]),
        (
            "check_blocklist(",
            &[
                "pipeline/moderation/gate.rs",
                "pipeline/moderation/blocklist.rs",
            ][..],
        ),
        ("takedowns.contains(", &["pipeline/moderation/gate.rs"][..]),
        (
            "takedowns.set(",
            &[
                "pipeline/moderation/gate.rs",
                "pipeline/moderation/removal.rs",
            ][..],
        ),
        ("blocked.exact(", &["pipeline/moderation/blocklist.rs"][..]),
        (
            "is_taken_down(",
            &[
                "pipeline/moderation/gate.rs",
                "pipeline/near.rs",
                "pipeline/moderation/removal.rs",
                "maps/",
                // The migration's maps implement the role, handing the call to a store.
                "pipeline/migrate/mirror.rs",
            ][..],
        ),
    ];
    let mut files = Vec::new();
    rust_files(&src, &mut files);
    let mut outside = Vec::new();
    for file in files {
        let path = file
            .strip_prefix(&src)
            .unwrap()
            .to_string_lossy()
            .replace('\\', "/");
        let text = std::fs::read_to_string(&file).unwrap();
        for (call, allowed) in decisions {
            let here = allowed.iter().any(|a| path.starts_with(a));
            if !here && text.contains(call) {
                outside.push(format!("{path}: {call}"));
            }
        }
    }
    assert!(outside.is_empty(), "decided outside the gate: {outside:?}");
}
