//! The variants: [`VariantKey::to_bytes`] → the row, and the bookkeeping that holds them to a
//! byte budget.
//!
//! Row layout (`variants`), compact since it is read on every hit:
//! - tag `0`: format name length and name, width and height (u32 LE), then the image bytes
//!   (every release so far wrote this; now only for images that fit one page with their key);
//! - tag `1`: the failure kind's byte ([`ProcessFailure::to_byte`]), then the message;
//! - tag `2`: as tag `0` up to the height, then the image's length (u64 LE); the bytes are in
//!   `variant_chunks`, under the key's length (u16 BE), the key and the chunk's index (u32 BE);
//! - tags `3` and `4`: as tags `0` and `2`, with what a `q=auto` search chose after the height:
//!   the encoder quality (one byte) and the score in tenths (i16 LE, `i16::MIN` for none).
//!   Rows without a search keep tags `0` and `2`, so files older releases wrote read the same.
//!
//! Why chunks: redb gives a pair larger than a page a run of pages rounded up to a power of
//! two, so a 40 KiB image inline takes 64 KiB and the file would hold up to twice what the
//! budget counts. Chunks sized to fill one 4 KiB page each waste only the last one's rest.
//!
//! Bookkeeping, updated in the same transaction as the rows it describes so it never drifts:
//! `variant_served` (key → last served, counted bytes), `variant_eviction_order` (the same
//! pairs keyed by last served first, so the least recently served is the first row) and
//! `variant_meta` (the total counted bytes). A file written before these tables existed gets
//! them filled at its first open, every variant stamped as served then.

use redb::{ReadTransaction, ReadableTable, Table, TableDefinition, WriteTransaction};

use imgcas_processors::{Chosen, OutputFormat, ProcessFailure};

use super::super::{Evicted, MapError, VariantBody, VariantKey, VariantRow, VariantTotals};

const TABLE: TableDefinition<&[u8], &[u8]> = TableDefinition::new("variants");
/// Key length (u16 BE) ‖ variant key ‖ chunk index (u32 BE) → a piece of a tag-`2` image.
const CHUNKS: TableDefinition<&[u8], &[u8]> = TableDefinition::new("variant_chunks");
/// Variant key → (last served, ms since the epoch; bytes counted for it).
const SERVED: TableDefinition<&[u8], (u64, u64)> = TableDefinition::new("variant_served");
/// (last served, variant key) → bytes counted: the eviction order.
const EVICTION_ORDER: TableDefinition<(u64, &[u8]), u64> =
    TableDefinition::new("variant_eviction_order");
const META: TableDefinition<&str, u64> = TableDefinition::new("variant_meta");
/// `variant_meta` key: the bytes all variants count for.
const COUNTED_BYTES: &str = "counted_bytes";
/// `variant_meta` key: present once the bookkeeping covers every variant.
const BOOKKEEPING: &str = "bookkeeping_version";
/// `variant_meta` keys: the images stored, their bytes and the cached errors
/// ([`VariantTotals`]), kept by every write; and present once they cover every variant.
const IMAGES: &str = "images";
const IMAGE_BYTES: &str = "image_bytes";
const ERRORS: &str = "errors";
const TOTALS_KEPT: &str = "totals_kept";

/// Key and value bytes of one pair that fills a 4 KiB leaf page by itself: redb's leaf takes
/// 4 bytes of header and 8 of lengths per pair; the rest is slack, should that change.
const PAIR_IN_A_PAGE: usize = 4000;

const INLINE: u8 = 0;
const FAILED: u8 = 1;
const CHUNKED: u8 = 2;
const INLINE_CHOSEN: u8 = 3;
const CHUNKED_CHOSEN: u8 = 4;

/// Opens the tables; on a file written before the bookkeeping, fills it for every variant
/// stored (stamped as served `now_ms`), so they count against the budget from this open.
pub(super) fn create(txn: &WriteTransaction, now_ms: u64) -> Result<(), MapError> {
    let table = txn.open_table(TABLE)?;
    txn.open_table(CHUNKS)?;
    let mut books = Books::open(txn)?;
    // Files written before the variants' totals were kept get them counted once.
    if books.meta.get(TOTALS_KEPT)?.is_none() {
        books.kept = VariantTotals::default();
        for row in table.iter()? {
            let (_, v) = row?;
            books.count(&counts_for(v.value())?);
        }
        books.meta.insert(TOTALS_KEPT, 1)?;
    }
    if books.meta.get(BOOKKEEPING)?.is_some() {
        return books.save();
    }
    // Files without the bookkeeping have only inline rows (tags 0 and 1).
    for row in table.iter()? {
        let (k, v) = row?;
        books.note(
            k.value(),
            now_ms,
            (k.value().len() + v.value().len()) as u64,
        )?;
    }
    books.meta.insert(BOOKKEEPING, 1)?;
    books.save()
}

