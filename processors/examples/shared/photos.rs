//! The photos the quality examples read: the first `count` JPEGs of a folder, by name.

use std::path::PathBuf;

pub fn photos(folder: &str, count: usize) -> Result<Vec<PathBuf>, String> {
    let mut photos: Vec<_> = std::fs::read_dir(folder)
        .map_err(|e| format!("{folder}: {e}"))?
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| p.extension().is_some_and(|x| x == "jpg"))
        .collect();
    photos.sort();
    photos.truncate(count);
    Ok(photos)
}
