//! The `Quotas` role on PostgreSQL (`maps/quotas.rs` says what each quota is for): one
//! statement per call, every expiry and every refill on the server's clock, so that nodes
//! whose clocks differ still agree. A slot is taken by a conditional insert of a free slot's
//! row (two nodes choosing one slot: the second's write finds it live and takes nothing,
//! and it asks again); a bucket is refilled and taken from in the same conditional update,
//! so its spending is exact across nodes, with no share per node to reconcile.

use super::*;
use crate::maps::quotas::{Bucket, HeldFailure, OriginSlot, OriginTurn, Quotas, SlotTake, Take};

/// A download's turn (`OriginTurn`): `$1` origin, `$2` slots, `$3` owner, `$4` token, `$5`
/// the slot's life in seconds, `$6` the rate's bucket, `$7` its rate, `$8` its burst, `$9` the
/// URL's key (NULL: not asked). Nothing is taken while the URL's failure is held or the
/// origin is paused; a rate token only when a slot is free, and the slot only when the token
/// was taken (two nodes choosing one free slot at once: the second's token is spent and it
/// asks again, which errs on the polite side).
const TAKE_ORIGIN_TURN: Statement = Statement {
    op: "take_origin_turn",
    sql: "WITH held AS (
             SELECT error, streak,
                    greatest(0, extract(epoch FROM held_until - now()))::float8 AS secs
               FROM imgcas_url_failures WHERE url_key = $9 AND remembered_until > now()),
          paused AS (
             SELECT extract(epoch FROM until - now())::float8 AS secs
               FROM imgcas_origin_pauses WHERE origin = $1 AND until > now()),
          free AS (
             SELECT s FROM generate_series(0, $2 - 1) AS s
              WHERE NOT EXISTS (SELECT 1 FROM paused)
                AND NOT EXISTS (SELECT 1 FROM held WHERE secs > 0)
                AND NOT EXISTS (SELECT 1 FROM imgcas_origin_slots o
                                 WHERE o.origin = $1 AND o.slot = s AND o.expires_at >= now())
              ORDER BY random() LIMIT 1),
          level AS (
             SELECT least($8, level + extract(epoch FROM now() - at)::float8 * $7) AS level
               FROM imgcas_buckets WHERE key = $6),
          rated AS (
             INSERT INTO imgcas_buckets (key, level, at, full_at)
             SELECT $6, $8 - 1, now(), now() + (1 / $7) * interval '1 second'
              WHERE EXISTS (SELECT 1 FROM free) AND $8 >= 1
             ON CONFLICT (key) DO UPDATE SET
                 level = least($8, imgcas_buckets.level
                     + extract(epoch FROM now() - imgcas_buckets.at)::float8 * $7) - 1,
                 at = now(),
                 full_at = now() + (greatest(0, $8 + 1 - least($8, imgcas_buckets.level
                     + extract(epoch FROM now() - imgcas_buckets.at)::float8 * $7)) / $7)
                     * interval '1 second'
              WHERE least($8, imgcas_buckets.level
                     + extract(epoch FROM now() - imgcas_buckets.at)::float8 * $7) >= 1
             RETURNING level),
          won AS (
             INSERT INTO imgcas_origin_slots (origin, slot, owner, token, expires_at)
             SELECT $1, s, $3, $4, now() + $5 * interval '1 second' FROM free
              WHERE EXISTS (SELECT 1 FROM rated)
             ON CONFLICT (origin, slot) DO UPDATE SET owner = EXCLUDED.owner,
                 token = EXCLUDED.token, expires_at = EXCLUDED.expires_at
              WHERE imgcas_origin_slots.expires_at < now()
             RETURNING slot)
          SELECT (SELECT slot FROM won) AS slot,
                 (SELECT secs FROM paused) AS paused,
                 EXISTS (SELECT 1 FROM free) AS free,
                 EXISTS (SELECT 1 FROM rated) AS rated,
                 (SELECT level FROM level) AS level,
                 (SELECT error FROM held) AS held_error,
                 (SELECT streak FROM held) AS held_streak,
                 (SELECT secs FROM held) AS held_secs",
};

const RELEASE_ORIGIN_SLOT: Statement = Statement {
    op: "release_origin_slot",
    sql: "DELETE FROM imgcas_origin_slots WHERE origin = $1 AND slot = $2 AND token = $3",
};

const ORIGIN_SLOTS_HELD: Statement = Statement {
    op: "origin_slots_held",
    sql: "SELECT count(*)::int4 AS held FROM imgcas_origin_slots
           WHERE origin = $1 AND expires_at > now()",
};

