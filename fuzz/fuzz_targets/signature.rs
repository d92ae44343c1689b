//! Any path and query through signature checking, and sign-then-verify round trips.
#![no_main]

#[path = "../checks/service.rs"]
mod checks;

libfuzzer_sys::fuzz_target!(|data: &[u8]| {
    checks::signature(data);
});
