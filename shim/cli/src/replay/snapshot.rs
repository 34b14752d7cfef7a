//! PyTorch memory snapshots (`torch.cuda.memory._dump_snapshot`): a pickled dict whose
//! `device_traces` holds, per device, the caching allocator's history as dicts with `action`,
//! `addr`, `size`, `stream` and (PyTorch >= 2.1) `time_us`, as `_memory_snapshot` in
//! torch/csrc/cuda/Module.cpp writes them and torch/cuda/_memory_viz.py reads them.
//!
//! `alloc` and `free_completed` are the tensor requests (a block is live until its free has
//! completed, which is what `memory_allocated()` counts); `segment_alloc`/`segment_free` and, with
//! expandable segments, `segment_map`/`segment_unmap` are what the allocator took from the
//! driver. `free_requested`, `oom`, `snapshot` and actions newer than this reader are skipped.

use std::collections::BTreeMap;
use std::io::BufRead;

use serde_pickle::{DeOptions, HashableValue, Value};

use super::load::{finish, Builder, LoadError, Step, Trace};

pub fn load(file: &str, name: &str, input: impl BufRead) -> Result<Vec<Trace>, LoadError> {
    let error = |message: String| LoadError {
        file: file.to_string(),
        line: None,
        message,
    };
    let options = DeOptions::new()
        .replace_unresolved_globals()
        .replace_recursive_structures();
    let value = serde_pickle::value_from_reader(input, options)
        .map_err(|e| error(format!("not a readable pickle: {}", e)))?;
    let root = match &value {
        Value::Dict(d) => d,
        other => {
            return Err(error(format!(
                "holds a pickled {}, not a PyTorch memory snapshot (a dict with device_traces)",
                kind(other)
            )))
        }
    };
    let traces = match field(root, "device_traces") {
        Some(Value::List(t)) => t,
        Some(other) => {
            return Err(error(format!(
                "device_traces is a {}, not a list",
                kind(other)
            )))
        }
        None => {
            return Err(error(
                "has no device_traces: call torch.cuda.memory._record_memory_history() before \
                 _dump_snapshot()"
                    .to_string(),
            ))
        }
    };
    let mut devices = BTreeMap::new();
    for (device, entries) in traces.iter().enumerate() {
        let at = |i: Option<usize>, message: String| match i {
            Some(i) => error(format!("device_traces[{}][{}]: {}", device, i, message)),
            None => error(format!("device_traces[{}]: {}", device, message)),
        };
        let entries = match entries {
            Value::List(e) => e,
            other => return Err(at(None, format!("is a {}, not a list", kind(other)))),
        };
        if entries.is_empty() {
            continue;
        }
        let device = i32::try_from(device).map_err(|_| at(None, "too many devices".into()))?;
        let mut builder = Builder::default();
        let mut last_time = 0;
        for (i, entry) in entries.iter().enumerate() {
            let entry = match entry {
                Value::Dict(d) => d,
                other => return Err(at(Some(i), format!("is a {}, not a dict", kind(other)))),
            };
            let step = match field(entry, "action") {
                Some(Value::String(a)) => step(a),
                Some(other) => {
                    return Err(at(
                        Some(i),
                        format!("action is a {}, not a string", kind(other)),
                    ))
                }
                None => return Err(at(Some(i), "has no action".to_string())),
            };
            if step == Step::Skip {
                builder
                    .push(step, 0, 0, last_time)
                    .map_err(|m| at(Some(i), m))?;
                continue;
            }
            let number = |key: &str| -> Result<Option<u64>, LoadError> {
                match field(entry, key) {
                    None => Ok(None),
                    Some(Value::I64(n)) if *n >= 0 => Ok(Some(*n as u64)),
                    Some(other) => Err(at(
                        Some(i),
                        format!(
                            "{} is {}, not a byte count or address",
                            key,
                            describe(other)
                        ),
                    )),
                }
            };
            let addr = number("addr")?.ok_or_else(|| at(Some(i), "has no addr".into()))?;
            let size = number("size")?.ok_or_else(|| at(Some(i), "has no size".into()))?;
            // Snapshots older than PyTorch 2.1 have no times; the plot then runs on event order.
            if let Some(t) = number("time_us")? {
                last_time = t;
            }
            let stream = number("stream")?.unwrap_or(0);
            builder
                .push_on(step, addr, size, last_time, stream)
                .map_err(|m| at(Some(i), m))?;
        }
        devices.insert(device, builder);
    }
    Ok(finish(file, name, devices))
}

fn step(action: &str) -> Step {
    match action {
        "alloc" => Step::Allocate,
        "free_completed" => Step::Free,
        "segment_alloc" => Step::SegmentAlloc,
        "segment_free" => Step::SegmentFree,
        "segment_map" => Step::Map,
        "segment_unmap" => Step::Unmap,
        _ => Step::Skip,
    }
}

/// `dict[key]` for a string key, without allocating one per lookup.
fn field<'a>(dict: &'a BTreeMap<HashableValue, Value>, key: &str) -> Option<&'a Value> {
    dict.iter().find_map(|(k, v)| match k {
        HashableValue::String(s) if s == key => Some(v),
        _ => None,
    })
}

fn kind(v: &Value) -> &'static str {
    match v {
        Value::None => "None",
        Value::Bool(_) => "bool",
        Value::I64(_) | Value::Int(_) => "int",
        Value::F64(_) => "float",
        Value::Bytes(_) => "bytes",
        Value::String(_) => "str",
        Value::List(_) => "list",
        Value::Tuple(_) => "tuple",
        Value::Set(_) | Value::FrozenSet(_) => "set",
        Value::Dict(_) => "dict",
    }
}

fn describe(v: &Value) -> String {
    match v {
        Value::I64(n) => n.to_string(),
        Value::Int(_) => "an int beyond 64 bits".to_string(),
        other => format!("a {}", kind(other)),
    }
}
