//! The core's JSON reader (behind `config::parse_json`) against serde_json as the
//! reference: the same documents are accepted with the same values, the same are
//! refused, and nothing panics.

use fusewire_core::json::{self, Value as Ours};
use proptest::prelude::*;
use serde_json::Value;

/// Our tree as serde_json's (objects keep the last of duplicate members, as serde_json's
/// `Value` does).
fn as_serde(v: Ours) -> Value {
    match v {
        Ours::Null => Value::Null,
        Ours::Bool(b) => Value::Bool(b),
        Ours::U64(n) => Value::from(n),
        Ours::I64(n) => Value::from(n),
        Ours::F64(n) => Value::from(n),
        Ours::Str(s) => Value::String(s),
        Ours::Array(items) => Value::Array(items.into_iter().map(as_serde).collect()),
        Ours::Object(members) => {
            Value::Object(members.into_iter().map(|(k, v)| (k, as_serde(v))).collect())
        }
    }
}

/// Equal, numbers within the reader's documented precision (exact up to 15 significant
/// digits and exponents within ±22, else a few units in the last place).
fn same(a: &Value, b: &Value) -> bool {
    match (a, b) {
        (Value::Number(x), Value::Number(y)) if x.is_f64() || y.is_f64() => {
            let (x, y) = (
                x.as_f64().unwrap_or(f64::NAN),
                y.as_f64().unwrap_or(f64::NAN),
            );
            x == y || (x - y).abs() <= 1e-15 * y.abs() || (x - y).abs() < 1e-300
        }
        (Value::Array(x), Value::Array(y)) => {
            x.len() == y.len() && x.iter().zip(y).all(|(a, b)| same(a, b))
        }
        (Value::Object(x), Value::Object(y)) => {
            x.len() == y.len() && x.iter().all(|(k, v)| y.get(k).is_some_and(|w| same(v, w)))
        }
        _ => a == b,
    }
}

fn parse_json(bytes: &[u8]) -> Result<Value, fusewire_core::ConfigError> {
    json::parse(bytes).map(as_serde)
}

fn value() -> impl Strategy<Value = Value> {
    let leaf = prop_oneof![
        Just(Value::Null),
        any::<bool>().prop_map(Value::Bool),
        any::<u64>().prop_map(Value::from),
        any::<i64>().prop_map(Value::from),
        any::<f64>()
            .prop_filter("finite", |f| f.is_finite())
            .prop_map(Value::from),
        "\\PC{0,12}".prop_map(Value::String),
        any::<String>().prop_map(Value::String),
    ];
    leaf.prop_recursive(4, 48, 6, |inner| {
        prop_oneof![
            prop::collection::vec(inner.clone(), 0..6).prop_map(Value::Array),
            prop::collection::vec(("[a-z_]{0,6}", inner), 0..6)
                .prop_map(|kv| Value::Object(kv.into_iter().collect())),
        ]
    })
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(512))]

    #[test]
    fn reads_what_serde_json_writes(v in value(), pretty in any::<bool>()) {
        let text = if pretty {
            serde_json::to_string_pretty(&v).unwrap()
        } else {
            serde_json::to_string(&v).unwrap()
        };
        let ours = parse_json(text.as_bytes()).map_err(|e| TestCaseError::fail(e.to_string()))?;
        prop_assert!(same(&ours, &v), "{:?} vs {:?}", ours, v);
    }

    /// Damaged documents: both readers agree on accept/refuse and on the value.
    #[test]
    fn agrees_with_serde_json_on_damaged_documents(
        v in value(),
        cuts in prop::collection::vec((any::<prop::sample::Index>(), 0u8..4, any::<u8>()), 1..4),
    ) {
        let mut bytes = serde_json::to_vec(&v).unwrap();
        for (at, op, b) in cuts {
            if bytes.is_empty() {
                break;
            }
            let i = at.index(bytes.len());
            const PICKS: &[u8] = b"{}[],:\"\\-.0123456789eEtrufalsn \x01\xff";
            let pick = PICKS[b as usize % PICKS.len()];
            match op {
                0 => { bytes.remove(i); }
                1 => bytes.insert(i, pick),
                2 => bytes[i] = pick,
                _ => bytes.truncate(i),
            }
        }
        let reference = serde_json::from_slice::<Value>(&bytes);
        let ours = parse_json(&bytes);
        match (&reference, &ours) {
            (Ok(a), Ok(b)) => prop_assert!(same(b, a), "{:?} vs {:?}", b, a),
            (Err(_), Err(e)) => prop_assert!(!e.reason.is_empty()),
            _ => prop_assert!(
                false,
                "{:?}: serde_json {:?}, ours {:?}",
                String::from_utf8_lossy(&bytes),
                reference.map_err(|e| e.to_string()),
                ours.map_err(|e| e.to_string())
            ),
        }
    }
}

#[test]
fn deep_nesting_is_refused_not_a_stack_overflow() {
    let deep = "[".repeat(100_000);
    let e = parse_json(deep.as_bytes()).unwrap_err();
    assert!(e.reason.contains("recursion limit"), "{e}");
}
