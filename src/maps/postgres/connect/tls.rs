//! The rustls glue under tokio-postgres: [`MakeRustls`] and the handshake it makes per
//! connection, the stream with its `tls-server-end-point` channel binding (the hash SCRAM's
//! `-PLUS` login binds to), the verifiers of the modes that check less than everything
//! (`LessThanAll`), and a refused handshake said in one sentence that names the
//! problem (unknown issuer, name mismatch, expired). `connect.rs` decides which verifier and
//! which files; this file knows nothing of connection strings.

use std::future::Future;
use std::io;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::{Duration, UNIX_EPOCH};

use rustls::client::danger::{HandshakeSignatureValid, ServerCertVerified, ServerCertVerifier};
use rustls::client::WebPkiServerVerifier;
use rustls::crypto::CryptoProvider;
use rustls::pki_types::{CertificateDer, ServerName, UnixTime};
use rustls::{CertificateError, ClientConfig, DigitallySignedStruct};
use rustls::{Error as TlsError, SignatureScheme};
use sha2::Digest;
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio_postgres::tls::{ChannelBinding, MakeTlsConnect, TlsConnect, TlsStream};

/// A failed handshake, said in words.
#[derive(Debug)]
pub(in crate::maps::postgres) struct HandshakeFailed(String);

impl std::fmt::Display for HandshakeFailed {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for HandshakeFailed {}

/// What tokio-postgres asks for a TLS connection: the rustls client of the connection string.
#[derive(Clone)]
pub(in crate::maps::postgres) struct MakeRustls {
    config: Arc<ClientConfig>,
    /// The roots a chain is checked against, as an error names them.
    roots: Arc<str>,
}

impl MakeRustls {
    /// Connections made with `config`, whose verifier checks against `roots` (as named in
    /// an unknown issuer's sentence).
    pub(super) fn new(config: ClientConfig, roots: &str) -> MakeRustls {
        MakeRustls {
            config: Arc::new(config),
            roots: roots.into(),
        }
    }
}

impl<S> MakeTlsConnect<S> for MakeRustls
where
    S: AsyncRead + AsyncWrite + Unpin + Send + 'static,
{
    type Stream = RustlsStream<S>;
    type TlsConnect = RustlsConnect;
    type Error = HandshakeFailed;

    fn make_tls_connect(&mut self, host: &str) -> Result<RustlsConnect, HandshakeFailed> {
        // Called for every connection, TLS or not: a host TLS cannot name fails at the
        // handshake, if there is one.
        Ok(RustlsConnect {
            config: self.config.clone(),
            roots: self.roots.clone(),
            host: host.to_string(),
        })
    }
}

/// One connection's handshake, to `host`.
pub(in crate::maps::postgres) struct RustlsConnect {
    config: Arc<ClientConfig>,
    roots: Arc<str>,
    host: String,
}

impl<S> TlsConnect<S> for RustlsConnect
where
    S: AsyncRead + AsyncWrite + Unpin + Send + 'static,
{
    type Stream = RustlsStream<S>;
    type Error = HandshakeFailed;
    type Future = Pin<Box<dyn Future<Output = Result<RustlsStream<S>, HandshakeFailed>> + Send>>;

    fn connect(self, stream: S) -> Self::Future {
        Box::pin(async move {
            let name = ServerName::try_from(self.host.clone()).map_err(|_| {
                HandshakeFailed(format!("`{}` is not a host name TLS can check", self.host))
            })?;
            tokio_rustls::TlsConnector::from(self.config.clone())
                .connect(name, stream)
                .await
                .map(RustlsStream)
                .map_err(|e| self.failure(e))
        })
    }
}

impl RustlsConnect {
    fn failure(&self, e: io::Error) -> HandshakeFailed {
        let tls = e.get_ref().and_then(|e| e.downcast_ref::<TlsError>());
        HandshakeFailed(match tls {
            Some(TlsError::InvalidCertificate(problem)) => {
                certificate_problem(problem, &self.host, &self.roots)
            }
            Some(TlsError::AlertReceived(alert)) => format!(
                "the server ended the handshake with a {alert:?} alert (is a client \
                 certificate it trusts needed: sslcert and sslkey?)"
            ),
            Some(other) => other.to_string(),
            None => e.to_string(),
        })
    }
}

/// A refused server certificate in a sentence that names the problem.
fn certificate_problem(problem: &CertificateError, host: &str, roots: &str) -> String {
    let date = |t: &UnixTime| {
        humantime::format_rfc3339_seconds(UNIX_EPOCH + Duration::from_secs(t.as_secs()))
    };
    match problem {
        CertificateError::UnknownIssuer => {
            format!("the server's certificate is not signed by a CA of {roots} (unknown issuer)")
        }
        CertificateError::NotValidForName => {
            format!("the server's certificate is not valid for {host} (name mismatch)")
        }
        CertificateError::NotValidForNameContext { presented, .. } => format!(
            "the server's certificate is not valid for {host} (name mismatch: it names {})",
            match presented.is_empty() {
                true => "no host".to_string(),
                false => presented
                    .iter()
                    .map(|name| bare_name(name))
                    .collect::<Vec<_>>()
                    .join(", "),
            }
        ),
        CertificateError::Expired => "the server's certificate has expired".into(),
        CertificateError::ExpiredContext { not_after, .. } => format!(
            "the server's certificate has expired (not valid after {})",
            date(not_after)
        ),
        CertificateError::NotValidYet => "the server's certificate is not valid yet".into(),
        CertificateError::NotValidYetContext { not_before, .. } => format!(
            "the server's certificate is not valid yet (not before {})",
            date(not_before)
        ),
        other => format!("the server's certificate is refused: {other}"),
    }
}

/// A name as rustls presents it (`DnsName("db.internal")`, `IpAddress(10.0.0.5)`), bare.
fn bare_name(presented: &str) -> &str {
    let inner = presented
        .strip_prefix("DnsName(")
        .or_else(|| presented.strip_prefix("IpAddress("))
        .and_then(|rest| rest.strip_suffix(')'));
    match inner {
        Some(inner) => inner.trim_matches('"'),
        None => presented,
    }
}

/// The verifier of the modes that check less than everything: no check of the certificate
/// (`prefer` and `require` without a CA, as libpq does), or `verify-ca`'s chain up to the
/// roots, validity included, and no name. Either way the handshake's signatures are still
/// checked against the key the certificate carries.
#[derive(Debug)]
pub(super) struct LessThanAll {
    provider: Arc<CryptoProvider>,
    /// `verify-ca`: the chain's checker (which checks the name last, so a name mismatch
    /// means the chain passed).
    chain: Option<Arc<WebPkiServerVerifier>>,
}

impl LessThanAll {
    pub(super) fn any_certificate(provider: Arc<CryptoProvider>) -> LessThanAll {
        LessThanAll {
            provider,
            chain: None,
        }
    }

