//! Reading trace files into the compact form replays run over: allocations numbered in order,
//! frees pointing at those numbers, so a replay indexes a vector instead of hashing pointers
//! (bytehound's way) and the readers' tolerance of odd traces is decided once, here.

use std::collections::{BTreeMap, HashMap};
use std::fmt;
use std::fs::File;
use std::io::{self, BufRead, BufReader, Read};
use std::path::Path;

use flate2::read::MultiGzDecoder;
use rocmguard_core::trace::{Action, Reader};

use super::snapshot;

/// Larger requests are corrupt rows, not allocations; refusing them keeps every sum in range.
pub const MAX_SIZE: u64 = 1 << 52;

/// One replayable step.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Op {
    /// Allocation number `id` (0, 1, 2, ... in trace order) of `size` bytes.
    Alloc { id: u32, size: u64 },
    /// Allocation `id` goes back; `size` is what it asked for.
    Free { id: u32, size: u64 },
    /// The recording program's allocator took `size` bytes from the driver.
    SegAlloc { size: u64 },
    /// ... or gave them back.
    SegFree { size: u64 },
}

/// One device's events from one file, ready to replay.
#[derive(Clone, Debug, Default)]
pub struct Trace {
    /// The file's name without extensions, with the device where a file holds several.
    pub name: String,
    pub file: String,
    pub device: i32,
    pub ops: Vec<Op>,
    /// Microseconds since the first event, one per op, never decreasing.
    pub times: Vec<u64>,
    pub allocs: u64,
    pub frees: u64,
    pub peak_live: u64,
    /// Frees of pointers that were not live (allocated before the recording began).
    pub unknown_frees: u64,
    /// Allocations never freed by the end of the trace.
    pub live_at_end: u64,
    pub live_at_end_bytes: u64,
    /// Allocations of a pointer that was still live: its free was not recorded, so one is implied.
    pub reused_pointers: u64,
    /// Whether the trace records its allocator's segments (then the `recorded` policy exists).
    pub has_segments: bool,
    pub unknown_segment_frees: u64,
    /// Rows that replays skip: the shim's own events, failed requests, snapshot markers.
    pub skipped: u64,
    /// Stream of each allocation (0, 1, ... in order of first use); empty when the trace has
    /// one stream.
    pub streams: Vec<u32>,
    /// Device synchronizes rocmguard made to reuse freed blocks while the trace was recorded
    /// (its `sync` rows): many where the program's work left one stream's order.
    pub recorded_syncs: u64,
}

impl Trace {
    /// Allocations and frees: what a policy replays.
    pub fn events(&self) -> u64 {
        self.allocs + self.frees
    }

    /// The stream allocation `id` was made on (PyTorch caches blocks per stream).
    pub fn stream(&self, id: u32) -> u32 {
        self.streams.get(id as usize).copied().unwrap_or(0)
    }

    /// How many streams the trace allocates on: 1 for one whose rows name none (one written by
    /// `ROCMGUARD_TRACE`, where `hipMalloc` names no stream), so a program may use more.
    pub fn stream_count(&self) -> u32 {
        self.streams.iter().max().map_or(1, |&s| s + 1)
    }
}

/// A file that could not be read: `FILE:LINE: what was wrong`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct LoadError {
    pub file: String,
    pub line: Option<u64>,
    pub message: String,
}

impl fmt::Display for LoadError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.line {
            Some(line) => write!(f, "{}:{}: {}", self.file, line, self.message),
            None => write!(f, "{}: {}", self.file, self.message),
        }
    }
}

impl std::error::Error for LoadError {}

/// Reads every trace in the file at `path` (one per device it records).
pub fn load_path(path: &Path) -> Result<Vec<Trace>, LoadError> {
    let file = path.display().to_string();
    let f = File::open(path).map_err(|e| LoadError {
        file: file.clone(),
        line: None,
        message: format!("cannot open: {}", e),
    })?;
    load_reader(&file, &stem(path), BufReader::with_capacity(1 << 16, f))
}

