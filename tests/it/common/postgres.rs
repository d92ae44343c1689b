//! A real PostgreSQL for tests: Debian's server binaries, one server per test process, started
//! on first use in a temp dir on a free loopback port, and a database of its own for each data
//! dir (so a test that restarts a node on the same data dir finds its maps again).
//!
//! `initdb` refuses to run as root, so as root the server runs as the `postgres` user
//! (`runuser`) in a directory that user owns. A watchdog shell stops the server and removes
//! its directory once the test process is gone, however it ended.
//!
//! [`PgServer::start_tls`] starts a server of a test's own that accepts TLS connections only
//! (`ssl = on`, `pg_hba.conf` of `hostssl` lines), with the certificates the test made.
//!
//! `IMGCAS_TEST_MAPS=postgres` makes `spawn_app` and the real binary keep their maps here
//! (with originals and variant bytes on S3, as a cluster would): the pipeline suites then run
//! unchanged on PostgreSQL.

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::OnceLock;
use std::time::{Duration, Instant};

use sha2::{Digest, Sha256};

/// Whether the pipeline suites should keep their maps on PostgreSQL.
pub fn pipeline_on_postgres() -> bool {
    std::env::var("IMGCAS_TEST_MAPS").is_ok_and(|v| v == "postgres")
}

/// What writes a TLS-only server's certificates and returns its `pg_hba.conf`
/// ([`PgServer::start_tls`]).
type Prepare<'a> = Box<dyn FnOnce(&Path) -> String + 'a>;

pub struct PgServer {
    pub port: u16,
    bin: PathBuf,
    /// The server's directory (data, socket, log, and `tls/` for a TLS-only server).
    dir: PathBuf,
    /// Whether the server accepts TLS connections only (`psql` then asks for TLS).
    tls: bool,
    /// The watchdog shell: it outlives this process on purpose, to stop the server after it.
    _watchdog: std::process::Child,
}

/// Where the server binaries are: `IMGCAS_TEST_PG_BIN`, Debian's
/// `/usr/lib/postgresql/<version>/bin` (the newest), or the PATH; `None` when PostgreSQL is
/// not installed.
fn server_binaries() -> Option<PathBuf> {
    if let Some(dir) = std::env::var_os("IMGCAS_TEST_PG_BIN") {
        return Some(PathBuf::from(dir));
    }
    let mut versions: Vec<(u32, PathBuf)> = std::fs::read_dir("/usr/lib/postgresql")
        .into_iter()
        .flatten()
        .flatten()
        .filter_map(|e| {
            let version = e.file_name().to_str()?.parse().ok()?;
            let bin = e.path().join("bin");
            bin.join("initdb").exists().then_some((version, bin))
        })
        .collect();
    versions.sort();
    versions.pop().map(|(_, bin)| bin).or_else(|| {
        // Elsewhere the server binaries are usually on the PATH.
        std::env::var_os("PATH")
            .and_then(|path| std::env::split_paths(&path).find(|dir| dir.join("initdb").exists()))
    })
}

fn is_root() -> bool {
    Command::new("id")
        .arg("-u")
        .output()
        .is_ok_and(|o| String::from_utf8_lossy(&o.stdout).trim() == "0")
}

/// `program args…`, as the `postgres` user when this process is root.
fn as_server_user(program: &Path) -> Command {
    if is_root() {
        let mut c = Command::new("runuser");
        c.args(["-u", "postgres", "--"]).arg(program);
        c
    } else {
        Command::new(program)
    }
}

/// Hands `dir` to the `postgres` user when this process is root (the servers run as it).
pub(super) fn give_to_server_user(dir: &Path) {
    if is_root() {
        let owned = Command::new("chown")
            .args(["-R", "postgres:postgres"])
            .arg(dir)
            .status()
            .expect("chown");
        assert!(owned.success(), "chown of {}", dir.display());
    }
}