/// The facts of a stored image, as its row's head holds them.
struct Head {
    format: OutputFormat,
    width: u32,
    height: u32,
    chosen: Option<Chosen>,
}

/// The head of a row of tag `plain` (`INLINE` or `CHUNKED`): that tag, or its counterpart
/// with a search's choice.
fn encode_head(plain: u8, head: &Head) -> Vec<u8> {
    let name = head.format.name().as_bytes();
    let mut out = Vec::with_capacity(HEAD_FIXED + CHOSEN_LEN + name.len() + 8);
    out.push(match (plain, head.chosen) {
        (INLINE, Some(_)) => INLINE_CHOSEN,
        (CHUNKED, Some(_)) => CHUNKED_CHOSEN,
        (tag, _) => tag,
    });
    out.push(name.len() as u8);
    out.extend_from_slice(name);
    out.extend_from_slice(&head.width.to_le_bytes());
    out.extend_from_slice(&head.height.to_le_bytes());
    if let Some(chosen) = head.chosen {
        out.push(chosen.quality);
        out.extend_from_slice(&chosen.score_tenths.unwrap_or(i16::MIN).to_le_bytes());
    }
    out
}

/// Bytes of a search's choice in a head: quality, score.
const CHOSEN_LEN: usize = 3;

/// Bytes of a head besides the format's name: tag, name length, width, height.
const HEAD_FIXED: usize = 10;

/// A row's value, and the pieces of the image that go with it (tag `2`), borrowed from the
/// row. Rows naming bytes elsewhere are refused: this file holds its variants' bytes.
fn encode<'r>(key: &[u8], row: &'r VariantRow) -> Result<(Vec<u8>, Vec<&'r [u8]>), MapError> {
    Ok(match row {
        VariantRow::Image {
            format,
            width,
            height,
            chosen,
            body: VariantBody::Inline(bytes),
        } => {
            let head = Head {
                format: *format,
                width: *width,
                height: *height,
                chosen: *chosen,
            };
            let chosen_len = if chosen.is_some() { CHOSEN_LEN } else { 0 };
            let inline_len =
                key.len() + HEAD_FIXED + chosen_len + format.name().len() + bytes.len();
            if inline_len <= PAIR_IN_A_PAGE {
                let mut value = encode_head(INLINE, &head);
                value.extend_from_slice(bytes);
                return Ok((value, Vec::new()));
            }
            let mut value = encode_head(CHUNKED, &head);
            value.extend_from_slice(&(bytes.len() as u64).to_le_bytes());
            let piece = PAIR_IN_A_PAGE - (key.len() + CHUNK_KEY_EXTRA);
            (value, bytes.chunks(piece).collect())
        }
        VariantRow::Image {
            body: VariantBody::InBlobStore { .. },
            ..
        } => {
            return Err(MapError::Store(
                "the embedded maps keep variant bytes in their rows, not in the blob store".into(),
            ))
        }
        VariantRow::Failed { kind, message } => {
            let mut out = vec![FAILED, kind.to_byte()];
            out.extend_from_slice(message.as_bytes());
            (out, Vec::new())
        }
    })
}

/// A row read back: complete, or an image whose bytes (of this length) are in chunks.
enum Decoded {
    Row(VariantRow),
    Chunked(Head, usize),
}

