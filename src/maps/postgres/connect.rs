//! How the maps reach PostgreSQL: the connection string in libpq's words, and the TLS under
//! the connections.
//!
//! [`connect_config`] takes `maps.url` (a `postgres://` URL or libpq's `key=value` words)
//! apart. `sslmode`, `sslrootcert`, `sslcert` and `sslkey` are read here — or, when the
//! string leaves one out, libpq's `PGSSLMODE`, `PGSSLROOTCERT`, `PGSSLCERT` and `PGSSLKEY` —
//! because tokio-postgres knows three modes of five and none of the files; the rest of the
//! string goes to tokio-postgres as written. A string without a password takes the one
//! `maps.password_file` holds.
//!
//! The modes are libpq's. `disable`: plain text. `prefer` (the default): TLS when the server
//! offers it. `require`: TLS or nothing. Neither checks the certificate unless a CA is given
//! (`sslrootcert`, or `~/.postgresql/root.crt` when it exists), when both check it as
//! `verify-ca` does: the chain up to that CA, not the name. `verify-full` checks the name too
//! (the host, or the IP address, against the certificate's names). `sslrootcert=system`
//! (the machine's roots) goes with `verify-full` only, its default then. Unlike libpq, a
//! handshake that failed is never retried in plain text, whatever the mode.
//!
//! The TLS is rustls on ring, as everywhere in the service; the glue tokio-postgres calls per
//! connection is `connect/tls.rs` ([`MakeRustls`]), and its verifiers. A certificate problem
//! comes back as one sentence that names it (unknown issuer, name mismatch, expired), and
//! [`describe`] walks a driver error's causes so that sentence reaches the line `imgcas serve`
//! stops with. No error here quotes the string (it may hold the password).

use std::path::{Path, PathBuf};
use std::str::FromStr;
use std::sync::Arc;

use percent_encoding::percent_decode_str;
use rustls::client::danger::ServerCertVerifier;
use rustls::client::WebPkiServerVerifier;
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer};
use rustls::{ClientConfig, RootCertStore};
use tokio_postgres::Config;

use super::super::MapError;
use crate::config::maps::{password_from_file, words};
use tls::LessThanAll;
pub(super) use tls::MakeRustls;

mod tls;

/// The parameters read here, not by tokio-postgres.
const OWN_KEYS: [&str; 4] = ["sslmode", "sslrootcert", "sslcert", "sslkey"];

fn refused(message: impl std::fmt::Display) -> MapError {
    MapError::Store(format!("maps.url: {message}"))
}

/// A tokio-postgres configuration for `url` and the TLS its connections use. `password_file`
/// gives the password when `url` names none. The environment's `PGSSL*` variables and
/// `~/.postgresql/` are read as libpq reads them.
pub(super) fn connect_config(
    url: &str,
    password_file: Option<&Path>,
) -> Result<(Config, MakeRustls), MapError> {
    connect_config_in(url, password_file, &|name| std::env::var(name).ok())
}

fn connect_config_in(
    url: &str,
    password_file: Option<&Path>,
    env: &dyn Fn(&str) -> Option<String>,
) -> Result<(Config, MakeRustls), MapError> {
    let (rest, mut own) = take_own_parameters(url)?;
    let mut config = Config::from_str(&rest).map_err(|e| {
        MapError::Store(format!(
            "maps.url is not a PostgreSQL URL: {}",
            describe(&e)
        ))
    })?;
    for (value, variable) in
        own.iter_mut()
            .zip(["PGSSLMODE", "PGSSLROOTCERT", "PGSSLCERT", "PGSSLKEY"])
    {
        if value.is_none() {
            *value = env(variable).filter(|v| !v.is_empty());
        }
    }
    let [mode, root, cert, key] = own;
    let home = env("HOME").map(|home| PathBuf::from(home).join(".postgresql"));
    let tls = Tls::settle(mode.as_deref(), root, cert, key, home.as_deref())?;
    config.ssl_mode(tls.mode.driver());
    // Without a host, the address dialled is the name TLS checks (a `hostaddr`-only string;
    // tokio-postgres would refuse TLS without a name).
    if config.get_hosts().is_empty() {
        for address in config.get_hostaddrs().to_vec() {
            config.host(address.to_string());
        }
    }
    if config.get_password().is_none() {
        if let Some(path) = password_file {
            let password = password_from_file(path)
                .map_err(|m| MapError::Store(format!("maps.password_file: {m}")))?;
            config.password(password);
        }
    }
    Ok((config, tls.connector()?))
}