/// A shell, as the server user, that runs the command line `start` (over `args` as `$1`…)
/// in the background, then stops it (SIGINT) and removes `dir` once this test process is
/// gone or the server has died: it outlives the process on purpose.
pub(super) fn watchdog(start: &str, dir: &Path, args: &[&std::ffi::OsStr]) -> std::process::Child {
    let script = format!(
        r#"test_process=$1; dir=$2; shift 2
        {start} &
        server=$!
        while [ -d "/proc/$test_process" ] && kill -0 "$server" 2>/dev/null; do sleep 0.5; done
        kill -INT "$server" 2>/dev/null
        wait "$server"
        rm -rf "$dir""#
    );
    as_server_user(Path::new("/bin/sh"))
        .args(["-c", &script, "sh"])
        .arg(std::process::id().to_string())
        .arg(dir)
        .args(args)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("the server's watchdog starts")
}

/// Waits up to `limit` for `ready`, failing with `what` and the server's `log`.
pub(super) fn wait_until(what: &str, log: &Path, limit: Duration, ready: impl Fn() -> bool) {
    let deadline = Instant::now() + limit;
    while !ready() {
        assert!(
            Instant::now() < deadline,
            "{what} did not start: {}",
            std::fs::read_to_string(log).unwrap_or_default()
        );
        std::thread::sleep(Duration::from_millis(50));
    }
}

pub(super) fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .map(|a| a.port())
        .expect("a free port")
}

