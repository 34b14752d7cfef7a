//! The trace format, one module for both sides: the recorder (the preload library's writer
//! thread) writes it and `rocmguard replay` reads it.
//!
//! It is RAPIDS RMM's allocation-log CSV, so RMM's replay benchmark, pandas and any CSV tool read
//! our traces, and we read RMM's and the PyTorch traces in `data/traces/`. Our own columns come
//! after RMM's six:
//!
//! ```text
//! Thread,Time,Action,Pointer,Size,Stream,Version,Device,Detail
//! 140211,1795322658533748,allocate,0x7f3d4e000000,154389504,0x0,1,0,hipMalloc
//! ```
//!
//! | column  | written as                                   | also read                          |
//! | ------- | -------------------------------------------- | ---------------------------------- |
//! | Thread  | OS thread id, decimal                        | `0x` hex                           |
//! | Time    | microseconds of a monotonic clock, decimal   | RMM's `HH:MM:SS.ffffff`, `s.frac`  |
//! | Action  | one of [`Action`]                            | RMM's `deallocate`                 |
//! | Pointer | device address, `0x` hex                     | hex without `0x` (newer RMM)       |
//! | Size    | bytes, decimal                               |                                    |
//! | Stream  | stream handle, `0x` hex                      | decimal, bare hex                  |
//! | Version | [`FORMAT_VERSION`] of the writer             | absent: RMM's and older files      |
//! | Device  | device ordinal, decimal                      | absent: device 0                   |
//! | Detail  | free text without commas, quotes or newlines | absent: empty                      |
//!
//! Versioning: every row carries the writer's [`FORMAT_VERSION`], so files stay rectangular for
//! CSV tools and concatenated traces stay readable (a repeated header line starts a new column
//! layout). Readers find our columns by their header names and ignore columns they do not know,
//! so new columns need no new version; bump [`FORMAT_VERSION`] only for a change that an older
//! reader would misread (a new action, a new meaning for a column). A reader rejects rows of a
//! version newer than its own instead of guessing.

use std::fmt::{self, Write as _};
use std::io::{BufRead, Read};

/// The version of the format this code writes and the newest it reads.
pub const FORMAT_VERSION: u32 = 1;

/// RMM's columns, which every trace starts with.
pub const RMM_COLUMNS: [&str; 6] = ["Thread", "Time", "Action", "Pointer", "Size", "Stream"];

/// Lines longer than this are not trace rows; the reader stops instead of buffering a binary file.
pub const MAX_LINE: usize = 64 << 10;

const HEADER: &str = "Thread,Time,Action,Pointer,Size,Stream,Version,Device,Detail";

/// The header line this module writes, without its newline.
pub fn header() -> &'static str {
    HEADER
}

/// What a row records. The first four are replayed: what the program asked for and what its
/// allocator took from the driver. The rest are the shim's own events, which replays skip.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Action {
    /// The program got a block (`hipMalloc` and friends, or a tensor from PyTorch's allocator).
    Allocate,
    /// The program gave a block back.
    Free,
    /// The allocator took a segment from the driver.
    SegmentAlloc,
    /// The allocator gave a segment back to the driver.
    SegmentFree,
    /// RMM's `allocate failure`: the request failed; Size is what was asked for.
    AllocateFailure,
    /// The pool released cached segments; Size is the bytes released.
    Trim,
    /// The pool trimmed and retried after an out-of-memory; Size is the request.
    Retry,
    /// The program got an out-of-memory error; Size is the request, Detail the error code.
    Oom,
    /// Reserved memory passed a warning level; Size is the reserved bytes.
    CapWarning,
    /// The pool synchronized the device to reuse freed blocks.
    Sync,
}

impl Action {
    /// Every action, in the order the documentation lists them.
    pub const ALL: [Action; 10] = [
        Action::Allocate,
        Action::Free,
        Action::SegmentAlloc,
        Action::SegmentFree,
        Action::AllocateFailure,
        Action::Trim,
        Action::Retry,
        Action::Oom,
        Action::CapWarning,
        Action::Sync,
    ];

