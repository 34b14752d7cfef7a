//! Giving device memory back: wholly free plain segments, mappings no block touches, and the
//! address space of virtual segments with nothing mapped; on request, past the trim threshold,
//! and before growth would set a new peak.

use super::state::State;
use super::{timed, Pool};
use crate::source::DeviceSource;

/// Device memory a trim can give back.
#[derive(Clone, Copy)]
enum Idle {
    Segment(u32),
    Mapping(u32),
}

/// How many idle plain segments a trim gives back (see [`Pool::trim_locked`]).
#[derive(Clone, Copy, PartialEq, Eq)]
pub(super) enum Plain {
    /// Only as many as bring reserved to what is kept: a hold the program asked for.
    AsNeeded,
    /// All of them once one goes: trims the pool makes on its own.
    AllAtOnce,
}

impl<S: DeviceSource> Pool<S> {
    /// Returns whole free segments to the device, oldest first, until at most
    /// `min_bytes_to_hold` stay reserved. Returns the bytes released.
    pub fn trim_to(&self, min_bytes_to_hold: u64) -> u64 {
        let st = self.lock();
        let mut st = self.synchronize_and_release(st, false);
        let released = self.trim_locked(&mut st, min_bytes_to_hold, None, Plain::AsNeeded);
        if min_bytes_to_hold == 0 {
            self.release_address_space(&mut st);
        }
        self.mirror(&st);
        released
    }

    /// After blocks were released (`emptied`: some segment or mapping may now be idle): gives
    /// memory back while reserved is past the trim threshold.
    pub(super) fn trim_past_threshold(&self, st: &mut State, emptied: bool) {
        let threshold = (self.options.trim_threshold * st.stats.cap as f64) as u64;
        if emptied && st.stats.reserved + st.stats.external > threshold {
            let keep = threshold.saturating_sub(st.stats.external);
            self.trim_locked(st, keep, None, Plain::AllAtOnce);
        }
    }

    /// Before taking `grow` more bytes from the device (of which `need` are indispensable),
    /// gives back cached memory, except under `keep_range`, where keeping it would set a new
    /// peak or pass the trim threshold or the cap.
    pub(super) fn trim_before_growth(
        &self,
        st: &mut State,
        need: u64,
        grow: u64,
        keep_range: Option<(u64, u64)>,
    ) {
        let limit = self.growth_limit(st, need);
        if st.stats.reserved + st.stats.external + grow > limit {
            let keep = limit.saturating_sub(st.stats.external + grow);
            self.trim_locked(st, keep, keep_range, Plain::AllAtOnce);
        }
    }

    /// Gives device memory back, oldest first, until at most `keep` bytes stay reserved: wholly
    /// free segments and mappings that no block touches, except what lies under `keep_range`.
    /// Returns the bytes released. Removes no block of a virtual segment.
    ///
    /// `Plain::AllAtOnce`: once a plain segment goes, every idle one goes with it. The runtime's
    /// free waits for all the work the program queued, a synchronize in all but name; the frees
    /// right after it find the device idle. Freed one per growth instead, each waited for the
    /// work queued since the last (seg_infer_long on one H200: 1.26 times PyTorch's step time,
    /// 1.03 with them freed at once; docs/benchmarks.md, session 25).
    pub(super) fn trim_locked(
        &self,
        st: &mut State,
        keep: u64,
        keep_range: Option<(u64, u64)>,
        plain: Plain,
    ) -> u64 {
        let mut released = 0;
        if st.stats.reserved <= keep {
            return released;
        }
        let mut waited = false;
        for what in idle_memory(st, keep_range) {
            let segment = matches!(what, Idle::Segment(_));
            if st.stats.reserved <= keep && !(waited && segment && plain == Plain::AllAtOnce) {
                break;
            }
            waited |= segment;
            // If the device refuses memory back, it is no longer ours to hand out either.
            let size = match what {
                Idle::Segment(seg) => {
                    // The runtime's free waits for the device itself.
                    let (addr, size) = st.remove_segment(seg);
                    let _ = timed(&mut st.stats.device_us, || self.source.free(addr, size));
                    size
                }
                Idle::Mapping(m) if !self.settle_for_unmap(st, m) => continue,
                Idle::Mapping(m) => {
                    let m = st.remove_mapping(m);
                    if st.spares.wants(m.size) {
                        let detach = || self.source.detach(m.addr, m.size, m.token);
                        if timed(&mut st.stats.device_us, detach).is_ok() {
                            st.spares.kept.push(m.token);
                        }
                    } else {
                        let unmap = || self.source.unmap(m.addr, m.size, m.token);
                        let _ = timed(&mut st.stats.device_us, unmap);
                    }
                    m.size
                }
            };
            st.stats.source_frees += 1;
            st.stats.trims += 1;
            released += size;
        }
        released
    }

