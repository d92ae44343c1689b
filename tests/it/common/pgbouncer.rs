//! Debian's PgBouncer in front of the harness's PostgreSQL, in transaction pooling: the
//! pooler `docs/cluster.md` recommends past a handful of nodes, which hands a server
//! connection to another client between transactions (so no session state, and no named
//! prepared statement, survives from one statement to the next). Started on a loopback port
//! as the `postgres` user when root (it refuses to run as root), and stopped with the test
//! process, as the server is.

use std::path::Path;
use std::process::Child;
use std::time::Duration;

use super::postgres::{free_port, give_to_server_user, wait_until, watchdog, PgServer};

pub struct PgBouncer {
    pub port: u16,
    _watchdog: Child,
}

/// Where Debian installs it.
fn binary() -> Option<&'static Path> {
    [
        Path::new("/usr/sbin/pgbouncer"),
        Path::new("/usr/bin/pgbouncer"),
    ]
    .into_iter()
    .find(|p| p.exists())
}

impl PgBouncer {
    /// A pooler for every database of `server`; `None` (a failure under CI) when PgBouncer
    /// is not installed.
    pub fn or_skip(test: &str, server: &PgServer) -> Option<PgBouncer> {
        let Some(bin) = binary() else {
            super::skip_unless_ci(&format!("{test}: PgBouncer is not installed"));
            return None;
        };
        let base = std::env::temp_dir().join(format!(
            "imgcas-pgbouncer-{}-{}",
            std::process::id(),
            free_port()
        ));
        std::fs::create_dir_all(&base).expect("pgbouncer dir");
        let port = free_port();
        // Few server connections for many clients: three nodes share ten, as a pooler in
        // front of a small managed database would.
        let config = format!(
            "[databases]\n\
             * = host=127.0.0.1 port={server_port}\n\
             [pgbouncer]\n\
             listen_addr = 127.0.0.1\n\
             listen_port = {port}\n\
             unix_socket_dir =\n\
             auth_type = trust\n\
             auth_file = {base}/users.txt\n\
             pool_mode = transaction\n\
             default_pool_size = 10\n\
             max_client_conn = 500\n\
             logfile = {base}/pgbouncer.log\n\
             pidfile = {base}/pgbouncer.pid\n",
            server_port = server.port,
            base = base.display(),
        );
        std::fs::write(base.join("pgbouncer.ini"), config).expect("pgbouncer.ini");
        std::fs::write(base.join("users.txt"), "\"imgcas\" \"\"\n").expect("users.txt");
        give_to_server_user(&base);
        let watchdog = watchdog(
            r#""$1" "$2/pgbouncer.ini" >/dev/null 2>&1"#,
            &base,
            &[bin.as_os_str(), base.as_os_str()],
        );
        wait_until(
            "PgBouncer",
            &base.join("pgbouncer.log"),
            Duration::from_secs(20),
            || std::net::TcpStream::connect(("127.0.0.1", port)).is_ok(),
        );
        Some(PgBouncer {
            port,
            _watchdog: watchdog,
        })
    }

    /// The URL of `database` (on the server behind) through the pooler.
    pub fn url(&self, database: &str) -> String {
        format!("postgres://imgcas@127.0.0.1:{}/{database}", self.port)
    }
}
