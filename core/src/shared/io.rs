//! The sans-IO store protocol: what the engine asks a host's CAS store to do
//! ([`Io`]), and what the host reports back ([`Answer`]).
//!
//! The engine never calls a store. [`crate::Engine::poll_io`] hands out one request at
//! a time; the host performs it — at once (Envoy shared data, a `SharedArrayBuffer`)
//! or later (Redis) — and reports the store's answer with
//! [`crate::Engine::io_done`]. Several requests may be in flight (at most one per
//! key); answers may come in any order; an answer for a request the engine no longer
//! waits for is ignored.

/// Identifies one store request. Numbers below 2^53, so JS hosts keep them as plain
/// numbers.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct IoId(u64);

impl IoId {
    pub(crate) fn new(key_index: u32, seq: u32) -> Self {
        IoId(u64::from(seq) << 21 | u64::from(key_index & 0x1F_FFFF))
    }

    pub(crate) fn key_index(self) -> u32 {
        (self.0 & 0x1F_FFFF) as u32
    }

    pub(crate) fn seq(self) -> u32 {
        (self.0 >> 21) as u32
    }

    /// The plain number.
    pub fn to_raw(self) -> u64 {
        self.0
    }

    /// From [`IoId::to_raw`] (an unknown or stale id is ignored by `io_done`; so is
    /// one at or above 2^53, which no request has).
    pub fn from_raw(raw: u64) -> Self {
        IoId(raw)
    }

    /// Whether any request could have this id (below 2^53; found by review: the
    /// bits above were dropped, so a forged id matched a live request).
    pub(crate) fn in_range(self) -> bool {
        self.0 >> 53 == 0
    }
}

/// The status of a request the host never answered within `stale_ms`: the engine
/// gives it up as [`Answer::Failed`] with this status, reported as [`Issue::Stale`].
pub const LOST: u32 = u32::MAX;

/// What the write expects to find in the store.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Expect {
    /// The key was absent when last read: strict stores (Kong, Redis with the
    /// fusewire script) create it only if still absent; Envoy's lenient store inserts
    /// it unconditionally.
    Absent,
    /// The stored token must still be this one.
    Token(u64),
}

/// proxy-wasm's `CAS_MISMATCH` status.
const CAS_MISMATCH: u32 = 8;

impl Expect {
    /// Performs a write on proxy-wasm shared data as `self` says, through the host's
    /// `set(cas)` (`proxy_set_shared_data`, returning its status) and `absent()`
    /// (whether `proxy_get_shared_data` finds no key); returns the last status.
    ///
    /// A token is the `cas`. "Absent" is create-if-absent on both hosts' rules:
    /// Envoy inserts an absent key whatever the `cas` and refuses a `cas` that does not
    /// match an existing key, so `u32::MAX` (a token no key holds, in practice) creates
    /// only if absent (with 0 two workers creating a key at once both "wrote", the
    /// second over the first: found by review, a bulkhead of 1 then ran 2 calls). Kong
    /// refuses a non-zero `cas` for an absent key: found absent after that refusal,
    /// the write goes again with 0, its "must be absent".
    pub fn proxy_wasm_set(
        self,
        mut set: impl FnMut(u32) -> u32,
        absent: impl FnOnce() -> bool,
    ) -> u32 {
        match self {
            Expect::Token(t) => set(t as u32),
            Expect::Absent => match set(u32::MAX) {
                CAS_MISMATCH if absent() => set(0),
                s => s,
            },
        }
    }
}

/// One store operation.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Op<'a> {
    /// Read the key's value and token.
    Read,
    /// Compare-and-set the key to `value` if the store still holds what `expect`
    /// says.
    Write {
        /// New bytes.
        value: &'a [u8],
        /// What must be stored now.
        expect: Expect,
    },
}

/// A store request from the engine.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Io<'a> {
    /// Report the answer with this id.
    pub id: IoId,
    /// The store key.
    pub key: &'a str,
    /// What to do.
    pub op: Op<'a>,
}

/// What the store answered.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Answer<'a> {
    /// Read: the value and its token (an empty value is a value).
    Found {
        /// The stored bytes.
        value: &'a [u8],
        /// Their CAS token.
        token: u64,
    },
    /// Read: no such key.
    NotFound,
    /// Write: done. Stores that return the new token (Redis script, a
    /// `SharedArrayBuffer`) pass it; proxy-wasm shared data does not.
    Written {
        /// The new value's token, if the store tells it.
        token: Option<u64>,
    },
    /// Write: the store held something else. Stores that return what they hold in
    /// the same round trip pass it (saves a read).
    Conflict {
        /// The current value and token (`None`: unknown; `Some((b"", t))` is an
        /// empty value).
        current: Option<(&'a [u8], u64)>,
        /// Whether the key is absent now (a strict store refused to overwrite
        /// nothing, or a create lost a race).
        absent: bool,
    },
    /// The store failed (host status code); the engine degrades and retries later.
    Failed {
        /// Host status.
        code: u32,
    },
}