    pub(super) fn chain_only(
        provider: Arc<CryptoProvider>,
        webpki: Arc<WebPkiServerVerifier>,
    ) -> LessThanAll {
        LessThanAll {
            provider,
            chain: Some(webpki),
        }
    }
}

impl ServerCertVerifier for LessThanAll {
    fn verify_server_cert(
        &self,
        end_entity: &CertificateDer<'_>,
        intermediates: &[CertificateDer<'_>],
        name: &ServerName<'_>,
        ocsp: &[u8],
        now: UnixTime,
    ) -> Result<ServerCertVerified, TlsError> {
        let Some(chain) = &self.chain else {
            return Ok(ServerCertVerified::assertion());
        };
        match chain.verify_server_cert(end_entity, intermediates, name, ocsp, now) {
            Err(TlsError::InvalidCertificate(
                CertificateError::NotValidForName | CertificateError::NotValidForNameContext { .. },
            )) => Ok(ServerCertVerified::assertion()),
            checked => checked,
        }
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, TlsError> {
        let algorithms = &self.provider.signature_verification_algorithms;
        rustls::crypto::verify_tls12_signature(message, cert, dss, algorithms)
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, TlsError> {
        let algorithms = &self.provider.signature_verification_algorithms;
        rustls::crypto::verify_tls13_signature(message, cert, dss, algorithms)
    }

    fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
        self.provider
            .signature_verification_algorithms
            .supported_schemes()
    }
}

/// A TLS connection to the server.
pub(in crate::maps::postgres) struct RustlsStream<S>(tokio_rustls::client::TlsStream<S>);

impl<S: AsyncRead + AsyncWrite + Unpin> AsyncRead for RustlsStream<S> {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        Pin::new(&mut self.0).poll_read(cx, buf)
    }
}

impl<S: AsyncRead + AsyncWrite + Unpin> AsyncWrite for RustlsStream<S> {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.0).poll_write(cx, buf)
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.0).poll_flush(cx)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.0).poll_shutdown(cx)
    }
}

