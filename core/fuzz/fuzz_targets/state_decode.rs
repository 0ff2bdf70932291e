//! Shared-state decoding never panics on any bytes, and whatever decodes re-encodes to
//! a value that decodes the same. The whole worker path (read → decode → admit →
//! record → flush → slot acquire/release) also survives arbitrary stored bytes.
#![no_main]

use fusewire_core::config::Config;
use fusewire_core::shared::codec::{self, Kind};
use fusewire_core::shared::{
    BreakerParams, KeyHandle, KeyState, MemoryStore, Outcome, SharedParams, SlotLedger,
};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    if let Ok(s) = codec::decode::<KeyState>(Kind::KeyState, data) {
        let again = codec::encode(Kind::KeyState, &s).expect("encodes");
        assert_eq!(codec::decode::<KeyState>(Kind::KeyState, &again), Ok(s));
    }
    if let Ok(l) = codec::decode::<SlotLedger>(Kind::SlotLedger, data) {
        let again = codec::encode(Kind::SlotLedger, &l).expect("encodes");
        assert_eq!(codec::decode::<SlotLedger>(Kind::SlotLedger, &again), Ok(l));
    }
    let _ = codec::decode::<u64>(Kind::Sequence, data);

    // The bytes as the stored state and ledger of a key, then a few calls.
    let p = BreakerParams::from_config(&Config::default());
    let sp = SharedParams::default();
    let mut store = MemoryStore::new(data.first().is_some_and(|b| b & 1 == 1));
    store.raw_set("fusewire/v1/state/k", data);
    store.raw_set("fusewire/v1/slots/k", data);
    let mut h = KeyHandle::new("k", &p);
    let now = u64::from_le_bytes(
        data.get(..8)
            .and_then(|b| b.try_into().ok())
            .unwrap_or([0; 8]),
    );
    let (_, _) = h.admit(&mut store, &sp, &p, now, 7);
    h.record(&p, 1, Outcome::Failure, 5, now);
    h.flush(&mut store, &sp, &p, now, 7);
    h.acquire_slot(&mut store, &sp, 1, 10, now);
    h.release_slot(&mut store, &sp, 1, now);
    h.tick(&mut store, &sp, &p, 1, now.wrapping_add(1), 9);
});