/// An owned [`Answer`], for hosts that answer later.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum OwnedAnswer {
    /// See [`Answer::Found`].
    Found(Vec<u8>, u64),
    /// See [`Answer::NotFound`].
    NotFound,
    /// See [`Answer::Written`].
    Written(Option<u64>),
    /// See [`Answer::Conflict`].
    Conflict(Option<(Vec<u8>, u64)>, bool),
    /// See [`Answer::Failed`].
    Failed(u32),
}

impl OwnedAnswer {
    /// Borrows it as an [`Answer`].
    pub fn as_answer(&self) -> Answer<'_> {
        match self {
            OwnedAnswer::Found(v, t) => Answer::Found {
                value: v,
                token: *t,
            },
            OwnedAnswer::NotFound => Answer::NotFound,
            OwnedAnswer::Written(t) => Answer::Written { token: *t },
            OwnedAnswer::Conflict(c, absent) => Answer::Conflict {
                current: c.as_ref().map(|(v, t)| (v.as_slice(), *t)),
                absent: *absent,
            },
            OwnedAnswer::Failed(c) => Answer::Failed { code: *c },
        }
    }
}

/// A store problem the host should log or count; the engine has already degraded
/// as documented and will retry.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Issue {
    /// Stored bytes were undecodable (corrupt, truncated, foreign); they are replaced
    /// by a fresh state on the next write.
    Invalid(super::codec::DecodeError),
    /// An update lost every CAS race.
    Contended,
    /// The store failed with this host status.
    Failed(u32),
    /// The view is not confirmed — no answer within the staleness bound, or writes
    /// failing — so the key runs on its local breaker.
    Stale,
}

impl core::fmt::Display for Issue {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        match self {
            Issue::Invalid(e) => write!(f, "unreadable state ({e}), reset"),
            Issue::Contended => f.write_str("CAS contended, degraded for this round"),
            Issue::Failed(code) => write!(f, "store failed with status {code}"),
            Issue::Stale => f.write_str(
                "shared state not confirmed (no answer within stale_ms, or writes failing): running on the local breaker",
            ),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use core::cell::RefCell;

    /// One key of proxy-wasm shared data: (value, token), under Kong's rules or
    /// Envoy's (`envoy-host-facts`: an absent key is inserted whatever the cas; cas 0
    /// overwrites an existing one).
    struct Raw {
        kong: bool,
        cur: Option<(u8, u32)>,
        last: u32,
    }

    impl Raw {
        fn set(&mut self, v: u8, cas: u32) -> u32 {
            let ok = match (self.kong, self.cur) {
                (false, Some((_, t))) => cas == 0 || cas == t,
                (false, None) => true,
                (true, c) => cas == c.map_or(0, |c| c.1),
            };
            if !ok {
                return CAS_MISMATCH;
            }
            self.last += 1;
            self.cur = Some((v, self.last));
            0
        }
    }

    fn write(store: &RefCell<Raw>, v: u8, expect: Expect) -> u32 {
        expect.proxy_wasm_set(
            |cas| store.borrow_mut().set(v, cas),
            || store.borrow().cur.is_none(),
        )
    }

    #[test]
    fn absent_is_create_if_absent_on_envoy_and_kong() {
        for kong in [false, true] {
            let store = RefCell::new(Raw {
                kong,
                cur: None,
                last: 0,
            });
            assert_eq!(write(&store, 1, Expect::Absent), 0, "kong {kong}: created");
            assert_eq!(store.borrow().cur, Some((1, 1)));
            // Another worker created the key between this one's read (not found) and
            // its write: refused, the other's value kept.
            assert_eq!(
                write(&store, 2, Expect::Absent),
                CAS_MISMATCH,
                "kong {kong}"
            );
            assert_eq!(store.borrow().cur, Some((1, 1)), "kong {kong}");
            // Tokens: the current one writes, an old one is refused.
            assert_eq!(write(&store, 3, Expect::Token(1)), 0, "kong {kong}");
            assert_eq!(write(&store, 4, Expect::Token(1)), CAS_MISMATCH);
            assert_eq!(store.borrow().cur, Some((3, 2)), "kong {kong}");
        }
    }
}
