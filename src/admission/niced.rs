//! The threads the lower tiers' CPU work runs on: niced, so that the kernel, not only the
//! slots, puts image requests first.
//!
//! Slots bound how many runs use the CPU at once, but a run shares its core with work no slot
//! counts: a batch's downloads, hashing and writes, the HTTP stack, the load balancer's
//! health checks. With a batch's runs at the same priority as image requests' runs,
//! `bench/tiers.py` measured the requests' p95 at 1.67× its value without an ingest (27.6 vs
//! 16.5 ms), although a slot was always free for them; on these threads, 1.28× (20.0 vs
//! 15.6 ms). A bulk or background run on a thread of nice 10 weighs a tenth of a nice-0
//! thread in the kernel's scheduler, so when it shares a core with a request's work it gives
//! the core up; on an idle machine it runs at full speed.
//!
//! The threads are niced once, when made, and never run anything else: an unprivileged
//! process cannot lower a thread's nice value again, so a pool thread that served a batch
//! could not serve a request at full priority afterwards.

use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::mpsc;
use std::sync::{Arc, Mutex};

/// The nice value of the pool's threads (0 is normal, 19 the lowest).
pub const NICE: i32 = 10;

type Job = Box<dyn FnOnce() + Send>;

/// A fixed pool of niced threads.
pub struct Niced {
    jobs: Mutex<mpsc::Sender<Job>>,
}

impl Niced {
    /// `threads` threads (at least one), niced to [`NICE`].
    pub fn new(threads: usize) -> Niced {
        let (sender, receiver) = mpsc::channel::<Job>();
        let receiver = Arc::new(Mutex::new(receiver));
        for n in 0..threads.max(1) {
            let receiver = receiver.clone();
            let spawned = std::thread::Builder::new()
                .name(format!("imgcas-low-{n}"))
                .spawn(move || {
                    lower_this_thread();
                    loop {
                        let job = {
                            let guard = receiver.lock().unwrap_or_else(|p| p.into_inner());
                            guard.recv()
                        };
                        match job {
                            Ok(job) => job(),
                            // The pool was dropped.
                            Err(_) => return,
                        }
                    }
                });
            if let Err(e) = spawned {
                tracing::warn!(error = %e, "a low-priority thread was not started");
            }
        }
        Niced {
            jobs: Mutex::new(sender),
        }
    }

    /// Runs `f` on a pool thread; `Err` with its message when it panicked (or the pool is
    /// gone).
    pub async fn run<T: Send + 'static>(
        &self,
        f: impl FnOnce() -> T + Send + 'static,
    ) -> Result<T, String> {
        let (sender, receiver) = tokio::sync::oneshot::channel();
        let job: Job = Box::new(move || {
            let result = catch_unwind(AssertUnwindSafe(f)).map_err(|panic| {
                panic
                    .downcast_ref::<&str>()
                    .map(|s| s.to_string())
                    .or_else(|| panic.downcast_ref::<String>().cloned())
                    .unwrap_or_else(|| "a low-priority job panicked".into())
            });
            let _ = sender.send(result);
        });
        self.jobs
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .send(job)
            .map_err(|_| "the low-priority pool is gone".to_string())?;
        receiver
            .await
            .map_err(|_| "a low-priority job was lost".to_string())?
    }
}

/// Lowers the calling thread's priority (on Linux the nice value is per thread).
#[allow(unsafe_code)]
fn lower_this_thread() {
    #[cfg(target_os = "linux")]
    {
        // SAFETY: gettid and setpriority take no pointers; failure leaves the thread as it
        // was (at normal priority), which is only slower for requests, never wrong.
        let changed = unsafe {
            let tid = libc::syscall(libc::SYS_gettid) as libc::id_t;
            libc::setpriority(libc::PRIO_PROCESS, tid, NICE)
        };
        if changed != 0 {
            tracing::debug!("a low-priority thread kept its priority");
        }
    }
}