fn decode(raw: &[u8]) -> Result<Decoded, MapError> {
    let corrupt = || MapError::Corrupt("variant value".into());
    let tag = *raw.first().ok_or_else(corrupt)?;
    if tag == FAILED {
        let kind = raw
            .get(1)
            .and_then(|b| ProcessFailure::from_byte(*b))
            .ok_or_else(corrupt)?;
        let message = String::from_utf8_lossy(raw.get(2..).unwrap_or_default()).into();
        return Ok(Decoded::Row(VariantRow::Failed { kind, message }));
    }
    if ![INLINE, CHUNKED, INLINE_CHOSEN, CHUNKED_CHOSEN].contains(&tag) {
        return Err(corrupt());
    }
    let has_chosen = tag == INLINE_CHOSEN || tag == CHUNKED_CHOSEN;
    let len = usize::from(*raw.get(1).ok_or_else(corrupt)?);
    let name = raw.get(2..2 + len).ok_or_else(corrupt)?;
    let format = std::str::from_utf8(name)
        .ok()
        .and_then(OutputFormat::from_name)
        .ok_or_else(corrupt)?;
    let rest = raw.get(2 + len..).ok_or_else(corrupt)?;
    let field = |i: usize, n: usize| rest.get(i..i + n).ok_or_else(corrupt);
    let num = |i: usize| -> Result<u32, MapError> {
        Ok(u32::from_le_bytes(
            field(i, 4)?.try_into().map_err(|_| corrupt())?,
        ))
    };
    let chosen = match has_chosen {
        true => {
            let quality = *field(8, 1)?.first().ok_or_else(corrupt)?;
            let score = i16::from_le_bytes(field(9, 2)?.try_into().map_err(|_| corrupt())?);
            Some(Chosen {
                quality,
                score_tenths: (score != i16::MIN).then_some(score),
            })
        }
        false => None,
    };
    let after = if has_chosen { 8 + CHOSEN_LEN } else { 8 };
    let head = Head {
        format,
        width: num(0)?,
        height: num(4)?,
        chosen,
    };
    if tag == CHUNKED || tag == CHUNKED_CHOSEN {
        let total = u64::from_le_bytes(field(after, 8)?.try_into().map_err(|_| corrupt())?);
        return Ok(Decoded::Chunked(head, total as usize));
    }
    let bytes = bytes::Bytes::copy_from_slice(rest.get(after..).ok_or_else(corrupt)?);
    Ok(Decoded::Row(VariantRow::Image {
        format: head.format,
        width: head.width,
        height: head.height,
        chosen: head.chosen,
        body: VariantBody::Inline(bytes),
    }))
}

/// The key of chunk `index` of the variant stored under `key`: the key's length (u16 BE),
/// the key, the index (u32 BE). The length comes first so that one variant's chunks are a
/// range no other variant's fall into: without it, `…w=10`'s chunks would sort between
/// `…w=1`'s first and last.
fn chunk_key(key: &[u8], index: u32) -> Vec<u8> {
    let mut out = Vec::with_capacity(CHUNK_KEY_EXTRA + key.len());
    out.extend_from_slice(&(key.len() as u16).to_be_bytes());
    out.extend_from_slice(key);
    out.extend_from_slice(&index.to_be_bytes());
    out
}

/// Bytes a chunk's key adds to the variant key.
const CHUNK_KEY_EXTRA: usize = 6;

pub(super) fn get(txn: &ReadTransaction, key: &VariantKey) -> Result<Option<VariantRow>, MapError> {
    let table = txn.open_table(TABLE)?;
    let key = key.to_bytes();
    let Some(raw) = table.get(key.as_slice())? else {
        return Ok(None);
    };
    let (head, total) = match decode(raw.value())? {
        Decoded::Row(row) => return Ok(Some(row)),
        Decoded::Chunked(head, total) => (head, total),
    };
    let chunks = txn.open_table(CHUNKS)?;
    let mut bytes = Vec::with_capacity(total);
    let (first, last) = (chunk_key(&key, 0), chunk_key(&key, u32::MAX));
    for chunk in chunks.range(first.as_slice()..=last.as_slice())? {
        bytes.extend_from_slice(chunk?.1.value());
    }
    if bytes.len() != total {
        return Err(MapError::Corrupt(format!(
            "variant bytes: {} of {total} found",
            bytes.len()
        )));
    }
    Ok(Some(VariantRow::Image {
        format: head.format,
        width: head.width,
        height: head.height,
        chosen: head.chosen,
        body: VariantBody::Inline(bytes.into()),
    }))
}

/// Stores a row, stamped as served at `now_ms`. Returns the bytes it counts for.
pub(super) fn put(
    txn: &WriteTransaction,
    key: &VariantKey,
    row: &VariantRow,
    now_ms: u64,
) -> Result<u64, MapError> {
    let key = key.to_bytes();
    let (value, chunks) = encode(&key, row)?;
    let mut rows = Rows::open(txn)?;
    rows.remove(&key)?;
    rows.table.insert(key.as_slice(), value.as_slice())?;
    rows.books.count(&counts_for(&value)?);
    let mut size = (key.len() + value.len()) as u64;
    for (index, chunk) in chunks.iter().enumerate() {
        let chunk_key = chunk_key(&key, index as u32);
        rows.chunks.insert(chunk_key.as_slice(), chunk)?;
        size += (chunk_key.len() + chunk.len()) as u64;
    }
    rows.books.note(&key, now_ms, size)?;
    rows.books.save()?;
    Ok(size)
}

