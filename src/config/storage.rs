//! Where the bytes go (`[storage]`, `IMGCAS_STORAGE`, `IMGCAS_S3_*`): the local directory or
//! an S3 bucket, and how the bucket is reached and how long its operations may take (the
//! timeouts a silent bucket is met with, audit #3). Source buckets take what their own table
//! leaves out from here.

use std::time::Duration;

use serde::Deserialize;

use super::de_duration;

#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum StorageBackend {
    Fs,
    S3,
}

#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct StorageConfig {
    pub backend: StorageBackend,
    pub s3: S3Config,
}

#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct S3Config {
    pub bucket: Option<String>,
    pub endpoint: Option<String>,
    pub region: String,
    pub force_path_style: bool,
    /// How long a connection to the bucket may take to open (`IMGCAS_S3_CONNECT_TIMEOUT`).
    #[serde(deserialize_with = "de_duration")]
    pub connect_timeout: Duration,
    /// How long an attempt may wait for the first byte of an answer once its request is sent
    /// (`IMGCAS_S3_FIRST_BYTE_TIMEOUT`): a bucket that accepts connections and never answers.
    #[serde(deserialize_with = "de_duration")]
    pub first_byte_timeout: Duration,
    /// How long one bucket operation may take in all, its retries and its body included
    /// (`IMGCAS_S3_TIMEOUT`): past it the request answers 503 `storage_unavailable`.
    #[serde(deserialize_with = "de_duration")]
    pub timeout: Duration,
}

impl Default for StorageConfig {
    fn default() -> Self {
        StorageConfig {
            backend: StorageBackend::Fs,
            s3: S3Config::default(),
        }
    }
}

impl Default for S3Config {
    fn default() -> Self {
        S3Config {
            bucket: None,
            endpoint: None,
            region: "us-east-1".into(),
            force_path_style: false,
            connect_timeout: Duration::from_secs(2),
            first_byte_timeout: Duration::from_secs(5),
            timeout: Duration::from_secs(8),
        }
    }
}
