//! Claims on work across nodes: one conditional write each, decided on the server's clock.

use super::*;

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
        let ttl_secs = ttl.as_secs_f64();
        // Insert, or take over an expired claim: one statement, decided on the database's
        // clock. No row back means someone else holds it.
        let won = self
            .query(
                "INSERT INTO imgcas_claims (key, owner, token, expires_at, renewed_at)
                 VALUES ($1, $2, $3, now() + $4 * interval '1 second', now())
                 ON CONFLICT (key) DO UPDATE SET owner = EXCLUDED.owner,
                     token = EXCLUDED.token, expires_at = EXCLUDED.expires_at,
                     renewed_at = EXCLUDED.renewed_at
                  WHERE imgcas_claims.expires_at < now()
                 RETURNING token",
                &[&key, &owner, &token, &ttl_secs],
            )
            .await?;
        if !won.is_empty() {
            return Ok(ClaimOutcome::Won);
        }
        let holder = self
            .query("SELECT owner FROM imgcas_claims WHERE key = $1", &[&key])
            .await?;
        Ok(ClaimOutcome::HeldBy(holder.first().map_or_else(
            || "(released just now)".to_string(),
            |r| r.get(0),
        )))
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
                "UPDATE imgcas_claims SET token = $3,
                        expires_at = now() + $4 * interval '1 second', renewed_at = now()
                  WHERE key = $1 AND token = $2",
                &[&claim.key, &claim.token, &new_token, &ttl_secs],
            )
            .await?;
        Ok(renewed == 1)
    }

    async fn release_claim(&self, claim: &Claim) -> Result<(), MapError> {
        self.execute(
            "DELETE FROM imgcas_claims WHERE key = $1 AND token = $2",
            &[&claim.key, &claim.token],
        )
        .await
        .map(|_| ())
    }
}
