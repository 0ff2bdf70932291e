//! Stored responses for collapsed forwarding and stale-if-error: the payloads the
//! core's cache index ([`RequestCache`]) points to. The core decides who leads, who
//! waits, what is kept, evicted and expired; this module keeps the bytes and turns
//! them back into replies.
//!
//! Scope: one worker VM (a response cannot cross VMs). With 4 workers, 200 identical
//! concurrent requests reach the upstream at most 4 times.

use core::sync::atomic::{AtomicUsize, Ordering::Relaxed};
use std::rc::Rc;

use fusewire_core::cache::{CacheEvent, EntryId, Lead, Lookup, RequestCache, ScopeId};
use fusewire_core::Nanos;

use crate::config::Policy;
use crate::host;
use crate::vecmap::VecMap;

/// A response as the filter saw it (and will replay it).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Response {
    /// `:status`.
    pub status: u32,
    /// Headers (pseudo-headers and hop-by-hop headers left out).
    pub headers: Vec<(String, String)>,
    /// Body, held once however many replies carry it (a fallback or stale copy
    /// for each of many refused waiters is not a copy each).
    pub body: Rc<Vec<u8>>,
    /// When it was received (ns).
    pub at: Nanos,
    /// A stale copy standing in for a failed response (`stale.on_upstream_error`):
    /// replayed to waiters as `x-fusewire: stale`, with its `age`.
    pub stale: bool,
}

/// A leader's response as its waiters get it: the `x-fusewire: collapsed` headers
/// serialized and the body, each held once however many waiters it goes to.
#[derive(Clone)]
pub struct Collapsed {
    /// `:status`.
    pub status: u32,
    /// Serialized headers ([`replay_headers`]).
    pub headers: Rc<Vec<u8>>,
    /// Body.
    pub body: Rc<Vec<u8>>,
}

/// The serialized headers of a replayed response, tagged `x-fusewire: <tag>`. A
/// stale copy kept for `kept` seconds gets `age`: the upstream's own `age` plus
/// `kept` (RFC 9111 §4.2.3; found by review: the upstream's was dropped, so a cache
/// in front took an old copy for fresh).
pub fn replay_headers(r: &Response, tag: &str, kept: Option<u64>) -> Vec<u8> {
    let upstream = || {
        let age = r.headers.iter().find(|(k, _)| k == "age")?;
        age.1.trim().parse::<u64>().ok()
    };
    let age = kept.map(|s| s.saturating_add(upstream().unwrap_or(0)).to_string());
    let mut pairs: Vec<(&str, &str)> = r
        .headers
        .iter()
        .filter(|(k, _)| replayable(k) && !(age.is_some() && *k == "age"))
        .map(|(k, v)| (k.as_str(), v.as_str()))
        .collect();
    pairs.push(("x-fusewire", tag));
    if let Some(a) = &age {
        pairs.push(("age", a));
    }
    let mut buf = Vec::new();
    host::serialize_map(&pairs, &mut buf);
    buf
}

/// Headers a proxy never replays (RFC 9110 §7.6.1 hop-by-hop, plus the ones Envoy
/// computes for a local reply).
const HOP_BY_HOP: [&str; 10] = [
    "connection",
    "keep-alive",
    "proxy-authenticate",
    "proxy-authorization",
    "proxy-connection",
    "te",
    "trailer",
    "transfer-encoding",
    "upgrade",
    "content-length",
];

/// Whether a header is hop-by-hop (or computed by Envoy for a local reply): never
/// in a reply the filter sends.
pub fn hop_by_hop(name: &str) -> bool {
    HOP_BY_HOP.contains(&name)
}

/// Whether a response header is kept for a replay. `set-cookie` never is: a replay
/// goes to other clients. Nor are headers about that one exchange: Envoy's
/// `x-envoy-*` (upstream service time, Istio's peer metadata) and `x-request-id`
/// (found by an Istio operator's review: a stale reply carried another request's id
/// into traces, and the peer metadata credited the upstream with a reply it never
/// sent).
pub fn replayable(name: &str) -> bool {
    !name.starts_with(':')
        && !name.starts_with("x-envoy-")
        && !hop_by_hop(name)
        && !matches!(name, "x-fusewire" | "set-cookie" | "x-request-id")
}

