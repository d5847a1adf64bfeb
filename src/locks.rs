//! oxlet's one lock policy: a lock whose holder panicked is taken over, not passed on.
//!
//! The task tree restarts a task that panics, and a pod worker retries a sync that
//! panicked. With `lock().unwrap()`, the lock that task held would stay poisoned and
//! panic every later user, so one bad pod would take the agent down with it. Critical
//! sections in oxlet are kept to plain field and map updates that leave the data whole
//! after every statement, so what the panicking holder left is data a later holder can
//! use. Go's locks, which kubelet uses, have no poisoning either.

use std::sync::{Mutex, MutexGuard, PoisonError, RwLock, RwLockReadGuard, RwLockWriteGuard};

/// `lock`, with the policy above.
pub(crate) trait Locked<T: ?Sized> {
    fn locked(&self) -> MutexGuard<'_, T>;
}

impl<T: ?Sized> Locked<T> for Mutex<T> {
    fn locked(&self) -> MutexGuard<'_, T> {
        self.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

/// `read` and `write`, with the policy above.
pub(crate) trait ReadWriteLocked<T: ?Sized> {
    fn read_locked(&self) -> RwLockReadGuard<'_, T>;
    fn write_locked(&self) -> RwLockWriteGuard<'_, T>;
}

impl<T: ?Sized> ReadWriteLocked<T> for RwLock<T> {
    fn read_locked(&self) -> RwLockReadGuard<'_, T> {
        self.read().unwrap_or_else(PoisonError::into_inner)
    }
    fn write_locked(&self) -> RwLockWriteGuard<'_, T> {
        self.write().unwrap_or_else(PoisonError::into_inner)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_lock_whose_holder_panicked_is_still_usable() {
        let m = std::sync::Arc::new(Mutex::new(vec![1]));
        let rw = std::sync::Arc::new(RwLock::new(1));
        let (m2, rw2) = (m.clone(), rw.clone());
        let _ = std::thread::spawn(move || {
            let _g = m2.lock().unwrap();
            let _w = rw2.write().unwrap();
            panic!("holder panics");
        })
        .join();
        assert!(m.is_poisoned() && rw.is_poisoned());
        m.locked().push(2);
        assert_eq!(*m.locked(), [1, 2]);
        *rw.write_locked() += 1;
        assert_eq!(*rw.read_locked(), 2);
    }
}
