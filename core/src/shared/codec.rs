//! Versioned, checksummed binary envelope for values kept in a host's shared store.
//!
//! Layout (all integers little-endian):
//!
//! ```text
//! +-------+---------+------+-------------------+---------+
//! | magic | version | kind | payload           | crc32   |
//! | "FW"  | u8      | u8   | ...               | u32 LE  |
//! +-------+---------+------+-------------------+---------+
//! ```
//!
//! The CRC-32 (IEEE) covers every byte before it. Decoding checks, in order: length,
//! magic, version (a newer version than [`SCHEMA_VERSION`] is reported as
//! [`DecodeError::FutureVersion`] so old code running next to new code during a config
//! drain leaves it alone; one older than [`MIN_SCHEMA_VERSION`] as
//! [`DecodeError::OldVersion`]), kind, checksum, then the payload, which must be
//! consumed exactly and be of the version it needs ([`Wire::schema`]: one encoding per
//! value). Decoding never panics on any input.
//!
//! Payloads implement [`Wire`], in postcard's format (the one the state was written in
//! before it was encoded by hand): unsigned integers as LEB128 varints (`u8` as one
//! byte), `bool` and `Option` tags as one byte 0/1, enums as their variant index,
//! strings and sequences with a varint length, structs and tuples as their fields in
//! order. So bytes written by earlier releases of this schema version decode
//! unchanged (`core/tests/codec_compat.rs` holds such bytes).

/// First two bytes of every encoded value.
pub const MAGIC: [u8; 2] = *b"FW";
/// Newest version of the encoding and of the payload types in this module tree.
pub const SCHEMA_VERSION: u8 = 5;
/// Oldest version still read. A value is written in the oldest version that holds it
/// ([`Wire::schema`]): a key state with write receipts (asynchronous stores) in v5,
/// any other in v4, as earlier releases wrote it, so code of both ages reads the
/// state of a synchronous store during a drain, and v4 code leaves v5 bytes alone.
pub const MIN_SCHEMA_VERSION: u8 = 4;
/// Bytes before the payload: magic, version, kind.
pub const HEADER_LEN: usize = 4;
/// Bytes after the payload: the CRC-32.
pub const TRAILER_LEN: usize = 4;
/// Upper bound on an encoded value; larger inputs are refused without being parsed.
pub const MAX_ENCODED_LEN: usize = 64 * 1024;

/// What an envelope holds; a value of one kind never decodes as another.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[repr(u8)]
pub enum Kind {
    /// [`super::KeyState`]: a key's breaker state, rolling window and slot ledger.
    KeyState = 1,
    /// A plain value (tests of the envelope).
    Plain = 3,
}

/// Why bytes could not be decoded.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum DecodeError {
    /// Shorter than header + trailer.
    Truncated,
    /// Longer than [`MAX_ENCODED_LEN`].
    TooLong,
    /// Does not start with [`MAGIC`].
    BadMagic,
    /// Written by a newer schema than this code understands.
    FutureVersion(u8),
    /// Written by an older schema this code no longer reads.
    OldVersion(u8),
    /// The envelope holds another kind of value.
    WrongKind(u8),
    /// The CRC-32 does not match: the bytes were corrupted.
    Checksum,
    /// The checksum matched but the payload did not parse (or had trailing bytes).
    Payload,
}

impl core::fmt::Display for DecodeError {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        match self {
            DecodeError::Truncated => f.write_str("truncated state bytes"),
            DecodeError::TooLong => f.write_str("state bytes longer than the 64 KiB limit"),
            DecodeError::BadMagic => f.write_str("not fusewire state (bad magic)"),
            DecodeError::FutureVersion(v) => write!(f, "state written by newer schema v{v}"),
            DecodeError::OldVersion(v) => write!(f, "state written by unsupported schema v{v}"),
            DecodeError::WrongKind(k) => write!(f, "state of another kind ({k})"),
            DecodeError::Checksum => f.write_str("state checksum mismatch (corrupt bytes)"),
            DecodeError::Payload => f.write_str("state payload does not parse"),
        }
    }
}

/// A value that can be kept in a store: its payload encoding (see the module docs).
pub trait Wire: Sized {
    /// Appends the encoding of `self`.
    fn put(&self, out: &mut Vec<u8>);
    /// Reads one value; `None` if the bytes do not hold one.
    fn take(r: &mut Reader<'_>) -> Option<Self>;
    /// The oldest schema version that holds this value.
    fn schema(&self) -> u8 {
        MIN_SCHEMA_VERSION
    }
}

/// Reads payload bytes front to back; every read checks the length.
pub struct Reader<'a> {
    bytes: &'a [u8],
}

impl<'a> Reader<'a> {
    /// A reader of `bytes`.
    pub fn new(bytes: &'a [u8]) -> Self {
        Reader { bytes }
    }

    /// Whether every byte was read.
    pub fn is_empty(&self) -> bool {
        self.bytes.is_empty()
    }