const PAUSE_ORIGIN: Statement = Statement {
    op: "pause_origin",
    sql: "INSERT INTO imgcas_origin_pauses (origin, until)
          VALUES ($1, now() + $2 * interval '1 second')
          ON CONFLICT (origin) DO UPDATE
             SET until = greatest(imgcas_origin_pauses.until, EXCLUDED.until)",
};

const ORIGIN_PAUSE: Statement = Statement {
    op: "origin_pause",
    sql: "SELECT extract(epoch FROM until - now())::float8 AS secs
            FROM imgcas_origin_pauses WHERE origin = $1 AND until > now()",
};

/// `$1` key, `$2` rate, `$3` burst, `$4` need, `$5` cost. The level now is the stored level
/// refilled for the time since (`least(burst, level + secs × rate)`); a bucket not stored
/// yet is full.
const TAKE_TOKENS: Statement = Statement {
    op: "take_tokens",
    sql: "WITH current AS (
             SELECT least($3, level + extract(epoch FROM now() - at)::float8 * $2) AS level
               FROM imgcas_buckets WHERE key = $1),
          won AS (
             INSERT INTO imgcas_buckets (key, level, at, full_at)
             SELECT $1, $3 - $5, now(), now() + ($5 / $2) * interval '1 second'
              WHERE $3 >= $4
             ON CONFLICT (key) DO UPDATE SET
                 level = least($3, imgcas_buckets.level
                     + extract(epoch FROM now() - imgcas_buckets.at)::float8 * $2) - $5,
                 at = now(),
                 full_at = now() + (greatest(0, $3 + $5 - least($3, imgcas_buckets.level
                     + extract(epoch FROM now() - imgcas_buckets.at)::float8 * $2)) / $2)
                     * interval '1 second'
              WHERE least($3, imgcas_buckets.level
                     + extract(epoch FROM now() - imgcas_buckets.at)::float8 * $2) >= $4
             RETURNING level)
          SELECT true AS won, level FROM won
          UNION ALL
          SELECT false, level FROM current WHERE NOT EXISTS (SELECT 1 FROM won)",
};

const HELD_FAILURE: Statement = Statement {
    op: "held_failure",
    sql: "SELECT error, streak,
                 greatest(0, extract(epoch FROM held_until - now()))::float8 AS secs
            FROM imgcas_url_failures WHERE url_key = $1 AND remembered_until > now()",
};

const HOLD_FAILURE: Statement = Statement {
    op: "hold_failure",
    sql: "INSERT INTO imgcas_url_failures (url_key, error, streak, held_until, remembered_until)
          VALUES ($1, $2, $3, now() + $4 * interval '1 second',
                  now() + ($4 + $5) * interval '1 second')
          ON CONFLICT (url_key) DO UPDATE SET error = EXCLUDED.error,
              streak = EXCLUDED.streak, held_until = EXCLUDED.held_until,
              remembered_until = EXCLUDED.remembered_until",
};

const CLEAR_FAILURE: Statement = Statement {
    op: "clear_failure",
    sql: "DELETE FROM imgcas_url_failures WHERE url_key = $1",
};

/// Seconds as the server reported them, as a duration (never negative).
fn secs(value: f64) -> Duration {
    Duration::from_secs_f64(value.clamp(0.0, 86_400.0 * 366.0))
}

#[async_trait]
impl Quotas for PostgresStore {
    async fn take_origin_turn(
        &self,
        turn: &OriginTurn<'_>,
    ) -> Result<(SlotTake, Option<HeldFailure>), MapError> {
        let limit = i32::try_from(turn.limit).unwrap_or(i32::MAX);
        let rows = self
            .query(
                &TAKE_ORIGIN_TURN,
                params![
                    turn.origin,
                    limit,
                    turn.owner,
                    turn.token,
                    turn.ttl.as_secs_f64(),
                    turn.rate_key,
                    turn.rate.rate,
                    turn.rate.burst,
                    turn.url_key
                ],
            )
            .await?;
        let Some(row) = rows.first() else {
            return Ok((SlotTake::Busy, None));
        };
        let get = |name: &str| -> Result<Option<f64>, MapError> {
            row.try_get(name).map_err(store_error)
        };
        let held_error: Option<String> = row.try_get("held_error").map_err(store_error)?;
        let held_streak: Option<i32> = row.try_get("held_streak").map_err(store_error)?;
        let held = match (held_error, held_streak, get("held_secs")?) {
            (Some(error), Some(streak), Some(left)) => Some(HeldFailure {
                error,
                streak: u32::try_from(streak).unwrap_or(0),
                left: secs(left),
            }),
            _ => None,
        };
        if let Some(active) = held.as_ref().filter(|h| !h.left.is_zero()) {
            return Ok((SlotTake::Held(active.clone()), held));
        }
        if let Some(left) = get("paused")? {
            return Ok((SlotTake::Paused(secs(left)), held));
        }
        let free: bool = row.try_get("free").map_err(store_error)?;
        let rated: bool = row.try_get("rated").map_err(store_error)?;
        let slot: Option<i32> = row.try_get("slot").map_err(store_error)?;
        let take = match (free, rated, slot) {
            (false, _, _) => SlotTake::Busy,
            (true, false, _) => {
                let level = get("level")?.unwrap_or(turn.rate.burst);
                SlotTake::RateWait(turn.rate.wait(level, 1.0))
            }
            // Another node took the chosen slot a moment before: ask again.
            (true, true, None) => SlotTake::Busy,
            (true, true, Some(slot)) => SlotTake::Granted(OriginSlot {
                origin: turn.origin.to_string(),
                slot: u32::try_from(slot).unwrap_or(0),
                token: turn.token,
            }),
        };
        Ok((take, held))
    }