/// Reads traces from `input`, whatever its format: gzip, a PyTorch snapshot pickle or CSV are
/// told apart by their first bytes, not by the file's name. `file` labels errors; `name` the
/// traces.
pub fn load_reader<R: BufRead>(file: &str, name: &str, input: R) -> Result<Vec<Trace>, LoadError> {
    load_detected(file, name, Box::new(input), true)
}

fn load_detected(
    file: &str,
    name: &str,
    mut input: Box<dyn BufRead + '_>,
    gzip_allowed: bool,
) -> Result<Vec<Trace>, LoadError> {
    let error = |line, message: String| LoadError {
        file: file.to_string(),
        line,
        message,
    };
    let head = input
        .fill_buf()
        .map_err(|e| error(None, format!("cannot read: {}", e)))?;
    match head {
        [] => Err(error(None, "is empty".to_string())),
        [0x1f, 0x8b, ..] if gzip_allowed => {
            let inner = BufReader::with_capacity(1 << 16, Gzip(MultiGzDecoder::new(input)));
            load_detected(file, name, Box::new(inner), false)
        }
        [0x1f, 0x8b, ..] => Err(error(None, "gzip inside gzip".to_string())),
        [0x80, ..] => snapshot::load(file, name, input),
        _ => load_csv(file, name, input),
    }
}

/// A gzip decoder whose errors say that the compression, not the text, is broken.
struct Gzip<R>(MultiGzDecoder<R>);

impl<R: BufRead> Read for Gzip<R> {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        self.0.read(buf).map_err(|e| {
            io::Error::new(
                e.kind(),
                format!("the gzip data is truncated or corrupt ({})", e),
            )
        })
    }
}

fn load_csv(file: &str, name: &str, input: impl BufRead) -> Result<Vec<Trace>, LoadError> {
    let mut reader = Reader::new(input);
    let mut devices: BTreeMap<i32, Builder> = BTreeMap::new();
    loop {
        // Copy the row out: it borrows the reader's line buffer.
        let (action, pointer, size, time, device, stream) = match reader.next_event() {
            Ok(Some(e)) => (e.action, e.pointer, e.size, e.time_us, e.device, e.stream),
            Ok(None) => break,
            Err(e) => {
                return Err(LoadError {
                    file: file.to_string(),
                    line: Some(e.line),
                    message: e.message,
                })
            }
        };
        let step = match action {
            Action::Allocate => Step::Allocate,
            Action::Free => Step::Free,
            Action::SegmentAlloc => Step::SegmentAlloc,
            Action::SegmentFree => Step::SegmentFree,
            Action::Sync => Step::Sync,
            _ => Step::Skip,
        };
        let line = reader.line();
        devices
            .entry(device)
            .or_default()
            .push_on(step, pointer, size, time, stream)
            .map_err(|message| LoadError {
                file: file.to_string(),
                line: Some(line),
                message,
            })?;
    }
    Ok(finish(file, name, devices))
}

/// The traces of a file, one per device, named after the file.
pub(crate) fn finish(file: &str, name: &str, devices: BTreeMap<i32, Builder>) -> Vec<Trace> {
    let several = devices.len() > 1;
    devices
        .into_iter()
        .map(|(device, b)| {
            let mut t = b.finish();
            t.name = if several {
                format!("{} (dev {})", name, device)
            } else {
                name.to_string()
            };
            t.file = file.to_string();
            t.device = device;
            t
        })
        .collect()
}

/// The file name without directory and without `.gz`, `.csv`, `.pickle`, `.pkl`.
fn stem(path: &Path) -> String {
    let mut name = path.file_name().map_or_else(
        || path.display().to_string(),
        |n| n.to_string_lossy().into_owned(),
    );
    for ext in [".gz", ".csv", ".pickle", ".pkl"] {
        if name.len() > ext.len() && name.ends_with(ext) {
            name.truncate(name.len() - ext.len());
        }
    }
    name
}

/// What a row means to a replay, whatever format it came from.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Step {
    Allocate,
    Free,
    SegmentAlloc,
    SegmentFree,
    /// Expandable segments: memory mapped into (or unmapped from) a reserved range.
    Map,
    Unmap,
    /// rocmguard synchronized the device to reuse freed blocks: counted, then skipped.
    Sync,
    Skip,
}

