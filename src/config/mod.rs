//! Configuration: defaults < TOML file (`--config`) < `IMGCAS_*` environment < flags, applied
//! in one place, [`Config::load`], and validated there for every command.
//!
//! Key and variable names are docs/configuration.md's; fields added after v1.0 (CHANGELOG.md)
//! are marked as extensions.
//! Each variable is one row of [`ENVIRONMENT`], next to the key it sets.

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::time::Duration;

use serde::{Deserialize, Deserializer};

mod env;
mod fetch;
mod formats;
mod limits;
pub mod maps;
pub mod moderation;
mod peers;
mod presets;
mod quality;
mod sources;
mod storage;
pub mod tenants;
pub mod tokens;
pub use env::{EnvVar, ENVIRONMENT};
pub use fetch::FetchConfig;
pub use formats::FormatsConfig;
pub use limits::{machine_memory, LimitsConfig};
pub use peers::{FallbackConfig, FallbackSource, ImgproxyConfig, KeyAndSalt, ThumborConfig};
pub use presets::{option_pairs, NamedFallback, Preset, Structured, Watermark, PRESET_FALLBACK};
pub use quality::{QualityConfig, QualityDefault};
pub use sources::SourceBucket;
pub use storage::{S3Config, StorageBackend, StorageConfig};
pub use tenants::{budget_of, TenantBudget, Tenants};

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

#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct Config {
    pub listen: SocketAddr,
    pub data_dir: PathBuf,
    pub storage: StorageConfig,
    pub maps: MapsConfig,
    pub cluster: ClusterConfig,
    pub maintenance: MaintenanceConfig,
    pub dedup: DedupConfig,
    pub quality: QualityConfig,
    pub formats: FormatsConfig,
    pub fetch: FetchConfig,
    pub limits: LimitsConfig,
    pub security: SecurityConfig,
    pub moderation: moderation::ModerationConfig,
    pub server: ServerConfig,
    pub fallback: FallbackConfig,
    pub imgproxy: ImgproxyConfig,
    pub thumbor: ThumborConfig,
    /// Named option sets (`[presets]`, `thumb = "w=200&h=200&fit=cover"`): `preset=thumb` in a
    /// request stands for those options. A preset may name a fallback image of its own
    /// (`fallback=<sha256 or path>` among its options).
    pub presets: BTreeMap<String, String>,
    /// Named watermarks (`[watermarks]`, `logo = "hash=<sha256>&position=southeast"`): `wm=logo`
    /// in a request draws that stored original over the output (see
    /// [`imgcas_processors::Placement`] for the settings).
    pub watermarks: BTreeMap<String, String>,
    /// Tenant budgets (`[tenants.<name>]` with `rate` and `burst`, `IMGCAS_TENANTS`): what
    /// a tenant's runs and downloads may spend over time, in cost units (`tenants.rs`).
    pub tenants: Tenants,
}

/// Where the three maps live (Debug hides the password: `maps.rs`).
#[derive(Clone, Default, PartialEq, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct MapsConfig {
    /// `postgres://…` or libpq's `key=value` words (`IMGCAS_MAPS_URL`): the maps on PostgreSQL,
    /// shared by every node that names the same database. Unset: the embedded redb file.
    pub url: Option<String>,
    /// Connections a node keeps to shared maps at most (`IMGCAS_MAPS_POOL_SIZE`; unset: 16).
    pub pool_size: Option<usize>,
    /// A file holding the PostgreSQL password, used when the URL names none
    /// (`IMGCAS_MAPS_PASSWORD_FILE`).
    pub password_file: Option<PathBuf>,
    /// Bytes of the embedded maps' page cache (`IMGCAS_MAPS_CACHE_BYTES`; unset: 64 MiB).
    /// redb's own default, 1 GiB, filled as the file grew and never shrank.
    pub cache_bytes: Option<usize>,
    /// Bytes of map entries a node remembers, per kind (`IMGCAS_MAPS_ENTRIES_CACHE_BYTES`;
    /// unset: 32 MiB): URL entries and originals entries each, and on PostgreSQL each again
    /// as last seen (answered while the database does not answer). Bounded by what they hold,
    /// not by how many: a bulk migration of millions of originals runs in the same memory.
    pub entries_cache_bytes: Option<usize>,
}

/// What the maintenance commands spare.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct MaintenanceConfig {
    /// `gc` never deletes bytes written less than this long ago (`IMGCAS_GC_GRACE`): a writer
    /// that stored them may not have written the row that points at them yet.
    #[serde(deserialize_with = "de_duration")]
    pub gc_grace: Duration,
    /// Rows a second a long walk over the store handles at most
    /// (`IMGCAS_WALK_ROWS_PER_SECOND`; 0: no limit): the backfills' pace.
    pub walk_rows_per_second: u64,
}

