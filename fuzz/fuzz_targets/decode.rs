//! Any bytes through the whole processing path (sniff, header checks, decode, resize, encode;
//! still and animated) under a small pixel limit: an error is fine, a panic, hang or runaway
//! allocation is a bug.
#![no_main]

#[path = "../checks/image.rs"]
mod checks;

libfuzzer_sys::fuzz_target!(|data: &[u8]| {
    checks::unwind_to_the_guards();
    checks::decode(data);
});
