//! Any bytes through `probe`: every format's header walker, the animation headers and the
//! container checks (counts and sizes against the bytes present).
#![no_main]

#[path = "../checks/image.rs"]
mod checks;

libfuzzer_sys::fuzz_target!(|data: &[u8]| {
    checks::unwind_to_the_guards();
    checks::probe(data);
});