/// Moves the served stamps of stored variants forward.
pub(super) fn mark_served(
    txn: &WriteTransaction,
    served_at: &[(VariantKey, u64)],
) -> Result<(), MapError> {
    let mut books = Books::open(txn)?;
    for (key, at) in served_at {
        let key = key.to_bytes();
        let Some((was, size)) = books.served.get(key.as_slice())?.map(|g| g.value()) else {
            continue;
        };
        if *at > was {
            books.order.remove((was, key.as_slice()))?;
            books.order.insert((*at, key.as_slice()), size)?;
            books.served.insert(key.as_slice(), (*at, size))?;
        }
    }
    Ok(())
}

/// Up to `limit` variant keys after `after`, in key order.
pub(super) fn keys_page(
    txn: &ReadTransaction,
    after: Option<&[u8]>,
    limit: usize,
) -> Result<Vec<VariantKey>, MapError> {
    super::page_of(txn, TABLE, after, limit, "variants", |k, _| {
        VariantKey::from_bytes(k)
            .map(Some)
            .ok_or_else(|| MapError::Corrupt("key".into()))
    })
}

/// Every variant of one original (keys start with its hash), with its counted bytes.
pub(super) fn of_hash(
    txn: &ReadTransaction,
    hash: &crate::hash::ContentHash,
) -> Result<Vec<(VariantKey, u64)>, MapError> {
    let served = txn.open_table(SERVED)?;
    let mut out = Vec::new();
    for row in served.range(hash.as_bytes().as_slice()..)? {
        let (k, v) = row?;
        if !k.value().starts_with(hash.as_bytes()) {
            break;
        }
        let key = VariantKey::from_bytes(k.value())
            .ok_or_else(|| MapError::Corrupt("variant key".into()))?;
        out.push((key, v.value().1));
    }
    Ok(out)
}

pub(super) fn remove(txn: &WriteTransaction, keys: &[VariantKey]) -> Result<u64, MapError> {
    let mut rows = Rows::open(txn)?;
    let mut removed = 0;
    for key in keys {
        removed += u64::from(rows.remove(&key.to_bytes())?);
    }
    rows.books.save()?;
    Ok(removed)
}

/// Rows one eviction transaction drops at most (the caller repeats while over target), so
/// one transaction stays short.
const EVICTION_BATCH: usize = 4096;

/// Drops least recently served variants until at most `target` bytes are counted, or one
/// batch is done. Returns what it dropped and whether to stop: the target is met, or
/// nothing is left to drop.
pub(super) fn evict(txn: &WriteTransaction, target: u64) -> Result<(Evicted, bool), MapError> {
    let mut rows = Rows::open(txn)?;
    let mut doomed = Vec::new();
    {
        let mut left = rows.books.total;
        for row in rows.books.order.iter()? {
            if left <= target || doomed.len() >= EVICTION_BATCH {
                break;
            }
            let (k, size) = row?;
            left = left.saturating_sub(size.value());
            doomed.push(k.value().1.to_vec());
        }
    }
    let mut keys = Vec::with_capacity(doomed.len());
    for key in &doomed {
        rows.remove(key)?;
        // A key no release writes cannot be named to the caller; dropping it is still right.
        keys.extend(VariantKey::from_bytes(key));
    }
    let remaining_bytes = rows.books.total;
    let done = remaining_bytes <= target || doomed.is_empty();
    rows.books.save()?;
    Ok((
        Evicted {
            keys,
            remaining_bytes,
        },
        done,
    ))
}

pub(super) fn counted_bytes(txn: &ReadTransaction) -> Result<u64, MapError> {
    let meta = txn.open_table(META)?;
    Ok(meta.get(COUNTED_BYTES)?.map_or(0, |g| g.value()))
}

