//! The maps' coordinating roles while a migration moves them: claims, quotas and the walks'
//! positions are asked of the leading store alone (`mirror.rs` mirrors what is content).
//! They are short-lived, and the follower starts on them afresh when it leads.

use std::time::Duration;

use async_trait::async_trait;

use super::mirror::MirroredMaps;
use crate::maps::{
    Bucket, Claim, ClaimOutcome, Claims, HeldFailure, MapError, OriginSlot, OriginTurn, Quotas,
    SlotTake, Take, WalkLog, WalkPosition,
};

#[async_trait]
impl Claims for MirroredMaps {
    fn shared(&self) -> bool {
        self.sides().lead.shared()
    }

    async fn try_claim(
        &self,
        key: &str,
        owner: &str,
        token: i64,
        ttl: Duration,
    ) -> Result<ClaimOutcome, MapError> {
        self.sides().lead.try_claim(key, owner, token, ttl).await
    }

    async fn try_claim_past_published(
        &self,
        key: &str,
        owner: &str,
        token: i64,
        ttl: Duration,
    ) -> Result<ClaimOutcome, MapError> {
        self.sides()
            .lead
            .try_claim_past_published(key, owner, token, ttl)
            .await
    }

    async fn renew_claim(
        &self,
        claim: &Claim,
        new_token: i64,
        ttl: Duration,
    ) -> Result<bool, MapError> {
        self.sides().lead.renew_claim(claim, new_token, ttl).await
    }

    async fn release_claim(&self, claim: &Claim) -> Result<(), MapError> {
        self.sides().lead.release_claim(claim).await
    }
}

#[async_trait]
impl Quotas for MirroredMaps {
    async fn take_origin_turn(
        &self,
        turn: &OriginTurn<'_>,
    ) -> Result<(SlotTake, Option<HeldFailure>), MapError> {
        self.sides().lead.take_origin_turn(turn).await
    }

    async fn release_origin_slot(&self, slot: &OriginSlot) -> Result<(), MapError> {
        self.sides().lead.release_origin_slot(slot).await
    }

    async fn origin_slots_held(&self, origin: &str) -> Result<u32, MapError> {
        self.sides().lead.origin_slots_held(origin).await
    }

    async fn pause_origin(&self, origin: &str, length: Duration) -> Result<(), MapError> {
        self.sides().lead.pause_origin(origin, length).await
    }

    async fn origin_pause(&self, origin: &str) -> Result<Option<Duration>, MapError> {
        self.sides().lead.origin_pause(origin).await
    }

    async fn take_tokens(
        &self,
        key: &str,
        bucket: Bucket,
        need: f64,
        cost: f64,
    ) -> Result<Take, MapError> {
        self.sides().lead.take_tokens(key, bucket, need, cost).await
    }

    async fn held_failure(&self, url: &str) -> Result<Option<HeldFailure>, MapError> {
        self.sides().lead.held_failure(url).await
    }

    async fn hold_failure(
        &self,
        url: &str,
        error: &str,
        streak: u32,
        hold: Duration,
        remember: Duration,
    ) -> Result<(), MapError> {
        self.sides()
            .lead
            .hold_failure(url, error, streak, hold, remember)
            .await
    }

    async fn clear_failure(&self, url: &str) -> Result<(), MapError> {
        self.sides().lead.clear_failure(url).await
    }
}

#[async_trait]
impl WalkLog for MirroredMaps {
    async fn walk_position(&self, name: &str) -> Result<Option<WalkPosition>, MapError> {
        self.sides().lead.walk_position(name).await
    }

    async fn put_walk_position(&self, name: &str, position: &WalkPosition) -> Result<(), MapError> {
        self.sides().lead.put_walk_position(name, position).await
    }

    async fn walk_positions(&self) -> Result<Vec<(String, WalkPosition)>, MapError> {
        self.sides().lead.walk_positions().await
    }
}
