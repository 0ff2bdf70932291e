//! Header maps and their proxy-wasm wire format.
//!
//! Wire format: u32 LE pair count; then (u32 key_len, u32 value_len) per pair; then
//! `key\0value\0` per pair. The host emits an empty map as ptr 0 / len 0 and refuses
//! maps over [`MAX_MAP_BYTES`] or [`MAX_MAP_PAIRS`].

/// Largest serialized map the host accepts from a guest.
pub const MAX_MAP_BYTES: usize = 1 << 20;
/// Most pairs the host accepts in one map.
pub const MAX_MAP_PAIRS: usize = 1024;

/// An ordered multi-map of lowercase header names to byte values.
#[derive(Clone, Default, PartialEq, Eq)]
pub struct HeaderMap {
    pairs: Vec<(String, Vec<u8>)>,
}

/// Why a serialized map was refused.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum MapError {
    /// Shorter than its own header claims.
    Truncated,
    /// Over [`MAX_MAP_BYTES`] or [`MAX_MAP_PAIRS`].
    TooLarge,
    /// A key or value is not followed by its NUL terminator.
    MissingNul,
}

impl std::fmt::Display for MapError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            MapError::Truncated => "header map truncated",
            MapError::TooLarge => "header map over 1 MiB or 1024 pairs",
            MapError::MissingNul => "header map entry missing NUL terminator",
        })
    }
}
impl std::error::Error for MapError {}

impl HeaderMap {
    /// An empty map.
    pub fn new() -> Self {
        Self::default()
    }

    /// Builds a map from pairs; keys are lowercased.
    pub fn from_pairs<K: AsRef<str>, V: AsRef<[u8]>>(
        pairs: impl IntoIterator<Item = (K, V)>,
    ) -> Self {
        let mut m = Self::new();
        for (k, v) in pairs {
            m.add(k.as_ref(), v.as_ref());
        }
        m
    }

    /// Number of pairs.
    pub fn len(&self) -> usize {
        self.pairs.len()
    }

    /// True when the map holds no pairs.
    pub fn is_empty(&self) -> bool {
        self.pairs.is_empty()
    }

    /// All pairs in order.
    pub fn pairs(&self) -> &[(String, Vec<u8>)] {
        &self.pairs
    }

    /// The first value for `key` (case-insensitive), as Envoy's `get_header_map_value`.
    pub fn get(&self, key: &str) -> Option<&[u8]> {
        let key = key.to_ascii_lowercase();
        self.pairs
            .iter()
            .find(|(k, _)| *k == key)
            .map(|(_, v)| v.as_slice())
    }

    /// The first value for `key` as UTF-8 text (lossy).
    pub fn get_str(&self, key: &str) -> Option<String> {
        self.get(key)
            .map(|v| String::from_utf8_lossy(v).into_owned())
    }

    /// Appends a pair (key lowercased).
    pub fn add(&mut self, key: &str, value: &[u8]) {
        self.pairs.push((key.to_ascii_lowercase(), value.to_vec()));
    }

    /// Replaces every value of `key` with one value, or appends it when absent.
    pub fn replace(&mut self, key: &str, value: &[u8]) {
        let key = key.to_ascii_lowercase();
        if let Some(pos) = self.pairs.iter().position(|(k, _)| *k == key) {
            self.pairs[pos].1 = value.to_vec();
            let mut i = 0;
            self.pairs.retain(|(k, _)| {
                i += 1;
                i - 1 == pos || *k != key
            });
        } else {
            self.pairs.push((key, value.to_vec()));
        }
    }

    /// Removes every value of `key`.
    pub fn remove(&mut self, key: &str) {
        let key = key.to_ascii_lowercase();
        self.pairs.retain(|(k, _)| *k != key);
    }

    /// Serializes to the wire format; an empty map serializes to no bytes.
    pub fn encode(&self) -> Vec<u8> {
        if self.pairs.is_empty() {
            return Vec::new();
        }
        let data: usize = self.pairs.iter().map(|(k, v)| k.len() + v.len() + 2).sum();
        let mut out = Vec::with_capacity(4 + 8 * self.pairs.len() + data);
        out.extend_from_slice(&(self.pairs.len() as u32).to_le_bytes());
        for (k, v) in &self.pairs {
            out.extend_from_slice(&(k.len() as u32).to_le_bytes());
            out.extend_from_slice(&(v.len() as u32).to_le_bytes());
        }
        for (k, v) in &self.pairs {
            out.extend_from_slice(k.as_bytes());
            out.push(0);
            out.extend_from_slice(v);
            out.push(0);
        }
        out
    }