impl<S: AsyncRead + AsyncWrite + Unpin> TlsStream for RustlsStream<S> {
    /// `tls-server-end-point` (RFC 5929): the server certificate's hash, which SCRAM's
    /// channel binding checks the server saw too.
    fn channel_binding(&self) -> ChannelBinding {
        let (_, session) = self.0.get_ref();
        session
            .peer_certificates()
            .and_then(|chain| chain.first())
            .and_then(|certificate| end_point_hash(certificate))
            .map_or_else(ChannelBinding::none, ChannelBinding::tls_server_end_point)
    }
}

/// One DER element: its tag, its contents and what follows it.
fn der_element(input: &[u8]) -> Option<(u8, &[u8], &[u8])> {
    let (&tag, rest) = input.split_first()?;
    let (&first, rest) = rest.split_first()?;
    let (length, rest) = match first {
        0..=0x7f => (usize::from(first), rest),
        0x81..=0x84 => {
            let (bytes, rest) = rest.split_at_checked(usize::from(first & 0x7f))?;
            let length = bytes.iter().fold(0usize, |n, &b| (n << 8) | usize::from(b));
            (length, rest)
        }
        _ => return None,
    };
    let (contents, rest) = rest.split_at_checked(length)?;
    Some((tag, contents, rest))
}

