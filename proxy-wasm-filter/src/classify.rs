//! Failure classification: which upstream results count as FAILURE, TIMEOUT or
//! BAD_REQUEST, from the HTTP status, the gRPC status and Envoy's response flags —
//! judged as the core's one [`Outcome`].
//!
//! gRPC arrives in three shapes (Envoy, `source/common/http/utility.cc`
//! `sendLocalReply`, `source/common/router/router.cc`): a normal response with
//! `grpc-status` in the trailers; a trailers-only reply with `grpc-status` in the
//! headers (the router's own replies to resets and timeouts, and local replies); and
//! no response at all. Router replies carry response flags (UT, UF, URX, ...), which
//! is why flags are read whenever the exchange did not plainly succeed.

use fusewire_core::json::Quoted;
use fusewire_core::json::{self, FromJson, Path, Value};
use fusewire_core::{ConfigError, Nanos, Outcome};

/// A set of HTTP status codes: single codes, classes (`"5xx"`) and ranges
/// (`"500-504"`). Stored as a 600-bit bitmap: O(1) lookup, no allocation.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct StatusSet {
    bits: [u64; 10],
}

/// One entry of a status list in JSON: a number (`503`, `14`) or text (`"5xx"`,
/// `"500-504"`, `"UNAVAILABLE"`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Entry {
    /// A number.
    Code(u32),
    /// Text.
    Text(String),
}

impl FromJson for Entry {
    fn from_json(v: &Value, at: &Path<'_>) -> Result<Self, ConfigError> {
        match v {
            // The number as written in the error (found by review: a saturated
            // 4294967295 was reported).
            Value::U64(n) => u32::try_from(*n)
                .map(Entry::Code)
                .map_err(|_| at.error(fusewire_core::text!("is not a status code, got {n}"))),
            Value::Str(s) => Ok(Entry::Text(s.clone())),
            _ => Err(json::wrong_type(v, at, "a code or a string")),
        }
    }
}

impl StatusSet {
    /// The empty set.
    pub const fn empty() -> Self {
        StatusSet { bits: [0; 10] }
    }

    /// Codes `lo..=hi` (clamped to 100..=599).
    pub fn with_range(mut self, lo: u32, hi: u32) -> Self {
        for c in lo.max(100)..=hi.min(599) {
            self.insert(c);
        }
        self
    }

    fn insert(&mut self, code: u32) {
        if let Some(w) = self.bits.get_mut((code / 64) as usize) {
            *w |= 1 << (code % 64);
        }
    }

    /// Whether every code of `self` is in `other`.
    pub fn within(&self, other: &StatusSet) -> bool {
        self.bits.iter().zip(&other.bits).all(|(a, b)| a & !b == 0)
    }

    /// Whether `code` is in the set.
    #[inline]
    pub fn contains(&self, code: u32) -> bool {
        self.bits
            .get((code / 64) as usize)
            .is_some_and(|w| w & (1 << (code % 64)) != 0)
    }

    /// Parses a JSON list; errors name the entry and the reason.
    pub fn parse(entries: &[Entry]) -> Result<Self, (usize, String)> {
        let mut set = StatusSet::empty();
        for (i, e) in entries.iter().enumerate() {
            let (lo, hi) = match e {
                Entry::Code(c) => (*c, *c),
                Entry::Text(t) => parse_status_text(t).map_err(|r| (i, r))?,
            };
            if !(100..=599).contains(&lo) || !(100..=599).contains(&hi) || lo > hi {
                return Err((
                    i,
                    fusewire_core::text!(
                        "must be a status code or range within 100..=599, got {lo}..={hi}"
                    ),
                ));
            }
            set = set.with_range(lo, hi);
        }
        Ok(set)
    }
}

fn parse_status_text(t: &str) -> Result<(u32, u32), String> {
    let t = t.trim();
    if let [d, x, y] = t.as_bytes() {
        if d.is_ascii_digit() && x.eq_ignore_ascii_case(&b'x') && y.eq_ignore_ascii_case(&b'x') {
            let class = (d - b'0') as u32 * 100;
            return Ok((class, class + 99));
        }
    }
    let num = |s: &str| {
        s.trim().parse::<u32>().map_err(|_| {
            fusewire_core::text!(
                "expected a code (503), a class (\"5xx\") or a range (\"500-504\"), got {}",
                Quoted(t)
            )
        })
    };
    match t.split_once('-') {
        Some((a, z)) => Ok((num(a)?, num(z)?)),
        None => {
            let c = num(t)?;
            Ok((c, c))
        }
    }
}