impl Default for MaintenanceConfig {
    fn default() -> Self {
        MaintenanceConfig {
            gc_grace: Duration::from_secs(3600),
            walk_rows_per_second: 1000,
        }
    }
}

/// What near-duplicates (the same picture in other bytes) do.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum NearDedup {
    /// No fingerprints are computed, nothing is reported.
    Off,
    /// Fingerprints are kept and near-duplicates reported; every original serves its own
    /// pixels.
    Report,
    /// As `report`, and a URL whose bytes are a near-duplicate of a larger or equal original
    /// (within `dedup.radius` and the guards) is served from that original.
    Canonical,
}

/// Near-duplicate detection.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct DedupConfig {
    /// `IMGCAS_NEAR_DEDUP`: `off`, `report` (default) or `canonical`.
    pub near: NearDedup,
    /// Bits of the 64-bit DCT hash within which a near-duplicate is reported
    /// (`IMGCAS_NEAR_DEDUP_REPORT_RADIUS`).
    pub report_radius: u32,
    /// Bits within which canonical mode merges (`IMGCAS_NEAR_DEDUP_RADIUS`).
    pub radius: u32,
}

impl Default for DedupConfig {
    fn default() -> Self {
        DedupConfig {
            near: NearDedup::Report,
            report_radius: 8,
            radius: 4,
        }
    }
}

/// How nodes that share the maps share their work.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct ClusterConfig {
    /// This node's name in claims, logs and metrics (`IMGCAS_NODE_ID`); unset: host name and
    /// process id.
    pub node_id: Option<String>,
    /// How long a claim on a download or a processing run lasts unless its owner renews it
    /// (`IMGCAS_CLAIM_TTL`): the longest other nodes wait for a node that died mid-job.
    #[serde(deserialize_with = "de_duration")]
    pub claim_ttl: Duration,
}

impl Default for ClusterConfig {
    fn default() -> Self {
        ClusterConfig {
            node_id: None,
            claim_ttl: Duration::from_secs(10),
        }
    }
}

impl ClusterConfig {
    /// The configured node name, or `<host name>-<pid>`.
    pub fn node_id(&self) -> String {
        if let Some(id) = self.node_id.as_deref().filter(|id| !id.is_empty()) {
            return id.to_string();
        }
        let host = std::fs::read_to_string("/proc/sys/kernel/hostname")
            .ok()
            .or_else(|| std::env::var("HOSTNAME").ok())
            .map(|h| h.trim().to_string())
            .filter(|h| !h.is_empty())
            .unwrap_or_else(|| "imgcas".into());
        format!("{host}-{}", std::process::id())
    }
}

/// How the server protects itself from slow, idle and numerous clients.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct ServerConfig {
    /// The longest a client may take to send a request's headers (`IMGCAS_HEADER_TIMEOUT`).
    #[serde(deserialize_with = "de_duration")]
    pub header_timeout: Duration,
    /// The longest a request may take, body and answer included (`IMGCAS_REQUEST_TIMEOUT`);
    /// not applied to `/v1/ingest`, whose batches may take minutes.
    #[serde(deserialize_with = "de_duration")]
    pub request_timeout: Duration,
    /// Connections served at once (`IMGCAS_MAX_CONNECTIONS`); more wait in the listen backlog.
    pub max_connections: usize,
    /// How long shutdown waits for in-flight requests (`IMGCAS_SHUTDOWN_TIMEOUT`).
    #[serde(deserialize_with = "de_duration")]
    pub shutdown_timeout: Duration,
    /// Uploads (`POST /v1/originals`) receiving their bodies at once
    /// (`IMGCAS_MAX_CONCURRENT_UPLOADS`); more are refused with 503 `overloaded`.
    pub max_concurrent_uploads: usize,
    /// Bytes per second an upload must average after its first 10 s (`IMGCAS_MIN_UPLOAD_RATE`).
    pub min_upload_rate: u64,
    /// Whether `GET /admin`, the operator's page, is served (`IMGCAS_ADMIN_PAGE`).
    pub admin_page: bool,
    /// How often the page's history takes a sample of this node's counters
    /// (`IMGCAS_ADMIN_SAMPLE_EVERY`): the last hour is kept at this step, the last day at
    /// thirty times it.
    #[serde(deserialize_with = "de_duration")]
    pub admin_sample_every: Duration,
    /// The proxies whose `X-Forwarded-For` names the client (`IMGCAS_TRUSTED_PROXIES`:
    /// addresses or networks, `10.0.0.0/8,::1`); from any other peer the header is ignored.
    /// The client's address is what an anonymous request's budget is kept by.
    #[serde(deserialize_with = "de_networks")]
    pub trusted_proxies: Vec<ipnet::IpNet>,
}

