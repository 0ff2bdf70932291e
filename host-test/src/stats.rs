//! Process-wide stats behind proxy-wasm metrics, with Envoy's update rules and
//! `/stats` / Prometheus text output.

use std::collections::BTreeMap;
use std::sync::Mutex;

use crate::abi::{MetricType, Status};

/// Envoy's default histogram bucket bounds.
pub const HISTOGRAM_BUCKETS: [f64; 19] = [
    0.5, 1.0, 5.0, 10.0, 25.0, 50.0, 100.0, 250.0, 500.0, 1000.0, 2500.0, 5000.0, 10000.0, 30000.0,
    60000.0, 300000.0, 600000.0, 1800000.0, 3600000.0,
];

/// Current value of one stat.
#[derive(Clone, Debug, PartialEq, serde::Serialize, serde::Deserialize)]
#[serde(tag = "type", rename_all = "lowercase")]
pub enum MetricValue {
    /// A counter's total.
    Counter {
        /// Total.
        value: u64,
    },
    /// A gauge's current value.
    Gauge {
        /// Value (Envoy gauges are u64: a decrement below 0 wraps around).
        value: u64,
    },
    /// A histogram's recorded samples summary.
    Histogram {
        /// Number of samples.
        count: u64,
        /// Sum of samples.
        sum: u64,
        /// Cumulative counts per [`HISTOGRAM_BUCKETS`] bound.
        buckets: Vec<u64>,
    },
}

impl MetricValue {
    /// The counter/gauge value, or the histogram's sample count.
    pub fn scalar(&self) -> u64 {
        match self {
            MetricValue::Counter { value } | MetricValue::Gauge { value } => *value,
            MetricValue::Histogram { count, .. } => *count,
        }
    }
}

/// The stats of one simulated Envoy process.
#[derive(Default)]
pub struct Stats {
    inner: Mutex<Vec<(String, MetricValue)>>,
    index: Mutex<BTreeMap<(MetricType, String), usize>>,
}

impl Stats {
    /// The process-wide stat for (type, name), created on first definition.
    pub fn define(&self, ty: MetricType, name: &str) -> usize {
        let mut idx = self.index.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(i) = idx.get(&(ty, name.to_string())) {
            return *i;
        }
        let mut v = self.inner.lock().unwrap_or_else(|e| e.into_inner());
        let value = match ty {
            MetricType::Counter => MetricValue::Counter { value: 0 },
            MetricType::Gauge => MetricValue::Gauge { value: 0 },
            MetricType::Histogram => MetricValue::Histogram {
                count: 0,
                sum: 0,
                buckets: vec![0; HISTOGRAM_BUCKETS.len()],
            },
        };
        v.push((name.to_string(), value));
        idx.insert((ty, name.to_string()), v.len() - 1);
        v.len() - 1
    }

    fn with<R>(&self, stat: usize, f: impl FnOnce(&mut MetricValue) -> R) -> Option<R> {
        let mut v = self.inner.lock().unwrap_or_else(|e| e.into_inner());
        v.get_mut(stat).map(|(_, m)| f(m))
    }

    /// `proxy_increment_metric`: counter needs offset > 0 (else BAD_ARGUMENT); gauge
    /// adds (negative subtracts); histogram → BAD_ARGUMENT.
    pub fn increment(&self, stat: usize, offset: i64) -> Status {
        self.with(stat, |m| match m {
            MetricValue::Counter { value } => {
                if offset <= 0 {
                    Status::BadArgument
                } else {
                    *value = value.wrapping_add(offset as u64);
                    Status::Ok
                }
            }
            MetricValue::Gauge { value } => {
                if offset >= 0 {
                    *value = value.wrapping_add(offset as u64);
                } else {
                    // Envoy's Gauge::sub on a u64: wraps below 0.
                    *value = value.wrapping_sub(offset.unsigned_abs());
                }
                Status::Ok
            }
            MetricValue::Histogram { .. } => Status::BadArgument,
        })
        .unwrap_or(Status::NotFound)
    }

    /// `proxy_record_metric`: counter adds, gauge sets, histogram records a sample.
    pub fn record(&self, stat: usize, v: u64) -> Status {
        self.with(stat, |m| match m {
            MetricValue::Counter { value } => *value = value.wrapping_add(v),
            MetricValue::Gauge { value } => *value = v,
            MetricValue::Histogram {
                count,
                sum,
                buckets,
            } => {
                *count += 1;
                *sum = sum.wrapping_add(v);
                for (b, bound) in buckets.iter_mut().zip(HISTOGRAM_BUCKETS) {
                    if v as f64 <= bound {
                        *b += 1;
                    }
                }
            }
        })
        .map(|_| Status::Ok)
        .unwrap_or(Status::NotFound)
    }