    /// The word in the Action column.
    pub fn as_str(self) -> &'static str {
        match self {
            Action::Allocate => "allocate",
            Action::Free => "free",
            Action::SegmentAlloc => "segment_alloc",
            Action::SegmentFree => "segment_free",
            Action::AllocateFailure => "allocate failure",
            Action::Trim => "trim",
            Action::Retry => "retry",
            Action::Oom => "oom",
            Action::CapWarning => "cap_warning",
            Action::Sync => "sync",
        }
    }

    /// The action for a word of the Action column, RMM's `deallocate` included.
    pub fn parse(word: &str) -> Option<Action> {
        if word == "deallocate" {
            return Some(Action::Free);
        }
        Action::ALL.iter().copied().find(|a| a.as_str() == word)
    }
}

impl fmt::Display for Action {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// One row. `detail` borrows, so the recorder writes rows without allocating and the reader
/// hands them out straight from its line buffer.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Event<'a> {
    pub thread: u64,
    /// Microseconds; only differences matter.
    pub time_us: u64,
    pub action: Action,
    pub pointer: u64,
    pub size: u64,
    pub stream: u64,
    pub device: i32,
    pub detail: &'a str,
}

impl<'a> Event<'a> {
    /// An event with thread, time, stream, device and detail zero or empty.
    pub fn new(action: Action, pointer: u64, size: u64) -> Event<'a> {
        Event {
            thread: 0,
            time_us: 0,
            action,
            pointer,
            size,
            stream: 0,
            device: 0,
            detail: "",
        }
    }
}

/// Appends [`header`] and a newline to `out`.
pub fn write_header(out: &mut String) {
    out.push_str(HEADER);
    out.push('\n');
}

/// Appends `event` as one line, newline included, to `out`. Allocates only when `out` has to grow,
/// so a writer thread that reuses one buffer allocates nothing per event. Commas, quotes and line
/// breaks in the detail become spaces, so the row always has its nine fields.
pub fn write_event(event: &Event, out: &mut String) {
    // Writing to a String cannot fail.
    let _ = write!(
        out,
        "{},{},{},{:#x},{},{:#x},{},{},",
        event.thread,
        event.time_us,
        event.action.as_str(),
        event.pointer,
        event.size,
        event.stream,
        FORMAT_VERSION,
        event.device
    );
    for c in event.detail.chars() {
        out.push(match c {
            ',' | '"' | '\n' | '\r' => ' ',
            c => c,
        });
    }
    out.push('\n');
}

/// A row or header that could not be read: which line (1-based) and what was wrong.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TraceError {
    pub line: u64,
    pub message: String,
}

impl TraceError {
    fn new(line: u64, message: String) -> TraceError {
        TraceError { line, message }
    }
}

impl fmt::Display for TraceError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "line {}: {}", self.line, self.message)
    }
}

impl std::error::Error for TraceError {}

/// Where a header put the columns after RMM's six.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Columns {
    version: Option<usize>,
    device: Option<usize>,
    detail: Option<usize>,
}

impl Columns {
    /// RMM's own layout: the six columns and nothing else.
    pub fn rmm() -> Columns {
        Columns::default()
    }

    /// Reads a header line. It must start with RMM's six columns; later ones are found by name
    /// and unknown ones are ignored.
    pub fn parse_header(line: &str, line_no: u64) -> Result<Columns, TraceError> {
        let names: Vec<&str> = line.split(',').map(str::trim).collect();
        let rmm_ok = names.len() >= RMM_COLUMNS.len()
            && RMM_COLUMNS
                .iter()
                .zip(&names)
                .all(|(want, got)| want.eq_ignore_ascii_case(got));
        if !rmm_ok {
            return Err(TraceError::new(
                line_no,
                format!(
                    "header `{}` does not start with {} (RMM's allocation-log layout)",
                    shorten(line),
                    RMM_COLUMNS.join(",")
                ),
            ));
        }
        let find = |name: &str| {
            names
                .iter()
                .skip(RMM_COLUMNS.len())
                .position(|n| n.eq_ignore_ascii_case(name))
                .map(|i| i + RMM_COLUMNS.len())
        };
        Ok(Columns {
            version: find("Version"),
            device: find("Device"),
            detail: find("Detail"),
        })
    }
}