/// Builds one device's trace row by row.
#[derive(Default)]
pub(crate) struct Builder {
    trace: Trace,
    /// Live pointer -> (allocation number, size).
    live: HashMap<u64, (u32, u64)>,
    segments: HashMap<u64, u64>,
    live_bytes: u64,
    first_time: Option<u64>,
    last_time: u64,
    /// Stream values seen, numbered in order of first use.
    stream_ids: HashMap<u64, u32>,
}

impl Builder {
    /// Adds one row of stream 0; an error says what is wrong with it.
    pub(crate) fn push(
        &mut self,
        step: Step,
        pointer: u64,
        size: u64,
        time_us: u64,
    ) -> Result<(), String> {
        self.push_on(step, pointer, size, time_us, 0)
    }

    /// Adds one row made on `stream`.
    pub(crate) fn push_on(
        &mut self,
        step: Step,
        pointer: u64,
        size: u64,
        time_us: u64,
        stream: u64,
    ) -> Result<(), String> {
        let next = self.stream_ids.len() as u32;
        let stream = *self.stream_ids.entry(stream).or_insert(next);
        let t = &mut self.trace;
        if matches!(step, Step::Skip | Step::Sync) {
            t.recorded_syncs += u64::from(step == Step::Sync);
            t.skipped += 1;
            return Ok(());
        }
        if size > MAX_SIZE && matches!(step, Step::Allocate | Step::SegmentAlloc | Step::Map) {
            return Err(format!(
                "size {} is over 4 PiB: not a real allocation",
                size
            ));
        }
        // Rows of several threads interleave slightly out of order; the plot's axis must not.
        let first = *self.first_time.get_or_insert(time_us);
        let time = time_us.saturating_sub(first).max(self.last_time);
        self.last_time = time;
        let op = match step {
            Step::Allocate => {
                if let Some((id, size)) = self.live.remove(&pointer) {
                    t.reused_pointers += 1;
                    t.frees += 1;
                    self.live_bytes = self.live_bytes.saturating_sub(size);
                    t.ops.push(Op::Free { id, size });
                    t.times.push(time);
                }
                let id = u32::try_from(t.allocs)
                    .map_err(|_| "more than 4 billion allocations in one trace".to_string())?;
                t.allocs += 1;
                t.streams.push(stream);
                self.live.insert(pointer, (id, size));
                // Saturating: a crafted file of many 4 PiB rows must not wrap the sum.
                self.live_bytes = self.live_bytes.saturating_add(size);
                t.peak_live = t.peak_live.max(self.live_bytes);
                Op::Alloc { id, size }
            }
            Step::Free => match self.live.remove(&pointer) {
                Some((id, size)) => {
                    t.frees += 1;
                    self.live_bytes = self.live_bytes.saturating_sub(size);
                    Op::Free { id, size }
                }
                None => {
                    t.unknown_frees += 1;
                    return Ok(());
                }
            },
            Step::SegmentAlloc => {
                t.has_segments = true;
                if let Some(old) = self.segments.insert(pointer, size) {
                    t.ops.push(Op::SegFree { size: old });
                    t.times.push(time);
                }
                Op::SegAlloc { size }
            }
            Step::SegmentFree => match self.segments.remove(&pointer) {
                Some(size) => Op::SegFree { size },
                None => {
                    t.unknown_segment_frees += 1;
                    return Ok(());
                }
            },
            Step::Map => {
                t.has_segments = true;
                Op::SegAlloc { size }
            }
            Step::Unmap => Op::SegFree { size },
            Step::Skip | Step::Sync => return Ok(()),
        };
        t.ops.push(op);
        t.times.push(time);
        Ok(())
    }

    pub(crate) fn finish(self) -> Trace {
        let mut t = self.trace;
        if t.streams.iter().all(|&s| s == 0) {
            t.streams = Vec::new();
        }
        t.live_at_end = self.live.len() as u64;
        t.live_at_end_bytes = self.live_bytes;
        t
    }
}

/// Reads all of `input` as one file would be read, for tests and fuzzing.
pub fn load_bytes(file: &str, bytes: &[u8]) -> Result<Vec<Trace>, LoadError> {
    load_reader(file, file, bytes)
}
