//! Stored bytes written by an earlier release of this schema version (postcard through
//! serde, before the codec was written by hand) decode, and re-encode to the very same
//! bytes: a rolling upgrade keeps every key's shared state. The states come from a
//! two-worker scenario (bulkhead slots held, a trip, half-open probes, slow start,
//! warm-up) on the in-memory store.

use fusewire_core::shared::codec::{self, Kind};
use fusewire_core::shared::KeyState;
use fusewire_core::Phase;

const EARLIER: &[&str] = &[
    "46570401016b80a094a58d1d00000000000000000000000180eac9938f1d8094ebdc030ae80700008a051ded",
    "46570401016b80a094a58d1d00000000000000000000000180eac9938f1d8094ebdc030ae8070002b9f3ddf1090180a094a58d1df2e6bbe3130180a094a58d1dbeaf2892",
    "46570401016b80aca1c38f1d00000000000000000000000180eac9938f1d8094ebdc030ae8070002b9f3ddf1090280aca1c38f1df2e6bbe3130280aca1c38f1dbf0a9390",
    "46570401016b80aca1c38f1d0000000000010000000000008094ebdc030ae80701000301000000000002b9f3ddf1090280aca1c38f1df2e6bbe3130280aca1c38f1dcabb84aa",
    "46570401016b80aca1c38f1d0000000000010000000000008094ebdc030ae80701000602000000010002b9f3ddf1090280aca1c38f1df2e6bbe3130280aca1c38f1d78867057",
    "46570401016b80aca1c38f1d0000000000000000000000008094ebdc030ae80701000602000000020002b9f3ddf1090280aca1c38f1df2e6bbe3130280aca1c38f1da884bc6b",
    "46570401016b80aca1c38f1d0000000000010000000000008094ebdc030ae80701000603000000020002b9f3ddf1090280aca1c38f1df2e6bbe3130280aca1c38f1d6a4303ea",
    "46570401016b80aca1c38f1d0000000000020000000000008094ebdc030ae80701000604000000020002b9f3ddf1090280aca1c38f1df2e6bbe3130280aca1c38f1d29ae2d88",
    "46570401016b80aca1c38f1d0000000000000000000000008094ebdc030ae80701000604000000030002b9f3ddf1090280aca1c38f1df2e6bbe3130280aca1c38f1d0fed6023",
    "46570401016b80aca1c38f1d0000000000010000000000008094ebdc030ae80701000605000000030002b9f3ddf1090280aca1c38f1df2e6bbe3130280aca1c38f1dcd2adfa2",
    "46570401016b80aca1c38f1d010180aca1c38f1d8090b993a21d01000000000000008094ebdc030ae80701000606000000030002b9f3ddf1090280aca1c38f1df2e6bbe3130280aca1c38f1dc668ee33",
    "46570401016b80aca1c38f1d010180aca1c38f1d8090b993a21d01000000000000008094ebdc030ae80701000606000000040002b9f3ddf1090280aca1c38f1df2e6bbe3130280aca1c38f1d402e3be1",
    "46570401016b80eef8f28f1d010180aca1c38f1d8090b993a21d01000000000000008094ebdc030ae80701000606000000040002b9f3ddf1090180eef8f28f1df2e6bbe3130180eef8f28f1d7ecec80f",
    "46570401016b80d290c3a21d020280aca1c38f1d8090b993a21d01000000000000008094ebdc030ae80701000606000000040002b9f3ddf1090180d290c3a21df2e6bbe3130180d290c3a21dded19c55",
    "46570401016b80a8d3cfa61d020280aca1c38f1d8090b993a21d010001808ceb9fb91d01000000008094ebdc030ae80701000606000000040002b9f3ddf1090280a8d3cfa61df2e6bbe3130180d290c3a21dbdffd8a2",
    "46570401016b80a8d3cfa61d020280aca1c38f1d8090b993a21d010002808ceb9fb91d808ceb9fb91d02000000008094ebdc030ae80701000606000000040002b9f3ddf1090280a8d3cfa61df2e6bbe3130280a8d3cfa61df9ea7353",
    "46570401016b80a8d3cfa61d020280aca1c38f1d8090b993a21d01000200808ceb9fb91d02010000008094ebdc030aee07020606060000000400000100000000000002b9f3ddf1090280a8d3cfa61df2e6bbe3130280a8d3cfa61dd516302c",
    "46570401016b80a8d3cfa61d000380aca1c38f1d8090b993a21d00000000000180a8d3cfa61d00008094ebdc030aee070002b9f3ddf1090280a8d3cfa61df2e6bbe3130280a8d3cfa61dc3a3bb4d",
    "46570401016b80eaaaffa61d000380aca1c38f1d8090b993a21d00000000000180a8d3cfa61d00008094ebdc030aee070002b9f3ddf1090180eaaaffa61df2e6bbe3130180eaaaffa61d2b219e0c",
    "46570401016b80eed9dea71d000380aca1c38f1d8090b993a21d00000000000180a8d3cfa61d00008094ebdc030aef0701000100000000000101f2e6bbe3130180eaaaffa61d05662c16",
    "46570401016b80eed9dea71d000380aca1c38f1d8090b993a21d00000000000180a8d3cfa61d00008094ebdc030aef07010002000000000002008625016a",
];

