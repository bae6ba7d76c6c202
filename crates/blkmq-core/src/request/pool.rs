//! The bio pool: slots for the bios merged into requests, linked into per-request chains.

use core::cell::UnsafeCell;

use crate::bio::{Bio, Op};

use super::NO_TAG;

/// Storage for merged bios: slots linked into per-request chains.
///
/// Slots are allocated through a bitmap; a slot's contents belong to the request whose chain
/// links it, and are touched only by that request's owner.
pub(crate) struct BioPool {
    /// `None` for a pool of no slot (a bitmap has at least one bit).
    map: Option<blkmq_sbitmap::Sbitmap>,
    slots: alloc::boxed::Box<[BioSlot]>,
    hint: blkmq_sbitmap::AllocHint,
}

struct BioSlot {
    cell: UnsafeCell<Link>,
}

#[derive(Clone, Copy)]
pub(super) struct Link {
    pub(super) bio: Bio,
    pub(super) next: u32,
}

// SAFETY: a slot is reached only by the owner of the request whose chain links it; the bitmap
// hands each slot to one chain at a time (acquire on get, release on put).
unsafe impl Sync for BioSlot {}

impl BioPool {
    pub(crate) fn new(slots: usize) -> Result<Self, crate::ConfigError> {
        let map = match slots {
            0 => None,
            n => Some(blkmq_sbitmap::Sbitmap::new(n)?),
        };
        let empty = Link {
            bio: Bio::new(Op::Read, 0, 0),
            next: NO_TAG,
        };
        Ok(Self {
            map,
            slots: (0..slots)
                .map(|_| BioSlot {
                    cell: UnsafeCell::new(empty),
                })
                .collect(),
            hint: blkmq_sbitmap::AllocHint::new(0),
        })
    }

    /// # Safety
    /// `slot` was allocated from this pool and is linked into a chain the caller owns
    /// mutably (it holds the request's token borrowed mutably, or owns it).
    #[allow(clippy::mut_from_ref)]
    pub(super) unsafe fn link(&self, slot: u32) -> &mut Link {
        // SAFETY: the caller owns the chain that holds `slot` (see the type's contract).
        unsafe { &mut *self.slots[slot as usize].cell.get() }
    }

    /// # Safety
    /// `slot` is linked into a chain the caller holds at least shared (it holds the
    /// request's token borrowed), so nobody writes it meanwhile.
    pub(super) unsafe fn link_ref(&self, slot: u32) -> &Link {
        // SAFETY: no writer while the chain's token is borrowed (the type's contract).
        unsafe { &*self.slots[slot as usize].cell.get() }
    }

    pub(super) fn take(&self, bio: Bio) -> Result<u32, Bio> {
        let Some(slot) = self.map.as_ref().and_then(|map| map.get(&self.hint)) else {
            return Err(bio);
        };
        let slot = slot as u32;
        // SAFETY: the bitmap just handed `slot` to us alone.
        let link = unsafe { self.link(slot) };
        *link = Link { bio, next: NO_TAG };
        Ok(slot)
    }

    pub(super) fn give_back(&self, slot: u32) {
        // A slot on a chain is allocated, so this cannot fail; a failure would be a broken
        // chain, an internal invariant.
        self.map
            .as_ref()
            .expect("a chained bio slot comes from a pool with slots")
            .put(slot as usize, &self.hint)
            .expect("a chained bio slot is allocated");
    }

    /// The bio in `slot` and the slot after it.
    ///
    /// # Safety
    /// As `link_ref`: `slot` is on a chain of a request whose token the caller holds
    /// borrowed for the call.
    pub(crate) unsafe fn bio_at(&self, slot: u32) -> (Bio, u32) {
        // SAFETY: the caller holds the chain's token borrowed (this function's contract).
        let link = unsafe { self.link_ref(slot) };
        (link.bio, link.next)
    }

    /// Slots in use.
    pub(crate) fn in_use(&self) -> usize {
        self.map.as_ref().map_or(0, blkmq_sbitmap::Sbitmap::weight)
    }
}