    /// One byte.
    pub fn byte(&mut self) -> Option<u8> {
        let (&b, rest) = self.bytes.split_first()?;
        self.bytes = rest;
        Some(b)
    }

    /// `n` bytes.
    pub fn bytes(&mut self, n: usize) -> Option<&'a [u8]> {
        if n > self.bytes.len() {
            return None;
        }
        let (head, rest) = self.bytes.split_at(n);
        self.bytes = rest;
        Some(head)
    }

    /// A LEB128 varint of at most `max_bytes` bytes whose value is at most `max`.
    fn varint(&mut self, max_bytes: u32, max: u64) -> Option<u64> {
        let mut v = 0u64;
        for i in 0..max_bytes {
            let b = self.byte()?;
            let shift = 7 * i;
            let part = u64::from(b & 0x7f);
            if shift >= 64 || (shift > 0 && part >> (64 - shift) != 0) {
                return None;
            }
            v |= part << shift;
            if b & 0x80 == 0 {
                return (v <= max).then_some(v);
            }
        }
        None
    }

    /// A length prefix (at most the bytes left: every element takes one byte or more).
    pub fn len(&mut self) -> Option<usize> {
        let n = self.varint(10, u64::MAX)?;
        (n <= self.bytes.len() as u64).then_some(n as usize)
    }

    /// A one-byte tag that must be 0 or 1.
    pub fn flag(&mut self) -> Option<bool> {
        match self.byte()? {
            0 => Some(false),
            1 => Some(true),
            _ => None,
        }
    }
}

/// Appends `v` as a LEB128 varint.
pub fn put_varint(out: &mut Vec<u8>, mut v: u64) {
    while v >= 0x80 {
        out.push(v as u8 | 0x80);
        v >>= 7;
    }
    out.push(v as u8);
}

impl Wire for u64 {
    fn put(&self, out: &mut Vec<u8>) {
        put_varint(out, *self);
    }
    fn take(r: &mut Reader<'_>) -> Option<Self> {
        r.varint(10, u64::MAX)
    }
}

impl Wire for u32 {
    fn put(&self, out: &mut Vec<u8>) {
        put_varint(out, u64::from(*self));
    }
    fn take(r: &mut Reader<'_>) -> Option<Self> {
        r.varint(5, u32::MAX.into()).map(|v| v as u32)
    }
}

impl Wire for u16 {
    fn put(&self, out: &mut Vec<u8>) {
        put_varint(out, u64::from(*self));
    }
    fn take(r: &mut Reader<'_>) -> Option<Self> {
        r.varint(3, u16::MAX.into()).map(|v| v as u16)
    }
}

impl Wire for bool {
    fn put(&self, out: &mut Vec<u8>) {
        out.push(u8::from(*self));
    }
    fn take(r: &mut Reader<'_>) -> Option<Self> {
        r.flag()
    }
}

impl Wire for String {
    fn put(&self, out: &mut Vec<u8>) {
        put_varint(out, self.len() as u64);
        out.extend_from_slice(self.as_bytes());
    }
    fn take(r: &mut Reader<'_>) -> Option<Self> {
        let n = r.len()?;
        let bytes = r.bytes(n)?;
        std::str::from_utf8(bytes).ok().map(str::to_string)
    }
}

impl<T: Wire> Wire for Option<T> {
    fn put(&self, out: &mut Vec<u8>) {
        match self {
            None => out.push(0),
            Some(v) => {
                out.push(1);
                v.put(out);
            }
        }
    }
    fn take(r: &mut Reader<'_>) -> Option<Self> {
        match r.flag()? {
            false => Some(None),
            true => T::take(r).map(Some),
        }
    }
}

impl<T: Wire> Wire for Vec<T> {
    fn put(&self, out: &mut Vec<u8>) {
        put_varint(out, self.len() as u64);
        for v in self {
            v.put(out);
        }
    }
    fn take(r: &mut Reader<'_>) -> Option<Self> {
        let n = r.len()?;
        let mut out = Vec::with_capacity(n);
        for _ in 0..n {
            out.push(T::take(r)?);
        }
        Some(out)
    }
}

impl<A: Wire, B: Wire> Wire for (A, B) {
    fn put(&self, out: &mut Vec<u8>) {
        self.0.put(out);
        self.1.put(out);
    }
    fn take(r: &mut Reader<'_>) -> Option<Self> {
        Some((A::take(r)?, B::take(r)?))
    }
}

/// Encodes `value` as an envelope of `kind`.
pub fn encode<T: Wire>(kind: Kind, value: &T) -> Vec<u8> {
    encode_into(kind, value, Vec::with_capacity(64))
}

/// [`encode`] into `out` (cleared first), reusing its capacity.
pub fn encode_into<T: Wire>(kind: Kind, value: &T, mut out: Vec<u8>) -> Vec<u8> {
    out.clear();
    out.extend_from_slice(&MAGIC);
    out.push(value.schema());
    out.push(kind as u8);
    value.put(&mut out);
    let crc = crc32(&out);
    out.extend_from_slice(&crc.to_le_bytes());
    out
}

