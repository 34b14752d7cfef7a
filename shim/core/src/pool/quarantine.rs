//! Frees, and the synchronize that makes freed blocks safe to hand out again: a freed block
//! waits in quarantine until a device synchronize that began after its free has completed,
//! unless the device runs all work in one order.

use std::sync::MutexGuard;

use super::block::BlockState;
use super::state::State;
use super::{timed, Pool};
use crate::source::DeviceSource;

impl<S: DeviceSource> Pool<S> {
    /// Takes back a block. `None` when `addr` is not a live block of this pool (the caller
    /// passes it on to the runtime). Returns the size the program asked for.
    pub fn free(&self, addr: u64) -> Option<u64> {
        let mut st = self.lock();
        let i = st.live.remove(&addr)?;
        let seq = st.next_free_seq;
        st.next_free_seq += 1;
        let b = &mut st.blocks[i as usize];
        b.state = BlockState::Quarantined;
        let (requested, size) = (b.requested, b.size);
        st.stats.live -= requested;
        st.stats.frees += 1;
        if self.source.in_order() {
            st.freed_in_order = seq + 1;
            if !self.park(&mut st, i) {
                let emptied = st.release_block(i);
                self.trim_past_threshold(&mut st, emptied);
            }
        } else {
            st.quarantine.push_back((seq, i));
            st.stats.quarantined += size;
        }
        self.mirror(&st);
        Some(requested)
    }

    /// A mark for [`Pool::synchronized`]: blocks freed before it become reusable once a device
    /// synchronize that started after the mark has completed.
    pub fn quarantine_mark(&self) -> u64 {
        self.lock().next_free_seq
    }

    /// Tells the pool that a device synchronize started after `mark` has completed (the program's
    /// own `hipDeviceSynchronize`, say), so blocks freed before the mark are free again.
    pub fn synchronized(&self, mark: u64) {
        let mut st = self.lock();
        st.synced_mark = st.synced_mark.max(mark);
        self.release_quarantine(&mut st, mark);
        self.mirror(&st);
    }

    /// Synchronizes the device once and makes every block freed before it reusable: what a
    /// background thread calls so that allocations rarely have to wait for the device.
    /// Returns whether it synchronized.
    /// Also what makes every free block safe for any stream when the program leaves in-order
    /// work behind.
    pub fn reclaim(&self) -> bool {
        let st = self.lock();
        if !st.unsettled() || !self.source.may_synchronize() {
            return false;
        }
        let st = self.synchronize_and_release(st, false);
        self.mirror(&st);
        true
    }

    /// Synchronizes the device without the lock, then releases what was quarantined before.
    /// Nothing is released if the synchronize fails or may not happen now. `waiter`: an
    /// allocation waits for it on the program's thread, counted apart in `waits` and `wait_us`.
    pub(super) fn synchronize_and_release<'a>(
        &'a self,
        st: MutexGuard<'a, State>,
        waiter: bool,
    ) -> MutexGuard<'a, State> {
        if !st.unsettled() || !self.source.may_synchronize() {
            return st;
        }
        let mut st = st;
        let mark = st.next_free_seq;
        st.stats.syncs += 1;
        let ticket = st.mappings.begin_synchronize();
        drop(st);
        let mut waited = 0;
        let synced = timed(&mut waited, || self.source.synchronize()).is_ok();
        let mut st = self.lock();
        st.mappings.end_synchronize(ticket, synced);
        st.stats.sync_us += waited;
        if waiter {
            st.stats.waits += 1;
            st.stats.wait_us += waited;
        }
        if synced {
            st.synced_mark = st.synced_mark.max(mark);
            self.release_quarantine(&mut st, mark);
        }
        st
    }

    fn release_quarantine(&self, st: &mut State, mark: u64) {
        let mut emptied = false;
        while let Some(&(seq, i)) = st.quarantine.front() {
            if seq >= mark {
                break;
            }
            st.quarantine.pop_front();
            st.stats.quarantined -= st.blocks[i as usize].size;
            emptied |= st.release_block(i);
        }
        self.trim_past_threshold(st, emptied);
    }
}