impl Default for ServerConfig {
    fn default() -> Self {
        ServerConfig {
            header_timeout: Duration::from_secs(10),
            request_timeout: Duration::from_secs(60),
            max_connections: 10_000,
            shutdown_timeout: Duration::from_secs(30),
            max_concurrent_uploads: 16,
            min_upload_rate: 64 << 10,
            admin_page: true,
            admin_sample_every: Duration::from_secs(10),
            trusted_proxies: Vec::new(),
        }
    }
}

#[derive(Debug, Clone, Default, PartialEq, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct SecurityConfig {
    /// HMAC-SHA256 keys, comma-separated: every key verifies, so a new key can be added
    /// before signers switch to it and the old one removed after.
    pub signing_key: Option<String>,
    /// Requests may name a preset and nothing else (besides `url` and `sig`).
    pub only_presets: bool,
    /// When set, uploads, ingest and `/metrics` need `Authorization: Bearer <token>`.
    pub admin_token: Option<String>,
    /// Named tokens (`[security.tokens]`, `merchant-a = "<token>"` or
    /// `moderator = { token = "<token>", scopes = ["moderate"] }`): each opens what its scopes
    /// allow (`upload,ingest` unless it names them), and names its requests' tenant in
    /// admission.
    pub tokens: BTreeMap<String, tokens::NamedToken>,
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
            maps: MapsConfig::default(),
            cluster: ClusterConfig::default(),
            maintenance: MaintenanceConfig::default(),
            dedup: DedupConfig::default(),
            quality: QualityConfig::default(),
            formats: FormatsConfig::default(),
            fetch: FetchConfig::default(),
            limits: LimitsConfig::default(),
            security: SecurityConfig::default(),
            moderation: moderation::ModerationConfig::default(),
            server: ServerConfig::default(),
            fallback: FallbackConfig::default(),
            imgproxy: ImgproxyConfig::default(),
            thumbor: ThumborConfig::default(),
            presets: BTreeMap::new(),
            watermarks: BTreeMap::new(),
            tenants: Tenants::new(),
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

/// `10.0.0.0/8,192.168.1.7,::1`: networks, or addresses standing for themselves.
pub fn parse_networks(text: &str) -> Result<Vec<ipnet::IpNet>, String> {
    text.split(',')
        .map(str::trim)
        .filter(|t| !t.is_empty())
        .map(|t| {
            t.parse::<ipnet::IpNet>()
                .or_else(|_| t.parse::<std::net::IpAddr>().map(ipnet::IpNet::from))
                .map_err(|_| format!("`{t}` is not an address or a network"))
        })
        .collect()
}