    /// `proxy_get_metric`: histogram → BAD_ARGUMENT.
    pub fn get(&self, stat: usize) -> Result<u64, Status> {
        self.with(stat, |m| match m {
            MetricValue::Counter { value } | MetricValue::Gauge { value } => Ok(*value),
            MetricValue::Histogram { .. } => Err(Status::BadArgument),
        })
        .unwrap_or(Err(Status::NotFound))
    }

    /// Every stat, sorted by name.
    pub fn snapshot(&self) -> Vec<(String, MetricValue)> {
        let mut v = self.inner.lock().unwrap_or_else(|e| e.into_inner()).clone();
        v.sort_by(|a, b| a.0.cmp(&b.0));
        v
    }

    /// The stat named `name` (first by type order counter, gauge, histogram).
    pub fn value(&self, name: &str) -> Option<MetricValue> {
        self.snapshot()
            .into_iter()
            .find(|(n, _)| n == name)
            .map(|(_, v)| v)
    }

    /// `/stats`-style text: `wasmcustom.<name>: <value>` per stat.
    pub fn stats_text(&self) -> String {
        let mut out = String::new();
        for (name, v) in self.snapshot() {
            match v {
                MetricValue::Counter { value } | MetricValue::Gauge { value } => {
                    out.push_str(&format!("wasmcustom.{name}: {value}\n"));
                }
                MetricValue::Histogram { count, sum, .. } => {
                    out.push_str(&format!("wasmcustom.{name}: count={count} sum={sum}\n"));
                }
            }
        }
        out
    }

    /// `/stats/prometheus` text: sanitized names, no `envoy_` prefix, names starting
    /// with a digit dropped.
    pub fn prometheus_text(&self) -> String {
        let mut out = String::new();
        for (name, v) in self.snapshot() {
            let Some(n) = prometheus_name(&name) else {
                continue;
            };
            match v {
                MetricValue::Counter { value } => {
                    out.push_str(&format!("# TYPE {n} counter\n{n}{{}} {value}\n"));
                }
                MetricValue::Gauge { value } => {
                    out.push_str(&format!("# TYPE {n} gauge\n{n}{{}} {value}\n"));
                }
                MetricValue::Histogram {
                    count,
                    sum,
                    buckets,
                } => {
                    out.push_str(&format!("# TYPE {n} histogram\n"));
                    for (b, bound) in buckets.iter().zip(HISTOGRAM_BUCKETS) {
                        out.push_str(&format!("{n}_bucket{{le=\"{bound}\"}} {b}\n"));
                    }
                    out.push_str(&format!("{n}_bucket{{le=\"+Inf\"}} {count}\n"));
                    out.push_str(&format!("{n}_sum{{}} {sum}\n{n}_count{{}} {count}\n"));
                }
            }
        }
        out
    }
}

/// Envoy's Prometheus name for a custom stat: non `[a-zA-Z0-9_]` → `_`; None when the
/// name starts with a digit (Envoy drops it).
pub fn prometheus_name(name: &str) -> Option<String> {
    if name.is_empty() || name.as_bytes()[0].is_ascii_digit() {
        return None;
    }
    Some(
        name.chars()
            .map(|c| {
                if c.is_ascii_alphanumeric() || c == '_' {
                    c
                } else {
                    '_'
                }
            })
            .collect(),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn envoy_update_rules() {
        let s = Stats::default();
        let c = s.define(MetricType::Counter, "c");
        let g = s.define(MetricType::Gauge, "g");
        let h = s.define(MetricType::Histogram, "h");
        assert_eq!(s.define(MetricType::Counter, "c"), c);
        assert_eq!(s.increment(c, 0), Status::BadArgument);
        assert_eq!(s.increment(c, -1), Status::BadArgument);
        assert_eq!(s.increment(c, 2), Status::Ok);
        assert_eq!(s.record(c, 3), Status::Ok);
        assert_eq!(s.get(c), Ok(5));
        assert_eq!(s.record(g, 10), Status::Ok);
        assert_eq!(s.increment(g, -4), Status::Ok);
        assert_eq!(s.get(g), Ok(6));
        assert_eq!(s.record(h, 7), Status::Ok);
        assert_eq!(s.get(h), Err(Status::BadArgument));
        assert_eq!(s.increment(h, 1), Status::BadArgument);
        assert_eq!(s.get(99), Err(Status::NotFound));
    }

    #[test]
    fn text_outputs() {
        let s = Stats::default();
        let c = s.define(MetricType::Counter, "fusewire.calls-ok");
        s.define(MetricType::Counter, "9lives");
        s.increment(c, 4);
        assert!(s.stats_text().contains("wasmcustom.fusewire.calls-ok: 4\n"));
        let p = s.prometheus_text();
        assert!(p.contains("# TYPE fusewire_calls_ok counter\nfusewire_calls_ok{} 4\n"));
        assert!(!p.contains("9lives"));
        assert!(!p.contains("envoy_"));
    }
}
