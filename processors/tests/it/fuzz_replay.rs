//! Every input a fuzz run kept (`testdata/fuzz/<target>/`, see `fuzz/run.sh`) replayed through
//! its target's own check (`fuzz/checks/image.rs`, the code the fuzz target runs), each giving
//! the answer recorded beside it in `NAME.expect` (`ok` or an error code). An input without
//! an expectation fails: a find is fixed and its answer written down, never just kept.

#[path = "../../../fuzz/checks/image.rs"]
mod checks;

#[path = "../../../fuzz/checks/replay.rs"]
mod replay;

use replay::replay;

#[test]
fn every_kept_input_gives_its_recorded_answer() {
    let kept = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../testdata/fuzz");
    let mut total = 0;
    for (target, check) in [
        ("probe", checks::probe as fn(&[u8]) -> String),
        ("facts", checks::facts),
        ("fingerprint", checks::fingerprint),
        ("decode", checks::decode),
        ("svg", checks::svg),
        ("jxl", checks::jxl),
    ] {
        total += replay(&kept, target, check);
    }
    // The first finds (issue 35) are kept: the replay is never empty.
    assert!(total >= 2, "{total} inputs replayed");
}
