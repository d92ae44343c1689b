//! Claims on work across nodes: one conditional write each, decided on the server's clock.
//!
//! A result published under its claim (a variant, a download's URL entry) leaves the claim's
//! row behind as a *tombstone* for a few seconds (owner `''`, token 0; written by the
//! publishing statement itself), instead of deleting it. A node that missed the row a moment ago and tries the claim now is then
//! refused (it reads the row again) rather than granted it: had the claim simply gone, the
//! grant could not tell "never made" from "made while I looked away", and the node would
//! have to read the row once more after every grant. Work that must be done again however
//! fresh the result (a recheck of a URL) takes a tombstone over at once
//! ([`Claims::try_claim_past_published`]). Tombstones and dead nodes' claims are swept a
//! minute after they expire (with a purge generation read, `takedowns.rs`).

use super::*;

/// Insert, or take over an expired claim (or, with `$5`, a tombstone): one statement,
/// decided on the database's clock, which also names the holder when it is not us.
const TRY_CLAIM: Statement = Statement {
    op: "try_claim",
    sql: "WITH won AS (
             INSERT INTO imgcas_claims (key, owner, token, expires_at, renewed_at)
             VALUES ($1, $2, $3, now() + $4 * interval '1 second', now())
             ON CONFLICT (key) DO UPDATE SET owner = EXCLUDED.owner,
                 token = EXCLUDED.token, expires_at = EXCLUDED.expires_at,
                 renewed_at = EXCLUDED.renewed_at
              WHERE imgcas_claims.expires_at < now() OR ($5 AND imgcas_claims.owner = '')
             RETURNING token)
          SELECT true AS won, '' AS owner FROM won
          UNION ALL
          SELECT false, owner FROM imgcas_claims
           WHERE key = $1 AND NOT EXISTS (SELECT 1 FROM won)",
};

const RENEW_CLAIM: Statement = Statement {
    op: "renew_claim",
    sql: "UPDATE imgcas_claims SET token = $3,
                expires_at = now() + $4 * interval '1 second', renewed_at = now()
          WHERE key = $1 AND token = $2",
};

const RELEASE_CLAIM: Statement = Statement {
    op: "release_claim",
    sql: "DELETE FROM imgcas_claims WHERE key = $1 AND token = $2",
};

#[async_trait]
impl Claims for PostgresStore {
    fn shared(&self) -> bool {
        true
    }

    async fn try_claim(
        &self,
        key: &str,
        owner: &str,
        token: i64,
        ttl: Duration,
    ) -> Result<ClaimOutcome, MapError> {
        self.claim_row(key, owner, token, ttl, false).await
    }

    async fn try_claim_past_published(
        &self,
        key: &str,
        owner: &str,
        token: i64,
        ttl: Duration,
    ) -> Result<ClaimOutcome, MapError> {
        self.claim_row(key, owner, token, ttl, true).await
    }
    async fn renew_claim(
        &self,
        claim: &Claim,
        new_token: i64,
        ttl: Duration,
    ) -> Result<bool, MapError> {
        let ttl_secs = ttl.as_secs_f64();
        let renewed = self
            .execute(
                &RENEW_CLAIM,
                params![claim.key, claim.token, new_token, ttl_secs],
            )
            .await?;
        Ok(renewed == 1)
    }

    async fn release_claim(&self, claim: &Claim) -> Result<(), MapError> {
        self.execute(&RELEASE_CLAIM, params![claim.key, claim.token])
            .await
            .map(|_| ())
    }
}

impl PostgresStore {
    /// [`TRY_CLAIM`], past a tombstone when `past_published`.
    async fn claim_row(
        &self,
        key: &str,
        owner: &str,
        token: i64,
        ttl: Duration,
        past_published: bool,
    ) -> Result<ClaimOutcome, MapError> {
        let ttl_secs = ttl.as_secs_f64();
        let rows = self
            .query(
                &TRY_CLAIM,
                params![key, owner, token, ttl_secs, past_published],
            )
            .await?;
        let Some(row) = rows.first() else {
            return Ok(ClaimOutcome::HeldBy("(released just now)".into()));
        };
        if row.try_get::<_, bool>("won").map_err(store_error)? {
            return Ok(ClaimOutcome::Won);
        }
        let holder: String = row.try_get("owner").map_err(store_error)?;
        Ok(match holder.is_empty() {
            true => ClaimOutcome::Published,
            false => ClaimOutcome::HeldBy(holder),
        })
    }
}
