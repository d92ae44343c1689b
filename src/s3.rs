//! One way to make an S3 client, for everything that speaks S3: the blob store's bucket and
//! the private buckets sources are read from (`fetch/bucket.rs`). Rustls on ring, a behaviour
//! version, checksums only where required (S3-compatible stores do not all know the newer
//! ones), retries with backoff, and bounded connect, first-byte and operation times. Credentials come from
//! the standard AWS provider chain, or from the configuration for a source bucket that has its
//! own.

use std::time::Duration;

use aws_sdk_s3::config::retry::RetryConfig;
use aws_sdk_s3::config::timeout::TimeoutConfig;
use aws_sdk_s3::config::{BehaviorVersion, Credentials, Region, RequestChecksumCalculation};
use aws_sdk_s3::Client;
use aws_smithy_http_client::tls::{rustls_provider::CryptoMode, Provider};

/// Where a client connects: an endpoint (none: AWS), a region, and whether buckets go in
/// the path (most S3-compatible stores) rather than the host name.
pub struct Endpoint<'a> {
    pub url: Option<&'a str>,
    pub region: &'a str,
    pub force_path_style: bool,
    /// An access key id and its secret; `None`: the provider chain's.
    pub keys: Option<(&'a str, &'a str)>,
    /// How long a connection, an answer's first byte and a whole operation may take.
    pub timeouts: Timeouts,
}

/// The bounds of every operation on a bucket (`storage.s3.*_timeout`): a bucket that accepts
/// connections and never answers must cost a request a few seconds and a 503, not its whole
/// time limit (audit #3: 39 s in a 40 s pause, `/readyz` too).
#[derive(Debug, Clone, Copy)]
pub struct Timeouts {
    pub connect: Duration,
    pub first_byte: Duration,
    /// The whole operation, retries included. A `GetObject`'s body, read after the SDK's
    /// operation returns, is bounded by the caller with it too.
    pub operation: Duration,
}

/// A client for `endpoint`.
pub async fn client(endpoint: Endpoint<'_>) -> Client {
    let http = aws_smithy_http_client::Builder::new()
        .tls_provider(Provider::Rustls(CryptoMode::Ring))
        .build_https();
    let mut loader = aws_config::defaults(BehaviorVersion::latest())
        .region(Region::new(endpoint.region.to_string()))
        .http_client(http);
    if let Some(url) = endpoint.url {
        loader = loader.endpoint_url(url);
    }
    if let Some((id, secret)) = endpoint.keys {
        let configured = Credentials::new(id, secret, None, None, "imgcas configuration");
        loader = loader.credentials_provider(configured);
    }
    let shared = loader.load().await;
    let config = aws_sdk_s3::config::Builder::from(&shared)
        .force_path_style(endpoint.force_path_style)
        .request_checksum_calculation(RequestChecksumCalculation::WhenRequired)
        .retry_config(
            RetryConfig::standard()
                .with_max_attempts(4)
                .with_initial_backoff(Duration::from_millis(100)),
        )
        .timeout_config(
            TimeoutConfig::builder()
                .connect_timeout(endpoint.timeouts.connect)
                .read_timeout(endpoint.timeouts.first_byte)
                .operation_attempt_timeout(endpoint.timeouts.operation)
                .operation_timeout(endpoint.timeouts.operation)
                .build(),
        )
        .build();
    Client::from_conf(config)
}
