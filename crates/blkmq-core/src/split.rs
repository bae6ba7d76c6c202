//! Bios split to the queue's limits: the parent waits in a slot, preallocated with the
//! queue, until its last piece ends.

use alloc::boxed::Box;
use alloc::vec::Vec;

use crate::bio::{Bio, BioFlags, Status};

/// One split parent.
struct Slot {
    parent: Option<Bio>,
    /// Pieces not yet ended, including the unsubmitted rest.
    remaining: u32,
    /// The first error a piece ended with.
    status: Status,
    /// Bumped on every use, so a stale piece never names a later parent.
    generation: u32,
}

/// The split slots of a request queue.
pub(crate) struct SplitPool<R: lock_api::RawMutex> {
    slots: Box<[lock_api::Mutex<R, Slot>]>,
    free: lock_api::Mutex<R, Vec<u32>>,
}

fn key(index: u32, generation: u32) -> u64 {
    (u64::from(generation) << 32) | u64::from(index)
}

impl<R: lock_api::RawMutex> SplitPool<R> {
    pub(crate) fn new(nr: usize) -> Self {
        let slots = (0..nr)
            .map(|_| {
                lock_api::Mutex::new(Slot {
                    parent: None,
                    remaining: 0,
                    status: Status::Ok,
                    generation: 0,
                })
            })
            .collect();
        let free = (0..nr as u32).rev().collect();
        Self {
            slots,
            free: lock_api::Mutex::new(free),
        }
    }

    /// The slot a piece names, if it is a live piece of this pool.
    fn slot_of(&self, bio: &Bio) -> Option<&lock_api::Mutex<R, Slot>> {
        if !bio.flags.contains(BioFlags::SPLIT) {
            return None;
        }
        let index = (bio.private & 0xffff_ffff) as usize;
        let generation = (bio.private >> 32) as u32;
        let slot = self.slots.get(index)?;
        let live = {
            let s = slot.lock();
            s.parent.is_some() && s.generation == generation
        };
        live.then_some(slot)
    }

    /// Whether `bio` is a live piece of a parent here (the rest of a split, resubmitted).
    #[inline]
    pub(crate) fn is_piece(&self, bio: &Bio) -> bool {
        bio.flags.contains(BioFlags::SPLIT) && self.slot_of(bio).is_some()
    }

    /// Parks `parent` and returns one piece covering all of it, or gives the parent back
    /// when every slot is taken.
    pub(crate) fn start(&self, parent: Bio) -> Result<Bio, Bio> {
        let Some(index) = self.free.lock().pop() else {
            return Err(parent);
        };
        let mut slot = self.slots[index as usize].lock();
        slot.generation = slot.generation.wrapping_add(1);
        slot.parent = Some(parent);
        slot.remaining = 1;
        slot.status = Status::Ok;
        let mut piece = parent;
        piece.flags |= BioFlags::SPLIT;
        piece.private = key(index, slot.generation);
        piece.end_io = None;
        Ok(piece)
    }

    /// Cuts `rest` (a piece) after `sectors`: the first part, then the rest; the parent
    /// now waits for one more piece.
    pub(crate) fn cut(&self, rest: Bio, sectors: u32) -> (Bio, Bio) {
        if let Some(slot) = self.slot_of(&rest) {
            slot.lock().remaining += 1;
        }
        let mut first = rest;
        first.sectors = sectors;
        let mut tail = rest;
        tail.sector += u64::from(sectors);
        tail.sectors -= sectors;
        tail.data.set_pos(
            rest.data
                .advanced(u64::from(sectors) * crate::bio::SECTOR_SIZE),
        );
        (first, tail)
    }

    /// Undoes a [`cut`](Self::cut) whose first part was not submitted: one piece again.
    pub(crate) fn rejoin(&self, first: Bio, rest: Bio) -> Bio {
        if let Some(slot) = self.slot_of(&rest) {
            slot.lock().remaining -= 1;
        }
        let mut whole = first;
        whole.sectors += rest.sectors;
        whole
    }

    /// Gives the parent back from its only piece (none of it went in), freeing the slot.
    pub(crate) fn abandon(&self, piece: Bio) -> Bio {
        let Some(slot) = self.slot_of(&piece) else {
            return piece;
        };
        let index = (piece.private & 0xffff_ffff) as u32;
        let parent = {
            let mut s = slot.lock();
            if s.remaining != 1 {
                return piece;
            }
            s.remaining = 0;
            s.parent.take()
        };
        match parent {
            Some(parent) => {
                self.free.lock().push(index);
                parent
            }
            None => piece,
        }
    }

    /// Ends `bio`: a piece counts towards its parent, which ends with the first error of
    /// its pieces when the last one ends; any other bio ends through its callback.
    #[inline]
    pub(crate) fn end(&self, bio: Bio, status: Status) {
        if bio.flags.contains(BioFlags::SPLIT) {
            self.end_piece(bio, status);
        } else {
            bio.complete(status);
        }
    }

    /// [`end`](Self::end) for a bio marked as a piece.
    #[inline(never)]
    fn end_piece(&self, bio: Bio, status: Status) {
        let Some(slot) = self.slot_of(&bio) else {
            bio.complete(status);
            return;
        };
        let index = (bio.private & 0xffff_ffff) as u32;
        let done = {
            let mut s = slot.lock();
            if s.status.is_ok() {
                s.status = status;
            }
            s.remaining -= 1;
            if s.remaining == 0 {
                s.parent.take().map(|parent| (parent, s.status))
            } else {
                None
            }
        };
        if let Some((parent, status)) = done {
            self.free.lock().push(index);
            parent.complete(status);
        }
    }

    /// Readies `bio`, about to advance past a part of it that ended with `status`, to end
    /// with the first error of its parts: a piece's parent notes the error; a whole bio
    /// ended in part with an error becomes the only piece of itself, parked here, so that
    /// it ends as it stands now, with that error, when the rest does. Returns false,
    /// changing nothing, when that takes a slot and none is free.
    pub(crate) fn keep_status(&self, bio: &mut Bio, status: Status) -> bool {
        // Success leaves nothing to keep: the bio's end says it unless an error does.
        if status.is_ok() {
            return true;
        }
        if bio.flags.contains(BioFlags::SPLIT) {
            // Live while `bio` is: its parent waits for it.
            if let Some(slot) = self.slot_of(bio) {
                let mut s = slot.lock();
                if s.status.is_ok() {
                    s.status = status;
                }
            }
            return true;
        }
        match self.start(*bio) {
            Ok(piece) => {
                if let Some(slot) = self.slot_of(&piece) {
                    slot.lock().status = status;
                }
                *bio = piece;
                true
            }
            Err(_) => false,
        }
    }

    /// Ends every parent still waiting with `status` (the queue is going away); pieces
    /// that end later are ignored.
    pub(crate) fn fail_all(&self, status: Status) {
        for (index, slot) in self.slots.iter().enumerate() {
            let parent = slot.lock().parent.take();
            if let Some(parent) = parent {
                self.free.lock().push(index as u32);
                parent.complete(status);
            }
        }
    }
}