    async fn release_origin_slot(&self, slot: &OriginSlot) -> Result<(), MapError> {
        let number = i32::try_from(slot.slot).unwrap_or(i32::MAX);
        self.execute(
            &RELEASE_ORIGIN_SLOT,
            params![slot.origin.as_str(), number, slot.token],
        )
        .await
        .map(|_| ())
    }

    async fn origin_slots_held(&self, origin: &str) -> Result<u32, MapError> {
        let rows = self.query(&ORIGIN_SLOTS_HELD, params![origin]).await?;
        let held: i32 = match rows.first() {
            Some(row) => row.try_get("held").map_err(store_error)?,
            None => 0,
        };
        Ok(u32::try_from(held).unwrap_or(0))
    }

    async fn pause_origin(&self, origin: &str, length: Duration) -> Result<(), MapError> {
        self.execute(&PAUSE_ORIGIN, params![origin, length.as_secs_f64()])
            .await
            .map(|_| ())
    }

    async fn origin_pause(&self, origin: &str) -> Result<Option<Duration>, MapError> {
        let rows = self.query(&ORIGIN_PAUSE, params![origin]).await?;
        match rows.first() {
            Some(row) => {
                let left: f64 = row.try_get("secs").map_err(store_error)?;
                Ok(Some(secs(left)).filter(|d| !d.is_zero()))
            }
            None => Ok(None),
        }
    }

    async fn take_tokens(
        &self,
        key: &str,
        bucket: Bucket,
        need: f64,
        cost: f64,
    ) -> Result<Take, MapError> {
        let rows = self
            .query(
                &TAKE_TOKENS,
                params![key, bucket.rate, bucket.burst, need, cost],
            )
            .await?;
        let Some(row) = rows.first() else {
            // No row and a full bucket short of `need`.
            return Ok(Take::Refused {
                wait: bucket.wait(bucket.burst, need),
            });
        };
        let won: bool = row.try_get("won").map_err(store_error)?;
        let level: f64 = row.try_get("level").map_err(store_error)?;
        Ok(match won {
            true => Take::Granted { left: level },
            false => Take::Refused {
                wait: bucket.wait(level, need),
            },
        })
    }

    async fn held_failure(&self, url: &str) -> Result<Option<HeldFailure>, MapError> {
        let rows = self.query(&HELD_FAILURE, params![url]).await?;
        let Some(row) = rows.first() else {
            return Ok(None);
        };
        let streak: i32 = row.try_get("streak").map_err(store_error)?;
        let left: f64 = row.try_get("secs").map_err(store_error)?;
        Ok(Some(HeldFailure {
            error: row.try_get("error").map_err(store_error)?,
            streak: u32::try_from(streak).unwrap_or(0),
            left: secs(left),
        }))
    }

    async fn hold_failure(
        &self,
        url: &str,
        error: &str,
        streak: u32,
        hold: Duration,
        remember: Duration,
    ) -> Result<(), MapError> {
        let streak = i32::try_from(streak).unwrap_or(i32::MAX);
        self.execute(
            &HOLD_FAILURE,
            params![
                url,
                error,
                streak,
                hold.as_secs_f64(),
                remember.as_secs_f64()
            ],
        )
        .await
        .map(|_| ())
    }

    async fn clear_failure(&self, url: &str) -> Result<(), MapError> {
        self.execute(&CLEAR_FAILURE, params![url]).await.map(|_| ())
    }
}
