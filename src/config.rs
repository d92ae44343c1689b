//! Configuration: defaults < TOML file (`--config`) < `IMGCAS_*` environment < flags.
//!
//! Key and variable names are the SPEC's; anything not in the SPEC is marked as an extension.

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::time::Duration;

use serde::{Deserialize, Deserializer};

#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    #[error("cannot read config file {path}: {source}")]
    Read {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("config file {path}: {message}")]
    Parse { path: PathBuf, message: String },
    #[error("{name}: {message}")]
    Value { name: String, message: String },
}

fn bad(name: &str, message: impl Into<String>) -> ConfigError {
    ConfigError::Value {
        name: name.to_string(),
        message: message.into(),
    }
}

#[derive(Debug, Clone, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct Config {
    pub listen: SocketAddr,
    pub data_dir: PathBuf,
    pub storage: StorageConfig,
    pub fetch: FetchConfig,
    pub limits: LimitsConfig,
    pub security: SecurityConfig,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum StorageBackend {
    Fs,
    S3,
}

#[derive(Debug, Clone, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct StorageConfig {
    pub backend: StorageBackend,
    pub s3: S3Config,
}

#[derive(Debug, Clone, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct S3Config {
    pub bucket: Option<String>,
    pub endpoint: Option<String>,
    pub region: String,
    pub force_path_style: bool,
}

#[derive(Debug, Clone, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct FetchConfig {
    pub allow_private_networks: bool,
    pub allowed_hosts: Vec<String>,
    pub max_bytes: u64,
    #[serde(deserialize_with = "de_duration")]
    pub timeout: Duration,
    #[serde(deserialize_with = "de_duration")]
    pub revalidate_after: Duration,
    /// Extension: downloads in flight per origin host:port (`IMGCAS_FETCH_PER_HOST`), so one
    /// slow host cannot hold every download slot.
    pub per_host_concurrency: usize,
    /// Extension: downloads in flight in all (`IMGCAS_FETCH_CONCURRENCY`).
    pub concurrency: usize,
}

#[derive(Debug, Clone, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct LimitsConfig {
    pub max_pixels: u64,
    /// Extension: how many processing runs may use the CPU at once (`IMGCAS_PROCESS_CONCURRENCY`).
    /// Defaults to the number of cores.
    pub process_concurrency: usize,
    /// Extension: the longest a processing run may wait for the CPU (`IMGCAS_QUEUE_TARGET`).
    /// Work that would wait longer is refused with 503 `overloaded` instead of queued.
    #[serde(deserialize_with = "de_duration")]
    pub queue_target: Duration,
    /// Extension: bytes of recent variants kept in memory in front of the variants map
    /// (`IMGCAS_HOT_CACHE_BYTES`; 0 turns the hot cache off).
    pub hot_cache_bytes: u64,
}

#[derive(Debug, Clone, Default, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct SecurityConfig {
    /// HMAC-SHA256 keys, comma-separated: every key verifies, so a new key can be added
    /// before signers switch to it and the old one removed after.
    pub signing_key: Option<String>,
}

impl SecurityConfig {
    /// The configured signing keys (empty: signing off).
    pub fn signing_keys(&self) -> Vec<Vec<u8>> {
        self.signing_key
            .as_deref()
            .unwrap_or("")
            .split(',')
            .map(str::trim)
            .filter(|k| !k.is_empty())
            .map(|k| k.as_bytes().to_vec())
            .collect()
    }
}

impl Default for Config {
    fn default() -> Self {
        Config {
            listen: SocketAddr::from(([127, 0, 0, 1], 8080)),
            data_dir: PathBuf::from("./imgcas-data"),
            storage: StorageConfig::default(),
            fetch: FetchConfig::default(),
            limits: LimitsConfig::default(),
            security: SecurityConfig::default(),
        }
    }
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
        }
    }
}

impl Default for FetchConfig {
    fn default() -> Self {
        FetchConfig {
            allow_private_networks: false,
            allowed_hosts: Vec::new(),
            max_bytes: 32 << 20,
            timeout: Duration::from_secs(10),
            revalidate_after: Duration::from_secs(300),
            per_host_concurrency: 8,
            concurrency: 64,
        }
    }
}

impl Default for LimitsConfig {
    fn default() -> Self {
        LimitsConfig {
            max_pixels: 50_000_000,
            process_concurrency: std::thread::available_parallelism().map_or(2, |n| n.get()),
            queue_target: Duration::from_millis(500),
            hot_cache_bytes: 256 << 20,
        }
    }
}

