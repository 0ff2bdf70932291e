//! The process-wide shared-data store (one namespace per vm_id), the global CAS
//! counter, and shared queues.

use std::collections::{HashMap, VecDeque};
use std::sync::Mutex;

use crate::abi::Status;

/// Which compare-and-swap rules `proxy_set_shared_data` follows.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, serde::Deserialize, serde::Serialize)]
#[serde(rename_all = "lowercase")]
pub enum CasMode {
    /// Envoy (lenient): cas 0 overwrites; an absent key is always inserted, even with
    /// a non-zero cas; an existing key with cas != stored → CAS_MISMATCH. Empty values
    /// are stored, never deleted.
    #[default]
    Envoy,
    /// Kong ngx_wasm_module (strict): cas must equal the stored token; cas 0 means
    /// "key must be absent"; a null value (ptr 0, len 0) deletes the key.
    Kong,
}

#[derive(Default)]
struct Queue {
    items: VecDeque<Vec<u8>>,
    /// (worker, root context id) of the last VM that registered the queue.
    owner: Option<usize>,
}

#[derive(Default)]
struct Inner {
    /// Global CAS counter: the last token handed out (0 = none yet).
    cas: u32,
    data: HashMap<String, HashMap<String, (Vec<u8>, u32)>>,
    queue_ids: HashMap<(String, String), u32>,
    queues: Vec<Queue>,
}

/// Shared data and shared queues of one simulated Envoy process.
#[derive(Default)]
pub struct SharedStore {
    inner: Mutex<Inner>,
}

impl Inner {
    fn next_cas(&mut self) -> u32 {
        self.cas = self.cas.wrapping_add(1);
        if self.cas == 0 {
            self.cas = 1;
        }
        self.cas
    }
}

impl SharedStore {
    fn lock(&self) -> std::sync::MutexGuard<'_, Inner> {
        self.inner.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// `proxy_get_shared_data`: the value and its CAS token, or None (NOT_FOUND).
    pub fn get(&self, vm_id: &str, key: &str) -> Option<(Vec<u8>, u32)> {
        self.lock().data.get(vm_id)?.get(key).cloned()
    }

    /// `proxy_set_shared_data` under `mode`. `value` None is the ABI's null value
    /// (ptr 0, len 0).
    pub fn set(
        &self,
        mode: CasMode,
        vm_id: &str,
        key: &str,
        value: Option<&[u8]>,
        cas: u32,
    ) -> Status {
        let mut g = self.lock();
        let current = g.data.get(vm_id).and_then(|m| m.get(key)).map(|(_, c)| *c);
        match mode {
            CasMode::Envoy => {
                if let Some(stored) = current {
                    if cas != 0 && cas != stored {
                        return Status::CasMismatch;
                    }
                }
            }
            CasMode::Kong => {
                if cas != current.unwrap_or(0) {
                    return Status::CasMismatch;
                }
                if value.is_none() {
                    if let Some(m) = g.data.get_mut(vm_id) {
                        m.remove(key);
                    }
                    return Status::Ok;
                }
            }
        }
        let token = g.next_cas();
        g.data
            .entry(vm_id.to_string())
            .or_default()
            .insert(key.to_string(), (value.unwrap_or_default().to_vec(), token));
        Status::Ok
    }

    /// All keys of one vm_id with their values and tokens, sorted by key.
    pub fn snapshot(&self, vm_id: &str) -> Vec<(String, Vec<u8>, u32)> {
        let g = self.lock();
        let mut v: Vec<_> = g
            .data
            .get(vm_id)
            .map(|m| {
                m.iter()
                    .map(|(k, (v, c))| (k.clone(), v.clone(), *c))
                    .collect()
            })
            .unwrap_or_default();
        v.sort_by(|a, b| a.0.cmp(&b.0));
        v
    }

    /// The last CAS token handed out (0 before the first write).
    pub fn last_cas(&self) -> u32 {
        self.lock().cas
    }

    /// Sets the global CAS counter (to test wrap-around).
    pub fn set_last_cas(&self, v: u32) {
        self.lock().cas = v;
    }

    /// `proxy_register_shared_queue`: the queue id for (vm_id, name); the registering
    /// worker becomes the one notified on enqueue (last registration wins).
    pub fn register_queue(&self, vm_id: &str, name: &str, worker: usize) -> u32 {
        let mut g = self.lock();
        let key = (vm_id.to_string(), name.to_string());
        let id = match g.queue_ids.get(&key) {
            Some(id) => *id,
            None => {
                g.queues.push(Queue::default());
                let id = g.queues.len() as u32;
                g.queue_ids.insert(key, id);
                id
            }
        };
        g.queues[id as usize - 1].owner = Some(worker);
        id
    }

