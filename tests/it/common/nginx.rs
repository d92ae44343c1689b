//! nginx (Debian's package) in the foreground on a temporary prefix and a free loopback port,
//! running one of `deploy/`'s site files with its deployment-specific lines rewritten, so
//! that what a test proves is what the file does. Found as `nginx` on PATH or /usr/sbin/nginx;
//! [`binary_or_skip`] passes a test without it, unless `IMGCAS_TEST_NGINX=1` (set by
//! `.ci/run`, which installs nginx).

use std::net::TcpListener;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

pub fn binary() -> Option<PathBuf> {
    let on_path = std::env::var_os("PATH").and_then(|paths| {
        std::env::split_paths(&paths)
            .map(|p| p.join("nginx"))
            .find(|p| p.is_file())
    });
    on_path.or_else(|| {
        let sbin = PathBuf::from("/usr/sbin/nginx");
        sbin.is_file().then_some(sbin)
    })
}

/// nginx's binary, or a skip (a failure when IMGCAS_TEST_NGINX is set, or under CI).
pub fn binary_or_skip() -> Option<PathBuf> {
    let found = binary();
    if found.is_none() {
        assert!(
            std::env::var("IMGCAS_TEST_NGINX").is_err(),
            "IMGCAS_TEST_NGINX is set but no nginx was found"
        );
        super::skip_unless_ci("nginx not installed (apt install nginx)");
    }
    found
}

/// A port free on loopback now (nginx binds it a moment later).
pub fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .map(|a| a.port())
        .expect("a free port")
}

/// `deploy/<file>` with each `(from, to)` replaced, each `from` found exactly once.
pub fn site(file: &str, replacements: &[(&str, String)]) -> String {
    let mut text = std::fs::read_to_string(
        Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("deploy")
            .join(file),
    )
    .unwrap_or_else(|e| panic!("deploy/{file}: {e}"));
    for (from, to) in replacements {
        assert_eq!(
            text.matches(from).count(),
            1,
            "deploy/{file} must contain `{from}` once"
        );
        text = text.replacen(from, to, 1);
    }
    text
}

/// nginx in the foreground on a temporary prefix; stopped when dropped.
pub struct Nginx {
    child: Child,
    pub base: String,
    pub dir: tempfile::TempDir,
}

impl Drop for Nginx {
    /// SIGTERM to the master, which stops its workers (SIGKILL would orphan them, still
    /// listening); SIGKILL only if it has not gone within 5 s.
    fn drop(&mut self) {
        let pid = self.child.id().to_string();
        let _ = Command::new("kill").args(["-TERM", &pid]).status();
        let deadline = Instant::now() + Duration::from_secs(5);
        while Instant::now() < deadline {
            if let Ok(Some(_)) = self.child.try_wait() {
                return;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Nginx {
    /// Runs `site` (the contents of an `http { }` include), made by `make_site` from the
    /// temporary prefix, and waits until `port` accepts connections.
    pub fn start(binary: &Path, port: u16, make_site: impl FnOnce(&Path) -> String) -> Nginx {
        let dir = tempfile::tempdir().expect("temp dir");
        let root = dir.path();
        std::fs::write(root.join("site.conf"), make_site(root)).unwrap();
        // As root, nginx would hand its workers to `nobody`, who cannot write the temporary
        // directories.
        let is_root = Command::new("id")
            .arg("-u")
            .output()
            .is_ok_and(|o| o.stdout.starts_with(b"0"));
        let main = format!(
            "{user}daemon off;\nworker_processes 1;\npid {root}/nginx.pid;\n\
             error_log {root}/error.log warn;\nevents {{ worker_connections 256; }}\n\
             http {{\n  access_log off;\n  client_body_temp_path {root}/client;\n\
             proxy_temp_path {root}/proxy;\n  fastcgi_temp_path {root}/fastcgi;\n\
             uwsgi_temp_path {root}/uwsgi;\n  scgi_temp_path {root}/scgi;\n\
             include {root}/site.conf;\n}}\n",
            user = if is_root { "user root;\n" } else { "" },
            root = root.display(),
        );
        std::fs::write(root.join("nginx.conf"), main).unwrap();
        let child = Command::new(binary)
            .arg("-p")
            .arg(root)
            .arg("-c")
            .arg(root.join("nginx.conf"))
            .arg("-e")
            .arg(root.join("error.log"))
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .expect("nginx starts");
        let deadline = Instant::now() + Duration::from_secs(10);
        while std::net::TcpStream::connect(("127.0.0.1", port)).is_err() {
            assert!(
                Instant::now() < deadline,
                "nginx did not listen: {}",
                std::fs::read_to_string(root.join("error.log")).unwrap_or_default()
            );
            std::thread::sleep(Duration::from_millis(20));
        }
        Nginx {
            child,
            base: format!("http://127.0.0.1:{port}"),
            dir,
        }
    }
}
