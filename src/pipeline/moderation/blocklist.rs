//! The moderation blocklist (`/v1/blocklist`, `imgcas blocklist`): content refused on the
//! way in, by its exact bytes (SHA-256) or as the same picture (a fingerprint within a
//! radius). A download, upload or ingest whose bytes match answers 451 `blocked` and stores
//! nothing; listing an entry takes down every stored original it matches (`removal.rs`).
//!
//! The list lives in the maps, shared by every node like the takedown list, and is held in
//! memory on each (checked by every new original, so it must cost no round trip): reloaded
//! whenever the purge generation moves, which every change of it moves.
//!
//! Bytes imgcas refuses or takes down because their fingerprint matched an entry are listed
//! by their own hash too (`matched` names the entry): the URL that named them then answers
//! `blocked` from its mapping without a download, and lifting the entry lifts them with it.

use std::collections::HashMap;
use std::sync::RwLock;

use bytes::Bytes;

use imgcas_processors::fingerprint::{Fingerprint, Guards};

use crate::error::Error;
use crate::hash::ContentHash;
use crate::maps::{now_ms, BlockEntry, MapStore};
use crate::pipeline::Pipeline;

/// What listing an entry did.
#[derive(Debug, Clone)]
pub struct Listed {
    pub entry: BlockEntry,
    pub newly_listed: bool,
    /// Stored originals it took down.
    pub taken_down: Vec<ContentHash>,
}

/// A fingerprint as an entry gives it.
#[derive(Debug, Clone, Copy)]
enum Print {
    /// The DCT hash alone: matched by distance.
    Dct(u64),
    /// The whole fingerprint: matched with reporting's guards at the entry's radius.
    Whole(Fingerprint),
}

impl Print {
    fn parse(text: &str) -> Option<Print> {
        let text = text.trim();
        match text.len() {
            16 => u64::from_str_radix(text, 16).ok().map(Print::Dct),
            64 => Fingerprint::from_bytes(&hex::decode(text).ok()?).map(Print::Whole),
            _ => None,
        }
    }

    fn dct(&self) -> u64 {
        match self {
            Print::Dct(d) => *d,
            Print::Whole(f) => f.phash,
        }
    }

    fn matches(&self, fp: &Fingerprint, radius: u32) -> bool {
        match self {
            Print::Dct(d) => (d ^ fp.phash).count_ones() <= radius,
            Print::Whole(whole) => whole.matches(fp, &Guards::report(radius)),
        }
    }
}

/// The list as this node holds it.
#[derive(Default)]
struct List {
    /// Listed hashes, with why (see [`why_listed`]).
    exact: HashMap<ContentHash, String>,
    near: Vec<(String, Print, u32)>,
}

pub(in crate::pipeline) struct Blocked {
    list: RwLock<List>,
}

impl Blocked {
    /// Listed hashes and listed fingerprints, as this node holds them.
    pub(in crate::pipeline) fn counts(&self) -> (usize, usize) {
        let list = self.list.read().unwrap_or_else(|p| p.into_inner());
        (list.exact.len(), list.near.len())
    }

    /// Loads the list from the maps (at open, and when the purge generation moves).
    pub(in crate::pipeline) async fn load(maps: &dyn MapStore) -> Result<Blocked, Error> {
        let blocked = Blocked {
            list: RwLock::new(List::default()),
        };
        blocked.reload(maps).await?;
        Ok(blocked)
    }

    pub(in crate::pipeline) async fn reload(&self, maps: &dyn MapStore) -> Result<(), Error> {
        let mut list = List::default();
        for entry in maps.blocklist().await? {
            if let Some(hash) = entry.sha256.as_deref().and_then(|h| h.parse().ok()) {
                list.exact.insert(hash, why_listed(&entry));
            }
            if let Some(print) = entry.fingerprint.as_deref().and_then(Print::parse) {
                list.near
                    .push((entry.id.clone(), print, entry.radius.unwrap_or(0)));
            }
        }
        *self.list.write().unwrap_or_else(|p| p.into_inner()) = list;
        Ok(())
    }

    fn read(&self) -> std::sync::RwLockReadGuard<'_, List> {
        self.list.read().unwrap_or_else(|p| p.into_inner())
    }

    fn exact(&self, hash: &ContentHash) -> Option<String> {
        self.read().exact.get(hash).cloned()
    }

    fn has_prints(&self) -> bool {
        !self.read().near.is_empty()
    }

    fn near(&self, fp: &Fingerprint) -> Option<String> {
        self.read()
            .near
            .iter()
            .find(|(_, print, radius)| print.matches(fp, *radius))
            .map(|(id, _, _)| id.clone())
    }
}