/// A thread's CPU clock, read from any thread while that one lives: what a run's deadline
/// asks of the run's thread, to tell a run that burnt its budget (422) from one a busy
/// machine starved (503).
#[derive(Debug, Clone, Copy)]
pub struct ThreadClock {
    id: libc::clockid_t,
    start: std::time::Duration,
}

impl ThreadClock {
    /// The calling thread's clock, from now; `None` where the system gives none.
    #[allow(unsafe_code)]
    pub fn of_this_thread() -> Option<ThreadClock> {
        let mut id: libc::clockid_t = 0;
        // SAFETY: `id` is a valid place for the clock id of the calling thread, which
        // pthread_self names; a failure leaves the run without a clock (judged by its time).
        let found = unsafe { libc::pthread_getcpuclockid(libc::pthread_self(), &mut id) };
        if found != 0 {
            return None;
        }
        let start = read_clock(id)?;
        Some(ThreadClock { id, start })
    }

    /// The CPU time the thread used since the clock was taken; `None` once it has ended.
    pub fn used(&self) -> Option<std::time::Duration> {
        read_clock(self.id).map(|now| now.saturating_sub(self.start))
    }
}

#[allow(unsafe_code)]
fn read_clock(id: libc::clockid_t) -> Option<std::time::Duration> {
    let mut now = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: `now` is a valid timespec to write; a clock id of a thread that has ended is
    // refused with an error, not undefined behaviour.
    let read = unsafe { libc::clock_gettime(id, &mut now) };
    if read != 0 {
        return None;
    }
    let secs = u64::try_from(now.tv_sec).ok()?;
    let nanos = u32::try_from(now.tv_nsec).ok()?;
    Some(std::time::Duration::new(secs, nanos))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    #[allow(unsafe_code)]
    async fn jobs_run_on_niced_threads_and_a_panic_is_an_error() {
        let pool = Niced::new(2);
        let name = pool
            .run(|| std::thread::current().name().map(str::to_string))
            .await
            .unwrap();
        assert!(name.is_some_and(|n| n.starts_with("imgcas-low-")));
        #[cfg(target_os = "linux")]
        {
            let nice = pool
                .run(|| unsafe {
                    let tid = libc::syscall(libc::SYS_gettid) as libc::id_t;
                    libc::getpriority(libc::PRIO_PROCESS, tid)
                })
                .await
                .unwrap();
            assert!(nice >= NICE, "nice {nice}");
        }
        let failed = pool.run(|| -> u32 { panic!("boom") }).await;
        assert_eq!(failed.unwrap_err(), "boom");
        // The thread that panicked is still there.
        assert_eq!(pool.run(|| 2 + 2).await.unwrap(), 4);
    }

    #[test]
    fn a_threads_clock_counts_its_own_work_and_not_its_sleep() {
        use std::time::Duration;
        let (clock_tx, clock_rx) = std::sync::mpsc::channel();
        let (asleep_tx, asleep_rx) = std::sync::mpsc::channel();
        let (end_tx, end_rx) = std::sync::mpsc::channel::<()>();
        let worker = std::thread::spawn(move || {
            let clock = ThreadClock::of_this_thread().expect("a clock");
            clock_tx.send(clock).unwrap();
            // 100 ms of its own CPU time, however long the machine takes to give it.
            while clock.used().unwrap() < Duration::from_millis(100) {}
            asleep_tx.send(()).unwrap();
            let _ = end_rx.recv();
        });
        let clock = clock_rx.recv().unwrap();
        asleep_rx.recv().unwrap();
        std::thread::sleep(Duration::from_millis(300));
        let used = clock
            .used()
            .expect("read from another thread while it lives");
        assert!(used >= Duration::from_millis(100), "{used:?}");
        assert!(
            used < Duration::from_millis(250),
            "its sleep is not counted: {used:?}"
        );
        drop(end_tx);
        worker.join().unwrap();
    }
}