/// The stored images, their bytes and the cached errors, as kept by every write
/// ([`Books`]).
pub(super) fn totals(txn: &ReadTransaction) -> Result<VariantTotals, MapError> {
    let meta = txn.open_table(META)?;
    let get = |key: &str| -> Result<u64, MapError> { Ok(meta.get(key)?.map_or(0, |g| g.value())) };
    Ok(VariantTotals {
        images: get(IMAGES)?,
        image_bytes: get(IMAGE_BYTES)?,
        errors: get(ERRORS)?,
    })
}

/// Whether a row's tag says its image's bytes are in chunks beside it.
fn is_chunked(raw: &[u8]) -> bool {
    matches!(raw.first(), Some(&CHUNKED) | Some(&CHUNKED_CHOSEN))
}

/// What one stored row counts for in [`VariantTotals`]: an image and its bytes, or a cached
/// error. The tag tells them apart; only a chunked image's head is read further, for its
/// length.
fn counts_for(raw: &[u8]) -> Result<VariantTotals, MapError> {
    Ok(match raw.first() {
        Some(&FAILED) => VariantTotals {
            errors: 1,
            ..VariantTotals::default()
        },
        _ if is_chunked(raw) => {
            let Decoded::Chunked(_, len) = decode(raw)? else {
                return Err(MapError::Corrupt("variant value".into()));
            };
            VariantTotals {
                images: 1,
                image_bytes: (raw.len() + len) as u64,
                errors: 0,
            }
        }
        _ => VariantTotals {
            images: 1,
            image_bytes: raw.len() as u64,
            errors: 0,
        },
    })
}

/// The rows, their chunks and the bookkeeping, open in one write transaction.
struct Rows<'t> {
    table: Table<'t, &'static [u8], &'static [u8]>,
    chunks: Table<'t, &'static [u8], &'static [u8]>,
    books: Books<'t>,
}

impl<'t> Rows<'t> {
    fn open(txn: &'t WriteTransaction) -> Result<Self, MapError> {
        Ok(Rows {
            table: txn.open_table(TABLE)?,
            chunks: txn.open_table(CHUNKS)?,
            books: Books::open(txn)?,
        })
    }

    /// Drops a variant: its row, its chunks, its count. Returns whether it was stored.
    fn remove(&mut self, key: &[u8]) -> Result<bool, MapError> {
        let chunked = match self.table.remove(key)? {
            None => return Ok(false),
            Some(old) => {
                self.books.uncount(&counts_for(old.value())?);
                // (A chunked image with a search's choice has chunks too: before this,
                // their removal missed them.)
                is_chunked(old.value())
            }
        };
        if chunked {
            let (first, last) = (chunk_key(key, 0), chunk_key(key, u32::MAX));
            self.chunks
                .retain_in(first.as_slice()..=last.as_slice(), |_, _| false)?;
        }
        self.books.forget(key)?;
        Ok(true)
    }
}

/// The bookkeeping tables open in one write transaction, with the running total.
struct Books<'t> {
    served: Table<'t, &'static [u8], (u64, u64)>,
    order: Table<'t, (u64, &'static [u8]), u64>,
    meta: Table<'t, &'static str, u64>,
    total: u64,
    /// The images, their bytes and the errors stored (issue 69: kept, not walked).
    kept: VariantTotals,
}

impl<'t> Books<'t> {
    fn open(txn: &'t WriteTransaction) -> Result<Self, MapError> {
        let meta = txn.open_table(META)?;
        let total = meta.get(COUNTED_BYTES)?.map_or(0, |g| g.value());
        let get =
            |key: &str| -> Result<u64, MapError> { Ok(meta.get(key)?.map_or(0, |g| g.value())) };
        let kept = VariantTotals {
            images: get(IMAGES)?,
            image_bytes: get(IMAGE_BYTES)?,
            errors: get(ERRORS)?,
        };
        Ok(Books {
            served: txn.open_table(SERVED)?,
            order: txn.open_table(EVICTION_ORDER)?,
            meta,
            total,
            kept,
        })
    }

    /// Counts a stored row in the kept totals.
    fn count(&mut self, row: &VariantTotals) {
        self.kept.images += row.images;
        self.kept.image_bytes += row.image_bytes;
        self.kept.errors += row.errors;
    }

    /// Stops counting a stored row in the kept totals.
    fn uncount(&mut self, row: &VariantTotals) {
        self.kept.images = self.kept.images.saturating_sub(row.images);
        self.kept.image_bytes = self.kept.image_bytes.saturating_sub(row.image_bytes);
        self.kept.errors = self.kept.errors.saturating_sub(row.errors);
    }

