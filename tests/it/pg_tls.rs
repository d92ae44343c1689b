//! TLS to PostgreSQL (issue 34, item 1), through the real binary: a PostgreSQL that accepts TLS
//! only (`hostssl` lines, started by the harness) with a CA and certificates this module makes
//! with the `openssl` tool, and `imgcas serve` on it with libpq's `sslmode`s; a wrong CA, a
//! wrong name and an expired certificate refused at start with the reason; client
//! certificates; the `PGSSL*` variables; and `maps.password_file` with SCRAM (channel binding
//! required), whose password never shows. One server serves the module; the expired
//! certificate has one of its own.

use crate::common;

use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::sync::OnceLock;

use common::binary;
use common::postgres::PgServer;
use common::s3::S3Target;
use common::*;
use imgcas::maps::postgres::PostgresMaps;

/// User `imgcas` (the harness's) is trusted over TLS; `imgcas_cert` needs a client
/// certificate of the CA; `imgcas_password` a password (SCRAM).
const HBA: &str = "\
hostssl all imgcas 127.0.0.1/32 trust
hostssl imgcas_tls_cert imgcas_cert 127.0.0.1/32 cert
hostssl imgcas_tls_password imgcas_password 127.0.0.1/32 scram-sha-256
";
const PASSWORD: &str = "correct horse battery 34";

fn openssl(dir: &Path, args: &[&str]) {
    let out = Command::new("openssl")
        .args(args)
        .current_dir(dir)
        .output()
        .expect("openssl runs");
    assert!(
        out.status.success(),
        "openssl {}: {}",
        args.join(" "),
        String::from_utf8_lossy(&out.stderr)
    );
}

fn openssl_installed() -> bool {
    Command::new("openssl")
        .arg("version")
        .output()
        .is_ok_and(|o| o.status.success())
}

/// A CA: `<name>.key` and the self-signed `<name>.crt`.
fn make_ca(dir: &Path, name: &str, common_name: &str) {
    let config = format!(
        "[req]\ndistinguished_name = dn\nprompt = no\n[dn]\nCN = {common_name}\n\
         [ca]\nbasicConstraints = critical, CA:TRUE\nkeyUsage = critical, keyCertSign, cRLSign\n\
         subjectKeyIdentifier = hash\n"
    );
    std::fs::write(dir.join(format!("{name}.cnf")), config).unwrap();
    let key = format!("{name}.key");
    new_key(dir, &key, KeyFormat::Pkcs8);
    let (cnf, crt) = (format!("{name}.cnf"), format!("{name}.crt"));
    openssl(
        dir,
        &[
            "req",
            "-x509",
            "-new",
            "-config",
            &cnf,
            "-extensions",
            "ca",
            "-key",
            &key,
            "-days",
            "2",
            "-out",
            &crt,
        ],
    );
}

/// The kinds of PEM keys a client certificate may come with.
#[derive(Clone, Copy)]
enum KeyFormat {
    /// `BEGIN PRIVATE KEY` (an EC key here).
    Pkcs8,
    /// `BEGIN RSA PRIVATE KEY`.
    Pkcs1,
    /// `BEGIN EC PRIVATE KEY`.
    Sec1,
}

fn new_key(dir: &Path, key: &str, format: KeyFormat) {
    match format {
        KeyFormat::Pkcs8 => openssl(
            dir,
            &[
                "genpkey",
                "-algorithm",
                "EC",
                "-pkeyopt",
                "ec_paramgen_curve:P-256",
                "-out",
                key,
            ],
        ),
        KeyFormat::Pkcs1 => openssl(dir, &["genrsa", "-traditional", "-out", key, "2048"]),
        KeyFormat::Sec1 => openssl(
            dir,
            &[
                "ecparam",
                "-name",
                "prime256v1",
                "-genkey",
                "-noout",
                "-out",
                key,
            ],
        ),
    }
}