/// `cache-control` directives that keep a response from other clients: the first
/// three from waiters and stale copies, the rest from stale copies ([`private`]).
pub const UNSHARED: [&str; 6] = [
    "no-store",
    "private",
    "no-cache",
    "must-revalidate",
    "proxy-revalidate",
    "s-maxage",
];

/// Whether a response may not be shared: it is meant for one client (`set-cookie`,
/// `cache-control: private` / `no-store`) or may not be reused without asking the
/// upstream (`no-cache`); with `stale`, also whether it may not be served stale
/// (`must-revalidate`, `proxy-revalidate`, `s-maxage`: RFC 9111 §4.2.4, §5.2.2.10).
/// Such a response is neither replayed to waiters (`stale` false) nor kept as a
/// stale copy (`stale` true).
pub fn private(headers: &[(String, String)], stale: bool) -> bool {
    let names = UNSHARED
        .get(..if stale { 6 } else { 3 })
        .unwrap_or_default();
    headers
        .iter()
        .any(|(k, v)| k == "set-cookie" || (k == "cache-control" && any_directive(v, names)))
}

/// Whether a `cache-control` value holds one of the directives `names` (lower-case;
/// with any argument: `private="x"` holds `private`).
pub fn any_directive(value: &str, names: &[&str]) -> bool {
    value.split(',').any(|d| {
        let d = d.split('=').next().unwrap_or(d).trim();
        names.iter().any(|n| d.eq_ignore_ascii_case(n))
    })
}

/// Most bytes of response bodies being captured at once in one VM (every root's
/// streams): past it a capture stops (the response is forwarded, not kept), where
/// 300 concurrent 16 MiB downloads failed an allocation and trapped the VM.
pub const CAPTURE_BUDGET: usize = 64 << 20;

/// Bytes of response bodies being captured in this VM (see [`CAPTURE_BUDGET`]).
static CAPTURING: AtomicUsize = AtomicUsize::new(0);

/// A response being received, kept only while it fits (its limit, the VM's
/// [`CAPTURE_BUDGET`], and memory).
#[derive(Debug, Default)]
pub struct Capture {
    /// The response so far, its body aside.
    pub response: Response,
    /// The body so far.
    pub body: Vec<u8>,
    /// The body went past the limit: nothing to replay.
    pub too_large: bool,
    /// Largest body kept.
    pub limit: u64,
}

impl Capture {
    /// Keeps bodies up to `limit` bytes.
    pub fn new(limit: u64) -> Self {
        Capture {
            response: Response::default(),
            body: Vec::new(),
            too_large: false,
            limit,
        }
    }

    /// Whether `n` more body bytes are within the limit and the VM's budget (checked
    /// before fetching a chunk: a chunk that cannot be kept is never copied in).
    pub fn fits(&self, n: usize) -> bool {
        !self.too_large
            && (self.body.len() as u64).saturating_add(n as u64) <= self.limit
            && CAPTURING.load(Relaxed).saturating_add(n) <= CAPTURE_BUDGET
    }

    /// Appends a body chunk (one that does not fit, or finds no memory, ends the
    /// capture).
    pub fn body(&mut self, chunk: &[u8]) {
        if self.fits(chunk.len()) && self.body.try_reserve(chunk.len()).is_ok() {
            self.body.extend_from_slice(chunk);
            CAPTURING.fetch_add(chunk.len(), Relaxed);
        } else {
            self.give_up();
        }
    }

    /// Ends the capture: the response is too large to replay.
    pub fn give_up(&mut self) {
        if !self.too_large {
            self.too_large = true;
            CAPTURING.fetch_sub(self.body.len(), Relaxed);
            self.body = Vec::new();
        }
    }

    /// The response received, out of the budget.
    pub fn take_response(&mut self) -> Response {
        CAPTURING.fetch_sub(self.body.len(), Relaxed);
        let body = Rc::new(core::mem::take(&mut self.body));
        Response {
            body,
            ..core::mem::take(&mut self.response)
        }
    }

    /// Bytes being captured in this VM.
    pub fn in_vm() -> usize {
        CAPTURING.load(Relaxed)
    }
}

impl Drop for Capture {
    fn drop(&mut self) {
        CAPTURING.fetch_sub(self.body.len(), Relaxed);
    }
}