/// Why an entry's hash is refused, as the error says it.
fn why_listed(entry: &BlockEntry) -> String {
    match entry.matched.as_deref() {
        Some("validation") => format!(
            "was refused by the validation service: {}",
            entry.note.as_deref().unwrap_or("no reason given")
        ),
        Some(parent) => format!("is a copy of the picture of blocklist entry `{parent}`"),
        None => format!("matches blocklist entry `{}`", entry.id),
    }
}

/// The error every route answers for blocked content (`why`: [`why_listed`]'s words).
fn blocked(hash: &ContentHash, why: &str) -> Error {
    Error::Blocked(format!("original {hash} {why}; it is not stored or served"))
}

impl Pipeline {
    /// `Err(blocked)` for a hash the list names (this node's memory).
    pub(in crate::pipeline) fn refuse_blocked(&self, hash: &ContentHash) -> Result<(), Error> {
        match self.shared.moderation.blocked.exact(hash) {
            Some(entry) => Err(blocked(hash, &entry)),
            None => Ok(()),
        }
    }

    /// Whether new bytes must be refused: their hash is listed, or their fingerprint (computed
    /// here when the list has fingerprints) is within an entry's radius. A fingerprint
    /// match lists the bytes' own hash too. Returns the fingerprint when it was computed
    /// (`None` inside: no picture), for the caller to keep.
    pub(in crate::pipeline) async fn check_blocklist(
        &self,
        hash: &ContentHash,
        bytes: &Bytes,
    ) -> Result<Option<Option<Fingerprint>>, Error> {
        self.refuse_blocked(hash)?;
        if !self.shared.moderation.blocked.has_prints() {
            return Ok(None);
        }
        let computed = self.compute_fingerprint(hash, bytes.clone()).await?;
        if let Some(entry) = computed
            .as_ref()
            .and_then(|fp| self.shared.moderation.blocked.near(fp))
        {
            tracing::info!(%hash, %entry, "new bytes refused: the picture is on the blocklist");
            self.list_match(hash, &entry, false).await?;
            self.blocklist_changed().await?;
            let why = format!("is a copy of the picture of blocklist entry `{entry}`");
            return Err(blocked(hash, &why));
        }
        Ok(Some(computed))
    }

    /// Lists `hash` as matching entry `entry` (see the module's doc); the caller then calls
    /// [`Pipeline::blocklist_changed`], once for all it lists.
    async fn list_match(
        &self,
        hash: &ContentHash,
        entry: &str,
        took_down: bool,
    ) -> Result<(), Error> {
        let derived = BlockEntry {
            id: hash.to_hex(),
            sha256: Some(hash.to_hex()),
            matched: Some(entry.to_string()),
            took_down,
            listed_ms: now_ms(),
            ..BlockEntry::default()
        };
        self.shared.maps.block(&derived).await?;
        Ok(())
    }

    /// Lists bytes a validation service refused, so that they stay refused (`validation`
    /// names the service as the entry they matched).
    pub(in crate::pipeline) async fn list_refused(
        &self,
        hash: &ContentHash,
        why: &str,
    ) -> Result<(), Error> {
        let entry = BlockEntry {
            id: hash.to_hex(),
            sha256: Some(hash.to_hex()),
            note: Some(why.to_string()),
            matched: Some("validation".into()),
            listed_ms: now_ms(),
            ..BlockEntry::default()
        };
        self.shared.maps.block(&entry).await?;
        self.blocklist_changed().await
    }

    /// Every node reloads the list (the purge generation moves), this one now.
    async fn blocklist_changed(&self) -> Result<(), Error> {
        let s = &self.shared;
        s.maps.bump_purge_generation().await?;
        s.moderation.blocked.reload(s.maps.as_ref()).await?;
        self.forget_requests();
        Ok(())
    }