/// The string without the parameters read here, and those parameters (in [`OWN_KEYS`]'
/// order), from a URL's query or among `key=value` words.
fn take_own_parameters(url: &str) -> Result<(String, [Option<String>; 4]), MapError> {
    let mut own: [Option<String>; 4] = Default::default();
    let slot = |key: &str| OWN_KEYS.iter().position(|k| *k == key);
    let Some(after_scheme) = ["postgres://", "postgresql://"]
        .iter()
        .find(|scheme| url.starts_with(*scheme))
        .map(|scheme| scheme.len())
    else {
        let words = words(url).map_err(|m| refused(format!("not key=value words: {m}")))?;
        let mut kept = Vec::new();
        for word in words {
            match slot(word.key) {
                Some(i) => own[i] = Some(word.value),
                None => kept.push(format!("{}='{}'", word.key, quoted(&word.value))),
            }
        }
        return Ok((kept.join(" "), own));
    };
    // As tokio-postgres reads a URL: the user part ends at the first `@`, the query starts
    // at the first `?` after it, and keys and values are percent-decoded.
    let rest = &url[after_scheme..];
    let host_at = after_scheme + rest.find('@').map_or(0, |at| at + 1);
    let Some(query_at) = url[host_at..].find('?').map(|q| host_at + q) else {
        return Ok((url.to_string(), own));
    };
    let mut kept = Vec::new();
    for pair in url[query_at + 1..].split('&') {
        let (key, value) = pair.split_once('=').unwrap_or((pair, ""));
        match slot(&percent_decode_str(key).decode_utf8_lossy()) {
            Some(i) => {
                let value = percent_decode_str(value)
                    .decode_utf8()
                    .map_err(|_| refused(format!("`{key}` is not UTF-8 once decoded")))?;
                own[i] = Some(value.into_owned());
            }
            None => kept.push(pair),
        }
    }
    let mut rest = url[..query_at].to_string();
    if !kept.is_empty() {
        rest.push('?');
        rest.push_str(&kept.join("&"));
    }
    Ok((rest, own))
}

/// A value for `'…'` in libpq's words.
fn quoted(value: &str) -> String {
    value.replace('\\', "\\\\").replace('\'', "\\'")
}

/// libpq's `sslmode`s, but `allow` (plain text first).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum SslMode {
    Disable,
    Prefer,
    Require,
    VerifyCa,
    VerifyFull,
}

impl SslMode {
    fn parse(value: &str) -> Result<SslMode, MapError> {
        Ok(match value {
            "disable" => SslMode::Disable,
            "prefer" => SslMode::Prefer,
            "require" => SslMode::Require,
            "verify-ca" => SslMode::VerifyCa,
            "verify-full" => SslMode::VerifyFull,
            "allow" => {
                return Err(refused(
                    "sslmode=allow (plain text first) is not supported: use prefer, require, \
                     verify-ca or verify-full",
                ))
            }
            other => {
                return Err(refused(format!(
                    "sslmode `{other}` is not one of disable, prefer, require, verify-ca, \
                     verify-full"
                )))
            }
        })
    }

    /// The mode tokio-postgres negotiates with: the checks of `verify-*` are this file's.
    fn driver(self) -> tokio_postgres::config::SslMode {
        match self {
            SslMode::Disable => tokio_postgres::config::SslMode::Disable,
            SslMode::Prefer => tokio_postgres::config::SslMode::Prefer,
            _ => tokio_postgres::config::SslMode::Require,
        }
    }
}

/// Where the CAs a certificate is checked against come from.
#[derive(Debug, PartialEq)]
enum Roots {
    File(PathBuf),
    /// The machine's (rustls-native-certs: the OS store, `SSL_CERT_FILE`, …).
    System,
}

impl Roots {
    fn describe(&self) -> String {
        match self {
            Roots::File(path) => path.display().to_string(),
            Roots::System => "the system's roots".into(),
        }
    }

    fn load(&self) -> Result<RootCertStore, MapError> {
        let certificates = match self {
            Roots::File(path) => read_certificates("sslrootcert", path)?,
            Roots::System => {
                let found = rustls_native_certs::load_native_certs();
                if found.certs.is_empty() {
                    let why = found.errors.first().map(|e| format!(": {e}"));
                    return Err(refused(format!(
                        "sslrootcert=system: no CA certificate found on this machine{}",
                        why.unwrap_or_default()
                    )));
                }
                found.certs
            }
        };
        let mut store = RootCertStore::empty();
        let (added, _) = store.add_parsable_certificates(certificates);
        if added == 0 {
            return Err(refused(format!(
                "sslrootcert {}: no usable CA certificate in it",
                self.describe()
            )));
        }
        Ok(store)
    }
}