    /// Counts a variant, served at `at`.
    fn note(&mut self, key: &[u8], at: u64, size: u64) -> Result<(), MapError> {
        self.served.insert(key, (at, size))?;
        self.order.insert((at, key), size)?;
        self.total += size;
        Ok(())
    }

    /// Stops counting a variant (nothing when it was not counted).
    fn forget(&mut self, key: &[u8]) -> Result<(), MapError> {
        if let Some((at, size)) = self.served.remove(key)?.map(|g| g.value()) {
            self.order.remove((at, key))?;
            self.total = self.total.saturating_sub(size);
        }
        Ok(())
    }

    fn save(mut self) -> Result<(), MapError> {
        self.meta.insert(COUNTED_BYTES, self.total)?;
        self.meta.insert(IMAGES, self.kept.images)?;
        self.meta.insert(IMAGE_BYTES, self.kept.image_bytes)?;
        self.meta.insert(ERRORS, self.kept.errors)?;
        Ok(())
    }
}

use super::*;

#[async_trait]
impl Variants for RedbStore {
    async fn variant(&self, key: &VariantKey) -> Result<Option<VariantRow>, MapError> {
        let key = key.clone();
        self.db
            .run(move |db| variants::get(&db.read()?, &key))
            .await
    }

    async fn put_variant(&self, key: &VariantKey, row: &VariantRow) -> Result<(), MapError> {
        let (key, row) = (key.clone(), row.clone());
        self.db
            .run(move |db| {
                let (size, seq) = db.write(|txn| variants::put(txn, &key, &row, now_ms()))?;
                if db.unsynced_bytes.fetch_add(size, Ordering::Relaxed) + size >= SYNC_AFTER_BYTES {
                    db.sync(seq)?;
                }
                Ok(())
            })
            .await
    }

    async fn mark_variants_served(&self, served: &[(VariantKey, u64)]) -> Result<(), MapError> {
        if served.is_empty() {
            return Ok(());
        }
        let served = served.to_vec();
        self.db
            .run(move |db| {
                db.write(|txn| variants::mark_served(txn, &served))
                    .map(|_| ())
            })
            .await
    }

    async fn variant_bytes(&self) -> Result<u64, MapError> {
        self.db.run(|db| variants::counted_bytes(&db.read()?)).await
    }

    async fn evict_variants(&self, target_bytes: u64) -> Result<Evicted, MapError> {
        self.db
            .run(move |db| {
                let mut all = Evicted::default();
                loop {
                    let ((batch, done), _) = db.write(|txn| variants::evict(txn, target_bytes))?;
                    all.keys.extend(batch.keys);
                    all.remaining_bytes = batch.remaining_bytes;
                    if done {
                        return Ok(all);
                    }
                }
            })
            .await
    }

    async fn variant_keys_page(
        &self,
        after: Option<&VariantKey>,
        limit: usize,
    ) -> Result<Vec<VariantKey>, MapError> {
        let after = after.map(VariantKey::to_bytes);
        self.db
            .run(move |db| variants::keys_page(&db.read()?, after.as_deref(), limit))
            .await
    }

    async fn remove_variants(&self, keys: &[VariantKey]) -> Result<u64, MapError> {
        if keys.is_empty() {
            return Ok(0);
        }
        let keys = keys.to_vec();
        self.db
            .run(move |db| db.write(|txn| variants::remove(txn, &keys)).map(|(n, _)| n))
            .await
    }

    async fn variant_totals(&self) -> Result<VariantTotals, MapError> {
        self.db.run(|db| variants::totals(&db.read()?)).await
    }