/// `10s`, `5m`, `1h`, `250ms` or plain seconds.
pub fn parse_duration(text: &str) -> Result<Duration, String> {
    let text = text.trim();
    if let Ok(secs) = text.parse::<u64>() {
        return Ok(Duration::from_secs(secs));
    }
    humantime::parse_duration(text).map_err(|e| format!("`{text}` is not a duration ({e})"))
}

fn de_duration<'de, D: Deserializer<'de>>(d: D) -> Result<Duration, D::Error> {
    #[derive(Deserialize)]
    #[serde(untagged)]
    enum Raw {
        Secs(u64),
        Text(String),
    }
    match Raw::deserialize(d)? {
        Raw::Secs(s) => Ok(Duration::from_secs(s)),
        Raw::Text(t) => parse_duration(&t).map_err(serde::de::Error::custom),
    }
}

fn parse_bool(name: &str, v: &str) -> Result<bool, ConfigError> {
    match v.trim().to_ascii_lowercase().as_str() {
        "1" | "true" | "yes" | "on" => Ok(true),
        "0" | "false" | "no" | "off" | "" => Ok(false),
        _ => Err(bad(name, format!("`{v}` is not a boolean"))),
    }
}

fn parse_num<T: std::str::FromStr>(name: &str, v: &str) -> Result<T, ConfigError> {
    v.trim()
        .replace('_', "")
        .parse()
        .map_err(|_| bad(name, format!("`{v}` is not a number")))
}

impl Config {
    pub fn from_file(path: &Path) -> Result<Config, ConfigError> {
        let text = std::fs::read_to_string(path).map_err(|source| ConfigError::Read {
            path: path.to_path_buf(),
            source,
        })?;
        toml::from_str(&text).map_err(|e| ConfigError::Parse {
            path: path.to_path_buf(),
            message: e.to_string(),
        })
    }

    /// Applies the `IMGCAS_*` variables found by `var` (the process environment in the binary).
    pub fn apply_env(&mut self, var: impl Fn(&str) -> Option<String>) -> Result<(), ConfigError> {
        let get = |name: &str| var(name).filter(|v| !v.is_empty());
        if let Some(v) = get("IMGCAS_LISTEN") {
            self.listen = v
                .parse()
                .map_err(|_| bad("IMGCAS_LISTEN", format!("`{v}` is not an address:port")))?;
        }
        if let Some(v) = get("IMGCAS_DATA_DIR") {
            self.data_dir = PathBuf::from(v);
        }
        if let Some(v) = get("IMGCAS_STORAGE") {
            self.storage.backend = match v.as_str() {
                "fs" => StorageBackend::Fs,
                "s3" => StorageBackend::S3,
                _ => return Err(bad("IMGCAS_STORAGE", "must be `fs` or `s3`")),
            };
        }
        if let Some(v) = get("IMGCAS_S3_BUCKET") {
            self.storage.s3.bucket = Some(v);
        }
        if let Some(v) = get("IMGCAS_S3_ENDPOINT") {
            self.storage.s3.endpoint = Some(v);
        }
        if let Some(v) = get("IMGCAS_S3_REGION") {
            self.storage.s3.region = v;
        }
        if let Some(v) = get("IMGCAS_S3_FORCE_PATH_STYLE") {
            self.storage.s3.force_path_style = parse_bool("IMGCAS_S3_FORCE_PATH_STYLE", &v)?;
        }
        if let Some(v) = get("IMGCAS_ALLOW_PRIVATE_NETWORKS") {
            self.fetch.allow_private_networks = parse_bool("IMGCAS_ALLOW_PRIVATE_NETWORKS", &v)?;
        }
        if let Some(v) = get("IMGCAS_ALLOWED_HOSTS") {
            self.fetch.allowed_hosts = v
                .split(',')
                .map(|h| h.trim().to_ascii_lowercase())
                .filter(|h| !h.is_empty())
                .collect();
        }
        if let Some(v) = get("IMGCAS_MAX_SOURCE_BYTES") {
            self.fetch.max_bytes = parse_num("IMGCAS_MAX_SOURCE_BYTES", &v)?;
        }
        if let Some(v) = get("IMGCAS_FETCH_TIMEOUT") {
            self.fetch.timeout = parse_duration(&v).map_err(|m| bad("IMGCAS_FETCH_TIMEOUT", m))?;
        }
        if let Some(v) = get("IMGCAS_REVALIDATE_AFTER") {
            self.fetch.revalidate_after =
                parse_duration(&v).map_err(|m| bad("IMGCAS_REVALIDATE_AFTER", m))?;
        }
        if let Some(v) = get("IMGCAS_MAX_PIXELS") {
            self.limits.max_pixels = parse_num("IMGCAS_MAX_PIXELS", &v)?;
        }
        if let Some(v) = get("IMGCAS_PROCESS_CONCURRENCY") {
            self.limits.process_concurrency = parse_num("IMGCAS_PROCESS_CONCURRENCY", &v)?;
        }
        if let Some(v) = get("IMGCAS_QUEUE_TARGET") {
            self.limits.queue_target =
                parse_duration(&v).map_err(|m| bad("IMGCAS_QUEUE_TARGET", m))?;
        }
        if let Some(v) = get("IMGCAS_HOT_CACHE_BYTES") {
            self.limits.hot_cache_bytes = parse_num("IMGCAS_HOT_CACHE_BYTES", &v)?;
        }
        if let Some(v) = get("IMGCAS_FETCH_PER_HOST") {
            self.fetch.per_host_concurrency = parse_num("IMGCAS_FETCH_PER_HOST", &v)?;
        }
        if let Some(v) = get("IMGCAS_FETCH_CONCURRENCY") {
            self.fetch.concurrency = parse_num("IMGCAS_FETCH_CONCURRENCY", &v)?;
        }
        if let Some(v) = get("IMGCAS_SIGNING_KEY") {
            self.security.signing_key = Some(v);
        }
        Ok(())
    }

