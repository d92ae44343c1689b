//! A bounded reader over bytes, for the hand-written container walkers: every field read
//! checks the bytes present, and a count a file declares is checked against what the bytes
//! left can hold before anything loops over it. A read past the end is an error, never a
//! zero, so a walker stops where its box or chunk ends. (An AVIF of 5.6 KB that declared
//! 2^32 property associations kept a core busy for seconds reading zeros past its end.)

use std::fmt;

/// What a walker asked for that the bytes do not hold.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Short {
    /// What was being read (`"ipma entries"`).
    pub what: &'static str,
    /// How many bytes it needed, at the least, and how many were left.
    pub needed: u64,
    pub left: usize,
}

impl fmt::Display for Short {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{} need at least {} bytes, {} are left",
            self.what, self.needed, self.left
        )
    }
}

/// Reads fields in order from a slice, never past its end.
#[derive(Debug, Clone)]
pub struct Reader<'a> {
    bytes: &'a [u8],
    at: usize,
}

impl<'a> Reader<'a> {
    pub fn new(bytes: &'a [u8]) -> Self {
        Reader { bytes, at: 0 }
    }

    /// Bytes not read yet.
    pub fn left(&self) -> usize {
        self.bytes.len() - self.at
    }

    /// Where the next read starts, from the start of the slice.
    pub fn position(&self) -> usize {
        self.at
    }

    /// The next `n` bytes.
    pub fn take(&mut self, n: usize, what: &'static str) -> Result<&'a [u8], Short> {
        if n > self.left() {
            return Err(Short {
                what,
                needed: n as u64,
                left: self.left(),
            });
        }
        let taken = &self.bytes[self.at..self.at + n];
        self.at += n;
        Ok(taken)
    }

    pub fn u8(&mut self, what: &'static str) -> Result<u8, Short> {
        Ok(self.take(1, what)?[0])
    }

    /// The next `N` bytes, as an array.
    fn array<const N: usize>(&mut self, what: &'static str) -> Result<[u8; N], Short> {
        let mut out = [0; N];
        out.copy_from_slice(self.take(N, what)?);
        Ok(out)
    }

    pub fn u16be(&mut self, what: &'static str) -> Result<u16, Short> {
        self.array(what).map(u16::from_be_bytes)
    }

    pub fn u32be(&mut self, what: &'static str) -> Result<u32, Short> {
        self.array(what).map(u32::from_be_bytes)
    }

    pub fn u16le(&mut self, what: &'static str) -> Result<u16, Short> {
        self.array(what).map(u16::from_le_bytes)
    }

    pub fn u32le(&mut self, what: &'static str) -> Result<u32, Short> {
        self.array(what).map(u32::from_le_bytes)
    }

    /// The next `declared` bytes of a chunk or box whose length the file gives: an error when
    /// fewer are left (a length is checked like a count, never trusted past the end).
    pub fn chunk(&mut self, declared: u64, what: &'static str) -> Result<&'a [u8], Short> {
        let n = self.count(declared, 1, what)?;
        self.take(n, what)
    }

    /// A declared count of entries, each at least `entry_bytes` long (at least 1: an entry
    /// of no bytes would let any count through): as a `usize` when the bytes left can hold
    /// that many, else an error before any entry is read.
    pub fn count(
        &self,
        declared: u64,
        entry_bytes: usize,
        what: &'static str,
    ) -> Result<usize, Short> {
        let needed = declared.saturating_mul(entry_bytes.max(1) as u64);
        if needed > self.left() as u64 {
            return Err(Short {
                what,
                needed,
                left: self.left(),
            });
        }
        // Within the slice's length, so within usize.
        Ok(declared as usize)
    }
}

/// Fields at fixed offsets of a known layout (a header's width at byte 4): `None` when the
/// bytes end before the field does, never a read past them. For walks, [`Reader`].
pub fn array_at<const N: usize>(b: &[u8], at: usize) -> Option<[u8; N]> {
    b.get(at..at.checked_add(N)?)?.try_into().ok()
}

pub fn u16be_at(b: &[u8], at: usize) -> Option<u16> {
    array_at(b, at).map(u16::from_be_bytes)
}

pub fn u32be_at(b: &[u8], at: usize) -> Option<u32> {
    array_at(b, at).map(u32::from_be_bytes)
}

pub fn u64be_at(b: &[u8], at: usize) -> Option<u64> {
    array_at(b, at).map(u64::from_be_bytes)
}

pub fn u16le_at(b: &[u8], at: usize) -> Option<u16> {
    array_at(b, at).map(u16::from_le_bytes)
}

/// A 24-bit little-endian field (WebP's canvas sides).
pub fn u24le_at(b: &[u8], at: usize) -> Option<u32> {
    array_at(b, at).map(|[x, y, z]| u32::from_le_bytes([x, y, z, 0]))
}

pub fn u32le_at(b: &[u8], at: usize) -> Option<u32> {
    array_at(b, at).map(u32::from_le_bytes)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_stop_at_the_end() {
        let mut r = Reader::new(&[0, 1, 2, 3, 4]);
        assert_eq!(r.u16be("a"), Ok(1));
        assert_eq!(r.u8("b"), Ok(2));
        assert_eq!(r.position(), 3);
        let short = r.u32be("c").unwrap_err();
        assert_eq!((short.needed, short.left), (4, 2));
        // A failed read takes nothing.
        assert_eq!(r.take(2, "d"), Ok(&[3u8, 4][..]));
        assert_eq!(r.left(), 0);
        assert!(r.u8("e").is_err());
    }

    #[test]
    fn little_endian_fields_and_declared_chunks() {
        let mut r = Reader::new(&[1, 0, 2, 0, 0, 0, 9, 9, 9]);
        assert_eq!(r.u16le("a"), Ok(1));
        assert_eq!(r.u32le("b"), Ok(2));
        assert!(r.chunk(4, "c").is_err());
        assert!(r.chunk(u64::from(u32::MAX), "c").is_err());
        assert_eq!(r.chunk(3, "c"), Ok(&[9u8, 9, 9][..]));
    }

    #[test]
    fn a_count_the_bytes_cannot_hold_is_refused_before_any_entry() {
        let r = Reader::new(&[0; 12]);
        assert_eq!(r.count(4, 3, "entries"), Ok(4));
        assert!(r.count(5, 3, "entries").is_err());
        assert!(r.count(u64::from(u32::MAX), 3, "entries").is_err());
        assert!(r.count(u64::MAX, 2, "entries").is_err());
        assert_eq!(r.count(0, 3, "entries"), Ok(0));
        // Entries said to be of no bytes count as one byte each.
        assert!(r.count(13, 0, "entries").is_err());
    }

    #[test]
    fn fields_at_offsets_end_with_the_bytes() {
        let b = [1, 2, 3, 4, 5, 6, 7, 8];
        assert_eq!(u16be_at(&b, 0), Some(0x0102));
        assert_eq!(u32be_at(&b, 4), Some(0x05060708));
        assert_eq!(u64be_at(&b, 0), Some(0x0102030405060708));
        assert_eq!(u16le_at(&b, 6), Some(0x0807));
        assert_eq!(u24le_at(&b, 0), Some(0x030201));
        assert_eq!(u32le_at(&b, 4), Some(0x08070605));
        assert_eq!(u32be_at(&b, 5), None);
        assert_eq!(u16le_at(&b, usize::MAX), None);
    }
}
