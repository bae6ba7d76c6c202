//! The examples of the scheduler's items, one test each, named after its item.

/// The example of the module.
#[test]
fn module() {
    use crate::wf2q::{Class, Wf2q};

    let mut s = Wf2q::new();
    let light = s.add_leaf(Wf2q::ROOT, 100, Class::Be).unwrap();
    let heavy = s.add_leaf(Wf2q::ROOT, 300, Class::Be).unwrap();
    s.activate(light, 64, 0);
    s.activate(heavy, 64, 0);
    let mut served = [0u64; 2];
    for _ in 0..400 {
        let q = s.select(0).unwrap();
        s.served(q, 64);
        served[usize::from(q == heavy)] += 64;
        s.expire(q, Some(64), 0);
    }
    // Service follows the weights 1:3.
    assert_eq!(served[0] * 3, served[1]);
}

/// The example of `SERVICE_SHIFT`.
#[test]
fn service_shift() {
    use crate::wf2q::{Class, SERVICE_SHIFT, Wf2q};

    let mut s = Wf2q::new();
    let q = s.add_leaf(Wf2q::ROOT, 2, Class::Be).unwrap();
    s.activate(q, 8, 0);
    assert_eq!(s.finish(q), (8 << SERVICE_SHIFT) / 2);
}

/// The example of `MIN_WEIGHT`.
#[test]
fn min_weight() {
    use crate::wf2q::{Class, MIN_WEIGHT, Wf2q, Wf2qError};

    let mut s = Wf2q::new();
    assert!(s.add_leaf(Wf2q::ROOT, MIN_WEIGHT, Class::Be).is_ok());
    assert_eq!(
        s.add_leaf(Wf2q::ROOT, MIN_WEIGHT - 1, Class::Be),
        Err(Wf2qError::BadWeight(0))
    );
}

/// The example of `MAX_WEIGHT`.
#[test]
fn max_weight() {
    use crate::wf2q::{Class, MAX_WEIGHT, Wf2q, Wf2qError};

    let mut s = Wf2q::new();
    assert!(s.add_leaf(Wf2q::ROOT, MAX_WEIGHT, Class::Be).is_ok());
    assert_eq!(
        s.add_leaf(Wf2q::ROOT, MAX_WEIGHT + 1, Class::Be),
        Err(Wf2qError::BadWeight(MAX_WEIGHT + 1))
    );
}

/// The example of `IDLE_CLASS_TIMEOUT_NS`.
#[test]
fn idle_class_timeout_ns() {
    use crate::wf2q::{Class, IDLE_CLASS_TIMEOUT_NS, Wf2q};

    let mut s = Wf2q::new();
    let be = s.add_leaf(Wf2q::ROOT, 100, Class::Be).unwrap();
    let idle = s.add_leaf(Wf2q::ROOT, 100, Class::Idle).unwrap();
    s.activate(be, 8, 0);
    s.activate(idle, 8, 0);
    assert_eq!(s.select(1), Some(be));
    s.expire(be, Some(8), 1);
    // The idle class has waited long enough: it gets a turn although BE is backlogged.
    assert_eq!(s.select(IDLE_CLASS_TIMEOUT_NS), Some(idle));
}

/// The example of `Class`.
#[test]
fn class_order() {
    use crate::wf2q::Class;

    assert!(Class::Rt < Class::Be && Class::Be < Class::Idle);
}

/// The example of `Class::ALL`.
#[test]
fn class_all() {
    use crate::wf2q::Class;

    assert_eq!(Class::ALL, [Class::Rt, Class::Be, Class::Idle]);
}

/// The example of `EntityId`.
#[test]
fn entity_id() {
    use crate::wf2q::{Class, EntityId, Wf2q};

    let mut s = Wf2q::new();
    let q = s.add_leaf(Wf2q::ROOT, 100, Class::Be).unwrap();
    assert_ne!(q, Wf2q::ROOT);
    assert_eq!(Wf2q::ROOT, EntityId(0));
}

/// The example of `Wf2qError`.
#[test]
fn wf2q_error() {
    use crate::wf2q::{Class, EntityId, Wf2q, Wf2qError};

    let mut s = Wf2q::new();
    assert_eq!(
        s.add_leaf(EntityId(7), 100, Class::Be),
        Err(Wf2qError::NoSuchEntity)
    );
}

