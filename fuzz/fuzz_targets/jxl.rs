//! JPEG XL bytes through the whole processing path with the cost checks on (issue 67): a
//! render that outlives its deadline's stop signal, or that the signal has to stop at all
//! (an under-charge), is a bug; any error is fine.
#![no_main]

#[path = "../checks/image.rs"]
mod checks;

libfuzzer_sys::fuzz_target!(|data: &[u8]| {
    checks::unwind_to_the_guards();
    checks::jxl(data);
});
