//! The `IMGCAS_*` variables: [`ENVIRONMENT`], one row per setting with the key it sets and
//! the parser of its text. `docs/configuration.md` lists the same rows (a test holds the two
//! together).

use super::*;

/// One environment variable: the key it sets, as the file spells it, and how.
pub struct EnvVar {
    pub key: &'static str,
    pub var: &'static str,
    pub(super) apply: fn(&mut Config, &str) -> Result<(), String>,
}

// Parsers of variable text, one per kind of value.

fn text(v: &str) -> Result<String, String> {
    Ok(v.to_string())
}

fn some_text(v: &str) -> Result<Option<String>, String> {
    Ok(Some(v.to_string()))
}

fn path(v: &str) -> Result<PathBuf, String> {
    Ok(PathBuf::from(v))
}

fn some_path(v: &str) -> Result<Option<PathBuf>, String> {
    Ok(Some(PathBuf::from(v)))
}

fn address(v: &str) -> Result<SocketAddr, String> {
    v.parse()
        .map_err(|_| format!("`{v}` is not an address:port"))
}

fn backend(v: &str) -> Result<StorageBackend, String> {
    match v {
        "fs" => Ok(StorageBackend::Fs),
        "s3" => Ok(StorageBackend::S3),
        _ => Err("must be `fs` or `s3`".into()),
    }
}

/// A comma list of host names, lower-cased.
fn hosts(v: &str) -> Result<Vec<String>, String> {
    Ok(v.split(',')
        .map(|h| h.trim().to_ascii_lowercase())
        .filter(|h| !h.is_empty())
        .collect())
}

fn near_dedup(v: &str) -> Result<NearDedup, String> {
    match v.trim().to_ascii_lowercase().as_str() {
        "off" => Ok(NearDedup::Off),
        "report" => Ok(NearDedup::Report),
        "canonical" => Ok(NearDedup::Canonical),
        _ => Err("must be `off`, `report` or `canonical`".into()),
    }
}

fn duration(v: &str) -> Result<Duration, String> {
    parse_duration(v)
}

fn number<T: std::str::FromStr>(v: &str) -> Result<T, String> {
    v.trim()
        .replace('_', "")
        .parse()
        .map_err(|_| format!("`{v}` is not a number"))
}

/// A count of at least 1.
fn some_number(v: &str) -> Result<Option<usize>, String> {
    match number(v)? {
        0 => Err("must be at least 1".into()),
        n => Ok(Some(n)),
    }
}

/// `name=<options>;name=<options>`: the first `=` ends the name, the rest are its options.
/// `name=<options>; name=<options>`: presets, watermarks.
fn named(v: &str) -> Result<BTreeMap<String, String>, String> {
    let mut named = BTreeMap::new();
    for entry in v.split(';').map(str::trim).filter(|e| !e.is_empty()) {
        let Some((name, options)) = entry.split_once('=') else {
            return Err(format!("`{entry}` is not `name=<options>`"));
        };
        if named
            .insert(name.trim().to_string(), options.trim().to_string())
            .is_some()
        {
            return Err(format!("`{}` is given twice", name.trim()));
        }
    }
    Ok(named)
}

fn boolean(v: &str) -> Result<bool, String> {
    match v.trim().to_ascii_lowercase().as_str() {
        "1" | "true" | "yes" | "on" => Ok(true),
        "0" | "false" | "no" | "off" | "" => Ok(false),
        _ => Err(format!("`{v}` is not a boolean")),
    }
}

/// A row of [`ENVIRONMENT`]: the key, its variable, the field it sets and the parser.
macro_rules! setting {
    ($key:literal, $var:literal, $($field:ident).+, $parse:expr) => {
        EnvVar {
            key: $key,
            var: $var,
            apply: |c, v| {
                c.$($field).+ = $parse(v)?;
                Ok(())
            },
        }
    };
}