/// The example of `Wf2q`.
#[test]
fn wf2q() {
    use crate::wf2q::{Class, Wf2q};

    let mut s = Wf2q::new();
    let g = s.add_group(Wf2q::ROOT, 100, Class::Be).unwrap();
    let q = s.add_leaf(g, 100, Class::Be).unwrap();
    s.activate(q, 32, 0);
    assert!(s.is_active(g));
    assert_eq!(s.select(0), Some(q));
    s.served(q, 32);
    s.expire(q, None, 0);
    assert!(!s.is_active(q) && !s.is_active(g));
    assert_eq!(s.select(0), None);
}

/// The example of `Wf2q::default`.
#[test]
fn wf2q_default() {
    use crate::wf2q::Wf2q;

    assert_eq!(Wf2q::default().in_service(), None);
}

/// The example of `Wf2q::ROOT`.
#[test]
fn wf2q_root() {
    use crate::wf2q::Wf2q;

    let s = Wf2q::new();
    assert!(s.is_group(Wf2q::ROOT));
    assert_eq!(s.parent(Wf2q::ROOT), None);
}

/// The example of `Wf2q::new`.
#[test]
fn new() {
    use crate::wf2q::Wf2q;

    let mut s = Wf2q::new();
    assert_eq!(s.select(0), None);
}

/// The example of `Wf2q::add_group`.
#[test]
fn add_group() {
    use crate::wf2q::{Class, Wf2q, Wf2qError};

    let mut s = Wf2q::new();
    let g = s.add_group(Wf2q::ROOT, 500, Class::Be).unwrap();
    assert_eq!(s.parent(g), Some(Wf2q::ROOT));
    let q = s.add_leaf(g, 100, Class::Be).unwrap();
    assert_eq!(s.add_group(q, 100, Class::Be), Err(Wf2qError::NotAGroup));
}

/// The example of `Wf2q::add_leaf`.
#[test]
fn add_leaf() {
    use crate::wf2q::{Class, Wf2q};

    let mut s = Wf2q::new();
    let q = s.add_leaf(Wf2q::ROOT, 40, Class::Rt).unwrap();
    assert_eq!(
        (s.weight(q), s.class(q), s.is_group(q)),
        (40, Class::Rt, false)
    );
}

/// The example of `Wf2q::remove`.
#[test]
fn remove() {
    use crate::wf2q::{Class, Wf2q, Wf2qError};

    let mut s = Wf2q::new();
    let q = s.add_leaf(Wf2q::ROOT, 100, Class::Be).unwrap();
    s.activate(q, 8, 0);
    assert_eq!(s.remove(q), Err(Wf2qError::Busy));
    s.select(0);
    s.expire(q, None, 0);
    assert_eq!(s.remove(q), Ok(()));
    assert_eq!(s.remove(q), Err(Wf2qError::NoSuchEntity));
    assert_eq!(s.remove(Wf2q::ROOT), Err(Wf2qError::Busy));
}

/// The example of `Wf2q::set_parent`.
#[test]
fn set_parent() {
    use crate::wf2q::{Class, Wf2q};

    let mut s = Wf2q::new();
    let g = s.add_group(Wf2q::ROOT, 100, Class::Be).unwrap();
    let q = s.add_leaf(Wf2q::ROOT, 100, Class::Be).unwrap();
    s.set_parent(q, g).unwrap();
    assert_eq!(s.parent(q), Some(g));
}

/// The example of `Wf2q::set_weight`.
#[test]
fn set_weight() {
    use crate::wf2q::{Class, Wf2q};

    let mut s = Wf2q::new();
    let q = s.add_leaf(Wf2q::ROOT, 100, Class::Be).unwrap();
    s.activate(q, 8, 0);
    s.set_weight(q, 300).unwrap();
    assert_eq!(s.weight(q), 100); // pending while active
    s.select(0);
    s.expire(q, Some(8), 0);
    assert_eq!(s.weight(q), 300); // applied on requeue
}

/// The example of `Wf2q::set_class`.
#[test]
fn set_class() {
    use crate::wf2q::{Class, Wf2q};

    let mut s = Wf2q::new();
    let q = s.add_leaf(Wf2q::ROOT, 100, Class::Be).unwrap();
    s.set_class(q, Class::Idle).unwrap();
    assert_eq!(s.class(q), Class::Idle);
}

/// The example of `Wf2q::weight`.
#[test]
fn weight() {
    use crate::wf2q::{Class, Wf2q};

    let mut s = Wf2q::new();
    let q = s.add_leaf(Wf2q::ROOT, 70, Class::Be).unwrap();
    assert_eq!(s.weight(q), 70);
}