fn bytes(hex: &str) -> Vec<u8> {
    (0..hex.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(&hex[i..i + 2], 16).unwrap())
        .collect()
}

#[test]
fn earlier_bytes_decode_and_re_encode_unchanged() {
    let mut phases = Vec::new();
    let (mut leases, mut ledgers, mut ramps, mut warm) = (0, 0, 0, 0);
    for hex in EARLIER {
        let b = bytes(hex);
        let s: KeyState = codec::decode(Kind::KeyState, &b).expect("decodes");
        assert_eq!(codec::encode(Kind::KeyState, &s), b, "{s:?}");
        assert_eq!(s.name, "k");
        phases.push(s.breaker.phase());
        leases += usize::from(!s.breaker.probe_leases().iter().all(|&d| d == 0));
        ledgers += usize::from(s.ledger.in_flight(s.touched_at, u64::MAX) > 0);
        ramps += usize::from(s.breaker.ramp_started_at().is_some());
        warm += usize::from(s.breaker.warming_up(s.touched_at));
    }
    // The fixtures cover every phase and every optional part of the state.
    for p in [Phase::Closed, Phase::Open, Phase::HalfOpen] {
        assert!(phases.contains(&p), "{p:?} missing");
    }
    assert!(leases > 0 && ledgers > 0 && ramps > 0 && warm > 0);
}

/// Write receipts (asynchronous stores) make a state v5; without them it stays v4,
/// byte for byte as above. Each state has one encoding: a v4 header over receipts, or
/// a v5 header without them, is refused.
#[test]
fn receipts_are_v5_and_only_v5() {
    let earlier = bytes(EARLIER[3]);
    let mut s: KeyState = codec::decode(Kind::KeyState, &earlier).expect("v4");
    assert_eq!(codec::encode(Kind::KeyState, &s), earlier);
    assert!(s.receipts.stamp(7, 42, 1_000, 30_000));
    let v5 = codec::encode(Kind::KeyState, &s);
    assert_eq!(v5[2], 5);
    let back: KeyState = codec::decode(Kind::KeyState, &v5).expect("v5");
    assert_eq!(back.receipts.seq(7), Some(42));
    assert_eq!(back, s);
    let relabel = |b: &[u8], version: u8| {
        let mut b = b[..b.len() - 4].to_vec();
        b[2] = version;
        let crc = codec::crc32(&b);
        b.extend_from_slice(&crc.to_le_bytes());
        b
    };
    assert_eq!(
        codec::decode::<KeyState>(Kind::KeyState, &relabel(&v5, 4)),
        Err(codec::DecodeError::Payload)
    );
    assert_eq!(
        codec::decode::<KeyState>(Kind::KeyState, &relabel(&earlier, 5)),
        Err(codec::DecodeError::Payload)
    );
}