/// Whether `line` is a header line rather than a row (its first field is `Thread`).
pub fn is_header(line: &str) -> bool {
    line.split(',')
        .next()
        .map_or(false, |f| f.trim().eq_ignore_ascii_case("Thread"))
}

/// Reads one row laid out as `columns` says. `line_no` only labels errors.
pub fn parse_event<'a>(
    line: &'a str,
    columns: &Columns,
    line_no: u64,
) -> Result<Event<'a>, TraceError> {
    let err = |message: String| TraceError::new(line_no, message);
    let mut fields: [&str; 16] = [""; 16];
    let mut count = 0;
    for f in line.split(',') {
        if count < fields.len() {
            fields[count] = f.trim();
        }
        count += 1;
    }
    if count < RMM_COLUMNS.len() {
        return Err(err(format!(
            "{} field{} where a row has at least {} ({})",
            count,
            if count == 1 { "" } else { "s" },
            RMM_COLUMNS.len(),
            RMM_COLUMNS.join(",")
        )));
    }
    let extra = |i: Option<usize>| i.and_then(|i| fields.get(i)).copied().unwrap_or("");
    let version = extra(columns.version);
    if !version.is_empty() {
        match version.parse::<u32>() {
            Ok(v) if v <= FORMAT_VERSION => {}
            Ok(v) => {
                return Err(err(format!(
                    "written in trace format {}, newer than this rocmguard reads ({})",
                    v, FORMAT_VERSION
                )))
            }
            Err(_) => {
                return Err(err(format!(
                    "Version `{}` is not a number",
                    shorten(version)
                )))
            }
        }
    }
    let action = Action::parse(fields[2]).ok_or_else(|| {
        err(format!(
            "unknown action `{}` (known: {}, deallocate)",
            shorten(fields[2]),
            Action::ALL
                .iter()
                .map(|a| a.as_str())
                .collect::<Vec<_>>()
                .join(", ")
        ))
    })?;
    let device = extra(columns.device);
    Ok(Event {
        thread: parse_id(fields[0]).ok_or_else(|| bad("Thread", fields[0], line_no))?,
        time_us: parse_time(fields[1]).ok_or_else(|| {
            err(format!(
                "Time `{}` is not microseconds, HH:MM:SS.ffffff or seconds",
                shorten(fields[1])
            ))
        })?,
        action,
        pointer: parse_hex(fields[3]).ok_or_else(|| {
            err(format!(
                "Pointer `{}` is not a hex address",
                shorten(fields[3])
            ))
        })?,
        size: fields[4]
            .parse()
            .map_err(|_| err(format!("Size `{}` is not a byte count", shorten(fields[4]))))?,
        stream: parse_id(fields[5]).ok_or_else(|| bad("Stream", fields[5], line_no))?,
        device: if device.is_empty() {
            0
        } else {
            device.parse().map_err(|_| bad("Device", device, line_no))?
        },
        detail: extra(columns.detail),
    })
}

fn bad(column: &str, value: &str, line_no: u64) -> TraceError {
    TraceError::new(
        line_no,
        format!("{} `{}` is not a number", column, shorten(value)),
    )
}

/// The start of a field or line for a message, so a binary blob does not flood the terminal.
fn shorten(text: &str) -> String {
    const MAX: usize = 40;
    let mut out: String = text.chars().take(MAX).collect();
    if text.chars().nth(MAX).is_some() {
        out.push_str("...");
    }
    out.escape_debug().to_string()
}

