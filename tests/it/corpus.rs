//! The third-party corpus (`../shared/corpus/EXPECTATIONS.tsv`, present in CI): every row's
//! expectation, checked through the real `imgcas process` binary. Each file runs in its own
//! child process under an address-space limit and a 30 s deadline (generous: a busy 2-core
//! machine needs seconds for the largest AVIF grid), so a panic, a hang or a runaway
//! allocation fails this test with the file's name instead of taking the suite down.
//!
//! Rows that fail today are listed, with their reason, in `tests/corpus-known-failures.tsv`:
//! any other failing row fails this test, and so does a listed row that passes (the list only
//! shrinks). A few corpus references are themselves wrong (a CMYK file converted without its
//! embedded profile); `tests/corpus-reference-overrides.tsv` names the independent reference
//! used instead, and why. Without the corpus folder the test says so and passes; the curated subset in
//! `testdata/` runs in every `cargo test` (see `processors/tests/it/process.rs`).

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::Mutex;
use std::time::{Duration, Instant};

use image::{DynamicImage, GenericImageView};
use imgcas_processors::compare::mean_abs_error;

const DEADLINE: Duration = Duration::from_secs(30);
/// Address-space limit for one child, in KiB (3 GiB: a 50 Mpx RGBA picture and its copies fit).
const MEMORY_KIB: u64 = 3 << 20;
/// Mean absolute error per channel allowed against a reference decode (different IDCTs and
/// chroma upsampling differ by a little).
const MATCH_TOLERANCE: f64 = 3.0;
/// Against an upright reference that was itself re-encoded lossily.
const ORIENT_TOLERANCE: f64 = 10.0;

#[derive(Debug)]
enum Outcome {
    Decoded(DynamicImage),
    Failed(String),
    Crashed(String),
    TimedOut,
}

struct Row {
    path: String,
    expect: String,
    notes: String,
}

fn corpus_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../shared/corpus")
}

fn rows(root: &Path) -> Vec<Row> {
    let text = std::fs::read_to_string(root.join("EXPECTATIONS.tsv")).expect("EXPECTATIONS.tsv");
    text.lines()
        .skip(1)
        .filter_map(|line| {
            let cols: Vec<&str> = line.split('\t').collect();
            (cols.len() >= 2).then(|| Row {
                path: cols[0].to_string(),
                expect: cols[1].to_string(),
                notes: cols.get(3).unwrap_or(&"").to_string(),
            })
        })
        .collect()
}

/// Runs `imgcas process <file> --spec format=png` in a limited child.
fn run(file: &Path, out: &Path) -> Outcome {
    run_spec(file, "format=png", out)
}

fn run_spec(file: &Path, spec: &str, out: &Path) -> Outcome {
    let mut child = Command::new("sh")
        .arg("-c")
        .arg(format!(
            "ulimit -v {MEMORY_KIB}; exec \"$0\" process \"$1\" --spec \"$3\" -o \"$2\""
        ))
        .arg(env!("CARGO_BIN_EXE_imgcas"))
        .arg(file)
        .arg(out)
        .arg(spec)
        .env("IMGCAS_LOG", "off")
        .env_remove("RUST_BACKTRACE")
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn imgcas process");
    let started = Instant::now();
    let status = loop {
        if let Some(status) = child.try_wait().expect("wait") {
            break status;
        }
        if started.elapsed() > DEADLINE {
            let _ = child.kill();
            let _ = child.wait();
            return Outcome::TimedOut;
        }
        std::thread::sleep(Duration::from_millis(5));
    };
    let mut stderr = String::new();
    if let Some(mut e) = child.stderr.take() {
        use std::io::Read;
        let _ = e.read_to_string(&mut stderr);
    }
    match status.code() {
        Some(0) => match image::open(out) {
            Ok(img) => Outcome::Decoded(img),
            Err(e) => Outcome::Crashed(format!("output unreadable: {e}")),
        },
        Some(1) => Outcome::Failed(stderr.trim().to_string()),
        _ => Outcome::Crashed(format!("{status}: {}", stderr.trim())),
    }
}

fn code(failure: &str) -> &str {
    failure.split(':').next().unwrap_or("")
}