/// `<name>.crt` for a new key `<name>.key` and `common_name`, signed by `ca` (the path of its
/// `.crt` and `.key` without the extension), with these extensions.
fn issue(dir: &Path, ca: &str, name: &str, format: KeyFormat, common_name: &str, extensions: &str) {
    let (key, csr, ext, crt) = (
        format!("{name}.key"),
        format!("{name}.csr"),
        format!("{name}.ext"),
        format!("{name}.crt"),
    );
    new_key(dir, &key, format);
    std::fs::write(dir.join(&ext), extensions).unwrap();
    let subject = format!("/CN={common_name}");
    openssl(
        dir,
        &["req", "-new", "-key", &key, "-subj", &subject, "-out", &csr],
    );
    let (ca_crt, ca_key) = (format!("{ca}.crt"), format!("{ca}.key"));
    openssl(
        dir,
        &[
            "x509",
            "-req",
            "-in",
            &csr,
            "-CA",
            &ca_crt,
            "-CAkey",
            &ca_key,
            "-CAcreateserial",
            "-days",
            "2",
            "-extfile",
            &ext,
            "-out",
            &crt,
        ],
    );
}

const SERVER_NAMES: &str =
    "subjectAltName = IP:127.0.0.1, DNS:db.imgcas.test\nextendedKeyUsage = serverAuth\n";

/// The module's certificates: `ca` (also `root.crt`, the CA of client certificates),
/// `other-ca`, the server's (127.0.0.1 and db.imgcas.test), and a client certificate of user
/// `imgcas_cert` for each key format.
fn make_certificates(dir: &Path) {
    make_ca(dir, "ca", "imgcas test CA");
    std::fs::copy(dir.join("ca.crt"), dir.join("root.crt")).unwrap();
    make_ca(dir, "other-ca", "some other CA");
    issue(
        dir,
        "ca",
        "server",
        KeyFormat::Pkcs8,
        "db.imgcas.test",
        SERVER_NAMES,
    );
    for (name, format) in [
        ("client-pkcs8", KeyFormat::Pkcs8),
        ("client-pkcs1", KeyFormat::Pkcs1),
        ("client-sec1", KeyFormat::Sec1),
    ] {
        issue(
            dir,
            "ca",
            name,
            format,
            "imgcas_cert",
            "extendedKeyUsage = clientAuth\n",
        );
    }
}

/// The module's TLS-only server, its roles and databases made; `None`: skipped (PostgreSQL
/// or openssl missing; a failure under CI).
fn server(test: &str) -> Option<&'static PgServer> {
    static SERVER: OnceLock<Option<PgServer>> = OnceLock::new();
    let server = SERVER
        .get_or_init(|| {
            if !openssl_installed() {
                return None;
            }
            let server = PgServer::start_tls(|dir| {
                make_certificates(dir);
                HBA.to_string()
            })?;
            for sql in [
                "CREATE ROLE imgcas_cert LOGIN".to_string(),
                "CREATE DATABASE imgcas_tls_cert OWNER imgcas_cert".into(),
                format!("CREATE ROLE imgcas_password LOGIN PASSWORD '{PASSWORD}'"),
                "CREATE DATABASE imgcas_tls_password OWNER imgcas_password".into(),
            ] {
                server.psql("postgres", &sql).expect(&sql);
            }
            Some(server)
        })
        .as_ref();
    if server.is_none() {
        skip_unless_ci(&format!("{test}: PostgreSQL or openssl is not installed"));
    }
    server
}

/// A file of the server's TLS directory.
fn file(server: &PgServer, name: &str) -> String {
    server.tls_dir().join(name).display().to_string()
}

/// `postgres://<user>@127.0.0.1:<port>/<database>?<params>`.
fn url(server: &PgServer, user: &str, database: &str, params: &str) -> String {
    format!(
        "postgres://{user}@127.0.0.1:{}/{database}?{params}",
        server.port
    )
}

/// A running `imgcas serve`, killed when dropped.
struct Node {
    child: Child,
    base: String,
    _dir: tempfile::TempDir,
}