/// Hex with or without `0x`, at most 64 bits.
fn parse_hex(text: &str) -> Option<u64> {
    let digits = text
        .strip_prefix("0x")
        .or_else(|| text.strip_prefix("0X"))
        .unwrap_or(text);
    if digits.is_empty() || digits.len() > 16 || !digits.bytes().all(|b| b.is_ascii_hexdigit()) {
        return None;
    }
    u64::from_str_radix(digits, 16).ok()
}

/// Thread and stream ids: decimal, `0x` hex, or bare hex (newer RMM prints handles with `%llx`).
/// Only equality matters for an id, so reading bare digits as decimal is harmless.
fn parse_id(text: &str) -> Option<u64> {
    if text.starts_with("0x") || text.starts_with("0X") {
        return parse_hex(text);
    }
    text.parse().ok().or_else(|| parse_hex(text))
}

/// Microseconds from `123456` (µs), `HH:MM:SS.ffffff` (RMM: time of day) or `1634567890.123456`
/// (seconds).
fn parse_time(text: &str) -> Option<u64> {
    if !text.is_empty() && text.bytes().all(|b| b.is_ascii_digit()) {
        return text.parse().ok();
    }
    let (whole, frac) = match text.split_once('.') {
        Some((w, f)) => (w, f),
        None => (text, ""),
    };
    if !frac.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    let mut micros = 0u64;
    for i in 0..6 {
        let d = frac.as_bytes().get(i).map_or(0, |b| u64::from(b - b'0'));
        micros = micros * 10 + d;
    }
    let seconds = if whole.contains(':') {
        let mut parts = whole.split(':');
        let (h, m, s) = (parts.next()?, parts.next()?, parts.next()?);
        if parts.next().is_some() {
            return None;
        }
        let small = |t: &str, max: u64| -> Option<u64> {
            if t.is_empty() || t.len() > 2 || !t.bytes().all(|b| b.is_ascii_digit()) {
                return None;
            }
            t.parse().ok().filter(|v| *v < max)
        };
        small(h, 24)? * 3600 + small(m, 60)? * 60 + small(s, 61)?
    } else {
        if whole.is_empty() || !whole.bytes().all(|b| b.is_ascii_digit()) {
            return None;
        }
        whole.parse().ok()?
    };
    seconds.checked_mul(1_000_000)?.checked_add(micros)
}

/// Reads a trace line by line. Blank lines are skipped; a header line sets (or, in concatenated
/// files, resets) the column layout; the first non-blank line must be a header.
pub struct Reader<R> {
    inner: R,
    buf: Vec<u8>,
    line_no: u64,
    columns: Option<Columns>,
}

enum LineKind {
    End,
    Blank,
    Header,
    Row,
}

impl<R: BufRead> Reader<R> {
    pub fn new(inner: R) -> Reader<R> {
        Reader {
            inner,
            buf: Vec::new(),
            line_no: 0,
            columns: None,
        }
    }

    /// The number of the line read last (1-based; 0 before the first).
    pub fn line(&self) -> u64 {
        self.line_no
    }