/// Envoy response flags by bit position in Envoy's `response.flags` bit-vector
/// (`FailedLocalHealthCheck = 0x1` … `UnconditionalDropOverload = 0x20000000`), short
/// names as in access logs.
pub const RESPONSE_FLAGS: &[&str] = &[
    "LH", "UH", "UT", "LR", "UR", "UF", "UC", "UO", "NR", "DI", "FI", "RL", "UAEX", "RLSE", "DC",
    "URX", "SI", "IH", "DPE", "UMSDR", "RFCF", "NFCF", "DT", "UPE", "NC", "OM", "DF", "DO", "DR",
    "UDO",
];

/// Not the upstream's doing: the client went away — its connection closed (DC) or,
/// on HTTP/2 and HTTP/3, it reset the stream (DR) — or broke the protocol (DPE: Envoy
/// resets every stream of the connection), or Envoy's overload manager reset the
/// stream (OM). (Found by review: one malformed HTTP/2 frame failed 30 calls and
/// tripped a healthy upstream's breaker.)
const CLIENT_GONE: FlagSet = FlagSet(0x4000 | 0x1000_0000 | 0x40000 | 0x200_0000);

/// Envoy's own replies that never reach an upstream: drop overload (DO, UDO: a control
/// plane shedding load) and no cluster (NC). They count nowhere unless configured as
/// failure flags (found by review: shedding 60 % of calls tripped the breaker, and
/// then 100 % were refused).
const ENVOY_SHED: FlagSet = FlagSet(0x800_0000 | 0x2000_0000 | 0x100_0000);

/// Envoy's stream timers on the client's side: stream idle (SI) and the stream's
/// maximum duration (DT). Fired while the client still owed part of its request
/// (Envoy answers 408 then), they are the client's doing, not the upstream's (found
/// by review: 20 clients that stopped mid-upload tripped a healthy upstream).
const CLIENT_STALLED: FlagSet = FlagSet(0x10000 | 0x40_0000);

/// Envoy's stream timers: the route timeout (UT), stream idle (SI) and the stream's
/// maximum duration (DT). Fired after a response that started well and before its end,
/// they may be the client's doing: Envoy stops reading the upstream while the client
/// does not read (found by a security review: 20 clients not reading large responses
/// counted 20 timeouts and opened the breaker). The upstream is judged by its time to
/// response headers, as the filter's own deadline judges it.
const STREAM_TIMERS: FlagSet = FlagSet(0x4 | 0x10000 | 0x40_0000);

/// A set of Envoy response flags, with Envoy's own bit values.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct FlagSet(pub u64);

impl FlagSet {
    /// Parses a list of short flag names.
    pub fn parse(names: &[String]) -> Result<Self, (usize, String)> {
        let mut bits = 0;
        for (i, n) in names.iter().enumerate() {
            match RESPONSE_FLAGS.iter().position(|f| f == n) {
                Some(p) => bits |= 1 << p,
                None => {
                    // Pushed, not `join`ed: `join` brings ≈ 1.2 KB into the module.
                    let mut msg =
                        fusewire_core::text!("unknown Envoy response flag {} (known:", Quoted(n));
                    for f in RESPONSE_FLAGS {
                        msg.push(' ');
                        msg.push_str(f);
                    }
                    msg.push(')');
                    return Err((i, msg));
                }
            }
        }
        Ok(FlagSet(bits))
    }

    /// Flags from Envoy's `response.flags` property: a u64 bit-vector (8 bytes LE).
    /// Hosts that report the access-log string form (`"UF,URX"`) are understood too;
    /// anything else is no flags.
    pub fn from_property(raw: &[u8]) -> Self {
        if let Ok(b) = <[u8; 8]>::try_from(raw) {
            return FlagSet(u64::from_le_bytes(b));
        }
        let mut bits = 0;
        for part in raw.split(|&c| c == b',') {
            if let Some(p) = RESPONSE_FLAGS.iter().position(|f| f.as_bytes() == part) {
                bits |= 1 << p;
            }
        }
        FlagSet(bits)
    }