    async fn variants_of(&self, hash: &ContentHash) -> Result<Vec<(VariantKey, u64)>, MapError> {
        let hash = *hash;
        self.db
            .run(move |db| variants::of_hash(&db.read()?, &hash))
            .await
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn round_trip(key: &[u8], row: &VariantRow) -> VariantRow {
        let (value, chunks) = encode(key, row).unwrap();
        match decode(&value).unwrap() {
            Decoded::Row(row) => {
                assert!(chunks.is_empty());
                row
            }
            Decoded::Chunked(head, total) => {
                let bytes: Vec<u8> = chunks.concat();
                assert_eq!(bytes.len(), total);
                VariantRow::Image {
                    format: head.format,
                    width: head.width,
                    height: head.height,
                    chosen: head.chosen,
                    body: VariantBody::Inline(bytes.into()),
                }
            }
        }
    }

    #[test]
    fn values_round_trip() {
        let image = |bytes: Vec<u8>, chosen| VariantRow::Image {
            format: OutputFormat::Webp,
            width: 400,
            height: 300,
            chosen,
            body: VariantBody::Inline(bytes.into()),
        };
        let searched = |score_tenths| {
            Some(Chosen {
                quality: 77,
                score_tenths,
            })
        };
        for v in [
            image(b"RIFF....".to_vec(), None),
            image(vec![7; 100_000], None),
            image(b"RIFF....".to_vec(), searched(Some(703))),
            image(vec![7; 100_000], searched(Some(-12))),
            image(b"RIFF....".to_vec(), searched(None)),
            VariantRow::Failed {
                kind: ProcessFailure::Undecodable,
                message: "bad huffman table".into(),
            },
        ] {
            assert_eq!(round_trip(b"key", &v), v);
        }
        assert!(decode(&[0, 200]).is_err());
        assert!(decode(&[]).is_err());
        assert!(decode(&[1, 9]).is_err());
        assert!(decode(&[2, 4, b'w', b'e', b'b', b'p', 0, 0]).is_err());
        // A search's choice cut short.
        assert!(decode(&[3, 4, b'w', b'e', b'b', b'p', 1, 0, 0, 0, 1, 0, 0, 0, 70]).is_err());
    }

    /// A large image with a search's choice (stored in chunks under its own tag) leaves no
    /// chunk behind when it is replaced or removed (before, its chunks stayed: only the
    /// plain chunked tag was looked for), and the kept totals follow every write.
    #[test]
    fn chunks_of_a_chosen_image_go_with_it_and_the_totals_follow() {
        let db = redb::Database::builder()
            .create_with_backend(redb::backends::InMemoryBackend::new())
            .unwrap();
        let key = VariantKey {
            hash: crate::hash::ContentHash::of(b"chosen"),
            canonical_spec: "format=webp&q=auto".into(),
            processor_version: 12,
        };
        let large = VariantRow::Image {
            format: OutputFormat::Webp,
            width: 1,
            height: 1,
            chosen: Some(Chosen {
                quality: 70,
                score_tenths: Some(700),
            }),
            body: VariantBody::Inline(vec![9; 50_000].into()),
        };
        let failed = VariantRow::Failed {
            kind: ProcessFailure::Undecodable,
            message: "no".into(),
        };
        let chunks = |db: &redb::Database| {
            let txn = db.begin_read().unwrap();
            let n = txn.open_table(CHUNKS).unwrap().iter().unwrap().count();
            (n, totals(&txn).unwrap())
        };
        let write = |f: &dyn Fn(&WriteTransaction)| {
            let txn = db.begin_write().unwrap();
            f(&txn);
            txn.commit().unwrap();
        };
        write(&|txn| create(txn, 1).unwrap());
        write(&|txn| {
            put(txn, &key, &large, 1).unwrap();
        });
        let (n, kept) = chunks(&db);
        assert!(n > 1, "stored in chunks");
        assert_eq!((kept.images, kept.errors), (1, 0));
        assert!(kept.image_bytes > 50_000);
        write(&|txn| {
            put(txn, &key, &failed, 2).unwrap();
        });
        assert_eq!(
            chunks(&db),
            (
                0,
                VariantTotals {
                    images: 0,
                    image_bytes: 0,
                    errors: 1
                }
            ),
            "replaced: no chunk left"
        );
        write(&|txn| {
            put(txn, &key, &large, 3).unwrap();
        });
        write(&|txn| {
            remove(txn, std::slice::from_ref(&key)).unwrap();
        });
        assert_eq!(chunks(&db), (0, VariantTotals::default()), "removed");
    }

    #[test]
    fn a_chunk_and_its_key_fill_one_page() {
        let key = vec![0; 80];
        let row = VariantRow::Image {
            format: OutputFormat::Jpeg,
            width: 1,
            height: 1,
            chosen: None,
            body: VariantBody::Inline(vec![1; 50_000].into()),
        };
        let (value, chunks) = encode(&key, &row).unwrap();
        assert_eq!(value[0], CHUNKED);
        assert!(chunks.len() > 1);
        for chunk in &chunks[..chunks.len() - 1] {
            assert_eq!(chunk_key(&key, 0).len() + chunk.len(), PAIR_IN_A_PAGE);
        }
    }
}