/// Every `IMGCAS_*` setting, docs/configuration.md's names exactly (no name is derived from a key).
#[rustfmt::skip]
pub const ENVIRONMENT: &[EnvVar] = &[
    setting!("listen", "IMGCAS_LISTEN", listen, address),
    setting!("data_dir", "IMGCAS_DATA_DIR", data_dir, path),
    setting!("storage.backend", "IMGCAS_STORAGE", storage.backend, backend),
    setting!("storage.s3.bucket", "IMGCAS_S3_BUCKET", storage.s3.bucket, some_text),
    setting!("storage.s3.endpoint", "IMGCAS_S3_ENDPOINT", storage.s3.endpoint, some_text),
    setting!("storage.s3.region", "IMGCAS_S3_REGION", storage.s3.region, text),
    setting!("storage.s3.force_path_style", "IMGCAS_S3_FORCE_PATH_STYLE", storage.s3.force_path_style, boolean),
    setting!("storage.s3.connect_timeout", "IMGCAS_S3_CONNECT_TIMEOUT", storage.s3.connect_timeout, duration),
    setting!("storage.s3.first_byte_timeout", "IMGCAS_S3_FIRST_BYTE_TIMEOUT", storage.s3.first_byte_timeout, duration),
    setting!("storage.s3.timeout", "IMGCAS_S3_TIMEOUT", storage.s3.timeout, duration),
    setting!("maps.url", "IMGCAS_MAPS_URL", maps.url, some_text),
    setting!("maps.pool_size", "IMGCAS_MAPS_POOL_SIZE", maps.pool_size, some_number),
    setting!("maps.password_file", "IMGCAS_MAPS_PASSWORD_FILE", maps.password_file, some_path),
    setting!("maps.cache_bytes", "IMGCAS_MAPS_CACHE_BYTES", maps.cache_bytes, some_number),
    setting!("maps.entries_cache_bytes", "IMGCAS_MAPS_ENTRIES_CACHE_BYTES", maps.entries_cache_bytes, some_number),
    setting!("cluster.node_id", "IMGCAS_NODE_ID", cluster.node_id, some_text),
    setting!("cluster.claim_ttl", "IMGCAS_CLAIM_TTL", cluster.claim_ttl, duration),
    setting!("maintenance.gc_grace", "IMGCAS_GC_GRACE", maintenance.gc_grace, duration),
    setting!("maintenance.walk_rows_per_second", "IMGCAS_WALK_ROWS_PER_SECOND", maintenance.walk_rows_per_second, number),
    setting!("dedup.near", "IMGCAS_NEAR_DEDUP", dedup.near, near_dedup),
    setting!("dedup.report_radius", "IMGCAS_NEAR_DEDUP_REPORT_RADIUS", dedup.report_radius, number),
    setting!("dedup.radius", "IMGCAS_NEAR_DEDUP_RADIUS", dedup.radius, number),
    setting!("quality.default", "IMGCAS_QUALITY_DEFAULT", quality.default, QualityDefault::parse),
    setting!("quality.target_best", "IMGCAS_QUALITY_TARGET_BEST", quality.target_best, number),
    setting!("quality.target_good", "IMGCAS_QUALITY_TARGET_GOOD", quality.target_good, number),
    setting!("quality.target_eco", "IMGCAS_QUALITY_TARGET_ECO", quality.target_eco, number),
    setting!("quality.target_low", "IMGCAS_QUALITY_TARGET_LOW", quality.target_low, number),
    setting!("formats.auto", "IMGCAS_AUTO_FORMATS", formats.auto, imgcas_processors::AutoFormats::parse),
    setting!("fetch.allow_private_networks", "IMGCAS_ALLOW_PRIVATE_NETWORKS", fetch.allow_private_networks, boolean),
    setting!("fetch.allowed_hosts", "IMGCAS_ALLOWED_HOSTS", fetch.allowed_hosts, hosts),
    setting!("fetch.max_bytes", "IMGCAS_MAX_SOURCE_BYTES", fetch.max_bytes, number),
    setting!("fetch.timeout", "IMGCAS_FETCH_TIMEOUT", fetch.timeout, duration),
    setting!("fetch.revalidate_after", "IMGCAS_REVALIDATE_AFTER", fetch.revalidate_after, duration),
    setting!("fetch.per_host_concurrency", "IMGCAS_FETCH_PER_HOST", fetch.per_host_concurrency, number),
    setting!("fetch.concurrency", "IMGCAS_FETCH_CONCURRENCY", fetch.concurrency, number),
    setting!("fetch.origin_share", "IMGCAS_FETCH_ORIGIN_SHARE", fetch.origin_share, number),
    setting!("fetch.min_rate", "IMGCAS_FETCH_MIN_RATE", fetch.min_rate, number),
    setting!("fetch.per_host_rate", "IMGCAS_FETCH_PER_HOST_RATE", fetch.per_host_rate, number),
    setting!("fetch.forget_after", "IMGCAS_FORGET_AFTER", fetch.forget_after, duration),
    setting!("fetch.source_buckets", "IMGCAS_SOURCE_BUCKETS", fetch.source_buckets, hosts),
    setting!("limits.max_pixels", "IMGCAS_MAX_PIXELS", limits.max_pixels, number),
    setting!("limits.max_frames", "IMGCAS_MAX_FRAMES", limits.max_frames, number),
    setting!("limits.process_concurrency", "IMGCAS_PROCESS_CONCURRENCY", limits.process_concurrency, number),
    setting!("limits.queue_target", "IMGCAS_QUEUE_TARGET", limits.queue_target, duration),
    setting!("limits.hot_cache_bytes", "IMGCAS_HOT_CACHE_BYTES", limits.hot_cache_bytes, number),
    setting!("limits.variants_max_bytes", "IMGCAS_VARIANTS_MAX_BYTES", limits.variants_max_bytes, number),
    setting!("limits.urls_max_bytes", "IMGCAS_URLS_MAX_BYTES", limits.urls_max_bytes, number),
    setting!("limits.decode_cache_bytes", "IMGCAS_DECODE_CACHE_BYTES", limits.decode_cache_bytes, number),
    setting!("limits.background_queue", "IMGCAS_BACKGROUND_QUEUE", limits.background_queue, number),
    setting!("limits.allocator_arenas", "IMGCAS_ALLOCATOR_ARENAS", limits.allocator_arenas, number),
    setting!("limits.mezzanine", "IMGCAS_MEZZANINE", limits.mezzanine, boolean),
    setting!("limits.max_url_bytes", "IMGCAS_MAX_URL_BYTES", limits.max_url_bytes, number),
    setting!("limits.max_cost", "IMGCAS_MAX_COST", limits.max_cost, number),
    setting!("limits.max_budget_wait", "IMGCAS_MAX_BUDGET_WAIT", limits.max_budget_wait, duration),
    setting!("limits.max_memory", "IMGCAS_MAX_MEMORY", limits.max_memory, number),
    setting!("security.signing_key", "IMGCAS_SIGNING_KEY", security.signing_key, some_text),
    setting!("security.only_presets", "IMGCAS_ONLY_PRESETS", security.only_presets, boolean),
    setting!("security.admin_token", "IMGCAS_ADMIN_TOKEN", security.admin_token, some_text),
    setting!("security.tokens", "IMGCAS_TOKENS", security.tokens, super::tokens::parse_env),
    setting!("moderation.validation_url", "IMGCAS_VALIDATION_URL", moderation.validation_url, some_text),
    setting!("moderation.validation_on_error", "IMGCAS_VALIDATION_ON_ERROR", moderation.validation_on_error, super::moderation::on_error),
    setting!("moderation.validation_timeout", "IMGCAS_VALIDATION_TIMEOUT", moderation.validation_timeout, duration),
    setting!("moderation.blocklist_radius", "IMGCAS_BLOCKLIST_RADIUS", moderation.blocklist_radius, number),
    setting!("presets", "IMGCAS_PRESETS", presets, named),
    setting!("watermarks", "IMGCAS_WATERMARKS", watermarks, named),
    setting!("tenants", "IMGCAS_TENANTS", tenants, super::tenants::parse_env),
    setting!("fallback.image", "IMGCAS_FALLBACK_IMAGE", fallback.image, some_text),
    setting!("fallback.status", "IMGCAS_FALLBACK_STATUS", fallback.status, number),
    setting!("fallback.ttl", "IMGCAS_FALLBACK_TTL", fallback.ttl, duration),
    setting!("imgproxy.key", "IMGCAS_IMGPROXY_KEY", imgproxy.key, some_text),
    setting!("imgproxy.salt", "IMGCAS_IMGPROXY_SALT", imgproxy.salt, some_text),
    setting!("imgproxy.signature_size", "IMGCAS_IMGPROXY_SIGNATURE_SIZE", imgproxy.signature_size, number),
    setting!("thumbor.key", "IMGCAS_THUMBOR_KEY", thumbor.key, some_text),
    setting!("server.header_timeout", "IMGCAS_HEADER_TIMEOUT", server.header_timeout, duration),
    setting!("server.request_timeout", "IMGCAS_REQUEST_TIMEOUT", server.request_timeout, duration),
    setting!("server.max_connections", "IMGCAS_MAX_CONNECTIONS", server.max_connections, number),
    setting!("server.shutdown_timeout", "IMGCAS_SHUTDOWN_TIMEOUT", server.shutdown_timeout, duration),
    setting!("server.admin_page", "IMGCAS_ADMIN_PAGE", server.admin_page, boolean),
    setting!("server.admin_sample_every", "IMGCAS_ADMIN_SAMPLE_EVERY", server.admin_sample_every, duration),
    setting!("server.max_concurrent_uploads", "IMGCAS_MAX_CONCURRENT_UPLOADS", server.max_concurrent_uploads, number),
    setting!("server.min_upload_rate", "IMGCAS_MIN_UPLOAD_RATE", server.min_upload_rate, number),
    setting!("server.trusted_proxies", "IMGCAS_TRUSTED_PROXIES", server.trusted_proxies, super::parse_networks),
];