/// The upright reference a file must match, by the corpus's own naming rules.
fn reference_for(row: &Row) -> Option<String> {
    let dir = Path::new(&row.path).parent()?.to_str()?;
    let name = Path::new(&row.path).file_name()?.to_str()?;
    if row.notes == "upright reference" {
        return Some(row.path.clone());
    }
    if let Some(r) = row
        .notes
        .split_whitespace()
        .find_map(|w| w.strip_prefix("ref="))
    {
        return Some(format!("{dir}/{r}"));
    }
    if let Some(rest) = row.notes.split("must equal ").nth(1) {
        return Some(format!("{dir}/{}", rest.split_whitespace().next()?));
    }
    if name.starts_with("Landscape_") {
        return Some(format!("{dir}/Landscape_1.jpg"));
    }
    if name.starts_with("Portrait_") {
        return Some(format!("{dir}/Portrait_1.jpg"));
    }
    if let Some(ext) = name
        .strip_prefix("hopper_orientation_")
        .and_then(|r| r.split('.').nth(1))
    {
        return Some(format!("{dir}/hopper.{ext}"));
    }
    if name.starts_with("rot") && name.contains("mir") && name.ends_with(".avif") {
        return Some(format!("{dir}/rot0mir0.avif"));
    }
    None
}

/// Display dimensions stated in the notes (`-> display 1080x1920`, `-> 1x2`).
fn stated_dimensions(notes: &str) -> Option<(u32, u32)> {
    let after = notes.rsplit("->").next().filter(|_| notes.contains("->"))?;
    after.split_whitespace().find_map(|w| {
        let (w, h) = w.split_once('x')?;
        Some((w.parse().ok()?, h.parse().ok()?))
    })
}

fn decode_reference(root: &Path, rel: &str, scratch: &Path) -> Result<DynamicImage, String> {
    // References in formats the test's own decoder lacks (AVIF) go through imgcas too.
    match image::open(root.join(rel)) {
        Ok(img) => Ok(img),
        Err(_) => match run(&root.join(rel), &scratch.join("reference.png")) {
            Outcome::Decoded(img) => Ok(img),
            other => Err(format!("reference {rel}: {other:?}")),
        },
    }
}

fn check(root: &Path, row: &Row, scratch: &Path) -> Result<(), String> {
    let outcome = run(&root.join(&row.path), &scratch.join("out.png"));
    let ok_or_error = matches!(outcome, Outcome::Decoded(_) | Outcome::Failed(_));
    let expect = expectation_override(&row.path).unwrap_or_else(|| row.expect.clone());
    match (expect.as_str(), &outcome) {
        (_, Outcome::Crashed(why)) => Err(format!("crashed: {why}")),
        (_, Outcome::TimedOut) => Err("took longer than 30 s".into()),
        ("decode", Outcome::Decoded(_)) => Ok(()),
        ("decode_or_unsupported", Outcome::Decoded(_)) => Ok(()),
        ("decode_or_unsupported", Outcome::Failed(f)) if code(f) == "unsupported_format" => Ok(()),
        ("decode_or_error" | "no_crash" | "no_oom", _) if ok_or_error => Ok(()),
        ("fail" | "fail_or_partial" | "fail_or_unsupported", Outcome::Failed(f))
            if matches!(code(f), "undecodable" | "unsupported_format") =>
        {
            Ok(())
        }
        ("fail_or_partial", Outcome::Decoded(_)) => Ok(()),
        ("reject_limits", Outcome::Failed(f)) if code(f) == "too_many_pixels" => Ok(()),
        ("decode_match_ref" | "decode_autorotate", Outcome::Decoded(img)) => {
            let tolerance = if expect == "decode_match_ref" {
                MATCH_TOLERANCE
            } else {
                ORIENT_TOLERANCE
            };
            let overridden = reference_override(&row.path);
            if let Some(rel) = overridden.clone().or_else(|| reference_for(row)) {
                let reference = if overridden.is_some() {
                    let repo = Path::new(env!("CARGO_MANIFEST_DIR"));
                    image::open(repo.join(&rel)).map_err(|e| format!("{rel}: {e}"))?
                } else {
                    decode_reference(root, &rel, scratch)?
                };
                if img.dimensions() != reference.dimensions() {
                    return Err(format!(
                        "{:?}, reference {rel} is {:?}",
                        img.dimensions(),
                        reference.dimensions()
                    ));
                }
                let diff = mean_abs_error(img, &reference);
                if diff > tolerance {
                    return Err(format!("mean abs error {diff:.2} against {rel}"));
                }
                Ok(())
            } else if let Some(dims) = stated_dimensions(&row.notes) {
                if img.dimensions() == dims {
                    Ok(())
                } else {
                    Err(format!("{:?}, expected {dims:?}", img.dimensions()))
                }
            } else {
                Err(format!("no reference rule for notes {:?}", row.notes))
            }
        }
        (expect, outcome) => Err(format!(
            "expected {expect}, got {}",
            match outcome {
                Outcome::Decoded(img) => format!("a {:?} picture", img.dimensions()),
                Outcome::Failed(f) => f.clone(),
                _ => unreachable!("handled above"),
            }
        )),
    }
}