impl PgServer {
    /// The process's server, started on first use; `None` when PostgreSQL is not installed.
    pub fn shared() -> Option<&'static PgServer> {
        static SERVER: OnceLock<Option<PgServer>> = OnceLock::new();
        SERVER
            .get_or_init(|| server_binaries().map(|bin| PgServer::start(bin, None)))
            .as_ref()
    }

    /// The server, or a skip (a failure under CI) when PostgreSQL is not installed.
    pub fn or_skip(test: &str) -> Option<&'static PgServer> {
        let server = PgServer::shared();
        if server.is_none() {
            super::skip_unless_ci(&format!("{test}: PostgreSQL is not installed"));
        }
        server
    }

    /// A server of its own that accepts TLS connections only, or `None` when PostgreSQL is
    /// not installed. `prepare` is given the directory for its files (removed with the
    /// server's): it writes the server's certificate `server.crt` and key `server.key` there,
    /// and `root.crt` when client certificates are to be checked against a CA, and returns
    /// the `pg_hba.conf` lines (`hostssl` ones, so plain connections are refused; user
    /// `imgcas` must be trusted for the harness's own statements).
    pub fn start_tls(prepare: impl FnOnce(&Path) -> String) -> Option<PgServer> {
        let bin = server_binaries()?;
        Some(PgServer::start(bin, Some(Box::new(prepare))))
    }

    /// Where a TLS-only server's certificates are (what `prepare` wrote).
    pub fn tls_dir(&self) -> PathBuf {
        self.dir.join("tls")
    }

    fn start(bin: PathBuf, tls: Option<Prepare<'_>>) -> PgServer {
        let base =
            std::env::temp_dir().join(format!("imgcas-pg-{}-{}", std::process::id(), free_port()));
        std::fs::create_dir_all(&base).expect("postgres dir");
        let tls_dir = base.join("tls");
        let hba = tls.map(|prepare| {
            std::fs::create_dir_all(&tls_dir).expect("tls dir");
            prepare(&tls_dir)
        });
        give_to_server_user(&base);
        let data = base.join("data");
        let init = as_server_user(&bin.join("initdb"))
            .arg("-D")
            .arg(&data)
            .args([
                "-U",
                "imgcas",
                "--auth=trust",
                "--no-sync",
                "-E",
                "UTF8",
                "--locale=C",
            ])
            .stdout(Stdio::null())
            .output()
            .expect("initdb runs");
        assert!(
            init.status.success(),
            "initdb failed: {}",
            String::from_utf8_lossy(&init.stderr)
        );
        if let Some(hba) = &hba {
            use std::io::Write;
            use std::os::unix::fs::PermissionsExt;
            // The server refuses a key others may read.
            let key = tls_dir.join("server.key");
            std::fs::set_permissions(&key, std::fs::Permissions::from_mode(0o600)).expect("chmod");
            std::fs::write(data.join("pg_hba.conf"), hba).expect("pg_hba.conf");
            let mut conf = std::fs::OpenOptions::new()
                .append(true)
                .open(data.join("postgresql.conf"))
                .expect("postgresql.conf");
            let file = |name: &str| tls_dir.join(name).display().to_string();
            let mut settings = format!(
                "\nssl = on\nssl_cert_file = '{}'\nssl_key_file = '{}'\n",
                file("server.crt"),
                file("server.key")
            );
            if tls_dir.join("root.crt").exists() {
                settings.push_str(&format!("ssl_ca_file = '{}'\n", file("root.crt")));
            }
            conf.write_all(settings.as_bytes())
                .expect("postgresql.conf");
        }
        let port = free_port();
        let start = r#""$1/postgres" -D "$2" -p "$3" -k "$4" -c listen_addresses=127.0.0.1 \
                -c fsync=off -c synchronous_commit=off -c full_page_writes=off \
                -c max_connections=300 -c shared_buffers=32MB >"$4/server.log" 2>&1"#;
        let watchdog = watchdog(
            start,
            &base,
            &[
                bin.as_os_str(),
                data.as_os_str(),
                port.to_string().as_ref(),
                base.as_os_str(),
            ],
        );
        let server = PgServer {
            port,
            bin,
            dir: base.clone(),
            tls: hba.is_some(),
            _watchdog: watchdog,
        };
        wait_until(
            "PostgreSQL",
            &base.join("server.log"),
            Duration::from_secs(60),
            || server.psql("postgres", "SELECT 1").is_ok(),
        );
        server
    }

    /// Runs one statement with `psql`; its output, or its error text.
    pub fn psql(&self, database: &str, sql: &str) -> Result<String, String> {
        let mut psql = Command::new(self.bin.join("psql"));
        if self.tls {
            psql.env("PGSSLMODE", "require");
        }
        let out = psql
            .args(["-X", "-q", "-t", "-A", "-v", "ON_ERROR_STOP=1"])
            .args(["-h", "127.0.0.1", "-U", "imgcas", "-d", database])
            .args(["-p", &self.port.to_string(), "-c", sql])
            .output()
            .map_err(|e| e.to_string())?;
        if out.status.success() {
            Ok(String::from_utf8_lossy(&out.stdout).trim().to_string())
        } else {
            Err(String::from_utf8_lossy(&out.stderr).into_owned())
        }
    }

    /// The URL of database `name`, created if it does not exist yet.
    pub fn database(&self, name: &str) -> String {
        let exists = self
            .psql(
                "postgres",
                &format!("SELECT 1 FROM pg_database WHERE datname = '{name}'"),
            )
            .expect("list databases");
        if exists.is_empty() {
            // Two callers may race to create it; the loser finds it there.
            if let Err(e) = self.psql("postgres", &format!("CREATE DATABASE {name}")) {
                assert!(e.contains("already exists"), "CREATE DATABASE {name}: {e}");
            }
        }
        self.url(name)
    }

    pub fn url(&self, database: &str) -> String {
        format!("postgres://imgcas@127.0.0.1:{}/{database}", self.port)
    }

    /// The maps' database of a data dir: one per dir, the same each time it is asked for.
    pub fn database_for(&self, data_dir: &Path) -> String {
        let digest = Sha256::digest(data_dir.as_os_str().as_encoded_bytes());
        self.database(&format!("imgcas_{}", hex::encode(&digest[..8])))
    }
}

/// The maps URL of a data dir when the suites run on PostgreSQL.
pub fn maps_url_for(data_dir: &Path) -> Option<String> {
    if !pipeline_on_postgres() {
        return None;
    }
    let server = PgServer::shared()
        .expect("IMGCAS_TEST_MAPS=postgres needs PostgreSQL's server (apt-get install postgresql)");
    Some(server.database_for(data_dir))
}
