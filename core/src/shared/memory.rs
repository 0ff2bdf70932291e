//! An in-memory CAS store with Envoy's (lenient), Kong's (strict) or a Redis script's
//! rules: a test double for hosts and for the core's own tests. The engine never
//! calls it; a test performs each [`Io`] on it and hands the answer back, as a host
//! would.

use super::io::{Expect, Io, Op, OwnedAnswer};

/// Which store's CAS rules to follow.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Rules {
    /// Envoy shared data: a write with a non-zero token to an existing key must match;
    /// a zero token overwrites; an absent key is always inserted. Tokens are not
    /// returned.
    #[default]
    Envoy,
    /// Kong's ngx_wasm_module: the token must equal the stored one, 0 means "absent".
    Kong,
    /// A Redis compare-and-set script: strict, and the answer carries the new token on
    /// success and the current value on a conflict.
    Script,
}

/// The store.
#[derive(Clone, Debug, Default)]
pub struct MemoryStore {
    entries: Vec<(String, Vec<u8>, u64)>,
    next_token: u64,
    /// CAS rules.
    pub rules: Rules,
    /// Successful writes.
    pub writes: u64,
    /// Reads.
    pub reads: u64,
    /// When set, every operation fails with this status (a store outage).
    pub down: Option<u32>,
    /// When set, every write fails with this status while reads still answer (a
    /// full store, or a value larger than it holds).
    pub writes_down: Option<u32>,
    /// When set, every write is performed but answered with this status (its reply
    /// lost: a partition, a store pause or a host stall past the op timeout).
    pub replies_lost: Option<u32>,
    /// Operations refused while `down` or `writes_down`.
    pub failed: u64,
}

impl MemoryStore {
    /// An empty store with `rules`.
    pub fn new(rules: Rules) -> Self {
        MemoryStore {
            rules,
            ..Default::default()
        }
    }

    fn bump(&mut self) -> u64 {
        // One global counter for every key, skipping 0 (as Envoy's u32 counter).
        self.next_token = self.next_token.wrapping_add(1).max(1);
        self.next_token
    }

    /// Raw bytes of a key.
    pub fn raw_get(&self, key: &str) -> Option<&[u8]> {
        self.entries
            .iter()
            .find(|e| e.0 == key)
            .map(|e| e.1.as_slice())
    }

    /// Overwrites a key unconditionally (tests corrupt state with it).
    pub fn raw_set(&mut self, key: &str, value: &[u8]) {
        let t = self.bump();
        match self.entries.iter_mut().find(|e| e.0 == key) {
            Some(e) => {
                e.1 = value.to_vec();
                e.2 = t;
            }
            None => self.entries.push((key.to_string(), value.to_vec(), t)),
        }
    }

    /// Every key, sorted.
    pub fn keys(&self) -> Vec<&str> {
        let mut k: Vec<&str> = self.entries.iter().map(|e| e.0.as_str()).collect();
        k.sort_unstable();
        k
    }

    /// Forgets everything (a store restarted empty).
    pub fn clear(&mut self) {
        self.entries.clear();
    }

    /// Performs one request and returns the answer.
    pub fn exec(&mut self, io: &Io<'_>) -> OwnedAnswer {
        if let Some(code) = self.down {
            self.failed += 1;
            return OwnedAnswer::Failed(code);
        }
        match io.op {
            Op::Read => {
                self.reads += 1;
                match self.entries.iter().find(|e| e.0 == io.key) {
                    Some(e) => OwnedAnswer::Found(e.1.clone(), e.2),
                    None => OwnedAnswer::NotFound,
                }
            }
            Op::Write { value, expect } => match self.writes_down {
                Some(code) => {
                    self.failed += 1;
                    OwnedAnswer::Failed(code)
                }
                None => match (self.write(io.key, value, expect), self.replies_lost) {
                    (OwnedAnswer::Written(_), Some(code)) => OwnedAnswer::Failed(code),
                    (answer, _) => answer,
                },
            },
        }
    }

    fn write(&mut self, key: &str, value: &[u8], expect: Expect) -> OwnedAnswer {
        let token = self.bump();
        let rules = self.rules;
        let i = self.entries.iter().position(|e| e.0 == key);
        let ok = match (rules, i, expect) {
            (Rules::Envoy, None, _) => true,
            (Rules::Envoy, Some(_), Expect::Absent) => true,
            (_, Some(i), Expect::Token(t)) => self.entries.get(i).is_some_and(|e| e.2 == t),
            (_, None, Expect::Absent) => true,
            (_, Some(_), Expect::Absent) | (_, None, Expect::Token(_)) => false,
        };
        if !ok {
            let current = match (rules, i) {
                (Rules::Script, Some(i)) => self.entries.get(i).map(|e| (e.1.clone(), e.2)),
                _ => None,
            };
            return OwnedAnswer::Conflict(current, i.is_none());
        }
        match i.and_then(|i| self.entries.get_mut(i)) {
            Some(e) => {
                e.1 = value.to_vec();
                e.2 = token;
            }
            None => self.entries.push((key.to_string(), value.to_vec(), token)),
        }
        self.writes += 1;
        OwnedAnswer::Written((rules == Rules::Script).then_some(token))
    }
}
