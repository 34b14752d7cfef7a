//! What the pool holds at one moment, for explaining where its reserved memory is: each unit
//! of device memory it could give back (a mapped piece, a plain segment) and each block that
//! keeps memory busy (handed out, or freed and waiting in quarantine). Read by `rocmguard
//! replay --peak-layout`; the pool itself never needs it.

use super::block::BlockState;
use super::Pool;
use crate::source::DeviceSource;

/// A unit of device memory the pool holds: it goes back to the device whole.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Unit {
    pub addr: u64,
    pub size: u64,
    /// A piece mapped into a virtual segment, or else a segment from the plain allocator.
    pub piece: bool,
}

/// The pool's units and busy blocks, each list in address order.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Layout {
    pub units: Vec<Unit>,
    /// `(addr, size)` of every live or quarantined block; `size` is what it occupies, at least
    /// what was asked for.
    pub busy: Vec<(u64, u64)>,
}

impl<S: DeviceSource> Pool<S> {
    /// The pool's memory as it is now (see [`Layout`]). Takes the lock and walks every
    /// segment: for tools, not for a program's hot path.
    pub fn layout(&self) -> Layout {
        let st = self.lock();
        let mut layout = Layout::default();
        layout.units.extend(st.mappings.iter().map(|m| Unit {
            addr: m.addr,
            size: m.size,
            piece: true,
        }));
        for seg in st.segments.iter().flatten() {
            if seg.pages.is_none() {
                layout.units.push(Unit {
                    addr: seg.addr,
                    size: seg.size,
                    piece: false,
                });
            }
            let mut i = seg.first;
            while i != super::NIL {
                let b = &st.blocks[i as usize];
                if matches!(b.state, BlockState::Live | BlockState::Quarantined) {
                    layout.busy.push((b.addr, b.size));
                }
                i = b.next;
            }
        }
        layout.units.sort_unstable_by_key(|u| u.addr);
        layout.busy.sort_unstable();
        layout
    }
}
