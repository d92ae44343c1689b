//! Replays the inputs fuzz runs kept (`testdata/fuzz/<target>/`) through a target's check:
//! shared by the replay tests of the processors and of the service.

use std::path::Path;

/// Replays `<kept>/<target>/` (`kept`: the repository's `testdata/fuzz`); returns how many
/// inputs ran.
pub fn replay(kept: &Path, target: &str, check: fn(&[u8]) -> String) -> usize {
    let dir = kept.join(target);
    let Ok(entries) = std::fs::read_dir(&dir) else {
        return 0;
    };
    let mut inputs: Vec<_> = entries
        .flatten()
        .map(|e| e.path())
        .filter(|p| p.extension().is_none_or(|e| e != "expect"))
        .collect();
    inputs.sort();
    for input in &inputs {
        let expect = input.with_file_name(format!(
            "{}.expect",
            input.file_name().unwrap_or_default().to_string_lossy()
        ));
        let expected = std::fs::read_to_string(&expect).unwrap_or_else(|_| {
            panic!(
                "{}: a fuzz find without its expectation ({} missing)",
                input.display(),
                expect.display()
            )
        });
        let bytes = std::fs::read(input).unwrap();
        assert_eq!(check(&bytes), expected.trim(), "{}", input.display());
    }
    inputs.len()
}