/// Decodes an envelope of `kind`; any corruption, truncation or foreign version is an
/// error, never a panic.
pub fn decode<T: Wire>(kind: Kind, bytes: &[u8]) -> Result<T, DecodeError> {
    if bytes.len() > MAX_ENCODED_LEN {
        return Err(DecodeError::TooLong);
    }
    if bytes.len() < HEADER_LEN + TRAILER_LEN {
        return Err(DecodeError::Truncated);
    }
    let (body, trailer) = bytes.split_at(bytes.len() - TRAILER_LEN);
    if body[..2] != MAGIC {
        return Err(DecodeError::BadMagic);
    }
    let version = body[2];
    if version > SCHEMA_VERSION {
        return Err(DecodeError::FutureVersion(version));
    }
    if version < MIN_SCHEMA_VERSION {
        return Err(DecodeError::OldVersion(version));
    }
    if body[3] != kind as u8 {
        return Err(DecodeError::WrongKind(body[3]));
    }
    let mut stored = [0u8; 4];
    stored.copy_from_slice(trailer);
    if u32::from_le_bytes(stored) != crc32(body) {
        return Err(DecodeError::Checksum);
    }
    let mut r = Reader::new(&body[HEADER_LEN..]);
    match T::take(&mut r) {
        Some(value) if r.is_empty() && value.schema() == version => Ok(value),
        _ => Err(DecodeError::Payload),
    }
}

/// CRC-32 (IEEE 802.3, reflected, as in zlib), four bits at a time: a 64-byte table
/// instead of zlib's 1 KB one, which would cost the npm module about as much gzipped
/// (its entries do not compress). Values are a few hundred bytes, and a host whose
/// CAS token is unchanged skips the decode.
pub fn crc32(bytes: &[u8]) -> u32 {
    let mut crc = !0u32;
    for &b in bytes {
        crc ^= u32::from(b);
        crc = CRC_NIBBLE[(crc & 0xf) as usize] ^ (crc >> 4);
        crc = CRC_NIBBLE[(crc & 0xf) as usize] ^ (crc >> 4);
    }
    !crc
}

/// The CRC of each 4-bit value.
const CRC_NIBBLE: [u32; 16] = {
    let mut table = [0u32; 16];
    let mut i = 0;
    while i < 16 {
        let mut c = i as u32;
        let mut k = 0;
        while k < 4 {
            c = if c & 1 != 0 {
                0xEDB8_8320 ^ (c >> 1)
            } else {
                c >> 1
            };
            k += 1;
        }
        table[i] = c;
        i += 1;
    }
    table
};

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn crc_matches_zlib() {
        assert_eq!(crc32(b"123456789"), 0xCBF4_3926);
        assert_eq!(crc32(b""), 0);
    }

    #[test]
    fn roundtrip_and_every_error() {
        let v: (u32, u64) = (7, 1 << 40);
        let bytes = encode(Kind::Plain, &v);
        assert_eq!(decode::<(u32, u64)>(Kind::Plain, &bytes), Ok(v));
        assert_eq!(
            decode::<(u32, u64)>(Kind::KeyState, &bytes),
            Err(DecodeError::WrongKind(3))
        );
        // Truncation at every length is an error, never a panic.
        for n in 0..bytes.len() {
            assert!(decode::<(u32, u64)>(Kind::Plain, &bytes[..n]).is_err());
        }
        // Every single-bit flip is detected.
        for i in 0..bytes.len() {
            for bit in 0..8 {
                let mut b = bytes.clone();
                b[i] ^= 1 << bit;
                assert!(decode::<(u32, u64)>(Kind::Plain, &b).is_err(), "{i}/{bit}");
            }
        }
        let mut future = bytes.clone();
        future[2] = SCHEMA_VERSION + 1;
        assert_eq!(
            decode::<(u32, u64)>(Kind::Plain, &future),
            Err(DecodeError::FutureVersion(SCHEMA_VERSION + 1))
        );
        let mut old = bytes.clone();
        old[2] = 0;
        assert_eq!(
            decode::<(u32, u64)>(Kind::Plain, &old),
            Err(DecodeError::OldVersion(0))
        );
        let mut magic = bytes.clone();
        magic[0] = b'X';
        assert_eq!(
            decode::<(u32, u64)>(Kind::Plain, &magic),
            Err(DecodeError::BadMagic)
        );
        assert_eq!(
            decode::<(u32, u64)>(Kind::Plain, &vec![0; MAX_ENCODED_LEN + 1]),
            Err(DecodeError::TooLong)
        );
    }

    #[test]
    fn trailing_payload_bytes_are_refused_even_with_a_valid_checksum() {
        let mut bytes = encode(Kind::Plain, &5u64);
        bytes.truncate(bytes.len() - TRAILER_LEN);
        bytes.push(0);
        let crc = crc32(&bytes);
        bytes.extend_from_slice(&crc.to_le_bytes());
        assert_eq!(
            decode::<u64>(Kind::Plain, &bytes),
            Err(DecodeError::Payload)
        );
    }
}