/// The example of `Wf2q::class`.
#[test]
fn class() {
    use crate::wf2q::{Class, Wf2q};

    let mut s = Wf2q::new();
    let q = s.add_leaf(Wf2q::ROOT, 70, Class::Rt).unwrap();
    assert_eq!(s.class(q), Class::Rt);
}

/// The example of `Wf2q::parent`.
#[test]
fn parent() {
    use crate::wf2q::{Class, Wf2q};

    let mut s = Wf2q::new();
    let q = s.add_leaf(Wf2q::ROOT, 70, Class::Be).unwrap();
    assert_eq!(s.parent(q), Some(Wf2q::ROOT));
}

/// The example of `Wf2q::is_group`.
#[test]
fn is_group() {
    use crate::wf2q::{Class, Wf2q};

    let mut s = Wf2q::new();
    let g = s.add_group(Wf2q::ROOT, 100, Class::Be).unwrap();
    let q = s.add_leaf(g, 100, Class::Be).unwrap();
    assert!(s.is_group(g) && !s.is_group(q));
}

/// The example of `Wf2q::is_active`.
#[test]
fn is_active() {
    use crate::wf2q::{Class, Wf2q};

    let mut s = Wf2q::new();
    let q = s.add_leaf(Wf2q::ROOT, 100, Class::Be).unwrap();
    assert!(!s.is_active(q));
    s.activate(q, 8, 0);
    assert!(s.is_active(q) && s.is_active(Wf2q::ROOT));
}

/// The example of `Wf2q::is_remembered`.
#[test]
fn is_remembered() {
    use crate::wf2q::{Class, Wf2q};

    let mut s = Wf2q::new();
    let a = s.add_leaf(Wf2q::ROOT, 100, Class::Be).unwrap();
    let b = s.add_leaf(Wf2q::ROOT, 100, Class::Be).unwrap();
    s.activate(a, 8, 0);
    s.activate(b, 8, 0);
    assert_eq!(s.select(0), Some(a));
    s.served(a, 8);
    s.expire(a, None, 0);
    assert!(s.is_remembered(a));
}

/// The example of `Wf2q::activate`.
#[test]
fn activate() {
    use crate::wf2q::{Class, SERVICE_SHIFT, Wf2q};

    let mut s = Wf2q::new();
    let q = s.add_leaf(Wf2q::ROOT, 4, Class::Be).unwrap();
    s.activate(q, 16, 0);
    assert_eq!((s.start(q), s.finish(q)), (0, 4 << SERVICE_SHIFT));
    assert_eq!(s.budget(q), 16);
}

/// The example of `Wf2q::select`.
#[test]
fn select() {
    use crate::wf2q::{Class, Wf2q};

    let mut s = Wf2q::new();
    let be = s.add_leaf(Wf2q::ROOT, 100, Class::Be).unwrap();
    let rt = s.add_leaf(Wf2q::ROOT, 100, Class::Rt).unwrap();
    s.activate(be, 8, 0);
    s.activate(rt, 8, 0);
    assert_eq!(s.select(0), Some(rt));
    assert_eq!(s.in_service(), Some(rt));
}

/// The example of `Wf2q::in_service`.
#[test]
fn in_service() {
    use crate::wf2q::{Class, Wf2q};

    let mut s = Wf2q::new();
    let q = s.add_leaf(Wf2q::ROOT, 100, Class::Be).unwrap();
    assert_eq!(s.in_service(), None);
    s.activate(q, 8, 0);
    s.select(0);
    assert_eq!(s.in_service(), Some(q));
}

/// The example of `Wf2q::served`.
#[test]
fn served() {
    use crate::wf2q::{Class, SERVICE_SHIFT, Wf2q};

    let mut s = Wf2q::new();
    let a = s.add_leaf(Wf2q::ROOT, 1, Class::Be).unwrap();
    let b = s.add_leaf(Wf2q::ROOT, 3, Class::Be).unwrap();
    s.activate(a, 8, 0);
    s.activate(b, 8, 0);
    let q = s.select(0).unwrap();
    s.served(q, 8);
    assert_eq!(s.service(q), 8);
    // V advanced by 8 sectors over a weight sum of 4.
    assert_eq!(s.vtime(Wf2q::ROOT, Class::Be), (8 << SERVICE_SHIFT) / 4);
}

