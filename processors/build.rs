//! Says so loudly when the JPEG codec is about to be built without its SIMD code: libjpeg-turbo
//! (the `mozjpeg` crate) needs `nasm` for it and, without it, silently builds code about twice
//! as slow. `./imgcas.sh` installs nasm before building; a bare `cargo build` gets this warning.
//!
//! The script reruns only on what it reads: the nasm it found (a new version is another
//! binary), or, when none was found, the folders of PATH it looked in (installing nasm into one
//! changes it). It does not rerun on PATH itself: a shell whose PATH differs in any way (a
//! Python shim in front, a virtualenv, a CI step) would otherwise rebuild this crate and the
//! service in release each time two callers alternate.

use std::path::{Path, PathBuf};

fn main() {
    let folders: Vec<PathBuf> = std::env::var_os("PATH")
        .map(|path| std::env::split_paths(&path).collect())
        .unwrap_or_default();
    let found = folders
        .iter()
        .map(|folder| folder.join("nasm"))
        .find(|candidate| is_executable(candidate));
    match &found {
        Some(nasm) => println!("cargo:rerun-if-changed={}", nasm.display()),
        None => {
            for folder in folders.iter().filter(|f| f.is_dir()) {
                println!("cargo:rerun-if-changed={}", folder.display());
            }
        }
    }
    let works = found.is_some_and(|nasm| {
        std::process::Command::new(nasm)
            .arg("-v")
            .output()
            .is_ok_and(|out| out.status.success())
    });
    if !works {
        println!(
            "cargo:warning=nasm not found: libjpeg-turbo builds WITHOUT SIMD and JPEG is ~2x \
             slower. Install nasm (apt-get install nasm), then `cargo clean -p mozjpeg-sys`."
        );
    }
}

fn is_executable(path: &Path) -> bool {
    use std::os::unix::fs::PermissionsExt;
    std::fs::metadata(path).is_ok_and(|m| m.is_file() && m.permissions().mode() & 0o111 != 0)
}
