//! The real `imgcas` binary as a child process: `serve` on a data dir (its originals on S3 when
//! the suite runs there), stopped with SIGTERM or SIGKILL, and the offline commands.

use std::io::{BufRead, BufReader};
use std::path::Path;
use std::process::{Child, Command, Stdio};

use super::{postgres, s3};

pub struct Server {
    pub child: Child,
    /// `http://127.0.0.1:<port>`.
    pub base: String,
}

/// Starts `imgcas serve` on `data_dir` and waits for its "listening" line.
pub fn start(data_dir: &Path, s3: Option<&s3::S3Target>) -> Server {
    start_with(data_dir, s3, &[])
}

/// [`start`] with more environment.
pub fn start_with(data_dir: &Path, s3: Option<&s3::S3Target>, env: &[(&str, String)]) -> Server {
    let mut command = serve_command(data_dir);
    for (k, v) in s3.map(s3::S3Target::env).unwrap_or_default() {
        command.env(k, v);
    }
    command.env("IMGCAS_ALLOW_PRIVATE_NETWORKS", "true");
    // Shared maps go with a shared bucket.
    if let Some(url) = s3.and_then(|_| postgres::maps_url_for(data_dir)) {
        command.env("IMGCAS_MAPS_URL", url);
    }
    for (k, v) in env {
        command.env(k, v);
    }
    spawn(command)
}

/// `imgcas serve` on `data_dir` and a free loopback port, to be given more environment.
pub fn serve_command(data_dir: &Path) -> Command {
    let mut command = Command::new(env!("CARGO_BIN_EXE_imgcas"));
    command
        .arg("serve")
        .env("IMGCAS_LISTEN", "127.0.0.1:0")
        .env("IMGCAS_DATA_DIR", data_dir);
    command
}

/// Spawns a `serve` command and waits for its "listening" line.
pub fn spawn(mut command: Command) -> Server {
    let mut child = command
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .expect("imgcas starts");
    let base =
        listening(&mut child).unwrap_or_else(|line| panic!("unexpected first line: {line:?}"));
    Server { child, base }
}

/// The base URL a `serve` child (its stdout piped) prints on its first line, or that line
/// when it is not the "listening" one (empty: it stopped first).
pub fn listening(child: &mut Child) -> Result<String, String> {
    let mut line = String::new();
    if let Some(out) = child.stdout.take() {
        let _ = BufReader::new(out).read_line(&mut line);
    }
    match line.trim().strip_prefix("imgcas listening on ") {
        Some(base) => Ok(base.to_string()),
        None => Err(line),
    }
}

impl Server {
    fn signal(&self, signal: &str) {
        let pid = self.child.id().to_string();
        let sent = Command::new("kill").args([signal, &pid]).status().unwrap();
        assert!(sent.success());
    }

    /// SIGTERM, and a clean exit expected.
    pub fn terminate(mut self) {
        self.signal("-TERM");
        let status = self.child.wait().unwrap();
        assert!(status.success(), "graceful exit, got {status}");
    }

    /// SIGKILL: no flush, no goodbye.
    pub fn kill(mut self) {
        self.signal("-KILL");
        let _ = self.child.wait();
    }
}

/// Runs an offline command (`verify`, `gc`, …) on `data_dir` with extra environment: exit
/// code and stdout.
pub fn run(data_dir: &Path, env: &[(&'static str, String)], args: &[&str]) -> (i32, String) {
    let mut command = Command::new(env!("CARGO_BIN_EXE_imgcas"));
    command
        .args(args)
        .env("IMGCAS_DATA_DIR", data_dir)
        .env("IMGCAS_LOG", "off");
    // Shared maps go with a shared bucket.
    let on_s3 = env.iter().any(|(k, v)| *k == "IMGCAS_STORAGE" && v == "s3");
    if let Some(url) = postgres::maps_url_for(data_dir).filter(|_| on_s3) {
        command.env("IMGCAS_MAPS_URL", url);
    }
    for (k, v) in env {
        command.env(k, v);
    }
    let out = command.output().expect("imgcas runs");
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stdout).into_owned(),
    )
}