    /// `proxy_resolve_shared_queue`.
    pub fn resolve_queue(&self, vm_id: &str, name: &str) -> Option<u32> {
        self.lock()
            .queue_ids
            .get(&(vm_id.to_string(), name.to_string()))
            .copied()
    }

    /// `proxy_enqueue_shared_queue`: Err(NOT_FOUND) for an unknown id, else the worker
    /// to notify.
    pub fn enqueue(&self, id: u32, value: &[u8]) -> Result<Option<usize>, Status> {
        let mut g = self.lock();
        let q = g
            .queues
            .get_mut((id as usize).wrapping_sub(1))
            .ok_or(Status::NotFound)?;
        q.items.push_back(value.to_vec());
        Ok(q.owner)
    }

    /// `proxy_dequeue_shared_queue`: NOT_FOUND for an unknown id, EMPTY when empty.
    pub fn dequeue(&self, id: u32) -> Result<Vec<u8>, Status> {
        let mut g = self.lock();
        let q = g
            .queues
            .get_mut((id as usize).wrapping_sub(1))
            .ok_or(Status::NotFound)?;
        q.items.pop_front().ok_or(Status::Empty)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn envoy_rules_are_lenient() {
        let s = SharedStore::default();
        // absent key with a non-zero cas is inserted
        assert_eq!(s.set(CasMode::Envoy, "vm", "k", Some(b"a"), 77), Status::Ok);
        let (_, c1) = s.get("vm", "k").unwrap();
        assert_eq!(c1, 1);
        assert_eq!(
            s.set(CasMode::Envoy, "vm", "k", Some(b"b"), c1 + 5),
            Status::CasMismatch
        );
        assert_eq!(s.get("vm", "k").unwrap().0, b"a");
        assert_eq!(s.set(CasMode::Envoy, "vm", "k", Some(b"c"), c1), Status::Ok);
        assert_eq!(s.set(CasMode::Envoy, "vm", "k", None, 0), Status::Ok);
        assert_eq!(s.get("vm", "k"), Some((vec![], 3)));
        assert_eq!(s.get("other", "k"), None);
    }

    #[test]
    fn kong_rules_are_strict() {
        let s = SharedStore::default();
        assert_eq!(
            s.set(CasMode::Kong, "vm", "k", Some(b"a"), 5),
            Status::CasMismatch
        );
        assert_eq!(s.set(CasMode::Kong, "vm", "k", Some(b"a"), 0), Status::Ok);
        assert_eq!(
            s.set(CasMode::Kong, "vm", "k", Some(b"b"), 0),
            Status::CasMismatch
        );
        let c = s.get("vm", "k").unwrap().1;
        assert_eq!(s.set(CasMode::Kong, "vm", "k", None, c), Status::Ok);
        assert_eq!(s.get("vm", "k"), None);
    }

    #[test]
    fn cas_counter_is_global_and_skips_zero() {
        let s = SharedStore::default();
        s.set(CasMode::Envoy, "a", "x", Some(b"1"), 0);
        s.set(CasMode::Envoy, "b", "y", Some(b"1"), 0);
        assert_eq!(s.get("b", "y").unwrap().1, 2);
        s.set_last_cas(u32::MAX);
        s.set(CasMode::Envoy, "a", "x", Some(b"2"), 0);
        assert_eq!(s.get("a", "x").unwrap().1, 1);
    }

    #[test]
    fn queues() {
        let s = SharedStore::default();
        let id = s.register_queue("vm", "q", 3);
        assert_eq!(s.register_queue("vm", "q", 4), id);
        assert_eq!(s.resolve_queue("vm", "q"), Some(id));
        assert_eq!(s.resolve_queue("vm2", "q"), None);
        assert_eq!(s.dequeue(id), Err(Status::Empty));
        assert_eq!(s.enqueue(id, b"m"), Ok(Some(4)));
        assert_eq!(s.dequeue(id), Ok(b"m".to_vec()));
        assert_eq!(s.enqueue(99, b"m"), Err(Status::NotFound));
        assert_eq!(s.dequeue(0), Err(Status::NotFound));
    }
}
