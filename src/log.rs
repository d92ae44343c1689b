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

/// The log's own variables, read by the binary before (and apart from) the configuration:
/// the filter (`debug`, `warn`, …) and the line format (`json`, or text).
pub const FILTER_VAR: &str = "IMGCAS_LOG";
pub const FORMAT_VAR: &str = "IMGCAS_LOG_FORMAT";

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
    let cache = cache.unwrap_or("-");
    let Some((writer, json)) = ACCESS.get() else {
        let ms = elapsed.as_secs_f64() * 1000.0;
        tracing::info!(target: "imgcas::access", method, route, status, cache, ms);
        return;
    };
    if !tracing::enabled!(target: "imgcas::access", tracing::Level::INFO) {
        return;
    }
    LINE.with_borrow_mut(|line| {
        line.clear();
        access_line(
            line,
            std::time::SystemTime::now(),
            *json,
            [method, route, cache],
            status,
            elapsed,
        );
        let _ = Write::write_all(&mut writer.make_writer(), line.as_bytes());
    });
}

thread_local! {
    /// Each thread's line, reused.
    static LINE: std::cell::RefCell<String> = std::cell::RefCell::new(String::with_capacity(192));
    /// The whole second last written by this thread, and its RFC 3339 form without the `Z`:
    /// a timestamp then costs its microseconds.
    static SECOND: std::cell::RefCell<(u64, String)> = const { std::cell::RefCell::new((u64::MAX, String::new())) };
}

/// Appends the access line to `line`, by hand: this runs for every request, and the general
/// formatting machinery (`write!`, float formatting, a date per line) was most of its cost.
fn access_line(
    line: &mut String,
    now: std::time::SystemTime,
    json: bool,
    [method, route, cache]: [&str; 3],
    status: u16,
    elapsed: Duration,
) {
    // Names, routes and outcomes are fixed ASCII without quotes or backslashes: nothing to
    // escape.
    if json {
        line.push_str("{\"timestamp\":\"");
        timestamp(line, now);
        line.push_str("\",\"level\":\"INFO\",\"fields\":{\"method\":\"");
        line.push_str(method);
        line.push_str("\",\"route\":\"");
        line.push_str(route);
        line.push_str("\",\"status\":");
        digits(line, u64::from(status), 1);
        line.push_str(",\"cache\":\"");
        line.push_str(cache);
        line.push_str("\",\"ms\":");
        millis(line, elapsed);
        line.push_str("},\"target\":\"imgcas::access\"}\n");
    } else {
        // As `tracing_subscriber` writes its own lines.
        timestamp(line, now);
        line.push_str("  INFO imgcas::access: method=");
        line.push_str(method);
        line.push_str(" route=");
        line.push_str(route);
        line.push_str(" status=");
        digits(line, u64::from(status), 1);
        line.push_str(" cache=");
        line.push_str(cache);
        line.push_str(" ms=");
        millis(line, elapsed);
        line.push('\n');
    }
}

/// RFC 3339 in UTC with microseconds.
fn timestamp(line: &mut String, now: std::time::SystemTime) {
    let since = now
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap_or_default();
    let second = since.as_secs();
    SECOND.with_borrow_mut(|(cached, text)| {
        if *cached != second {
            text.clear();
            let whole = std::time::UNIX_EPOCH + Duration::from_secs(second);
            let _ = write!(text, "{}", humantime::format_rfc3339_seconds(whole));
            text.pop(); // the `Z`, which goes after the fraction
            *cached = second;
        }
        line.push_str(text);
    });
    line.push('.');
    digits(line, u64::from(since.subsec_micros()), 6);
    line.push('Z');
}

/// `elapsed` in milliseconds with three decimals.
fn millis(line: &mut String, elapsed: Duration) {
    let micros = elapsed.as_nanos().saturating_add(500) / 1000;
    let micros = u64::try_from(micros).unwrap_or(u64::MAX);
    digits(line, micros / 1000, 1);
    line.push('.');
    digits(line, micros % 1000, 3);
}

/// `n` in decimal, zero-padded to `width` digits.
fn digits(line: &mut String, mut n: u64, width: usize) {
    let mut buf = [b'0'; 20];
    let mut at = buf.len();
    while n > 0 || buf.len() - at < width {
        at -= 1;
        buf[at] = b'0' + (n % 10) as u8;
        n /= 10;
    }
    line.extend(buf[at..].iter().map(|&b| char::from(b)));
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

    #[test]
    fn access_lines_have_the_fields_and_a_parseable_timestamp() {
        let at = std::time::UNIX_EPOCH + Duration::from_micros(1_795_000_123_000_042);
        let mut line = String::new();
        let fields = ["GET", "/v1/image", "hit"];
        access_line(
            &mut line,
            at,
            false,
            fields,
            200,
            Duration::from_micros(1_234_567),
        );
        let (stamp, rest) = line.split_once("  ").unwrap();
        assert_eq!(stamp, humantime::format_rfc3339_micros(at).to_string());
        assert_eq!(humantime::parse_rfc3339(stamp).unwrap(), at);
        assert_eq!(
            rest,
            "INFO imgcas::access: method=GET route=/v1/image status=200 cache=hit ms=1234.567\n"
        );
        // The second is remembered: a later instant in the same second, then the next.
        for micros in [999_999, 1_000_000, 7] {
            let later = at + Duration::from_micros(micros);
            line.clear();
            access_line(
                &mut line,
                later,
                true,
                fields,
                451,
                Duration::from_nanos(499),
            );
            let value: serde_json::Value = serde_json::from_str(&line).unwrap();
            assert_eq!(
                value["timestamp"],
                humantime::format_rfc3339_micros(later).to_string()
            );
            assert_eq!(value["fields"]["status"], 451);
            assert_eq!(value["fields"]["ms"], 0.0);
            assert_eq!(value["fields"]["route"], "/v1/image");
            assert_eq!(value["target"], "imgcas::access");
        }
    }
}