/// The hash of a certificate its signature's algorithm names (SHA-256 for MD5 and SHA-1, as
/// RFC 5929 says); `None` for an algorithm without one (Ed25519, RSA-PSS), when SCRAM goes
/// without channel binding.
fn end_point_hash(der: &[u8]) -> Option<Vec<u8>> {
    const SEQUENCE: u8 = 0x30;
    const OID: u8 = 0x06;
    // 1.2.840.113549.1.1 (PKCS #1) and 1.2.840.10045.4 (ECDSA signatures).
    const RSA: &[u8] = &[0x2a, 0x86, 0x48, 0x86, 0xf7, 0x0d, 0x01, 0x01];
    const ECDSA: &[u8] = &[0x2a, 0x86, 0x48, 0xce, 0x3d, 0x04];
    // Certificate ::= SEQUENCE { tbsCertificate, signatureAlgorithm, signatureValue }
    let (SEQUENCE, certificate, _) = der_element(der)? else {
        return None;
    };
    let (SEQUENCE, _, rest) = der_element(certificate)? else {
        return None;
    };
    let (SEQUENCE, algorithm, _) = der_element(rest)? else {
        return None;
    };
    let (OID, oid, _) = der_element(algorithm)? else {
        return None;
    };
    Some(match (oid.strip_prefix(RSA), oid.strip_prefix(ECDSA)) {
        (Some([0x04 | 0x05 | 0x0b]), _) | (_, Some([0x01] | [0x03, 0x02])) => {
            sha2::Sha256::digest(der).to_vec()
        }
        (Some([0x0e]), _) | (_, Some([0x03, 0x01])) => sha2::Sha224::digest(der).to_vec(),
        (Some([0x0c]), _) | (_, Some([0x03, 0x03])) => sha2::Sha384::digest(der).to_vec(),
        (Some([0x0d]), _) | (_, Some([0x03, 0x04])) => sha2::Sha512::digest(der).to_vec(),
        _ => return None,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn certificate_problems_are_named() {
        let unknown = certificate_problem(&CertificateError::UnknownIssuer, "db", "/ca.pem");
        assert!(unknown.contains("/ca.pem (unknown issuer)"), "{unknown}");
        let mismatch = CertificateError::NotValidForNameContext {
            expected: ServerName::try_from("127.0.0.1").unwrap(),
            presented: vec![
                "DnsName(\"db.imgcas.test\")".into(),
                "IpAddress(10.0.0.5)".into(),
            ],
        };
        let mismatch = certificate_problem(&mismatch, "127.0.0.1", "");
        assert!(
            mismatch.ends_with(
                "not valid for 127.0.0.1 (name mismatch: it names db.imgcas.test, 10.0.0.5)"
            ),
            "{mismatch}"
        );
        let expired = CertificateError::ExpiredContext {
            time: UnixTime::since_unix_epoch(Duration::from_secs(1_700_000_000)),
            not_after: UnixTime::since_unix_epoch(Duration::from_secs(1_577_923_200)),
        };
        let expired = certificate_problem(&expired, "db", "");
        assert_eq!(
            expired,
            "the server's certificate has expired (not valid after 2020-01-02T00:00:00Z)"
        );
    }

    /// A certificate's skeleton: `tbs` and the signature algorithm's OID.
    fn certificate(oid: &[u8]) -> Vec<u8> {
        let mut algorithm = vec![0x06, oid.len() as u8];
        algorithm.extend_from_slice(oid);
        algorithm.extend_from_slice(&[0x05, 0x00]);
        let mut body = vec![0x30, 0x81, 0x80];
        body.extend_from_slice(&[0x02; 0x80]);
        body.extend_from_slice(&[0x30, algorithm.len() as u8]);
        body.extend_from_slice(&algorithm);
        body.extend_from_slice(&[0x03, 0x02, 0x00, 0x00]);
        let mut der = vec![0x30, 0x82, (body.len() >> 8) as u8, body.len() as u8];
        der.extend_from_slice(&body);
        der
    }

    #[test]
    fn the_channel_binding_hash_follows_the_signature() {
        let rsa = |last: u8| [0x2a, 0x86, 0x48, 0x86, 0xf7, 0x0d, 0x01, 0x01, last];
        for (oid, length) in [
            (&rsa(0x0b)[..], 32),
            (&rsa(0x05)[..], 32),
            (&rsa(0x0c)[..], 48),
            (&rsa(0x0d)[..], 64),
            (&[0x2a, 0x86, 0x48, 0xce, 0x3d, 0x04, 0x03, 0x02][..], 32),
            (&[0x2a, 0x86, 0x48, 0xce, 0x3d, 0x04, 0x03, 0x03][..], 48),
        ] {
            let der = certificate(oid);
            let hash = end_point_hash(&der).unwrap();
            assert_eq!(hash.len(), length);
            if length == 32 {
                assert_eq!(hash, sha2::Sha256::digest(&der).to_vec());
            }
        }
        // Ed25519 and RSA-PSS have no hash to take: no channel binding.
        assert_eq!(end_point_hash(&certificate(&[0x2b, 0x65, 0x70])), None);
        assert_eq!(end_point_hash(&certificate(&rsa(0x0a))), None);
        let der = certificate(&rsa(0x0b));
        assert_eq!(end_point_hash(&der[..der.len() - 1]), None);
        assert_eq!(end_point_hash(&[]), None);
    }
}
