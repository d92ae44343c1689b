//! What `imgcas ingest` was given, turned into items: URLs as given, files as given,
//! directories walked for image files, and URL lists read line by line.

use std::path::{Path, PathBuf};

/// File name extensions a directory walk picks up (files named on the command line are
/// always tried, whatever their name).
const IMAGE_EXTENSIONS: &[&str] = &[
    "jpg", "jpeg", "jpe", "jfif", "png", "apng", "gif", "webp", "avif", "tif", "tiff", "bmp", "ico",
];

/// One thing to ingest.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Item {
    File(PathBuf),
    Url(String),
}

/// Turns arguments into items: URLs as given, files as given, directories walked (sorted,
/// hidden entries skipped, image extensions only). A missing path is an error.
pub fn collect(inputs: &[String], url_list: Option<&Path>) -> Result<Vec<Item>, String> {
    let mut items = Vec::new();
    for input in inputs {
        let lower = input.to_ascii_lowercase();
        if lower.starts_with("http://") || lower.starts_with("https://") {
            items.push(Item::Url(input.clone()));
            continue;
        }
        let path = PathBuf::from(input);
        let meta = std::fs::metadata(&path).map_err(|e| format!("{input}: {e}"))?;
        if meta.is_dir() {
            walk(&path, &mut items).map_err(|e| format!("{input}: {e}"))?;
        } else {
            items.push(Item::File(path));
        }
    }
    if let Some(list) = url_list {
        let text = if list == Path::new("-") {
            std::io::read_to_string(std::io::stdin()).map_err(|e| format!("stdin: {e}"))?
        } else {
            std::fs::read_to_string(list).map_err(|e| format!("{}: {e}", list.display()))?
        };
        items.extend(
            text.lines()
                .map(str::trim)
                .filter(|l| !l.is_empty() && !l.starts_with('#'))
                .map(|l| Item::Url(l.to_string())),
        );
    }
    Ok(items)
}

fn walk(dir: &Path, items: &mut Vec<Item>) -> std::io::Result<()> {
    let mut entries: Vec<_> = std::fs::read_dir(dir)?.collect::<Result<_, _>>()?;
    entries.sort_by_key(std::fs::DirEntry::file_name);
    for entry in entries {
        let name = entry.file_name();
        if name.to_string_lossy().starts_with('.') {
            continue;
        }
        let path = entry.path();
        let kind = entry.file_type()?;
        if kind.is_dir() {
            walk(&path, items)?;
        } else if kind.is_file() && is_image_name(&path) {
            items.push(Item::File(path));
        }
    }
    Ok(())
}

fn is_image_name(path: &Path) -> bool {
    path.extension()
        .and_then(|e| e.to_str())
        .is_some_and(|e| IMAGE_EXTENSIONS.contains(&e.to_ascii_lowercase().as_str()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn walks_directories_for_images_only() {
        let dir = tempfile::tempdir().unwrap();
        let sub = dir.path().join("sub");
        std::fs::create_dir(&sub).unwrap();
        for name in ["b.JPG", "a.png", "notes.txt", ".hidden.png"] {
            std::fs::write(dir.path().join(name), b"x").unwrap();
        }
        std::fs::write(sub.join("c.webp"), b"x").unwrap();
        let inputs = vec![
            dir.path().display().to_string(),
            "https://example.com/x.jpg".to_string(),
        ];
        let items = collect(&inputs, None).unwrap();
        let names: Vec<String> = items
            .iter()
            .map(|i| match i {
                Item::File(p) => p.file_name().unwrap().to_string_lossy().into_owned(),
                Item::Url(u) => u.clone(),
            })
            .collect();
        assert_eq!(
            names,
            ["a.png", "b.JPG", "c.webp", "https://example.com/x.jpg"]
        );
        assert!(collect(&["/no/such/path".into()], None).is_err());
    }
}