/// The example of `Wf2q::expire`.
#[test]
fn expire() {
    use crate::wf2q::{Class, SERVICE_SHIFT, Wf2q};

    let mut s = Wf2q::new();
    let q = s.add_leaf(Wf2q::ROOT, 1, Class::Be).unwrap();
    s.activate(q, 8, 0);
    s.select(0);
    s.served(q, 2); // used 2 of its 8 sectors
    s.expire(q, Some(8), 0);
    assert_eq!(s.start(q), 2 << SERVICE_SHIFT);
    assert_eq!(s.finish(q), 10 << SERVICE_SHIFT);
    assert_eq!(s.in_service(), None);
}

/// The example of `Wf2q::start`.
#[test]
fn start() {
    use crate::wf2q::{Class, Wf2q};

    let mut s = Wf2q::new();
    let q = s.add_leaf(Wf2q::ROOT, 100, Class::Be).unwrap();
    s.activate(q, 8, 0);
    assert_eq!(s.start(q), s.vtime(Wf2q::ROOT, Class::Be));
}

/// The example of `Wf2q::finish`.
#[test]
fn finish() {
    use crate::wf2q::{Class, SERVICE_SHIFT, Wf2q};

    let mut s = Wf2q::new();
    let q = s.add_leaf(Wf2q::ROOT, 8, Class::Be).unwrap();
    s.activate(q, 64, 0);
    assert_eq!(s.finish(q) - s.start(q), (64 << SERVICE_SHIFT) / 8);
}

/// The example of `Wf2q::vtime`.
#[test]
fn vtime() {
    use crate::wf2q::{Class, Wf2q};

    let s = Wf2q::new();
    assert_eq!(s.vtime(Wf2q::ROOT, Class::Be), 0);
}

/// The example of `Wf2q::service`.
#[test]
fn service() {
    use crate::wf2q::{Class, Wf2q};

    let mut s = Wf2q::new();
    let q = s.add_leaf(Wf2q::ROOT, 100, Class::Be).unwrap();
    s.activate(q, 8, 0);
    s.select(0);
    s.served(q, 3);
    s.served(q, 4);
    assert_eq!((s.service(q), s.service(Wf2q::ROOT)), (7, 0));
}

/// The example of `Wf2q::budget`.
#[test]
fn budget() {
    use crate::wf2q::{Class, Wf2q};

    let mut s = Wf2q::new();
    let g = s.add_group(Wf2q::ROOT, 100, Class::Be).unwrap();
    let q = s.add_leaf(g, 100, Class::Be).unwrap();
    s.activate(q, 24, 0);
    assert_eq!((s.budget(q), s.budget(g)), (24, 24));
}

/// The example of `Wf2q::active_count`.
#[test]
fn active_count() {
    use crate::wf2q::{Class, Wf2q};

    let mut s = Wf2q::new();
    let q = s.add_leaf(Wf2q::ROOT, 100, Class::Be).unwrap();
    s.activate(q, 8, 0);
    assert_eq!(s.active_count(Wf2q::ROOT, Class::Be), 1);
    assert_eq!(s.active_count(Wf2q::ROOT, Class::Rt), 0);
}

/// The example of `Wf2q::weight_sum`.
#[test]
fn weight_sum() {
    use crate::wf2q::{Class, Wf2q};

    let mut s = Wf2q::new();
    let a = s.add_leaf(Wf2q::ROOT, 100, Class::Be).unwrap();
    let b = s.add_leaf(Wf2q::ROOT, 250, Class::Be).unwrap();
    s.activate(a, 8, 0);
    s.activate(b, 8, 0);
    assert_eq!(s.weight_sum(Wf2q::ROOT, Class::Be), 350);
}

/// The example of `Wf2q::vtime_weight_sum`.
#[test]
fn vtime_weight_sum() {
    use crate::wf2q::{Class, Wf2q};

    let mut s = Wf2q::new();
    let a = s.add_leaf(Wf2q::ROOT, 100, Class::Be).unwrap();
    let b = s.add_leaf(Wf2q::ROOT, 100, Class::Be).unwrap();
    s.activate(a, 8, 0);
    s.activate(b, 8, 0);
    s.select(0);
    s.served(a, 8);
    s.expire(a, None, 0); // remembered: its finish is ahead of V
    assert_eq!(s.weight_sum(Wf2q::ROOT, Class::Be), 100);
    assert_eq!(s.vtime_weight_sum(Wf2q::ROOT, Class::Be), 200);
}