/// How much of the server's certificate is checked.
#[derive(Debug, PartialEq)]
enum Check {
    Nothing,
    /// The chain up to these roots (`verify-ca`).
    Chain(Roots),
    /// The chain and the name (`verify-full`).
    ChainAndName(Roots),
}

/// The TLS side of a connection string, settled.
#[derive(Debug)]
struct Tls {
    mode: SslMode,
    check: Check,
    /// The client certificate's chain and key files.
    client: Option<(PathBuf, PathBuf)>,
}

impl Tls {
    /// libpq's rules over the parameters given (`home`: `~/.postgresql`).
    fn settle(
        mode: Option<&str>,
        root: Option<String>,
        cert: Option<String>,
        key: Option<String>,
        home: Option<&Path>,
    ) -> Result<Tls, MapError> {
        let system = root.as_deref() == Some("system");
        let mode = match mode {
            Some(mode) => SslMode::parse(mode)?,
            None if system => SslMode::VerifyFull,
            None => SslMode::Prefer,
        };
        if mode == SslMode::Disable {
            return Ok(Tls {
                mode,
                check: Check::Nothing,
                client: None,
            });
        }
        if system && mode != SslMode::VerifyFull {
            return Err(refused(
                "sslrootcert=system needs sslmode=verify-full (the machine's roots vouch for \
                 names, not for one server)",
            ));
        }
        let in_home = |name: &str| home.map(|h| h.join(name)).filter(|p| p.is_file());
        let roots = match root {
            Some(_) if system => Some(Roots::System),
            Some(path) => Some(Roots::File(PathBuf::from(path))),
            None => in_home("root.crt").map(Roots::File),
        };
        let check = match (mode, roots) {
            (SslMode::VerifyCa | SslMode::VerifyFull, None) => {
                let name = if mode == SslMode::VerifyCa {
                    "verify-ca"
                } else {
                    "verify-full"
                };
                return Err(refused(format!(
                    "sslmode={name} needs the CA to check the server against: set sslrootcert \
                     to its PEM file, or to `system` for the machine's roots \
                     (~/.postgresql/root.crt does not exist)"
                )));
            }
            (SslMode::VerifyFull, Some(roots)) => Check::ChainAndName(roots),
            (_, Some(roots)) => Check::Chain(roots),
            (_, None) => Check::Nothing,
        };
        let cert = cert
            .map(PathBuf::from)
            .or_else(|| in_home("postgresql.crt"));
        let client = match cert {
            None => None,
            Some(cert) => {
                let key = match key {
                    Some(key) => PathBuf::from(key),
                    None => in_home("postgresql.key").ok_or_else(|| {
                        refused(format!(
                            "sslcert {} needs its key: set sslkey to the key's PEM file",
                            cert.display()
                        ))
                    })?,
                };
                Some((cert, key))
            }
        };
        Ok(Tls {
            mode,
            check,
            client,
        })
    }

    /// The rustls client these settings make (nothing is read for `disable`).
    fn connector(&self) -> Result<MakeRustls, MapError> {
        let provider = Arc::new(rustls::crypto::ring::default_provider());
        let (verifier, roots): (Arc<dyn ServerCertVerifier>, String) = match &self.check {
            Check::Nothing => (
                Arc::new(LessThanAll::any_certificate(provider.clone())),
                String::new(),
            ),
            Check::Chain(roots) | Check::ChainAndName(roots) => {
                let webpki = WebPkiServerVerifier::builder_with_provider(
                    Arc::new(roots.load()?),
                    provider.clone(),
                )
                .build()
                .map_err(|e| refused(format!("sslrootcert {}: {e}", roots.describe())))?;
                let verifier: Arc<dyn ServerCertVerifier> = match self.check {
                    Check::ChainAndName(_) => webpki,
                    _ => Arc::new(LessThanAll::chain_only(provider.clone(), webpki)),
                };
                (verifier, roots.describe())
            }
        };
        let builder = ClientConfig::builder_with_provider(provider)
            .with_safe_default_protocol_versions()
            .map_err(|e| refused(format!("TLS: {e}")))?
            .dangerous()
            .with_custom_certificate_verifier(verifier);
        let mut config = match &self.client {
            None => builder.with_no_client_auth(),
            Some((cert, key)) => {
                let chain = read_certificates("sslcert", cert)?;
                let key = read_key(key)?;
                builder
                    .with_client_auth_cert(chain, key)
                    .map_err(|e| refused(format!("sslcert/sslkey: {e}")))?
            }
        };
        // What libpq 17 sends, and what a server's direct TLS negotiation asks for.
        config.alpn_protocols = vec![b"postgresql".to_vec()];
        Ok(MakeRustls::new(config, &roots))
    }
}

