//! `cargo run --release -p imgcas-processors --example compare -- A B`: PSNR (dB) and mean
//! absolute error of two pictures of the same size, in any format imgcas reads.
//! Used by `bench/process-vs-vips.sh` to score outputs against a full-decode reference.

use imgcas_processors::compare::{mean_abs_error, psnr};
use imgcas_processors::decode::decode;
use imgcas_processors::Limits;

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let [a, b] = args.as_slice() else {
        eprintln!("usage: compare <a> <b>");
        std::process::exit(2);
    };
    let load = |path: &str| {
        let bytes = std::fs::read(path).unwrap_or_else(|e| panic!("{path}: {e}"));
        decode(&bytes, &Limits::default())
            .unwrap_or_else(|e| panic!("{path}: {e}"))
            .1
    };
    let (a, b) = (load(a), load(b));
    if (a.width(), a.height()) != (b.width(), b.height()) {
        eprintln!(
            "sizes differ: {}x{} vs {}x{}",
            a.width(),
            a.height(),
            b.width(),
            b.height()
        );
        std::process::exit(1);
    }
    println!("psnr={:.2} mae={:.3}", psnr(&a, &b), mean_abs_error(&a, &b));
}
