//! SVG documents through costing and drawing at two sizes (`checks::svg`): an error is fine;
//! a panic, a hang (a drawing that costs more than it was charged) or a runaway allocation is
//! a bug. Seeded with the drawings in testdata/ (the hostile ones among them) and guided by
//! `fuzz/svg.dict`, the format's element and attribute names.
#![no_main]

#[path = "../checks/image.rs"]
mod checks;

libfuzzer_sys::fuzz_target!(|data: &[u8]| {
    checks::unwind_to_the_guards();
    checks::svg(data);
});