fn read_pem(what: &str, path: &Path) -> Result<Vec<u8>, MapError> {
    std::fs::read(path).map_err(|e| refused(format!("{what} {}: {e}", path.display())))
}

fn read_certificates(what: &str, path: &Path) -> Result<Vec<CertificateDer<'static>>, MapError> {
    let pem = read_pem(what, path)?;
    let certificates = CertificateDer::pem_slice_iter(&pem)
        .collect::<Result<Vec<_>, _>>()
        .map_err(|e| refused(format!("{what} {}: {e}", path.display())))?;
    if certificates.is_empty() {
        return Err(refused(format!(
            "{what} {}: no PEM certificate in it",
            path.display()
        )));
    }
    Ok(certificates)
}

/// A PEM key: PKCS#8, PKCS#1 (RSA) or SEC1 (EC), unencrypted.
fn read_key(path: &Path) -> Result<PrivateKeyDer<'static>, MapError> {
    let pem = read_pem("sslkey", path)?;
    PrivateKeyDer::from_pem_slice(&pem).map_err(|e| {
        let encrypted = pem.windows(9).any(|w| w == b"ENCRYPTED");
        refused(match encrypted {
            true => format!(
                "sslkey {}: the key is encrypted; give it unencrypted (PKCS#8, PKCS#1 or SEC1)",
                path.display()
            ),
            false => format!(
                "sslkey {}: no PEM private key in it (PKCS#8, PKCS#1 or SEC1): {e}",
                path.display()
            ),
        })
    })
}

/// A driver error and its causes in one line: tokio-postgres's own text names only the kind
/// of failure ("error performing TLS handshake"); the reason is in its sources.
pub(super) fn describe(e: &tokio_postgres::Error) -> String {
    let mut text = e.to_string();
    let mut cause = std::error::Error::source(e);
    while let Some(e) = cause {
        text.push_str(": ");
        text.push_str(&e.to_string());
        cause = e.source();
    }
    text
}

#[cfg(test)]
mod tests {
    use super::*;

    fn no_env(_: &str) -> Option<String> {
        None
    }

    fn settle(url: &str, env: &dyn Fn(&str) -> Option<String>) -> Result<Tls, MapError> {
        let (_, [mode, root, cert, key]) = take_own_parameters(url)?;
        let from_env = |value: Option<String>, name: &str| value.or_else(|| env(name));
        Tls::settle(
            from_env(mode, "PGSSLMODE").as_deref(),
            from_env(root, "PGSSLROOTCERT"),
            from_env(cert, "PGSSLCERT"),
            from_env(key, "PGSSLKEY"),
            env("HOME")
                .map(|h| PathBuf::from(h).join(".postgresql"))
                .as_deref(),
        )
    }

    fn refusal<T>(result: Result<T, MapError>) -> String {
        match result {
            Ok(_) => panic!("accepted"),
            Err(e) => e.to_string(),
        }
    }

