//! A near-duplicate search's work is bounded (issue 69), on every backend: it reads at most
//! the cap of candidates it is given and says when the cap cut it short, and it stops early,
//! exact, once it holds the closest it was asked for at distance 0 — so the look-alikes stored
//! (placeholders by the hundred thousand) do not make each upload's search read them all.

use crate::common;
use crate::maps_contract::{postgres_at, redb_in, Opened};

use std::sync::Arc;

use imgcas::hash::ContentHash;
use imgcas::maps::{now_ms, Fingerprint, Fingerprinted, OriginalInfo};

fn fingerprint(phash: u64) -> Fingerprinted {
    Fingerprinted::Picture(Fingerprint {
        phash,
        block_hash: 0,
        colour: 0,
        width: 16,
        height: 16,
    })
}

async fn bounded(open: impl Fn() -> Opened) {
    let maps = open().await;
    let base = 0x0f0f_0f0f_3333_5555u64;
    // 150 look-alikes at distance 0 and 150 at distance 1 (one bit of the last band).
    for n in 0..300u32 {
        let hash = ContentHash::of(format!("look-alike-{n}").as_bytes());
        let info = OriginalInfo {
            format: Some(imgcas_processors::SourceFormat::Png),
            width: Some(16),
            height: Some(16),
            upright: None,
            has_alpha: false,
            bytes: 100,
            first_seen_ms: now_ms(),
            facts: None,
            focus: None,
        };
        maps.add_original(&hash, &info).await.unwrap();
        let phash = if n < 150 { base } else { base ^ 1 };
        maps.put_fingerprint(&hash, &fingerprint(phash))
            .await
            .unwrap();
    }
    // Uncapped: every one of them, closest first.
    let all = maps
        .near_closest(base, 4, usize::MAX, usize::MAX)
        .await
        .unwrap();
    assert!(!all.partial);
    assert_eq!(all.matches.len(), 300);
    assert!(all.matches[..150].iter().all(|m| m.distance == 0));
    // The closest five: at distance 0, whole (the search may stop once it holds them).
    let five = maps.near_closest(base, 4, 5, 10_000).await.unwrap();
    assert!(!five.partial, "a cap the search did not reach");
    assert_eq!(five.matches.len(), 5);
    assert!(five.matches.iter().all(|m| m.distance == 0));
    // A cap below the candidates within reach cuts the search, and says so; what it gives
    // is no more than it read, closest first.
    let capped = maps.near_closest(base ^ 2, 4, 50, 40).await.unwrap();
    assert!(capped.partial, "the cap cut the search");
    assert!(!capped.matches.is_empty() && capped.matches.len() <= 40);
    assert!(capped
        .matches
        .windows(2)
        .all(|w| w[0].distance <= w[1].distance));
    let whole = maps.near_closest(base ^ 2, 4, 50, 10_000).await.unwrap();
    assert!(!whole.partial);
    assert_eq!(whole.matches.len(), 50);
}

#[tokio::test(flavor = "multi_thread")]
async fn redb_bounds_a_near_duplicate_search() {
    bounded(redb_in(Arc::new(tempfile::tempdir().unwrap()))).await;
}

#[tokio::test(flavor = "multi_thread")]
async fn postgres_bounds_a_near_duplicate_search() {
    let Some(server) =
        common::postgres::PgServer::or_skip("postgres_bounds_a_near_duplicate_search")
    else {
        return;
    };
    bounded(postgres_at(server.database("near_bound"))).await;
}