    /// Lists an entry (`POST /v1/blocklist`, `imgcas blocklist import`): a hash, a
    /// fingerprint, or `image`'s (both taken from it); then takes down every stored original
    /// it matches.
    pub async fn block(&self, request: BlockEntry, image: Option<Bytes>) -> Result<Listed, Error> {
        let mut sha256 = match request.sha256.as_deref() {
            Some(text) => Some(text.trim().parse::<ContentHash>().map_err(|_| {
                Error::invalid_option("sha256", format!("`{text}` is not a SHA-256 in hex"))
            })?),
            None => None,
        };
        let mut print = match request.fingerprint.as_deref() {
            Some(text) => Some(Print::parse(text).ok_or_else(|| {
                Error::invalid_option(
                    "fingerprint",
                    format!("`{text}` is not a fingerprint (16 or 64 hex digits)"),
                )
            })?),
            None => None,
        };
        if let Some(image) = image.filter(|b| !b.is_empty()) {
            let hash = ContentHash::of(&image);
            sha256 = Some(hash);
            match self.compute_fingerprint(&hash, image).await? {
                Some(fp) => print = Some(Print::Whole(fp)),
                None => {
                    return Err(Error::invalid_option(
                        "image",
                        "the body is no picture imgcas can read: list its sha256 instead",
                    ))
                }
            }
        }
        let radius = request
            .radius
            .unwrap_or(self.shared.config.moderation.blocklist_radius);
        if radius > 16 {
            return Err(Error::invalid_option(
                "radius",
                "at most 16 (of 64 bits; wider matches distinct pictures)",
            ));
        }
        let fingerprint = print.map(|p| match p {
            Print::Dct(d) => format!("{d:016x}"),
            Print::Whole(f) => hex::encode(f.to_bytes()),
        });
        let id = match (&sha256, &fingerprint) {
            (Some(hash), _) => hash.to_hex(),
            (None, Some(fp)) => format!("fp-{fp}"),
            (None, None) => {
                return Err(Error::invalid_option(
                    "sha256",
                    "an entry needs a sha256, a fingerprint or an image",
                ))
            }
        };
        // The stored originals it matches: its own bytes, and pictures within the radius.
        let mut taken_down = Vec::new();
        if let Some(hash) = sha256 {
            if self.shared.maps.original(&hash).await?.is_some() {
                taken_down.push(hash);
            }
        }
        let own_stored = !taken_down.is_empty();
        if let Some(print) = print {
            for found in self.shared.maps.near(print.dct(), radius).await? {
                if Some(found.hash) != sha256
                    && print.matches(&found.fingerprint, radius)
                    && self.shared.maps.original(&found.hash).await?.is_some()
                {
                    taken_down.push(found.hash);
                }
            }
        }
        let entry = BlockEntry {
            id,
            sha256: sha256.map(|h| h.to_hex()),
            fingerprint,
            radius: print.is_some().then_some(radius),
            note: request.note,
            matched: None,
            took_down: own_stored,
            listed_ms: now_ms(),
        };
        // Listed first, with the matches (one change every node follows), so that no new
        // copy is stored while they are taken down, by the takedown path.
        let newly_listed = self.shared.maps.block(&entry).await?;
        for hash in taken_down.iter().skip(usize::from(own_stored)) {
            self.list_match(hash, &entry.id, true).await?;
        }
        self.blocklist_changed().await?;
        for hash in &taken_down {
            self.take_down(hash).await?;
        }
        Ok(Listed {
            entry,
            newly_listed,
            taken_down,
        })
    }

    /// Lifts entry `id` and the entries its matches made; the takedowns listing them made
    /// are lifted too. Returns the ids lifted (none: no such entry).
    pub async fn unblock(&self, id: &str) -> Result<Vec<String>, Error> {
        let listed = self.shared.maps.blocklist().await?;
        let mut lifted = Vec::new();
        for entry in listed
            .iter()
            .filter(|e| e.id == id || e.matched.as_deref() == Some(id))
        {
            if !self.shared.maps.unblock(&entry.id).await? {
                continue;
            }
            if let Some(hash) = entry.sha256.as_deref().and_then(|h| h.parse().ok()) {
                if entry.took_down {
                    // Its URL entries are forgotten with the takedown.
                    self.lift_takedown(&hash).await?;
                } else {
                    // URLs remembered as naming the refused bytes download them again.
                    for (url, _) in self.shared.maps.urls_of(&hash).await? {
                        self.shared.maps.remove_url(&url).await?;
                    }
                }
            }
            lifted.push(entry.id.clone());
        }
        if !lifted.is_empty() {
            self.blocklist_changed().await?;
        }
        Ok(lifted)
    }

    /// Every entry, by id.
    pub async fn blocklist(&self) -> Result<Vec<BlockEntry>, Error> {
        let mut entries = self.shared.maps.blocklist().await?;
        entries.sort_by(|a, b| a.id.cmp(&b.id));
        Ok(entries)
    }

    /// Reloads the list after the purge generation moved (`follow_purges`).
    pub(in crate::pipeline) async fn reload_blocklist(&self) -> Result<(), Error> {
        self.shared
            .moderation
            .blocked
            .reload(self.shared.maps.as_ref())
            .await
    }
}