    #[test]
    fn own_parameters_leave_the_url_and_the_rest_stays_as_written() {
        let (rest, own) = take_own_parameters(
            "postgres://me:p%40ss?@db:6432/imgcas?sslmode=verify-full&application_name=a%20b\
             &sslrootcert=%2Fetc%2Fca.pem&connect_timeout=3",
        )
        .unwrap();
        assert_eq!(
            rest,
            "postgres://me:p%40ss?@db:6432/imgcas?application_name=a%20b&connect_timeout=3"
        );
        assert_eq!(own[0].as_deref(), Some("verify-full"));
        assert_eq!(own[1].as_deref(), Some("/etc/ca.pem"));
        let (rest, own) =
            take_own_parameters("postgresql://db/imgcas?sslcert=c.pem&sslkey=k.pem").unwrap();
        assert_eq!(rest, "postgresql://db/imgcas");
        assert_eq!(own[2..], [Some("c.pem".into()), Some("k.pem".into())]);
        let (rest, own) = take_own_parameters("postgres://db/imgcas").unwrap();
        assert_eq!(
            (rest.as_str(), own),
            ("postgres://db/imgcas", Default::default())
        );

        let (rest, own) = take_own_parameters(
            "host=db sslmode = require dbname='my db' password=it\\'s sslrootcert='/a b/ca.pem'",
        )
        .unwrap();
        assert_eq!(rest, "host='db' dbname='my db' password='it\\'s'");
        assert_eq!(own[0].as_deref(), Some("require"));
        assert_eq!(own[1].as_deref(), Some("/a b/ca.pem"));
        let config = Config::from_str(&rest).unwrap();
        assert_eq!(config.get_dbname(), Some("my db"));
        assert_eq!(config.get_password(), Some(&b"it's"[..]));
    }

    #[test]
    fn both_forms_make_the_same_configuration() {
        let ca = tempfile::NamedTempFile::new().unwrap();
        let url = format!(
            "postgres://imgcas@127.0.0.1:5433/maps?sslmode=require&application_name=x&sslrootcert={}",
            ca.path().display()
        );
        let words = format!(
            "host=127.0.0.1 port=5433 user=imgcas dbname=maps sslmode=require \
             application_name=x sslrootcert={}",
            ca.path().display()
        );
        for string in [url, words] {
            let (rest, own) = take_own_parameters(&string).unwrap();
            let config = Config::from_str(&rest).unwrap();
            assert_eq!(config.get_ports(), [5433]);
            assert_eq!(config.get_user(), Some("imgcas"));
            assert_eq!(config.get_application_name(), Some("x"));
            assert_eq!(own[0].as_deref(), Some("require"));
            let tls = settle(&string, &no_env).unwrap();
            assert_eq!(tls.check, Check::Chain(Roots::File(ca.path().into())));
        }
    }

    #[test]
    fn modes_follow_libpq() {
        let ca = tempfile::NamedTempFile::new().unwrap();
        let ca = ca.path().display();
        let tls = settle("postgres://db/x", &no_env).unwrap();
        assert_eq!((tls.mode, tls.check), (SslMode::Prefer, Check::Nothing));
        let tls = settle("postgres://db/x?sslmode=require", &no_env).unwrap();
        assert_eq!((tls.mode, tls.check), (SslMode::Require, Check::Nothing));
        assert_eq!(tls.mode.driver(), tokio_postgres::config::SslMode::Require);
        // require or prefer with a CA check the chain, as verify-ca.
        for mode in ["require", "prefer", "verify-ca"] {
            let url = format!("postgres://db/x?sslmode={mode}&sslrootcert={ca}");
            assert!(matches!(
                settle(&url, &no_env).unwrap().check,
                Check::Chain(_)
            ));
        }
        let url = format!("postgres://db/x?sslmode=verify-full&sslrootcert={ca}");
        let tls = settle(&url, &no_env).unwrap();
        assert!(matches!(tls.check, Check::ChainAndName(Roots::File(_))));
        assert_eq!(tls.mode.driver(), tokio_postgres::config::SslMode::Require);
        // system: verify-full by default, and only with it.
        let tls = settle("postgres://db/x?sslrootcert=system", &no_env).unwrap();
        assert_eq!(tls.mode, SslMode::VerifyFull);
        assert_eq!(tls.check, Check::ChainAndName(Roots::System));
        let weak = refusal(settle(
            "host=db sslrootcert=system sslmode=verify-ca",
            &no_env,
        ));
        assert!(
            weak.contains("sslrootcert=system needs sslmode=verify-full"),
            "{weak}"
        );
        // disable reads nothing.
        let tls = settle("postgres://db/x?sslmode=disable&sslcert=/nope", &no_env).unwrap();
        assert_eq!(
            (tls.mode, tls.check, tls.client),
            (SslMode::Disable, Check::Nothing, None)
        );
        for (url, said) in [
            (
                "postgres://db/x?sslmode=verify-full",
                "sslmode=verify-full needs the CA",
            ),
            (
                "postgres://db/x?sslmode=verify-ca",
                "sslmode=verify-ca needs the CA",
            ),
            (
                "postgres://db/x?sslmode=allow",
                "sslmode=allow (plain text first) is not",
            ),
            ("postgres://db/x?sslmode=on", "sslmode `on` is not one of"),
            (
                "postgres://db/x?sslcert=/c.pem",
                "sslcert /c.pem needs its key",
            ),
        ] {
            let refused = refusal(settle(url, &|n| {
                (n == "HOME").then(|| "/nonexistent".into())
            }));
            assert!(refused.starts_with("maps.url: "), "{refused}");
            assert!(refused.contains(said), "{refused}");
        }
    }