#[test]
fn corpus_expectations_hold() {
    let root = corpus_root();
    if !root.join("EXPECTATIONS.tsv").exists() {
        // Present beside the checkout in CI: a missing corpus there is a broken run.
        assert!(
            std::env::var_os("CI").is_none(),
            "corpus not found at {}: CI must run this test",
            root.display()
        );
        eprintln!("corpus not found at {}: skipped", root.display());
        return;
    }
    let rows: Vec<Row> = rows(&root)
        .into_iter()
        .filter(|r| !matches!(r.expect.as_str(), "doc" | "reference"))
        .collect();
    let failures = on_two_threads(&rows, |row, scratch| {
        check(&root, row, scratch)
            .err()
            .map(|why| format!("{} [{}]: {why}", row.path, row.expect))
            .into_iter()
            .collect()
    });
    let known = known_failures();
    let failed_paths: Vec<&str> = failures
        .iter()
        .filter_map(|f| f.split(" [").next())
        .collect();
    let unexpected: Vec<&String> = failures
        .iter()
        .filter(|f| !known.iter().any(|k| f.starts_with(&format!("{k} ["))))
        .collect();
    let fixed: Vec<&String> = known
        .iter()
        .filter(|k| !failed_paths.contains(&k.as_str()))
        .collect();
    eprintln!(
        "corpus: {} rows checked, {} failed ({} listed as known), {} listed rows now pass",
        rows.len(),
        failures.len(),
        failures.len() - unexpected.len(),
        fixed.len()
    );
    assert!(
        unexpected.is_empty() && fixed.is_empty(),
        "{} corpus rows failed unexpectedly:\n{}\n\n{} rows listed in tests/corpus-known-failures.tsv pass now; remove them:\n{}",
        unexpected.len(),
        unexpected.iter().map(|s| s.as_str()).collect::<Vec<_>>().join("\n"),
        fixed.len(),
        fixed.iter().map(|s| s.as_str()).collect::<Vec<_>>().join("\n"),
    );
}

/// A decoder's panic that imgcas catches is the file's error on stderr, not a panic message
/// and a backtrace from the default hook (the panic itself goes to the log as one line).
#[test]
fn a_caught_decoder_panic_prints_its_error_not_a_backtrace() {
    let scratch = tempfile::tempdir().expect("scratch dir");
    let file = Path::new("testdata/crafted/webp-anmf-smaller-than-vp8.webp");
    match run_spec(file, "w=100&format=webp", &scratch.path().join("out.webp")) {
        Outcome::Failed(stderr) => {
            assert!(stderr.starts_with("undecodable"), "{stderr}");
            assert!(
                !stderr.contains("panicked") && !stderr.contains("backtrace"),
                "{stderr}"
            );
        }
        other => panic!("{other:?}"),
    }
}

