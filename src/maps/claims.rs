//! The `Claims` role: how nodes sharing the maps keep from doing one job twice (see
//! `shared/design/leases.md`): a claim per job's key, held by one owner until it expires on the
//! store's clock, renewed while the work runs, released (or left as a tombstone by the write
//! that publishes the result). A store no other process shares grants every claim.

use std::time::Duration;

use async_trait::async_trait;

use super::MapError;

/// A claim as the claims table holds it: the job's key and the token of the claim's last
/// write (every write changes it, so a token names one owner's one renewal).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Claim {
    pub key: String,
    pub token: i64,
}

/// What [`Claims::try_claim`] found.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ClaimOutcome {
    /// The claim is ours until its time to live runs out, unless renewed.
    Won,
    /// Another owner holds it, unexpired.
    HeldBy(String),
    /// A result was published under it a moment ago (the claim stands as a tombstone):
    /// read that result; if it is gone already, try again past the tombstone
    /// ([`Claims::try_claim_past_published`]).
    Published,
}

/// Claims on work across the processes that share the maps.
#[async_trait]
pub trait Claims: Send + Sync {
    // Claims: how nodes sharing the maps keep from doing one job twice (see
    // `shared/design/leases.md`). Expiry is decided on the store's clock. A store no other
    // process shares grants every claim: its one process has no one to share with, and
    // runs each job once already (the pipeline's single-flight maps).

    /// Whether other processes share these maps, so that work is claimed across them.
    fn shared(&self) -> bool {
        false
    }

    /// Claims `key` for `owner` with `token` for `ttl`, if nobody holds it or its claim has
    /// expired: one conditional write.
    async fn try_claim(
        &self,
        _key: &str,
        _owner: &str,
        _token: i64,
        _ttl: Duration,
    ) -> Result<ClaimOutcome, MapError> {
        Ok(ClaimOutcome::Won)
    }

    /// [`Claims::try_claim`], taking over the tombstone a published result left too (a
    /// store whose writes leave one): for work that must be done again even though a result
    /// was just published, as a recheck of a URL.
    async fn try_claim_past_published(
        &self,
        key: &str,
        owner: &str,
        token: i64,
        ttl: Duration,
    ) -> Result<ClaimOutcome, MapError> {
        self.try_claim(key, owner, token, ttl).await
    }

    /// Extends a claim still held with `claim.token` by `ttl`, under `new_token`. `false`:
    /// the claim was lost (expired and taken, or released), and its owner must stop.
    async fn renew_claim(
        &self,
        _claim: &Claim,
        _new_token: i64,
        _ttl: Duration,
    ) -> Result<bool, MapError> {
        Ok(true)
    }

    /// Gives a claim up (if still held with this token), so a waiter may take it at once.
    async fn release_claim(&self, _claim: &Claim) -> Result<(), MapError> {
        Ok(())
    }
}