    #[test]
    fn the_environment_fills_what_the_string_leaves_out() {
        let home = tempfile::tempdir().unwrap();
        let dir = home.path().join(".postgresql");
        std::fs::create_dir(&dir).unwrap();
        let env = |name: &str| match name {
            "PGSSLMODE" => Some("verify-ca".to_string()),
            "PGSSLROOTCERT" => Some("/etc/env-ca.pem".to_string()),
            "HOME" => Some(home.path().display().to_string()),
            _ => None,
        };
        let tls = settle("postgres://db/x", &env).unwrap();
        assert_eq!(tls.mode, SslMode::VerifyCa);
        assert_eq!(
            tls.check,
            Check::Chain(Roots::File("/etc/env-ca.pem".into()))
        );
        // The string wins over the environment.
        let tls = settle("host=db sslmode=require sslrootcert=/own.pem", &env).unwrap();
        assert_eq!(tls.mode, SslMode::Require);
        assert_eq!(tls.check, Check::Chain(Roots::File("/own.pem".into())));
        // ~/.postgresql/root.crt, and the client certificate there, as libpq reads them.
        std::fs::write(dir.join("root.crt"), "").unwrap();
        std::fs::write(dir.join("postgresql.crt"), "").unwrap();
        std::fs::write(dir.join("postgresql.key"), "").unwrap();
        let home_only = |name: &str| (name == "HOME").then(|| home.path().display().to_string());
        let tls = settle("postgres://db/x?sslmode=verify-full", &home_only).unwrap();
        assert_eq!(
            tls.check,
            Check::ChainAndName(Roots::File(dir.join("root.crt")))
        );
        assert_eq!(
            tls.client,
            Some((dir.join("postgresql.crt"), dir.join("postgresql.key")))
        );
    }

    #[test]
    fn an_address_without_a_host_is_the_name_tls_checks() {
        let (config, _) =
            connect_config_in("hostaddr=10.0.0.5 sslmode=require", None, &no_env).unwrap();
        let host = tokio_postgres::config::Host::Tcp("10.0.0.5".into());
        assert_eq!(config.get_hosts(), [host]);
        let (config, _) = connect_config_in("host=db hostaddr=10.0.0.5", None, &no_env).unwrap();
        assert_eq!(
            config.get_hosts(),
            [tokio_postgres::config::Host::Tcp("db".into())]
        );
    }

    #[test]
    fn the_password_file_serves_a_url_without_a_password() {
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("password");
        std::fs::write(&file, "from-file\n").unwrap();
        let (config, _) =
            connect_config_in("postgres://me@db/x?sslmode=disable", Some(&file), &no_env).unwrap();
        assert_eq!(config.get_password(), Some(&b"from-file"[..]));
        let (config, _) = connect_config_in(
            "host=db user=me password=own sslmode=disable",
            Some(&file),
            &no_env,
        )
        .unwrap();
        assert_eq!(config.get_password(), Some(&b"own"[..]));
        let missing = dir.path().join("missing");
        let refused = refusal(connect_config_in(
            "postgres://db/x",
            Some(&missing),
            &no_env,
        ));
        assert!(
            refused.starts_with("maps.password_file: cannot read"),
            "{refused}"
        );
    }

    #[test]
    fn no_refusal_quotes_the_password() {
        for url in [
            "postgres://me:hunter2@db/x?sslmode=bogus",
            "postgres://me:hunter2@db/x?nonsense=1",
            "postgres://me:hunter2@db:port/x",
            "host=db password=hunter2 sslmode=verify-full",
            "host=db password='hunter2",
            "host=db password=hunter2 nonsense=1",
        ] {
            let refused = refusal(connect_config_in(url, None, &no_env));
            assert!(!refused.contains("hunter2"), "{refused}");
        }
        let refused = refusal(connect_config_in(
            "postgres://db/x?nonsense=1",
            None,
            &no_env,
        ));
        assert!(refused.contains("unknown option `nonsense`"), "{refused}");
    }
}
