//! Every input a fuzz run of the service's targets kept (`testdata/fuzz/url/`,
//! `testdata/fuzz/signature/`, see `fuzz/run.sh`) replayed through the target's own check
//! (`fuzz/checks/service.rs`), each giving the answer recorded in `NAME.expect` beside it.

#[path = "../../fuzz/checks/service.rs"]
mod checks;

#[path = "../../fuzz/checks/replay.rs"]
mod replay;

#[test]
fn every_kept_input_gives_its_recorded_answer() {
    let kept = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("testdata/fuzz");
    let total = replay::replay(&kept, "url", checks::url)
        + replay::replay(&kept, "signature", checks::signature);
    assert!(total >= 2, "{total} inputs replayed");
}
