//! Device memory moved instead of given back: when a request's pages need a trim first, the
//! pieces that trim takes keep their memory ([`DeviceSource::detach`]) and are mapped again
//! under the request ([`DeviceSource::remap`]). That saves the driver's release and create,
//! about a third of a map and unmap (data/driver_cost.csv), where a program's layout changes
//! at its peak and each new layout's pages replace the last one's. Nothing is kept between
//! calls, so the pool never holds more memory than it counts.

use super::state::State;
use super::{timed, Pool};
use crate::source::{DeviceSource, SourceError};

/// The pieces a trim kept for the map that follows it.
#[derive(Default)]
pub(super) struct Spares {
    /// The size of the pieces worth keeping: the size the map that follows maps in.
    pub piece: u64,
    /// How many may be kept: the whole pieces that map needs (0 outside it: a trim gives
    /// memory back).
    pub room: usize,
    /// The tokens of the pieces kept, each of `piece` bytes.
    pub kept: Vec<u64>,
}

impl Spares {
    /// Whether a trim should keep a mapping of `size` bytes rather than give it back.
    pub fn wants(&self, size: u64) -> bool {
        size == self.piece && self.kept.len() < self.room
    }

    /// Bytes kept: held from the device though no mapping counts them yet.
    pub fn bytes(&self) -> u64 {
        self.kept.len() as u64 * self.piece
    }
}

impl<S: DeviceSource> Pool<S> {
    /// Lets the trims of the next request keep up to `room` pieces of `piece` bytes, where
    /// the device can move memory, until [`Pool::release_spares`].
    pub(super) fn keep_spares(&self, st: &mut State, piece: u64, room: usize) {
        if self.source.moves_memory() {
            st.spares.piece = piece;
            st.spares.room = room;
        }
    }

    /// The device's free memory, counting the pieces kept as its: they serve before it is asked.
    pub(super) fn device_free(&self, st: &State) -> Result<u64, SourceError> {
        Ok(self.source.mem_info()?.0 + st.spares.bytes())
    }

    /// Backs `[addr, addr + size)` of a reservation in pieces of `piece` bytes: its first whole
    /// pieces with memory kept, the rest fresh in one call. Returns a token per piece in
    /// address order. All or nothing: on failure what was mapped again is kept again.
    pub(super) fn map_run(
        &self,
        st: &mut State,
        addr: u64,
        size: u64,
        piece: u64,
    ) -> Result<Vec<u64>, SourceError> {
        let moved = (size / piece).min(st.spares.kept.len() as u64);
        let mut tokens = Vec::new();
        for i in 0..moved {
            let (at, token) = (addr + i * piece, st.spares.kept[st.spares.kept.len() - 1]);
            let remapped = timed(&mut st.stats.device_us, || {
                self.source.remap(at, piece, token)
            });
            if let Err(e) = remapped {
                self.keep_again(st, addr, piece, tokens);
                return Err(e);
            }
            st.spares.kept.pop();
            tokens.push(token);
        }
        let fresh = addr + moved * piece;
        if fresh < addr + size {
            let mapped = timed(&mut st.stats.device_us, || {
                self.source.map(fresh, addr + size - fresh, piece)
            });
            match mapped {
                Ok(fresh) => tokens.extend(fresh),
                Err(e) => {
                    self.keep_again(st, addr, piece, tokens);
                    return Err(e);
                }
            }
        }
        Ok(tokens)
    }

    /// Undoes the moves of a failed [`Pool::map_run`] at `addr`: the pieces are kept again
    /// (one the device will not unmap is lost to the pool, as a failed unmap's is).
    fn keep_again(&self, st: &mut State, addr: u64, piece: u64, tokens: Vec<u64>) {
        for (i, token) in tokens.into_iter().enumerate() {
            let at = addr + i as u64 * piece;
            let detached = timed(&mut st.stats.device_us, || {
                self.source.detach(at, piece, token)
            });
            if detached.is_ok() {
                st.spares.kept.push(token);
            }
        }
    }

    /// Gives back what was kept and not mapped again (a failed map, a request refused after its
    /// trim), and keeps nothing more.
    pub(super) fn release_spares(&self, st: &mut State) {
        st.spares.room = 0;
        let piece = st.spares.piece;
        for token in std::mem::take(&mut st.spares.kept) {
            let _ = timed(&mut st.stats.device_us, || {
                self.source.release(piece, token)
            });
        }
    }
}
