//! Versioned, checksummed binary envelope for values kept in a host's shared store.
//!
//! Layout (all integers little-endian):
//!
//! ```text
//! +-------+---------+------+-------------------+---------+
//! | magic | version | kind | postcard payload  | crc32   |
//! | "FW"  | u8      | u8   | ...               | u32 LE  |
//! +-------+---------+------+-------------------+---------+
//! ```
//!
//! The CRC-32 (IEEE) covers every byte before it. Decoding checks, in order: length,
//! magic, version (a newer version than [`SCHEMA_VERSION`] is reported as
//! [`DecodeError::FutureVersion`] so old code running next to new code during a config
//! drain leaves it alone), kind, checksum, then the payload, which must be consumed
//! exactly. Decoding never panics on any input.

use serde::{de::DeserializeOwned, Serialize};

/// First two bytes of every encoded value.
pub const MAGIC: [u8; 2] = *b"FW";
/// Version of the encoding and of every payload type in this module tree.
pub const SCHEMA_VERSION: u8 = 4;
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

/// Encodes `value` as an envelope of `kind`.
///
/// Fails only if the serializer fails, which the payload types of this module never do.
pub fn encode<T: Serialize>(kind: Kind, value: &T) -> Result<Vec<u8>, postcard::Error> {
    encode_into(kind, value, Vec::with_capacity(64))
}

/// [`encode`] into `out` (cleared first), reusing its capacity.
pub fn encode_into<T: Serialize>(
    kind: Kind,
    value: &T,
    mut out: Vec<u8>,
) -> Result<Vec<u8>, postcard::Error> {
    out.clear();
    out.extend_from_slice(&MAGIC);
    out.push(SCHEMA_VERSION);
    out.push(kind as u8);
    let mut out = postcard::to_extend(value, out)?;
    let crc = crc32(&out);
    out.extend_from_slice(&crc.to_le_bytes());
    Ok(out)
}

/// Decodes an envelope of `kind`; any corruption, truncation or foreign version is an
/// error, never a panic.
pub fn decode<T: DeserializeOwned>(kind: Kind, bytes: &[u8]) -> Result<T, DecodeError> {
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
    if version < SCHEMA_VERSION {
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
    match postcard::take_from_bytes::<T>(&body[HEADER_LEN..]) {
        Ok((value, [])) => Ok(value),
        _ => Err(DecodeError::Payload),
    }
}

/// CRC-32 (IEEE 802.3, reflected, as in zlib).
pub fn crc32(bytes: &[u8]) -> u32 {
    let mut crc = !0u32;
    for &b in bytes {
        crc = CRC_TABLE[((crc ^ b as u32) & 0xff) as usize] ^ (crc >> 8);
    }
    !crc
}

const CRC_TABLE: [u32; 256] = {
    let mut table = [0u32; 256];
    let mut i = 0;
    while i < 256 {
        let mut c = i as u32;
        let mut k = 0;
        while k < 8 {
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
        let bytes = encode(Kind::Plain, &v).unwrap();
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
        let mut bytes = encode(Kind::Plain, &5u64).unwrap();
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