/// `work` on every item, two at a time (each worker with a scratch dir of its own): what the
/// calls return, gathered.
fn on_two_threads<T: Sync>(
    items: &[T],
    work: impl Fn(&T, &Path) -> Vec<String> + Sync,
) -> Vec<String> {
    let next = Mutex::new(0usize);
    let found = Mutex::new(Vec::new());
    std::thread::scope(|s| {
        for _ in 0..2 {
            s.spawn(|| {
                let scratch = tempfile::tempdir().expect("scratch dir");
                loop {
                    let i = {
                        let mut n = next.lock().unwrap();
                        *n += 1;
                        *n - 1
                    };
                    let Some(item) = items.get(i) else { break };
                    let more = work(item, scratch.path());
                    found.lock().unwrap().extend(more);
                }
            });
        }
    });
    found.into_inner().unwrap()
}

/// Every file under `dir`, recursively, in name order.
fn files_under(dir: &Path) -> Vec<PathBuf> {
    let mut found = Vec::new();
    let mut dirs = vec![dir.to_path_buf()];
    while let Some(d) = dirs.pop() {
        let Ok(entries) = std::fs::read_dir(&d) else {
            continue;
        };
        for entry in entries.flatten() {
            let path = entry.path();
            if path.is_dir() {
                dirs.push(path);
            } else {
                found.push(path);
            }
        }
    }
    found.sort();
    found
}

/// Issue 35: `imgcas process` answers every file of `testdata/` and of the corpus (images,
/// crafted bounds, licences and notes alike) with an output or an error, never a crash, a
/// hang or a runaway allocation; an animated output walks the frame decoders too.
#[test]
fn no_file_of_testdata_or_the_corpus_crashes_imgcas_process() {
    let mut files = files_under(Path::new("testdata"));
    let root = corpus_root();
    if root.exists() {
        files.extend(files_under(&root));
    } else {
        assert!(
            std::env::var_os("CI").is_none(),
            "corpus not found at {}: CI must run this test",
            root.display()
        );
    }
    let crashes = on_two_threads(&files, |file, scratch| {
        let mut crashes = Vec::new();
        for (spec, name) in [
            ("w=64&format=png", "out.png"),
            ("w=64&format=webp&animated=1", "out.webp"),
        ] {
            match run_spec(file, spec, &scratch.join(name)) {
                Outcome::Decoded(_) | Outcome::Failed(_) => {}
                Outcome::Crashed(why) => {
                    crashes.push(format!("{} ({spec}): {why}", file.display()))
                }
                Outcome::TimedOut => crashes.push(format!(
                    "{} ({spec}): no answer in {DEADLINE:?}",
                    file.display()
                )),
            }
        }
        crashes
    });
    eprintln!("{} files answered, {} crashed", files.len(), crashes.len());
    assert!(
        crashes.is_empty(),
        "crashed:
{}",
        crashes.join(
            "
"
        )
    );
}

/// The expectation that replaces the corpus's for rows written before this build decoded
/// their format: see `tests/corpus-expectation-overrides.tsv`.
fn expectation_override(path: &str) -> Option<String> {
    overriding_column("tests/corpus-expectation-overrides.tsv", path)
}

/// The second column of the row for `path` in one of the override lists.
fn overriding_column(list: &str, path: &str) -> Option<String> {
    let list = Path::new(env!("CARGO_MANIFEST_DIR")).join(list);
    std::fs::read_to_string(list)
        .ok()?
        .lines()
        .filter(|l| !l.starts_with('#'))
        .find_map(|l| {
            let mut cols = l.split('\t');
            (cols.next() == Some(path)).then(|| cols.next().map(str::to_string))?
        })
}

/// A reference of our own (a path in this repository) that replaces the corpus's, for rows
/// whose corpus reference is known to be wrong: see `tests/corpus-reference-overrides.tsv`.
fn reference_override(path: &str) -> Option<String> {
    overriding_column("tests/corpus-reference-overrides.tsv", path)
}

fn known_failures() -> Vec<String> {
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/corpus-known-failures.tsv");
    std::fs::read_to_string(path)
        .expect("tests/corpus-known-failures.tsv")
        .lines()
        .filter(|l| !l.starts_with('#') && !l.trim().is_empty())
        .filter_map(|l| l.split('\t').next().map(str::to_string))
        .collect()
}