/// One policy's stores.
#[derive(Default)]
pub struct Replay {
    /// In-flight de-duplication for collapsed forwarding.
    pub collapse: Option<RequestCache>,
    /// The last successful response per request key.
    pub stale: Option<RequestCache>,
    /// Leaders' responses handed to their waiters, by entry.
    collapsed: VecMap<u64, Response>,
    /// The collapsed reply last handed out, prepared once for all of its waiters.
    fan: Option<(u64, Collapsed)>,
    /// Stale copies, by entry.
    kept: VecMap<u64, Response>,
}

impl Replay {
    /// The stores `policy` asks for (a cache that fails to build is left off).
    pub fn new(policy: &Policy, seed: u64) -> Self {
        Replay {
            collapse: policy
                .collapse
                .as_ref()
                .and_then(|c| RequestCache::new(c.cache.clone(), seed).ok()),
            stale: policy
                .stale
                .as_ref()
                .and_then(|s| RequestCache::new(s.cache.clone(), seed ^ 1).ok()),
            ..Replay::default()
        }
    }

    /// Keeps `response` as the stale copy for `key` (replacing an older one).
    pub fn keep(&mut self, key: &[u8], response: Response, now: Nanos) {
        let Some(c) = self.stale.as_mut() else { return };
        let _ = c.invalidate(ScopeId::GLOBAL, key, now);
        if let Lookup::Lead(lead) = c.lookup(ScopeId::GLOBAL, key, now) {
            // Each pair also costs its two strings and their allocations (≈ 48 B in a
            // wasm32 VM): many tiny headers must not slip past `max_bytes`.
            let headers: usize = response
                .headers
                .iter()
                .map(|(k, v)| k.len() + v.len() + 48)
                .sum();
            let bytes = (response.body.len() + headers + key.len()) as u64;
            if let Some(entry) = c.fill(lead, bytes, now).and_then(|s| s.entry) {
                self.kept.insert(entry.to_raw(), response);
            }
        }
        self.drain_stale(now);
    }

    /// The stale copy for `key`, if one no older than the store's TTL is kept.
    pub fn stale(&mut self, key: &[u8], now: Nanos) -> Option<&Response> {
        let entry = self.stale.as_mut()?.get(ScopeId::GLOBAL, key, now);
        self.drain_stale(now);
        self.kept.get(&entry?.to_raw())
    }

    fn drain_stale(&mut self, now: Nanos) {
        while let Some(ev) = self.stale.as_mut().and_then(|c| c.poll(now)) {
            if let CacheEvent::Removed { entry, .. } = ev {
                self.kept.remove(&entry.to_raw());
            }
        }
    }

    /// Settles a leader with its response: waiters get it (`ok`: a success the
    /// classifier accepted, else a failure, which waiters also get unless the policy
    /// retries). `None`: nothing to replay (the body was too large): the next waiter
    /// leads.
    pub fn settle(
        &mut self,
        lead: Lead,
        key: &[u8],
        response: Option<Response>,
        ok: bool,
        now: Nanos,
    ) {
        let Some(c) = self.collapse.as_mut() else {
            return;
        };
        let Some(response) = response else {
            c.cancel_lead(lead, now);
            return;
        };
        let bytes = response.body.len() as u64;
        let settled = if ok {
            c.fill(lead, bytes, now)
        } else {
            c.fail(lead, bytes, now)
        };
        if let Some(entry) = settled.and_then(|s| s.entry) {
            self.collapsed.insert(entry.to_raw(), response);
        }
        // Nothing is served after the waiters got it: collapsing, not caching.
        let _ = c.invalidate(ScopeId::GLOBAL, key, now);
    }

    /// Ends `lead` without a payload for its waiters: each goes upstream on its own,
    /// at once (the response varies on a header their key does not hold).
    pub fn release(&mut self, lead: Lead, key: &[u8], now: Nanos) {
        if let Some(c) = self.collapse.as_mut() {
            let _ = c.fill(lead, 0, now);
            let _ = c.invalidate(ScopeId::GLOBAL, key, now);
        }
    }

    /// The next collapse event; payloads of removed entries are dropped here.
    pub fn poll(&mut self, now: Nanos) -> Option<CacheEvent> {
        loop {
            let ev = self.collapse.as_mut()?.poll(now)?;
            match ev {
                CacheEvent::Removed { entry, .. } => {
                    let id = entry.to_raw();
                    self.collapsed.remove(&id);
                    if self.fan.as_ref().is_some_and(|(e, _)| *e == id) {
                        self.fan = None;
                    }
                }
                ev => return Some(ev),
            }
        }
    }

