//! Where sources may come from beyond HTTP: a source bucket's own S3 settings
//! (`[fetch.buckets.<name>]`), for a catalogue in another account or at another provider.

use serde::Deserialize;

/// A source bucket's own S3 settings: what it leaves out is `storage.s3`'s (credentials: the
/// AWS chain's).
#[derive(Clone, PartialEq, Default, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct SourceBucket {
    pub endpoint: Option<String>,
    pub region: Option<String>,
    pub force_path_style: Option<bool>,
    pub access_key_id: Option<String>,
    pub secret_access_key: Option<String>,
}

impl std::fmt::Debug for SourceBucket {
    /// The secret is never printed.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SourceBucket")
            .field("endpoint", &self.endpoint)
            .field("region", &self.region)
            .field("force_path_style", &self.force_path_style)
            .field("access_key_id", &self.access_key_id)
            .field(
                "secret_access_key",
                &self.secret_access_key.as_ref().map(|_| "…"),
            )
            .finish()
    }
}

impl SourceBucket {
    /// Keys come in pairs.
    pub(super) fn check(&self) -> Result<(), String> {
        if self.access_key_id.is_some() != self.secret_access_key.is_some() {
            return Err("gives `access_key_id` and `secret_access_key` together or neither".into());
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_bucket_table_reads_and_keeps_its_secret_out_of_debug() {
        let bucket: SourceBucket = toml::from_str(
            "endpoint = \"http://127.0.0.1:9000\"\naccess_key_id = \"id\"\nsecret_access_key = \"hidden-secret\"",
        )
        .unwrap();
        assert!(bucket.check().is_ok());
        assert!(!format!("{bucket:?}").contains("hidden-secret"));
        let half: SourceBucket = toml::from_str("access_key_id = \"id\"").unwrap();
        assert!(half.check().is_err());
        assert!(
            toml::from_str::<SourceBucket>("secret = \"x\"").is_err(),
            "unknown key"
        );
    }
}
