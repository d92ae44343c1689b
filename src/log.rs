//! The process's log: where its lines go, and the access line of every request.
//!
//! Lines are appended to a buffer in memory, written to stderr by a thread of
//! their own every [`WRITE_EVERY`], or as soon as [`WRITE_AT`] bytes wait. Logging a request
//! costs a lock and a copy, never a system call or a thread's wake-up, which per line cost
//! the hit path more than the rest of its accounting (`bench/hit_path.py`); nginx's
//! `access_log … buffer= flush=` is the same idea.
//!
//! A request never waits for stderr: when [`LIMIT`] bytes are unwritten (stderr cannot keep
//! up), further lines are dropped and counted, and the count is written when it can be. The
//! [`Flush`] guard writes what is left when the process ends normally.
//!
//! The access line is formatted here rather than by `tracing_subscriber::fmt`, whose
//! general machinery (field visitors, `Debug` of every value, its clock) cost a hit a tenth
//! of its time: same fields, same shape (`text` or `json`), a fraction of the work. It is
//! still filtered as the `imgcas::access` target at `info` (`IMGCAS_LOG`), and without an
//! installed writer (the tests' in-process servers) it goes through `tracing` as before.

use std::fmt::Write as _;
use std::io::Write;
use std::sync::{Arc, Condvar, Mutex, MutexGuard, OnceLock};
use std::thread::JoinHandle;
use std::time::Duration;

use tracing_subscriber::fmt::MakeWriter;

/// The longest a line waits in memory.
const WRITE_EVERY: Duration = Duration::from_millis(100);

/// Written at once from this many waiting bytes.
const WRITE_AT: usize = 64 << 10;

/// Unwritten bytes beyond which lines are dropped.
const LIMIT: usize = 8 << 20;

#[derive(Default)]
struct Pending {
    lines: Vec<u8>,
    dropped: u64,
    closing: bool,
}

#[derive(Default)]
struct Shared {
    pending: Mutex<Pending>,
    wake: Condvar,
}

impl Shared {
    fn lock(&self) -> MutexGuard<'_, Pending> {
        self.pending.lock().unwrap_or_else(|p| p.into_inner())
    }
}

/// The writer `tracing_subscriber::fmt` is given: one `write` per formatted line.
#[derive(Clone)]
pub struct Buffered {
    shared: Arc<Shared>,
}

/// Writes what is left and stops the writing thread when dropped.
pub struct Flush {
    shared: Arc<Shared>,
    thread: Option<JoinHandle<()>>,
}

/// A buffered writer to `out`, and the guard to keep while it is in use.
pub fn buffered(out: impl Write + Send + 'static) -> (Buffered, Flush) {
    let shared = Arc::new(Shared::default());
    let thread = {
        let shared = shared.clone();
        std::thread::Builder::new()
            .name("imgcas-log".into())
            .spawn(move || write_until_closed(&shared, out))
            .ok()
    };
    (
        Buffered {
            shared: shared.clone(),
        },
        Flush { shared, thread },
    )
}

fn write_until_closed(shared: &Shared, mut out: impl Write) {
    let mut batch = Vec::new();
    loop {
        let (dropped, closing) = {
            let mut pending = shared.lock();
            if pending.lines.len() < WRITE_AT && !pending.closing {
                pending = shared
                    .wake
                    .wait_timeout(pending, WRITE_EVERY)
                    .map_or_else(|p| p.into_inner().0, |(p, _)| p);
            }
            std::mem::swap(&mut pending.lines, &mut batch);
            (std::mem::take(&mut pending.dropped), pending.closing)
        };
        if dropped > 0 {
            let _ = writeln!(
                batch,
                "imgcas: {dropped} log lines dropped: stderr was too slow"
            );
        }
        if !batch.is_empty() {
            // Nothing better to do with a failing stderr than to go on.
            let _ = out.write_all(&batch);
            let _ = out.flush();
            batch.clear();
        }
        if closing && shared.lock().lines.is_empty() {
            return;
        }
    }
}

impl Drop for Flush {
    fn drop(&mut self) {
        self.shared.lock().closing = true;
        self.shared.wake.notify_one();
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
    }
}

/// One line's writer.
pub struct Line<'a> {
    shared: &'a Shared,
}

impl Write for Line<'_> {
    fn write(&mut self, line: &[u8]) -> std::io::Result<usize> {
        let mut pending = self.shared.lock();
        if pending.lines.len() + line.len() > LIMIT {
            pending.dropped += 1;
            return Ok(line.len());
        }
        let was = pending.lines.len();
        pending.lines.extend_from_slice(line);
        if was < WRITE_AT && pending.lines.len() >= WRITE_AT {
            self.shared.wake.notify_one();
        }
        Ok(line.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

impl<'a> MakeWriter<'a> for Buffered {
    type Writer = Line<'a>;

    fn make_writer(&'a self) -> Line<'a> {
        Line {
            shared: &self.shared,
        }
    }
}

/// The writer access lines are written to, and whether as JSON: set once by [`install`].
static ACCESS: OnceLock<(Buffered, bool)> = OnceLock::new();

/// Access lines go to `writer` from now on (`json`: one JSON object a line, as
/// `IMGCAS_LOG_FORMAT=json` makes the other lines).
pub fn install(writer: Buffered, json: bool) {
    let _ = ACCESS.set((writer, json));
}

/// Logs one answered request.
pub fn access(method: &str, route: &str, status: u16, cache: Option<&str>, elapsed: Duration) {
    let ms = elapsed.as_secs_f64() * 1000.0;
    let cache = cache.unwrap_or("-");
    let Some((writer, json)) = ACCESS.get() else {
        tracing::info!(target: "imgcas::access", method, route, status, cache, ms);
        return;
    };
    if !tracing::enabled!(target: "imgcas::access", tracing::Level::INFO) {
        return;
    }
    let mut line = String::with_capacity(160);
    // RFC 3339 in UTC with microseconds, as `tracing_subscriber` writes its own lines.
    let now = humantime::format_rfc3339_micros(std::time::SystemTime::now());
    // Names, routes and outcomes are fixed ASCII without quotes or backslashes: nothing to
    // escape.
    let _ = if *json {
        writeln!(
            line,
            "{{\"timestamp\":\"{now}\",\"level\":\"INFO\",\"fields\":{{\"method\":\"{method}\",\"route\":\"{route}\",\"status\":{status},\"cache\":\"{cache}\",\"ms\":{ms:.3}}},\"target\":\"imgcas::access\"}}"
        )
    } else {
        writeln!(
            line,
            "{now}  INFO imgcas::access: method={method} route={route} status={status} cache={cache} ms={ms:.3}"
        )
    };
    let _ = Write::write_all(&mut writer.make_writer(), line.as_bytes());
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lines_are_written_in_order_and_flushed_at_the_end() {
        let out = Arc::new(Mutex::new(Vec::new()));
        struct Sink(Arc<Mutex<Vec<u8>>>);
        impl Write for Sink {
            fn write(&mut self, b: &[u8]) -> std::io::Result<usize> {
                self.0.lock().unwrap().extend_from_slice(b);
                Ok(b.len())
            }
            fn flush(&mut self) -> std::io::Result<()> {
                Ok(())
            }
        }
        let (writer, flush) = buffered(Sink(out.clone()));
        for i in 0..1000 {
            writeln!(writer.make_writer(), "line {i}").unwrap();
        }
        drop(flush);
        let text = String::from_utf8(out.lock().unwrap().clone()).unwrap();
        let expected: String = (0..1000).map(|i| format!("line {i}\n")).collect();
        assert_eq!(text, expected);
    }
}