    /// Set of one flag.
    pub fn one(name: &str) -> Self {
        FlagSet(
            RESPONSE_FLAGS
                .iter()
                .position(|f| *f == name)
                .map_or(0, |p| 1 << p),
        )
    }

    /// Whether any flag is in both sets.
    #[inline]
    pub fn intersects(self, other: FlagSet) -> bool {
        self.0 & other.0 != 0
    }

    /// No flag set.
    pub fn is_empty(self) -> bool {
        self.0 == 0
    }
}

/// gRPC status names, indexed by code.
pub const GRPC_CODES: &[&str] = &[
    "OK",
    "CANCELLED",
    "UNKNOWN",
    "INVALID_ARGUMENT",
    "DEADLINE_EXCEEDED",
    "NOT_FOUND",
    "ALREADY_EXISTS",
    "PERMISSION_DENIED",
    "RESOURCE_EXHAUSTED",
    "FAILED_PRECONDITION",
    "ABORTED",
    "OUT_OF_RANGE",
    "UNIMPLEMENTED",
    "INTERNAL",
    "UNAVAILABLE",
    "DATA_LOSS",
    "UNAUTHENTICATED",
];

/// A set of gRPC status codes.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct GrpcSet(u32);

impl GrpcSet {
    /// One code or name as a code.
    pub fn code(e: &Entry) -> Result<u32, String> {
        match e {
            Entry::Code(c) if (*c as usize) < GRPC_CODES.len() => Ok(*c),
            Entry::Code(c) => Err(fusewire_core::text!("gRPC codes are 0..=16, got {c}")),
            Entry::Text(n) => GRPC_CODES
                .iter()
                .position(|g| g.eq_ignore_ascii_case(n))
                .map(|p| p as u32)
                .ok_or_else(|| fusewire_core::text!("unknown gRPC status name {}", Quoted(n))),
        }
    }

    /// Parses a list of codes or names.
    pub fn parse(entries: &[Entry]) -> Result<Self, (usize, String)> {
        let mut bits = 0;
        for (i, e) in entries.iter().enumerate() {
            bits |= 1 << Self::code(e).map_err(|r| (i, r))?;
        }
        Ok(GrpcSet(bits))
    }

    /// Whether `code` is in the set.
    #[inline]
    pub fn contains(self, code: u32) -> bool {
        code < 32 && self.0 & (1 << code) != 0
    }
}

/// A `grpc-timeout` header in nanoseconds: 1 to 8 ASCII digits and a unit (`H`, `M`,
/// `S`, `m`, `u`, `n`), as the gRPC over HTTP/2 spec writes it (saturating: 10⁸ hours
/// is past `u64` nanoseconds); zero or anything else is none.
pub fn grpc_timeout(v: &[u8]) -> Option<u64> {
    let (&unit, digits) = v.split_last()?;
    if digits.is_empty() || digits.len() > 8 || !digits.iter().all(u8::is_ascii_digit) {
        return None;
    }
    let n = digits
        .iter()
        .fold(0u64, |n, d| n * 10 + u64::from(d - b'0'));
    let ns: u64 = match unit {
        b'H' => 3_600_000_000_000,
        b'M' => 60_000_000_000,
        b'S' => 1_000_000_000,
        b'm' => 1_000_000,
        b'u' => 1_000,
        b'n' => 1,
        _ => return None,
    };
    // The spec asks for a positive value; Envoy's router reads 0 as no deadline.
    (n > 0).then(|| n.saturating_mul(ns))
}