    /// Before unmapping mapping `m`, memory freed in order: the device may still be working on
    /// it (unmap, unlike the runtime's free, does not wait), so synchronize first, with the lock
    /// held as it is rare; not if `m` was idle before a synchronize that completed. False if
    /// that cannot be done now.
    fn settle_for_unmap(&self, st: &mut State, m: u32) -> bool {
        if st.freed_in_order <= st.synced_mark || st.is_settled(m) {
            return true;
        }
        if !self.source.may_synchronize() {
            return false;
        }
        let mark = st.next_free_seq;
        st.stats.syncs += 1;
        let ticket = st.mappings.begin_synchronize();
        let synced = timed(&mut st.stats.sync_us, || self.source.synchronize()).is_ok();
        st.mappings.end_synchronize(ticket, synced);
        if synced {
            st.synced_mark = mark;
        }
        synced
    }

    /// Gives back the address space of virtual segments with nothing mapped in them.
    pub(super) fn release_address_space(&self, st: &mut State) {
        let empty: Vec<u32> = st
            .segments
            .iter()
            .enumerate()
            .filter(|(_, s)| {
                s.as_ref()
                    .and_then(|s| s.pages.as_ref())
                    .map_or(false, |p| p.is_unmapped())
            })
            .map(|(i, _)| i as u32)
            .collect();
        for seg in empty {
            let (addr, size) = st.remove_segment(seg);
            let _ = timed(&mut st.stats.device_us, || {
                self.source.unreserve(addr, size)
            });
        }
    }
}

/// Whether `[addr, addr + size)` overlaps `keep_range`.
fn within(keep_range: Option<(u64, u64)>, addr: u64, size: u64) -> bool {
    keep_range.map_or(false, |(a, n)| addr < a + n && a < addr + size)
}

/// What a trim may give back, in order: mappings first, from the top of the address space
/// down, so what stays mapped is packed low where the large free block that big requests take
/// from begins; then plain segments, oldest first. What lies under `keep_range` stays.
fn idle_memory(st: &State, keep_range: Option<(u64, u64)>) -> Vec<Idle> {
    let mut idle: Vec<(u64, Idle)> = st
        .segments
        .iter()
        .enumerate()
        .filter_map(|(i, s)| s.as_ref().map(|s| (i, s)))
        .filter(|(_, s)| st.is_idle_plain(s) && !within(keep_range, s.addr, s.size))
        .map(|(i, s)| (s.birth, Idle::Segment(i as u32)))
        .collect();
    let overlaps = |m: u32| {
        let m = st.mappings.get(m);
        within(keep_range, m.addr, m.size)
    };
    idle.extend(
        st.idle_mappings()
            .into_iter()
            .filter(|&m| !overlaps(m))
            .map(|m| (u64::MAX - st.mappings.get(m).addr, Idle::Mapping(m))),
    );
    idle.sort_unstable_by_key(|&(key, what)| (matches!(what, Idle::Segment(_)), key));
    idle.into_iter().map(|(_, what)| what).collect()
}
