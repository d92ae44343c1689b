//! Scores pictures as `q=auto` scores them, for `bench/quality.py`: each line of stdin names
//! a reference and a distorted file (tab-separated, any format imgcas reads, one size); each
//! line of stdout is the SSIMULACRA2 score, or `error: …`.

use std::io::BufRead;

use imgcas_processors::{auto_quality, decode, Limits};

fn main() {
    let limits = Limits::default();
    let read = |path: &str| -> Result<imgcas_processors::DynamicImage, String> {
        let bytes = std::fs::read(path).map_err(|e| format!("{path}: {e}"))?;
        decode::decode(&bytes, &limits)
            .map(|(_, image)| image)
            .map_err(|e| format!("{path}: {e}"))
    };
    for line in std::io::stdin().lock().lines() {
        let Ok(line) = line else { break };
        let answer = match line.split_once('\t') {
            Some((reference, distorted)) => read(reference).and_then(|r| {
                let d = read(distorted)?;
                auto_quality::score(&r, &d).map_err(|e| e.to_string())
            }),
            None => Err("expected `reference<TAB>distorted`".into()),
        };
        match answer {
            Ok(score) => println!("{score:.3}"),
            Err(e) => println!("error: {e}"),
        }
    }
}