/// How an upstream result is judged.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Classifier {
    /// HTTP statuses that are failures.
    pub failure_status: StatusSet,
    /// gRPC statuses that are failures.
    pub failure_grpc: GrpcSet,
    /// Response flags that are failures.
    pub failure_flags: FlagSet,
    /// Response flags that are timeouts (`UT` by default).
    pub timeout_flags: FlagSet,
    /// Whether a stream that ended without any response is a failure.
    pub resets_are_failures: bool,
    /// Whether a gRPC client that gave up at its own deadline (`grpc-timeout`) with no
    /// response yet makes a TIMEOUT (not CANCELLED).
    pub client_deadline: bool,
    /// Shortest client deadline that counts (`client_deadline_min_ms`, ns): a call
    /// with a shorter one that goes away counts nowhere.
    pub client_deadline_min: Nanos,
    /// HTTP statuses that are the caller's fault.
    pub bad_request_status: StatusSet,
    /// gRPC statuses that are the caller's fault.
    pub bad_request_grpc: GrpcSet,
}

/// What the filter saw of one upstream exchange.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Observed {
    /// `:status` of the upstream response, if one arrived.
    pub status: Option<u32>,
    /// `grpc-status` from response headers or trailers, if any.
    pub grpc: Option<u32>,
    /// Envoy response flags (read at `on_log`).
    pub flags: FlagSet,
    /// The response reached its end of stream (headers, body or trailers).
    pub ended: bool,
    /// The stream ended at or after the client's own deadline (`grpc-timeout`).
    pub past_deadline: bool,
    /// The filter never saw the request's end of stream.
    pub request_incomplete: bool,
    /// The response's `content-type` is gRPC's (a gRPC request's).
    pub grpc_response: bool,
}

impl Observed {
    /// The response reached its end of stream (at its headers, body or trailers). A
    /// gRPC one (`rpc`) must end with a `grpc-status` (in its trailers, or its headers
    /// when trailers-only); a 200 with an invalid one, or a gRPC-typed 200 with none, is
    /// UNKNOWN to the client (found by review: it counted as a success, and closed a
    /// half-open breaker). A 200 that is not gRPC at all is judged by its status: the
    /// request's `content-type` is the client's word, and any client could label
    /// calls to a REST upstream gRPC and have its 200s counted as failures (found by a
    /// security review).
    pub fn end(&mut self, rpc: bool) {
        self.ended = true;
        let unknown = match self.grpc {
            Some(g) => g > 16,
            None => self.grpc_response,
        };
        if rpc && self.status == Some(200) && unknown {
            self.grpc = Some(2);
        }
    }

    /// Whether Envoy's response flags can change the verdict (and so must be read):
    /// no response or one cut short, a 5xx, a non-OK gRPC status (a trailers-only
    /// router reply to a gRPC request is a 200), or a request never received in full.
    pub fn needs_flags(&self) -> bool {
        !self.ended
            || self.request_incomplete
            || self.status.is_none_or(|s| s >= 500)
            || self.grpc.is_some_and(|g| g != 0)
    }
}

