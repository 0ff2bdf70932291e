//! The host's shared key-value store with CAS, as the shared-state layer sees it, and
//! the bounded read-modify-write loop every update goes through.

use super::codec::{self, DecodeError, Kind};
use serde::{de::DeserializeOwned, Serialize};

/// Why a store call failed.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum StoreError {
    /// The CAS token no longer matches: someone wrote in between.
    CasMismatch,
    /// Any other host failure (status code as the host reported it).
    Host(u32),
}

/// A CAS key-value store shared by every worker of a process (proxy-wasm shared data).
///
/// Implementations must follow the strict contract that works on Envoy and Kong alike:
/// `set` with `cas = 0` is only used for a key that `get` reported absent.
pub trait SharedStore {
    /// The value and its CAS token, or None when the key is absent. An empty stored
    /// value is returned as `Some((vec![], cas))`.
    fn get(&mut self, key: &str) -> Result<Option<(Vec<u8>, u32)>, StoreError>;
    /// Writes `value` if the stored token still equals `cas` (0: key absent).
    fn set(&mut self, key: &str, value: &[u8], cas: u32) -> Result<(), StoreError>;
}

/// How a read found the stored value.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Loaded<T> {
    /// Key absent.
    Absent,
    /// Decoded, with its CAS token.
    Value(T, u32),
    /// Present but undecodable (corrupt, truncated, foreign version); token kept so
    /// the value can be replaced under CAS.
    Invalid(DecodeError, u32),
}

/// Reads and decodes `key`.
pub fn load<T: DeserializeOwned>(
    store: &mut impl SharedStore,
    key: &str,
    kind: Kind,
) -> Result<Loaded<T>, StoreError> {
    Ok(match store.get(key)? {
        None => Loaded::Absent,
        Some((bytes, cas)) => match codec::decode::<T>(kind, &bytes) {
            Ok(v) => Loaded::Value(v, cas),
            Err(e) => Loaded::Invalid(e, cas),
        },
    })
}

/// Result of [`update`].
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Updated<R> {
    /// `f` returned `(r, false)`: nothing to write.
    Unchanged(R, u32),
    /// Written; the new value's token is not known (the next read learns it).
    Written(R),
}

/// Errors of [`update`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum UpdateError {
    /// Every attempt lost its CAS race.
    Contended,
    /// The host failed.
    Host(u32),
}

/// Read-modify-write of `key` with at most `attempts` CAS attempts.
///
/// `init` builds the value when the key is absent or holds undecodable bytes
/// (`on_invalid` is told why, once per attempt, so the host can log it); `f` changes
/// the value and says whether to write it. `f` may run several times, once per attempt,
/// on a fresh copy.
pub fn update<T, R>(
    store: &mut impl SharedStore,
    key: &str,
    kind: Kind,
    attempts: u32,
    mut init: impl FnMut() -> T,
    mut on_invalid: impl FnMut(DecodeError),
    mut f: impl FnMut(&mut T) -> (R, bool),
) -> Result<Updated<R>, UpdateError>
where
    T: Serialize + DeserializeOwned,
{
    for _ in 0..attempts.max(1) {
        let (mut value, cas, fresh) = match load::<T>(store, key, kind) {
            Ok(Loaded::Absent) => (init(), 0, true),
            Ok(Loaded::Value(v, cas)) => (v, cas, false),
            Ok(Loaded::Invalid(e, cas)) => {
                on_invalid(e);
                (init(), cas, true)
            }
            Err(StoreError::CasMismatch) => continue,
            Err(StoreError::Host(s)) => return Err(UpdateError::Host(s)),
        };
        let (r, changed) = f(&mut value);
        if !changed && !fresh {
            return Ok(Updated::Unchanged(r, cas));
        }
        let bytes = match codec::encode(kind, &value) {
            Ok(b) => b,
            Err(_) => return Err(UpdateError::Host(0)),
        };
        match store.set(key, &bytes, cas) {
            Ok(()) => return Ok(Updated::Written(r)),
            Err(StoreError::CasMismatch) => continue,
            Err(StoreError::Host(s)) => return Err(UpdateError::Host(s)),
        }
    }
    Err(UpdateError::Contended)
}

/// Shared-data key names: `fusewire/v1/<kind>/<key>`. The `v1` is the key schema: a
/// layout change bumps it so old and new code running side by side during a config
/// drain never read each other's values.
pub mod keys {
    /// Prefix of every key this layer writes.
    pub const PREFIX: &str = "fusewire/v1/";

    /// Breaker state + window of `key`.
    pub fn state(key: &str, out: &mut String) {
        out.clear();
        out.push_str(PREFIX);
        out.push_str("state/");
        out.push_str(key);
    }

    /// Bulkhead slot ledger of `key`.
    pub fn slots(key: &str, out: &mut String) {
        out.clear();
        out.push_str(PREFIX);
        out.push_str("slots/");
        out.push_str(key);
    }

    /// Owner-id sequence.
    pub const OWNER_SEQ: &str = "fusewire/v1/owner-seq";
}

/// An in-memory [`SharedStore`] with Envoy's (lenient) or Kong's (strict) CAS rules,
/// for tests of code built on this layer.
#[derive(Clone, Debug, Default)]
pub struct MemoryStore {
    entries: Vec<(String, Vec<u8>, u32)>,
    next_cas: u32,
    /// Kong mode: `cas` must equal the stored token; `cas = 0` only creates.
    pub strict: bool,
    /// Writes performed (successful sets).
    pub writes: u64,
    /// Reads performed.
    pub reads: u64,
}

impl MemoryStore {
    /// Envoy rules when `strict` is false, Kong rules when true.
    pub fn new(strict: bool) -> Self {
        MemoryStore {
            strict,
            ..Default::default()
        }
    }

    /// Raw bytes of a key (tests corrupt them through [`MemoryStore::raw_set`]).
    pub fn raw_get(&self, key: &str) -> Option<&[u8]> {
        self.entries
            .iter()
            .find(|e| e.0 == key)
            .map(|e| e.1.as_slice())
    }

    /// Overwrites a key unconditionally with new bytes.
    pub fn raw_set(&mut self, key: &str, value: &[u8]) {
        let cas = self.bump();
        match self.entries.iter_mut().find(|e| e.0 == key) {
            Some(e) => {
                e.1 = value.to_vec();
                e.2 = cas;
            }
            None => self.entries.push((key.to_string(), value.to_vec(), cas)),
        }
    }

    fn bump(&mut self) -> u32 {
        self.next_cas = self.next_cas.wrapping_add(1).max(1);
        self.next_cas
    }
}

impl SharedStore for MemoryStore {
    fn get(&mut self, key: &str) -> Result<Option<(Vec<u8>, u32)>, StoreError> {
        self.reads += 1;
        Ok(self
            .entries
            .iter()
            .find(|e| e.0 == key)
            .map(|e| (e.1.clone(), e.2)))
    }

    fn set(&mut self, key: &str, value: &[u8], cas: u32) -> Result<(), StoreError> {
        let token = self.bump();
        let strict = self.strict;
        match self.entries.iter_mut().find(|e| e.0 == key) {
            Some(e) => {
                if (strict || cas != 0) && cas != e.2 {
                    return Err(StoreError::CasMismatch);
                }
                e.1 = value.to_vec();
                e.2 = token;
            }
            None => {
                if strict && cas != 0 {
                    return Err(StoreError::CasMismatch);
                }
                self.entries.push((key.to_string(), value.to_vec(), token))
            }
        }
        self.writes += 1;
        Ok(())
    }
}
