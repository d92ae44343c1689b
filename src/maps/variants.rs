//! Variants: (original hash, resolved canonical spec, processor version) → the processed bytes
//! or the permanent processing error. Errors are results too: a corrupt original is decoded
//! once per spec, not once per request.
//!
//! Value layout (compact, read on every hit): tag `0`, format name length and name, width and
//! height (u32 LE), then the image bytes; or tag `1`, failure kind byte, then the message.

use redb::{TableDefinition, WriteTransaction};

use imgcas_processors::OutputFormat;

use super::{Db, MapError};
use crate::error::ProcessFailure;
use crate::hash::ContentHash;

const TABLE: TableDefinition<&[u8], &[u8]> = TableDefinition::new("variants");

/// The identity of one variant. Its bytes are the table key; hashing them gives the ETag.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct VariantKey {
    pub hash: ContentHash,
    pub canonical_spec: String,
    pub processor_version: u32,
}

impl VariantKey {
    /// `hash ‖ version (u32 BE) ‖ canonical spec`: the hash first, so one original's variants
    /// sit together.
    pub fn to_bytes(&self) -> Vec<u8> {
        let mut out = Vec::with_capacity(36 + self.canonical_spec.len());
        out.extend_from_slice(self.hash.as_bytes());
        out.extend_from_slice(&self.processor_version.to_be_bytes());
        out.extend_from_slice(self.canonical_spec.as_bytes());
        out
    }
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum StoredVariant {
    Image {
        format: OutputFormat,
        width: u32,
        height: u32,
        bytes: bytes::Bytes,
    },
    Failed {
        kind: ProcessFailure,
        message: String,
    },
}

fn kind_byte(kind: ProcessFailure) -> u8 {
    match kind {
        ProcessFailure::UnsupportedFormat => 1,
        ProcessFailure::Undecodable => 2,
        ProcessFailure::TooManyPixels => 3,
        ProcessFailure::SourceTooSmall => 4,
    }
}

impl StoredVariant {
    fn encode(&self) -> Vec<u8> {
        match self {
            StoredVariant::Image {
                format,
                width,
                height,
                bytes,
            } => {
                let name = format.name().as_bytes();
                let mut out = Vec::with_capacity(10 + name.len() + bytes.len());
                out.push(0);
                out.push(name.len() as u8);
                out.extend_from_slice(name);
                out.extend_from_slice(&width.to_le_bytes());
                out.extend_from_slice(&height.to_le_bytes());
                out.extend_from_slice(bytes);
                out
            }
            StoredVariant::Failed { kind, message } => {
                let mut out = vec![1, kind_byte(*kind)];
                out.extend_from_slice(message.as_bytes());
                out
            }
        }
    }

    fn decode(raw: &[u8]) -> Result<StoredVariant, MapError> {
        let corrupt = || MapError::Corrupt("variant value".into());
        match raw.first() {
            Some(0) => {
                let len = usize::from(*raw.get(1).ok_or_else(corrupt)?);
                let name = raw.get(2..2 + len).ok_or_else(corrupt)?;
                let format = std::str::from_utf8(name)
                    .ok()
                    .and_then(OutputFormat::from_name)
                    .ok_or_else(corrupt)?;
                let rest = raw.get(2 + len..).ok_or_else(corrupt)?;
                let num = |i: usize| -> Result<u32, MapError> {
                    let b: [u8; 4] = rest
                        .get(i..i + 4)
                        .and_then(|s| s.try_into().ok())
                        .ok_or_else(corrupt)?;
                    Ok(u32::from_le_bytes(b))
                };
                Ok(StoredVariant::Image {
                    format,
                    width: num(0)?,
                    height: num(4)?,
                    bytes: bytes::Bytes::copy_from_slice(rest.get(8..).ok_or_else(corrupt)?),
                })
            }
            Some(1) => {
                let kind = match raw.get(1) {
                    Some(1) => ProcessFailure::UnsupportedFormat,
                    Some(2) => ProcessFailure::Undecodable,
                    Some(3) => ProcessFailure::TooManyPixels,
                    Some(4) => ProcessFailure::SourceTooSmall,
                    _ => return Err(corrupt()),
                };
                let message = String::from_utf8_lossy(raw.get(2..).unwrap_or_default()).into();
                Ok(StoredVariant::Failed { kind, message })
            }
            _ => Err(corrupt()),
        }
    }
}

/// What the variants map holds.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct VariantTotals {
    pub images: u64,
    /// Encoded size, as stored (a few bytes of header per image included).
    pub image_bytes: u64,
    pub errors: u64,
}

