//! Any bytes through the near-duplicate fingerprint of an original.
#![no_main]

#[path = "../checks/image.rs"]
mod checks;

libfuzzer_sys::fuzz_target!(|data: &[u8]| {
    checks::unwind_to_the_guards();
    checks::fingerprint(data);
});