    /// A leader's response kept for its waiters, as they get it: prepared at the
    /// first waiter, the same bytes for every other one (not a copy each).
    pub fn collapsed(&mut self, entry: EntryId, now: Nanos) -> Option<Collapsed> {
        let id = entry.to_raw();
        match &self.fan {
            Some((e, c)) if *e == id => Some(c.clone()),
            _ => {
                let r = self.collapsed.get(&id)?;
                let (tag, kept) = match r.stale {
                    true => ("stale", Some(now.saturating_sub(r.at) / 1_000_000_000)),
                    false => ("collapsed", None),
                };
                let c = Collapsed {
                    status: r.status,
                    headers: Rc::new(replay_headers(r, tag, kept)),
                    body: r.body.clone(),
                };
                self.fan = Some((id, c.clone()));
                Some(c)
            }
        }
    }

    /// Time-driven work: expired waits.
    pub fn tick(&mut self, now: Nanos) {
        self.drain_stale(now);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn responses_for_one_client_are_private() {
        let h = |k: &str, v: &str| vec![(k.to_string(), v.to_string())];
        for stale in [false, true] {
            assert!(private(&h("set-cookie", "s=1"), stale));
            assert!(private(&h("cache-control", "max-age=60, Private"), stale));
            assert!(private(&h("cache-control", "private=\"x-user\""), stale));
            assert!(private(&h("cache-control", "no-store"), stale));
            // No reuse without asking the upstream (found by an HTTP review).
            assert!(private(&h("cache-control", "no-cache"), stale));
            assert!(private(
                &h("cache-control", "No-Cache=\"set-cookie\""),
                stale
            ));
            assert!(!private(&h("cache-control", "public, max-age=60"), stale));
            assert!(!private(&h("etag", "\"private\""), stale));
        }
        // Fresh only: handed to waiters, never served stale (RFC 9111 §4.2.4).
        for v in [
            "max-age=0, must-revalidate",
            "proxy-revalidate",
            "s-maxage=0",
            " S-MAXAGE = 60",
        ] {
            assert!(!private(&h("cache-control", v), false), "{v}");
            assert!(private(&h("cache-control", v), true), "{v}");
        }
    }

    #[test]
    fn hop_by_hop_and_per_exchange_headers_are_never_replayed() {
        for h in [
            "connection",
            "transfer-encoding",
            ":status",
            "x-fusewire",
            "content-length",
            "set-cookie",
            "x-request-id",
            "x-envoy-upstream-service-time",
            "x-envoy-peer-metadata",
            "x-envoy-peer-metadata-id",
        ] {
            assert!(!replayable(h), "{h}");
        }
        for h in ["content-type", "etag", "cache-control"] {
            assert!(replayable(h), "{h}");
        }
    }

    /// A capture stops at its limit; captures share the VM's budget, and each gives
    /// its bytes back when it ends (found by review: 300 concurrent 16 MiB captures
    /// failed an allocation and trapped). One test: the budget is process-wide.
    #[test]
    fn captures_stop_at_their_limit_and_share_the_vm_budget() {
        let mut c = Capture::new(4);
        c.body(b"ab");
        c.body(b"cd");
        assert_eq!(c.body, b"abcd");
        assert!(c.fits(0) && !c.fits(1), "4 of 4 bytes held");
        c.body(b"e");
        assert!(c.too_large && c.body.is_empty() && !c.fits(0));
        assert_eq!(Capture::in_vm(), 0);
        let chunk = vec![7u8; 1 << 20];
        let mut held: Vec<Capture> = Vec::new();
        let full = CAPTURE_BUDGET >> 20;
        for _ in 0..full {
            let mut c = Capture::new(16 << 20);
            c.body(&chunk);
            assert!(!c.too_large);
            held.push(c);
        }
        assert_eq!(Capture::in_vm(), CAPTURE_BUDGET);
        let mut over = Capture::new(16 << 20);
        over.body(&chunk);
        assert!(over.too_large, "past the budget the capture stops");
        let mut first = held.remove(0);
        assert_eq!(first.take_response().body.len(), 1 << 20);
        drop(first);
        drop(held);
        assert_eq!(Capture::in_vm(), 0, "every capture gave its bytes back");
        let mut again = Capture::new(16 << 20);
        again.body(&chunk);
        assert!(!again.too_large);
    }
}