    /// The next row, `None` at the end. Errors name the line; reading after an error goes on
    /// with the next line.
    pub fn next_event(&mut self) -> Result<Option<Event<'_>>, TraceError> {
        loop {
            match self.read_line()? {
                LineKind::End => return Ok(None),
                LineKind::Blank => {}
                LineKind::Header => {
                    let columns = Columns::parse_header(self.text()?, self.line_no)?;
                    self.columns = Some(columns);
                }
                LineKind::Row => break,
            }
        }
        let line_no = self.line_no;
        let columns = self.columns.ok_or_else(|| {
            TraceError::new(
                line_no,
                format!(
                    "no header line: an RMM trace starts with `{}`",
                    RMM_COLUMNS.join(",")
                ),
            )
        })?;
        parse_event(self.text()?, &columns, line_no).map(Some)
    }

    fn read_line(&mut self) -> Result<LineKind, TraceError> {
        self.buf.clear();
        let limit = MAX_LINE as u64 + 1;
        let n = (&mut self.inner)
            .take(limit)
            .read_until(b'\n', &mut self.buf)
            .map_err(|e| TraceError::new(self.line_no + 1, format!("cannot read: {}", e)))?;
        if n == 0 {
            return Ok(LineKind::End);
        }
        self.line_no += 1;
        if self.buf.last() == Some(&b'\n') {
            self.buf.pop();
        } else if n as u64 == limit {
            return Err(TraceError::new(
                self.line_no,
                format!("line longer than {} KiB: not a trace row", MAX_LINE >> 10),
            ));
        }
        if self.buf.last() == Some(&b'\r') {
            self.buf.pop();
        }
        if self.line_no == 1 && self.buf.starts_with("\u{feff}".as_bytes()) {
            self.buf.drain(..3);
        }
        let text = self.text()?;
        Ok(if text.trim().is_empty() {
            LineKind::Blank
        } else if is_header(text) {
            LineKind::Header
        } else {
            LineKind::Row
        })
    }

    fn text(&self) -> Result<&str, TraceError> {
        std::str::from_utf8(&self.buf)
            .map_err(|_| TraceError::new(self.line_no, "not UTF-8 text".to_string()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Action, time, pointer, size, device, detail.
    type Row = (Action, u64, u64, u64, i32, String);

    fn read_all(text: &str) -> Result<Vec<Row>, TraceError> {
        let mut r = Reader::new(text.as_bytes());
        let mut out = Vec::new();
        while let Some(e) = r.next_event()? {
            out.push((
                e.action,
                e.time_us,
                e.pointer,
                e.size,
                e.device,
                e.detail.to_string(),
            ));
        }
        Ok(out)
    }

    #[test]
    fn round_trip() {
        let mut out = String::new();
        write_header(&mut out);
        let mut e = Event::new(Action::Allocate, 0x7f00_0020_0000, 4096);
        e.thread = 77;
        e.time_us = 1_795_322_658_533_748;
        e.stream = 0x55aa;
        e.device = 1;
        e.detail = "hipMallocAsync, \"pooled\"";
        write_event(&e, &mut out);
        write_event(&Event::new(Action::Trim, 0, 2 << 20), &mut out);
        assert_eq!(
            out,
            "Thread,Time,Action,Pointer,Size,Stream,Version,Device,Detail\n\
             77,1795322658533748,allocate,0x7f0000200000,4096,0x55aa,1,1,hipMallocAsync   pooled \n\
             0,0,trim,0x0,2097152,0x0,1,0,\n"
        );
        let mut r = Reader::new(out.as_bytes());
        let got = r.next_event().unwrap().unwrap();
        assert_eq!(
            got,
            Event {
                detail: "hipMallocAsync   pooled",
                ..e
            }
        );
        assert_eq!(r.next_event().unwrap().unwrap().action, Action::Trim);
        assert_eq!(r.next_event().unwrap(), None);
    }

    #[test]
    fn reads_rmm_and_the_shared_traces() {
        let shared = "Thread,Time,Action,Pointer,Size,Stream\n\
                      0,1795322658533748,segment_alloc,0x7f3d4e000000,155189248,0\n\
                      0,1795322658533750,allocate,0x7f3d4e000000,154389504,0\n";
        let rows = read_all(shared).unwrap();
        assert_eq!(rows[0].0, Action::SegmentAlloc);
        assert_eq!(rows[1].2, 0x7f3d_4e00_0000);
        let rmm = "Thread,Time,Action,Pointer,Size,Stream\r\n\
                   140573312345856,14:02:33.123456,allocate,7f8a40000000,1024,7f8a38001020\r\n\
                   140573312345856,14:02:33.5,free,0x7f8a40000000,1024,0x0\r\n\
                   140573312345856,1634567890.25,allocate failure,0x0,1024,0x0\r\n\
                   1,2,deallocate,0x1,1,0\r\n";
        let rows = read_all(rmm).unwrap();
        assert_eq!(rows[0].1, (14 * 3600 + 2 * 60 + 33) * 1_000_000 + 123_456);
        assert_eq!(rows[0].2, 0x7f8a_4000_0000);
        assert_eq!(rows[1].1, (14 * 3600 + 2 * 60 + 33) * 1_000_000 + 500_000);
        assert_eq!(rows[2].0, Action::AllocateFailure);
        assert_eq!(rows[2].1, 1_634_567_890_250_000);
        assert_eq!(rows[3].0, Action::Free);
    }

    #[test]
    fn extra_columns_by_name_and_concatenated_files() {
        let text = "Thread,Time,Action,Pointer,Size,Stream,Device,Future\n\
                    0,5,allocate,0x100,256,0,3,whatever\n\
                    \n\
                    Thread,Time,Action,Pointer,Size,Stream\n\
                    0,6,free,0x100,256,0\n";
        let rows = read_all(text).unwrap();
        assert_eq!(rows[0].4, 3);
        assert_eq!(rows[1].4, 0, "the second header has no Device column");
    }

    #[test]
    fn errors_name_the_line_and_the_problem() {
        let cases = [
            ("0,1,allocate,0x1,1,0\n", 1, "no header line"),
            ("Thread,When,Action\n", 1, "does not start with"),
            (
                "Thread,Time,Action,Pointer,Size,Stream\n0,1,allocate,0x1\n",
                2,
                "4 fields",
            ),
            (
                "Thread,Time,Action,Pointer,Size,Stream\n\n0,1,grab,0x1,1,0\n",
                3,
                "unknown action `grab`",
            ),
            (
                "Thread,Time,Action,Pointer,Size,Stream\n0,1,free,0xzz,1,0\n",
                2,
                "Pointer `0xzz`",
            ),
            (
                "Thread,Time,Action,Pointer,Size,Stream\n0,1,free,0x1,-4,0\n",
                2,
                "Size `-4`",
            ),
            (
                "Thread,Time,Action,Pointer,Size,Stream\n0,25:00:00,free,0x1,4,0\n",
                2,
                "Time `25:00:00`",
            ),
            (
                "Thread,Time,Action,Pointer,Size,Stream,Version\n0,1,free,0x1,4,0,2\n",
                2,
                "trace format 2",
            ),
            (
                "Thread,Time,Action,Pointer,Size,Stream\n0,1,free,0x1,4,0\n\u{0}\u{ff}",
                3,
                "at least 6",
            ),
        ];
        for (text, line, what) in cases {
            let e = read_all(text).unwrap_err();
            assert_eq!(e.line, line, "{:?}: {}", text, e);
            assert!(e.message.contains(what), "{:?}: {}", text, e);
        }
        let mut bytes = b"Thread,Time,Action,Pointer,Size,Stream\n".to_vec();
        bytes.extend_from_slice(&[0xff, 0xfe, b'\n']);
        let e = Reader::new(&bytes[..]).next_event().unwrap_err();
        assert_eq!((e.line, e.message.as_str()), (2, "not UTF-8 text"));
        let long = format!(
            "Thread,Time,Action,Pointer,Size,Stream\n{}",
            "9".repeat(MAX_LINE + 10)
        );
        let e = read_all(&long).unwrap_err();
        assert!(e.message.contains("longer than"), "{}", e);
    }

    #[test]
    fn every_action_reads_back() {
        for a in Action::ALL {
            assert_eq!(Action::parse(a.as_str()), Some(a));
        }
        assert_eq!(Action::parse("Allocate"), None);
    }
}
