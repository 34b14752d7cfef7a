//! Simulated GPU work: operations queued on streams and run by one background thread when due,
//! so a test can see what a real GPU would do to memory that was reused too early.
//!
//! Ordering follows HIP: work on a stream runs in submission order; the null stream (legacy
//! semantics) waits for earlier work of the device's blocking streams and they wait for its
//! earlier work. Each item's due time is fixed at submission: the latest due time of its
//! predecessors (or now) plus its delay; the worker runs items in (due, submission) order.

use std::sync::{Condvar, Mutex, MutexGuard};
use std::thread;
use std::time::{Duration, Instant};

use crate::state;
use crate::streams::{StreamKey, Target};

/// What a queued item does when it runs.
#[derive(Clone, Copy, Debug)]
pub enum Op {
    /// `hipsimLaunchFill`: memset of a range, dropped if the range is no longer allocated.
    Fill { dst: usize, value: u8, bytes: usize },
    /// `hipFreeAsync`: the block is released when the stream reaches it.
    Free { ptr: usize },
}

#[derive(Clone, Copy, Debug)]
pub struct Work {
    id: u64,
    pub device: i32,
    pub stream: StreamKey,
    /// Orders against the null stream (see `Target::blocking`).
    pub blocking: bool,
    due: Instant,
    running: bool,
    op: Op,
}

struct Queue {
    /// Pending and running items; an item leaves when it has run.
    items: Vec<Work>,
    next_id: u64,
    /// The process whose worker thread serves the queue: after `fork` the child starts its own.
    worker_pid: Option<u32>,
}

static QUEUE: Mutex<Queue> = Mutex::new(Queue {
    items: Vec::new(),
    next_id: 0,
    worker_pid: None,
});
/// Signalled when an item is queued or finishes.
static CHANGED: Condvar = Condvar::new();

fn lock() -> MutexGuard<'static, Queue> {
    QUEUE
        .lock()
        .unwrap_or_else(|poisoned| poisoned.into_inner())
}

/// Queues `op` on `target` to run `delay` after its predecessors; runs it at once, on the calling
/// thread, when it has no predecessor and no delay. Must not be called with the state locked.
pub fn submit(target: Target, delay: Duration, op: Op) {
    let mut q = lock();
    let now = Instant::now();
    let after = q
        .items
        .iter()
        .filter(|w| w.device == target.device && orders_before(w, target))
        .map(|w| w.due)
        .max();
    if after.is_none() && delay.is_zero() {
        drop(q);
        execute(op);
        return;
    }
    if !ensure_worker(&mut q) {
        drop(q);
        thread::sleep(delay);
        execute(op);
        return;
    }
    let id = q.next_id;
    q.next_id += 1;
    q.items.push(Work {
        id,
        device: target.device,
        stream: target.key,
        blocking: target.blocking,
        due: after.map_or(now, |t| t.max(now)) + delay,
        running: false,
        op,
    });
    CHANGED.notify_all();
}

/// Whether queued item `w` must finish before new work on `target` starts.
fn orders_before(w: &Work, target: Target) -> bool {
    w.stream == target.key || (target.key == 0 && w.blocking) || (target.blocking && w.stream == 0)
}

/// Blocks until no queued item matches `pending`.
pub fn wait_for(pending: impl Fn(&Work) -> bool) {
    let mut q = lock();
    if q.items.iter().any(&pending) {
        ensure_worker(&mut q);
    }
    while q.items.iter().any(&pending) {
        q = CHANGED
            .wait(q)
            .unwrap_or_else(|poisoned| poisoned.into_inner());
    }
}

/// Waits for the work that a legacy null-stream operation of `device` waits for.
pub fn wait_for_null_stream(device: i32) {
    wait_for(|w| w.device == device && w.blocking);
}

/// Starts the worker thread of this process if there is none; false if it cannot be started.
fn ensure_worker(q: &mut Queue) -> bool {
    let pid = std::process::id();
    if q.worker_pid == Some(pid) {
        return true;
    }
    // Inherited through fork: the item that was running belongs to a thread that does not exist.
    for w in &mut q.items {
        w.running = false;
    }
    let started = thread::Builder::new()
        .name("hipsim-queue".into())
        .spawn(worker)
        .is_ok();
    if started {
        q.worker_pid = Some(pid);
    }
    started
}

fn worker() {
    let mut q = lock();
    loop {
        let next = q
            .items
            .iter()
            .filter(|w| !w.running)
            .min_by_key(|w| (w.due, w.id))
            .map(|w| (w.id, w.due, w.op));
        let (id, due, op) = match next {
            Some(next) => next,
            None => {
                q = CHANGED.wait(q).unwrap_or_else(|p| p.into_inner());
                continue;
            }
        };
        let now = Instant::now();
        if due > now {
            q = CHANGED
                .wait_timeout(q, due - now)
                .map(|(q, _)| q)
                .unwrap_or_else(|p| p.into_inner().0);
            continue;
        }
        if let Some(w) = q.items.iter_mut().find(|w| w.id == id) {
            w.running = true;
        }
        drop(q);
        execute(op);
        q = lock();
        q.items.retain(|w| w.id != id);
        CHANGED.notify_all();
    }
}

/// Runs one operation against the state. A fill whose range is no longer allocated is dropped
/// (counted), never written: the memory behind it may be unmapped.
fn execute(op: Op) {
    state::with(|s| match op {
        Op::Fill { dst, value, bytes } => {
            if s.mem.contains(dst, bytes) {
                // SAFETY: the range lies inside a live mapping, and the state lock keeps it
                // mapped until the write is done.
                unsafe { std::ptr::write_bytes(dst as *mut u8, value, bytes) };
                s.counters.fills += 1;
            } else {
                s.counters.dropped_fills += 1;
            }
        }
        Op::Free { ptr } => {
            let _ = s.mem.release(&mut s.counters, ptr);
        }
    });
}
