//! Stopping a codec call that is under way. A run is told to stop between its stages
//! ([`crate::Decodes::check`]), but one call into a decoder or a renderer can outlast its
//! whole budget (audit #4: a 6.6 KB JPEG XL declaring 7000×7000 took 13 CPU s in one render;
//! an SVG of 2,000 gradient-filled rectangles drew for 4.6 CPU s after its request had been
//! answered). The caller of a run names, for the thread the run is on, what says it should
//! stop ([`stop_this_thread_when`]); the long calls that can be cut short look at it:
//! a JPEG XL render is watched from another thread, which takes the decoder's allocation
//! budget away once the signal is up (the decoder then fails at its next buffer), and a
//! drawing is drawn a piece at a time with the signal read between pieces.
//!
//! A thread-local and not a parameter: the signal belongs to the run's thread for the run's
//! length, and the decoders below `decode::Source` are reached through many paths (facts,
//! mezzanines, watermarks) that need not know of it.

use std::cell::RefCell;
use std::sync::Arc;

/// Whether the run on a thread should stop now.
pub type StopSignal = Arc<dyn Fn() -> bool + Send + Sync>;

thread_local! {
    static SIGNAL: RefCell<Option<StopSignal>> = const { RefCell::new(None) };
}

/// Until the guard is dropped, codec calls on this thread that can be cut short stop once
/// `signal` says so.
pub fn stop_this_thread_when(signal: StopSignal) -> StopGuard {
    let previous = SIGNAL.with(|s| s.borrow_mut().replace(signal));
    StopGuard { previous }
}

/// Puts back the signal that stood before [`stop_this_thread_when`].
pub struct StopGuard {
    previous: Option<StopSignal>,
}

impl Drop for StopGuard {
    fn drop(&mut self) {
        let previous = self.previous.take();
        SIGNAL.with(|s| *s.borrow_mut() = previous);
    }
}

/// This thread's signal, if its run has one.
pub(crate) fn signal() -> Option<StopSignal> {
    SIGNAL.with(|s| s.borrow().clone())
}

/// Whether this thread's run should stop now (never, without a signal).
pub(crate) fn requested() -> bool {
    signal().is_some_and(|stop| stop())
}

/// The error of a call cut short.
pub(crate) fn stopped() -> crate::ProcessError {
    crate::ProcessError::Stopped("past its deadline".into())
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::{AtomicBool, Ordering};

    #[test]
    fn a_signal_holds_for_its_guard_and_the_one_before_comes_back() {
        assert!(!requested());
        let up = Arc::new(AtomicBool::new(false));
        let outer = up.clone();
        let guard = stop_this_thread_when(Arc::new(move || outer.load(Ordering::Relaxed)));
        assert!(!requested());
        up.store(true, Ordering::Relaxed);
        assert!(requested());
        {
            let _inner = stop_this_thread_when(Arc::new(|| false));
            assert!(!requested());
        }
        assert!(requested(), "the outer signal is back");
        drop(guard);
        assert!(!requested());
        // Another thread never sees this one's signal.
        let _guard = stop_this_thread_when(Arc::new(|| true));
        assert!(!std::thread::spawn(requested).join().unwrap());
    }
}