impl Classifier {
    /// Classifies, in this order: a client-side stream timer (SI, DT) answered by
    /// Envoy's 408 while the request was incomplete → CANCELLED; a stream timer (UT,
    /// SI, DT) cutting short a response that started with a non-failure status →
    /// CANCELLED; timeout flags → TIMEOUT; failure flags → FAILURE;
    /// Envoy's own sheds (DO, UDO, NC) → CANCELLED;
    /// no response, or one cut short before its end of stream → FAILURE if resets are
    /// failures and Envoy set a flag, else if the client went away or broke the
    /// protocol, or the overload manager reset it (flag DC, DR, DPE or OM, or
    /// no flag: Envoy's router answers an upstream reset or timeout itself, with its
    /// flag, and Envoy before 1.30 set no flag for an HTTP/2 client's reset) TIMEOUT
    /// when it had no response headers and its own deadline had passed
    /// (`client_deadline`), else CANCELLED; failure HTTP status → FAILURE; failure
    /// gRPC status → FAILURE; bad-request HTTP or gRPC status → BAD_REQUEST; else
    /// SUCCESS.
    pub fn classify(&self, o: &Observed) -> Outcome {
        // Envoy's own 408 (`maybeRequestTimeoutCode`): not a gRPC trailers-only reply
        // (a bidi call's client keeps its side open while an upstream hangs: that SI
        // is the upstream's), nor after the upstream's own status (found by review).
        if o.request_incomplete && o.status == Some(408) && o.flags.intersects(CLIENT_STALLED) {
            return Outcome::Cancelled;
        }
        let started_well = o.status.is_some_and(|s| !self.failure_status.contains(s));
        if started_well && !o.ended && o.flags.intersects(STREAM_TIMERS) {
            return Outcome::Cancelled;
        }
        if o.flags.intersects(self.timeout_flags) {
            return Outcome::Timeout;
        }
        if o.flags.intersects(self.failure_flags) {
            return Outcome::Failure;
        }
        if o.flags.intersects(ENVOY_SHED) {
            return Outcome::Cancelled;
        }
        let status = match o.status {
            Some(s) if o.ended => s,
            _ => {
                let gone = o.flags.is_empty() || o.flags.intersects(CLIENT_GONE);
                if gone && self.client_deadline && o.past_deadline && o.status.is_none() {
                    // The upstream did not answer within the caller's deadline.
                    return Outcome::Timeout;
                }
                if gone || !self.resets_are_failures {
                    return Outcome::Cancelled;
                }
                return Outcome::Failure;
            }
        };
        if self.failure_status.contains(status) {
            return Outcome::Failure;
        }
        if o.grpc.is_some_and(|g| self.failure_grpc.contains(g)) {
            return Outcome::Failure;
        }
        if self.bad_request_status.contains(status)
            || o.grpc.is_some_and(|g| self.bad_request_grpc.contains(g))
        {
            return Outcome::BadRequest;
        }
        Outcome::Success
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn set(v: &[&str]) -> StatusSet {
        let e: Vec<Entry> = v.iter().map(|s| Entry::Text(s.to_string())).collect();
        StatusSet::parse(&e).unwrap()
    }

    #[test]
    fn status_sets() {
        let s = set(&["5xx", "429", "401-403"]);
        for c in [500, 503, 599, 429, 401, 402, 403] {
            assert!(s.contains(c), "{c}");
        }
        for c in [0, 99, 200, 404, 428, 430, 600, 10_000] {
            assert!(!s.contains(c), "{c}");
        }
        let bad = |v: Entry| StatusSet::parse(&[v]).unwrap_err().1;
        assert!(bad(Entry::Code(99)).contains("100..=599"));
        assert!(bad(Entry::Text("6xx".into())).contains("100..=599"));
        assert!(bad(Entry::Text("504-500".into())).contains("504..=500"));
        assert!(bad(Entry::Text("five".into())).contains("class"));
    }

    #[test]
    fn flags_and_grpc() {
        let f = FlagSet::parse(&["UF".into(), "URX".into()]).unwrap();
        assert!(FlagSet::from_property(b"URX").intersects(f));
        assert!(FlagSet::from_property(b"DC,UF").intersects(f));
        assert!(!FlagSet::from_property(b"UT").intersects(f));
        assert!(!FlagSet::from_property(b"UFX,").intersects(f));
        // Envoy's bit-vector: UF = 0x20, URX = 0x8000, UT = 0x4.
        assert!(FlagSet::from_property(&0x20u64.to_le_bytes()).intersects(f));
        assert!(FlagSet::from_property(&0x8000u64.to_le_bytes()).intersects(f));
        assert_eq!(FlagSet::one("UT"), FlagSet(0x4));
        assert_eq!(FlagSet::one("UO"), FlagSet(0x80));
        assert_eq!(FlagSet::one("DC"), FlagSet(0x4000));
        assert_eq!(FlagSet::one("DF"), FlagSet(0x4000000));
        assert!(FlagSet::parse(&["XX".into()])
            .unwrap_err()
            .1
            .contains("unknown"));
        let g = GrpcSet::parse(&[Entry::Code(14), Entry::Text("internal".into())]).unwrap();
        assert!(g.contains(14) && g.contains(13) && !g.contains(0) && !g.contains(99));
        assert!(GrpcSet::parse(&[Entry::Code(17)]).is_err());
    }

    #[test]
    fn classification_precedence() {
        let c = Classifier {
            failure_status: set(&["5xx"]),
            failure_grpc: GrpcSet::parse(&[Entry::Code(14)]).unwrap(),
            failure_flags: FlagSet::parse(&["UF".into()]).unwrap(),
            timeout_flags: FlagSet::one("UT"),
            resets_are_failures: true,
            client_deadline: true,
            client_deadline_min: 0,
            bad_request_status: set(&["4xx"]),
            bad_request_grpc: GrpcSet::parse(&[Entry::Code(5)]).unwrap(),
        };
        let o = |status: Option<u32>, grpc, flags: &[u8]| Observed {
            status,
            grpc,
            flags: FlagSet::from_property(flags),
            ended: status.is_some(),
            past_deadline: false,
            request_incomplete: false,
            grpc_response: false,
        };
        assert_eq!(c.classify(&o(Some(200), None, b"")), Outcome::Success);
        // Stream idle (SI) or max duration (DT) before the request was in: the client's.
        let stalled = |flags: &[u8]| Observed {
            request_incomplete: true,
            ..o(Some(408), None, flags)
        };
        let c_si = Classifier {
            timeout_flags: FlagSet::parse(&["UT".into(), "SI".into(), "DT".into()]).unwrap(),
            ..c.clone()
        };
        assert_eq!(c_si.classify(&stalled(b"SI")), Outcome::Cancelled);
        assert_eq!(c_si.classify(&stalled(b"DT")), Outcome::Cancelled);
        // A bidi gRPC call whose upstream hangs: Envoy's SI is a trailers-only 200.
        let hung_stream = Observed {
            request_incomplete: true,
            ..o(Some(200), Some(2), b"SI")
        };
        assert_eq!(c_si.classify(&hung_stream), Outcome::Timeout);
        // After the upstream's own 503, its timer is still a timeout.
        let after_503 = Observed {
            request_incomplete: true,
            ended: false,
            ..o(Some(503), None, b"SI")
        };
        assert_eq!(c_si.classify(&after_503), Outcome::Timeout);
        assert_eq!(c_si.classify(&o(Some(504), None, b"SI")), Outcome::Timeout);
        assert_eq!(c_si.classify(&stalled(b"UT")), Outcome::Timeout);
        assert_eq!(c.classify(&o(Some(503), None, b"")), Outcome::Failure);
        assert_eq!(c.classify(&o(Some(404), None, b"")), Outcome::BadRequest);
        assert_eq!(c.classify(&o(Some(504), None, b"UT")), Outcome::Timeout);
        assert_eq!(c.classify(&o(None, None, b"UF")), Outcome::Failure);
        assert_eq!(c.classify(&o(None, None, b"LR")), Outcome::Failure);
        assert_eq!(
            c.classify(&o(None, None, b"")),
            Outcome::Cancelled,
            "no response and no flag: the client left (an HTTP/2 reset before Envoy 1.30)"
        );
        assert_eq!(c.classify(&o(None, None, b"DC")), Outcome::Cancelled);
        assert_eq!(
            c.classify(&o(None, None, b"DR")),
            Outcome::Cancelled,
            "an HTTP/2 client's stream reset"
        );
        assert_eq!(
            CLIENT_GONE,
            FlagSet(
                FlagSet::one("DC").0
                    | FlagSet::one("DR").0
                    | FlagSet::one("DPE").0
                    | FlagSet::one("OM").0
            )
        );
        // Not the upstream's doing (found by review): a client's protocol error resets
        // every stream of its connection (DPE); the overload manager resets a stream
        // (OM); Envoy sheds load (DO, UDO) or finds no cluster (NC) with its own 503.
        assert_eq!(c.classify(&o(None, None, b"DPE")), Outcome::Cancelled);
        assert_eq!(c.classify(&o(None, None, b"OM")), Outcome::Cancelled);
        for f in ["DO", "UDO", "NC"] {
            assert_eq!(
                c.classify(&o(Some(503), None, f.as_bytes())),
                Outcome::Cancelled,
                "{f}"
            );
        }
        assert_eq!(
            ENVOY_SHED,
            FlagSet(FlagSet::one("DO").0 | FlagSet::one("UDO").0 | FlagSet::one("NC").0)
        );
        let strict = Classifier {
            failure_flags: FlagSet::one("DO"),
            ..c.clone()
        };
        assert_eq!(
            strict.classify(&o(Some(503), None, b"DO")),
            Outcome::Failure,
            "a failure flag configured wins"
        );
        assert_eq!(FlagSet::one("DR"), FlagSet(0x1000_0000));
        assert_eq!(FlagSet::one("UDO"), FlagSet(0x2000_0000));
        assert_eq!(c.classify(&o(Some(200), Some(14), b"")), Outcome::Failure);
        assert_eq!(c.classify(&o(Some(200), Some(5), b"")), Outcome::BadRequest);
        assert_eq!(c.classify(&o(Some(200), Some(8), b"")), Outcome::Success);
        // A gRPC route timeout: trailers-only 200 + grpc-status 14 + flag UT.
        let timeout = o(Some(200), Some(14), b"UT");
        assert!(timeout.needs_flags());
        assert_eq!(c.classify(&timeout), Outcome::Timeout);
        assert!(!o(Some(200), Some(0), b"").needs_flags());
        assert!(!o(Some(404), None, b"").needs_flags());
        // Cut short after its headers (found by review: counted as SUCCESS).
        let cut = |flags: &[u8]| Observed {
            ended: false,
            ..o(Some(200), None, flags)
        };
        assert!(cut(b"").needs_flags());
        assert_eq!(c.classify(&cut(b"UF")), Outcome::Failure, "upstream reset");
        // A stream timer after a good start: perhaps a client not reading (Envoy stops
        // reading the upstream), not counted; after a failure status, a timeout.
        assert_eq!(
            c.classify(&cut(b"UT")),
            Outcome::Cancelled,
            "route timeout mid-body"
        );
        let cut_503 = Observed {
            ended: false,
            ..o(Some(503), None, b"UT")
        };
        assert_eq!(c.classify(&cut_503), Outcome::Timeout);
        assert_eq!(c.classify(&cut(b"LR")), Outcome::Failure);
        assert_eq!(c.classify(&cut(b"DR")), Outcome::Cancelled);
        assert_eq!(c.classify(&cut(b"")), Outcome::Cancelled, "the client left");
        let lenient = Classifier {
            resets_are_failures: false,
            ..c.clone()
        };
        assert_eq!(lenient.classify(&o(None, None, b"")), Outcome::Cancelled);
        // The client gave up at its own deadline with nothing from the upstream.
        let late = |status, flags: &[u8]| Observed {
            past_deadline: true,
            ended: false,
            ..o(status, None, flags)
        };
        assert_eq!(c.classify(&late(None, b"DR")), Outcome::Timeout);
        assert_eq!(c.classify(&late(None, b"")), Outcome::Timeout);
        assert_eq!(lenient.classify(&late(None, b"DC")), Outcome::Timeout);
        assert_eq!(
            c.classify(&late(None, b"UF")),
            Outcome::Failure,
            "flags first"
        );
        assert_eq!(
            c.classify(&late(Some(200), b"DR")),
            Outcome::Cancelled,
            "a stream that had its headers is cut by its client's cap"
        );
        let off = Classifier {
            client_deadline: false,
            client_deadline_min: 0,
            ..c
        };
        assert_eq!(off.classify(&late(None, b"DR")), Outcome::Cancelled);
    }

    #[test]
    fn grpc_timeout_header() {
        assert_eq!(grpc_timeout(b"100m"), Some(100_000_000));
        assert_eq!(grpc_timeout(b"5S"), Some(5_000_000_000));
        assert_eq!(grpc_timeout(b"2M"), Some(120_000_000_000));
        assert_eq!(grpc_timeout(b"1H"), Some(3_600_000_000_000));
        assert_eq!(grpc_timeout(b"250u"), Some(250_000));
        assert_eq!(grpc_timeout(b"7n"), Some(7));
        assert_eq!(grpc_timeout(b"99999999H"), Some(u64::MAX), "saturates");
        assert_eq!(grpc_timeout(b"99999999M"), Some(5_999_999_940_000_000_000));
        for bad in [
            &b""[..],
            b"m",
            b"100",
            b"100x",
            b"-1S",
            b" 1S",
            b"123456789S",
            b"1.5S",
            b"0S",
            b"00000000H",
            b"0n",
        ] {
            assert_eq!(
                grpc_timeout(bad),
                None,
                "{:?}",
                String::from_utf8_lossy(bad)
            );
        }
    }
}