    /// Parses the wire format (empty input is the empty map); keys are lowercased.
    pub fn decode(bytes: &[u8]) -> Result<Self, MapError> {
        if bytes.is_empty() {
            return Ok(Self::new());
        }
        if bytes.len() > MAX_MAP_BYTES {
            return Err(MapError::TooLarge);
        }
        let count = read_u32(bytes, 0).ok_or(MapError::Truncated)? as usize;
        if count > MAX_MAP_PAIRS {
            return Err(MapError::TooLarge);
        }
        let mut sizes = Vec::with_capacity(count);
        for i in 0..count {
            let k = read_u32(bytes, 4 + 8 * i).ok_or(MapError::Truncated)? as usize;
            let v = read_u32(bytes, 8 + 8 * i).ok_or(MapError::Truncated)? as usize;
            sizes.push((k, v));
        }
        let mut pos = 4 + 8 * count;
        let mut map = Self::new();
        for (kl, vl) in sizes {
            let key = take(bytes, &mut pos, kl)?;
            let value = take(bytes, &mut pos, vl)?;
            map.add(&String::from_utf8_lossy(key), value);
        }
        Ok(map)
    }
}

fn read_u32(b: &[u8], at: usize) -> Option<u32> {
    let s = b.get(at..at.checked_add(4)?)?;
    Some(u32::from_le_bytes([s[0], s[1], s[2], s[3]]))
}

fn take<'a>(b: &'a [u8], pos: &mut usize, len: usize) -> Result<&'a [u8], MapError> {
    let end = pos.checked_add(len).ok_or(MapError::Truncated)?;
    let s = b.get(*pos..end).ok_or(MapError::Truncated)?;
    match b.get(end) {
        Some(0) => {}
        Some(_) => return Err(MapError::MissingNul),
        None => return Err(MapError::Truncated),
    }
    *pos = end + 1;
    Ok(s)
}

impl std::fmt::Debug for HeaderMap {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_list()
            .entries(
                self.pairs
                    .iter()
                    .map(|(k, v)| (k, String::from_utf8_lossy(v))),
            )
            .finish()
    }
}

impl serde::Serialize for HeaderMap {
    /// As a list of `[name, value]` pairs (values as lossy UTF-8).
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        use serde::ser::SerializeSeq;
        let mut seq = s.serialize_seq(Some(self.pairs.len()))?;
        for (k, v) in &self.pairs {
            seq.serialize_element(&(k, String::from_utf8_lossy(v)))?;
        }
        seq.end()
    }
}

impl<'de> serde::Deserialize<'de> for HeaderMap {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let pairs: Vec<(String, String)> = serde::Deserialize::deserialize(d)?;
        Ok(HeaderMap::from_pairs(pairs))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trip_keeps_order_and_duplicates() {
        let m = HeaderMap::from_pairs([(":path", "/a"), ("X-A", "1"), ("x-a", "2")]);
        let back = HeaderMap::decode(&m.encode()).unwrap();
        assert_eq!(back, m);
        assert_eq!(back.get("X-a"), Some(&b"1"[..]));
        assert_eq!(back.pairs()[1].0, "x-a");
    }

    #[test]
    fn wire_layout_is_exact() {
        let m = HeaderMap::from_pairs([("ab", "c")]);
        assert_eq!(
            m.encode(),
            vec![1, 0, 0, 0, 2, 0, 0, 0, 1, 0, 0, 0, b'a', b'b', 0, b'c', 0]
        );
        assert!(HeaderMap::new().encode().is_empty());
    }

    #[test]
    fn decode_refuses_bad_input() {
        assert_eq!(HeaderMap::decode(&[1, 0]), Err(MapError::Truncated));
        let mut b = HeaderMap::from_pairs([("a", "b")]).encode();
        *b.last_mut().unwrap() = b'x';
        assert_eq!(HeaderMap::decode(&b), Err(MapError::MissingNul));
        let mut big = 1025u32.to_le_bytes().to_vec();
        big.extend(vec![0u8; 8 * 1025]);
        assert_eq!(HeaderMap::decode(&big), Err(MapError::TooLarge));
        assert_eq!(
            HeaderMap::decode(&vec![0u8; MAX_MAP_BYTES + 1]),
            Err(MapError::TooLarge)
        );
        let huge_len = [1, 0, 0, 0, 255, 255, 255, 255, 0, 0, 0, 0];
        assert_eq!(HeaderMap::decode(&huge_len), Err(MapError::Truncated));
    }

    #[test]
    fn replace_and_remove_touch_every_value() {
        let mut m = HeaderMap::from_pairs([("a", "1"), ("b", "x"), ("a", "2")]);
        m.replace("A", b"3");
        assert_eq!(m.pairs().len(), 2);
        assert_eq!(m.get("a"), Some(&b"3"[..]));
        m.replace("c", b"new");
        assert_eq!(m.get("c"), Some(&b"new"[..]));
        m.remove("a");
        assert_eq!(m.get("a"), None);
        assert_eq!(m.len(), 2);
    }
}
