//! `cargo run --release -p imgcas-processors --example breakdown -- photo.jpg [spec]`: where the
//! time of one thumbnail goes (headers, shrink-on-load decode, resize, encode), best of 15 runs
//! each, so the decode can be held against libjpeg-turbo's own (`djpeg -scale 1/4`).

use std::time::Instant;

use imgcas_processors::{decode, encode, geometry, ops, Limits, Spec};

fn main() {
    let mut args = std::env::args().skip(1);
    let path = args.next().expect("usage: breakdown <image> [spec]");
    let query = args.next().unwrap_or_else(|| "w=400&format=jpeg".into());
    let bytes = std::fs::read(&path).expect("readable image");
    let limits = Limits::default();
    let spec = Spec::parse(&query)
        .expect("spec")
        .resolve(None, false, None);
    let mut best = [f64::MAX; 4];
    let mut denominator = 1;
    for _ in 0..15 {
        let start = Instant::now();
        let source = decode::open(&bytes, &limits).expect("headers");
        let size = source.upright_size();
        let plan = geometry::plan(size, &spec);
        let reduction = plan.reduction(size);
        denominator = source.shrink_denominator(reduction, spec.hides_coarse_decode(reduction));
        let opened = start.elapsed().as_secs_f64();
        let image = source.decode(&limits, denominator).expect("decode");
        let decoded = start.elapsed().as_secs_f64();
        let plan = plan.rescaled(size, (image.width(), image.height()));
        let resized = ops::apply_plan(std::sync::Arc::new(image), &plan, spec.shape.background)
            .expect("resize");
        let done_resize = start.elapsed().as_secs_f64();
        encode::encode(resized, &spec).expect("encode");
        let encoded = start.elapsed().as_secs_f64();
        let stages = [
            opened,
            decoded - opened,
            done_resize - decoded,
            encoded - done_resize,
        ];
        for (b, s) in best.iter_mut().zip(stages) {
            *b = b.min(s * 1000.0);
        }
    }
    println!(
        "best of 15: headers {:.2} ms, decode at 1/{denominator} {:.2} ms, resize {:.2} ms, encode {:.2} ms, sum {:.2} ms",
        best[0],
        best[1],
        best[2],
        best[3],
        best.iter().sum::<f64>()
    );
}