    /// Checks what serde cannot: ranges and combinations.
    pub fn validate(&self) -> Result<(), ConfigError> {
        if self.fetch.max_bytes == 0 {
            return Err(bad("fetch.max_bytes", "must be above 0"));
        }
        if self.fetch.timeout.is_zero() {
            return Err(bad("fetch.timeout", "must be above 0"));
        }
        if self.limits.max_pixels == 0 {
            return Err(bad("limits.max_pixels", "must be above 0"));
        }
        if self.limits.process_concurrency == 0 {
            return Err(bad("limits.process_concurrency", "must be above 0"));
        }
        if self.limits.queue_target.is_zero() {
            return Err(bad("limits.queue_target", "must be above 0"));
        }
        if self.fetch.per_host_concurrency == 0 || self.fetch.concurrency == 0 {
            return Err(bad("fetch.concurrency", "download limits must be above 0"));
        }
        let keys = self.security.signing_keys();
        if self.security.signing_key.is_some() && keys.is_empty() {
            return Err(bad("security.signing_key", "is set but holds no key"));
        }
        if keys.iter().any(|k| k.len() < 16) {
            return Err(bad(
                "security.signing_key",
                "each key must be at least 16 bytes (e.g. `openssl rand -hex 32`)",
            ));
        }
        let no_bucket = self.storage.s3.bucket.as_deref().is_none_or(str::is_empty);
        if self.storage.backend == StorageBackend::S3 && no_bucket {
            return Err(bad(
                "storage.s3.bucket",
                "the s3 backend needs a bucket (IMGCAS_S3_BUCKET)",
            ));
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::HashMap;

    #[test]
    fn layers_apply_in_order() {
        let file: Config = toml::from_str(
            r#"
            listen = "127.0.0.1:9000"
            [fetch]
            timeout = "5s"
            revalidate_after = 60
            max_bytes = 1000
            "#,
        )
        .unwrap();
        assert_eq!(file.fetch.timeout, Duration::from_secs(5));
        assert_eq!(file.fetch.revalidate_after, Duration::from_secs(60));
        assert_eq!(
            file.limits.max_pixels, 50_000_000,
            "untouched keys keep defaults"
        );
        let mut cfg = file;
        let env: HashMap<&str, &str> = [
            ("IMGCAS_FETCH_TIMEOUT", "2m"),
            ("IMGCAS_ALLOW_PRIVATE_NETWORKS", "true"),
            ("IMGCAS_ALLOWED_HOSTS", "a.example, B.example"),
            ("IMGCAS_MAX_PIXELS", "1_000"),
        ]
        .into();
        cfg.apply_env(|k| env.get(k).map(|v| v.to_string()))
            .unwrap();
        assert_eq!(cfg.fetch.timeout, Duration::from_secs(120));
        assert!(cfg.fetch.allow_private_networks);
        assert_eq!(cfg.fetch.allowed_hosts, vec!["a.example", "b.example"]);
        assert_eq!(cfg.limits.max_pixels, 1000);
        assert_eq!(cfg.listen.port(), 9000);
    }

    #[test]
    fn bad_values_are_named() {
        let mut cfg = Config::default();
        let err = cfg
            .apply_env(|k| (k == "IMGCAS_FETCH_TIMEOUT").then(|| "soon".to_string()))
            .unwrap_err();
        assert!(err.to_string().starts_with("IMGCAS_FETCH_TIMEOUT"));
        assert!(toml::from_str::<Config>("nonsense = 1").is_err());
    }
}