fn de_networks<'de, D: Deserializer<'de>>(d: D) -> Result<Vec<ipnet::IpNet>, D::Error> {
    #[derive(Deserialize)]
    #[serde(untagged)]
    enum Raw {
        List(Vec<String>),
        Text(String),
    }
    let text = match Raw::deserialize(d)? {
        Raw::List(items) => items.join(","),
        Raw::Text(t) => t,
    };
    parse_networks(&text).map_err(serde::de::Error::custom)
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

/// The settings a command line may give (the last and strongest layer).
#[derive(Debug, Clone, Default)]
pub struct Flags {
    pub listen: Option<SocketAddr>,
    pub data_dir: Option<PathBuf>,
    /// Only ever turns the setting on.
    pub allow_private_networks: bool,
}

impl Flags {
    fn apply(&self, config: &mut Config) {
        if let Some(listen) = self.listen {
            config.listen = listen;
        }
        if let Some(dir) = &self.data_dir {
            config.data_dir = dir.clone();
        }
        if self.allow_private_networks {
            config.fetch.allow_private_networks = true;
        }
    }
}

/// The map store a configuration names. The one place the rule is written: by the scheme of
/// `maps.url`, unset being the embedded redb file under the data dir. Validation, the
/// commands and `maps::open` all ask this.
#[derive(Clone, PartialEq, Eq)]
pub enum MapsBackend {
    /// redb under `data_dir`.
    Embedded,
    /// redb under another directory: `redb://<dir>` (`redb:///srv/imgcas`), what
    /// `maps copy --to` names to move maps into a node's data dir.
    EmbeddedAt(PathBuf),
    /// PostgreSQL at this URL, shared by every node that names it.
    Postgres(String),
}

impl MapsBackend {
    /// The backend a maps URL names (`None`: the embedded default), or why it names none.
    pub fn of(url: Option<&str>) -> Result<MapsBackend, String> {
        match url {
            None => Ok(MapsBackend::Embedded),
            Some(url) if maps::names_postgres(url) => Ok(MapsBackend::Postgres(url.to_string())),
            Some(url) => match url.strip_prefix("redb://") {
                Some(dir) if !dir.is_empty() => Ok(MapsBackend::EmbeddedAt(PathBuf::from(dir))),
                _ => Err(
                    "must be a postgres:// URL or libpq's key=value words, a redb://<directory>, \
                     or unset for the embedded maps under the data dir"
                        .into(),
                ),
            },
        }
    }

    /// The directory of embedded maps (`data_dir` for the default); `None` for shared maps.
    pub fn embedded_dir<'a>(&'a self, data_dir: &'a Path) -> Option<&'a Path> {
        match self {
            MapsBackend::Embedded => Some(data_dir),
            MapsBackend::EmbeddedAt(dir) => Some(dir),
            MapsBackend::Postgres(_) => None,
        }
    }
}

impl Config {
    /// The map store this configuration names ([`MapsBackend::of`] on `maps.url`).
    pub fn maps_backend(&self) -> Result<MapsBackend, ConfigError> {
        MapsBackend::of(self.maps.url.as_deref()).map_err(|m| bad("maps.url", m))
    }

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
        for row in ENVIRONMENT {
            if let Some(value) = var(row.var).filter(|v| !v.is_empty()) {
                (row.apply)(self, &value).map_err(|m| bad(row.var, m))?;
            }
        }
        Ok(())
    }

    /// The one way a command gets its configuration: defaults, then the file, then the
    /// environment (`env` looks a variable up), then the flags; validated.
    pub fn load(
        file: Option<&Path>,
        env: impl Fn(&str) -> Option<String>,
        flags: &Flags,
    ) -> Result<Config, ConfigError> {
        let mut config = match file {
            Some(path) => Config::from_file(path)?,
            None => Config::default(),
        };
        config.apply_env(env)?;
        flags.apply(&mut config);
        config.validate()?;
        Ok(config)
    }

    /// Checks what serde cannot, ranges and combinations, and types the structured settings
    /// (presets, watermarks, fallback image, imgproxy's keys): what the service runs with.
    pub fn validate(&self) -> Result<Structured, ConfigError> {
        if self.fetch.max_bytes == 0 {
            return Err(bad("fetch.max_bytes", "must be above 0"));
        }
        if self.fetch.timeout.is_zero() {
            return Err(bad("fetch.timeout", "must be above 0"));
        }
        if self.limits.max_pixels == 0 {
            return Err(bad("limits.max_pixels", "must be above 0"));
        }
        if self.limits.max_frames == 0 {
            return Err(bad("limits.max_frames", "must be above 0"));
        }
        if self.limits.process_concurrency == 0 {
            return Err(bad("limits.process_concurrency", "must be above 0"));
        }
        if self.limits.queue_target.is_zero() {
            return Err(bad("limits.queue_target", "must be above 0"));
        }
        if self.limits.max_memory < 64 << 20 {
            return Err(bad("limits.max_memory", "must be 64 MiB or more"));
        }
        if self.limits.max_budget_wait < Duration::from_secs(1) {
            return Err(bad("limits.max_budget_wait", "must be 1 s or more"));
        }
        if self.fetch.forget_after.is_zero() {
            return Err(bad("fetch.forget_after", "must be above 0"));
        }
        if self.limits.variants_max_bytes == 0 {
            return Err(bad("limits.variants_max_bytes", "must be above 0"));
        }
        if self.fetch.per_host_concurrency == 0 || self.fetch.concurrency == 0 {
            return Err(bad("fetch.concurrency", "download limits must be above 0"));
        }
        if !(self.fetch.per_host_rate.is_finite() && self.fetch.per_host_rate > 0.0) {
            return Err(bad("fetch.per_host_rate", "must be a number above 0"));
        }
        let share = self.fetch.origin_share;
        if !(share.is_finite() && share > 0.0 && share <= 1.0) {
            return Err(bad(
                "fetch.origin_share",
                "must be a fraction above 0 and at most 1",
            ));
        }
        for (name, budget) in &self.tenants {
            tenants::check(name, budget).map_err(|why| bad("tenants", why))?;
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
        if self.server.header_timeout.is_zero() || self.server.request_timeout.is_zero() {
            return Err(bad(
                "server.header_timeout",
                "server timeouts must be above 0",
            ));
        }
        let s3 = &self.storage.s3;
        if [s3.connect_timeout, s3.first_byte_timeout, s3.timeout]
            .iter()
            .any(Duration::is_zero)
        {
            return Err(bad(
                "storage.s3.timeout",
                "the bucket's timeouts must be above 0",
            ));
        }
        if self.server.admin_sample_every < Duration::from_millis(100) {
            return Err(bad(
                "server.admin_sample_every",
                "must be at least 100ms (the history holds 360 samples)",
            ));
        }
        if self.server.max_connections == 0 || self.server.max_concurrent_uploads == 0 {
            return Err(bad(
                "server.max_connections",
                "connection and upload limits must be above 0",
            ));
        }
        tokens::check(&self.security.tokens, self.security.admin_token.as_deref())
            .map_err(|(key, why)| bad(&key, why))?;
        self.moderation
            .check()
            .map_err(|(key, why)| bad(key, why))?;
        let structured = Structured::of(self)?;
        for (name, bucket) in &self.fetch.buckets {
            bucket
                .check()
                .map_err(|m| bad(&format!("fetch.buckets.{name}"), m))?;
        }
        if !(1..=32).contains(&self.imgproxy.signature_size) {
            return Err(bad(
                "imgproxy.signature_size",
                "must be from 1 to 32 (bytes)",
            ));
        }
        if !(200..=599).contains(&self.fallback.status) {
            return Err(bad(
                "fallback.status",
                "must be an HTTP status from 200 to 599",
            ));
        }
        if self.security.only_presets && self.presets.is_empty() {
            return Err(bad(
                "security.only_presets",
                "is on but no preset is defined, so every image request would be refused",
            ));
        }
        self.quality.check().map_err(|(key, m)| bad(key, m))?;
        if self.dedup.report_radius > 16 {
            return Err(bad(
                "dedup.report_radius",
                "must be at most 16 (bits of 64)",
            ));
        }
        if self.dedup.radius > self.dedup.report_radius {
            return Err(bad(
                "dedup.radius",
                "must not exceed dedup.report_radius (what merges is also reported)",
            ));
        }
        if self.cluster.claim_ttl < Duration::from_millis(300) {
            return Err(bad(
                "cluster.claim_ttl",
                "must be at least 300ms (owners renew at a third of it)",
            ));
        }
        maps::check(&self.maps).map_err(|m| bad("maps.password_file", m))?;
        let maps = self.maps_backend()?;
        if let MapsBackend::Postgres(_) = maps {
            if self.storage.backend != StorageBackend::S3 {
                return Err(bad(
                    "maps.url",
                    "PostgreSQL maps need the S3 blob store (IMGCAS_STORAGE=s3): the nodes \
                     that share the maps must share one bucket, not each a local directory",
                ));
            }
        }
        let no_bucket = self.storage.s3.bucket.as_deref().is_none_or(str::is_empty);
        if self.storage.backend == StorageBackend::S3 && no_bucket {
            return Err(bad(
                "storage.s3.bucket",
                "the s3 backend needs a bucket (IMGCAS_S3_BUCKET)",
            ));
        }
        Ok(structured)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// docs/configuration.md's table and [`ENVIRONMENT`] name the same settings: each row of
    /// one is a row of the other, key and variable together.
    #[test]
    fn the_configuration_page_lists_every_setting_and_no_other() {
        let page = include_str!("../../docs/configuration.md");
        let documented: std::collections::BTreeSet<(String, String)> = page
            .lines()
            .filter(|l| l.starts_with("| `"))
            .map(|l| {
                let cells: Vec<&str> = l.split('|').map(str::trim).collect();
                let name = |cell: &str| cell.split('`').nth(1).unwrap_or_default().to_string();
                (name(cells[1]), name(cells[2]))
            })
            .collect();
        let read: std::collections::BTreeSet<(String, String)> = ENVIRONMENT
            .iter()
            .map(|row| (row.key.to_string(), row.var.to_string()))
            .collect();
        let missing: Vec<_> = read.difference(&documented).collect();
        let extra: Vec<_> = documented.difference(&read).collect();
        assert!(
            missing.is_empty() && extra.is_empty(),
            "not on docs/configuration.md: {missing:?}; on it but not read: {extra:?}"
        );
    }
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
            ("IMGCAS_MAX_FRAMES", "20"),
        ]
        .into();
        cfg.apply_env(|k| env.get(k).map(|v| v.to_string()))
            .unwrap();
        assert_eq!(cfg.fetch.timeout, Duration::from_secs(120));
        assert!(cfg.fetch.allow_private_networks);
        assert_eq!(cfg.fetch.allowed_hosts, vec!["a.example", "b.example"]);
        assert_eq!(cfg.limits.max_pixels, 1000);
        assert_eq!(cfg.limits.max_frames, 20);
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

    /// Each key set once from the file and once from its variable gives the same config, and
    /// not the default one: the table and the file agree on every name.
    #[test]
    fn every_key_reads_the_same_from_the_file_and_the_environment() {
        // variable → (the file's TOML value, the variable's text)
        let samples: HashMap<&str, (&str, &str)> = [
            ("IMGCAS_LISTEN", (r#""127.0.0.1:9123""#, "127.0.0.1:9123")),
            ("IMGCAS_DATA_DIR", (r#""/srv/imgcas""#, "/srv/imgcas")),
            ("IMGCAS_STORAGE", (r#""s3""#, "s3")),
            ("IMGCAS_S3_BUCKET", (r#""pics""#, "pics")),
            (
                "IMGCAS_S3_ENDPOINT",
                (r#""http://127.0.0.1:9000""#, "http://127.0.0.1:9000"),
            ),
            ("IMGCAS_S3_REGION", (r#""eu-west-3""#, "eu-west-3")),
            ("IMGCAS_S3_FORCE_PATH_STYLE", ("true", "true")),
            ("IMGCAS_NODE_ID", (r#""node-a""#, "node-a")),
            ("IMGCAS_CLAIM_TTL", (r#""3s""#, "3")),
            ("IMGCAS_GC_GRACE", (r#""10m""#, "600")),
            ("IMGCAS_WALK_ROWS_PER_SECOND", ("250", "250")),
            ("IMGCAS_NEAR_DEDUP", (r#""canonical""#, "canonical")),
            ("IMGCAS_NEAR_DEDUP_REPORT_RADIUS", ("10", "10")),
            ("IMGCAS_NEAR_DEDUP_RADIUS", ("3", "3")),
            ("IMGCAS_MAPS_POOL_SIZE", ("8", "8")),
            (
                "IMGCAS_MAPS_URL",
                (
                    r#""postgres://imgcas@127.0.0.1/imgcas""#,
                    "postgres://imgcas@127.0.0.1/imgcas",
                ),
            ),
            (
                "IMGCAS_MAPS_PASSWORD_FILE",
                (r#""/run/secrets/imgcas-db""#, "/run/secrets/imgcas-db"),
            ),
            ("IMGCAS_ALLOW_PRIVATE_NETWORKS", ("true", "yes")),
            (
                "IMGCAS_ALLOWED_HOSTS",
                (r#"["a.example", "b.example"]"#, "a.example,B.example"),
            ),
            ("IMGCAS_MAX_SOURCE_BYTES", ("1000", "1_000")),
            ("IMGCAS_FETCH_TIMEOUT", (r#""2m""#, "120")),
            ("IMGCAS_REVALIDATE_AFTER", ("60", "1m")),
            ("IMGCAS_FETCH_PER_HOST", ("3", "3")),
            ("IMGCAS_FETCH_CONCURRENCY", ("5", "5")),
            ("IMGCAS_FETCH_ORIGIN_SHARE", ("0.25", "0.25")),
            ("IMGCAS_FETCH_MIN_RATE", ("4_096", "4096")),
            ("IMGCAS_FORGET_AFTER", (r#""7d""#, "7days")),
            ("IMGCAS_VARIANTS_MAX_BYTES", ("1000000", "1_000_000")),
            ("IMGCAS_URLS_MAX_BYTES", ("2000000", "2_000_000")),
            ("IMGCAS_MAX_PIXELS", ("1000", "1000")),
            ("IMGCAS_MAX_FRAMES", ("40", "40")),
            ("IMGCAS_MAX_BUDGET_WAIT", (r#""30s""#, "30")),
            ("IMGCAS_MAX_MEMORY", ("3000000000", "3_000_000_000")),
            (
                "IMGCAS_TRUSTED_PROXIES",
                (r#"["10.0.0.0/8", "::1"]"#, "10.0.0.0/8, ::1"),
            ),
            ("IMGCAS_PROCESS_CONCURRENCY", ("7", "7")),
            ("IMGCAS_QUEUE_TARGET", (r#""250ms""#, "250ms")),
            ("IMGCAS_HOT_CACHE_BYTES", ("0", "0")),
            ("IMGCAS_DECODE_CACHE_BYTES", ("1048576", "1048576")),
            ("IMGCAS_MEZZANINE", ("false", "0")),
            ("IMGCAS_MAX_URL_BYTES", ("16384", "16_384")),
            ("IMGCAS_MAX_COST", ("2000000000", "2_000_000_000")),
            (
                "IMGCAS_SIGNING_KEY",
                (r#""0123456789abcdef""#, "0123456789abcdef"),
            ),
            ("IMGCAS_ONLY_PRESETS", ("true", "1")),
            ("IMGCAS_HEADER_TIMEOUT", (r#""3s""#, "3")),
            ("IMGCAS_REQUEST_TIMEOUT", ("90", "90s")),
            ("IMGCAS_MAX_CONNECTIONS", ("500", "500")),
            ("IMGCAS_SHUTDOWN_TIMEOUT", (r#""5s""#, "5s")),
            ("IMGCAS_BACKGROUND_QUEUE", ("64", "64")),
            ("IMGCAS_ALLOCATOR_ARENAS", ("4", "4")),
            ("IMGCAS_MAPS_CACHE_BYTES", ("1048576", "1048576")),
            ("IMGCAS_MAPS_ENTRIES_CACHE_BYTES", ("2_097_152", "2097152")),
            ("IMGCAS_S3_CONNECT_TIMEOUT", (r#""1s""#, "1s")),
            ("IMGCAS_S3_FIRST_BYTE_TIMEOUT", (r#""3s""#, "3s")),
            ("IMGCAS_S3_TIMEOUT", (r#""6s""#, "6")),
            ("IMGCAS_MAX_CONCURRENT_UPLOADS", ("4", "4")),
            ("IMGCAS_MIN_UPLOAD_RATE", ("1024", "1024")),
            ("IMGCAS_ADMIN_PAGE", ("false", "off")),
            ("IMGCAS_ADMIN_SAMPLE_EVERY", (r#""2s""#, "2s")),
            (
                "IMGCAS_ADMIN_TOKEN",
                (r#""0123456789abcdef""#, "0123456789abcdef"),
            ),
            (
                "IMGCAS_TOKENS",
                (
                    r#"{ merchant-a = "aaaaaaaaaaaaaaaa1", merchant-b = "bbbbbbbbbbbbbbbb2", moderator = { token = "cccccccccccccccc3", scopes = ["moderate", "metrics"] } }"#,
                    "merchant-a=aaaaaaaaaaaaaaaa1; merchant-b=bbbbbbbbbbbbbbbb2; moderator=cccccccccccccccc3&scopes=moderate,metrics",
                ),
            ),
            (
                "IMGCAS_VALIDATION_URL",
                (
                    r#""http://moderation.internal/check""#,
                    "http://moderation.internal/check",
                ),
            ),
            ("IMGCAS_VALIDATION_ON_ERROR", (r#""open""#, "open")),
            ("IMGCAS_VALIDATION_TIMEOUT", (r#""3s""#, "3s")),
            ("IMGCAS_BLOCKLIST_RADIUS", ("6", "6")),
            ("IMGCAS_QUALITY_DEFAULT", (r#""auto:eco""#, "auto:eco")),
            ("IMGCAS_QUALITY_TARGET_BEST", ("85", "85")),
            ("IMGCAS_QUALITY_TARGET_GOOD", ("72", "72")),
            ("IMGCAS_QUALITY_TARGET_ECO", ("61", "61")),
            ("IMGCAS_QUALITY_TARGET_LOW", ("45", "45")),
            ("IMGCAS_AUTO_FORMATS", (r#""webp, avif""#, "webp,avif")),
            (
                "IMGCAS_PRESETS",
                (
                    r#"{ thumb = "w=200&h=200&fit=cover", hero = "w=1200&format=auto" }"#,
                    "thumb=w=200&h=200&fit=cover; hero=w=1200&format=auto",
                ),
            ),
            (
                "IMGCAS_WATERMARKS",
                (
                    r#"{ logo = "hash=abababababababababababababababababababababababababababababababab&position=southeast&scale=0.2" }"#,
                    "logo=hash=abababababababababababababababababababababababababababababababab&position=southeast&scale=0.2",
                ),
            ),
            ("IMGCAS_FETCH_PER_HOST_RATE", ("5.5", "5.5")),
            (
                "IMGCAS_TENANTS",
                (
                    r#"{ shop = { rate = 1000000, burst = 50000000 }, default = { rate = 10, burst = 20 } }"#,
                    "shop=rate=1000000&burst=50000000; default=rate=10&burst=20",
                ),
            ),
            (
                "IMGCAS_FALLBACK_IMAGE",
                (r#""/srv/missing.png""#, "/srv/missing.png"),
            ),
            ("IMGCAS_FALLBACK_STATUS", ("404", "404")),
            ("IMGCAS_FALLBACK_TTL", (r#""2m""#, "120")),
            ("IMGCAS_IMGPROXY_KEY", (r#""736563726574""#, "736563726574")),
            ("IMGCAS_IMGPROXY_SALT", (r#""68656c6c6f""#, "68656c6c6f")),
            ("IMGCAS_IMGPROXY_SIGNATURE_SIZE", ("8", "8")),
            (
                "IMGCAS_THUMBOR_KEY",
                (r#""my-security-key""#, "my-security-key"),
            ),
            (
                "IMGCAS_SOURCE_BUCKETS",
                (r#"["catalogue", "uploads"]"#, "catalogue, uploads"),
            ),
        ]
        .into();
        assert_eq!(samples.len(), ENVIRONMENT.len(), "a sample per variable");
        for row in ENVIRONMENT {
            let (toml_value, env_text) = samples[row.var];
            let from_file: Config = toml::from_str(&format!("{} = {toml_value}", row.key))
                .unwrap_or_else(|e| panic!("{}: {e}", row.key));
            let mut from_env = Config::default();
            from_env
                .apply_env(|name| (name == row.var).then(|| env_text.to_string()))
                .unwrap();
            assert_eq!(from_file, from_env, "{} vs {}", row.key, row.var);
            assert_ne!(from_file, Config::default(), "{} changes nothing", row.key);
        }
    }

    #[test]
    fn shared_maps_need_a_shared_bucket() {
        let mut config = Config::default();
        config.maps.url = Some("postgres://imgcas@127.0.0.1/imgcas".into());
        let refused = config.validate().unwrap_err().to_string();
        assert!(
            refused.starts_with("maps.url: PostgreSQL maps need the S3 blob store"),
            "{refused}"
        );
        config.storage.backend = StorageBackend::S3;
        config.storage.s3.bucket = Some("pics".into());
        config.validate().unwrap();
        config.maps.url = Some("mysql://x".into());
        assert!(config
            .validate()
            .unwrap_err()
            .to_string()
            .starts_with("maps.url"));
        config.maps.url = Some("postgres://imgcas@127.0.0.1/imgcas".into());
        config.maps.password_file = Some("/nonexistent/imgcas-password".into());
        let refused = config.validate().unwrap_err().to_string();
        assert!(
            refused.starts_with("maps.password_file: cannot read /nonexistent/imgcas-password"),
            "{refused}"
        );
    }

    #[test]
    fn the_maps_url_scheme_names_the_backend() {
        let dir = Path::new("/srv/imgcas");
        assert_eq!(MapsBackend::of(None), Ok(MapsBackend::Embedded));
        let elsewhere = MapsBackend::of(Some("redb:///srv/other")).unwrap();
        assert_eq!(elsewhere, MapsBackend::EmbeddedAt("/srv/other".into()));
        assert_eq!(elsewhere.embedded_dir(dir), Some(Path::new("/srv/other")));
        assert_eq!(MapsBackend::Embedded.embedded_dir(dir), Some(dir));
        let shared = MapsBackend::of(Some("postgresql://db/imgcas")).unwrap();
        assert_eq!(shared.embedded_dir(dir), None);
        let words = MapsBackend::of(Some("host=db dbname=imgcas sslmode=verify-full"));
        assert!(matches!(words, Ok(MapsBackend::Postgres(_))));
        assert!(MapsBackend::of(Some("redb://")).is_err());
        assert!(MapsBackend::of(Some("mysql://x")).is_err());
    }

    #[test]
    fn load_applies_flags_last_and_validates() {
        let env: HashMap<&str, &str> = [
            ("IMGCAS_DATA_DIR", "/from/env"),
            ("IMGCAS_LISTEN", "127.0.0.1:1"),
        ]
        .into();
        let flags = Flags {
            data_dir: Some("/from/flag".into()),
            ..Flags::default()
        };
        let config = Config::load(None, |k| env.get(k).map(|v| v.to_string()), &flags).unwrap();
        assert_eq!(config.data_dir, PathBuf::from("/from/flag"));
        assert_eq!(config.listen.port(), 1);
        let invalid = Config::load(
            None,
            |k| (k == "IMGCAS_MAX_PIXELS").then(|| "0".into()),
            &flags,
        );
        assert!(invalid
            .unwrap_err()
            .to_string()
            .contains("limits.max_pixels"));
    }
}
