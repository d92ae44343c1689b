//! The variants table: [`VariantKey::to_bytes`] → the row, bytes inline.
//!
//! Value layout (compact, read on every hit; unchanged since the first release): tag `0`,
//! format name length and name, width and height (u32 LE), then the image bytes; or tag `1`,
//! the failure kind's byte ([`ProcessFailure::to_byte`]), then the message.

use redb::{ReadTransaction, ReadableTable, TableDefinition, WriteTransaction};

use imgcas_processors::{OutputFormat, ProcessFailure};

use super::super::{MapError, VariantBody, VariantKey, VariantRow, VariantTotals};

const TABLE: TableDefinition<&[u8], &[u8]> = TableDefinition::new("variants");

pub(super) fn create(txn: &WriteTransaction) -> Result<(), MapError> {
    txn.open_table(TABLE)?;
    Ok(())
}

fn encode(row: &VariantRow) -> Vec<u8> {
    match row {
        VariantRow::Image {
            format,
            width,
            height,
            body: VariantBody::Inline(bytes),
        } => {
            let name = format.name().as_bytes();
            let mut out = Vec::with_capacity(2 + name.len() + 8 + bytes.len());
            out.push(0);
            out.push(name.len() as u8);
            out.extend_from_slice(name);
            out.extend_from_slice(&width.to_le_bytes());
            out.extend_from_slice(&height.to_le_bytes());
            out.extend_from_slice(bytes);
            out
        }
        VariantRow::Failed { kind, message } => {
            let mut out = vec![1, kind.to_byte()];
            out.extend_from_slice(message.as_bytes());
            out
        }
    }
}

fn decode(raw: &[u8]) -> Result<VariantRow, MapError> {
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
            let bytes = bytes::Bytes::copy_from_slice(rest.get(8..).ok_or_else(corrupt)?);
            Ok(VariantRow::Image {
                format,
                width: num(0)?,
                height: num(4)?,
                body: VariantBody::Inline(bytes),
            })
        }
        Some(1) => {
            let kind = raw
                .get(1)
                .and_then(|b| ProcessFailure::from_byte(*b))
                .ok_or_else(corrupt)?;
            let message = String::from_utf8_lossy(raw.get(2..).unwrap_or_default()).into();
            Ok(VariantRow::Failed { kind, message })
        }
        _ => Err(corrupt()),
    }
}

pub(super) fn get(txn: &ReadTransaction, key: &VariantKey) -> Result<Option<VariantRow>, MapError> {
    let table = txn.open_table(TABLE)?;
    let raw = table.get(key.to_bytes().as_slice())?;
    raw.map(|r| decode(r.value())).transpose()
}

pub(super) fn put(
    txn: &WriteTransaction,
    key: &VariantKey,
    row: &VariantRow,
) -> Result<(), MapError> {
    txn.open_table(TABLE)?
        .insert(key.to_bytes().as_slice(), encode(row).as_slice())?;
    Ok(())
}

pub(super) fn keys(txn: &ReadTransaction) -> Result<Vec<VariantKey>, MapError> {
    super::keys_of(txn, TABLE, "variants", VariantKey::from_bytes)
}

pub(super) fn remove(txn: &WriteTransaction, keys: &[VariantKey]) -> Result<u64, MapError> {
    let mut table = txn.open_table(TABLE)?;
    let mut removed = 0;
    for key in keys {
        removed += u64::from(table.remove(key.to_bytes().as_slice())?.is_some());
    }
    Ok(removed)
}

pub(super) fn totals(txn: &ReadTransaction) -> Result<VariantTotals, MapError> {
    let table = txn.open_table(TABLE)?;
    let mut totals = VariantTotals::default();
    for row in table.iter()? {
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn values_round_trip() {
        for v in [
            VariantRow::Image {
                format: OutputFormat::Webp,
                width: 400,
                height: 300,
                body: VariantBody::Inline(bytes::Bytes::from_static(b"RIFF....")),
            },
            VariantRow::Failed {
                kind: ProcessFailure::Undecodable,
                message: "bad huffman table".into(),
            },
        ] {
            assert_eq!(decode(&encode(&v)).unwrap(), v);
        }
        assert!(decode(&[0, 200]).is_err());
        assert!(decode(&[]).is_err());
        assert!(decode(&[1, 9]).is_err());
    }
}
