//! Any text as a source URL: refused or canonical, and canonical URLs are fixed points.
#![no_main]

#[path = "../checks/service.rs"]
mod checks;

libfuzzer_sys::fuzz_target!(|data: &[u8]| {
    checks::url(data);
});
