//! Shared-state decoding never panics on any bytes, and whatever decodes re-encodes to
//! a value that decodes the same. The whole worker path (read → decode → admit →
//! record → flush, bulkhead slots, probing for a slot) also survives arbitrary stored
//! bytes in every slot the key may look at.
#![no_main]

use fusewire_core::config::Config;
use fusewire_core::shared::codec::{self, Kind};
use fusewire_core::shared::memory::{MemoryStore, Rules};
use fusewire_core::shared::{KeyState, LAYOUT};
use fusewire_core::{Engine, Outcome, SharedConfig, Start};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    if let Ok(s) = codec::decode::<KeyState>(Kind::KeyState, data) {
        let again = codec::encode(Kind::KeyState, &s);
        assert_eq!(codec::decode::<KeyState>(Kind::KeyState, &again), Ok(s));
    }
    let rules = match data.first().map(|b| b % 3) {
        Some(0) => Rules::Envoy,
        Some(1) => Rules::Kong,
        _ => Rules::Script,
    };
    let mut store = MemoryStore::new(rules);
    let cfg = Config::from_json(r#"{"bulkhead": {"max_concurrent": 3}, "keys": {"max_keys": 4}}"#)
        .expect("valid");
    for slot in ["0", "1", "2", "3", "~overflow"] {
        store.raw_set(&format!("fusewire/{LAYOUT}/p/{slot}"), data);
    }
    let now = u64::from_le_bytes(data.get(..8).and_then(|b| b.try_into().ok()).unwrap_or([0; 8]));
    let mut e = Engine::shared(SharedConfig::default(), 11).expect("valid");
    let p = e.add_policy("p", cfg).expect("valid");
    for (i, name) in ["k", "other", "k", "third"].iter().enumerate() {
        let t = now.wrapping_add(i as u64 * 50_000_000);
        let Some(k) = e.key(p, name, t) else { continue };
        e.prepare(k, t);
        drive(&mut e, &mut store, t);
        if let Start::Running(permit) = e.start(k, t, 7) {
            let _ = e.complete(permit, Outcome::Failure, t.wrapping_add(5), 7);
        }
        while e.poll(t.wrapping_add(200_000_000), 9).is_some() {}
        drive(&mut e, &mut store, t);
    }
});

/// The host's loop: a round of I/O must end whatever the store holds.
fn drive(e: &mut Engine, store: &mut MemoryStore, t: u64) {
    let mut rounds = 0;
    while let Some(io) = e.poll_io(t, 7) {
        let (id, a) = (io.id, store.exec(&io));
        e.io_done(id, a.as_answer(), t, 7);
        rounds += 1;
        assert!(rounds < 1000, "endless I/O round");
    }
}