impl Drop for Node {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// `imgcas serve` with its maps at `maps_url` and its bytes in `bucket`, and more
/// environment: the node, or everything it wrote to stderr before it stopped.
fn serve(bucket: &S3Target, maps_url: &str, env: &[(&str, String)]) -> Result<Node, String> {
    let dir = tempfile::tempdir().unwrap();
    let mut command = binary::serve_command(dir.path());
    for inherited in ["PGSSLMODE", "PGSSLROOTCERT", "PGSSLCERT", "PGSSLKEY"] {
        command.env_remove(inherited);
    }
    command
        .envs(bucket.env())
        .env("IMGCAS_ALLOW_PRIVATE_NETWORKS", "true")
        .env("IMGCAS_MAPS_URL", maps_url)
        .envs(env.iter().map(|(k, v)| (*k, v.as_str())));
    let log = dir.path().join("stderr.log");
    let mut child = command
        .stdout(Stdio::piped())
        .stderr(std::fs::File::create(&log).unwrap())
        .spawn()
        .expect("imgcas starts");
    if let Ok(base) = binary::listening(&mut child) {
        return Ok(Node {
            base,
            child,
            _dir: dir,
        });
    }
    let _ = child.wait();
    Err(std::fs::read_to_string(&log).unwrap_or_default())
}

/// What `imgcas serve` wrote before it stopped (it must stop), and the line it stopped with.
fn refused(bucket: &S3Target, maps_url: &str, env: &[(&str, String)]) -> (String, String) {
    match serve(bucket, maps_url, env) {
        Ok(_) => panic!("served on {maps_url} {env:?}"),
        Err(stderr) => {
            let line = stderr
                .lines()
                .find(|l| l.starts_with("imgcas: "))
                .unwrap_or_else(|| panic!("no line saying why in {stderr:?}"))
                .to_string();
            (stderr, line)
        }
    }
}

/// `imgcas serve` starts on these settings (its maps opened, migrated) and stops.
fn starts(bucket: &S3Target, maps_url: &str, env: &[(&str, String)]) {
    if let Err(stderr) = serve(bucket, maps_url, env) {
        panic!("refused on {maps_url} {env:?}: {stderr}");
    }
}

/// The node answers an image of the origin's, `path`, made and stored through its maps.
async fn serves_an_image(node: &Node, origin: &Origin, path: &str, seed: u8) {
    origin.put(path, jpeg(64, 48, seed));
    let mut url = reqwest::Url::parse(&format!("{}/v1/image", node.base)).unwrap();
    url.query_pairs_mut()
        .append_pair("url", &origin.url(path))
        .append_pair("w", "32")
        .append_pair("format", "png");
    let r = client().get(url).send().await.expect("request");
    let status = r.status();
    assert_eq!(status, 200, "{}", r.text().await.unwrap_or_default());
    assert_eq!(header(&r, "x-imgcas-cache"), Some("miss"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn serves_with_require_verify_ca_and_verify_full() {
    let Some(pg) = server("pg_tls") else {
        return;
    };
    pg.database("tls_modes");
    let (bucket, origin) = (S3Target::new().await, Origin::start().await);
    let ca = file(pg, "ca.crt");
    let by_name = format!(
        "host=db.imgcas.test hostaddr=127.0.0.1 port={} user=imgcas dbname=tls_modes \
         sslmode=verify-full sslrootcert='{ca}'",
        pg.port
    );
    for (i, maps_url) in [
        url(pg, "imgcas", "tls_modes", "sslmode=require"),
        url(
            pg,
            "imgcas",
            "tls_modes",
            &format!("sslmode=verify-ca&sslrootcert={ca}"),
        ),
        url(
            pg,
            "imgcas",
            "tls_modes",
            &format!("sslmode=verify-full&sslrootcert={ca}"),
        ),
        // libpq's words; the name checked is the host's, the address dialled hostaddr.
        by_name,
    ]
    .into_iter()
    .enumerate()
    {
        let node = serve(&bucket, &maps_url, &[]).unwrap_or_else(|e| panic!("{maps_url}: {e}"));
        serves_an_image(&node, &origin, &format!("/{i}.jpg"), i as u8).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn plain_text_is_refused_by_a_tls_only_server() {
    let Some(pg) = server("pg_tls") else {
        return;
    };
    let bucket = S3Target::new().await;
    let (_, line) = refused(
        &bucket,
        &url(pg, "imgcas", "postgres", "sslmode=disable"),
        &[],
    );
    assert!(
        line.starts_with("imgcas: cannot open the maps on PostgreSQL (maps.url): PostgreSQL: ")
            && line.contains("no pg_hba.conf entry")
            && line.contains("no encryption"),
        "{line}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_wrong_ca_or_name_is_refused_at_start_with_the_reason() {
    let Some(pg) = server("pg_tls") else {
        return;
    };
    pg.database("tls_names");
    let bucket = S3Target::new().await;
    let (ca, other) = (file(pg, "ca.crt"), file(pg, "other-ca.crt"));
    // A CA that did not sign the server's certificate; `require` with a CA checks it too.
    for mode in ["verify-ca", "verify-full", "require"] {
        let params = format!("sslmode={mode}&sslrootcert={other}");
        let (_, line) = refused(&bucket, &url(pg, "imgcas", "tls_names", &params), &[]);
        assert!(
            line.contains("error performing TLS handshake: the server's certificate is not signed")
                && line.contains(&format!("of {other} (unknown issuer)")),
            "{mode}: {line}"
        );
    }
    // Names the certificate does not hold: a host name, and an IP address.
    for host in ["wrong.imgcas.test", "127.0.0.2"] {
        let words = format!(
            "host={host} hostaddr=127.0.0.1 port={} user=imgcas dbname=tls_names \
             sslmode=verify-full sslrootcert={ca}",
            pg.port
        );
        let (_, line) = refused(&bucket, &words, &[]);
        assert!(
            line.contains(&format!(
                "the server's certificate is not valid for {host} (name mismatch: it names \
                 127.0.0.1, db.imgcas.test)"
            )),
            "{line}"
        );
        // verify-ca checks the chain, not the name.
        starts(&bucket, &words.replace("verify-full", "verify-ca"), &[]);
    }
}

/// A server certificate valid in 2020 only, signed by the module's CA (`openssl ca` backdates).
fn make_expired_certificate(ca_dir: &Path, dir: &Path) {
    new_key(dir, "server.key", KeyFormat::Pkcs8);
    openssl(
        dir,
        &[
            "req",
            "-new",
            "-key",
            "server.key",
            "-subj",
            "/CN=db.imgcas.test",
            "-out",
            "server.csr",
        ],
    );
    std::fs::write(dir.join("server.ext"), SERVER_NAMES).unwrap();
    std::fs::write(
        dir.join("ca.cnf"),
        "[ca]\ndefault_ca = test\n[test]\ndatabase = index.txt\nnew_certs_dir = .\n\
         serial = serial\ndefault_md = sha256\npolicy = any\n[any]\ncommonName = supplied\n",
    )
    .unwrap();
    std::fs::write(dir.join("index.txt"), "").unwrap();
    std::fs::write(dir.join("serial"), "1000\n").unwrap();
    let (ca_crt, ca_key) = (ca_dir.join("ca.crt"), ca_dir.join("ca.key"));
    openssl(
        dir,
        &[
            "ca",
            "-batch",
            "-notext",
            "-config",
            "ca.cnf",
            "-cert",
            &ca_crt.display().to_string(),
            "-keyfile",
            &ca_key.display().to_string(),
            "-in",
            "server.csr",
            "-out",
            "server.crt",
            "-extfile",
            "server.ext",
            "-startdate",
            "20200101000000Z",
            "-enddate",
            "20200102000000Z",
        ],
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_expired_certificate_is_refused_at_start() {
    let Some(pg) = server("pg_tls") else {
        return;
    };
    let ca_dir = pg.tls_dir();
    let expired = PgServer::start_tls(|dir| {
        make_expired_certificate(&ca_dir, dir);
        "hostssl all imgcas 127.0.0.1/32 trust\n".into()
    })
    .expect("the server binaries were there a moment ago");
    expired.database("tls_expired");
    let bucket = S3Target::new().await;
    let ca = file(pg, "ca.crt");
    for mode in ["verify-ca", "verify-full"] {
        let params = format!("sslmode={mode}&sslrootcert={ca}");
        let (_, line) = refused(
            &bucket,
            &url(&expired, "imgcas", "tls_expired", &params),
            &[],
        );
        assert!(
            line.contains(
                "the server's certificate has expired (not valid after 2020-01-02T00:00:00Z)"
            ),
            "{mode}: {line}"
        );
    }
    // `require` without a CA checks nothing, as libpq's.
    let unchecked = url(&expired, "imgcas", "tls_expired", "sslmode=require");
    PostgresMaps::open(&unchecked)
        .await
        .expect("require without a CA");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_server_that_demands_a_client_certificate_gets_one() {
    let Some(pg) = server("pg_tls") else {
        return;
    };
    let bucket = S3Target::new().await;
    let ca = file(pg, "ca.crt");
    let verified = format!("sslmode=verify-full&sslrootcert={ca}");
    let maps_url = url(pg, "imgcas_cert", "imgcas_tls_cert", &verified);
    let (_, line) = refused(&bucket, &maps_url, &[]);
    assert!(
        line.contains("connection requires a valid client certificate"),
        "{line}"
    );
    // Through libpq's variables, as a deployment mounting the files would.
    let env = [
        ("PGSSLCERT", file(pg, "client-pkcs8.crt")),
        ("PGSSLKEY", file(pg, "client-pkcs8.key")),
    ];
    starts(&bucket, &maps_url, &env);
    // The other key formats, in the URL.
    for (name, header) in [
        ("client-pkcs1", "-----BEGIN RSA PRIVATE KEY-----"),
        ("client-sec1", "-----BEGIN EC PRIVATE KEY-----"),
        ("client-pkcs8", "-----BEGIN PRIVATE KEY-----"),
    ] {
        let key = file(pg, &format!("{name}.key"));
        let pem = std::fs::read_to_string(&key).unwrap();
        assert!(pem.starts_with(header), "{name}: {pem:.40}");
        let params = format!(
            "{verified}&sslcert={}&sslkey={key}",
            file(pg, &format!("{name}.crt"))
        );
        let maps_url = url(pg, "imgcas_cert", "imgcas_tls_cert", &params);
        PostgresMaps::open(&maps_url)
            .await
            .unwrap_or_else(|e| panic!("{name}: {e}"));
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pgsslmode_and_pgsslrootcert_apply_when_the_url_names_none() {
    let Some(pg) = server("pg_tls") else {
        return;
    };
    pg.database("tls_env");
    let bucket = S3Target::new().await;
    let (ca, other) = (file(pg, "ca.crt"), file(pg, "other-ca.crt"));
    let bare = url(pg, "imgcas", "tls_env", "application_name=env");
    let env = |root: &str| {
        [
            ("PGSSLMODE", "verify-full".to_string()),
            ("PGSSLROOTCERT", root.to_string()),
        ]
    };
    starts(&bucket, &bare, &env(&ca));
    // Read indeed: the wrong CA from the environment is refused.
    let (_, line) = refused(&bucket, &bare, &env(&other));
    assert!(line.contains("(unknown issuer)"), "{line}");
    // The URL's own parameter wins.
    let own = url(pg, "imgcas", "tls_env", &format!("sslrootcert={ca}"));
    starts(&bucket, &own, &env(&other));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_password_comes_from_its_file_and_never_shows() {
    let Some(pg) = server("pg_tls") else {
        return;
    };
    let (bucket, origin) = (S3Target::new().await, Origin::start().await);
    let secrets = tempfile::tempdir().unwrap();
    let password_file = secrets.path().join("imgcas-db");
    std::fs::write(&password_file, format!("{PASSWORD}\n")).unwrap();
    // SCRAM bound to the server's certificate: a wrong end-point hash would fail the login.
    let params = format!(
        "sslmode=verify-full&sslrootcert={}&channel_binding=require",
        file(pg, "ca.crt")
    );
    let maps_url = url(pg, "imgcas_password", "imgcas_tls_password", &params);
    let with_file = [(
        "IMGCAS_MAPS_PASSWORD_FILE",
        password_file.display().to_string(),
    )];
    let node = serve(&bucket, &maps_url, &with_file).unwrap_or_else(|e| panic!("{e}"));
    serves_an_image(&node, &origin, "/password.jpg", 7).await;
    drop(node);

    // A wrong password in the URL (the file is not read then): refused, and not written.
    let wrong = "hunter2-wrong";
    let in_url = maps_url.replace("imgcas_password@", &format!("imgcas_password:{wrong}@"));
    let (stderr, line) = refused(&bucket, &in_url, &with_file);
    assert!(
        line.contains("password authentication failed for user \"imgcas_password\""),
        "{line}"
    );
    assert!(!stderr.contains(wrong), "{stderr}");
    // A wrong password in the file: the same.
    std::fs::write(&password_file, format!("{wrong}\n")).unwrap();
    let (stderr, line) = refused(&bucket, &maps_url, &with_file);
    assert!(line.contains("password authentication failed"), "{line}");
    assert!(!stderr.contains(wrong), "{stderr}");
    // A file that cannot be read is a configuration error naming the setting.
    let missing = secrets.path().join("missing");
    let env = [("IMGCAS_MAPS_PASSWORD_FILE", missing.display().to_string())];
    let (_, line) = refused(&bucket, &maps_url, &env);
    assert_eq!(
        line,
        format!(
            "imgcas: maps.password_file: cannot read {}: No such file or directory (os error 2)",
            missing.display()
        )
    );
}