#[derive(Clone)]
pub struct VariantMap {
    pub(crate) db: Db,
}

pub(super) fn create(txn: &WriteTransaction) -> Result<(), MapError> {
    txn.open_table(TABLE)?;
    Ok(())
}

impl VariantMap {
    pub fn get(&self, key: &VariantKey) -> Result<Option<StoredVariant>, MapError> {
        let txn = self.db.read()?;
        let table = txn.open_table(TABLE)?;
        let raw = table.get(key.to_bytes().as_slice())?;
        raw.map(|r| StoredVariant::decode(r.value())).transpose()
    }

    /// Stores a result without an fsync: a lost variant is recomputed, never wrong.
    pub fn put(&self, key: &VariantKey, variant: &StoredVariant) -> Result<(), MapError> {
        let value = variant.encode();
        self.db
            .write(|txn| {
                txn.open_table(TABLE)?
                    .insert(key.to_bytes().as_slice(), value.as_slice())?;
                Ok(())
            })
            .map(|((), _)| ())
    }

    /// Counts the variants whose original fails `keep`, and with `remove` drops them (they
    /// would never be served: nothing resolves to an unindexed hash).
    pub fn sweep_sources(
        &self,
        keep: impl Fn(&ContentHash) -> bool,
        remove: bool,
    ) -> Result<u64, MapError> {
        let doomed: Vec<Vec<u8>> = {
            let txn = self.db.read()?;
            let table = txn.open_table(TABLE)?;
            let mut out = Vec::new();
            for row in redb::ReadableTable::iter(&table)? {
                let (k, _) = row?;
                let key = k.value();
                let source = key.get(..32).and_then(ContentHash::from_slice);
                if !source.is_some_and(|h| keep(&h)) {
                    out.push(key.to_vec());
                }
            }
            out
        };
        if remove && !doomed.is_empty() {
            self.db.write(|txn| {
                let mut table = txn.open_table(TABLE)?;
                for key in &doomed {
                    table.remove(key.as_slice())?;
                }
                Ok(())
            })?;
        }
        Ok(doomed.len() as u64)
    }

    /// Stored images and their bytes, and cached errors (for `imgcas stats`).
    pub fn totals(&self) -> Result<VariantTotals, MapError> {
        let txn = self.db.read()?;
        let table = txn.open_table(TABLE)?;
        let mut totals = VariantTotals::default();
        for row in redb::ReadableTable::iter(&table)? {
            let (_, v) = row?;
            // The first byte tells an image (0) from a cached error (1).
            if v.value().first() == Some(&0) {
                totals.images += 1;
                totals.image_bytes += v.value().len() as u64;
            } else {
                totals.errors += 1;
            }
        }
        Ok(totals)
    }

    /// How many variants are stored.
    pub fn len(&self) -> Result<u64, MapError> {
        use redb::ReadableTableMetadata;
        let txn = self.db.read()?;
        Ok(txn.open_table(TABLE)?.len()?)
    }

    pub fn is_empty(&self) -> Result<bool, MapError> {
        Ok(self.len()? == 0)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn values_round_trip() {
        for v in [
            StoredVariant::Image {
                format: OutputFormat::Webp,
                width: 400,
                height: 300,
                bytes: bytes::Bytes::from_static(b"RIFF...."),
            },
            StoredVariant::Failed {
                kind: ProcessFailure::Undecodable,
                message: "bad huffman table".into(),
            },
        ] {
            assert_eq!(StoredVariant::decode(&v.encode()).unwrap(), v);
        }
        assert!(StoredVariant::decode(&[0, 200]).is_err());
        assert!(StoredVariant::decode(&[]).is_err());
    }
}
